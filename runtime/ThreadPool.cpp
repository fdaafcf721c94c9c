// The CPU device's thread pool (see ThreadPool.h).
#include "runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <system_error>

#include "base/Limits.h"

namespace dnnc::rt {

ThreadPool::ThreadPool(unsigned threads, const Spawn &spawn) {
  requested_ = std::clamp<unsigned>(threads, 1u, static_cast<unsigned>(limit(Limit::Threads)));
  workers_.reserve(requested_ - 1);
  shares_ = std::make_unique<Share[]>(requested_);
  for (unsigned k = 1; k < requested_; ++k) {
    try {
      if (spawn)
        workers_.push_back(spawn([this, k] { work(k); }));
      else
        workers_.emplace_back([this, k] { work(k); });
    } catch (const std::system_error &) {
      break; // the system has no more threads for us: run on those that started
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread &t : workers_)
    t.join();
}

namespace {
void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until `ready()` or ThreadPool::kSpinNs have passed; returns ready(). It yields
// the core now and then, so that on a machine with more threads than cores the thread
// whose chunk it waits for can run.
template <class Ready> bool spinUntil(Ready ready) {
  auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ThreadPool::kSpinNs);
  for (unsigned k = 1;; ++k) {
    if (ready())
      return true;
    cpuRelax();
    if (k % 64 == 0) {
      if (std::chrono::steady_clock::now() > until)
        return ready();
      std::this_thread::yield();
    }
  }
}
} // namespace

// Claims chunks of the open job until none is left: no lock, one atomic add per chunk.
void ThreadPool::runChunks(unsigned self) {
  const auto *job = job_;
  for (unsigned k = 0; k < shareCount_; ++k) {
    Share &share = shares_[(self + k) % shareCount_];
    for (;;) {
      int64_t c = share.next.fetch_add(1);
      if (c >= share.end)
        break;
      (*job)(c * chunk_, std::min(n_, (c + 1) * chunk_));
    }
  }
}

// A worker joins a job by raising busy_ and then seeing it open; the caller closes it and
// then waits for busy_ to fall to 0, so no worker still holds a job once parallelFor has
// returned, and one that joins late (busy_ raised after the close) sees it closed or sees
// the next job whole: its fields are written before open_ (sequentially consistent
// atomics throughout, so each side sees the other's write in these two Dekker pairs, and
// in the sleepers_/generation_ pair below).
void ThreadPool::work(unsigned self) {
  uint64_t seen = 0;
  for (;;) {
    // Awake for a while after each job: the next kernel usually follows at once.
    if (!spinUntil([&] { return stopping_ || generation_ != seen; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleepers_;
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      --sleepers_;
    }
    if (stopping_)
      return;
    seen = generation_;
    ++busy_;
    if (open_)
      runChunks(self);
    if (--busy_ == 0 && waiting_) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_all();
    }
  }
}

void ThreadPool::parallelFor(int64_t n, const std::function<void(int64_t, int64_t)> &fn, int64_t costNs) {
  if (n <= 0)
    return;
  // A few chunks per thread balance uneven chunks (and threads the system preempts)
  // without much locking; each must be worth a hand-off.
  int64_t chunks = std::min<int64_t>(n, 4 * static_cast<int64_t>(threads()));
  if (costNs >= 0)
    chunks = std::min(chunks, costNs / kMinChunkNs);
  // One job at a time: a second caller (another model's run on another thread, or a chunk
  // function that asks for a pool itself) runs its job alone (two callers overwrote each
  // other's job: wrong results and crashes).
  bool idle = false;
  if (workers_.empty() || chunks <= 1 || !inUse_.compare_exchange_strong(idle, true, std::memory_order_acquire)) {
    fn(0, n);
    return;
  }
  struct Release {
    std::atomic<bool> &inUse;
    ~Release() { inUse.store(false, std::memory_order_release); }
  } release{inUse_};
  job_ = &fn;
  n_ = n;
  chunk_ = (n + chunks - 1) / chunks;
  int64_t claimed = (n + chunk_ - 1) / chunk_; // chunks once rounded up to whole ones
  shareCount_ = static_cast<unsigned>(std::min<int64_t>(threads(), claimed));
  for (unsigned s = 0; s < shareCount_; ++s) {
    shares_[s].next = claimed * s / shareCount_;
    shares_[s].end = claimed * (s + 1) / shareCount_;
  }
  open_ = true;
  ++generation_;
  // Spinning workers see the new generation; sleeping ones are woken, as many as there
  // are chunks for besides the caller's.
  if (sleepers_ > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto helpers = static_cast<unsigned>(chunks - 1);
    if (helpers >= workers_.size())
      wake_.notify_all();
    else
      for (unsigned k = 0; k < helpers; ++k)
        wake_.notify_one();
  }
  runChunks(0);
  open_ = false;
  // Every chunk is taken; the workers still running theirs are about to finish.
  if (!spinUntil([&] { return busy_ == 0; })) {
    std::unique_lock<std::mutex> lock(mutex_);
    waiting_ = true;
    done_.wait(lock, [&] { return busy_ == 0; });
    waiting_ = false;
  }
  job_ = nullptr;
}

namespace {
unsigned globalThreads = 0;
std::unique_ptr<ThreadPool> globalPool;
std::once_flag globalOnce;
} // namespace

void ThreadPool::setGlobalThreads(unsigned threads) { globalThreads = threads; }

std::string ThreadPool::parseThreads(const std::string &text, const std::string &what, unsigned &out) {
  int64_t hi = limit(Limit::Threads);
  std::string err = what + " takes a thread count from 1 to " + std::to_string(hi) + ", not '" + text + "'";
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    return err;
  int64_t n = std::stoll(text);
  if (n < 1 || n > hi)
    return err;
  out = static_cast<unsigned>(n);
  return "";
}

ThreadPool &ThreadPool::global() {
  std::call_once(globalOnce, [] {
    unsigned n = globalThreads;
    // A bad DNNC_NUM_THREADS is rejected by the tools before this runs (cmdRun in tools/dnnc/main.cpp);
    // a library user's is ignored here rather than trusted.
    if (n == 0)
      if (const char *env = std::getenv("DNNC_NUM_THREADS"); env && *env)
        if (!parseThreads(env, "DNNC_NUM_THREADS", n).empty())
          n = 0;
    if (n == 0)
      n = std::max(1u, std::thread::hardware_concurrency());
    globalPool = std::make_unique<ThreadPool>(n);
  });
  return *globalPool;
}

} // namespace dnnc::rt

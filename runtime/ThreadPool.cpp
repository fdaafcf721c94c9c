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
  for (unsigned k = 1; k < requested_; ++k) {
    try {
      if (spawn)
        workers_.push_back(spawn([this] { work(); }));
      else
        workers_.emplace_back([this] { work(); });
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

// Takes chunks until none is left; called with the mutex held, returns with it held.
void ThreadPool::runChunks() {
  while (next_ < n_) {
    int64_t begin = next_, end = std::min(n_, begin + chunk_);
    next_ = end;
    const auto *job = job_;
    mutex_.unlock();
    (*job)(begin, end);
    mutex_.lock();
  }
}

void ThreadPool::work() {
  uint64_t seen = 0;
  for (;;) {
    // Awake for a while after each job: the next kernel usually follows at once.
    spinUntil([&] { return stopping_ || generation_ != seen; });
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_)
      return;
    seen = generation_;
    ++busy_;
    runChunks();
    if (--busy_ == 0 && waiting_)
      done_.notify_all();
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
  if (workers_.empty() || chunks <= 1) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  n_ = n;
  next_ = 0;
  chunk_ = (n + chunks - 1) / chunks;
  ++generation_;
  ++busy_;
  // Spinning workers see the new generation; sleeping ones are woken, as many as there
  // are chunks for besides the caller's.
  auto helpers = static_cast<size_t>(chunks - 1);
  if (helpers >= workers_.size())
    wake_.notify_all();
  else
    for (size_t k = 0; k < helpers; ++k)
      wake_.notify_one();
  runChunks();
  --busy_;
  // Every chunk is taken; the workers still running theirs are about to finish.
  lock.unlock();
  if (!spinUntil([&] { return busy_ == 0; })) {
    lock.lock();
    waiting_ = true;
    done_.wait(lock, [&] { return busy_ == 0; });
    waiting_ = false;
    lock.unlock();
  }
  lock.lock();
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

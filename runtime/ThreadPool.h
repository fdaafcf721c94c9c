// A fixed pool of worker threads for the CPU device: parallelFor splits an index range
// into chunks that the workers and the calling thread take in turn. An idle worker spins
// for kSpinNs before it sleeps, so that back-to-back kernels find it awake (no futex wake
// each) while a pool idle for longer burns no core. Chunks are claimed with an atomic add
// and the mutex serves only sleeping and waking: when workers took a mutex to join each
// job, the caller holding it put them to sleep on a futex, and on a VM a futex wake waits
// for the host to run the halted vCPU again (the MLP at B=256 ran 0.98 or 1.14 ms a call,
// by process, and now 0.98). Kernels do not throw, so a chunk function must not either.
// One job runs at a time; a parallelFor called while one runs (from another thread) runs
// its job on its own thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dnnc::rt {

class ThreadPool {
public:
  // Starts a worker: std::thread by default; tests pass one that fails.
  using Spawn = std::function<std::thread(std::function<void()>)>;
  // `threads` counts the caller: a pool of 1 runs everything on the calling thread.
  // Asks are clamped to the `threads` limit (Limits.def). Workers the system refuses
  // to start (std::system_error) are done without: the pool runs on those that did
  // start, and `requested()` keeps what was asked for.
  explicit ThreadPool(unsigned threads, const Spawn &spawn = nullptr);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }
  unsigned requested() const { return requested_; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n); returns when all are done.
  // `costNs` estimates the whole job's time on one thread: it is cut into chunks worth at
  // least kMinChunkNs each (a few per thread at most, for balance), so a job worth less
  // than two runs on the calling thread alone. Without an estimate (-1) all threads share it.
  void parallelFor(int64_t n, const std::function<void(int64_t, int64_t)> &fn, int64_t costNs = -1);

  // The least a chunk must be worth to be handed to another thread: the caller's side of
  // an empty two-chunk parallelFor measured 0.1-0.4 us with the workers awake and about
  // 1 us with them asleep (bench/pool_bench.cpp; docs/performance.md, "Parallelism"),
  // and 4 us leaves a margin for the woken worker's own latency.
  static constexpr int64_t kMinChunkNs = 4000;
  // How long an idle worker (and a caller waiting on the last chunks) spins before it
  // sleeps: longer than the host's work between two kernels of a model, short enough that
  // an idle pool costs nothing. (2 ms ran the MLP at B=256 12% slower than 50 us on this
  // 2-core VM: spinning cores cost the working ones.)
  static constexpr int64_t kSpinNs = 50000;

  // The process-wide pool: DNNC_NUM_THREADS threads, else one per hardware thread.
  static ThreadPool &global();
  // Resizes the global pool (dnnc run --threads); call before it is first used.
  static void setGlobalThreads(unsigned threads);
  // Reads a thread count (--threads, DNNC_NUM_THREADS): 1..the `threads` limit, or an
  // error text naming `what`.
  static std::string parseThreads(const std::string &text, const std::string &what, unsigned &out);

private:
  // Worker `self` (1 on; the caller is 0).
  void work(unsigned self);
  // Claims chunks of the open job until none is left: thread self's share first, then the
  // others' in turn.
  void runChunks(unsigned self);

  std::vector<std::thread> workers_;
  unsigned requested_ = 1;
  std::mutex mutex_; // only for sleeping and waking
  std::condition_variable wake_, done_;
  std::atomic<bool> inUse_{false}; // a parallelFor is running: another caller runs its job alone
  // The job: written by the caller before open_ is set, read by the workers that join it.
  const std::function<void(int64_t, int64_t)> *job_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  // A job's chunks (chunk c is [c * chunk_, (c + 1) * chunk_) of [0, n_)) in contiguous
  // shares, one per thread: thread t starts on share t, so that kernels one after another
  // over the same layout (a convolution's images, then its pooling's) give each thread
  // the rows it wrote, still in its own L2. A thread done with its share takes chunks
  // from the others' (uneven chunks, a thread the system preempts). With one shared
  // counter, a kernel read about half of its input from the other core's cache: the
  // convnet's pooling took 29 us in the model against 19 us on its own.
  struct alignas(64) Share {
    std::atomic<int64_t> next{0}; // the next chunk to claim
    int64_t end = 0;              // past the share's last chunk
  };
  std::unique_ptr<Share[]> shares_;
  unsigned shareCount_ = 1;
  std::atomic<bool> open_{false}; // chunks may be claimed
  std::atomic<unsigned> busy_{0}; // workers inside a job
  std::atomic<unsigned> sleepers_{0}; // workers asleep on wake_
  std::atomic<bool> waiting_{false}; // the caller sleeps on done_
  std::atomic<uint64_t> generation_{0}; // jobs started
  std::atomic<bool> stopping_{false};
};

} // namespace dnnc::rt

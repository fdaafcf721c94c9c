// A fixed pool of worker threads for the CPU device: parallelFor splits an index range
// into chunks that the workers and the calling thread take in turn. Kernels do not throw,
// so a chunk function must not either.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
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
  void parallelFor(int64_t n, const std::function<void(int64_t, int64_t)> &fn);

  // The process-wide pool: DNNC_NUM_THREADS threads, else one per hardware thread.
  static ThreadPool &global();
  // Resizes the global pool (dnnc run --threads); call before it is first used.
  static void setGlobalThreads(unsigned threads);
  // Reads a thread count (--threads, DNNC_NUM_THREADS): 1..the `threads` limit, or an
  // error text naming `what`.
  static std::string parseThreads(const std::string &text, const std::string &what, unsigned &out);

private:
  void work();
  void runChunks();

  std::vector<std::thread> workers_;
  unsigned requested_ = 1;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)> *job_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, next_ = 0;
  unsigned busy_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

} // namespace dnnc::rt

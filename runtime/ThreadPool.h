// A fixed pool of worker threads for the CPU device: parallelFor splits an index range
// into chunks that the workers and the calling thread take in turn. Kernels do not throw,
// so a chunk function must not either.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dnnc::rt {

class ThreadPool {
public:
  // `threads` counts the caller: a pool of 1 runs everything on the calling thread.
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n); returns when all are done.
  void parallelFor(int64_t n, const std::function<void(int64_t, int64_t)> &fn);

  // The process-wide pool: DNNC_NUM_THREADS threads, else one per hardware thread.
  static ThreadPool &global();
  // Resizes the global pool (dnnc run --threads); call before it is first used.
  static void setGlobalThreads(unsigned threads);

private:
  void work();
  void runChunks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)> *job_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, next_ = 0;
  unsigned busy_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

} // namespace dnnc::rt

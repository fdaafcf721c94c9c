// What handing work to the CPU device's thread pool costs, measured here in one run: the
// round trip of an empty two-chunk parallelFor with the workers awake (spinning after the
// previous job) and asleep (idle past ThreadPool::kSpinNs), and, for jobs of a few
// microseconds of arithmetic, the time split in two chunks against the calling thread
// alone. Where the split starts to pay is what ThreadPool::kMinChunkNs is chosen from.
//   usage: pool_bench [--threads N]   (medians of interleaved rounds)
#include "runtime/ThreadPool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace dnnc;
using Clock = std::chrono::steady_clock;

namespace {

volatile double sink;

// About `iterations` dependent multiply-adds: arithmetic that no memory traffic slows.
__attribute__((noinline)) void busy(int64_t iterations) {
  double x = 1.0;
  for (int64_t i = 0; i < iterations; ++i)
    x = x * 0.999999 + 1e-9;
  sink = x;
}

double nsSince(Clock::time_point t) { return std::chrono::duration<double, std::nano>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  unsigned threads = 2;
  if (argc == 3 && std::strcmp(argv[1], "--threads") == 0)
    threads = static_cast<unsigned>(std::stoul(argv[2]));
  rt::ThreadPool pool(threads);
  auto empty = [](int64_t, int64_t) {};
  std::vector<double> awake, asleep;
  for (int round = 0; round < 2000; ++round) {
    auto t = Clock::now();
    pool.parallelFor(2, empty);
    awake.push_back(nsSince(t));
  }
  for (int round = 0; round < 200; ++round) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(4 * rt::ThreadPool::kSpinNs));
    auto t = Clock::now();
    pool.parallelFor(2, empty);
    asleep.push_back(nsSince(t));
  }
  fmt::print("pool of {} threads: empty 2-chunk parallelFor, median of rounds\n", pool.threads());
  fmt::print("  workers awake (spinning): {:8.0f} ns\n", median(awake));
  fmt::print("  workers asleep:           {:8.0f} ns\n", median(asleep));

  fmt::print("a job of arithmetic on one thread vs split in 2 chunks (workers awake), interleaved:\n");
  fmt::print("  {:>10} {:>10} {:>8}\n", "1 chunk ns", "2 chunks", "speedup");
  for (int64_t n = 256; n <= 65536; n *= 2) {
    auto half = [&](int64_t begin, int64_t end) { busy((end - begin) * n / 2); };
    std::vector<double> one, two;
    for (int round = 0; round < 400; ++round) {
      auto t = Clock::now();
      busy(n);
      one.push_back(nsSince(t));
      t = Clock::now();
      pool.parallelFor(2, half);
      two.push_back(nsSince(t));
    }
    fmt::print("  {:10.0f} {:10.0f} {:7.2f}x\n", median(one), median(two), median(one) / median(two));
  }
  return 0;
}

// The CPU's measured peaks (see Peak.h). Built with -ffp-contract=fast (CMakeLists.txt):
// the chains' multiply-adds must become FMAs.
#include "runtime/Peak.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace dnnc::rt {
namespace {

using Clock = std::chrono::steady_clock;

typedef float V16 __attribute__((vector_size(64)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V4 __attribute__((vector_size(16)));

// FLOP/s of one thread: `Chains` independent accumulators (more than an FMA's latency
// times its throughput, so the units never wait), inlined into a function compiled for
// the ISA whose registers V fits.
template <class V, int Chains> [[gnu::always_inline]] inline double fmaChains(long iterations) {
  constexpr int lanes = sizeof(V) / sizeof(float);
  V acc[Chains], a, b;
  for (int l = 0; l < lanes; ++l)
    a[l] = 0.999f, b[l] = 1e-4f;
  for (int k = 0; k < Chains; ++k)
    for (int l = 0; l < lanes; ++l)
      acc[k][l] = static_cast<float>(k + l) * 1e-3f;
  auto start = Clock::now();
  for (long i = 0; i < iterations; ++i)
#pragma GCC unroll 16 // the accumulators must stay in registers
    for (int k = 0; k < Chains; ++k)
      acc[k] = acc[k] * a + b;
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  V sum = acc[0];
  for (int k = 1; k < Chains; ++k)
    sum += acc[k];
  asm volatile("" : : "r"(static_cast<double>(sum[0]))); // the chains' results are used
  return 2.0 * lanes * Chains * static_cast<double>(iterations) / secs;
}

__attribute__((target("avx512f"), noinline)) double fma512(long iterations) { return fmaChains<V16, 16>(iterations); }
__attribute__((target("avx2,fma"), noinline)) double fma256(long iterations) { return fmaChains<V8, 12>(iterations); }
__attribute__((noinline)) double fma128(long iterations) { return fmaChains<V4, 12>(iterations); }

// The sum over `threads` threads running `f` at once.
double onThreads(unsigned threads, const std::function<double()> &f) {
  std::vector<double> rates(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { rates[t] = f(); });
  for (auto &t : pool)
    t.join();
  double sum = 0;
  for (double r : rates)
    sum += r;
  return sum;
}

} // namespace

double measureFmaPeak(unsigned threads, long iterations) {
  __builtin_cpu_init();
  auto loop = __builtin_cpu_supports("avx512f") ? fma512 : __builtin_cpu_supports("fma") ? fma256 : fma128;
  return onThreads(std::max(1u, threads), [&] { return loop(iterations); });
}

double measureCopyBandwidth(unsigned threads) {
  threads = std::max(1u, threads);
  constexpr size_t kBytes = size_t(256) << 20;
  std::vector<char> from(kBytes, 1), to(kBytes, 0); // touched: no page faults while timed
  size_t slice = kBytes / threads;
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    auto start = Clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { std::memcpy(to.data() + t * slice, from.data() + t * slice, slice); });
    for (auto &t : pool)
      t.join();
    double secs = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(slice * threads) / secs);
  }
  return best;
}

} // namespace dnnc::rt

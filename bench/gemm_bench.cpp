// GEMM throughput of dnnc's CPU back end as a fraction of this CPU's fp32 FMA peak, both
// measured here in one run. The peak comes from a loop of independent vector FMAs
// (compiled for this machine); the GEMM is `a @ b` compiled by dnnc at several sizes,
// matrix-vector products and few-row products included. Each rate is given per second of
// wall time and per second of CPU time (the process's, over its threads): on a machine
// other work shares, the CPU-time fraction still measures the kernel, not the sharing.
//   usage: gemm_bench [--threads N] [--shape MxKxN]... (default: a fixed list of shapes)
#include "backend/llvm/CpuBackend.h"
#include "backend/lower/Lower.h"
#include "runtime/CpuDevice.h"
#include "base/Diagnostics.h"
#include "frontend/Sema.h"
#include "runtime/ThreadPool.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <random>
#include <thread>

using namespace dnnc;
using Clock = std::chrono::steady_clock;

namespace {

double cpuSeconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Flops per second of wall time and of CPU time.
struct Rate {
  double wall = 0, cpu = 0;
};

typedef float Vec __attribute__((vector_size(64)));

// Flops per second of one thread running 16 independent chains of 16-lane FMAs.
__attribute__((noinline)) Rate fmaPeakOneThread() {
  Vec acc[16];
  for (int k = 0; k < 16; ++k)
    for (int l = 0; l < 16; ++l)
      acc[k][l] = static_cast<float>(k + l) * 1e-3f;
  Vec a, b;
  for (int l = 0; l < 16; ++l)
    a[l] = 0.999f, b[l] = 1e-4f;
  const long iters = 20'000'000;
  auto start = Clock::now();
  double cpuStart = cpuSeconds(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < iters; ++i)
    for (int k = 0; k < 16; ++k)
      acc[k] = acc[k] * a + b;
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  double cpuSecs = cpuSeconds(CLOCK_THREAD_CPUTIME_ID) - cpuStart;
  float sink = 0;
  for (int k = 0; k < 16; ++k)
    sink += acc[k][0];
  if (sink == 12345.f)
    std::cout << "";
  double flops = 2.0 * 16 * 16 * static_cast<double>(iters);
  return {flops / secs, flops / cpuSecs};
}

// Wall: the threads' rates added up; CPU: one thread's rate per CPU second (the mean).
Rate fmaPeak(unsigned threads) {
  std::vector<Rate> rates(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { rates[t] = fmaPeakOneThread(); });
  for (auto &t : pool)
    t.join();
  Rate sum;
  for (Rate r : rates)
    sum.wall += r.wall, sum.cpu += r.cpu / threads;
  return sum;
}

} // namespace

int main(int argc, char **argv) {
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes;
  for (int i = 1; i + 1 < argc; ++i) {
    long long m = 0, k = 0, n = 0;
    if (!std::strcmp(argv[i], "--threads"))
      threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--shape") && std::sscanf(argv[i + 1], "%lldx%lldx%lld", &m, &k, &n) == 3 && m > 0 && k > 0 && n > 0)
      shapes.emplace_back(m, k, n);
    else if (!std::strcmp(argv[i], "--shape")) {
      std::cerr << fmt::format("gemm_bench: --shape '{}' is not MxKxN with positive sizes\n", argv[i + 1]);
      return 1;
    }
  }
  if (shapes.empty())
    shapes = {{128, 512, 512}, {256, 1024, 1024}, {512, 512, 2048}, {1024, 1024, 1024}, {127, 511, 1001},
              {1, 768, 3072},  {4, 768, 3072},    {16, 768, 3072}};
  rt::ThreadPool::setGlobalThreads(threads);
  Program program;
  DiagnosticEngine diags(program.sources());
  if (!program.loadText("gemm.dnn", "dim M; dim K; dim N;\nmodel main(a: f32[M, K], b: f32[K, N]) -> f32[M, N] {\n  return a @ b;\n}\n", diags)) {
    diags.render(std::cerr);
    return 1;
  }
  // The kernel alone, launched as the runtime launches it (threads included), on buffers
  // made once: what is timed is the GEMM, not allocation or the interpreter.
  lower::LoweredGraph lowered = lower::lowerGraph(*program.models().at(0).graph);
  const kir::Kernel &kernel = lowered.kernels.at(0);
  auto module = backend::CpuModule::compile({&kernel});
  rt::KernelInfo info = lower::kernelInfo(kernel);
  rt::CpuDevice device({module->lookup(kernel.name)}, nullptr);
  Rate peak = fmaPeak(threads);
  std::cout << fmt::format("cpu: {}; threads: {}\nfp32 FMA peak (measured): {:.1f} GFLOP/s, {:.1f} per CPU second of one thread\n",
                           backend::hostDescription(), threads, peak.wall / 1e9, peak.cpu / 1e9);
  std::cout << fmt::format("{:>6} {:>6} {:>6} {:>10} {:>8} {:>14}\n", "M", "K", "N", "GFLOP/s", "of peak", "of peak (CPU)");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto [m, k, n] : shapes) {
    rt::Tensor a = rt::Tensor::zeros(DType::F32, {m, k}), b = rt::Tensor::zeros(DType::F32, {k, n});
    for (size_t i = 0; i < a.numel(); ++i)
      a.set(i, normal(rng));
    for (size_t i = 0; i < b.numel(); ++i)
      b.set(i, normal(rng));
    std::vector<rt::Tensor> out{rt::Tensor::zeros(DType::F32, {m, n})};
    rt::Launch shape = rt::launchFor(info, {{"M", m}, {"K", k}, {"N", n}});
    auto launch = [&] { device.launch(0, info, {&a, &b}, out, shape); };
    launch(); // warm up
    int reps = 0;
    auto start = Clock::now();
    double cpuStart = cpuSeconds(CLOCK_PROCESS_CPUTIME_ID), secs = 0;
    while (secs < 0.5) {
      launch();
      ++reps;
      secs = std::chrono::duration<double>(Clock::now() - start).count();
    }
    double flops = 2.0 * static_cast<double>(m * k * n) * reps, rate = flops / secs;
    double cpuRate = flops / (cpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - cpuStart);
    std::cout << fmt::format("{:>6} {:>6} {:>6} {:>10.1f} {:>7.0f}% {:>13.0f}%\n", m, k, n, rate / 1e9, 100 * rate / peak.wall,
                             100 * cpuRate / peak.cpu);
  }
  return 0;
}

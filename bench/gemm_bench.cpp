// GEMM throughput of dnnc's CPU back end as a fraction of this CPU's fp32 FMA peak, both
// measured here in one run. The peak comes from a loop of independent vector FMAs
// (rt::measureFmaPeak, on the widest vectors this CPU has); the GEMM is `a @ b` compiled
// by dnnc at several sizes.
//   usage: gemm_bench [--threads N]
#include "backend/llvm/CpuBackend.h"
#include "backend/lower/Lower.h"
#include "runtime/CpuDevice.h"
#include "base/Diagnostics.h"
#include "frontend/Sema.h"
#include "runtime/Peak.h"
#include "runtime/ThreadPool.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <random>
#include <thread>

using namespace dnnc;
using Clock = std::chrono::steady_clock;

int main(int argc, char **argv) {
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--threads"))
      threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
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
  double peak = rt::measureFmaPeak(threads);
  std::cout << fmt::format("cpu: {}; threads: {}\nfp32 FMA peak (measured): {:.1f} GFLOP/s\n", backend::hostDescription(),
                           threads, peak / 1e9);
  std::cout << fmt::format("{:>6} {:>6} {:>6} {:>10} {:>8}\n", "M", "K", "N", "GFLOP/s", "of peak");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {128, 512, 512}, {256, 1024, 1024}, {512, 512, 2048}, {1024, 1024, 1024}, {127, 511, 1001}}) {
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
    double secs = 0;
    while (secs < 0.5) {
      launch();
      ++reps;
      secs = std::chrono::duration<double>(Clock::now() - start).count();
    }
    double rate = 2.0 * static_cast<double>(m * k * n) * reps / secs;
    std::cout << fmt::format("{:>6} {:>6} {:>6} {:>10.1f} {:>7.0f}%\n", m, k, n, rate / 1e9, 100 * rate / peak);
  }
  return 0;
}

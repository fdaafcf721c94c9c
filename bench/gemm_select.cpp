// Shape-generic GEMM selection (runtime/GemmSelect.h) against its alternatives, in one run:
//  1. tuning time, compiles included: `dnnc tune`'s fit (one task of each variant at a few
//     depths and fills, B in rows and prepacked)
//     against an exhaustive per-shape search (every variant timed on every shape of a
//     tuning set: the transformer's, MLP's and LSTM's matmuls at several batch sizes);
//  2. at shapes neither tuned for (odd M: 1, 7, 33, 100, 1000; the models' K x N), the
//     variant the fitted model dispatches against the one fixed schedule (variant 0) and
//     against the best variant found by timing them all there, interleaved over rounds.
//   usage: gemm_select [--threads N] [--rounds R]
#include "api/GemmTune.h"
#include "ir/graph/Graph.h"
#include "runtime/ThreadPool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <tuple>
#include <vector>

using namespace dnnc;
using Clock = std::chrono::steady_clock;

int main(int argc, char **argv) {
  unsigned threads = 2;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads"))
      threads = static_cast<unsigned>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--rounds"))
      rounds = std::atoi(argv[i + 1]);
  }
  rt::ThreadPool::setGlobalThreads(threads);
  rt::ThreadPool &pool = rt::ThreadPool::global();
  const size_t variants = rt::gemmVariants().size();
  // (K, N) of the examples' matmuls: transformer (D = 256: qkv, wo, mlp up and down,
  // logits), MLP (784 -> 512), LSTM (I = 64, H = 128: 4H gates). Their classifiers' weights
  // (10 columns) run as dot products, whatever the variant (kir::Gemm::dotProducts).
  std::vector<std::pair<int64_t, int64_t>> kn{{256, 768}, {256, 256}, {256, 1024}, {1024, 256},
                                              {256, 1000}, {784, 512}, {64, 512},  {128, 512}};
  const double minSeconds = 0.02;

  // 1. Tuning time, each with its compiles (the timer's, and one per K and N it times with
  // B prepacked).
  auto tuneStart = Clock::now();
  api::GemmTimer timer;
  api::TuneReport tuned = api::tuneGemm(timer, minSeconds, nullptr);
  double tuneSeconds = std::chrono::duration<double>(Clock::now() - tuneStart).count();
  std::vector<std::tuple<int64_t, int64_t, int64_t>> tuneShapes; // M = B*T or B: 16, 64, 512
  for (auto [k, n] : kn)
    for (int64_t m : {16, 64, 512})
      tuneShapes.emplace_back(m, k, n);
  auto start = Clock::now();
  size_t exhaustiveRuns = 0;
  {
    api::GemmTimer fresh; // compiles of its own, as a search per shape would
    for (auto [m, k, n] : tuneShapes)
      for (size_t v = 0; v < variants; ++v, ++exhaustiveRuns)
        fresh.seconds(v, m, n, k, pool, minSeconds, n >= ir::kPrepackPanel ? rt::GemmB::Panels : rt::GemmB::Rows);
  }
  double exhaustive = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << fmt::format("threads: {}; cpu: {}\n", threads, tuned.table.cpu);
  std::cout << fmt::format("tuning: dnnc tune {:.2f} s ({} micro-kernel measurements, once per machine); exhaustive per-shape "
                           "search {:.2f} s ({} shapes x {} variants) = {:.1f}x the time\n",
                           tuneSeconds, tuned.measurements, exhaustive, tuneShapes.size(), variants, exhaustive / tuneSeconds);
  std::cout << "fitted model (ns per task = per_task + K * (per_k + per_k_cols * column fill + per_k_fill * fill); a "
               "prepacked B: its own per_task, per_k, per_k_fill):\n";
  for (size_t v = 0; v < variants; ++v) {
    const rt::GemmCost &c = tuned.table.costs[v];
    std::cout << fmt::format("  {:<10} per_task {:>6.0f}  per_k {:>6.2f}  per_k_cols {:>6.2f}  per_k_fill {:>7.2f};  prepacked B: "
                             "{:>6.0f} {:>6.2f} {:>7.2f}\n",
                             rt::gemmVariants()[v].name, c.perTask, c.perK, c.perKCols, c.perKFill, c.panelPerTask, c.panelPerK,
                             c.panelPerKFill);
  }

  // 2. Untuned shapes: fixed (variant 0), dispatched, and the best by timing each variant.
  std::cout << fmt::format("\n{:>5} {:>5} {:>5} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>10}\n", "M", "K", "N", "picked",
                           "fixed ms", "picked ms", "best", "best ms", "gain", "predicted");
  double logGain = 0, logToBest = 0;
  int count = 0, better = 0, worse = 0;
  for (int64_t m : {1, 7, 33, 100, 1000})
    for (auto [k, n] : kn) {
      // B as the models read it: a weight, prepacked when it has a panel's columns.
      rt::GemmB b = n >= ir::kPrepackPanel ? rt::GemmB::Panels : rt::GemmB::Rows;
      size_t picked = rt::selectGemmVariant(tuned.table, b, 1, m, n, k, threads);
      // Interleaved: each round times every variant once; the median over rounds.
      std::vector<std::vector<double>> times(variants);
      for (int r = 0; r < rounds; ++r)
        for (size_t v = 0; v < variants; ++v)
          times[v].push_back(timer.seconds(v, m, n, k, pool, minSeconds / 2, b));
      std::vector<double> med(variants);
      for (size_t v = 0; v < variants; ++v) {
        std::sort(times[v].begin(), times[v].end());
        med[v] = times[v][times[v].size() / 2];
      }
      size_t best = static_cast<size_t>(std::min_element(med.begin(), med.end()) - med.begin());
      double gain = med[0] / med[picked];
      logGain += std::log(gain), logToBest += std::log(med[picked] / med[best]), ++count;
      better += gain > 1.05, worse += gain < 0.95;
      double predicted =
          rt::gemmEstimate(tuned.table, 0, b, 1, m, n, k, threads) / rt::gemmEstimate(tuned.table, picked, b, 1, m, n, k, threads);
      std::cout << fmt::format("{:>5} {:>5} {:>5} {:>10} {:>10.4f} {:>10.4f} {:>10} {:>8.4f} {:>7.2f}x {:>9.2f}x\n", m, k, n,
                               rt::gemmVariants()[picked].name, 1e3 * med[0], 1e3 * med[picked], rt::gemmVariants()[best].name,
                               1e3 * med[best], gain, predicted);
    }
  std::cout << fmt::format("\ngeometric mean over {} untuned shapes: dispatched {:.2f}x the fixed schedule's speed ({} shapes "
                           "> 1.05x, {} < 0.95x); {:.2f}x the time of the best variant per shape\n",
                           count, std::exp(logGain / count), better, worse, std::exp(logToBest / count));
  return 0;
}

// `dnnc tune`'s work, as a library (the driver and bench/gemm_select.cpp share it): one CPU
// f32 matmul kernel compiled once (and once per K and N with B prepacked), launched with a
// chosen GEMM variant (runtime/GemmSelect.h) and timed; the micro-kernel cost model fitted
// from one task of each variant at a few depths and fills, on one thread.
#pragma once

#include "runtime/GemmSelect.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace dnnc::rt {
class ThreadPool;
}

namespace dnnc::api {

// `a @ b` over f32[M, K] x f32[K, N], compiled for this CPU: b an input in rows, or a
// param prepacked as the models' weights are (compiled once per K and N, which its panels
// need; ir/transforms/Prepack.h).
class GemmTimer {
public:
  GemmTimer();
  ~GemmTimer();
  // Seconds per launch of variant v on an M x K by K x N product, B read as `b` (Rows, or
  // Panels with N >= ir::kPrepackPanel, packed once before), on `pool`: the fastest of
  // launches repeated for at least `minSeconds` (after one untimed launch).
  double seconds(size_t v, int64_t m, int64_t n, int64_t k, rt::ThreadPool &pool, double minSeconds,
                 rt::GemmB b = rt::GemmB::Rows);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One measured task: its depth, fill (the fraction of rows x cols inside C), ns, and the
// fraction of its columns inside C.
struct GemmSample {
  double k, fill, ns, cols = 1;
};
// The least-squares fit of ns = perTask + k * (perK + perKCols * cols + perKFill * fill),
// with no negative coefficient (one that would be is dropped and the rest refitted; one
// the samples cannot tell apart from another, as perKCols when every task is of full
// width, is 0).
rt::GemmCost fitGemmCost(const std::vector<GemmSample> &samples);

struct TuneReport {
  rt::GemmTable table;
  size_t measurements = 0;
  double seconds = 0; // wall time of the whole tuning
};
// Times one task of every variant on one thread at depths {64, 256, 1024} and fills
// {1, 1/2, 8 rows}, all rows and 8 with one vector's columns, 1 and 3 rows (which read B
// in place), the same with a
// prepacked B at fills {1, 1/2, 8 rows, 1 row} (its tasks side by side over the widest
// variant's columns), and fits each variant's costs. `progress`
// (may be empty) hears each variant's name as it starts.
TuneReport tuneGemm(GemmTimer &timer, double minSeconds, const std::function<void(const rt::GemmVariant &)> &progress);

} // namespace dnnc::api

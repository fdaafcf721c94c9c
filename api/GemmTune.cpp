// The GEMM variants' timer and the cost model's fit (see GemmTune.h).
#include "api/GemmTune.h"

#include "backend/llvm/CpuBackend.h"
#include "backend/lower/Lower.h"
#include "base/Diagnostics.h"
#include "base/Error.h"
#include "frontend/Sema.h"
#include "ir/transforms/Prepack.h"
#include "runtime/CpuDevice.h"
#include "runtime/ThreadPool.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <cmath>
#include <random>
#include <sstream>

namespace dnnc::api {

using Clock = std::chrono::steady_clock;

namespace {
// One compiled `a @ b`: the GEMM kernel, and for a prepacked B the kernel that packs it.
struct CompiledMatmul {
  Program program;
  lower::LoweredGraph lowered;
  std::unique_ptr<backend::CpuModule> module;
  rt::KernelInfo gemm, prepack;
  std::vector<rt::KernelFn> fns; // the GEMM's, then the prepack's
};

std::unique_ptr<CompiledMatmul> compileMatmul(const std::string &text, bool prepacked) {
  auto c = std::make_unique<CompiledMatmul>();
  DiagnosticEngine diags(c->program.sources());
  if (!c->program.loadText("gemm.dnn", text, diags)) {
    std::ostringstream os;
    diags.render(os);
    throw InternalError("the tuner's matmul does not compile: " + os.str());
  }
  ir::Graph &graph = *c->program.models().at(0).graph;
  if (prepacked && ir::prepackWeights(graph) != 1)
    throw InternalError("the tuner's matmul reads no prepacked B");
  c->lowered = lower::lowerGraph(graph);
  const kir::Kernel *gemm = nullptr, *prepack = nullptr;
  for (const kir::Kernel &k : c->lowered.kernels)
    (lower::kernelInfo(k).gemmM ? gemm : prepack) = &k;
  if (!gemm || (prepacked != (prepack != nullptr)) || c->lowered.kernels.size() != (prepacked ? 2u : 1u))
    throw InternalError("the tuner's matmul does not lower to one CPU GEMM kernel with variants");
  c->module = backend::CpuModule::compile(prepacked ? std::vector<const kir::Kernel *>{gemm, prepack}
                                                    : std::vector<const kir::Kernel *>{gemm});
  c->gemm = lower::kernelInfo(*gemm);
  c->gemm.gemmM = nullptr; // the launch binds the variant asked for, not the model's pick
  c->fns.push_back(c->module->lookup(gemm->name));
  if (prepacked) {
    c->prepack = lower::kernelInfo(*prepack);
    c->fns.push_back(c->module->lookup(prepack->name));
  }
  return c;
}

rt::Tensor randomMatrix(int64_t rows, int64_t cols, unsigned seed) {
  rt::Tensor t = rt::Tensor::zeros(DType::F32, {rows, cols});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (size_t i = 0; i < t.numel(); ++i)
    t.set(i, uniform(rng));
  return t;
}
} // namespace

struct GemmTimer::Impl {
  std::unique_ptr<CompiledMatmul> rows; // M, K and N dims: one compile for every shape
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<CompiledMatmul>> panels; // by (K, N): prepacking needs both
};

GemmTimer::GemmTimer() : impl_(std::make_unique<Impl>()) {
  impl_->rows = compileMatmul("dim M; dim K; dim N;\nmodel main(a: f32[M, K], b: f32[K, N]) -> f32[M, N] {\n  return a @ b;\n}\n", false);
}

GemmTimer::~GemmTimer() = default;

double GemmTimer::seconds(size_t v, int64_t m, int64_t n, int64_t k, rt::ThreadPool &pool, double minSeconds, rt::GemmB b) {
  if (b == rt::GemmB::Gathered || (b == rt::GemmB::Panels && n < ir::kPrepackPanel))
    throw InternalError("the tuner times a B in rows, or prepacked with at least " + std::to_string(ir::kPrepackPanel) + " columns");
  const bool prepacked = b == rt::GemmB::Panels;
  std::unique_ptr<CompiledMatmul> &made = prepacked ? impl_->panels[{k, n}] : impl_->rows;
  if (!made)
    made = compileMatmul(fmt::format("dim M;\nparam w: f32[{0}, {1}];\nmodel main(a: f32[M, {0}]) -> f32[M, {1}] {{\n  return a @ w;\n}}\n", k, n),
                         true);
  const CompiledMatmul &c = *made;
  rt::Tensor a = randomMatrix(m, k, 1), bIn = randomMatrix(k, n, 2);
  rt::CpuDevice device(c.fns, nullptr, pool);
  ir::Binding binding{{"M", m}, {"K", k}, {"N", n}};
  std::vector<rt::Tensor> packed;
  if (prepacked) { // once, as when a model loads
    packed.push_back(rt::Tensor::zeros(DType::F32, {k, n}));
    device.launch(1, c.prepack, {&bIn}, packed, rt::launchFor(c.prepack, binding));
  }
  const rt::Tensor &bRead = prepacked ? packed[0] : bIn;
  std::vector<rt::Tensor> out{rt::Tensor::zeros(DType::F32, {m, n})};
  rt::bindGemmVariant(v, binding);
  rt::Launch launch = rt::launchFor(c.gemm, binding);
  auto once = [&] { device.launch(0, c.gemm, {&a, &bRead}, out, launch); };
  once();
  std::vector<double> times;
  auto start = Clock::now();
  while (times.size() < 3 || std::chrono::duration<double>(Clock::now() - start).count() < minSeconds) {
    auto t0 = Clock::now();
    once();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  // The fastest: on a shared machine a slower launch is one other work interrupted.
  return *std::min_element(times.begin(), times.end());
}

rt::GemmCost fitGemmCost(const std::vector<GemmSample> &samples) {
  // Normal equations over the columns still in use (1, k, k * cols, k * fill); k * cols
  // only where some task is narrower than its variant (else it is k again).
  constexpr int n = 4;
  std::array<bool, n> used{true, true, false, true};
  for (const GemmSample &s : samples)
    used[2] = used[2] || s.cols != 1;
  std::array<double, n> coef{};
  for (int pass = 0; pass < n; ++pass) {
    std::array<std::array<double, n + 1>, n> m{};
    for (const GemmSample &s : samples) {
      std::array<double, n> x{1, s.k, s.k * s.cols, s.k * s.fill};
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j)
          m[i][j] += used[i] && used[j] ? x[i] * x[j] : 0;
        m[i][n] += used[i] ? x[i] * s.ns : 0;
      }
    }
    for (int i = 0; i < n; ++i)
      if (!used[i])
        m[i][i] = 1; // the dropped coefficient solves to 0
    // Gaussian elimination with partial pivoting.
    for (int c = 0; c < n; ++c) {
      int p = c;
      for (int r = c + 1; r < n; ++r)
        if (std::abs(m[r][c]) > std::abs(m[p][c]))
          p = r;
      std::swap(m[c], m[p]);
      if (m[c][c] == 0)
        continue;
      for (int r = 0; r < n; ++r)
        if (r != c) {
          double f = m[r][c] / m[c][c];
          for (int j = c; j <= n; ++j)
            m[r][j] -= f * m[c][j];
        }
    }
    for (int i = 0; i < n; ++i)
      coef[i] = m[i][i] == 0 ? 0 : m[i][n] / m[i][i];
    bool negative = false;
    for (int i = 0; i < n; ++i)
      if (used[i] && coef[i] < 0)
        used[i] = false, negative = true;
    if (!negative)
      break;
  }
  for (double &c : coef)
    c = std::max(0.0, c);
  rt::GemmCost cost;
  cost.perTask = coef[0], cost.perK = coef[1], cost.perKCols = coef[2], cost.perKFill = coef[3];
  return cost;
}

TuneReport tuneGemm(GemmTimer &timer, double minSeconds, const std::function<void(const rt::GemmVariant &)> &progress) {
  auto start = Clock::now();
  TuneReport r;
  r.table.cpu = rt::hostCpuSlug();
  r.table.lanes = backend::hostVectorWidth();
  if (r.table.lanes != backend::widestHostVectorWidth()) // a table for this CPU's own kernels only
    throw DataError(fmt::format("dnnc tune times the kernels this CPU runs; DNNC_VECTOR_WIDTH={} (for tests) would fit others",
                                r.table.lanes));
  rt::ThreadPool one(1);
  int64_t panelColumns = 0;
  for (const rt::GemmVariant &var : rt::gemmVariants())
    panelColumns = std::max(panelColumns, var.cols);
  for (size_t v = 0; v < rt::gemmVariants().size(); ++v) {
    if (panelColumns % rt::gemmVariants()[v].cols != 0)
      throw InternalError("a GEMM variant's columns do not divide the widest variant's");
    const rt::GemmVariant &var = rt::gemmVariants()[v];
    if (progress)
      progress(var);
    std::vector<GemmSample> samples;
    for (int64_t k : {64, 256, 1024}) {
      for (int64_t rows : {var.rows, var.rows / 2, int64_t(8)}) {
        double ns = 1e9 * timer.seconds(v, rows, var.cols, k, one, minSeconds);
        samples.push_back({static_cast<double>(k), static_cast<double>(rows) / static_cast<double>(var.rows), ns});
        ++r.measurements;
      }
      // One vector's columns (a classifier's few): packing B shrinks with them.
      double cols = static_cast<double>(r.table.lanes) / static_cast<double>(var.cols);
      for (int64_t rows : {var.rows, int64_t(8)}) {
        double ns = 1e9 * timer.seconds(v, rows, r.table.lanes, k, one, minSeconds);
        samples.push_back({static_cast<double>(k), static_cast<double>(rows) / static_cast<double>(var.rows) * cols, ns, cols});
        ++r.measurements;
      }
    }
    rt::GemmCost cost = fitGemmCost(samples);
    // Few rows read B in place: a task of 1 and of kGemmStreamRows - 1 rows, its whole
    // width, fitted as ns = streamPerTask + (K * rows) * streamPerK.
    std::vector<GemmSample> stream;
    for (int64_t k : {64, 256, 1024})
      for (int64_t rows : {int64_t(1), rt::kGemmStreamRows - 1}) {
        double ns = 1e9 * timer.seconds(v, rows, var.cols, k, one, minSeconds);
        stream.push_back({static_cast<double>(k * rows), 0, ns});
        ++r.measurements;
      }
    rt::GemmCost s = fitGemmCost(stream); // (fill 0: ns = perTask + k * perK)
    cost.streamPerTask = s.perTask, cost.streamPerK = s.perK;
    // A prepacked B (the models' weights): the same tasks at every depth and fill, and of
    // one row (a prepacked B is never read in place). Its panels need K and N fixed when
    // compiled: every variant's tasks side by side over the widest variant's columns keep
    // that to one compile per depth (the average task is the sample).
    std::vector<GemmSample> panel;
    for (int64_t k : {64, 256, 1024})
      for (int64_t rows : {var.rows, var.rows / 2, int64_t(8), int64_t(1)}) {
        double tasks = static_cast<double>(panelColumns / var.cols);
        double ns = 1e9 * timer.seconds(v, rows, panelColumns, k, one, minSeconds, rt::GemmB::Panels) / tasks;
        panel.push_back({static_cast<double>(k), static_cast<double>(rows) / static_cast<double>(var.rows), ns});
        ++r.measurements;
      }
    rt::GemmCost p = fitGemmCost(panel);
    cost.panelPerTask = p.perTask, cost.panelPerK = p.perK, cost.panelPerKFill = p.perKFill;
    r.table.costs.push_back(cost);
  }
  // The parallel efficiency: two tasks per thread of the fixed schedule on every thread
  // of the global pool against the same on one thread.
  rt::ThreadPool &all = rt::ThreadPool::global();
  if (all.threads() > 1) {
    const rt::GemmVariant &v0 = rt::gemmVariants()[0];
    int64_t m = v0.rows * 2 * static_cast<int64_t>(all.threads()), k = 256;
    // The best of three pairs: other work on the machine slows the threads' share more
    // than one thread (a fit under load read 0.57 where quiet ones read 0.97).
    double speedup = 0, threads = static_cast<double>(all.threads());
    for (int pair = 0; pair < 3; ++pair, r.measurements += 2)
      speedup = std::max(speedup, timer.seconds(0, m, v0.cols, k, one, minSeconds) / timer.seconds(0, m, v0.cols, k, all, minSeconds));
    r.table.parallelEfficiency = std::clamp((speedup - 1) / (threads - 1), 0.0, 1.0);
  }
  r.table.source = "dnnc tune";
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

} // namespace dnnc::api

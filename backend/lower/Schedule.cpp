// Lowering's schedule choices (see Schedule.h): loop nests' parallel and vector loops,
// and the CPU's convolutions.
#include "backend/lower/Schedule.h"

#include "base/Error.h"

#include <fmt/format.h>

#include <algorithm>

namespace dnnc::lower {

using ir::OpKind;
using kir::Stmt;
using kir::StmtPtr;
using sym::ExprRef;
using Dims = std::vector<ExprRef>;

namespace {
ExprRef c(int64_t v) { return sym::constant(v); }
} // namespace

std::vector<StmtPtr> one(StmtPtr s) {
  std::vector<StmtPtr> v;
  v.push_back(std::move(s));
  return v;
}

StmtPtr loopNest(const Dims &shape, const Dims &idx, std::vector<StmtPtr> inner) {
  if (shape.empty())
    return kir::block(std::move(inner));
  // Only a loop over straight-line code is worth forcing the vectorizer on.
  bool straight = std::none_of(inner.begin(), inner.end(), [](const StmtPtr &s) { return s->kind == Stmt::Kind::For; });
  StmtPtr s;
  for (size_t k = shape.size(); k-- > 0;) {
    // Every loop is parallel (one collapsed range, Kernel::parallelNest) but the innermost
    // over straight-line code, which is vectorized; a single loop stays parallel (the CPU
    // back end still vectorizes its straight body).
    Stmt::Schedule sched = k > 0 && k == shape.size() - 1 && straight ? Stmt::Schedule::Vectorize : Stmt::Schedule::Parallel;
    std::vector<StmtPtr> body;
    if (s)
      body.push_back(std::move(s));
    else
      body = std::move(inner);
    s = kir::loop(idx[k]->asVar()->name, shape[k], std::move(body), sched);
  }
  return s;
}

// conv2d in f32, scheduled for vectors: one parallel task per (image, output channel)
// accumulates into its output plane; for each input channel and kernel tap the weight is a
// scalar, and the loop along the output row runs only over the columns whose input column
// lies inside the image (computed from the padding), so it is affine and has no branch:
// it vectorizes. Rows outside the image are skipped.
StmtPtr vectorizedConv2d(const Conv2d &conv, const std::function<ExprRef()> &freshVar) {
  const Dims &x = conv.x, &w = conv.w, &o = conv.o;
  int64_t stride = conv.stride, pad = conv.padding, dil = conv.dilation, groups = conv.groups;
  if (!w[2]->isConst() || !w[3]->isConst())
    throw InternalError("the vectorized conv2d unrolls its kernel's taps: their count must be known");
  int64_t kh = *w[2]->asConst(), kw = *w[3]->asConst();
  ExprRef cg = w[1], outPerGroup = sym::floorDiv(o[1], c(groups));
  // A task computes `block` output channels of one image, so that each input vector
  // loaded feeds `block` FMAs: 4 where the channels of a group come in fours.
  auto perGroup = outPerGroup->asConst();
  int64_t block = perGroup && *perGroup % 4 == 0 ? 4 : 1;
  ExprRef blocks = sym::floorDiv(o[1], c(block));
  ExprRef task = freshVar();
  ExprRef n = sym::floorDiv(task, blocks), oc0 = sym::mul(sym::mod(task, blocks), c(block));
  ExprRef oh = freshVar(), ow = freshVar();
  ExprRef ci = freshVar();
  auto name = [](ExprRef v) { return v->asVar()->name; };
  auto ocOf = [&](int64_t r) { return sym::add(oc0, c(r)); };
  std::vector<StmtPtr> body;
  // Zero the planes.
  std::vector<StmtPtr> zero;
  for (int64_t r = 0; r < block; ++r)
    zero.push_back(kir::store(conv.out, kir::flatIndex(o, {n, ocOf(r), oh, ow}), kir::constant(0, DType::F32)));
  body.push_back(kir::loop(name(oh), o[2], one(kir::loop(name(ow), o[3], std::move(zero), Stmt::Schedule::Vectorize))));
  // Tap (ki, kj) reads input row ih = oh*s + shift(ki) and column iw = ow*s + shift(kj),
  // inside the image for output rows [lo(ki), hi(ki)) and columns [lo(kj), hi(kj)). Rows
  // and columns every tap reads inside make the interior, where one pass adds all kh*kw
  // taps (one load and store of the output per kh*kw FMAs); elsewhere taps are added
  // where they are inside: per row of taps, then tap by tap at the column borders.
  auto shift = [&](int64_t k) { return c(k * dil - pad); };
  auto lo = [&](int64_t k, ExprRef extent) {
    return sym::min(extent, sym::max(c(0), sym::floorDiv(sym::add(sym::neg(shift(k)), c(stride - 1)), c(stride))));
  };
  auto hi = [&](int64_t k, ExprRef extent, ExprRef inputExtent) {
    return sym::max(lo(k, extent), sym::min(extent, sym::add(sym::floorDiv(sym::sub(sym::sub(inputExtent, c(1)), shift(k)), c(stride)), c(1))));
  };
  auto colLo = [&](int64_t kj) { return lo(kj, o[3]); };
  auto colHi = [&](int64_t kj) { return hi(kj, o[3], x[3]); };
  // The interior of `count` taps along an axis: [max lo, max(that, min hi)).
  auto interior = [&](int64_t count, auto loOf, auto hiOf) {
    ExprRef from = loOf(0), to = hiOf(0);
    for (int64_t k = 1; k < count; ++k)
      from = sym::max(from, loOf(k)), to = sym::min(to, hiOf(k));
    return std::make_pair(from, sym::max(from, to));
  };
  auto [inner, innerEnd] = interior(kw, colLo, colHi);
  auto [rowsFrom, rowsTo] = interior(kh, [&](int64_t ki) { return lo(ki, o[2]); }, [&](int64_t ki) { return hi(ki, o[2], x[2]); });
  // The block's channels share a group, so they read the same input channel.
  ExprRef channel = sym::add(sym::mul(sym::floorDiv(oc0, outPerGroup), cg), ci);
  auto weight = [kw](int64_t r, int64_t ki, int64_t kj) { return fmt::format("w{}_{}", r, ki * kw + kj); };
  auto acc = [](int64_t r) { return fmt::format("acc{}", r); };
  using Tap = std::pair<int64_t, int64_t>;
  // For each channel r of the block: out[r, oh, from + t] += sum over `taps` of
  // w(r, ki, kj) * x[oh*s + shift(ki), (from + t)*s + shift(kj)], t in [0, to - from).
  auto pass = [&](const std::vector<Tap> &taps, ExprRef from, ExprRef to) {
    ExprRef t = freshVar(), col = sym::add(from, t);
    std::vector<StmtPtr> columns;
    for (int64_t r = 0; r < block; ++r)
      columns.push_back(kir::assign(acc(r), kir::load(conv.out, kir::flatIndex(o, {n, ocOf(r), oh, col}), DType::F32)));
    for (auto [ki, kj] : taps) {
      ExprRef ih = sym::add(sym::mul(oh, c(stride)), shift(ki)), iw = sym::add(sym::mul(col, c(stride)), shift(kj));
      columns.push_back(kir::assign("xv", kir::load(0, kir::flatIndex(x, {n, channel, ih, iw}), DType::F32)));
      for (int64_t r = 0; r < block; ++r)
        columns.push_back(kir::assign(
            acc(r), kir::binary(OpKind::Add, kir::local(acc(r), DType::F32),
                                kir::binary(OpKind::Mul, kir::local(weight(r, ki, kj), DType::F32), kir::local("xv", DType::F32), DType::F32),
                                DType::F32)));
    }
    for (int64_t r = 0; r < block; ++r)
      columns.push_back(kir::store(conv.out, kir::flatIndex(o, {n, ocOf(r), oh, col}), kir::local(acc(r), DType::F32)));
    return kir::loop(name(t), sym::sub(to, from), std::move(columns), Stmt::Schedule::Vectorize);
  };
  // The taps of kernel rows `kis` on one output row: every tap over the inner columns,
  // then each tap over the border columns it reads inside.
  auto rowPasses = [&](const std::vector<int64_t> &kis) {
    std::vector<StmtPtr> out;
    std::vector<Tap> all;
    for (int64_t ki : kis)
      for (int64_t kj = 0; kj < kw; ++kj)
        all.push_back({ki, kj});
    out.push_back(pass(all, inner, innerEnd));
    for (auto tap : all) {
      out.push_back(pass({tap}, colLo(tap.second), sym::min(colHi(tap.second), inner)));
      out.push_back(pass({tap}, sym::max(colLo(tap.second), innerEnd), colHi(tap.second)));
    }
    return out;
  };
  auto between = [](ExprRef v, ExprRef from, ExprRef to) {
    return kir::binary(OpKind::And, kir::binary(OpKind::Ge, kir::indexValue(v), kir::indexValue(from), DType::Bool),
                       kir::binary(OpKind::Lt, kir::indexValue(v), kir::indexValue(to), DType::Bool), DType::Bool);
  };
  std::vector<int64_t> allRows;
  for (int64_t ki = 0; ki < kh; ++ki)
    allRows.push_back(ki);
  std::vector<StmtPtr> outputRow;
  outputRow.push_back(kir::when(between(oh, rowsFrom, rowsTo), rowPasses(allRows)));
  std::vector<StmtPtr> edgeRow; // output rows some kernel rows read outside the image
  for (int64_t ki = 0; ki < kh; ++ki)
    edgeRow.push_back(kir::when(between(sym::add(sym::mul(oh, c(stride)), shift(ki)), c(0), x[2]), rowPasses({ki})));
  outputRow.push_back(kir::when(kir::unary(OpKind::Not, between(oh, rowsFrom, rowsTo), DType::Bool), std::move(edgeRow)));
  std::vector<StmtPtr> channelBody;
  body.push_back(kir::let("xv", kir::constant(0, DType::F32)));
  for (int64_t r = 0; r < block; ++r) {
    body.push_back(kir::let(acc(r), kir::constant(0, DType::F32)));
    for (int64_t ki = 0; ki < kh; ++ki)
      for (int64_t kj = 0; kj < kw; ++kj) {
        body.push_back(kir::let(weight(r, ki, kj), kir::constant(0, DType::F32)));
        channelBody.push_back(kir::assign(weight(r, ki, kj), kir::load(1, kir::flatIndex(w, {ocOf(r), ci, c(ki), c(kj)}), DType::F32)));
      }
  }
  channelBody.push_back(kir::loop(name(oh), o[2], std::move(outputRow)));
  body.push_back(kir::loop(name(ci), cg, std::move(channelBody)));
  return kir::loop(name(task), sym::mul(o[0], blocks), std::move(body), Stmt::Schedule::Parallel);
}

StmtPtr conv2dGemm(const Conv2d &conv, const std::function<ExprRef()> &freshVar, const ConvEpilogue &epilogue) {
  const Dims &x = conv.x, &w = conv.w, &o = conv.o;
  if (!ir::convGemmChannels(o[1], conv.groups) || !w[2]->isConst() || !w[3]->isConst())
    return nullptr;
  int64_t og = *o[1]->asConst() / conv.groups, kh = *w[2]->asConst(), kw = *w[3]->asConst();
  ExprRef cg = w[1], depth = sym::mul(cg, c(kh * kw)), positions = sym::mul(o[2], o[3]);
  ExprRef rowBlocks = c((og + kGemmRowBlock - 1) / kGemmRowBlock);
  // Bands of whole output rows, about kConvColumnBlock positions each.
  ExprRef bandRows = sym::max(c(1), sym::floorDiv(c(kConvColumnBlock), sym::max(c(1), o[3])));
  ExprRef bands = sym::floorDiv(sym::add(o[2], sym::sub(bandRows, c(1))), bandRows);
  ExprRef p = freshVar();
  ExprRef band = sym::mod(p, bands), rest = sym::floorDiv(p, bands);
  ExprRef rowBlock = sym::mod(rest, rowBlocks), imageGroup = sym::floorDiv(rest, rowBlocks);
  ExprRef group = sym::mod(imageGroup, c(conv.groups)), image = sym::floorDiv(imageGroup, c(conv.groups));
  ExprRef row0 = sym::mul(rowBlock, c(kGemmRowBlock)), oh0 = sym::mul(band, bandRows);
  ExprRef rowsInBand = sym::min(bandRows, sym::sub(o[2], oh0)), col0 = sym::mul(oh0, o[3]);
  ExprRef channel0 = sym::add(sym::mul(group, c(og)), row0); // the task's first output channel
  kir::Gemm g;
  g.a = conv.weights, g.b = conv.input, g.c = conv.out;
  g.aBase = sym::mul(sym::mul(group, c(og)), depth), g.lda = depth;
  g.bBase = sym::mul(sym::add(sym::mul(image, x[1]), sym::mul(group, cg)), sym::mul(x[2], x[3])), g.ldb = c(0);
  g.cBase = sym::add(sym::mul(sym::add(sym::mul(image, o[1]), sym::mul(group, c(og))), positions), col0), g.ldc = positions;
  g.row0 = row0, g.rows = sym::min(c(kGemmRowBlock), sym::sub(c(og), row0));
  g.n = sym::mul(rowsInBand, o[3]), g.depth = depth;
  auto im = std::make_shared<kir::Gemm::Im2col>();
  im->height = x[2], im->width = x[3], im->outWidth = o[3], im->column0 = col0;
  im->kh = kh, im->kw = kw, im->stride = conv.stride, im->padding = conv.padding, im->dilation = conv.dilation;
  g.im2col = std::move(im);
  if (epilogue) {
    ExprRef r = freshVar(), t = freshVar(), ow = freshVar();
    Dims idx{image, sym::add(channel0, r), sym::add(oh0, t), ow};
    StmtPtr columns = kir::loop(ow->asVar()->name, o[3], one(kir::store(conv.out, kir::flatIndex(o, idx), epilogue(idx))),
                                Stmt::Schedule::Vectorize);
    g.epilogue = kir::loop(r->asVar()->name, g.rows, one(kir::loop(t->asVar()->name, rowsInBand, one(std::move(columns)))));
  }
  ExprRef tasks = sym::mul(sym::mul(o[0], c(conv.groups)), sym::mul(rowBlocks, bands));
  return kir::loop(p->asVar()->name, tasks, one(kir::gemm(std::move(g))), Stmt::Schedule::Parallel);
}

} // namespace dnnc::lower

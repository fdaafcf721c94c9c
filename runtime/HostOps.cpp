// The host-op table (see HostOps.h). Values move as raw elements (memcpy of the dtype's
// width); only comparisons and fills convert, through base/Tensor's scalar conversions.
#include "runtime/HostOps.h"

#include "base/Backward.h"
#include "base/Random.h"
#include "base/Error.h"
#include "base/Size.h"
#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace dnnc::rt {
namespace {

using ir::OpKind;
using Shape = std::vector<int64_t>;

int64_t dimOf(const HostOpContext &c, sym::ExprRef e) {
  auto v = sym::evaluate(e, c.binding);
  if (!v)
    throw InternalError(fmt::format("{}: dim {} is unbound on the host", ir::opWhere(c.op), e->str()));
  return *v;
}

// An integer attribute: a constant or a dim expression.
int64_t intAttr(const HostOpContext &c, const std::string &name) {
  const ir::Attr &a = c.op.attrs.at(name);
  if (auto *i = std::get_if<int64_t>(&a))
    return *i;
  return dimOf(c, std::get<sym::ExprRef>(a));
}

// A list attribute with the entries given by run-time operands (the op's trailing
// operands, one per position in `value_dims`) filled in.
Shape valueList(const HostOpContext &c, const std::string &name) {
  const auto &dims = c.op.get<ir::DimList>(name);
  Shape out(dims.size(), 0);
  std::vector<bool> given(dims.size(), false);
  if (c.op.has("value_dims")) {
    const auto &positions = c.op.get<ir::DimList>("value_dims");
    size_t next = c.in.size() - positions.size();
    for (sym::ExprRef p : positions) {
      size_t at = static_cast<size_t>(dimOf(c, p));
      out[at] = c.in[next++]->getInt(0);
      given[at] = true;
      if (out[at] < 0) // (a shape's -1 is a constant; a value is a size)
        throw DataError(fmt::format("'{}' of {} has the negative entry {}, given by a value", name, ir::opWhere(c.op), out[at]));
    }
  }
  for (size_t k = 0; k < dims.size(); ++k)
    if (!given[k])
      out[k] = dimOf(c, dims[k]);
  for (int64_t d : out)
    if (d < 0 && name != "shape")
      throw DataError(fmt::format("'{}' of {} has the negative entry {}", name, ir::opWhere(c.op), d));
  return out;
}

void copyElement(Tensor &to, size_t at, const Tensor &from, size_t k) {
  size_t w = dtypeBytes(from.dtype);
  std::memcpy(to.data() + at * w, from.data() + k * w, w);
}

Tensor sized(DType dtype, Shape shape, const HostOpContext &c) {
  checkedBytes(dtype, shape, fmt::format("the result of {}", ir::opWhere(c.op)));
  return Tensor::zeros(dtype, std::move(shape));
}

void store(Tensor &t, size_t k, double v) {
  if (isInteger(t.dtype))
    t.setInt(k, saturatingInt(v, t.dtype));
  else
    t.set(k, v);
}

// Floats ordered with NaN above everything (torch.topk, np.unique), integers exactly.
bool greater(const Tensor &x, size_t a, size_t b) {
  if (isInteger(x.dtype) || x.dtype == DType::Bool)
    return x.getInt(a) > x.getInt(b);
  double va = x.get(a), vb = x.get(b);
  return std::isnan(va) ? !std::isnan(vb) : (!std::isnan(vb) && va > vb);
}

// The flat index into `x` of element `idx` of a shape `x` broadcasts to.
std::vector<Tensor> one(Tensor t) {
  std::vector<Tensor> out;
  out.push_back(std::move(t));
  return out;
}

std::vector<Tensor> constant(const HostOpContext &c) {
  Tensor t = Tensor::zeros(c.op.results[0]->type.dtype, {});
  store(t, 0, c.op.get<double>("value"));
  return one(std::move(t));
}

std::vector<Tensor> dimValue(const HostOpContext &c) {
  Tensor t = Tensor::zeros(c.op.results[0]->type.dtype, {});
  t.setInt(0, dimOf(c, c.op.get<sym::ExprRef>("value")));
  return one(std::move(t));
}

std::vector<Tensor> fill(const HostOpContext &c) {
  Tensor t = sized(c.op.results[0]->type.dtype, valueList(c, "shape"), c);
  double v = c.op.kind == OpKind::Ones ? 1 : c.op.kind == OpKind::Full ? c.op.get<double>("value") : 0;
  for (size_t k = 0; c.op.kind != OpKind::Zeros && k < t.numel(); ++k)
    store(t, k, v);
  return one(std::move(t));
}

std::vector<Tensor> arange(const HostOpContext &c) {
  int64_t start, step, count;
  if (c.op.has("count")) {
    start = intAttr(c, "start");
    step = intAttr(c, "step");
    count = intAttr(c, "count");
  } else {
    start = c.in[0]->getInt(0);
    step = c.in[2]->getInt(0);
    if (step == 0)
      throw DataError("arange with a step of 0");
    int64_t stop = c.in[1]->getInt(0);
    // Elements in [start, stop) by step, rounded up; none when the range runs backwards.
    // In 128 bits: stop - start may pass 2^63 (-5e18 to 5e18 wrapped to no elements).
    __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop, by = step > 0 ? __int128(step) : -__int128(step);
    __int128 n = span > 0 ? (span + by - 1) / by : 0;
    if (n > std::numeric_limits<int64_t>::max())
      throw DataError(fmt::format("arange from {} to {} by {} has more than 2^63 elements", start, stop, step));
    count = static_cast<int64_t>(n);
  }
  Tensor t = sized(c.op.results[0]->type.dtype, {count}, c);
  // Each element lies between start and stop, so the sum wrapped in 64 bits is exact.
  for (int64_t k = 0; k < count; ++k)
    t.setInt(static_cast<size_t>(k), static_cast<int64_t>(uint64_t(start) + uint64_t(k) * uint64_t(step)));
  return one(std::move(t));
}

std::vector<Tensor> reshape(const HostOpContext &c) {
  const Tensor &x = *c.in[0];
  Shape target = valueList(c, "shape");
  // The elements of the sizes given (sizes from values may be anything up to 2^63). As in
  // NumPy, the nonzero ones must multiply below 2^63 even when another is 0.
  std::optional<int64_t> known = 1;
  bool empty = false;
  for (int64_t d : target)
    if (d == 0)
      empty = true;
    else if (d != -1 && known)
      known = checkedMul(*known, d);
  if (!known)
    throw DataError(fmt::format("cannot reshape {} into {}: its sizes multiply past 2^63", x.typeText(),
                                rt::shapeText(x.dtype, target)));
  auto inferred = std::find(target.begin(), target.end(), -1);
  if (empty && inferred != target.end()) // (sema refuses a constant 0 beside the -1 alike)
    throw DataError(fmt::format("cannot reshape {} into {} with -1 beside a size of 0: no one size fits the -1", x.typeText(),
                                rt::shapeText(x.dtype, target)));
  if (empty)
    known = 0;
  if (inferred != target.end())
    *inferred = *known == 0 ? 0 : static_cast<int64_t>(x.numel()) / *known;
  int64_t count = inferred != target.end() ? *known * *inferred : *known; // at most numel
  if (count != static_cast<int64_t>(x.numel()))
    throw DataError(fmt::format("cannot reshape {} ({} elements) into {} elements", x.typeText(), x.numel(), count));
  Tensor t = sized(x.dtype, target, c);
  if (x.byteSize()) // (an empty tensor's data may be null: memcpy of null is undefined)
    std::memcpy(t.data(), x.data(), x.byteSize());
  return one(std::move(t));
}

std::vector<Tensor> broadcastTo(const HostOpContext &c) {
  const Tensor &x = *c.in[0];
  Tensor t = sized(x.dtype, valueList(c, "shape"), c);
  forEachIndex(t.shape, [&](const Shape &idx, size_t flat) { copyElement(t, flat, x, broadcastAt(x, idx)); });
  return one(std::move(t));
}

// x[subscripts] whose bounds are read from operands: per axis a start, stop, step, and a
// flag for a point index that drops the axis. Out-of-range slice bounds clamp (NumPy).
// Where x[subscripts] reads: per axis of x the first position, the count and the step
// (count 1 for a point axis, which `kept` omits). Run-time bounds are the operands from
// `next` on (index: after x; index_grad: after x and g).
struct SliceGeometry {
  Shape first, count, step, kept;
};

SliceGeometry sliceGeometry(const HostOpContext &c, const Tensor &x, size_t next) {
  ir::IndexAttrs ix = ir::IndexAttrs::of(c.op);
  const ir::DimList &starts = ix.starts, &stops = ix.stops;
  SliceGeometry sg;
  for (size_t a = 0; a < x.shape.size(); ++a) {
    int64_t d = x.shape[a];
    auto bound = [&](sym::ExprRef e) {
      if (e)
        return dimOf(c, e);
      int64_t v = c.in.at(next++)->getInt(0);
      return v < 0 ? v + d : v;
    };
    if (ix.isPoint(a)) {
      int64_t value = starts[a] ? dimOf(c, starts[a]) : c.in.at(next++)->getInt(0);
      int64_t p = ix.resolvePoint(a, c.op.operands[0]->type.dims[a], value, d, x.typeText());
      sg.first.push_back(p), sg.count.push_back(1), sg.step.push_back(1);
      continue;
    }
    int64_t b = std::clamp<int64_t>(bound(starts[a]), 0, d), e = std::clamp<int64_t>(bound(stops[a]), 0, d);
    int64_t s = ix.step(a);
    sg.first.push_back(b), sg.count.push_back(e > b ? (e - b + s - 1) / s : 0), sg.step.push_back(s);
    sg.kept.push_back(sg.count.back());
  }
  return sg;
}

std::vector<Tensor> index(const HostOpContext &c) {
  const Tensor &x = *c.in[0];
  SliceGeometry sg = sliceGeometry(c, x, 1);
  Shape strides = stridesOf(x.shape);
  Tensor t = sized(x.dtype, sg.kept, c);
  forEachIndex(sg.count, [&](const Shape &idx, size_t flat) {
    size_t from = 0;
    for (size_t a = 0; a < idx.size(); ++a)
      from += static_cast<size_t>((sg.first[a] + idx[a] * sg.step[a]) * strides[a]);
    copyElement(t, flat, x, from);
  });
  return one(std::move(t));
}

// The backward ops of the differentiate pass: base/Backward.h does the arithmetic.
std::vector<Tensor> indexGrad(const HostOpContext &c) {
  SliceGeometry sg = sliceGeometry(c, *c.in[0], 2);
  return one(indexScatter(*c.in[0], *c.in[1], sg.first, sg.count, sg.step));
}

Conv2dParams convParams(const HostOpContext &c) {
  return {intAttr(c, "stride"), intAttr(c, "padding"), intAttr(c, "dilation"), intAttr(c, "groups")};
}

std::vector<Tensor> conv2dGradInputOp(const HostOpContext &c) { return one(conv2dGradInput(*c.in[0], *c.in[1], *c.in[2], convParams(c))); }
std::vector<Tensor> conv2dGradWeightOp(const HostOpContext &c) { return one(conv2dGradWeight(*c.in[0], *c.in[1], *c.in[2], convParams(c))); }
std::vector<Tensor> maxPool2dGradOp(const HostOpContext &c) {
  return one(maxPool2dGrad(*c.in[0], *c.in[1], intAttr(c, "kernel"), intAttr(c, "stride"), intAttr(c, "padding")));
}
std::vector<Tensor> avgPool2dGradOp(const HostOpContext &c) {
  return one(avgPool2dGrad(*c.in[0], *c.in[1], intAttr(c, "kernel"), intAttr(c, "stride"), intAttr(c, "padding")));
}
std::vector<Tensor> scatterAddOp(const HostOpContext &c) {
  return one(scatterAdd(*c.in[0], *c.in[1], *c.in[2], static_cast<size_t>(intAttr(c, "axis")))); // non-negative after sema
}
std::vector<Tensor> maskedScatterOp(const HostOpContext &c) { return one(maskedScatter(*c.in[0], *c.in[1], *c.in[2])); }
std::vector<Tensor> resizeGradOp(const HostOpContext &c) { return one(resizeGrad(*c.in[0], *c.in[1])); }

std::vector<Tensor> dropout(const HostOpContext &c) {
  bool training = c.op.has("training") && c.op.get<bool>("training");
  int64_t stream = c.op.has("stream") ? intAttr(c, "stream") : 0;
  Tensor r = dropoutOp(*c.in[0], c.op.get<double>("p"), training, static_cast<uint64_t>(stream), c.in.size() > 1 ? c.in[1] : nullptr);
  return one(std::move(r));
}

// index_add(x, idx, src, axis): x viewed as [outer, d, inner] and src as [outer, n, inner]
// (n = idx's elements): src's row i of each block is added to x's row idx[i], summed in
// double and rounded once.
std::vector<Tensor> indexAdd(const HostOpContext &c) {
  const Tensor &x = *c.in[0], &idx = *c.in[1], &src = *c.in[2];
  // The result's memory: x's own when the executor hands it over, else `fresh()`.
  auto result = [&](auto fresh) { return c.updatesFirst ? Tensor::view(x.dtype, x.shape, const_cast<uint8_t *>(x.data())) : fresh(); };
  size_t axis = static_cast<size_t>(intAttr(c, "axis")); // non-negative after sema
  int64_t d = x.shape[axis], outer = 1, inner = 1;
  for (size_t k = 0; k < axis; ++k)
    outer *= x.shape[k];
  for (size_t k = axis + 1; k < x.shape.size(); ++k)
    inner *= x.shape[k];
  int64_t n = static_cast<int64_t>(idx.numel());
  std::vector<int64_t> rows(static_cast<size_t>(n));
  std::vector<bool> hit(static_cast<size_t>(d));
  bool distinct = true;
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = idx.getInt(static_cast<size_t>(i));
    if (j < -d || j >= d)
      throw DataError(fmt::format("index {} is out of range for dim {} of {} (size {})", j, axis, x.typeText(), d));
    j = j < 0 ? j + d : j;
    distinct = distinct && !hit[static_cast<size_t>(j)];
    hit[static_cast<size_t>(j)] = true;
    rows[static_cast<size_t>(i)] = j;
  }
  if (distinct && x.dtype == DType::F32 && src.dtype == DType::F32) {
    // Each element gets at most one term: the f32 sum, which is the double sum rounded
    // once (double carries more than twice f32's digits). A training step's loop adds
    // each iteration's row to its stash this way: element by element through double, the
    // transformer's took 40 of a 180 ms step.
    checkedBytes(x.dtype, x.shape, fmt::format("the result of {}", ir::opWhere(c.op)));
    Tensor r = result([&] { return Tensor(x); }); // a copy: sized()'s zeros would be a second pass
    auto *to = reinterpret_cast<float *>(r.data());
    const auto *from = reinterpret_cast<const float *>(src.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < outer; ++o) {
        float *row = to + (o * d + rows[static_cast<size_t>(i)]) * inner;
        const float *add = from + (o * n + i) * inner;
        for (int64_t e = 0; e < inner; ++e)
          row[e] += add[e];
      }
    return {std::move(r)};
  }
  std::vector<double> acc(x.numel());
  if (const auto *from = x.dtype == DType::F32 ? reinterpret_cast<const float *>(x.data()) : nullptr)
    std::copy(from, from + acc.size(), acc.begin());
  else
    for (size_t k = 0; k < acc.size(); ++k)
      acc[k] = x.get(k);
  // src element by element through double; f32 read directly (an embedding's gradient,
  // a token per row of a training batch: get() per element took 2 ms of its step)
  const auto *srcF32 = src.dtype == DType::F32 ? reinterpret_cast<const float *>(src.data()) : nullptr;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < outer; ++o) {
      double *to = acc.data() + (o * d + rows[static_cast<size_t>(i)]) * inner;
      size_t from = static_cast<size_t>((o * n + i) * inner);
      for (int64_t e = 0; e < inner; ++e)
        to[e] += srcF32 ? static_cast<double>(srcF32[from + static_cast<size_t>(e)]) : src.get(from + static_cast<size_t>(e));
    }
  Tensor r = result([&] { return sized(x.dtype, x.shape, c); });
  if (auto *to = r.dtype == DType::F32 ? reinterpret_cast<float *>(r.data()) : nullptr)
    for (size_t k = 0; k < acc.size(); ++k)
      to[k] = static_cast<float>(acc[k]); // rounded to nearest, as set() rounds
  else
    for (size_t k = 0; k < acc.size(); ++k)
      r.set(k, acc[k]);
  return {std::move(r)};
}

std::vector<Tensor> topk(const HostOpContext &c) {
  const Tensor &x = *c.in[0];
  size_t axis = static_cast<size_t>(intAttr(c, "axis")); // non-negative after sema
  int64_t k = c.op.has("k") ? intAttr(c, "k") : c.in[1]->getInt(0);
  if (k < 0 || k > x.shape[axis])
    throw DataError(fmt::format("topk asks for k = {} but dim {} of {} is {}", k, axis, x.typeText(), x.shape[axis]));
  Shape outShape = x.shape;
  outShape[axis] = k;
  Tensor values = sized(x.dtype, outShape, c), indices = sized(DType::I64, outShape, c);
  Shape rows = x.shape;
  rows[axis] = 1; // one sort per position of the other axes
  Shape in = stridesOf(x.shape), out = stridesOf(outShape);
  std::vector<int64_t> order(static_cast<size_t>(x.shape[axis]));
  forEachIndex(rows, [&](const Shape &idx, size_t) {
    size_t from = 0, to = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      from += static_cast<size_t>(idx[d] * in[d]), to += static_cast<size_t>(idx[d] * out[d]);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
      return greater(x, from + static_cast<size_t>(i * in[axis]), from + static_cast<size_t>(j * in[axis]));
    });
    for (int64_t j = 0; j < k; ++j) {
      size_t at = to + static_cast<size_t>(j * out[axis]);
      copyElement(values, at, x, from + static_cast<size_t>(order[static_cast<size_t>(j)] * in[axis]));
      indices.setInt(at, order[static_cast<size_t>(j)]);
    }
  });
  std::vector<Tensor> both;
  both.push_back(std::move(values));
  both.push_back(std::move(indices));
  return both;
}

// Nearest neighbour over the trailing axes `size` names.
std::vector<Tensor> resize(const HostOpContext &c) {
  const Tensor &x = *c.in[0];
  Shape size = valueList(c, "size"), outShape = x.shape;
  std::copy(size.begin(), size.end(), outShape.end() - static_cast<long>(size.size()));
  Tensor t = sized(x.dtype, outShape, c);
  Shape strides = stridesOf(x.shape);
  forEachIndex(outShape, [&](const Shape &idx, size_t flat) {
    size_t from = 0;
    for (size_t k = 0; k < idx.size(); ++k)
      from += static_cast<size_t>(idx[k] * x.shape[k] / outShape[k] * strides[k]);
    copyElement(t, flat, x, from);
  });
  return one(std::move(t));
}

std::vector<Tensor> nonzero(const HostOpContext &c) {
  const Tensor &m = *c.in[0];
  std::vector<Shape> hits;
  forEachIndex(m.shape, [&](const Shape &idx, size_t flat) {
    if (m.get(flat) != 0)
      hits.push_back(idx);
  });
  size_t rank = m.shape.size();
  Tensor t = sized(DType::I64, {static_cast<int64_t>(hits.size()), static_cast<int64_t>(rank)}, c);
  for (size_t h = 0; h < hits.size(); ++h)
    for (size_t k = 0; k < rank; ++k)
      t.setInt(h * rank + k, hits[h][k]);
  return one(std::move(t));
}

std::vector<Tensor> maskedSelect(const HostOpContext &c) {
  const Tensor &x = *c.in[0], &mask = *c.in[1];
  Shape shape = broadcastShape(x.shape, mask.shape);
  std::vector<size_t> picked;
  forEachIndex(shape, [&](const Shape &idx, size_t) {
    if (mask.get(broadcastAt(mask, idx)) != 0)
      picked.push_back(broadcastAt(x, idx));
  });
  Tensor t = sized(x.dtype, {static_cast<int64_t>(picked.size())}, c);
  for (size_t k = 0; k < picked.size(); ++k)
    copyElement(t, k, x, picked[k]);
  return one(std::move(t));
}

// Ascending, NaNs last and collapsed into one (np.unique, equal_nan=True).
std::vector<Tensor> unique(const HostOpContext &c) {
  const Tensor &x = *c.in[0];
  std::vector<size_t> order(x.numel());
  std::iota(order.begin(), order.end(), 0);
  auto less = [&](size_t a, size_t b) { return greater(x, b, a); };
  std::stable_sort(order.begin(), order.end(), less);
  std::vector<size_t> kept;
  for (size_t k : order)
    if (kept.empty() || less(kept.back(), k))
      kept.push_back(k);
  Tensor t = sized(x.dtype, {static_cast<int64_t>(kept.size())}, c);
  for (size_t k = 0; k < kept.size(); ++k)
    copyElement(t, k, x, kept[k]);
  return one(std::move(t));
}

} // namespace

const std::vector<HostOp> &hostOps() {
  static const std::vector<HostOp> table = {
      {OpKind::Constant, "constant", constant},   {OpKind::DimValue, "dim value", dimValue},
      {OpKind::Zeros, "zeros", fill},             {OpKind::Ones, "ones", fill},
      {OpKind::Full, "full", fill},               {OpKind::Arange, "arange", arange},
      {OpKind::Reshape, "reshape", reshape},      {OpKind::BroadcastTo, "broadcast_to", broadcastTo},
      {OpKind::Index, "index", index},            {OpKind::Topk, "topk", topk},
      {OpKind::IndexAdd, "index_add", indexAdd},
      {OpKind::IndexGrad, "index_grad", indexGrad},
      {OpKind::Conv2dGradInput, "conv2d_grad_input", conv2dGradInputOp},
      {OpKind::Conv2dGradWeight, "conv2d_grad_weight", conv2dGradWeightOp},
      {OpKind::MaxPool2dGrad, "max_pool2d_grad", maxPool2dGradOp},
      {OpKind::AvgPool2dGrad, "avg_pool2d_grad", avgPool2dGradOp},
      {OpKind::ScatterAdd, "scatter_add", scatterAddOp},
      {OpKind::MaskedScatter, "masked_scatter", maskedScatterOp},
      {OpKind::ResizeGrad, "resize_grad", resizeGradOp},
      {OpKind::Dropout, "dropout", dropout},
      {OpKind::Resize, "resize", resize},         {OpKind::Nonzero, "nonzero", nonzero},
      {OpKind::MaskedSelect, "masked_select", maskedSelect}, {OpKind::Unique, "unique", unique},
  };
  return table;
}

const HostOp *findHostOp(OpKind kind) {
  for (const HostOp &op : hostOps())
    if (op.kind == kind)
      return &op;
  return nullptr;
}

} // namespace dnnc::rt

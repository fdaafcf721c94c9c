// Gradient rules (see GradRules.h). Conventions follow PyTorch's autograd where a choice
// exists: ties of maximum/minimum and of max/min reductions share the gradient equally,
// relu'(0) = 0, floor/ceil/round/sign pass zero, the gradient of a cast is cast back.
#include "ir/graph/GradRules.h"

#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_set>

namespace dnnc::ir {

namespace {
using sym::ExprRef;

ExprRef cst(int64_t v) { return sym::constant(v); }

// The small vocabulary the rules are written in.
struct B {
  GradContext &c;
  DType dt;
  Value *op(OpKind k, std::vector<Value *> xs, std::map<std::string, Attr> attrs = {}) {
    return c.emit(k, std::move(xs), std::move(attrs));
  }
  Value *k(double v) { return c.constant(v, dt); }
  Value *add(Value *a, Value *b) { return op(OpKind::Add, {a, b}); }
  Value *sub(Value *a, Value *b) { return op(OpKind::Sub, {a, b}); }
  Value *mul(Value *a, Value *b) { return op(OpKind::Mul, {a, b}); }
  Value *div(Value *a, Value *b) { return op(OpKind::Div, {a, b}); }
  Value *neg(Value *a) { return op(OpKind::Neg, {a}); }
  Value *where(Value *cond, Value *a, Value *b) { return op(OpKind::Where, {cond, a, b}); }
  Value *cast(Value *a, DType to) { return a->type.dtype == to ? a : op(OpKind::Cast, {a}, {{"dtype", to}}); }
  Value *reshape(Value *a, const DimList &dims) { return a->type.dims == dims ? a : op(OpKind::Reshape, {a}, {{"shape", dims}}); }
  Value *sum(Value *a, const std::vector<size_t> &axes, bool keep) {
    if (axes.empty())
      return a;
    DimList list;
    for (size_t ax : axes)
      list.push_back(cst(static_cast<int64_t>(ax)));
    return op(OpKind::Sum, {a}, {{"axis", list}, {"keepdims", keep}});
  }
  // The last two axes swapped.
  Value *transposeLast(Value *a) {
    size_t r = a->type.rank();
    DimList perm;
    for (size_t i = 0; i < r; ++i)
      perm.push_back(cst(static_cast<int64_t>(i + 2 < r ? i : (i + 2 == r ? r - 1 : r - 2))));
    return op(OpKind::Transpose, {a}, {{"perm", perm}});
  }
  Value *zeros(const TensorType &t) { return op(OpKind::Zeros, {}, {{"shape", t.dims}, {"dtype", t.dtype}}); }
  // A slice with static bounds, one (start, stop) or point per axis.
  Value *slice(Value *a, DimList starts, DimList stops, DimList points) {
    DimList steps(starts.size(), cst(1));
    return op(OpKind::Index, {a}, IndexAttrs::make(std::move(starts), std::move(stops), std::move(steps), std::move(points)));
  }

  // The NumPy-broadcast gradient `g` summed back to the shape `t` of the operand it flows
  // to: over the leading axes t lacks and over t's literal-1 axes that were broadcast.
  Value *sumTo(Value *g, const TensorType &t) {
    size_t lead = g->type.rank() - t.rank();
    std::vector<size_t> leading, ones;
    for (size_t i = 0; i < lead; ++i)
      leading.push_back(i);
    for (size_t i = 0; i < t.rank(); ++i)
      if (t.dims[i]->asConst() == 1 && g->type.dims[lead + i]->asConst() != 1)
        ones.push_back(i);
    return cast(sum(sum(g, leading, false), ones, true), t.dtype);
  }
};

// The reduced axes of a reduction (all without an axis attribute; normalized by sema).
std::vector<size_t> reducedAxes(const Op &op) {
  std::vector<size_t> axes;
  size_t rank = op.operands[0]->type.rank();
  if (!op.has("axis")) {
    for (size_t i = 0; i < rank; ++i)
      axes.push_back(i);
    return axes;
  }
  for (ExprRef a : op.get<DimList>("axis"))
    axes.push_back(static_cast<size_t>(*a->asConst()));
  return axes;
}

// A reduction's result-shaped `v` broadcast back over the reduced axes of x.
Value *expand(B &b, const Op &op, Value *v) {
  const TensorType &x = op.operands[0]->type;
  std::vector<size_t> axes = reducedAxes(op);
  DimList kept = x.dims;
  for (size_t a : axes)
    kept[a] = cst(1);
  Value *k = b.reshape(v, kept);
  return k->type.dims == x.dims ? k : b.op(OpKind::BroadcastTo, {k}, {{"shape", x.dims}});
}

bool isFloatValue(const Value *v) { return isFloat(v->type.dtype); }
} // namespace

std::vector<Value *> unaryGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0], *r = op.results[0];
  B b{c, r->type.dtype};
  if (!g || !isFloatValue(x))
    return {nullptr};
  const double kSqrt1_2 = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794, k2InvSqrtPi = 1.12837916709551257390;
  switch (op.kind) {
  case OpKind::Neg: return {b.neg(g)};
  case OpKind::Abs: return {b.mul(g, b.op(OpKind::Sign, {x}))};
  case OpKind::Exp: return {b.mul(g, r)};
  case OpKind::Log: return {b.div(g, x)};
  case OpKind::Sqrt: return {b.div(b.mul(g, b.k(0.5)), r)};
  case OpKind::Rsqrt: return {b.mul(b.mul(g, b.k(-0.5)), b.mul(r, b.mul(r, r)))};
  case OpKind::Tanh: return {b.mul(g, b.sub(b.k(1), b.mul(r, r)))};
  case OpKind::Sigmoid: return {b.mul(g, b.mul(r, b.sub(b.k(1), r)))};
  case OpKind::Relu: return {b.where(b.op(OpKind::Gt, {x, b.k(0)}), g, b.k(0))};
  case OpKind::Gelu: { // d/dx x·Φ(x) = Φ(x) + x·φ(x)
    Value *cdf = b.mul(b.k(0.5), b.add(b.k(1), b.op(OpKind::Erf, {b.mul(x, b.k(kSqrt1_2))})));
    Value *pdf = b.mul(b.op(OpKind::Exp, {b.mul(b.k(-0.5), b.mul(x, x))}), b.k(kInvSqrt2Pi));
    return {b.mul(g, b.add(cdf, b.mul(x, pdf)))};
  }
  case OpKind::Silu: {
    Value *s = b.op(OpKind::Sigmoid, {x});
    return {b.mul(g, b.mul(s, b.add(b.k(1), b.mul(x, b.sub(b.k(1), s)))))};
  }
  case OpKind::Erf: return {b.mul(g, b.mul(b.k(k2InvSqrtPi), b.op(OpKind::Exp, {b.neg(b.mul(x, x))})))};
  case OpKind::Sin: return {b.mul(g, b.op(OpKind::Cos, {x}))};
  case OpKind::Cos: return {b.neg(b.mul(g, b.op(OpKind::Sin, {x})))};
  case OpKind::Cast: return {b.cast(g, x->type.dtype)};
  default: return {nullptr}; // floor, ceil, round, sign: zero almost everywhere
  }
}

std::vector<Value *> binaryGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0], *y = op.operands[1], *r = op.results[0];
  if (!g || !isFloatValue(r))
    return {nullptr, nullptr};
  B b{c, r->type.dtype};
  Value *gx = nullptr, *gy = nullptr;
  bool wx = c.wants(x), wy = c.wants(y);
  switch (op.kind) {
  case OpKind::Add: gx = g, gy = g; break;
  case OpKind::Sub: gx = g, gy = wy ? b.neg(g) : nullptr; break;
  case OpKind::Mul: gx = wx ? b.mul(g, y) : nullptr, gy = wy ? b.mul(g, x) : nullptr; break;
  case OpKind::Div: gx = wx ? b.div(g, y) : nullptr, gy = wy ? b.neg(b.div(b.mul(g, r), y)) : nullptr; break;
  case OpKind::Mod: // a - floor(a / b) * b
    gx = g, gy = wy ? b.neg(b.mul(g, b.op(OpKind::Floor, {b.div(x, y)}))) : nullptr;
    break;
  case OpKind::Pow:
    // y·x^(y-1), taken as 0 where y = 0 (x^0 is constant; at x = 0 the product is 0·inf),
    // as PyTorch's
    gx = wx ? b.where(b.op(OpKind::Eq, {y, b.k(0)}), b.k(0), b.mul(g, b.mul(y, b.op(OpKind::Pow, {x, b.sub(y, b.k(1))}))))
            : nullptr;
    // x^y·log x, taken as 0 where x = 0 (PyTorch's choice: the limit for y > 0)
    gy = wy ? b.where(b.op(OpKind::Eq, {x, b.k(0)}), b.k(0), b.mul(g, b.mul(r, b.op(OpKind::Log, {x})))) : nullptr;
    break;
  case OpKind::Maximum:
  case OpKind::Minimum: {
    OpKind wins = op.kind == OpKind::Maximum ? OpKind::Gt : OpKind::Lt;
    Value *half = b.mul(g, b.k(0.5)), *zero = b.k(0);
    Value *tie = b.op(OpKind::Eq, {x, y});
    gx = wx ? b.where(b.op(wins, {x, y}), g, b.where(tie, half, zero)) : nullptr;
    gy = wy ? b.where(b.op(wins, {y, x}), g, b.where(tie, half, zero)) : nullptr;
    break;
  }
  default: return {nullptr, nullptr};
  }
  return {gx && wx ? b.sumTo(gx, x->type) : nullptr, gy && wy ? b.sumTo(gy, y->type) : nullptr};
}

std::vector<Value *> selectGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *r = op.results[0];
  std::vector<Value *> out(op.operands.size(), nullptr);
  if (!g || !isFloatValue(r))
    return out;
  B b{c, r->type.dtype};
  Value *zero = b.k(0);
  auto pass = [&](size_t i, Value *mask) {
    if (c.wants(op.operands[i]))
      out[i] = b.sumTo(b.where(mask, g, zero), op.operands[i]->type);
  };
  if (op.kind == OpKind::Where) {
    Value *cond = op.operands[0];
    pass(1, cond);
    if (c.wants(op.operands[2]))
      out[2] = b.sumTo(b.where(cond, zero, g), op.operands[2]->type);
    return out;
  }
  // clip(x, lo, hi) = min(max(x, lo), hi): x's gradient inside [lo, hi], lo's below it
  // (while lo <= hi), hi's where max(x, lo) exceeds it.
  Value *x = op.operands[0], *lo = op.operands[1], *hi = op.operands[2];
  auto both = [&](Value *p, Value *q) { return b.op(OpKind::And, {p, q}); };
  pass(0, both(b.op(OpKind::Ge, {x, lo}), b.op(OpKind::Le, {x, hi})));
  pass(1, both(b.op(OpKind::Lt, {x, lo}), b.op(OpKind::Le, {lo, hi})));
  pass(2, b.op(OpKind::Gt, {b.op(OpKind::Maximum, {x, lo}), hi}));
  return out;
}

std::vector<Value *> reduceGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0], *r = op.results[0];
  if (!g || !isFloatValue(r))
    return {nullptr};
  B b{c, r->type.dtype};
  switch (op.kind) {
  case OpKind::Sum: return {expand(b, op, g)};
  case OpKind::Mean: {
    ExprRef n = cst(1);
    for (size_t a : reducedAxes(op))
      n = sym::mul(n, x->type.dims[a]);
    return {b.div(expand(b, op, g), c.dimValue(n, b.dt))};
  }
  case OpKind::Max:
  case OpKind::Min: { // shared equally among the elements equal to the extreme
    Value *mask = b.cast(b.op(OpKind::Eq, {x, expand(b, op, r)}), b.dt);
    std::map<std::string, Attr> attrs = op.attrs;
    Value *count = b.op(OpKind::Sum, {mask}, attrs);
    return {b.mul(expand(b, op, b.div(g, count)), mask)};
  }
  case OpKind::Logsumexp: return {b.mul(expand(b, op, g), b.op(OpKind::Exp, {b.sub(x, expand(b, op, r))}))};
  default: return {nullptr};
  }
}

std::vector<Value *> softmaxGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *r = op.results[0];
  if (!g)
    return {nullptr};
  B b{c, r->type.dtype};
  std::vector<size_t> axis{static_cast<size_t>(*op.get<ExprRef>("axis")->asConst())};
  if (op.kind == OpKind::Softmax) // r·(g − Σ g·r)
    return {b.mul(r, b.sub(g, b.sum(b.mul(g, r), axis, true)))};
  return {b.sub(g, b.mul(b.op(OpKind::Exp, {r}), b.sum(g, axis, true)))}; // log_softmax: g − softmax·Σg
}

std::vector<Value *> matmulGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0], *y = op.operands[1], *r = op.results[0];
  if (!g || !isFloatValue(r))
    return {nullptr, nullptr};
  B b{c, r->type.dtype};
  // Vectors become matrices ([K] as [1, K] on the left, [K, 1] on the right) so both
  // gradients are matmuls; each is summed over broadcast batch axes and reshaped back.
  bool vx = x->type.rank() == 1, vy = y->type.rank() == 1;
  auto withAxis = [&](Value *v, size_t at) {
    DimList d = v->type.dims;
    d.insert(d.begin() + static_cast<long>(at), cst(1));
    return b.reshape(v, d);
  };
  Value *x2 = vx ? withAxis(x, 0) : x, *y2 = vy ? withAxis(y, 1) : y;
  Value *g2 = g;
  if (vx)
    g2 = withAxis(g2, g2->type.rank() - (vy ? 0 : 1));
  if (vy)
    g2 = withAxis(g2, g2->type.rank());
  Value *gx = nullptr, *gy = nullptr;
  if (c.wants(x))
    gx = b.reshape(b.sumTo(b.op(OpKind::Matmul, {g2, b.transposeLast(y2)}), x2->type), x->type.dims);
  if (c.wants(y))
    gy = b.reshape(b.sumTo(b.op(OpKind::Matmul, {b.transposeLast(x2), g2}), y2->type), y->type.dims);
  return {gx, gy};
}

std::vector<Value *> movementGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0], *r = op.results[0];
  if (!g || !isFloatValue(r))
    return {nullptr};
  B b{c, r->type.dtype};
  switch (op.kind) {
  case OpKind::Reshape:
    // Sized by i64[] values, the result has fresh dims no rule relates to x's: the counts
    // were checked equal when the reshape ran, and the reverse one says so.
    if (op.has("value_dims"))
      return {b.op(OpKind::Reshape, {g}, {{"shape", x->type.dims}, {"count_checked", true}})};
    [[fallthrough]];
  case OpKind::Flatten:
  case OpKind::Squeeze:
  case OpKind::Unsqueeze: return {b.reshape(g, x->type.dims)};
  case OpKind::BroadcastTo: return {b.sumTo(g, x->type)};
  case OpKind::Transpose: {
    if (!op.has("perm")) // reversed axes: reversing again undoes it
      return {b.op(OpKind::Transpose, {g})};
    const DimList &perm = op.get<DimList>("perm");
    DimList inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inverse[static_cast<size_t>(*perm[i]->asConst())] = cst(static_cast<int64_t>(i));
    return {b.op(OpKind::Transpose, {g}, {{"perm", inverse}})};
  }
  case OpKind::Pad: { // the interior of g
    const DimList &pads = op.get<DimList>("pads");
    DimList starts, stops, points(x->type.rank(), cst(0));
    for (size_t i = 0; i < x->type.rank(); ++i) {
      ExprRef before = 2 * i < pads.size() ? pads[2 * i] : cst(0);
      starts.push_back(before), stops.push_back(sym::add(before, x->type.dims[i]));
    }
    return {b.slice(g, starts, stops, points)};
  }
  default: return {nullptr};
  }
}

// Ops of several tensors along an axis: concat and stack (gradients are slices of g) and
// split (the gradient is the concat of its results' gradients, zeros where none).
std::vector<Value *> partsGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  DType dt = op.results[0]->type.dtype;
  B b{c, dt};
  size_t axis = static_cast<size_t>(*op.get<ExprRef>("axis")->asConst());
  if (op.kind == OpKind::Split) {
    if (!isFloat(dt) || std::all_of(grads.begin(), grads.end(), [](Value *g) { return !g; }))
      return {nullptr};
    std::vector<Value *> parts;
    for (size_t i = 0; i < grads.size(); ++i)
      parts.push_back(grads[i] ? grads[i] : b.zeros(op.results[i]->type));
    return {b.op(OpKind::Concat, parts, {{"axis", cst(static_cast<int64_t>(axis))}})};
  }
  std::vector<Value *> out(op.operands.size(), nullptr);
  Value *g = grads[0];
  if (!g || !isFloat(dt))
    return out;
  const DimList &whole = g->type.dims;
  ExprRef offset = cst(0);
  for (size_t i = 0; i < op.operands.size(); ++i) {
    DimList starts(whole.size(), cst(0)), stops = whole, points(whole.size(), cst(0));
    if (op.kind == OpKind::Concat) {
      ExprRef len = op.operands[i]->type.dims[axis];
      starts[axis] = offset, stops[axis] = sym::add(offset, len);
      offset = sym::add(offset, len);
    } else { // stack: the point i of the new axis
      starts[axis] = cst(static_cast<int64_t>(i)), stops[axis] = cst(static_cast<int64_t>(i + 1)), points[axis] = cst(1);
    }
    if (c.wants(op.operands[i]))
      out[i] = b.slice(g, starts, stops, points);
  }
  return out;
}

// take(x, idx, axis) / embedding(table, ids): g added back at the indices (index_add into
// zeros, repeated indices summing); index_add(x, idx, src): g to x, take(g, idx) to src.
std::vector<Value *> gatherGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0], *idx = op.operands[1];
  std::vector<Value *> out(op.operands.size(), nullptr);
  if (!g || !isFloatValue(x))
    return out;
  B b{c, x->type.dtype};
  ExprRef axis = op.kind == OpKind::Embedding ? cst(0) : op.get<ExprRef>("axis");
  if (op.kind == OpKind::IndexAdd) {
    out[0] = c.wants(x) ? g : nullptr;
    if (c.wants(op.operands[2]))
      out[2] = b.op(OpKind::Take, {g, idx}, {{"axis", axis}});
    return out;
  }
  out[0] = b.op(OpKind::IndexAdd, {b.zeros(x->type), idx, g}, {{"axis", axis}});
  return out;
}

// x[subscripts]: with static bounds and step 1, g padded back to x's shape with zeros (a
// point index first gets its axis back), which lowers to a kernel; a run-time point i (a
// loop's w[l]) then adds the row into zeros at i (index_add), i counted from the end when
// negative as the forward did. With a step or a run-time slice bound, index_grad writes g
// back at the positions the slice read (a host op).
std::vector<Value *> indexGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0];
  std::vector<Value *> out(op.operands.size(), nullptr);
  if (!g || !isFloatValue(x))
    return out;
  B b{c, x->type.dtype};
  IndexAttrs ix = IndexAttrs::of(op);
  bool padded = true;
  for (size_t a = 0; a < ix.starts.size(); ++a)
    padded = padded && ((ix.starts[a] && ix.stops[a] && ix.step(a) == 1) || (!ix.starts[a] && ix.isPoint(a)));
  if (!padded) {
    std::vector<Value *> operands{x, g};
    operands.insert(operands.end(), op.operands.begin() + 1, op.operands.end());
    out[0] = b.op(OpKind::IndexGrad, operands, op.attrs);
    return out;
  }
  DimList kept, pads;
  std::vector<std::pair<size_t, Value *>> runtimePoints; // (axis, index operand)
  size_t nextOperand = 1;
  const DimList &dims = x->type.dims;
  size_t gAxis = 0;
  for (size_t a = 0; a < dims.size(); ++a) {
    if (!ix.starts[a]) { // a run-time point (run-time slice bounds went to index_grad)
      runtimePoints.emplace_back(a, op.operands[nextOperand++]);
      kept.push_back(cst(1)), pads.push_back(cst(0)), pads.push_back(cst(0));
      continue;
    }
    ExprRef zero = cst(0), start = sym::max(zero, sym::min(ix.starts[a], dims[a]));
    ExprRef len = ix.isPoint(a) ? cst(1) : g->type.dims[gAxis++];
    kept.push_back(len);
    pads.push_back(start), pads.push_back(sym::sub(sym::sub(dims[a], start), len));
  }
  Value *cur = b.op(OpKind::Pad, {b.reshape(g, kept)}, {{"pads", pads}, {"value", 0.0}});
  for (auto [a, i] : runtimePoints) {
    DType it = i->type.dtype;
    Value *wrapped = b.where(b.op(OpKind::Lt, {i, c.constant(0, it)}), b.op(OpKind::Add, {i, c.dimValue(dims[a], it)}), i);
    DimList whole = cur->type.dims;
    whole[a] = dims[a];
    cur = b.op(OpKind::IndexAdd, {b.zeros({x->type.dtype, whole}), b.reshape(wrapped, {cst(1)}), cur},
               {{"axis", cst(static_cast<int64_t>(a))}});
  }
  out[0] = cur;
  return out;
}

// prod: the product of the other elements, without dividing by x (exact with zeros): where
// a reduced slice has no zero it is prod(x)/x; where it has one zero, the zero gets the
// product of the rest and the others 0; where it has two or more, every element gets 0.
std::vector<Value *> prodGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0], *r = op.results[0];
  if (!g || !isFloatValue(r))
    return {nullptr};
  B b{c, r->type.dtype};
  Value *zero = b.op(OpKind::Eq, {x, b.k(0)});
  Value *zeros = b.op(OpKind::Sum, {b.cast(zero, b.dt)}, op.attrs);       // per slice, r's shape
  Value *rest = b.op(OpKind::Prod, {b.where(zero, b.k(1), x)}, op.attrs); // product of the non-zeros
  auto times = [&](double count) { // g·rest where the slice has `count` zeros, else 0
    return expand(b, op, b.where(b.op(OpKind::Eq, {zeros, b.k(count)}), b.mul(g, rest), b.k(0)));
  };
  return {b.where(zero, times(1), b.div(times(0), x))};
}

// conv2d: the adjoint of its loop nest, as two host ops with the forward op's attrs
// (stride, padding, dilation, groups).
std::vector<Value *> convGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0], *w = op.operands[1];
  if (!g || !isFloatValue(x))
    return {nullptr, nullptr};
  B b{c, x->type.dtype};
  return {c.wants(x) ? b.op(OpKind::Conv2dGradInput, {x, g, w}, op.attrs) : nullptr,
          c.wants(w) ? b.op(OpKind::Conv2dGradWeight, {w, x, g}, op.attrs) : nullptr};
}

// Ops that read windows or cells of x: max_pool2d (each window's g to its first maximum,
// as PyTorch), avg_pool2d (g / kernel² to every element of the window, padding counted as
// in the forward op), resize (nearest neighbour: each g element to the cell it copied; a
// run-time size passes nothing).
std::vector<Value *> poolGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0];
  std::vector<Value *> out(op.operands.size(), nullptr);
  if (!g || !isFloatValue(x))
    return out;
  B b{c, x->type.dtype};
  if (op.kind == OpKind::Resize) {
    out[0] = b.op(OpKind::ResizeGrad, {x, g});
    return out;
  }
  out[0] = b.op(op.kind == OpKind::MaxPool2d ? OpKind::MaxPool2dGrad : OpKind::AvgPool2dGrad, {x, g}, op.attrs);
  return out;
}

// topk: the values' gradient added back at their indices along the axis; the indices pass
// none (nor does a run-time k).
std::vector<Value *> topkGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0];
  std::vector<Value *> out(op.operands.size(), nullptr);
  if (!g || !isFloatValue(x))
    return out;
  B b{c, x->type.dtype};
  out[0] = b.op(OpKind::ScatterAdd, {b.zeros(x->type), op.results[1], g}, {{"axis", op.attrs.at("axis")}});
  return out;
}

// dropout: the same op on g, with the same attrs and RNG input, draws the same mask, so g
// is kept and scaled where x was (nothing is stored between the passes).
std::vector<Value *> dropoutGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  std::vector<Value *> out(op.operands.size(), nullptr);
  if (!grads[0])
    return out;
  std::vector<Value *> operands{grads[0]};
  operands.insert(operands.end(), op.operands.begin() + 1, op.operands.end());
  out[0] = c.emit(OpKind::Dropout, operands, op.attrs);
  return out;
}

// masked_select: g's elements back at the mask's true positions, zeros elsewhere (summed
// over the axes x was broadcast along); the mask passes none.
std::vector<Value *> maskedSelectGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads) {
  Value *g = grads[0], *x = op.operands[0];
  if (!g || !isFloatValue(x))
    return {nullptr, nullptr};
  B b{c, x->type.dtype};
  return {b.op(OpKind::MaskedScatter, {x, op.operands[1], g}), nullptr};
}

namespace {
// Why a control-flow op cannot pass gradients yet (its body's ops are checked apart).
std::optional<std::string> regionUnsupported(const Op &op) {
  if (op.kind == OpKind::If) {
    for (size_t k = 0; k < op.results.size(); ++k)
      for (const auto &branch : op.regions)
        if (branch->yields[k]->type.dims != op.results[k]->type.dims)
          return fmt::format("gradients through an 'if' whose branches give '{}' different shapes ({} and {}) are not supported",
                             op.results[k]->name, op.regions[0]->yields[k]->type.str(), op.regions[1]->yields[k]->type.str());
    return std::nullopt;
  }
  if (op.kind != OpKind::For && op.kind != OpKind::While)
    return fmt::format("gradients through '{}' are not supported", opInfo(op.kind).spelling);
  const Region &body = *op.regions.back();
  size_t offset = op.kind == OpKind::For ? 1 : 0;                    // a for's body starts with its loop variable
  size_t from = op.kind == OpKind::For && !op.has("lo") ? 2 : 0; // a for's run-time bounds come first
  const std::string &loop = opInfo(op.kind).spelling;
  for (size_t k = 0; k < op.results.size(); ++k) {
    const Value *entry = op.operands[from + k], *arg = body.args[k + offset], *next = body.yields[k];
    if (!isFloatValue(entry))
      return fmt::format("gradients through a '{}' that carries the non-float '{}' ({}) are not supported yet", loop, arg->name,
                         entry->type.str());
    if (arg->type.dims != entry->type.dims || next->type.dims != entry->type.dims)
      return fmt::format("gradients through a '{}' whose carried '{}' changes shape across iterations ({} on entry, {} "
                         "in the loop) are not supported",
                         loop, arg->name, entry->type.str(), arg->type.str());
  }
  return std::nullopt;
}

// The ops of `ops` (program order) on a path from `dependent` (in: the sources; out: every
// float value that depends on them) to any of `targets`. A control-flow op reads what its
// regions capture as well as its operands (gradInputs).
std::vector<Op *> pathOf(const std::vector<Op *> &ops, const std::vector<const Value *> &targets,
                         std::unordered_set<const Value *> &dependent, std::unordered_set<const Value *> &needed) {
  std::vector<Op *> forward;
  std::vector<std::vector<Value *>> inputs;
  for (Op *op : ops) {
    std::vector<Value *> in = gradInputs(*op);
    if (std::none_of(in.begin(), in.end(), [&](const Value *v) { return dependent.count(v) && isFloatValue(v); }))
      continue;
    forward.push_back(op);
    inputs.push_back(std::move(in));
    for (const Value *r : op->results)
      if (isFloatValue(r))
        dependent.insert(r);
  }
  needed.insert(targets.begin(), targets.end());
  std::vector<Op *> path;
  for (size_t i = forward.size(); i-- > 0;) {
    Op *op = forward[i];
    if (std::none_of(op->results.begin(), op->results.end(), [&](const Value *v) { return needed.count(v); }))
      continue;
    path.push_back(op);
    for (const Value *v : inputs[i])
      if (dependent.count(v) && isFloatValue(v))
        needed.insert(v);
  }
  std::reverse(path.begin(), path.end());
  return path;
}

std::optional<GradBlock> blockerIn(const std::vector<Op *> &path, const std::unordered_set<const Value *> &dependent) {
  for (const Op *op : path) {
    if (auto why = gradUnsupported(*op))
      return GradBlock{op, *why};
    for (const auto &r : op->regions) { // the body's own path: from its args and dependent captures to its yields
      std::unordered_set<const Value *> inner = dependent, needed;
      inner.insert(r->args.begin(), r->args.end());
      std::vector<Op *> p = pathOf(r->ops, std::vector<const Value *>(r->yields.begin(), r->yields.end()), inner, needed);
      if (auto b = blockerIn(p, inner))
        return b;
    }
  }
  return std::nullopt;
}
} // namespace

std::vector<Value *> regionCaptures(const Op &op) {
  std::unordered_set<const Value *> inside, seen;
  std::vector<Value *> out;
  auto use = [&](Value *v) {
    if (!inside.count(v) && seen.insert(v).second)
      out.push_back(v);
  };
  // SSA: a value is defined (an argument, an earlier result) before any use in program order.
  auto walk = [&](auto &self, const Region &r) -> void {
    inside.insert(r.args.begin(), r.args.end());
    for (const Op *o : r.ops) {
      for (Value *v : o->operands)
        use(v);
      for (const auto &sub : o->regions)
        self(self, *sub);
      inside.insert(o->results.begin(), o->results.end());
    }
    for (Value *y : r.yields)
      use(y);
  };
  for (const auto &r : op.regions)
    walk(walk, *r);
  return out;
}

std::vector<Value *> gradInputs(const Op &op) {
  std::vector<Value *> in = op.operands;
  if (!op.regions.empty()) {
    std::vector<Value *> caps = regionCaptures(op);
    in.insert(in.end(), caps.begin(), caps.end());
  }
  return in;
}

std::optional<std::string> gradUnsupported(const Op &op) {
  if (op.results.empty() || std::none_of(op.results.begin(), op.results.end(), isFloatValue))
    return std::nullopt;
  if (!op.regions.empty())
    return regionUnsupported(op);
  if (opInfo(op.kind).grad || opInfo(op.kind).placement == Placement::Structural || opInfo(op.kind).has(OpFlag::Fill) ||
      op.kind == OpKind::DimValue)
    return std::nullopt;
  return fmt::format("'{}' has no gradient yet", opInfo(op.kind).spelling);
}

std::vector<Op *> gradPath(const Region &region, const Value *target, const std::vector<const Value *> &sources,
                           std::vector<bool> &reached) {
  std::unordered_set<const Value *> dependent(sources.begin(), sources.end()), needed;
  std::vector<Op *> path = pathOf(region.ops, {target}, dependent, needed);
  reached.clear();
  for (const Value *s : sources)
    reached.push_back(needed.count(s) != 0);
  return path;
}

std::optional<GradBlock> gradBlocker(const Region &region, const Value *target, const std::vector<const Value *> &sources) {
  std::unordered_set<const Value *> dependent(sources.begin(), sources.end()), needed;
  std::vector<Op *> path = pathOf(region.ops, {target}, dependent, needed);
  return blockerIn(path, dependent);
}

} // namespace dnnc::ir

// Reference implementations, one per op kind; the switch in runRefOp names every op of
// the registry, so adding an op without its reference is a compiler warning.
#include "ir/interp/RefOps.h"

#include "ir/graph/Binding.h"

#include "base/Backward.h"
#include "base/Random.h"
#include "base/Error.h"
#include "base/Size.h"
#include "ir/graph/OpRegistry.h"
#include "ir/graph/ScalarOps.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <set>

namespace dnnc::interp {
namespace {

using rt::Tensor;
using Shape = std::vector<int64_t>;
using ir::BinaryOp;
using ir::OpKind;
using ir::UnaryOp;

Shape stridesOf(const Shape &s) {
  Shape st(s.size(), 1);
  for (size_t k = s.size(); k-- > 1;)
    st[k - 1] = st[k] * s[k];
  return st;
}

size_t numelOf(const Shape &s) {
  size_t n = 1;
  for (int64_t d : s)
    n *= static_cast<size_t>(d);
  return n;
}

// Calls f(index, flat) for every index of `shape` in row-major order.
template <class F> void forEach(const Shape &shape, F &&f) {
  size_t n = numelOf(shape);
  Shape idx(shape.size(), 0);
  for (size_t flat = 0; flat < n; ++flat) {
    f(idx, flat);
    for (size_t k = shape.size(); k-- > 0;) {
      if (++idx[k] < shape[k])
        break;
      idx[k] = 0;
    }
  }
}

// The flat position in t of the broadcast index `out` (aligned right; dims of 1 repeat).
size_t broadcastFlat(const Tensor &t, const Shape &out) {
  size_t flat = 0, stride = 1;
  for (size_t k = 0; k < t.shape.size(); ++k) {
    size_t axis = t.shape.size() - 1 - k;
    int64_t d = t.shape[axis];
    int64_t i = d == 1 ? 0 : out[out.size() - 1 - k];
    flat += static_cast<size_t>(i) * stride;
    stride *= static_cast<size_t>(d);
  }
  return flat;
}

Shape broadcastShape(const std::vector<const Tensor *> &ts) {
  size_t rank = 0;
  for (const Tensor *t : ts)
    rank = std::max(rank, t->shape.size());
  Shape out(rank, 1);
  for (const Tensor *t : ts)
    for (size_t k = 0; k < t->shape.size(); ++k) {
      int64_t &o = out[rank - 1 - k];
      int64_t d = t->shape[t->shape.size() - 1 - k];
      if (o == 1)
        o = d;
      else if (d != 1 && d != o)
        throw DataError(fmt::format("cannot broadcast {} with a dim of {}", t->typeText(), o));
    }
  return out;
}

// Axis attributes are non-negative after sema (a graph from elsewhere that breaks this
// is an internal error, not an index past the shape).
size_t axisOf(int64_t a) {
  if (a < 0)
    throw InternalError(fmt::format("axis {} was not normalized by sema", a));
  return static_cast<size_t>(a);
}

double unaryFn(UnaryOp k, double x) {
  switch (k) {
  case UnaryOp::Neg: return -x;
  case UnaryOp::Abs: return std::fabs(x);
  case UnaryOp::Exp: return std::exp(x);
  case UnaryOp::Log: return std::log(x);
  case UnaryOp::Sqrt: return std::sqrt(x);
  case UnaryOp::Rsqrt: return 1.0 / std::sqrt(x);
  case UnaryOp::Tanh: return std::tanh(x);
  case UnaryOp::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
  case UnaryOp::Relu: return std::isnan(x) ? x : x > 0 ? x : 0.0; // NaN propagates, as np.maximum(x, 0)
  case UnaryOp::Gelu: return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); // 1 + erf(...) would cancel for large -x
  case UnaryOp::Silu: return x / (1.0 + std::exp(-x));
  case UnaryOp::Erf: return std::erf(x);
  case UnaryOp::Sin: return std::sin(x);
  case UnaryOp::Cos: return std::cos(x);
  case UnaryOp::Floor: return std::floor(x);
  case UnaryOp::Ceil: return std::ceil(x);
  case UnaryOp::Round: return std::nearbyint(x); // half to even, as NumPy
  case UnaryOp::Sign: return std::isnan(x) ? x : (x > 0) - (x < 0); // sign(NaN) is NaN, as in NumPy
  case UnaryOp::Not: return x == 0;
  }
  ir::unreachableScalarOp();
}

// Comparisons and logical ops, alike for doubles and for exact integers; nullopt for
// arithmetic, which the callers compute per type.
template <class T> std::optional<bool> predicate(BinaryOp k, T a, T b) {
  switch (k) {
  case BinaryOp::Eq: return a == b;
  case BinaryOp::Ne: return a != b;
  case BinaryOp::Lt: return a < b;
  case BinaryOp::Le: return a <= b;
  case BinaryOp::Gt: return a > b;
  case BinaryOp::Ge: return a >= b;
  case BinaryOp::And: return a != 0 && b != 0;
  case BinaryOp::Or: return a != 0 || b != 0;
  case BinaryOp::Add: case BinaryOp::Sub: case BinaryOp::Mul: case BinaryOp::Div: case BinaryOp::Mod:
  case BinaryOp::Pow: case BinaryOp::Maximum: case BinaryOp::Minimum: return std::nullopt;
  }
  ir::unreachableScalarOp();
}

double binaryFn(BinaryOp k, double a, double b) {
  switch (k) {
  case BinaryOp::Add: return a + b;
  case BinaryOp::Sub: return a - b;
  case BinaryOp::Mul: return a * b;
  case BinaryOp::Div: return a / b;
  case BinaryOp::Mod: return ir::floorMod(a, b);
  case BinaryOp::Pow: return std::pow(a, b);
  case BinaryOp::Maximum: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
  case BinaryOp::Minimum: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
  case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt: case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge:
  case BinaryOp::And: case BinaryOp::Or: return *predicate(k, a, b);
  }
  ir::unreachableScalarOp();
}

// Integer arithmetic done exactly in int64, wrapping on overflow (two's complement, as
// NumPy's fixed-width integers and the kernels do); i32 results wrap when they are stored.
// Division is floor division; x / 0 and x % 0 are 0 and INT64_MIN / -1 wraps to INT64_MIN
// (docs/semantics.md): no operand traps.
int64_t wrap(uint64_t v) { return static_cast<int64_t>(v); }
int64_t integerFn(BinaryOp k, int64_t a, int64_t b) {
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (k) {
  case BinaryOp::Add: return wrap(ua + ub);
  case BinaryOp::Sub: return wrap(ua - ub);
  case BinaryOp::Mul: return wrap(ua * ub);
  case BinaryOp::Maximum: return std::max(a, b);
  case BinaryOp::Minimum: return std::min(a, b);
  case BinaryOp::Div:
    if (b == 0)
      return 0;
    if (b == -1)
      return wrap(0 - ua);
    return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
  case BinaryOp::Mod: {
    if (b == 0 || b == -1)
      return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  }
  case BinaryOp::Pow: { // exact, wrapping; negative exponents give 1 / a^-b truncated
    if (b < 0)
      return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t base = ua, p = 1;
    for (int64_t e = b; e > 0; e >>= 1, base *= base)
      if (e & 1)
        p *= base;
    return wrap(p);
  }
  case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt: case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge:
  case BinaryOp::And: case BinaryOp::Or: return *predicate(k, a, b);
  }
  ir::unreachableScalarOp();
}
// The integer form of a unary op, or nullopt for the transcendental and rounding ones,
// which compute in double.
std::optional<int64_t> integerFn(UnaryOp k, int64_t a) {
  switch (k) {
  case UnaryOp::Neg: return wrap(0 - static_cast<uint64_t>(a));
  case UnaryOp::Abs: return a < 0 ? wrap(0 - static_cast<uint64_t>(a)) : a;
  case UnaryOp::Relu: return a > 0 ? a : 0;
  case UnaryOp::Sign: return (a > 0) - (a < 0);
  case UnaryOp::Not: return a == 0;
  case UnaryOp::Exp: case UnaryOp::Log: case UnaryOp::Sqrt: case UnaryOp::Rsqrt: case UnaryOp::Tanh:
  case UnaryOp::Sigmoid: case UnaryOp::Gelu: case UnaryOp::Silu: case UnaryOp::Erf: case UnaryOp::Sin:
  case UnaryOp::Cos: case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: return std::nullopt;
  }
  ir::unreachableScalarOp();
}

// Bool arithmetic on truth values 0/1: NumPy's logical forms (+ and maximum are or, * and
// minimum are and, - is xor; neg, abs, sign and relu keep the value). nullopt: computed as
// integers.
std::optional<int64_t> boolFn(BinaryOp k, int64_t a, int64_t b) {
  switch (k) {
  case BinaryOp::Add: case BinaryOp::Maximum: return a | b;
  case BinaryOp::Mul: case BinaryOp::Minimum: return a & b;
  case BinaryOp::Sub: return a ^ b;
  case BinaryOp::Div: case BinaryOp::Mod: case BinaryOp::Pow: case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt:
  case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge: case BinaryOp::And: case BinaryOp::Or: return std::nullopt;
  }
  ir::unreachableScalarOp();
}
std::optional<int64_t> boolFn(UnaryOp k, int64_t a) {
  switch (k) {
  case UnaryOp::Neg: case UnaryOp::Abs: case UnaryOp::Sign: case UnaryOp::Relu: return a;
  case UnaryOp::Not: case UnaryOp::Exp: case UnaryOp::Log: case UnaryOp::Sqrt: case UnaryOp::Rsqrt: case UnaryOp::Tanh:
  case UnaryOp::Sigmoid: case UnaryOp::Gelu: case UnaryOp::Silu: case UnaryOp::Erf: case UnaryOp::Sin:
  case UnaryOp::Cos: case UnaryOp::Floor: case UnaryOp::Ceil: case UnaryOp::Round: return std::nullopt;
  }
  ir::unreachableScalarOp();
}

// Stores a value computed in double into r[k]: floats round to r's dtype (Tensor::set),
// integers saturate as a cast does.
void storeDouble(Tensor &r, size_t k, double v) {
  if (isInteger(r.dtype))
    r.setInt(k, saturatingInt(v, r.dtype));
  else
    r.set(k, v);
}

// An integer (or bool) converted to a float dtype: rounded once to f32 as the kernels'
// sitofp does (not through double), then to f16/bf16.
void storeIntAsFloat(Tensor &r, size_t k, int64_t v) { r.set(k, static_cast<double>(static_cast<float>(v))); }

bool integral(DType d) { return isInteger(d) || d == DType::Bool; }

Tensor elementwise(const RefContext &c, DType out) {
  Shape shape = broadcastShape(c.in);
  Tensor r = Tensor::zeros(out, shape);
  OpKind k = c.op.kind;
  std::optional<UnaryOp> unaryK = ir::asUnaryOp(k);
  std::optional<BinaryOp> binaryK = ir::asBinaryOp(k);
  // Integer and bool operands compute exactly in int64 (doubles lose precision past 2^53).
  bool intIn = integral(c.in[k == OpKind::Where ? 1 : 0]->dtype);
  forEach(shape, [&](const Shape &idx, size_t flat) {
    auto at = [&](size_t i) { return c.in[i]->get(broadcastFlat(*c.in[i], idx)); };
    auto atInt = [&](size_t i) { return c.in[i]->getInt(broadcastFlat(*c.in[i], idx)); };
    if (k == OpKind::Where) {
      bool cond = atInt(0) != 0;
      if (intIn)
        r.setInt(flat, atInt(cond ? 1 : 2));
      else
        r.set(flat, at(cond ? 1 : 2));
      return;
    }
    if (k == OpKind::Cast) {
      if (intIn && integral(out))
        r.setInt(flat, atInt(0));
      else if (intIn)
        storeIntAsFloat(r, flat, atInt(0));
      else if (out == DType::Bool)
        r.setInt(flat, at(0) != 0); // NaN is true, as in NumPy
      else
        storeDouble(r, flat, at(0));
      return;
    }
    if (intIn) {
      if (k == OpKind::Clip) {
        r.setInt(flat, std::min(std::max(atInt(0), atInt(1)), atInt(2)));
        return;
      }
      int64_t a = atInt(0);
      if (binaryK) {
        int64_t b = atInt(1);
        if (out == DType::Bool && ir::binaryClass(*binaryK) == ir::BinaryClass::Arith) {
          a = a != 0, b = b != 0;
          if (auto v = boolFn(*binaryK, a, b)) {
            r.setInt(flat, *v);
            return;
          }
        }
        r.setInt(flat, integerFn(*binaryK, a, b));
        return;
      }
      if (out == DType::Bool) {
        a = a != 0;
        if (auto v = boolFn(*unaryK, a)) {
          r.setInt(flat, *v);
          return;
        }
      }
      if (auto v = integerFn(*unaryK, a)) {
        r.setInt(flat, *v);
        return;
      }
    }
    double v;
    if (k == OpKind::Clip)
      v = binaryFn(BinaryOp::Minimum, binaryFn(BinaryOp::Maximum, at(0), at(1)), at(2));
    else if (unaryK)
      v = unaryFn(*unaryK, at(0));
    else
      v = binaryFn(*binaryK, at(0), at(1));
    storeDouble(r, flat, v);
  });
  return r;
}

std::vector<size_t> reduceAxes(const RefContext &c, size_t rank) {
  if (!c.op.has("axis")) {
    std::vector<size_t> all(rank);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  std::vector<size_t> out;
  for (int64_t a : c.listAttr("axis"))
    out.push_back(axisOf(a));
  return out;
}

// Folds the values of each output position's reduction group, streaming over x in
// row-major order (so the first of equal candidates is the first index). Floats
// accumulate in double (exact enough to be the reference for any f32 sum the kernels'
// blocked accumulation computes), integers exactly in int64 with wrapping.
Tensor reduce(const RefContext &c, DType out) {
  const Tensor &x = *c.in[0];
  auto axes = reduceAxes(c, x.shape.size());
  bool keep = c.boolAttr("keepdims", false);
  std::vector<bool> reduced(x.shape.size(), false);
  for (size_t a : axes)
    reduced[a] = true;
  Shape kept, outShape;
  for (size_t k = 0; k < x.shape.size(); ++k) {
    kept.push_back(reduced[k] ? 1 : x.shape[k]);
    if (!reduced[k])
      outShape.push_back(x.shape[k]);
    else if (keep)
      outShape.push_back(1);
  }
  size_t groups = numelOf(kept);
  OpKind k = c.op.kind;
  bool intIn = integral(x.dtype);
  if (x.numel() == 0 && groups > 0 && (k == OpKind::Max || k == OpKind::Min || k == OpKind::Argmax || k == OpKind::Argmin))
    throw DataError(ir::emptyReductionMessage(c.op, x.typeText()));
  struct Acc {
    double f = 0;
    uint64_t i = 0;
    int64_t at = -1, n = 0;
  };
  std::vector<Acc> acc(groups);
  bool prod = k == OpKind::Prod;
  if (prod)
    for (Acc &a : acc)
      a.f = 1, a.i = 1;
  // The group of x's element `idx` and its flat position among the reduced axes.
  auto locate = [&](const Shape &idx, size_t &g, int64_t &along) {
    size_t stride = 1;
    int64_t aStride = 1;
    g = 0, along = 0;
    for (size_t a = x.shape.size(); a-- > 0;) {
      if (!reduced[a])
        g += static_cast<size_t>(idx[a]) * stride, stride *= static_cast<size_t>(x.shape[a]);
      else
        along += idx[a] * aStride, aStride *= x.shape[a];
    }
  };
  bool wantMax = k == OpKind::Max || k == OpKind::Argmax || k == OpKind::Logsumexp;
  forEach(x.shape, [&](const Shape &idx, size_t flat) {
    size_t g;
    int64_t along;
    locate(idx, g, along);
    Acc &a = acc[g];
    switch (k) {
    case OpKind::Sum:
    case OpKind::Mean:
      if (intIn)
        a.i += static_cast<uint64_t>(x.getInt(flat));
      else
        a.f += x.get(flat);
      break;
    case OpKind::Prod:
      if (intIn)
        a.i *= static_cast<uint64_t>(x.getInt(flat));
      else
        a.f *= x.get(flat);
      break;
    default: { // max, min, argmax, argmin, and logsumexp's maximum
      bool better;
      if (intIn) {
        int64_t v = x.getInt(flat), best = static_cast<int64_t>(a.i);
        better = a.n == 0 || (wantMax ? v > best : v < best);
        if (better)
          a.i = static_cast<uint64_t>(v);
      } else {
        // NaN wins over any number and the first NaN stays: NumPy propagates NaN in max
        // and min, and argmax/argmin give the index of the first NaN.
        double v = x.get(flat);
        better = a.n == 0 || (std::isnan(v) ? !std::isnan(a.f) : (wantMax ? v > a.f : v < a.f));
        if (better)
          a.f = v;
      }
      if (better)
        a.at = along;
    }
    }
    ++a.n;
  });
  if (k == OpKind::Logsumexp) { // the sum of exp(x - max) of each group
    std::vector<double> sums(groups, 0);
    forEach(x.shape, [&](const Shape &idx, size_t flat) {
      size_t g;
      int64_t along;
      locate(idx, g, along);
      sums[g] += std::exp(x.get(flat) - acc[g].f);
    });
    for (size_t g = 0; g < groups; ++g) {
      double mx = acc[g].n ? acc[g].f : -INFINITY;
      // An all -inf group (a fully masked row) is -inf, a +inf one +inf, as in SciPy.
      acc[g].f = std::isinf(mx) ? mx : mx + std::log(sums[g]);
    }
  }
  Tensor r = Tensor::zeros(out, outShape);
  for (size_t g = 0; g < groups; ++g) {
    const Acc &a = acc[g];
    switch (k) {
    case OpKind::Argmax:
    case OpKind::Argmin: r.setInt(g, a.at); break;
    case OpKind::Mean: // an empty mean is 0 / 0: NaN, as NumPy gives
      r.set(g, (intIn ? static_cast<double>(static_cast<int64_t>(a.i)) : a.f) / static_cast<double>(a.n));
      break;
    default:
      if (intIn && integral(out))
        r.setInt(g, static_cast<int64_t>(a.i));
      else
        storeDouble(r, g, intIn ? static_cast<double>(static_cast<int64_t>(a.i)) : a.f);
    }
  }
  return r;
}

Tensor softmax(const RefContext &c, bool logarithm) {
  const Tensor &x = *c.in[0];
  size_t axis = axisOf(c.intAttr("axis"));
  Tensor r = Tensor::zeros(x.dtype, x.shape);
  Shape st = stridesOf(x.shape);
  int64_t n = x.shape[axis];
  forEach(x.shape, [&](const Shape &idx, size_t flat) {
    if (idx[axis] != 0)
      return; // one pass per row along the axis
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < n; ++j)
      mx = binaryFn(BinaryOp::Maximum, mx, x.get(flat + j * st[axis])); // NaN propagates, as the kernels' maximum
    for (int64_t j = 0; j < n; ++j)
      sum += std::exp(x.get(flat + j * st[axis]) - mx);
    for (int64_t j = 0; j < n; ++j) {
      double v = x.get(flat + j * st[axis]) - mx;
      // (log_softmax is x - logsumexp(x), which is x - inf where the max is +inf)
      r.set(flat + j * st[axis], logarithm ? v - (mx == INFINITY ? 0 : std::log(sum)) : std::exp(v) / sum);
    }
  });
  return r;
}

// attention: the unfused ops' values, each rounded to f32 where that op would store it
// (the scores after q k^T, after the scale, the mask and the causal fill; the
// probabilities), so that the op computes exactly what the ops it replaced did.
Tensor attention(const RefContext &c) {
  const Tensor &q = *c.in[0], &k = *c.in[1], &v = *c.in[2];
  const Tensor *mask = c.in.size() > 3 ? c.in[3] : nullptr;
  size_t r = q.shape.size();
  int64_t tq = q.shape[r - 2], d = q.shape[r - 1], tk = k.shape[r - 2], dv = v.shape[r - 1];
  Shape batch(q.shape.begin(), q.shape.end() - 2), outShape = batch;
  outShape.push_back(tq);
  outShape.push_back(dv);
  Tensor out = Tensor::zeros(q.dtype, outShape);
  double scale = c.floatAttr("scale", 1.0), fill = static_cast<float>(c.floatAttr("fill", -1e9));
  bool causal = c.boolAttr("causal", false);
  std::vector<double> s(static_cast<size_t>(tk));
  forEach(batch, [&](const Shape &idx, size_t b) {
    size_t qo = b * tq * d, ko = b * tk * d, vo = b * tk * dv, oo = b * tq * dv;
    for (int64_t i = 0; i < tq; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < tk; ++j) {
        double dot = 0;
        for (int64_t p = 0; p < d; ++p)
          dot += q.get(qo + i * d + p) * k.get(ko + j * d + p);
        double x = static_cast<float>(static_cast<float>(dot) * scale);
        if (mask) {
          Shape at = idx;
          at.push_back(i);
          at.push_back(j);
          x = static_cast<float>(x + mask->get(broadcastFlat(*mask, at)));
        }
        if (causal && j > i)
          x = fill;
        s[j] = x;
        mx = binaryFn(BinaryOp::Maximum, mx, x);
      }
      for (int64_t j = 0; j < tk; ++j)
        sum += std::exp(s[j] - mx);
      for (int64_t j = 0; j < tk; ++j)
        s[j] = static_cast<float>(std::exp(s[j] - mx) / sum);
      for (int64_t y = 0; y < dv; ++y) {
        double acc = 0;
        for (int64_t j = 0; j < tk; ++j)
          acc += s[j] * v.get(vo + j * dv + y);
        out.set(oo + i * dv + y, acc);
      }
    }
  });
  return out;
}

Tensor matmul(const RefContext &c) {
  Tensor a = *c.in[0], b = *c.in[1];
  bool vecA = a.shape.size() == 1, vecB = b.shape.size() == 1;
  if (vecA)
    a.shape.insert(a.shape.begin(), 1);
  if (vecB)
    b.shape.push_back(1);
  int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back(), n = b.shape.back();
  if (b.shape[b.shape.size() - 2] != k)
    throw DataError(fmt::format("matmul of {} and {}: inner dims differ", a.typeText(), b.typeText()));
  Tensor ba = a, bb = b;
  ba.shape.resize(a.shape.size() - 2);
  bb.shape.resize(b.shape.size() - 2);
  Shape batch = broadcastShape({&ba, &bb});
  Shape outShape = batch;
  outShape.push_back(m);
  outShape.push_back(n);
  Tensor r = Tensor::zeros(a.dtype, outShape);
  size_t aMat = static_cast<size_t>(m * k), bMat = static_cast<size_t>(k * n);
  forEach(batch, [&](const Shape &idx, size_t flat) {
    size_t ao = broadcastFlat(ba, idx) * aMat, bo = broadcastFlat(bb, idx) * bMat;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        size_t to = flat * m * n + i * n + j;
        if (integral(a.dtype)) { // exact, wrapping
          uint64_t s = 0;
          for (int64_t p = 0; p < k; ++p)
            s += static_cast<uint64_t>(a.getInt(ao + i * k + p)) * static_cast<uint64_t>(b.getInt(bo + p * n + j));
          r.setInt(to, static_cast<int64_t>(s));
          continue;
        }
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += a.get(ao + i * k + p) * b.get(bo + p * n + j);
        r.set(to, s);
      }
  });
  Shape finalShape = batch;
  if (!vecA)
    finalShape.push_back(m);
  if (!vecB)
    finalShape.push_back(n);
  r.shape = finalShape;
  return r;
}

Tensor conv2d(const RefContext &c) {
  const Tensor &x = *c.in[0], &w = *c.in[1];
  int64_t stride = c.intAttr("stride"), pad = c.intAttr("padding"), dil = c.intAttr("dilation"), groups = c.intAttr("groups");
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t O = w.shape[0], CG = w.shape[1], KH = w.shape[2], KW = w.shape[3];
  if (C != CG * groups || O % groups != 0)
    throw DataError(fmt::format("conv2d of {} with weights {} and {} groups", x.typeText(), w.typeText(), groups));
  int64_t OH = (H + 2 * pad - dil * (KH - 1) - 1) / stride + 1, OW = (W + 2 * pad - dil * (KW - 1) - 1) / stride + 1;
  Tensor r = Tensor::zeros(x.dtype, {N, O, std::max<int64_t>(OH, 0), std::max<int64_t>(OW, 0)});
  int64_t perGroup = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = 0;
          int64_t g = o / perGroup;
          for (int64_t ci = 0; ci < CG; ++ci)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * stride - pad + kh * dil, iw = ow * stride - pad + kw * dil;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                  continue;
                s += x.get(((n * C + g * CG + ci) * H + ih) * W + iw) * w.get(((o * CG + ci) * KH + kh) * KW + kw);
              }
          r.set(((n * O + o) * OH + oh) * OW + ow, s);
        }
  return r;
}

Tensor pool2d(const RefContext &c, bool isMax) {
  const Tensor &x = *c.in[0];
  int64_t k = c.intAttr("kernel"), pad = c.intAttr("padding"), stride = c.intAttr("stride");
  if (stride == 0)
    stride = k;
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
  Tensor r = Tensor::zeros(x.dtype, {N, C, std::max<int64_t>(OH, 0), std::max<int64_t>(OW, 0)});
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = isMax ? -INFINITY : 0;
        for (int64_t kh = 0; kh < k; ++kh)
          for (int64_t kw = 0; kw < k; ++kw) {
            int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
            bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
            double v = inside ? x.get((nc * H + ih) * W + iw) : (isMax ? -INFINITY : 0.0);
            acc = isMax ? binaryFn(BinaryOp::Maximum, acc, v) : acc + v; // NaN propagates
          }
        // Average pooling counts the padding, as PyTorch's default does.
        r.set((nc * OH + oh) * OW + ow, isMax ? acc : acc / static_cast<double>(k * k));
      }
  return r;
}

// A copy of x with a new shape (same element count).
Tensor reshaped(const Tensor &x, Shape shape) {
  if (numelOf(shape) != x.numel())
    throw DataError(fmt::format("cannot reshape {} into {} elements", x.typeText(), numelOf(shape)));
  Tensor r = x;
  r.shape = std::move(shape);
  return r;
}

// Data movement copies bytes: i64 values past 2^53 must not pass through double.
void copyValue(Tensor &dst, size_t d, const Tensor &src, size_t s) {
  size_t w = dtypeBytes(src.dtype);
  std::memcpy(dst.data() + d * w, src.data() + s * w, w);
}

Tensor permute(const Tensor &x, const std::vector<size_t> &perm) {
  Shape outShape;
  for (size_t p : perm)
    outShape.push_back(x.shape[p]);
  Tensor r = Tensor::zeros(x.dtype, outShape);
  Shape st = stridesOf(x.shape);
  forEach(outShape, [&](const Shape &idx, size_t flat) {
    size_t src = 0;
    for (size_t k = 0; k < perm.size(); ++k)
      src += static_cast<size_t>(idx[k] * st[perm[k]]);
    copyValue(r, flat, x, src);
  });
  return r;
}

Tensor concat(const std::vector<const Tensor *> &xs, size_t axis) {
  Shape outShape = xs[0]->shape;
  outShape[axis] = 0;
  for (const Tensor *t : xs)
    outShape[axis] += t->shape[axis];
  Tensor r = Tensor::zeros(xs[0]->dtype, outShape);
  int64_t offset = 0;
  Shape rst = stridesOf(outShape);
  for (const Tensor *t : xs) {
    forEach(t->shape, [&](const Shape &idx, size_t flat) {
      size_t dst = 0;
      for (size_t k = 0; k < idx.size(); ++k)
        dst += static_cast<size_t>((idx[k] + (k == axis ? offset : 0)) * rst[k]);
      copyValue(r, dst, *t, flat);
    });
    offset += t->shape[axis];
  }
  return r;
}

// A slice along one axis: positions [start, start + len).
Tensor sliceAxis(const Tensor &x, size_t axis, int64_t start, int64_t len) {
  Shape outShape = x.shape;
  outShape[axis] = len;
  Tensor r = Tensor::zeros(x.dtype, outShape);
  Shape st = stridesOf(x.shape);
  forEach(outShape, [&](const Shape &idx, size_t flat) {
    size_t src = 0;
    for (size_t k = 0; k < idx.size(); ++k)
      src += static_cast<size_t>((idx[k] + (k == axis ? start : 0)) * st[k]);
    copyValue(r, flat, x, src);
  });
  return r;
}

// x with each element of src added at the position take() would have read it from.
Tensor indexAdd(const Tensor &x, const Tensor &idx, const Tensor &src, size_t axis) {
  std::vector<double> sum(x.numel());
  for (size_t k = 0; k < sum.size(); ++k)
    sum[k] = x.get(k);
  Shape st = stridesOf(x.shape), ist = stridesOf(idx.shape);
  size_t ir = idx.shape.size();
  forEach(src.shape, [&](const Shape &s, size_t flat) {
    size_t iflat = 0;
    for (size_t k = 0; k < ir; ++k)
      iflat += static_cast<size_t>(s[axis + k] * ist[k]);
    int64_t j = idx.getInt(iflat), d = x.shape[axis];
    if (j < -d || j >= d)
      throw DataError(fmt::format("index {} is out of range for dim {} of {} (size {})", j, axis, x.typeText(), d));
    size_t dst = static_cast<size_t>((j < 0 ? j + d : j) * st[axis]);
    for (size_t k = 0; k < axis; ++k)
      dst += static_cast<size_t>(s[k] * st[k]);
    for (size_t k = axis + 1; k < x.shape.size(); ++k)
      dst += static_cast<size_t>(s[k - 1 + ir] * st[k]);
    sum[dst] += src.get(flat);
  });
  Tensor r = Tensor::zeros(x.dtype, x.shape);
  for (size_t k = 0; k < sum.size(); ++k)
    r.set(k, sum[k]);
  return r;
}

Tensor take(const Tensor &x, const Tensor &idx, size_t axis) {
  Shape outShape(x.shape.begin(), x.shape.begin() + static_cast<long>(axis));
  outShape.insert(outShape.end(), idx.shape.begin(), idx.shape.end());
  outShape.insert(outShape.end(), x.shape.begin() + static_cast<long>(axis) + 1, x.shape.end());
  Tensor r = Tensor::zeros(x.dtype, outShape);
  Shape st = stridesOf(x.shape);
  size_t ir = idx.shape.size();
  forEach(outShape, [&](const Shape &o, size_t flat) {
    Shape ii(o.begin() + static_cast<long>(axis), o.begin() + static_cast<long>(axis + ir));
    size_t iflat = 0;
    Shape ist = stridesOf(idx.shape);
    for (size_t k = 0; k < ir; ++k)
      iflat += static_cast<size_t>(ii[k] * ist[k]);
    int64_t j = idx.getInt(iflat);
    if (j < 0)
      j += x.shape[axis];
    if (j < 0 || j >= x.shape[axis])
      throw DataError(fmt::format("index {} is out of range for dim {} of {} (size {})", idx.getInt(iflat), axis,
                                  x.typeText(), x.shape[axis]));
    size_t src = 0;
    for (size_t k = 0; k < axis; ++k)
      src += static_cast<size_t>(o[k] * st[k]);
    src += static_cast<size_t>(j * st[axis]);
    for (size_t k = axis + 1; k < x.shape.size(); ++k)
      src += static_cast<size_t>(o[k - 1 + ir] * st[k]);
    copyValue(r, flat, x, src);
  });
  return r;
}

Tensor topk(const RefContext &c, int64_t k, size_t axis, Tensor &indices) {
  const Tensor &x = *c.in[0];
  if (k < 0 || k > x.shape[axis])
    throw DataError(fmt::format("topk asks for k = {} but dim {} of {} is {}", k, axis, x.typeText(), x.shape[axis]));
  Shape outShape = x.shape;
  outShape[axis] = k;
  Tensor r = Tensor::zeros(x.dtype, outShape);
  indices = Tensor::zeros(DType::I64, outShape);
  Shape st = stridesOf(x.shape), ost = stridesOf(outShape);
  forEach(x.shape, [&](const Shape &idx, size_t flat) {
    if (idx[axis] != 0)
      return;
    std::vector<int64_t> order(static_cast<size_t>(x.shape[axis]));
    std::iota(order.begin(), order.end(), 0);
    // Descending; NaN counts as the largest value (as torch.topk), which also keeps the
    // order strict-weak (a plain > with NaN is undefined behaviour in std::stable_sort).
    // Integers compare exactly.
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      size_t ia = flat + a * st[axis], ib = flat + b * st[axis];
      if (integral(x.dtype))
        return x.getInt(ia) > x.getInt(ib);
      double va = x.get(ia), vb = x.get(ib);
      return std::isnan(va) ? !std::isnan(vb) : (!std::isnan(vb) && va > vb);
    });
    size_t base = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      base += static_cast<size_t>(idx[d] * ost[d]);
    for (int64_t j = 0; j < k; ++j) {
      copyValue(r, base + j * ost[axis], x, flat + order[j] * st[axis]);
      indices.setInt(base + j * ost[axis], order[j]);
    }
  });
  return r;
}

// x[subscripts]: per axis a start, stop, step (dynamic ones from the trailing operands, in
// axis order) and a flag for a point index that drops the axis.
// Where x[subscripts] reads: per axis of x the first position, the count and the step (a
// point axis has count 1 and `drop` set). Run-time bounds are the operands from `next` on
// (index: after x; index_grad: after x and g).
struct SliceGeometry {
  Shape begin, count, step;
  std::vector<bool> drop;
};

SliceGeometry sliceGeometry(const RefContext &c, const Tensor &x, size_t next) {
  ir::IndexAttrs ix = ir::IndexAttrs::of(c.op);
  const ir::DimList &starts = ix.starts, &stops = ix.stops;
  SliceGeometry sg;
  for (size_t a = 0; a < x.shape.size(); ++a) {
    int64_t d = x.shape[a];
    auto bound = [&](sym::ExprRef e) -> int64_t {
      int64_t v = e ? c.dim(e) : c.in.at(next++)->getInt(0);
      return (!e && v < 0) ? v + d : v; // static negatives were normalized by sema
    };
    if (ix.isPoint(a)) {
      int64_t value = starts[a] ? c.dim(starts[a]) : c.in.at(next++)->getInt(0);
      int64_t p = ix.resolvePoint(a, c.op.operands[0]->type.dims[a], value, d, x.typeText());
      sg.begin.push_back(p), sg.count.push_back(1), sg.step.push_back(1), sg.drop.push_back(true);
      continue;
    }
    int64_t b = std::clamp<int64_t>(bound(starts[a]), 0, d);
    int64_t e = std::clamp<int64_t>(bound(stops[a]), 0, d);
    int64_t s = ix.step(a);
    sg.begin.push_back(b), sg.count.push_back(e > b ? (e - b + s - 1) / s : 0), sg.step.push_back(s), sg.drop.push_back(false);
  }
  return sg;
}

Tensor index(const RefContext &c) {
  const Tensor &x = *c.in[0];
  SliceGeometry sg = sliceGeometry(c, x, 1);
  Tensor r = Tensor::zeros(x.dtype, sg.count);
  Shape st = stridesOf(x.shape);
  forEach(sg.count, [&](const Shape &idx, size_t flat) {
    size_t src = 0;
    for (size_t a = 0; a < idx.size(); ++a)
      src += static_cast<size_t>((sg.begin[a] + idx[a] * sg.step[a]) * st[a]);
    copyValue(r, flat, x, src);
  });
  Shape outShape;
  for (size_t a = 0; a < sg.count.size(); ++a)
    if (!sg.drop[a])
      outShape.push_back(sg.count[a]);
  r.shape = outShape;
  return r;
}

// The list attribute `name` with the positions given by runtime operands filled in.
Shape valueList(const RefContext &c, const std::string &name) {
  const auto &dims = c.op.get<ir::DimList>(name);
  Shape out(dims.size());
  std::set<int64_t> fromOperands;
  size_t next = 0;
  if (c.op.has("value_dims")) {
    auto positions = c.listAttr("value_dims");
    next = c.in.size() - positions.size();
    for (int64_t p : positions) {
      out[static_cast<size_t>(p)] = c.in[next++]->getInt(0), fromOperands.insert(p);
      if (out[static_cast<size_t>(p)] < 0) // (a shape's -1 is a constant; a value is a size)
        throw DataError(fmt::format("'{}' of '{}' has the negative entry {}, given by a value", name, ir::opInfo(c.op.kind).spelling,
                                    out[static_cast<size_t>(p)]));
    }
  }
  for (size_t k = 0; k < dims.size(); ++k)
    if (!fromOperands.count(static_cast<int64_t>(k)))
      out[k] = c.dim(dims[k]);
  for (int64_t d : out)
    if (d < 0 && name != "shape")
      throw DataError(fmt::format("'{}' of '{}' has the negative entry {}", name, ir::opInfo(c.op.kind).spelling, d));
  return out;
}

} // namespace


int64_t RefContext::dim(sym::ExprRef e) const {
  auto v = sym::evaluate(e, binding);
  if (!v)
    throw InternalError(fmt::format("the dim {} is unbound when op '{}' runs", e->str(), ir::opInfo(op.kind).spelling));
  return *v;
}

int64_t RefContext::intAttr(const std::string &k) const {
  const ir::Attr &a = op.attrs.at(k);
  if (auto *i = std::get_if<int64_t>(&a))
    return *i;
  return dim(std::get<sym::ExprRef>(a));
}

std::vector<int64_t> RefContext::listAttr(const std::string &k) const {
  std::vector<int64_t> out;
  for (sym::ExprRef e : op.get<ir::DimList>(k))
    out.push_back(dim(e));
  return out;
}

bool RefContext::boolAttr(const std::string &k, bool dflt) const { return op.has(k) ? op.get<bool>(k) : dflt; }
double RefContext::floatAttr(const std::string &k, double dflt) const { return op.has(k) ? op.get<double>(k) : dflt; }

std::vector<Tensor> runRefOp(const RefContext &c) {
  const ir::Op &op = c.op;
  DType outType = op.results.empty() ? DType::F32 : op.results[0]->type.dtype;
  auto one = [](Tensor t) { return std::vector<Tensor>{std::move(t)}; };
  switch (op.kind) {
  case OpKind::Param:
  case OpKind::If:
  case OpKind::For:
  case OpKind::While:
  case OpKind::Fused:
  case OpKind::AssertDims: throw InternalError("structural ops are run by the interpreter itself");
  case OpKind::Grad: throw InternalError("a grad op reached the interpreter: the differentiate pass did not run");
  case OpKind::Constant: {
    Tensor t = Tensor::zeros(outType, {});
    storeDouble(t, 0, op.get<double>("value"));
    return one(t);
  }
  case OpKind::DimValue: {
    Tensor t = Tensor::zeros(outType, {});
    t.setInt(0, c.dim(op.get<sym::ExprRef>("value")));
    return one(t);
  }
  case OpKind::Zeros:
  case OpKind::Ones:
  case OpKind::Full: {
    Tensor t = Tensor::zeros(outType, valueList(c, "shape"));
    double v = op.kind == OpKind::Zeros ? 0 : op.kind == OpKind::Ones ? 1 : c.floatAttr("value", 0);
    for (size_t k = 0; k < t.numel(); ++k)
      storeDouble(t, k, v); // full([n], 1e30, dtype = i32) saturates, as a cast
    return one(t);
  }
  case OpKind::Arange: {
    int64_t start = 0, step = 1, count = 0;
    if (op.has("count")) {
      count = c.intAttr("count");
      start = c.intAttr("start");
      step = c.intAttr("step");
    } else {
      start = c.in[0]->getInt(0);
      step = c.in[2]->getInt(0);
      if (step == 0)
        throw DataError("arange with a step of 0");
      // In 128 bits: stop - start may pass 2^63.
      __int128 span = __int128(c.in[1]->getInt(0)) - start, s = step;
      __int128 n = s > 0 ? (span > 0 ? (span + s - 1) / s : 0) : (span < 0 ? (-span - s - 1) / -s : 0);
      if (n > std::numeric_limits<int64_t>::max())
        throw DataError(fmt::format("arange from {} to {} by {} has more than 2^63 elements", start, c.in[1]->getInt(0), step));
      count = static_cast<int64_t>(n);
    }
    Tensor t = Tensor::zeros(outType, {count});
    for (int64_t k = 0; k < count; ++k) // exact in 128 bits, and within 64 (between start and stop)
      t.setInt(static_cast<size_t>(k), static_cast<int64_t>(__int128(start) + __int128(k) * step));
    return one(t);
  }
  case OpKind::Neg: case OpKind::Abs: case OpKind::Exp: case OpKind::Log: case OpKind::Sqrt: case OpKind::Rsqrt:
  case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Relu: case OpKind::Gelu: case OpKind::Silu: case OpKind::Erf:
  case OpKind::Sin: case OpKind::Cos: case OpKind::Floor: case OpKind::Ceil: case OpKind::Round: case OpKind::Sign:
  case OpKind::Not: case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div: case OpKind::Mod:
  case OpKind::Pow: case OpKind::Maximum: case OpKind::Minimum: case OpKind::Eq: case OpKind::Ne: case OpKind::Lt:
  case OpKind::Le: case OpKind::Gt: case OpKind::Ge: case OpKind::And: case OpKind::Or: case OpKind::Where:
  case OpKind::Clip: case OpKind::Cast:
    return one(elementwise(c, outType));
  case OpKind::Sum: case OpKind::Mean: case OpKind::Max: case OpKind::Min: case OpKind::Prod: case OpKind::Argmax:
  case OpKind::Argmin: case OpKind::Logsumexp:
    return one(reduce(c, outType));
  case OpKind::Softmax: return one(softmax(c, false));
  case OpKind::LogSoftmax: return one(softmax(c, true));
  case OpKind::Matmul: return one(matmul(c));
  case OpKind::Attention: return one(attention(c));
  case OpKind::Conv2d: return one(conv2d(c));
  case OpKind::MaxPool2d: return one(pool2d(c, true));
  case OpKind::AvgPool2d: return one(pool2d(c, false));
  case OpKind::Reshape: {
    Shape target = valueList(c, "shape");
    // In 128 bits: sizes from values may be anything up to 2^63, and their product more. As
    // in NumPy, the nonzero ones must multiply below 2^63 even when another is 0, and a -1
    // beside a 0 has no single value.
    __int128 known = 1;
    int inferred = -1;
    bool empty = false;
    for (size_t k = 0; k < target.size(); ++k)
      if (target[k] == -1)
        inferred = static_cast<int>(k);
      else if (target[k] == 0)
        empty = true;
      else if ((known *= target[k]) > std::numeric_limits<int64_t>::max())
        throw DataError(fmt::format("cannot reshape {} into {}: its sizes multiply past 2^63", c.in[0]->typeText(),
                                    rt::shapeText(c.in[0]->dtype, target)));
    if (empty && inferred >= 0)
      throw DataError(fmt::format("cannot reshape {} into {} with -1 beside a size of 0: no one size fits the -1",
                                  c.in[0]->typeText(), rt::shapeText(c.in[0]->dtype, target)));
    const int64_t n = static_cast<int64_t>(c.in[0]->numel());
    known = empty ? 0 : known;
    if (inferred >= 0)
      target[inferred] = known > n ? 0 : n / static_cast<int64_t>(known);
    __int128 count = known * (inferred >= 0 ? target[inferred] : 1);
    if (count != n) // (the compiled devices' words)
      throw DataError(fmt::format("cannot reshape {} ({} elements) into {} elements", c.in[0]->typeText(), n,
                                  static_cast<int64_t>(count)));
    rt::checkedBytes(c.in[0]->dtype, target, fmt::format("the result of {}", ir::opWhere(op))); // (0 elements, bytes past 64 bits)
    return one(reshaped(*c.in[0], target));
  }
  case OpKind::Transpose:
  case OpKind::Prepack: { // its value is the transpose; only the kernels' layout differs
    size_t r = c.in[0]->shape.size();
    std::vector<size_t> perm(r);
    std::iota(perm.begin(), perm.end(), 0);
    if (op.has("perm")) {
      auto p = c.listAttr("perm");
      for (size_t k = 0; k < r; ++k)
        perm[k] = axisOf(p[k]);
    } else {
      std::swap(perm[r - 1], perm[r - 2]);
    }
    return one(permute(*c.in[0], perm));
  }
  case OpKind::BroadcastTo: {
    Tensor t = Tensor::zeros(c.in[0]->dtype, valueList(c, "shape"));
    forEach(t.shape, [&](const Shape &idx, size_t flat) { copyValue(t, flat, *c.in[0], broadcastFlat(*c.in[0], idx)); });
    return one(t);
  }
  case OpKind::Unsqueeze: {
    Shape s = c.in[0]->shape;
    s.insert(s.begin() + static_cast<long>(axisOf(c.intAttr("axis"))), 1);
    return one(reshaped(*c.in[0], s));
  }
  case OpKind::Squeeze: {
    const Shape &in = c.in[0]->shape;
    std::set<size_t> axes;
    if (op.has("axis"))
      for (int64_t a : c.listAttr("axis"))
        axes.insert(axisOf(a));
    Shape s;
    for (size_t k = 0; k < in.size(); ++k)
      if (op.has("axis") ? !axes.count(k) : in[k] != 1)
        s.push_back(in[k]);
    return one(reshaped(*c.in[0], s));
  }
  case OpKind::Concat: return one(concat(c.in, axisOf(c.intAttr("axis"))));
  case OpKind::Stack: {
    size_t axis = axisOf(c.intAttr("axis"));
    std::vector<Tensor> parts;
    for (const Tensor *t : c.in) {
      Shape s = t->shape;
      s.insert(s.begin() + static_cast<long>(axis), 1);
      parts.push_back(reshaped(*t, s));
    }
    std::vector<const Tensor *> ptrs;
    for (Tensor &t : parts)
      ptrs.push_back(&t);
    return one(concat(ptrs, axis));
  }
  case OpKind::Split: {
    const Tensor &x = *c.in[0];
    size_t axis = axisOf(c.intAttr("axis"));
    auto parts = c.listAttr("parts");
    std::vector<int64_t> sizes = parts.size() == 1 ? std::vector<int64_t>(static_cast<size_t>(parts[0]), x.shape[axis] / parts[0]) : parts;
    std::vector<Tensor> out;
    int64_t offset = 0;
    for (int64_t s : sizes) {
      out.push_back(sliceAxis(x, axis, offset, s));
      offset += s;
    }
    return out;
  }
  case OpKind::Flatten: {
    const Shape &in = c.in[0]->shape;
    if (in.empty())
      return one(reshaped(*c.in[0], {1}));
    size_t s = axisOf(c.intAttr("start"));
    Shape out(in.begin(), in.begin() + static_cast<long>(s));
    out.push_back(static_cast<int64_t>(numelOf(Shape(in.begin() + static_cast<long>(s), in.end()))));
    return one(reshaped(*c.in[0], out));
  }
  case OpKind::Pad: {
    const Tensor &x = *c.in[0];
    auto pads = c.listAttr("pads");
    Shape outShape = x.shape;
    for (size_t k = 0; k < pads.size() / 2; ++k)
      outShape[k] += pads[2 * k] + pads[2 * k + 1];
    Tensor r = Tensor::zeros(x.dtype, outShape);
    double value = c.floatAttr("value", 0);
    Shape st = stridesOf(x.shape);
    forEach(outShape, [&](const Shape &idx, size_t flat) {
      size_t src = 0;
      bool inside = true;
      for (size_t k = 0; k < idx.size(); ++k) {
        int64_t i = idx[k] - (k < pads.size() / 2 ? pads[2 * k] : 0);
        inside = inside && i >= 0 && i < x.shape[k];
        src += static_cast<size_t>(i * st[k]);
      }
      if (inside)
        copyValue(r, flat, x, src);
      else
        r.set(flat, value);
    });
    return one(r);
  }
  case OpKind::Take: return one(take(*c.in[0], *c.in[1], axisOf(c.intAttr("axis"))));
  case OpKind::Embedding: return one(take(*c.in[0], *c.in[1], 0));
  case OpKind::IndexAdd: return one(indexAdd(*c.in[0], *c.in[1], *c.in[2], axisOf(c.intAttr("axis"))));
  case OpKind::OneHot: {
    const Tensor &ids = *c.in[0];
    int64_t depth = c.intAttr("depth");
    Shape s = ids.shape;
    s.push_back(depth);
    Tensor r = Tensor::zeros(outType, s);
    for (size_t k = 0; k < ids.numel(); ++k) {
      int64_t j = ids.getInt(k);
      if (j >= 0 && j < depth) // out-of-range ids give an all-zero row
        r.set(k * static_cast<size_t>(depth) + static_cast<size_t>(j), 1);
    }
    return one(r);
  }
  case OpKind::Topk: {
    size_t axis = axisOf(c.intAttr("axis"));
    int64_t k = op.has("k") ? c.intAttr("k") : c.in[1]->getInt(0);
    Tensor indices;
    Tensor values = topk(c, k, axis, indices);
    return {values, indices};
  }
  case OpKind::Resize: {
    const Tensor &x = *c.in[0];
    Shape size = valueList(c, "size"), outShape = x.shape;
    std::copy(size.begin(), size.end(), outShape.end() - static_cast<long>(size.size()));
    Tensor r = Tensor::zeros(x.dtype, outShape);
    Shape st = stridesOf(x.shape);
    forEach(outShape, [&](const Shape &idx, size_t flat) { // nearest neighbour
      size_t src = 0;
      for (size_t k = 0; k < idx.size(); ++k)
        src += static_cast<size_t>((outShape[k] == x.shape[k] ? idx[k] : idx[k] * x.shape[k] / outShape[k]) * st[k]);
      copyValue(r, flat, x, src);
    });
    return one(r);
  }
  case OpKind::Nonzero: {
    const Tensor &m = *c.in[0];
    std::vector<Shape> hits;
    forEach(m.shape, [&](const Shape &idx, size_t flat) {
      if (m.get(flat) != 0)
        hits.push_back(idx);
    });
    int64_t rank = static_cast<int64_t>(m.shape.size());
    Tensor r = Tensor::zeros(DType::I64, {static_cast<int64_t>(hits.size()), rank});
    for (size_t h = 0; h < hits.size(); ++h)
      for (int64_t k = 0; k < rank; ++k)
        r.setInt(h * static_cast<size_t>(rank) + static_cast<size_t>(k), hits[h][static_cast<size_t>(k)]);
    return one(r);
  }
  case OpKind::MaskedSelect: {
    Shape shape = broadcastShape(c.in);
    std::vector<std::pair<const Tensor *, size_t>> picked;
    forEach(shape, [&](const Shape &idx, size_t) {
      if (c.in[1]->get(broadcastFlat(*c.in[1], idx)) != 0)
        picked.push_back({c.in[0], broadcastFlat(*c.in[0], idx)});
    });
    Tensor r = Tensor::zeros(c.in[0]->dtype, {static_cast<int64_t>(picked.size())});
    for (size_t k = 0; k < picked.size(); ++k)
      copyValue(r, k, *picked[k].first, picked[k].second);
    return one(r);
  }
  case OpKind::Unique: {
    const Tensor &x = *c.in[0];
    std::vector<size_t> order(x.numel());
    std::iota(order.begin(), order.end(), 0);
    // Ascending with NaNs last and collapsed into one, as np.unique (equal_nan=True);
    // integers compare exactly.
    bool exact = integral(x.dtype);
    auto less = [&](size_t a, size_t b) {
      if (exact)
        return x.getInt(a) < x.getInt(b);
      double va = x.get(a), vb = x.get(b);
      return std::isnan(vb) ? !std::isnan(va) : (!std::isnan(va) && va < vb);
    };
    std::stable_sort(order.begin(), order.end(), less);
    std::vector<size_t> keep;
    for (size_t k : order)
      if (keep.empty() || less(keep.back(), k))
        keep.push_back(k);
    Tensor r = Tensor::zeros(x.dtype, {static_cast<int64_t>(keep.size())});
    for (size_t k = 0; k < keep.size(); ++k)
      copyValue(r, k, x, keep[k]);
    return one(r);
  }
  case OpKind::Index: return one(index(c));
  case OpKind::IndexGrad: {
    SliceGeometry sg = sliceGeometry(c, *c.in[0], 2);
    return one(indexScatter(*c.in[0], *c.in[1], sg.begin, sg.count, sg.step));
  }
  case OpKind::Conv2dGradInput:
  case OpKind::Conv2dGradWeight: {
    rt::Conv2dParams p{c.intAttr("stride"), c.intAttr("padding"), c.intAttr("dilation"), c.intAttr("groups")};
    if (op.kind == OpKind::Conv2dGradInput)
      return one(conv2dGradInput(*c.in[0], *c.in[1], *c.in[2], p));
    return one(conv2dGradWeight(*c.in[0], *c.in[1], *c.in[2], p));
  }
  case OpKind::MaxPool2dGrad:
    return one(maxPool2dGrad(*c.in[0], *c.in[1], c.intAttr("kernel"), c.intAttr("stride"), c.intAttr("padding")));
  case OpKind::AvgPool2dGrad:
    return one(avgPool2dGrad(*c.in[0], *c.in[1], c.intAttr("kernel"), c.intAttr("stride"), c.intAttr("padding")));
  case OpKind::ScatterAdd: return one(scatterAdd(*c.in[0], *c.in[1], *c.in[2], axisOf(c.intAttr("axis"))));
  case OpKind::MaskedScatter: return one(maskedScatter(*c.in[0], *c.in[1], *c.in[2]));
  case OpKind::ResizeGrad: return one(resizeGrad(*c.in[0], *c.in[1]));
  case OpKind::Dropout:
    return one(rt::dropoutOp(*c.in[0], c.floatAttr("p", 0.1), c.boolAttr("training", false),
                             static_cast<uint64_t>(op.has("stream") ? c.intAttr("stream") : 0), c.in.size() > 1 ? c.in[1] : nullptr));
  }
  throw InternalError("unknown op kind");
}

} // namespace dnnc::interp

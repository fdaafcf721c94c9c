// The registry table, builtin signatures, and every op's dtype and shape rule.
#include "ir/graph/OpRegistry.h"

#include "ir/graph/GradRules.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace dnnc::ir {
namespace {

using sym::ExprRef;
using sym::Rel;

ExprRef one() { return sym::constant(1); }
bool isLiteralOne(ExprRef d) { return d->asConst() == 1; }

std::vector<ParamSpec> parseSignature(const char *text) {
  std::vector<ParamSpec> out;
  std::string s(text);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    std::string item = s.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? s.size() : end + 1;
    item.erase(0, item.find_first_not_of(' '));
    size_t colon = item.find(':'), eq = item.find('=');
    ParamSpec p;
    p.name = item.substr(0, colon);
    std::string kind = item.substr(colon + 1, eq == std::string::npos ? std::string::npos : eq - colon - 1);
    static const std::map<std::string, ParamSpec::Kind> kinds = {
        {"T", ParamSpec::Kind::Tensor}, {"Ts", ParamSpec::Kind::TensorList}, {"I", ParamSpec::Kind::Int},
        {"Is", ParamSpec::Kind::IntList}, {"Vs", ParamSpec::Kind::ValueList}, {"V", ParamSpec::Kind::Value},
        {"F", ParamSpec::Kind::Float}, {"B", ParamSpec::Kind::Bool}, {"D", ParamSpec::Kind::DType}};
    p.kind = kinds.at(kind);
    if (eq != std::string::npos)
      p.defaultText = item.substr(eq + 1);
    out.push_back(std::move(p));
  }
  return out;
}

// ---- shared pieces ----------------------------------------------------------------

// NumPy broadcasting of two shapes, checking each aligned pair through the analyzer.
DimList broadcastShapes(const RuleContext &c, const DimList &a, const DimList &b, int ia, int ib) {
  size_t rank = std::max(a.size(), b.size());
  DimList out(rank);
  for (size_t k = 1; k <= rank; ++k) { // k: distance from the right
    ExprRef da = k <= a.size() ? a[a.size() - k] : nullptr;
    ExprRef db = k <= b.size() ? b[b.size() - k] : nullptr;
    size_t axis = rank - k;
    if (!da || !db) {
      out[axis] = da ? da : db;
      continue;
    }
    if (da == db || c.analyzer.canProve(da, Rel::EQ, db))
      out[axis] = da;
    else if (isLiteralOne(da))
      out[axis] = db;
    else if (isLiteralOne(db))
      out[axis] = da;
    else
      c.requireEqual(da, db, fmt::format("dim {}", axis), ia, ib);
  }
  return out;
}

std::string typeText(const RuleContext &c, int i) { return c.in(i).str(); }

// ---- dtype rules -------------------------------------------------------------------

DType applyDTypeRule(const RuleContext &c, DTypeRule rule) {
  // The entries of a list given by i64[] values (reshape(x, [a, -1])) are the trailing
  // operands: sizes, not data, so they take no part.
  size_t data = c.numInputs() - (c.op.has("value_dims") ? c.op.get<DimList>("value_dims").size() : 0);
  auto requireSame = [&](size_t from) {
    for (size_t i = from + 1; i < data; ++i)
      if (c.in(i).dtype != c.in(from).dtype)
        c.error(DiagKind::DType,
                fmt::format("cannot {} {} and {}: element types {} and {} differ", opVerb(c.op.kind),
                            typeText(c, from), typeText(c, i), dtypeName(c.in(from).dtype), dtypeName(c.in(i).dtype)),
                {}, "use cast(x, dtype) to convert one side");
    return c.numInputs() > from ? c.in(from).dtype : DType::F32;
  };
  switch (rule) {
  case DTypeRule::Same: return requireSame(0);
  case DTypeRule::Numeric: { // bools have no quotient, remainder or power (NumPy's give ints or floats)
    DType d = requireSame(0);
    if (d == DType::Bool)
      c.error(DiagKind::DType, fmt::format("cannot {} {}: bool has no {}", opVerb(c.op.kind), typeText(c, 0),
                                           c.op.kind == OpKind::Pow ? "power" : c.op.kind == OpKind::Mod ? "remainder" : "quotient"),
              {}, "use cast(x, i32) or cast(x, f32) first");
    return d;
  }
  case DTypeRule::Float: {
    DType d = requireSame(0);
    if (!isFloat(d))
      c.error(DiagKind::DType, fmt::format("'{}' needs a floating-point tensor, not {}", opInfo(c.op.kind).spelling,
                                           typeText(c, 0)), {}, "use cast(x, f32) first");
    return d;
  }
  case DTypeRule::Compare: requireSame(0); return DType::Bool;
  case DTypeRule::Logical:
    for (size_t i = 0; i < c.numInputs(); ++i)
      if (c.in(i).dtype != DType::Bool)
        c.error(DiagKind::DType, fmt::format("'{}' needs bool operands, not {}", opInfo(c.op.kind).spelling, typeText(c, (int)i)));
    return DType::Bool;
  case DTypeRule::Where:
    if (c.in(0).dtype != DType::Bool)
      c.error(DiagKind::DType, fmt::format("the condition of 'where' must be bool, not {}", typeText(c, 0)));
    return requireSame(1);
  case DTypeRule::I64: return DType::I64;
  case DTypeRule::First: return c.in(0).dtype;
  case DTypeRule::Attr: return c.op.get<DType>("dtype");
  case DTypeRule::None: return DType::F32;
  }
  return DType::F32;
}

// ---- shape rules -------------------------------------------------------------------

std::vector<TensorType> elementwiseRule(const RuleContext &c, DType dt) {
  DimList shape = c.in(0).dims;
  for (size_t i = 1; i < c.numInputs(); ++i)
    shape = broadcastShapes(c, shape, c.in(i).dims, 0, static_cast<int>(i));
  return {{dt, shape}};
}

std::vector<size_t> reduceAxes(const RuleContext &c, size_t rank) {
  std::set<size_t> axes;
  if (!c.has("axis")) {
    for (size_t i = 0; i < rank; ++i)
      axes.insert(i);
  } else {
    const DimList &given = c.listAttr("axis");
    std::vector<size_t> normalized = c.axisListAttr("axis", rank);
    for (size_t i = 0; i < normalized.size(); ++i)
      if (!axes.insert(normalized[i]).second)
        c.error(DiagKind::Range, fmt::format("axis {} is repeated", given[i]->str()));
  }
  return {axes.begin(), axes.end()};
}

std::vector<TensorType> reduceRule(const RuleContext &c, DType dt) {
  const DimList &in = c.in(0).dims;
  auto axes = reduceAxes(c, in.size());
  bool keep = c.has("keepdims") && c.op.get<bool>("keepdims");
  DimList out;
  for (size_t i = 0; i < in.size(); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced)
      out.push_back(in[i]);
    else if (keep)
      out.push_back(one());
  }
  return {{dt, out}};
}

std::vector<TensorType> softmaxRule(const RuleContext &c, DType dt) {
  c.axisAttr("axis", c.in(0).rank());
  return {{dt, c.in(0).dims}};
}

std::vector<TensorType> matmulRule(const RuleContext &c, DType dt) {
  DimList a = c.in(0).dims, b = c.in(1).dims;
  if (a.empty() || b.empty())
    c.error(DiagKind::Rank, fmt::format("cannot multiply {} and {}: matmul needs operands of rank 1 or more",
                                        typeText(c, 0), typeText(c, 1)));
  bool vecA = a.size() == 1, vecB = b.size() == 1;
  if (vecA)
    a.insert(a.begin(), one());
  if (vecB)
    b.push_back(one());
  ExprRef k1 = a[a.size() - 1], k2 = b[b.size() - 2];
  if (!(k1 == k2 || c.analyzer.canProve(k1, Rel::EQ, k2)))
    c.requireEqual(k1, k2, "the inner dims", 0, 1);
  DimList batch = broadcastShapes(c, DimList(a.begin(), a.end() - 2), DimList(b.begin(), b.end() - 2), 0, 1);
  if (!vecA)
    batch.push_back(a[a.size() - 2]);
  if (!vecB)
    batch.push_back(b[b.size() - 1]);
  return {{dt, batch}};
}

void requireRank(const RuleContext &c, int i, size_t rank, const char *layout) {
  if (c.in(i).rank() != rank)
    c.error(DiagKind::Rank, fmt::format("'{}' needs a rank-{} tensor ({}), not {}", opInfo(c.op.kind).spelling, rank,
                                        layout, typeText(c, i)));
}

ExprRef windowOut(const RuleContext &c, ExprRef in, ExprRef kernel, int64_t stride, int64_t pad, int64_t dilation) {
  // (H + 2*padding - dilation*(K - 1) - 1) / stride + 1
  ExprRef span = sym::add(sym::mul(sym::constant(dilation), sym::sub(kernel, one())), one());
  ExprRef padded = sym::add(in, sym::constant(2 * pad));
  if (c.analyzer.canProve(padded, Rel::LT, span))
    c.error(DiagKind::Shape, fmt::format("the window of {} does not fit in a spatial dim of {} (padded: {})", span->str(),
                                         in->str(), padded->str()));
  return c.analyzer.simplify(sym::add(sym::floorDiv(sym::sub(padded, span), sym::constant(stride)), one()));
}

int64_t positiveAttr(const RuleContext &c, const char *name, int64_t min) {
  int64_t v = c.intAttr(name);
  if (v < min)
    c.error(DiagKind::Range, fmt::format("{} of '{}' must be at least {}, not {}", name, opInfo(c.op.kind).spelling, min, v));
  return v;
}

std::vector<TensorType> conv2dRule(const RuleContext &c, DType dt) {
  requireRank(c, 0, 4, "N, C, H, W");
  requireRank(c, 1, 4, "O, C / groups, KH, KW");
  int64_t stride = positiveAttr(c, "stride", 1), pad = positiveAttr(c, "padding", 0);
  int64_t dil = positiveAttr(c, "dilation", 1), groups = positiveAttr(c, "groups", 1);
  const DimList &x = c.in(0).dims, &w = c.in(1).dims;
  c.requireEqual(x[1], sym::mul(w[1], sym::constant(groups)), "the input channels", 0, 1);
  return {{dt, {x[0], w[0], windowOut(c, x[2], w[2], stride, pad, dil), windowOut(c, x[3], w[3], stride, pad, dil)}}};
}

std::vector<TensorType> pool2dRule(const RuleContext &c, DType dt) {
  requireRank(c, 0, 4, "N, C, H, W");
  int64_t k = positiveAttr(c, "kernel", 1), pad = positiveAttr(c, "padding", 0);
  int64_t stride = c.intAttr("stride") == 0 ? k : positiveAttr(c, "stride", 1);
  const DimList &x = c.in(0).dims;
  ExprRef kd = sym::constant(k);
  return {{dt, {x[0], x[1], windowOut(c, x[2], kd, stride, pad, 1), windowOut(c, x[3], kd, stride, pad, 1)}}};
}

ExprRef product(const DimList &dims) {
  ExprRef p = one();
  for (ExprRef d : dims)
    p = sym::mul(p, d);
  return p;
}

std::vector<TensorType> reshapeRule(const RuleContext &c, DType dt) {
  DimList target = c.listAttr("shape");
  int inferred = -1;
  DimList known;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i]->asConst() == -1) {
      if (inferred >= 0)
        c.error(DiagKind::Shape, "reshape can infer only one dim; the shape has two -1 entries");
      inferred = static_cast<int>(i);
    } else {
      known.push_back(target[i]);
    }
  }
  ExprRef inCount = product(c.in(0).dims), outCount = product(known);
  if (c.has("value_dims")) {
    // Sizes given by i64[] values (fresh dims here): the count is checked when it runs,
    // and a -1 beside them is fresh too.
    if (inferred >= 0)
      target[inferred] = c.freshDim("S");
  } else if (c.has("count_checked")) {
    // The gradient's reverse of such a reshape: back to the shape whose count was checked.
  } else if (inferred >= 0) {
    if (outCount->asConst() == std::optional<int64_t>(0)) // (not "divisible by 0")
      c.error(DiagKind::Shape, fmt::format("cannot reshape {} with -1 beside a size of 0: no one size fits the -1 (NumPy refuses it too)",
                                           typeText(c, 0)));
    ExprRef q = c.analyzer.simplify(sym::floorDiv(inCount, outCount));
    if (!c.analyzer.canProve(sym::mul(q, outCount), Rel::EQ, inCount))
      c.error(DiagKind::Unprovable,
              fmt::format("cannot reshape {} with -1: {} elements are not provably divisible by {}", typeText(c, 0),
                          inCount->str(), outCount->str()),
              {}, "add an `assert` that relates the dims");
    target[inferred] = q;
  } else if (!c.analyzer.canProve(inCount, Rel::EQ, outCount)) {
    bool differ = c.analyzer.canProve(inCount, Rel::NE, outCount);
    c.error(differ ? DiagKind::Shape : DiagKind::Unprovable,
            fmt::format("cannot reshape {} to [{}]: {} elements {} {}", typeText(c, 0), attrText(target).substr(1, attrText(target).size() - 2),
                        inCount->str(), differ ? "are not" : "cannot be proved equal to", outCount->str()),
            {}, differ ? "" : fmt::format("add `assert {} == {};` if they are always equal", inCount->str(), outCount->str()));
  }
  return {{dt, target}};
}

std::vector<TensorType> transposeRule(const RuleContext &c, DType dt) {
  const DimList &in = c.in(0).dims;
  DimList out = in;
  if (!c.has("perm")) {
    if (in.size() < 2)
      c.error(DiagKind::Rank, fmt::format("transpose(x) swaps the last two dims and needs rank 2 or more, not {}", typeText(c, 0)));
    std::swap(out[in.size() - 1], out[in.size() - 2]);
    return {{dt, out}};
  }
  const DimList &given = c.listAttr("perm");
  if (given.size() != in.size())
    c.error(DiagKind::Rank, fmt::format("the permutation has {} entries but {} has rank {}", given.size(), typeText(c, 0), in.size()));
  std::vector<size_t> perm = c.axisListAttr("perm", in.size());
  std::set<size_t> seen;
  for (size_t i = 0; i < perm.size(); ++i) {
    size_t a = perm[i];
    if (!seen.insert(a).second)
      c.error(DiagKind::Range, fmt::format("axis {} appears twice in the permutation", a));
    out[i] = in[a];
  }
  return {{dt, out}};
}

std::vector<TensorType> broadcastToRule(const RuleContext &c, DType dt) {
  const DimList &in = c.in(0).dims, &target = c.listAttr("shape");
  if (in.size() > target.size())
    c.error(DiagKind::Rank, fmt::format("cannot broadcast {} to rank {}", typeText(c, 0), target.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    ExprRef d = in[in.size() - 1 - i], t = target[target.size() - 1 - i];
    if (!isLiteralOne(d))
      c.requireEqual(d, t, fmt::format("dim {} of the target", target.size() - 1 - i), 0, 0);
  }
  return {{dt, target}};
}

std::vector<TensorType> unsqueezeRule(const RuleContext &c, DType dt) {
  DimList out = c.in(0).dims;
  size_t a = c.axisAttr("axis", out.size() + 1);
  out.insert(out.begin() + static_cast<long>(a), one());
  return {{dt, out}};
}

std::vector<TensorType> squeezeRule(const RuleContext &c, DType dt) {
  const DimList &in = c.in(0).dims;
  DimList out;
  if (!c.has("axis")) {
    for (ExprRef d : in)
      if (!isLiteralOne(d))
        out.push_back(d);
    return {{dt, out}};
  }
  auto axes = reduceAxes(c, in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) {
      out.push_back(in[i]);
    } else if (!c.analyzer.canProve(in[i], Rel::EQ, one())) {
      c.error(DiagKind::Shape, fmt::format("cannot squeeze dim {} of {}: it is {}, not 1", i, typeText(c, 0), in[i]->str()));
    }
  }
  return {{dt, out}};
}

std::vector<TensorType> concatRule(const RuleContext &c, DType dt) {
  const DimList &first = c.in(0).dims;
  size_t a = c.axisAttr("axis", first.size());
  DimList out = first;
  for (size_t i = 1; i < c.numInputs(); ++i) {
    const DimList &d = c.in(i).dims;
    if (d.size() != first.size())
      c.error(DiagKind::Rank, fmt::format("cannot concatenate {} and {}: ranks differ", typeText(c, 0), typeText(c, (int)i)));
    for (size_t k = 0; k < d.size(); ++k)
      if (k != a)
        c.requireEqual(first[k], d[k], fmt::format("dim {}", k), 0, static_cast<int>(i));
    out[a] = sym::add(out[a], d[a]);
  }
  return {{dt, out}};
}

std::vector<TensorType> stackRule(const RuleContext &c, DType dt) {
  const DimList &first = c.in(0).dims;
  for (size_t i = 1; i < c.numInputs(); ++i) {
    if (c.in(i).rank() != first.size())
      c.error(DiagKind::Rank, fmt::format("cannot stack {} and {}: ranks differ", typeText(c, 0), typeText(c, (int)i)));
    for (size_t k = 0; k < first.size(); ++k)
      c.requireEqual(first[k], c.in(i).dims[k], fmt::format("dim {}", k), 0, static_cast<int>(i));
  }
  DimList out = first;
  size_t a = c.axisAttr("axis", first.size() + 1);
  out.insert(out.begin() + static_cast<long>(a), sym::constant(static_cast<int64_t>(c.numInputs())));
  return {{dt, out}};
}

std::vector<TensorType> splitRule(const RuleContext &c, DType dt) {
  const DimList &in = c.in(0).dims;
  size_t a = c.axisAttr("axis", in.size());
  const DimList &parts = c.listAttr("parts");
  std::vector<TensorType> out;
  if (parts.size() == 1) {
    int64_t n = *parts[0]->asConst();
    if (n < 1)
      c.error(DiagKind::Range, fmt::format("split needs at least one part, not {}", n));
    ExprRef piece = c.analyzer.simplify(sym::floorDiv(in[a], sym::constant(n)));
    if (!c.analyzer.canProve(sym::mul(piece, sym::constant(n)), Rel::EQ, in[a]))
      c.error(DiagKind::Unprovable, fmt::format("cannot split dim {} of {} into {} equal parts: {} is not provably divisible by {}",
                                                a, typeText(c, 0), n, in[a]->str(), n),
              {}, "pass a list of sizes to split unevenly");
    for (int64_t i = 0; i < n; ++i) {
      DimList d = in;
      d[a] = piece;
      out.push_back({dt, d});
    }
    return out;
  }
  ExprRef total = sym::constant(0);
  for (ExprRef p : parts) {
    DimList d = in;
    d[a] = p;
    total = sym::add(total, p);
    out.push_back({dt, d});
  }
  c.requireEqual(in[a], total, fmt::format("dim {} and the sum of the split sizes", a), 0, 0);
  return out;
}

std::vector<TensorType> flattenRule(const RuleContext &c, DType dt) {
  const DimList &in = c.in(0).dims;
  if (in.empty())
    return {{dt, {one()}}};
  size_t s = c.axisAttr("start", in.size());
  DimList out(in.begin(), in.begin() + static_cast<long>(s));
  out.push_back(product(DimList(in.begin() + static_cast<long>(s), in.end())));
  return {{dt, out}};
}

std::vector<TensorType> padRule(const RuleContext &c, DType dt) {
  DimList out = c.in(0).dims;
  const DimList &pads = c.listAttr("pads");
  if (pads.size() % 2 != 0 || pads.size() / 2 > out.size())
    c.error(DiagKind::Rank, fmt::format("pad needs (before, after) pairs for at most {} dims, got {} numbers", out.size(), pads.size()));
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    if (c.analyzer.canProve(pads[2 * i], Rel::LT, sym::constant(0)) || c.analyzer.canProve(pads[2 * i + 1], Rel::LT, sym::constant(0)))
      c.error(DiagKind::Range, "pad widths must be non-negative");
    out[i] = sym::add(out[i], sym::add(pads[2 * i], pads[2 * i + 1]));
  }
  return {{dt, out}};
}

std::vector<TensorType> takeRule(const RuleContext &c, DType dt) {
  const DimList &x = c.in(0).dims;
  if (!isInteger(c.in(1).dtype))
    c.error(DiagKind::DType, fmt::format("indices must be i32 or i64, not {}", typeText(c, 1)));
  size_t a = c.op.kind == OpKind::Embedding ? 0 : c.axisAttr("axis", x.size());
  if (x.empty())
    c.error(DiagKind::Rank, fmt::format("cannot index into the scalar {}", typeText(c, 0)));
  DimList out(x.begin(), x.begin() + static_cast<long>(a));
  out.insert(out.end(), c.in(1).dims.begin(), c.in(1).dims.end());
  out.insert(out.end(), x.begin() + static_cast<long>(a) + 1, x.end());
  return {{dt, out}};
}

// index_add(x, idx, src, axis): x's type; src has the shape take(x, idx, axis) has.
std::vector<TensorType> indexAddRule(const RuleContext &c, DType dt) {
  if (!isFloat(c.in(0).dtype) || c.in(2).dtype != c.in(0).dtype)
    c.error(DiagKind::DType, fmt::format("index_add adds a float src to x of its dtype, not {} to {}", typeText(c, 2), typeText(c, 0)));
  const DimList &x = c.in(0).dims, &src = c.in(2).dims;
  if (!isInteger(c.in(1).dtype))
    c.error(DiagKind::DType, fmt::format("indices must be i32 or i64, not {}", typeText(c, 1)));
  size_t a = c.axisAttr("axis", x.size());
  DimList want(x.begin(), x.begin() + static_cast<long>(a));
  want.insert(want.end(), c.in(1).dims.begin(), c.in(1).dims.end());
  want.insert(want.end(), x.begin() + static_cast<long>(a) + 1, x.end());
  if (want.size() != src.size())
    c.error(DiagKind::Rank, fmt::format("index_add needs src of rank {} (x's axes with idx's in place of axis {}), not {}",
                                        want.size(), a, typeText(c, 2)));
  for (size_t i = 0; i < want.size(); ++i)
    c.requireEqual(src[i], want[i], fmt::format("dim {} of src", i), 2, i >= a && i < a + c.in(1).rank() ? 1 : 0);
  return {{dt, x}};
}

// The backward ops (conv2d_grad_input, ...): the type of the forward operand the gradient
// flows to, their first operand. The differentiate pass builds them from typed forward ops
// only, so there is nothing left to check.
std::vector<TensorType> likeFirstRule(const RuleContext &c, DType dt) { return {{dt, c.in(0).dims}}; }

// dropout(x, p): x's shape, a float x and 0 <= p <= 1.
std::vector<TensorType> dropoutRule(const RuleContext &c, DType dt) {
  if (!isFloat(c.in(0).dtype))
    c.error(DiagKind::DType, fmt::format("dropout needs a float tensor, not {}", typeText(c, 0)));
  double p = c.op.get<double>("p");
  if (!(p >= 0 && p <= 1))
    c.error(DiagKind::Range, fmt::format("dropout's p is a probability in [0, 1], not {}", p));
  return {{dt, c.in(0).dims}};
}

std::vector<TensorType> oneHotRule(const RuleContext &c, DType dt) {
  if (!isInteger(c.in(0).dtype))
    c.error(DiagKind::DType, fmt::format("one_hot needs integer ids, not {}", typeText(c, 0)));
  DimList out = c.in(0).dims;
  out.push_back(c.dimAttr("depth"));
  return {{dt, out}};
}

std::vector<TensorType> topkRule(const RuleContext &c, DType dt) {
  DimList out = c.in(0).dims;
  if (out.empty())
    c.error(DiagKind::Rank, "topk needs a tensor of rank 1 or more");
  size_t a = c.axisAttr("axis", out.size());
  ExprRef k = c.has("k") ? c.dimAttr("k") : c.freshDim("K");
  if (c.analyzer.canProve(k, Rel::GT, out[a]))
    c.error(DiagKind::Range, fmt::format("topk asks for k = {} but dim {} of {} is only {}", k->str(), a, typeText(c, 0), out[a]->str()));
  out[a] = k;
  return {{dt, out}, {DType::I64, out}};
}

std::vector<TensorType> resizeRule(const RuleContext &c, DType dt) {
  DimList out = c.in(0).dims;
  const DimList &size = c.listAttr("size");
  if (size.size() > out.size())
    c.error(DiagKind::Rank, fmt::format("resize to {} dims, but {} has rank {}", size.size(), typeText(c, 0), out.size()));
  std::copy(size.begin(), size.end(), out.end() - static_cast<long>(size.size()));
  return {{dt, out}};
}

std::vector<TensorType> nonzeroRule(const RuleContext &c, DType dt) {
  return {{dt, {c.freshDim("N"), sym::constant(static_cast<int64_t>(c.in(0).rank()))}}};
}

std::vector<TensorType> maskedSelectRule(const RuleContext &c, DType dt) {
  if (c.in(1).dtype != DType::Bool)
    c.error(DiagKind::DType, fmt::format("the mask must be bool, not {}", typeText(c, 1)));
  broadcastShapes(c, c.in(0).dims, c.in(1).dims, 0, 1);
  return {{dt, {c.freshDim("N")}}};
}

std::vector<TensorType> uniqueRule(const RuleContext &c, DType dt) { return {{dt, {c.freshDim("U")}}}; }

std::vector<TensorType> creationRule(const RuleContext &c, DType dt) { return {{dt, c.listAttr("shape")}}; }

std::vector<TensorType> arangeRule(const RuleContext &c, DType dt) {
  return {{dt, {c.has("count") ? c.dimAttr("count") : c.freshDim("A")}}};
}

// x[subscripts]: per input axis a start, stop and step (null: given by a runtime operand)
// and a flag saying a point index drops the axis.
std::vector<TensorType> indexRule(const RuleContext &c, DType dt) {
  const DimList &in = c.in(0).dims;
  IndexAttrs ix = IndexAttrs::of(c.op);
  const DimList &starts = ix.starts, &stops = ix.stops, &steps = ix.steps;
  DimList out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (ix.isPoint(i)) {
      if (starts[i] && (c.analyzer.canProve(starts[i], Rel::GE, in[i]) || c.analyzer.canProve(starts[i], Rel::LT, sym::constant(0))))
        c.error(DiagKind::Range, fmt::format("index {} is out of range for dim {} of {} (size {})", starts[i]->str(), i,
                                             typeText(c, 0), in[i]->str()));
      continue;
    }
    if (!starts[i] || !stops[i]) {
      out.push_back(c.freshDim("S"));
      continue;
    }
    // NumPy's bounds: each clamps into [0, size] (sema has already added the size to
    // negative constants, so -10 on 7 elements arrives here as -3 and clamps to 0).
    // A bound provably >= 0 needs no clamp at 0. A start past the end needs no clamp at the
    // size either: the stop is at most the size, so the length is 0 both ways (steps are
    // positive). Each clamp would name the input dim once more, and a chain of slices
    // (x[1:][1:]...) would nest it twice a level: text and work exponential in the chain.
    ExprRef zero = sym::constant(0);
    auto nonNegative = [&](ExprRef x) { return c.analyzer.canProve(x, Rel::GE, zero); };
    ExprRef stop = nonNegative(stops[i]) ? sym::min(stops[i], in[i]) : sym::max(zero, sym::min(stops[i], in[i]));
    ExprRef start = nonNegative(starts[i]) ? starts[i] : sym::max(zero, sym::min(starts[i], in[i]));
    ExprRef step = steps[i];
    // A slice provably empty is 0 outright: its general length max(ceil((stop - start) /
    // step), 0) may be beyond the analyzer's proofs, and slicing it again would nest it.
    if (c.analyzer.canProve(stop, Rel::LE, start) && c.analyzer.canProve(step, Rel::GE, one())) {
      out.push_back(zero);
      continue;
    }
    ExprRef len = sym::floorDiv(sym::add(sym::sub(stop, start), sym::sub(step, one())), step);
    len = c.analyzer.simplify(sym::max(len, sym::constant(0)));
    out.push_back(len);
  }
  return {{dt, out}};
}

// attention(q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv] [, mask]) -> [..., Tq, dv]: q, k
// and v share their batch dims (the pass proves it); the mask broadcasts to [..., Tq, Tk].
std::vector<TensorType> attentionRule(const RuleContext &c, DType dt) {
  const DimList &q = c.in(0).dims, &k = c.in(1).dims, &v = c.in(2).dims;
  for (int i = 0; i < 3; ++i)
    if (c.in(i).rank() < 2 || c.in(i).rank() != q.size())
      c.error(DiagKind::Rank, fmt::format("'attention' needs q, k and v of one rank, 2 or more, not {}", typeText(c, i)));
  auto same = [&](ExprRef a, ExprRef b, const std::string &what, int ia, int ib) {
    if (!(a == b || c.analyzer.canProve(a, Rel::EQ, b)))
      c.requireEqual(a, b, what, ia, ib);
  };
  size_t r = q.size();
  for (size_t a = 0; a + 2 < r; ++a) {
    same(q[a], k[a], fmt::format("dim {}", a), 0, 1);
    same(q[a], v[a], fmt::format("dim {}", a), 0, 2);
  }
  same(q[r - 1], k[r - 1], "the head dims", 0, 1);
  same(k[r - 2], v[r - 2], "the key counts", 1, 2);
  DimList out = q;
  out.back() = v.back();
  if (c.op.operands.size() > 3) { // the additive mask broadcasts to the scores
    DimList scores(q.begin(), q.end() - 1);
    scores.push_back(k[r - 2]);
    if (broadcastShapes(c, scores, c.in(3).dims, 0, 3).size() != scores.size())
      c.error(DiagKind::Rank, fmt::format("the mask of 'attention' has more dims than its scores: {}", typeText(c, 3)));
  }
  return {{dt, out}};
}

const std::vector<OpInfo> &table() {
  static const std::vector<OpInfo> ops = [] {
    std::vector<OpInfo> v;
    ShapeRule Declared = nullptr, Elementwise = elementwiseRule, Reduce = reduceRule, Softmax = softmaxRule,
              Matmul = matmulRule, Conv2d = conv2dRule, Pool2d = pool2dRule, Reshape = reshapeRule,
              Transpose = transposeRule, BroadcastTo = broadcastToRule, Unsqueeze = unsqueezeRule,
              Squeeze = squeezeRule, Concat = concatRule, Stack = stackRule, Split = splitRule,
              Flatten = flattenRule, Pad = padRule, Take = takeRule, IndexAdd = indexAddRule, LikeFirst = likeFirstRule, Dropout = dropoutRule, OneHot = oneHotRule, Topk = topkRule,
              Resize = resizeRule, Nonzero = nonzeroRule, MaskedSelect = maskedSelectRule, Unique = uniqueRule,
              Creation = creationRule, Arange = arangeRule, Index = indexRule, Attention = attentionRule;
    using namespace opflag;
    constexpr unsigned NoFlags = 0;
    constexpr GradRule NoGrad = nullptr;
#define OP(name, spelling, cls, dtypeRule, shapeRule, pattern, placement, flags, grad, verb, sig, semantics, numpy, torch) \
  v.push_back({OpKind::name, spelling, ShapeClass::cls, DTypeRule::dtypeRule, shapeRule, OpPattern::pattern,            \
               Placement::placement, flags, grad, verb, parseSignature(sig), semantics, numpy, torch});
#include "ir/graph/Ops.def"
#undef OP
    return v;
  }();
  return ops;
}

} // namespace

int64_t RuleContext::intAttr(const std::string &k) const {
  const Attr &a = op.attrs.at(k);
  if (auto *i = std::get_if<int64_t>(&a))
    return *i;
  auto c = std::get<sym::ExprRef>(a)->asConst();
  if (!c)
    error(DiagKind::NotConstant, fmt::format("'{}' of '{}' must be a constant, not {}", k, opInfo(op.kind).spelling,
                                             std::get<sym::ExprRef>(a)->str()));
  return *c;
}

sym::ExprRef RuleContext::dimAttr(const std::string &k) const {
  const Attr &a = op.attrs.at(k);
  if (auto *i = std::get_if<int64_t>(&a))
    return sym::constant(*i);
  return std::get<sym::ExprRef>(a);
}

size_t RuleContext::axis(int64_t a, size_t rank, const std::string &what) const {
  int64_t r = static_cast<int64_t>(rank);
  if (a < -r || a >= r)
    error(DiagKind::Range, fmt::format("{} {} is out of range for a tensor of rank {} (valid: {} to {})", what, a, rank,
                                       -r, r - 1));
  return static_cast<size_t>(a < 0 ? a + r : a);
}

size_t RuleContext::axisAttr(const std::string &k, size_t rank) const {
  size_t a = axis(intAttr(k), rank, k);
  Attr &slot = normalizedAxes[k] = op.attrs.at(k);
  if (auto *i = std::get_if<int64_t>(&slot))
    *i = static_cast<int64_t>(a);
  else
    slot = sym::constant(static_cast<int64_t>(a));
  return a;
}

std::vector<size_t> RuleContext::axisListAttr(const std::string &k, size_t rank) const {
  std::vector<size_t> out;
  DimList normalized;
  for (ExprRef a : listAttr(k)) {
    out.push_back(axis(*a->asConst(), rank)); // each entry of `perm` is an axis too
    normalized.push_back(sym::constant(static_cast<int64_t>(out.back())));
  }
  normalizedAxes[k] = std::move(normalized);
  return out;
}

void RuleContext::error(DiagKind kind, std::string message, std::vector<std::pair<int, sym::ExprRef>> blame,
                        std::string suggestion) const {
  throw RuleError{kind, std::move(message), std::move(blame), std::move(suggestion)};
}

void RuleContext::requireEqual(sym::ExprRef a, sym::ExprRef b, const std::string &context, int opA, int opB) const {
  if (a == b || analyzer.canProve(a, Rel::EQ, b))
    return;
  std::string types = opA == opB ? in(opA).str() : in(opA).str() + " and " + in(opB).str();
  bool differ = analyzer.canProve(a, Rel::NE, b);
  std::string head = fmt::format("cannot {} {}: {} {} {} here and {} there", opVerb(op.kind), types, context,
                                 context.rfind("dim", 0) == 0 ? "is" : "are", a->str(), b->str());
  if (differ)
    error(DiagKind::Shape, head, {{opA, a}, {opB, b}});
  error(DiagKind::Unprovable, head + ", and they can be proved neither equal nor different", {{opA, a}, {opB, b}},
        fmt::format("add `assert {} == {};` if they are always equal", a->str(), b->str()));
}

const std::vector<OpInfo> &allOps() { return table(); }
const OpInfo &opInfo(OpKind k) { return table().at(static_cast<size_t>(k)); }

bool isElementwise(OpKind k) {
  OpPattern p = opInfo(k).pattern;
  return p == OpPattern::Elementwise || p == OpPattern::Broadcast;
}

bool isReduction(OpKind k) { return opInfo(k).pattern == OpPattern::Reduction; }

bool readsIndices(const Op &op) { return opInfo(op.kind).has(OpFlag::ReadsIdx) && op.operands.size() > 1; }

sym::ExprRef flopCount(const Op &op) {
  auto numel = [](const TensorType &t) {
    sym::ExprRef n = sym::constant(1);
    for (sym::ExprRef d : t.dims)
      n = sym::mul(n, d);
    return n;
  };
  switch (op.kind) {
  case OpKind::Matmul: // each result element: a dot product over the last dim of a
    return sym::mul(sym::constant(2), sym::mul(numel(op.results[0]->type), op.operands[0]->type.dims.back()));
  case OpKind::Attention: { // q k^T and p v as the unfused matmuls count them (causal skips about half)
    const auto &k = op.operands[1]->type.dims;
    sym::ExprRef keys = k[k.size() - 2];
    return sym::mul(sym::constant(2), sym::mul(keys, sym::add(numel(op.operands[0]->type), numel(op.results[0]->type))));
  }
  case OpKind::Conv2d: { // each result element: C/groups * KH * KW multiply-adds, w's dims after the first
    const auto &w = op.operands[1]->type.dims;
    return sym::mul(sym::constant(2), sym::mul(numel(op.results[0]->type), sym::mul(w[1], sym::mul(w[2], w[3]))));
  }
  case OpKind::Fused: {
    sym::ExprRef sum = nullptr;
    for (const Op *member : op.regions[0]->ops)
      if (sym::ExprRef f = flopCount(*member))
        sum = sum ? sym::add(sum, f) : f;
    return sum;
  }
  default: return nullptr;
  }
}

bool isInjective(const Op &op) { return opInfo(op.kind).pattern == OpPattern::Injective && !readsIndices(op); }

const OpInfo *findBuiltin(const std::string &spelling) {
  for (const OpInfo &i : table())
    if (i.callable() && spelling == i.spelling)
      return &i;
  return nullptr;
}

std::string opVerb(OpKind k) {
  const OpInfo &info = opInfo(k);
  return *info.verb ? info.verb : std::string("apply '") + info.spelling + "' to";
}

std::vector<TensorType> inferResultTypes(const RuleContext &ctx) {
  const OpInfo &info = opInfo(ctx.op.kind);
  if (!info.shapeRule)
    throw InternalError(std::string("op '") + info.spelling + "' has no shape rule; sema types it");
  DType dt = applyDTypeRule(ctx, info.dtypeRule);
  return info.shapeRule(ctx, dt);
}

} // namespace dnnc::ir

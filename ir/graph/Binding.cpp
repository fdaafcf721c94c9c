// A graph's dims under a binding (see Binding.h).
#include "ir/graph/Binding.h"
#include "ir/graph/Walk.h"

#include "base/Error.h"
#include "base/Size.h"
#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>

#include <algorithm>

namespace dnnc::ir {
namespace {

std::string bindingText(const Binding &b, const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &n : names)
    if (auto it = b.find(n); it != b.end())
      out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", n, it->second);
  return out;
}

} // namespace

std::string opWhere(const Op &op) {
  const Op *named = &op;
  while (named->kind == OpKind::Fused && !named->regions.empty() && !named->regions[0]->yields.empty() &&
         named->regions[0]->yields[0]->def)
    named = named->regions[0]->yields[0]->def;
  return fmt::format("'{}' at line {}", opInfo(named->kind).spelling, named->loc.begin.line);
}

void rethrowAt(const Op &op, const DataError &e) {
  std::string where = opWhere(op), what = e.what();
  if (what.find(where) != std::string::npos)
    throw e;
  throw DataError(where + ": " + what);
}

std::string unify(const TensorType &expected, const std::vector<int64_t> &actual, Binding &b) {
  if (expected.rank() != actual.size())
    return fmt::format("rank {} where {} was expected", actual.size(), expected.str());
  for (size_t k = 0; k < actual.size(); ++k) {
    sym::ExprRef d = expected.dims[k];
    if (auto v = sym::evaluate(d, b)) {
      if (*v != actual[k])
        return fmt::format("dim {} is {} where {} = {} was expected", k, actual[k], d->str(), *v);
      continue;
    }
    std::vector<std::string> unbound;
    for (const std::string &n : sym::freeVars(d))
      if (!b.count(n))
        unbound.push_back(n);
    if (unbound.size() != 1)
      return fmt::format("dim {} ({}) has several unknown dims", k, d->str());
    // Solve d = actual for the one unknown when d is affine in it: d = a*x + c.
    const std::string &x = unbound[0];
    Binding probe = b;
    probe[x] = 0;
    auto c0 = sym::evaluate(d, probe);
    probe[x] = 1;
    auto c1 = sym::evaluate(d, probe);
    probe[x] = 2;
    auto c2 = sym::evaluate(d, probe);
    if (!c0 || !c1 || !c2 || *c2 - *c1 != *c1 - *c0 || *c1 == *c0 || (actual[k] - *c0) % (*c1 - *c0) != 0)
      return fmt::format("dim {} ({}) cannot be solved for {}", k, d->str(), x);
    b[x] = (actual[k] - *c0) / (*c1 - *c0);
  }
  return "";
}

std::vector<std::optional<int64_t>> expectedShape(const TensorType &t, const Binding &b) {
  std::vector<std::optional<int64_t>> out;
  for (sym::ExprRef d : t.dims)
    out.push_back(sym::evaluate(d, b));
  return out;
}

Binding bindInputs(const Graph &g, const std::vector<const rt::Tensor *> &inputs, Binding b) {
  const auto &args = g.body.args;
  if (inputs.size() != args.size())
    throw DataError(fmt::format("model '{}' takes {} inputs, not {}", g.name, args.size(), inputs.size()));
  for (size_t k = 0; k < args.size(); ++k) {
    if (!inputs[k])
      continue;
    const TensorType &want = args[k]->type;
    const rt::Tensor &got = *inputs[k];
    if (got.dtype != want.dtype)
      throw DataError(fmt::format("input '{}' must be {} but is {}", args[k]->name, want.str(), got.typeText()));
    if (got.shape.size() != want.rank())
      throw DataError(fmt::format("input '{}' must have rank {} ({}) but is {}", args[k]->name, want.rank(), want.str(),
                                  got.typeText()));
    for (size_t a = 0; a < want.rank(); ++a) {
      sym::ExprRef d = want.dims[a];
      Binding trial = b;
      std::string err = unify(TensorType{want.dtype, {d}}, {got.shape[a]}, trial);
      if (!err.empty()) {
        auto v = sym::evaluate(d, b);
        throw DataError(fmt::format("input '{}' is {}: axis {} should be {}{} but is {}", args[k]->name, got.typeText(), a,
                                    d->str(), v && d->str() != std::to_string(*v) ? fmt::format(" = {}", *v) : "",
                                    got.shape[a]));
      }
      b = trial;
    }
  }
  for (auto &[name, value] : b) {
    auto r = g.dimRanges.find(name);
    if (r == g.dimRanges.end())
      throw DataError(fmt::format("model '{}' has no dim '{}'", g.name, name));
    if (value < r->second.first || value > r->second.second) {
      // The input that gave it, where one did (else a --bind did).
      std::string from;
      for (size_t k = 0; k < args.size() && from.empty(); ++k)
        for (size_t a = 0; a < args[k]->type.rank() && inputs[k] && from.empty(); ++a)
          if (args[k]->type.dims[a]->asVar() && args[k]->type.dims[a]->asVar()->name == name)
            from = fmt::format("input '{}' ({}, axis {}): ", args[k]->name, inputs[k]->typeText(), a);
      throw DataError(fmt::format("{}dim {} = {} is outside its range {}..{}", from, name, value, r->second.first,
                                  r->second.second >= sym::Interval::kInf ? std::string("inf") : std::to_string(r->second.second)));
    }
  }
  return b;
}

void bindResult(const Op &op, const Value &v, const rt::Tensor &t, Binding &b) {
  if (t.dtype != v.type.dtype)
    throw InternalError(fmt::format("{} made {} but its type says {}", opWhere(op), t.typeText(), v.type.str()));
  std::string err = unify(v.type, t.shape, b);
  if (err.empty())
    return;
  // Shapes RDP derived from shapes alone must hold; fresh or pinned dims are the user's
  // claims (annotations, declared results) and are checked here.
  bool claim = op.shapeClass == ShapeClass::EDO || op.shapeClass == ShapeClass::ISVDOS;
  if (!claim)
    throw InternalError(fmt::format("{}: the result is {}, but RDP typed it {}: {}", opWhere(op), t.typeText(), v.type.str(), err));
  throw DataError(fmt::format("the result of {} is {}, which contradicts its declared type {}: {}", opWhere(op), t.typeText(),
                              v.type.str(), err));
}

namespace {
[[noreturn]] void throwNegativeDim(const Op &op, const Value &v, size_t k, int64_t value, const Binding &b) {
  sym::ExprRef d = v.type.dims[k];
  throw DataError(fmt::format("the result of {} is {}: dim {} is {} = {}, which is negative at {}", opWhere(op), v.type.str(), k,
                              d->str(), value, bindingText(b, sym::freeVars(d))));
}
} // namespace

void checkDimsNotNegative(const Op &op, const Value &v, const Binding &b) {
  for (size_t k = 0; k < v.type.dims.size(); ++k)
    if (auto value = sym::evaluate(v.type.dims[k], b); value && *value < 0)
      throwNegativeDim(op, v, k, *value, b);
}

bool checkValueSize(const Op &op, const Value &v, const Binding &b) {
  std::vector<int64_t> shape;
  for (size_t k = 0; k < v.type.dims.size(); ++k) {
    sym::ExprRef d = v.type.dims[k];
    auto value = sym::evaluate(d, b);
    if (!value) {
      std::vector<std::string> names = sym::freeVars(d);
      for (const std::string &n : names)
        if (!b.count(n))
          return false;
      throw DataError(fmt::format("the result of {} is {}: dim {} ({}) cannot be computed at {}: it overflows 64 bits or divides by zero or by a negative number",
                                  opWhere(op), v.type.str(), k, d->str(), bindingText(b, names)));
    }
    if (*value < 0)
      throwNegativeDim(op, v, k, *value, b);
    shape.push_back(*value);
  }
  if (rt::bytesWithinLimit(v.type.dtype, shape))
    return true; // the message below is built only for the error
  std::vector<std::string> names;
  for (sym::ExprRef d : v.type.dims)
    for (std::string &n : sym::freeVars(d))
      if (std::find(names.begin(), names.end(), n) == names.end())
        names.push_back(std::move(n));
  rt::checkedBytes(v.type.dtype, shape,
                   names.empty() ? fmt::format("the result of {}", opWhere(op))
                                 : fmt::format("the result of {} ({} at {})", opWhere(op), v.type.str(), bindingText(b, names)));
  return true;
}

std::optional<std::string> failedAssert(const Op &op, const Binding &b) {
  const Attr &lhs = op.attrs.at("lhs");
  sym::ExprRef l = std::holds_alternative<sym::ExprRef>(lhs) ? std::get<sym::ExprRef>(lhs) : sym::var(std::get<std::string>(lhs));
  sym::ExprRef r = op.get<sym::ExprRef>("rhs");
  auto lv = sym::evaluate(l, b), rv = sym::evaluate(r, b);
  if (!lv || !rv)
    return std::nullopt;
  const std::string &rel = op.get<std::string>("rel");
  bool ok = rel == "==" ? *lv == *rv : rel == "!=" ? *lv != *rv : rel == "<" ? *lv < *rv : rel == "<=" ? *lv <= *rv
          : rel == ">" ? *lv > *rv : *lv >= *rv;
  if (ok)
    return "";
  // (a pin is what a declared type makes of a fresh dim: detect.dnn's N pinned to M)
  auto valueOf = [](sym::ExprRef e, int64_t v) { return e->asConst() ? std::string() : fmt::format("{} = {}", e->str(), v); };
  std::string values = valueOf(l, *lv), right = valueOf(r, *rv); // a constant side says nothing more
  values += values.empty() || right.empty() ? right : " and " + right;
  return fmt::format("{} {} {} {} at line {} fails: {}", std::holds_alternative<sym::ExprRef>(lhs) ? "assert" : "the pin",
                     l->str(), rel, r->str(), op.loc.begin.line, values);
}

std::vector<std::pair<const Op *, const Value *>> madeValues(const Op &op) {
  std::vector<std::pair<const Op *, const Value *>> made;
  for (const Value *v : op.results)
    made.push_back({&op, v});
  if (op.kind == OpKind::Fused)
    for (const auto &r : op.regions)
      for (const Op *inner : r->ops)
        for (auto &m : madeValues(*inner))
          made.push_back(m);
  return made;
}

std::optional<std::string> failedAssertOf(const Graph &g, const Binding &b) {
  std::optional<std::string> failed;
  walk(g.body, [&](const Op &op) {
    if (failed || op.kind != OpKind::AssertDims) // (asserts, and pins of fresh dims bound by hand: the REPL's :bind)
      return;
    if (std::optional<std::string> f = failedAssert(op, b); f && !f->empty()) // (nullopt: a dim not bound yet)
      failed = f;
  });
  return failed;
}

void checkAssert(const Op &op, const Binding &b) {
  if (!std::holds_alternative<sym::ExprRef>(op.attrs.at("lhs")))
    return; // a pinned fresh dim: checked where its op's result is bound
  std::optional<std::string> failed = failedAssert(op, b);
  if (!failed)
    throw InternalError(fmt::format("assert at line {} has an unbound dim", op.loc.begin.line));
  if (!failed->empty())
    throw DataError(*failed);
}

void BindingCheck::check(const Graph &g, const Binding &b) {
  if (checkedFor_ == b)
    return;
  checkedFor_.reset();
  checked_.clear();
  // Asserts about input dims come first: they state what the sizes below rely on. Those
  // inside a branch or loop too: the types after them rely on them as well (an assert in an
  // untaken branch once let a kernel read past a buffer the binding made too small).
  if (std::optional<std::string> failed = failedAssertOf(g, b))
    throw DataError(*failed);
  // Only the ops that always run: a branch not taken or a loop that runs no times may
  // hold sizes that would be negative under this binding, and that is no error.
  for (const Op *op : g.body.ops)
    for (auto [maker, v] : madeValues(*op))
      if (op->kind != OpKind::Param && checkValueSize(*maker, *v, b))
        checked_.insert(v);
  checkedFor_ = b;
}

std::string emptyReductionMessage(const Op &op, const std::string &operand) {
  const char *name = op.kind == OpKind::Max ? "maximum" : op.kind == OpKind::Min ? "minimum" : opInfo(op.kind).spelling;
  return fmt::format("'{}' at line {}: zero-size array to reduction operation {} which has no identity (its operand is {})",
                     opInfo(op.kind).spelling, op.loc.begin.line, name, operand);
}

namespace {
void checkEmptyReduction(const Op &op, const Binding &binding) {
  if (op.kind != OpKind::Max && op.kind != OpKind::Min && op.kind != OpKind::Argmax && op.kind != OpKind::Argmin)
    return;
  const TensorType &t = op.operands[0]->type;
  std::vector<bool> reduced(t.dims.size(), !op.has("axis"));
  if (op.has("axis"))
    for (sym::ExprRef a : op.get<DimList>("axis"))
      if (auto v = a->asConst())
        reduced[static_cast<size_t>(*v)] = true; // non-negative after sema
  bool emptyAxis = false, emptyResult = false;
  std::vector<int64_t> shape;
  for (size_t k = 0; k < t.dims.size(); ++k) {
    auto v = sym::evaluate(t.dims[k], binding);
    if (!v)
      return; // not known yet: the op's own run checks
    shape.push_back(*v);
    (reduced[k] ? emptyAxis : emptyResult) |= *v == 0;
  }
  if (emptyAxis && !emptyResult)
    throw DataError(emptyReductionMessage(op, rt::Tensor::view(t.dtype, shape, nullptr).typeText()));
}

// An integer attribute (a constant or a dim expression) under `b`.
std::optional<int64_t> intAttrAt(const Op &op, const std::string &name, const Binding &b) {
  const Attr &a = op.attrs.at(name);
  if (auto *i = std::get_if<int64_t>(&a))
    return *i;
  return sym::evaluate(std::get<sym::ExprRef>(a), b);
}

void checkWindowFits(const Op &op, const Binding &b) {
  bool conv = op.kind == OpKind::Conv2d;
  if (!conv && op.kind != OpKind::MaxPool2d && op.kind != OpKind::AvgPool2d)
    return;
  std::optional<int64_t> pad = intAttrAt(op, "padding", b), dilation = conv ? intAttrAt(op, "dilation", b) : 1;
  for (size_t axis : {2, 3}) {
    std::optional<int64_t> in = sym::evaluate(op.operands[0]->type.dims[axis], b);
    std::optional<int64_t> kernel = conv ? sym::evaluate(op.operands[1]->type.dims[axis], b) : intAttrAt(op, "kernel", b);
    if (!in || !kernel || !pad || !dilation)
      continue; // not known yet: checked when the op runs
    // In 128 bits: the attributes and dims are bounded by sema's checks, but cheaply so.
    __int128 span = __int128(*dilation) * (*kernel - 1) + 1;
    if (*in + 2 * __int128(*pad) < span)
      throw DataError(fmt::format("{}: the window of {} does not fit in a spatial dim of {} = {} (padded: {})", opWhere(op),
                                  static_cast<int64_t>(span), op.operands[0]->type.dims[axis]->str(), *in, *in + 2 * *pad));
  }
}


void checkPadWidths(const Op &op, const Binding &b) {
  if (op.kind != OpKind::Pad)
    return;
  for (sym::ExprRef w : op.get<DimList>("pads"))
    if (auto v = sym::evaluate(w, b); v && *v < 0)
      throw DataError(fmt::format("{}: pad widths must be non-negative, but {} = {} at {}", opWhere(op), w->str(), *v,
                                  bindingText(b, sym::freeVars(w))));
}
// A point index written as a dim expression (x[:, T - 2]) must lie in its axis: known from
// the binding alone, before the op runs (the REPL's :bind took T = 1).
void checkStaticPoints(const Op &op, const Binding &b) {
  if (op.kind != OpKind::Index)
    return;
  IndexAttrs ix = IndexAttrs::of(op);
  const TensorType &t = op.operands[0]->type;
  for (size_t a = 0; a < ix.starts.size(); ++a) {
    if (!ix.isPoint(a) || !ix.starts[a])
      continue;
    std::optional<int64_t> at = sym::evaluate(ix.starts[a], b), size = sym::evaluate(t.dims[a], b);
    if (!at || !size)
      continue; // not known yet: the op's own run checks
    try {
      ix.resolvePoint(a, t.dims[a], *at, *size, t.str(&b));
    } catch (const DataError &e) {
      throw DataError(fmt::format("{}: {}", opWhere(op), e.what()));
    }
  }
}
} // namespace

void checkBeforeRunning(const Op &op, const Binding &b) {
  if (op.kind == OpKind::Fused) {
    for (const Op *inner : op.regions[0]->ops)
      checkBeforeRunning(*inner, b);
    return;
  }
  checkEmptyReduction(op, b);
  checkWindowFits(op, b);
  checkPadWidths(op, b);
  checkStaticPoints(op, b);
}

} // namespace dnnc::ir

// The reference interpreter: regions, control flow, dim binding and shape checking.
#include "ir/interp/Interpreter.h"

#include "frontend/Diagnostics.h"
#include "ir/graph/OpRegistry.h"
#include "ir/interp/RefOps.h"
#include "runtime/Limits.h"
#include "runtime/Size.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <regex>
#include <unordered_map>
#include <unordered_set>

namespace dnnc::interp {
namespace {

using rt::DataError;
using rt::Tensor;

// "'conv2d' at line 3"; a fused group is named by the op that makes its first result, as
// the user wrote it.
std::string where(const ir::Op &op) {
  const ir::Op *named = &op;
  while (named->kind == ir::OpKind::Fused && !named->regions.empty() && !named->regions[0]->yields.empty() &&
         named->regions[0]->yields[0]->def)
    named = named->regions[0]->yields[0]->def;
  return fmt::format("'{}' at line {}", ir::opInfo(named->kind).spelling, named->loc.begin.line);
}

// Makes `actual` agree with `expected` under `b`: known dims must match, and a dim with one
// unbound name in it (T, or T0 + iters) binds that name. Returns an error text or "".
std::string unify(const ir::TensorType &expected, const std::vector<int64_t> &actual, Binding &b) {
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

std::string bindingText(const Binding &b, const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &n : names)
    if (auto it = b.find(n); it != b.end())
      out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", n, it->second);
  return out;
}

// Checks the sizes a value will have under `b` before anything is allocated for it: a dim
// that evaluates negative or past 64 bits, or a tensor past the byte limit, comes from the
// user's bindings or data, so it is a DataError naming the op, the dim and the binding.
// Returns false when a dim of `v` is not bound yet (a size an EDO op or a loop decides).
bool checkValueSize(const ir::Op &op, const ir::Value &v, const Binding &b) {
  std::vector<int64_t> shape;
  for (size_t k = 0; k < v.type.dims.size(); ++k) {
    sym::ExprRef d = v.type.dims[k];
    auto value = sym::evaluate(d, b);
    if (!value) {
      std::vector<std::string> names = sym::freeVars(d);
      for (const std::string &n : names)
        if (!b.count(n))
          return false;
      throw DataError(fmt::format("the result of {} is {}: dim {} ({}) cannot be computed at {}: it overflows 64 bits or divides by zero",
                                  where(op), v.type.str(), k, d->str(), bindingText(b, names)));
    }
    if (*value < 0)
      throw DataError(fmt::format("the result of {} is {}: dim {} is {} = {}, which is negative at {}", where(op), v.type.str(),
                                  k, d->str(), *value, bindingText(b, sym::freeVars(d))));
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
                   names.empty() ? fmt::format("the result of {}", where(op))
                                 : fmt::format("the result of {} ({} at {})", where(op), v.type.str(), bindingText(b, names)));
  return true;
}

void checkAssert(const ir::Op &op, const Binding &b) {
  if (!std::holds_alternative<sym::ExprRef>(op.attrs.at("lhs")))
    return; // a pinned fresh dim: checked where its op's result is bound
  sym::ExprRef l = op.get<sym::ExprRef>("lhs"), r = op.get<sym::ExprRef>("rhs");
  auto lv = sym::evaluate(l, b), rv = sym::evaluate(r, b);
  if (!lv || !rv)
    throw InternalError(fmt::format("assert at line {} has an unbound dim", op.loc.begin.line));
  const std::string &rel = op.get<std::string>("rel");
  bool ok = rel == "==" ? *lv == *rv : rel == "!=" ? *lv != *rv : rel == "<" ? *lv < *rv : rel == "<=" ? *lv <= *rv
          : rel == ">" ? *lv > *rv : *lv >= *rv;
  if (!ok)
    throw DataError(fmt::format("assert {} {} {} at line {} fails: {} = {} and {} = {}", l->str(), rel, r->str(),
                                op.loc.begin.line, l->str(), *lv, r->str(), *rv));
}

class Run {
public:
  Run(const ir::Graph &g, Binding &b, size_t &count, const OpRunner &runner, const HostAccess &beforeHostAccess,
      const std::unordered_set<const ir::Value *> &sizesChecked)
      : graph_(g), binding_(b), count_(count), runner_(runner), beforeHostAccess_(beforeHostAccess),
        sizesChecked_(sizesChecked) {}

  void hostAccess(const std::vector<const Tensor *> &reads) const {
    if (beforeHostAccess_)
      beforeHostAccess_(reads);
  }
  std::vector<const Tensor *> valuesOf(const std::vector<ir::Value *> &vs) const {
    std::vector<const Tensor *> out;
    for (const ir::Value *v : vs)
      out.push_back(&values.at(v));
    return out;
  }
  std::unordered_map<const ir::Value *, Tensor> values;

  void region(const ir::Region &r, Binding &b) {
    for (const ir::Op *op : r.ops)
      execute(*op, b);
  }

  void setResult(const ir::Op &op, const ir::Value *v, Tensor t, Binding &b) {
    if (t.dtype != v->type.dtype)
      throw InternalError(fmt::format("{} made {} but its type says {}", where(op), t.typeText(), v->type.str()));
    std::string err = unify(v->type, t.shape, b);
    if (!err.empty()) {
      // Shapes RDP derived from shapes alone must hold; fresh or pinned dims are the
      // user's claims (annotations, declared results) and are checked here.
      bool claim = op.shapeClass == ir::ShapeClass::EDO || op.shapeClass == ir::ShapeClass::ISVDOS;
      if (!claim)
        throw InternalError(fmt::format("{}: the result is {}, but RDP typed it {}: {}", where(op), t.typeText(),
                                        v->type.str(), err));
      throw DataError(fmt::format("the result of {} is {}, which contradicts its declared type {}: {}", where(op),
                                  t.typeText(), v->type.str(), err));
    }
    values[v] = std::move(t);
  }

  void execute(const ir::Op &op, Binding &b) {
    ++count_;
    switch (op.kind) {
    case ir::OpKind::Param: return; // bound before the run
    case ir::OpKind::AssertDims: return checkAssert(op, b);
    case ir::OpKind::If: {
      hostAccess({&values.at(op.operands[0])});
      const ir::Region &taken = *op.regions[values.at(op.operands[0]).get(0) != 0 ? 0 : 1];
      Binding inner = b;
      region(taken, inner);
      hostAccess(valuesOf(taken.yields));
      for (size_t k = 0; k < op.results.size(); ++k)
        setResult(op, op.results[k], values.at(taken.yields[k]), b);
      return;
    }
    case ir::OpKind::For:
    case ir::OpKind::While: return loop(op, b);
    default: break;
    }
    for (const ir::Value *r : op.results)
      if (!sizesChecked_.count(r))
        checkValueSize(op, *r, b);
    std::vector<const Tensor *> in;
    for (const ir::Value *v : op.operands)
      in.push_back(&values.at(v));
    std::vector<Tensor> out;
    checkEmptyReduction(op, b); // the same error on every device, before any kernel runs
    if (!runner_ || !runner_(op, in, out, b)) {
      hostAccess(in);
      if (op.kind == ir::OpKind::Fused) { // its ops, one by one
        const ir::Region &body = *op.regions[0];
        for (size_t k = 0; k < body.args.size(); ++k)
          values[body.args[k]] = *in[k];
        Binding inner = b;
        region(body, inner);
        for (const ir::Value *y : body.yields)
          out.push_back(values.at(y));
      } else {
        out = runRefOp(RefContext{op, in, b});
      }
    }
    for (size_t k = 0; k < out.size(); ++k)
      setResult(op, op.results[k], std::move(out[k]), b);
  }

  void loop(const ir::Op &op, Binding &b) {
    bool isFor = op.kind == ir::OpKind::For;
    const ir::Region &body = *op.regions.back();
    size_t carriedFrom = 0; // operands before the carried values: dynamic for-loop bounds
    int64_t lo = 0, hi = 0;
    hostAccess(valuesOf(op.operands));
    if (isFor) {
      if (op.has("lo")) {
        lo = *sym::evaluate(op.get<sym::ExprRef>("lo"), b);
        hi = *sym::evaluate(op.get<sym::ExprRef>("hi"), b);
      } else {
        lo = values.at(op.operands[0]).getInt(0);
        hi = values.at(op.operands[1]).getInt(0);
        carriedFrom = 2;
      }
    }
    std::vector<Tensor> carried;
    for (size_t k = carriedFrom; k < op.operands.size(); ++k)
      carried.push_back(values.at(op.operands[k]));
    // Each iteration binds the loop-variant dims of the region's arguments afresh.
    auto enter = [&](const ir::Region &r, std::optional<int64_t> i, Binding &inner) {
      size_t a = 0;
      if (i) {
        Tensor t = Tensor::zeros(DType::I64, {});
        t.setInt(0, *i);
        values[r.args[a++]] = t;
      }
      for (const Tensor &t : carried) {
        std::string err = unify(r.args[a]->type, t.shape, inner);
        if (!err.empty())
          throw InternalError(fmt::format("{}: a carried value no longer fits its loop type: {}", where(op), err));
        values[r.args[a++]] = t;
      }
    };
    auto iterate = [&](std::optional<int64_t> i) {
      Binding inner = b;
      enter(body, i, inner);
      region(body, inner);
      hostAccess(valuesOf(body.yields));
      for (size_t k = 0; k < carried.size(); ++k)
        carried[k] = values.at(body.yields[k]);
    };
    if (isFor) {
      for (int64_t i = lo; i < hi; ++i)
        iterate(i);
    } else {
      const ir::Region &cond = *op.regions[0];
      int64_t maxIterations = limit(Limit::Iterations); // 0: no limit
      for (int64_t done = 0;; ++done) {
        Binding inner = b;
        enter(cond, std::nullopt, inner);
        region(cond, inner);
        hostAccess(valuesOf(cond.yields));
        if (values.at(cond.yields[0]).get(0) == 0)
          break;
        if (maxIterations > 0 && done >= maxIterations)
          throw DataError(fmt::format("{} ran {} iterations and its condition still holds (--max-iterations {})",
                                      where(op), done, maxIterations));
        iterate(std::nullopt);
      }
    }
    for (size_t k = 0; k < op.results.size(); ++k)
      setResult(op, op.results[k], carried[k], b);
  }

private:
  const ir::Graph &graph_;
  Binding &binding_;
  size_t &count_;
  const OpRunner &runner_;
  const HostAccess &beforeHostAccess_;
  const std::unordered_set<const ir::Value *> &sizesChecked_;
};

} // namespace

std::vector<ParamSpec> paramsOf(const ir::Graph &g) {
  std::vector<ParamSpec> out;
  for (const ir::Op *op : g.body.ops)
    if (op->kind == ir::OpKind::Param)
      out.push_back({op->get<std::string>("name"), op->results[0]->type, op->has("init") ? op->get<std::string>("init") : ""});
  return out;
}

std::vector<std::optional<int64_t>> expectedShape(const ir::TensorType &t, const Binding &b) {
  std::vector<std::optional<int64_t>> out;
  for (sym::ExprRef d : t.dims)
    out.push_back(sym::evaluate(d, b));
  return out;
}

Binding Interpreter::bindInputs(const std::vector<const Tensor *> &inputs, Binding b) const {
  const auto &args = graph_.body.args;
  if (inputs.size() != args.size())
    throw DataError(fmt::format("model '{}' takes {} inputs, not {}", graph_.name, args.size(), inputs.size()));
  for (size_t k = 0; k < args.size(); ++k) {
    if (!inputs[k])
      continue;
    const ir::TensorType &want = args[k]->type;
    const Tensor &got = *inputs[k];
    if (got.dtype != want.dtype)
      throw DataError(fmt::format("input '{}' must be {} but is {}", args[k]->name, want.str(), got.typeText()));
    if (got.shape.size() != want.rank())
      throw DataError(fmt::format("input '{}' must have rank {} ({}) but is {}", args[k]->name, want.rank(), want.str(),
                                  got.typeText()));
    for (size_t a = 0; a < want.rank(); ++a) {
      sym::ExprRef d = want.dims[a];
      Binding trial = b;
      std::string err = unify(ir::TensorType{want.dtype, {d}}, {got.shape[a]}, trial);
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
    auto r = graph_.dimRanges.find(name);
    if (r == graph_.dimRanges.end())
      throw DataError(fmt::format("model '{}' has no dim '{}'", graph_.name, name));
    if (value < r->second.first || value > r->second.second)
      throw DataError(fmt::format("dim {} = {} is outside its range {}..{}", name, value, r->second.first,
                                  r->second.second >= sym::Interval::kInf ? std::string("inf") : std::to_string(r->second.second)));
  }
  return b;
}

void Interpreter::checkBinding(const Binding &b) {
  if (sizesCheckedFor_ == b)
    return;
  sizesCheckedFor_.reset();
  sizesChecked_.clear();
  // Asserts about input dims come first: they state what the sizes below rely on.
  for (const ir::Op *op : graph_.body.ops)
    if (op->kind == ir::OpKind::AssertDims && std::holds_alternative<sym::ExprRef>(op->attrs.at("lhs"))) {
      bool bound = true;
      for (const char *side : {"lhs", "rhs"})
        bound = bound && sym::evaluate(op->get<sym::ExprRef>(side), b).has_value();
      if (bound)
        checkAssert(*op, b);
    }
  // Only the ops that always run: a branch not taken or a loop that runs no times may
  // hold sizes that would be negative under this binding, and that is no error.
  for (const ir::Op *op : graph_.body.ops)
    for (const ir::Value *v : op->results)
      if (op->kind != ir::OpKind::Param && checkValueSize(*op, *v, b))
        sizesChecked_.insert(v);
  sizesCheckedFor_ = b;
}

std::vector<Tensor> Interpreter::run(const std::vector<Tensor> &inputs, const std::map<std::string, Tensor> &params,
                                     const Binding &preset) {
  std::vector<const Tensor *> given;
  for (const Tensor &t : inputs)
    given.push_back(&t);
  binding_ = bindInputs(given, preset);
  checkBinding(binding_);
  opsExecuted_ = 0;
  Run run(graph_, binding_, opsExecuted_, runner_, beforeHostAccess_, sizesChecked_);
  // Inputs and params are read, never written: the run sees them in place (views), and
  // whatever it returns is copied out.
  auto inPlace = [](const Tensor &t) { return Tensor::view(t.dtype, t.shape, const_cast<uint8_t *>(t.data())); };
  for (size_t k = 0; k < inputs.size(); ++k)
    run.values[graph_.body.args[k]] = inPlace(inputs[k]);
  for (const ir::Op *op : graph_.body.ops) {
    if (op->kind != ir::OpKind::Param)
      continue;
    const std::string &name = op->get<std::string>("name");
    auto it = params.find(name);
    if (it == params.end())
      throw DataError(fmt::format("no value for param '{}'", name));
    run.setResult(*op, op->results[0], inPlace(it->second), binding_);
  }
  run.region(graph_.body, binding_);
  run.hostAccess(run.valuesOf(graph_.body.yields));
  std::vector<Tensor> out;
  for (const ir::Value *y : graph_.body.yields)
    out.push_back(run.values.at(y));
  return out;
}

Tensor initialize(const ir::TensorType &type, const std::string &init, const Binding &b, uint64_t seed) {
  std::vector<int64_t> shape;
  for (sym::ExprRef d : type.dims) {
    auto v = sym::evaluate(d, b);
    if (!v)
      throw DataError(fmt::format("cannot make a {} tensor: dim {} is not bound", type.str(), d->str()));
    shape.push_back(*v);
  }
  Tensor t = Tensor::zeros(type.dtype, shape);
  std::string kind = init.empty() ? (isFloat(type.dtype) ? "normal" : "zeros") : init.substr(0, init.find('('));
  std::vector<double> args;
  std::smatch m;
  std::string rest = init;
  static const std::regex number(R"([-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)");
  while (std::regex_search(rest, m, number)) {
    args.push_back(std::stod(m.str()));
    rest = m.suffix();
  }
  if (init.empty())
    args = {0.0, 0.02};
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(args.size() > 0 ? args[0] : 0, args.size() > 1 ? args[1] : 1);
  std::uniform_real_distribution<double> uniform(args.size() > 0 ? args[0] : 0, args.size() > 1 ? args[1] : 1);
  for (size_t k = 0; k < t.numel(); ++k) {
    double v = kind == "normal" ? normal(rng) : kind == "uniform" ? uniform(rng) : kind == "ones" ? 1.0
             : kind == "full" ? (args.empty() ? 0.0 : args[0]) : 0.0;
    t.set(k, v);
  }
  return t;
}

} // namespace dnnc::interp

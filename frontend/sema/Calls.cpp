// Sema: calls of builtins (ops of the registry and sema's own), and the instantiation of
// user fns at their call sites.
#include "frontend/sema/SemaInternal.h"

#include <limits>

namespace dnnc::sema {

namespace {
std::string signatureText(const std::string &name, const std::vector<ir::ParamSpec> &sig) {
  std::string out = name + "(";
  for (size_t i = 0; i < sig.size(); ++i)
    out += (i ? ", " : "") + sig[i].name + (sig[i].defaultText ? " = " + *sig[i].defaultText : "");
  return out + ")";
}

using BoundArgs = std::vector<std::optional<std::pair<ast::Arg *, SVal>>>;

// Assigns positional and keyword arguments to the callee's parameters, in order.
BoundArgs bindArguments(const std::string &callee, const std::vector<std::string> &params, CallArgs &args,
                        const std::vector<Note> &notes) {
  BoundArgs bound(params.size());
  size_t pos = 0;
  for (auto &[arg, val] : args) {
    size_t slot = 0;
    if (arg->keyword.empty()) {
      if (pos >= params.size())
        fail(DiagKind::Arity, arg->range,
             fmt::format("'{}' takes at most {} argument{}", callee, params.size(), params.size() == 1 ? "" : "s"), notes);
      slot = pos++;
    } else {
      auto it = std::find(params.begin(), params.end(), arg->keyword);
      if (it == params.end())
        fail(DiagKind::Keyword, arg->range, fmt::format("'{}' has no parameter '{}'", callee, arg->keyword), notes);
      slot = static_cast<size_t>(it - params.begin());
    }
    if (bound[slot])
      fail(DiagKind::Keyword, arg->range, fmt::format("argument '{}' of '{}' is given twice", params[slot], callee));
    bound[slot] = std::make_pair(arg, val);
  }
  return bound;
}
} // namespace

SVal Sema::call(const ast::Expr &e, ScopePtr scope) {
  CallArgs args;
  for (const ast::Arg &a : e.args)
    args.emplace_back(const_cast<ast::Arg *>(&a), eval(*a.value, scope));
  const ast::Expr &callee = *e.callee;
  const ast::Decl *self = scope->enclosingFn();
  bool wrapsBuiltin = self && self->name == callee.text && ir::findBuiltin(callee.text); // a layer wrapping its builtin
  if (callee.kind == ast::Expr::Kind::Name && !scope->find(callee.text) &&
      (wrapsBuiltin || !(scope->module && scope->module->globals.count(callee.text)))) {
    if (auto v = callSemaBuiltin(callee.text, args, e))
      return *v;
    if (const ir::OpInfo *info = ir::findBuiltin(callee.text))
      return callBuiltin(*info, args, e);
    unknownName(callee.text, scope, callee.range, "function");
  }
  SVal f = eval(callee, scope);
  if (f.kind != SVal::Kind::Function)
    fail(DiagKind::Type, callee.range, fmt::format("{} is not a function", describe(f)));
  return callFn(*f.fn, *f.module, args, e);
}

std::optional<SVal> Sema::callSemaBuiltin(const std::string &name, CallArgs &args,
                                                   const ast::Expr &e) {
  auto positional = [&](size_t min, size_t max) {
    for (auto &[a, v] : args)
      if (!a->keyword.empty())
        fail(DiagKind::Keyword, a->range, fmt::format("'{}' takes no keyword arguments", name));
    if (args.size() < min || args.size() > max)
      fail(DiagKind::Arity, e.range, fmt::format("'{}' takes {} to {} arguments, not {}", name, min, max, args.size()));
  };
  auto constAxis = [&](const SVal &v, size_t rank) {
    auto c = v.kind == SVal::Kind::Int ? v.dim->asConst() : std::nullopt;
    if (!c)
      fail(DiagKind::NotConstant, v.loc, fmt::format("the axis must be a constant integer, not {}", describe(v)));
    int64_t r = static_cast<int64_t>(rank);
    if (*c < -r || *c >= r)
      fail(DiagKind::Range, v.loc, fmt::format("axis {} is out of range for a tensor of rank {}", *c, rank));
    return static_cast<size_t>(*c < 0 ? *c + r : *c);
  };
  if (name == "grad")
    return gradCall(args, e);
  if (name == "shape" || name == "numel") {
    positional(1, name == "shape" ? 2 : 1);
    ir::Value *x = tensorOf(args[0].second, args[0].first->range, fmt::format("the argument of '{}'", name));
    const auto &dims = x->type.dims;
    if (name == "numel") {
      ExprRef n = sym::constant(1);
      for (ExprRef d : dims)
        n = sym::mul(n, d);
      return SVal::ofInt(n);
    }
    if (args.size() == 2)
      return SVal::ofInt(dims[constAxis(args[1].second, dims.size())]);
    std::vector<SVal> items;
    for (ExprRef d : dims)
      items.push_back(SVal::ofInt(d));
    return makeList(items);
  }
  if ((name == "min" || name == "max") && args.size() == 2 && args[0].first->keyword.empty() &&
      args[1].first->keyword.empty() && args[0].second.isNumber() && args[1].second.isNumber()) {
    const SVal &a = args[0].second, &b = args[1].second;
    if (a.kind == SVal::Kind::Int && b.kind == SVal::Kind::Int)
      return SVal::ofInt(an().simplify(name == "min" ? sym::min(a.dim, b.dim) : sym::max(a.dim, b.dim)));
    fail(DiagKind::Type, e.range, fmt::format("'{}' of two numbers needs integers (dims); for tensors use {}imum", name, name));
  }
  if (name == "arange") {
    // Its one keyword, dtype (start, stop and step are positional, as in NumPy).
    DType dtype = DType::I64;
    for (auto it = args.begin(); it != args.end();) {
      if (it->first->keyword != "dtype") {
        ++it;
        continue;
      }
      SVal d = it->second;
      if (d.kind == SVal::Kind::String && ir::parseDType(d.s))
        d.dtype = *ir::parseDType(d.s), d.kind = SVal::Kind::DType;
      if (d.kind != SVal::Kind::DType || d.dtype == DType::Bool)
        fail(DiagKind::Type, it->first->range, fmt::format("the dtype of arange must be a numeric dtype such as i64 or f32, not {}", describe(d)));
      dtype = d.dtype;
      it = args.erase(it);
    }
    positional(1, 3);
    std::vector<SVal> v;
    for (auto &[a, val] : args)
      v.push_back(val);
    SVal start = v.size() == 1 ? SVal::ofInt(sym::constant(0)) : v[0];
    SVal stop = v.size() == 1 ? v[0] : v[1];
    SVal step = v.size() == 3 ? v[2] : SVal::ofInt(sym::constant(1));
    bool symbolic = start.kind == SVal::Kind::Int && stop.kind == SVal::Kind::Int && step.kind == SVal::Kind::Int;
    if (symbolic) {
      auto s = step.dim->asConst();
      if (!s || *s == 0)
        fail(DiagKind::Range, step.loc.valid() ? step.loc : e.range,
             "the step of arange must be a nonzero constant (or an i64[] value, checked when it runs)");
      // ceil((stop - start) / step) elements, none where the range runs the other way: for a
      // negative step, ceil((start - stop) / -step).
      ExprRef count;
      auto a = start.dim->asConst(), b = stop.dim->asConst();
      if (a && b) { // in 128 bits, as the run counts values: the span may pass 2^63 (-5e18 to 5e18)
        __int128 span = *s > 0 ? __int128(*b) - *a : __int128(*a) - *b, stride = *s > 0 ? __int128(*s) : -__int128(*s);
        __int128 n = span > 0 ? (span + stride - 1) / stride : 0;
        if (n > std::numeric_limits<int64_t>::max())
          fail(DiagKind::Range, e.range, fmt::format("arange from {} to {} by {} has more than 2^63 elements", *a, *b, *s));
        count = sym::constant(static_cast<int64_t>(n));
      } else {
        ExprRef span = *s > 0 ? sym::sub(stop.dim, start.dim) : sym::sub(start.dim, stop.dim);
        int64_t stride = *s > 0 ? *s : -*s;
        count = an().simplify(
            sym::max(sym::floorDiv(sym::add(span, sym::constant(stride - 1)), sym::constant(stride)), sym::constant(0)));
      }
      std::map<std::string, ir::Attr> attrs{{"count", count}, {"dtype", dtype}, {"start", start.dim}, {"step", step.dim}};
      return SVal::ofTensor(emit(OpKind::Arange, {}, attrs, 1, e.range)->results[0]);
    }
    std::vector<ir::Value *> ops;
    for (const SVal *x : {&start, &stop, &step}) {
      ir::Value *t = materialize(*x, DType::I64, x->loc.valid() ? x->loc : e.range);
      if (t->type.rank() != 0)
        fail(DiagKind::Rank, x->loc, fmt::format("arange bounds must be scalars, not {}", t->type.str()));
      ops.push_back(t);
    }
    return SVal::ofTensor(emit(OpKind::Arange, ops, {{"dtype", dtype}}, 1, e.range, ir::ShapeClass::ISVDOS)->results[0]);
  }
  return std::nullopt;
}

SVal Sema::callBuiltin(const ir::OpInfo &info, CallArgs &args, const ast::Expr &e) {
  using PK = ir::ParamSpec::Kind;
  const auto &sig = info.signature;
  std::vector<Note> sigNote{{{}, "the signature is " + signatureText(info.spelling, sig)}};
  std::vector<std::string> names;
  for (const ir::ParamSpec &p : sig)
    names.push_back(p.name);
  BoundArgs bound = bindArguments(info.spelling, names, args, sigNote);
  // Scalar literals adopt the dtype of the first tensor operand (preferring non-bool).
  std::optional<DType> adopt;
  for (size_t i = 0; i < sig.size(); ++i)
    if (sig[i].kind == PK::Tensor && bound[i] && bound[i]->second.kind == SVal::Kind::Tensor) {
      DType d = bound[i]->second.tensor->type.dtype;
      if (!adopt || (*adopt == DType::Bool && d != DType::Bool))
        adopt = d;
    }
  std::vector<ir::Value *> operands;
  std::map<std::string, ir::Attr> attrs;
  ir::ShapeClass cls = info.shapeClass;
  std::vector<size_t> valueDims; // positions in a Vs list given by runtime values
  std::string valueListName;
  for (size_t i = 0; i < sig.size(); ++i) {
    const ir::ParamSpec &p = sig[i];
    SVal v;
    SourceRange at = e.range;
    if (bound[i]) {
      v = bound[i]->second;
      at = bound[i]->first->range;
    } else if (!p.defaultText) {
      fail(DiagKind::Arity, e.range, fmt::format("missing argument '{}' of '{}'", p.name, info.spelling), sigNote);
    } else if (*p.defaultText == "none") {
      continue;
    } else if (p.kind == PK::Float) {
      v.kind = SVal::Kind::Float;
      v.f = std::stod(*p.defaultText);
    } else if (p.kind == PK::Bool) {
      v.kind = SVal::Kind::Bool;
      v.b = *p.defaultText == "true";
    } else if (p.kind == PK::DType) {
      v.kind = SVal::Kind::DType;
      v.dtype = *ir::parseDType(*p.defaultText);
    } else {
      v = SVal::ofInt(sym::constant(std::stoll(*p.defaultText)));
    }
    std::string what = fmt::format("argument '{}' of '{}'", p.name, info.spelling);
    auto needInt = [&](const SVal &x, SourceRange loc) -> ExprRef {
      if (x.kind == SVal::Kind::Int)
        return x.dim;
      if (x.kind == SVal::Kind::Tensor)
        fail(DiagKind::NotConstant, loc, fmt::format("{} must be known at compile time (a dim or constant), not a tensor", what));
      fail(DiagKind::Type, loc, fmt::format("{} must be an integer, not {}", what, describe(x)));
    };
    auto runtimeInt = [&](const SVal &x, SourceRange loc) {
      ir::Value *t = materialize(x, std::nullopt, loc);
      if (t->type.rank() != 0 || !ir::isInteger(t->type.dtype))
        fail(DiagKind::Type, loc, fmt::format("{} must be an integer scalar, not {}", what, t->type.str()));
      operands.push_back(t);
      cls = ir::ShapeClass::ISVDOS;
      attrs["dynamic"] = true;
    };
    switch (p.kind) {
    case PK::Tensor:
      if (v.kind != SVal::Kind::Tensor && !v.isNumber())
        fail(DiagKind::Type, at, fmt::format("{} must be a tensor, not {}", what, describe(v)));
      operands.push_back(materialize(v, adopt, at));
      break;
    case PK::TensorList:
      if (v.kind != SVal::Kind::List && v.kind != SVal::Kind::Tuple)
        fail(DiagKind::Type, at, fmt::format("{} must be a list of tensors, not {}", what, describe(v)));
      if (v.items.empty())
        fail(DiagKind::Arity, at, fmt::format("{} needs at least one tensor", what));
      for (const SVal &x : v.items)
        operands.push_back(tensorOf(x, at, what));
      break;
    case PK::Int: attrs[p.name] = needInt(v, at); break;
    case PK::IntList:
    case PK::ValueList: {
      std::vector<SVal> items = (v.kind == SVal::Kind::List || v.kind == SVal::Kind::Tuple) ? v.items : std::vector<SVal>{v};
      ir::DimList dims;
      for (const SVal &x : items) {
        if (p.kind == PK::ValueList && x.kind == SVal::Kind::Tensor) {
          runtimeInt(x, at);
          valueDims.push_back(dims.size());
          valueListName = p.name;
          dims.push_back(nullptr);
        } else {
          dims.push_back(needInt(x, at));
        }
      }
      attrs[p.name] = dims;
      break;
    }
    case PK::Value:
      if (v.kind == SVal::Kind::Tensor)
        runtimeInt(v, at);
      else
        attrs[p.name] = needInt(v, at);
      break;
    case PK::Float:
      if (v.kind == SVal::Kind::Float)
        attrs[p.name] = v.f;
      else if (v.kind == SVal::Kind::Int && v.dim->isConst())
        attrs[p.name] = static_cast<double>(*v.dim->asConst());
      else
        fail(DiagKind::Type, at, fmt::format("{} must be a constant number, not {}", what, describe(v)));
      break;
    case PK::Bool:
      if (v.kind != SVal::Kind::Bool)
        fail(DiagKind::Type, at, fmt::format("{} must be true or false, not {}", what, describe(v)));
      attrs[p.name] = v.b;
      break;
    case PK::DType:
      if (v.kind == SVal::Kind::String && ir::parseDType(v.s))
        v.dtype = *ir::parseDType(v.s), v.kind = SVal::Kind::DType;
      if (v.kind != SVal::Kind::DType)
        fail(DiagKind::Type, at, fmt::format("{} must be a dtype such as f32, not {}", what, describe(v)));
      attrs[p.name] = v.dtype;
      break;
    }
  }
  // Dims given by runtime values are fresh: the op is ISVDOS.
  if (!valueDims.empty()) {
    auto &dims = std::get<ir::DimList>(attrs[valueListName]);
    ir::DimList positions;
    for (size_t i : valueDims)
      positions.push_back(sym::constant(static_cast<int64_t>(i)));
    attrs["value_dims"] = positions; // list positions given, in order, by the trailing operands
    for (size_t i : valueDims)
      dims[i] = freshDim("S", e.range, fmt::format("fresh: a value-given dim of {} at line {}", info.spelling, e.range.begin.line));
  }
  size_t results = 1;
  if (info.kind == OpKind::Topk)
    results = 2;
  if (info.kind == OpKind::Split) {
    const auto &parts = std::get<ir::DimList>(attrs.at("parts"));
    if (parts.size() == 1) {
      auto n = parts[0]->asConst();
      if (!n || *n < 1 || *n > 4096)
        fail(DiagKind::Range, e.range, "split(x, n) needs a constant number of parts between 1 and 4096");
      results = static_cast<size_t>(*n);
    } else {
      results = parts.size();
    }
  }
  if (cls == ir::ShapeClass::ISVDOS && !attrs.count("dynamic"))
    cls = ir::ShapeClass::ISDOS; // value-taking, but fed shapes only: folded at compile time
  // A concat of many operands becomes a tree of concats of at most kConcatFanIn
  // operands each: each operand is a loop nest of its own in the concat's kernel, and
  // LLVM's time on one kernel grows faster than linearly past a few dozen of them (a
  // 64-operand kernel took 4.6 s, a 32-operand one 1.5 s).
  constexpr size_t kConcatFanIn = 32;
  if (info.kind == OpKind::Concat) {
    while (operands.size() > kConcatFanIn) {
      std::vector<ir::Value *> next;
      for (size_t i = 0; i < operands.size(); i += kConcatFanIn) {
        std::vector<ir::Value *> part(operands.begin() + static_cast<std::ptrdiff_t>(i),
                                      operands.begin() + static_cast<std::ptrdiff_t>(std::min(i + kConcatFanIn, operands.size())));
        next.push_back(part.size() == 1 ? part[0] : emit(info.kind, part, attrs, 1, e.range, cls)->results[0]);
      }
      operands = std::move(next);
    }
  }
  ir::Op *op = emit(info.kind, operands, attrs, results, e.range, cls);
  if (results == 1)
    return SVal::ofTensor(op->results[0]);
  std::vector<SVal> items;
  for (ir::Value *r : op->results)
    items.push_back(SVal::ofTensor(r));
  return makeList(items, SVal::Kind::Tuple);
}

SVal Sema::callFn(const ast::Decl &fn, ModuleCtx &m, CallArgs &args,
                           const ast::Expr &e) {
  if (st_ && st_->depth >= limit(Limit::CallDepth))
    fail(DiagKind::ControlFlow, e.range, fmt::format("calls of '{}' nest deeper than {} (recursion is not supported)", fn.name,
                                                     limit(Limit::CallDepth)));
  std::vector<Note> declNote{{fn.nameRange, fmt::format("'{}' is declared here", fn.name)}};
  std::vector<std::string> names;
  for (const ast::Param &p : fn.params)
    names.push_back(p.name);
  BoundArgs bound = bindArguments(fn.name, names, args, declNote);
  ScopePtr scope = moduleScope(m);
  for (size_t i = 0; i < fn.params.size(); ++i) {
    const ast::Param &p = fn.params[i];
    SVal v;
    SourceRange at = e.range;
    if (bound[i]) {
      v = bound[i]->second;
      at = bound[i]->first->range;
    } else if (p.defaultValue) {
      v = eval(*p.defaultValue, scope);
    } else {
      fail(DiagKind::Arity, e.range, fmt::format("missing argument '{}' of '{}'", p.name, fn.name), declNote);
    }
    checkAgainst(v, *p.type, scope, fmt::format("argument '{}' of '{}'", p.name, fn.name), DiagKind::Shape, at, FreshDims::Keep);
    if (v.isNumber() && p.type->hasDims)
      v = SVal::ofTensor(materialize(v, *ir::parseDType(p.type->dtype), at));
    scope->names[p.name] = Binding{v, false, p.range};
  }
  scope->fn = &fn; // after the defaults, which are evaluated outside the body
  if (st_)
    ++st_->depth;
  SVal result;
  bool returned = false;
  try {
    returned = execBlock(fn.body, scope, &result);
  } catch (CompileError &err) {
    if (st_)
      --st_->depth;
    // A generic fn's error depends on its arguments: name the call that gave them.
    err.diag.notes.push_back({e.range, fmt::format("in this call of '{}'", fn.name)});
    throw;
  } catch (...) {
    if (st_)
      --st_->depth;
    throw;
  }
  if (st_)
    --st_->depth;
  if (!returned)
    fail(DiagKind::ControlFlow, fn.nameRange, fmt::format("fn '{}' ends without returning a value", fn.name));
  checkAgainst(result, *fn.type, scope, fmt::format("the result of '{}'", fn.name), DiagKind::Annotation, e.range, FreshDims::Rename);
  return result;
}

} // namespace dnnc::sema

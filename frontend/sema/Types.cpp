// Sema: annotations, fn signatures and declared results checked against values; fresh
// dims named or pinned by them (backward unification through RDP).
#include "frontend/sema/SemaInternal.h"

namespace dnnc::sema {

void Sema::checkAgainst(const SVal &v, const ast::Type &t, ScopePtr scope, const std::string &what, DiagKind kind,
                                 SourceRange at, FreshDims freshDims) {
  std::string want = ast::printType(t);
  if (t.kind == ast::Type::Kind::Tuple) {
    if ((v.kind != SVal::Kind::Tuple && v.kind != SVal::Kind::List) || v.items.size() != t.elements.size())
      fail(DiagKind::Type, at, fmt::format("{} should be a tuple {}, not {}", what, want, describe(v)));
    for (size_t i = 0; i < v.items.size(); ++i)
      checkAgainst(v.items[i], *t.elements[i], scope, fmt::format("{} (item {})", what, i), kind, at, freshDims);
    return;
  }
  DType dt = *ir::parseDType(t.dtype);
  if (v.isNumber() && t.dims.empty()) {
    bool ok = v.kind == SVal::Kind::Bool ? dt == DType::Bool
                                         : (v.kind == SVal::Kind::Float ? ir::isFloat(dt) : dt != DType::Bool);
    if (!ok)
      fail(DiagKind::DType, at, fmt::format("{} should be {}, not {}", what, want, describe(v)));
    return;
  }
  if (v.kind != SVal::Kind::Tensor)
    fail(DiagKind::Type, at, fmt::format("{} should be a tensor {}, not {}", what, want, describe(v)));
  const TensorType &got = v.tensor->type;
  if (got.dtype != dt)
    fail(DiagKind::DType, at, fmt::format("{} should be {} but is {}: element types {} and {} differ", what, want,
                                          got.str(), t.dtype, ir::dtypeName(got.dtype)));
  size_t ellipses = 0;
  for (size_t i = 0; i < t.dims.size(); ++i)
    if (t.dims[i].ellipsis) {
      ++ellipses;
      if (i != 0)
        fail(DiagKind::Type, t.dims[i].range, "'...' may only open a type");
    }
  size_t fixed = t.dims.size() - ellipses;
  if (got.rank() < fixed || (!ellipses && got.rank() != fixed))
    fail(DiagKind::Rank, at, fmt::format("{} should have rank {}{} ({}) but is {}", what, ellipses ? "at least " : "", fixed,
                                         want, got.str()));
  size_t lead = got.rank() - fixed;
  if (ellipses) {
    std::vector<SVal> leading;
    for (size_t i = 0; i < lead; ++i)
      leading.push_back(SVal::ofInt(got.dims[i]));
    if (Binding *b = scope->find("...")) {
      bool same = b->val.items.size() == lead;
      for (size_t i = 0; same && i < lead; ++i)
        same = an().canProve(b->val.items[i].dim, Rel::EQ, got.dims[i]);
      if (!same)
        fail(DiagKind::Shape, at, fmt::format("{} is {}, whose leading dims differ from those '...' matched before", what, got.str()));
    } else {
      scope->names["..."] = Binding{makeList(leading), false, t.range};
    }
  }
  for (size_t j = ellipses; j < t.dims.size(); ++j) {
    size_t axis = lead + j - ellipses;
    checkDim(got.dims[axis], t.dims[j], scope, what + " should be " + want + " but is " + got.str(), kind, at, freshDims, got, axis);
  }
}

void Sema::checkDim(ExprRef actual, const ast::DimItem &item, ScopePtr scope, const std::string &what, DiagKind kind,
                             SourceRange at, FreshDims freshDims, const TensorType &full, size_t axis) {
  const ast::Expr &ex = *item.expr;
  const sym::Atom *fresh = actual->asVar();
  bool isFresh = st_ && fresh && st_->generated.count(fresh->name);
  auto retype = [&](const std::string &name, ExprRef value) {
    // Backward propagation: every type that mentions the fresh dim now says `value`.
    std::vector<TensorType *> recorded;
    for (NamedValue &nv : st_->info->values)
      recorded.push_back(&nv.type);
    ir::unifyDim(*st_->graph, name, value, recorded);
    st_->generated.erase(name);
  };
  if (ex.kind == ast::Expr::Kind::Name && !scope->find(ex.text) &&
      !(scope->module && scope->module->globals.count(ex.text))) {
    ExprRef bound = actual;
    bool nameFree = std::none_of(st_ ? st_->info->dims.begin() : globalDims_.end(), st_ ? st_->info->dims.end() : globalDims_.end(),
                                 [&](const DimInfo &d) { return d.name == ex.text; });
    if (isFresh && nameFree && freshDims == FreshDims::Rename) {
      // An annotation names a fresh dim: rename it everywhere.
      bound = sym::var(ex.text);
      // Its range and the facts known of it (an assert equating it with another fresh
      // dim) go with it: the types the assert made equal stay provably so.
      an().rename(fresh->name, ex.text);
      for (DimInfo &d : st_->info->dims)
        if (d.name == fresh->name)
          d.name = ex.text, d.origin = "named by an annotation; " + d.origin, d.loc = item.range;
      retype(fresh->name, bound);
    }
    scope->names[ex.text] = Binding{SVal::ofInt(bound), false, item.range};
    return;
  }
  ExprRef want = evalDim(ex, scope);
  if (actual == want || an().canProve(actual, Rel::EQ, want))
    return;
  auto fv = sym::freeVars(want);
  if (isFresh && !std::binary_search(fv.begin(), fv.end(), fresh->name)) {
    std::string name = fresh->name;
    for (DimInfo &d : st_->info->dims)
      if (d.name == name)
        d.origin = fmt::format("pinned to {} by a declared type; {}", want->str(), d.origin);
    retype(name, want);
    // The runtime checks what the compiler assumed.
    emit(OpKind::AssertDims, {}, {{"lhs", std::string(name)}, {"rel", std::string("==")}, {"rhs", want}}, 0, at, {}, false);
    return;
  }
  std::string msg = fmt::format("{}: dim {} is {}, not {}", what, axis, actual->str(), want->str());
  if (an().canProve(actual, Rel::NE, want))
    fail(kind, at, msg);
  fail(DiagKind::Unprovable, at, msg + ", and they can be proved neither equal nor different",
       {{{}, fmt::format("add `assert {} == {};` if they are always equal", actual->str(), want->str())}});
}

} // namespace dnnc::sema

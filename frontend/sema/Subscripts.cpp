// Sema: subscripts of lists, tuples and tensors (the Index op).
#include "frontend/sema/SemaInternal.h"

namespace dnnc::sema {

SVal Sema::index(const ast::Expr &e, ScopePtr scope) {
  SVal base = eval(*e.callee, scope);
  if (base.kind == SVal::Kind::List || base.kind == SVal::Kind::Tuple) {
    if (e.subs.size() != 1 || e.subs[0].kind != ast::Subscript::Kind::Point)
      fail(DiagKind::Type, e.range, "a list or tuple takes one constant index");
    SVal i = eval(*e.subs[0].start, scope);
    auto c = i.kind == SVal::Kind::Int ? i.dim->asConst() : std::nullopt;
    if (!c)
      fail(DiagKind::NotConstant, e.subs[0].range, "a list or tuple index must be a constant integer");
    int64_t n = static_cast<int64_t>(base.items.size());
    if (*c < -n || *c >= n)
      fail(DiagKind::Range, e.subs[0].range, fmt::format("index {} is out of range for {} items", *c, n));
    return base.items[static_cast<size_t>(*c < 0 ? *c + n : *c)];
  }
  if (base.kind != SVal::Kind::Tensor)
    fail(DiagKind::Type, e.range, fmt::format("cannot index {}", describe(base)));
  ir::Value *x = base.tensor;
  const auto &dims = x->type.dims;
  size_t ellipses = 0;
  for (const auto &s : e.subs)
    ellipses += s.kind == ast::Subscript::Kind::Ellipsis;
  if (ellipses > 1)
    fail(DiagKind::Type, e.range, "an index may contain '...' only once");
  size_t given = e.subs.size() - ellipses;
  if (given > dims.size())
    fail(DiagKind::Rank, e.range, fmt::format("too many indices for {}: {} given", x->type.str(), given));
  std::vector<const ast::Subscript *> perAxis;
  for (const auto &s : e.subs) {
    if (s.kind == ast::Subscript::Kind::Ellipsis)
      perAxis.insert(perAxis.end(), dims.size() - given, nullptr);
    else
      perAxis.push_back(&s);
  }
  perAxis.resize(dims.size(), nullptr);
  ir::DimList starts, stops, steps, points;
  std::vector<ir::Value *> operands{x};
  ir::ShapeClass cls = ir::ShapeClass::ISDOS;
  // A bound: a dim expression (negative constants count from the end) or a runtime value.
  auto bound = [&](const ast::Expr &be, ExprRef dim) -> ExprRef {
    SVal v = eval(be, scope);
    if (v.kind == SVal::Kind::Int) {
      auto c = v.dim->asConst();
      return (c && *c < 0) ? an().simplify(sym::add(dim, v.dim)) : v.dim;
    }
    ir::Value *t = tensorOf(v, be.range, "an index");
    if (t->type.rank() != 0 || !ir::isInteger(t->type.dtype))
      fail(DiagKind::Type, be.range, fmt::format("an index must be an integer scalar, not {}", t->type.str()));
    operands.push_back(t);
    return nullptr;
  };
  for (size_t a = 0; a < dims.size(); ++a) {
    const ast::Subscript *s = perAxis[a];
    ExprRef one = sym::constant(1);
    if (!s) {
      starts.push_back(sym::constant(0)), stops.push_back(dims[a]), steps.push_back(one), points.push_back(sym::constant(0));
    } else if (s->kind == ast::Subscript::Kind::Point) {
      ExprRef p = bound(*s->start, dims[a]);
      starts.push_back(p), stops.push_back(p ? sym::add(p, one) : nullptr), steps.push_back(one), points.push_back(one);
    } else {
      ExprRef b = s->start ? bound(*s->start, dims[a]) : sym::constant(0);
      ExprRef en = s->stop ? bound(*s->stop, dims[a]) : dims[a];
      ExprRef st = one;
      if (s->step) {
        SVal v = eval(*s->step, scope);
        auto c = v.kind == SVal::Kind::Int ? v.dim->asConst() : std::nullopt;
        if (!c || *c <= 0)
          fail(DiagKind::Range, s->step->range, "a slice step must be a positive constant");
        st = v.dim;
      }
      if (!b || !en)
        cls = ir::ShapeClass::ISVDOS;
      starts.push_back(b), stops.push_back(en), steps.push_back(st), points.push_back(sym::constant(0));
    }
  }
  auto attrs = ir::IndexAttrs::make(std::move(starts), std::move(stops), std::move(steps), std::move(points));
  return SVal::ofTensor(emit(OpKind::Index, operands, attrs, 1, e.range, cls)->results[0]);
}

} // namespace dnnc::sema

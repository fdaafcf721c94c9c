// Rank and Dimension Propagation: forward rules, branch joins, loop fixpoints, backward
// unification (see the header for the contract).
#include "ir/transforms/RankDimPropagation.h"

#include <fmt/format.h>

namespace dnnc::ir {

void inferOp(Op &op, PropagationContext &ctx) {
  RuleContext rc{op, ctx.analyzer, ctx.freshDim};
  std::vector<TensorType> types = inferResultTypes(rc);
  if (types.size() != op.results.size())
    throw InternalError(fmt::format("op '{}' was built with {} results but its rule gives {}", opInfo(op.kind).spelling,
                                    op.results.size(), types.size()));
  for (size_t i = 0; i < types.size(); ++i) {
    for (auto &d : types[i].dims)
      d = ctx.analyzer.simplify(d);
    op.results[i]->type = std::move(types[i]);
  }
  for (auto &[name, normalized] : rc.normalizedAxes) // downstream phases read axes as given
    op.attrs[name] = std::move(normalized);
}

std::optional<TensorType> joinTypes(const TensorType &a, const TensorType &b, PropagationContext &ctx, bool &fresh) {
  if (a.dtype != b.dtype || a.rank() != b.rank())
    return std::nullopt;
  TensorType out = a;
  for (size_t i = 0; i < a.rank(); ++i)
    if (!(a.dims[i] == b.dims[i] || ctx.analyzer.canProve(a.dims[i], sym::Rel::EQ, b.dims[i]))) {
      out.dims[i] = ctx.freshDim("J");
      fresh = true;
    }
  return out;
}

std::vector<size_t> loopVariantAxes(const TensorType &entry, const TensorType &afterOne, const sym::Analyzer &an) {
  std::vector<size_t> axes;
  for (size_t i = 0; i < entry.rank() && i < afterOne.rank(); ++i)
    if (!(entry.dims[i] == afterOne.dims[i] || an.canProve(entry.dims[i], sym::Rel::EQ, afterOne.dims[i])))
      axes.push_back(i);
  return axes;
}

TensorType loopExitType(const TensorType &entry, const TensorType &generic, const TensorType &afterGeneric,
                        sym::ExprRef trips, bool tripsKnown, PropagationContext &ctx, bool &fresh) {
  TensorType out = entry;
  for (size_t i = 0; i < entry.rank(); ++i) {
    if (generic.dims[i] == entry.dims[i])
      continue; // loop-invariant axis
    auto growth = ctx.analyzer.simplify(sym::sub(afterGeneric.dims[i], generic.dims[i]))->asConst();
    if (growth && *growth >= 0) {
      if (!tripsKnown)
        fresh = true;
      out.dims[i] = ctx.analyzer.simplify(sym::add(entry.dims[i], sym::mul(sym::constant(*growth), trips)));
    } else {
      out.dims[i] = ctx.freshDim("L");
      fresh = true;
    }
  }
  return out;
}

namespace {
void substituteRegion(Region &r, const std::map<std::string, sym::ExprRef> &m) {
  auto fix = [&](Value *v) {
    for (auto &d : v->type.dims)
      d = sym::substitute(d, m);
  };
  for (Value *a : r.args)
    fix(a);
  for (Op *op : r.ops) {
    for (Value *v : op->results)
      fix(v);
    for (auto &[k, a] : op->attrs) {
      if (auto *e = std::get_if<sym::ExprRef>(&a))
        *e = sym::substitute(*e, m);
      else if (auto *l = std::get_if<DimList>(&a))
        for (auto &d : *l)
          if (d)
            d = sym::substitute(d, m);
    }
    for (auto &sub : op->regions)
      substituteRegion(*sub, m);
  }
}
} // namespace

void unifyDim(Graph &g, const std::string &freshVar, sym::ExprRef value, std::vector<TensorType *> extra) {
  std::map<std::string, sym::ExprRef> m{{freshVar, value}};
  substituteRegion(g.body, m);
  for (TensorType *t : extra)
    for (auto &d : t->dims)
      d = sym::substitute(d, m);
}

} // namespace dnnc::ir

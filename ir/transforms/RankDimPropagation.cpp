// Rank and Dimension Propagation: forward rules, branch joins, loop fixpoints, backward
// unification (see the header for the contract).
#include "ir/transforms/RankDimPropagation.h"

#include "ir/graph/Walk.h"

#include <fmt/format.h>

#include <map>
#include <set>

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

namespace {
// Passes that may widen an axis to a generic dim; the build after the last of them is
// final whether or not it is stable.
constexpr int kWideningPasses = 3;

using Axis = std::pair<size_t, size_t>; // (carried value, axis)
} // namespace

LoopFixpoint loopFixpoint(const std::vector<TensorType> &entry, const LoopBody &body, PropagationContext &ctx) {
  sym::Analyzer &an = ctx.analyzer;
  LoopFixpoint out;
  for (bool share : {true, false}) {
    std::set<Axis> generic;
    std::map<std::string, sym::ExprRef> groups; // "entry dim|growth" -> generic dim
    std::map<std::string, std::vector<Axis>> members;
    out.generic = entry;
    body.beginAttempt();
    for (int pass = 0;; ++pass) {
      out.afterOne = body.build(out.generic);
      bool stable = true;
      for (size_t k = 0; k < entry.size(); ++k) {
        TensorType &type = out.generic[k];
        const TensorType &after = out.afterOne[k];
        for (size_t axis : loopVariantAxes(type, after, an)) {
          if (generic.count({k, axis}))
            continue; // already generic: its growth is read off below
          stable = false;
          if (pass >= kWideningPasses)
            continue;
          generic.insert({k, axis});
          sym::ExprRef growth = an.simplify(sym::sub(after.dims[axis], type.dims[axis]));
          std::string key = share && growth->isConst() ? type.dims[axis]->str() + "|" + growth->str()
                                                       : fmt::format("{}|{}", k, axis);
          auto [it, isNew] = groups.try_emplace(key, nullptr);
          if (isNew) {
            it->second = ctx.freshDim("L");
            // The entry size bounds it from below only while the loop cannot shrink it: a
            // loop that drops an element per iteration may reach 0.
            sym::Interval entryRange = an.bounds(type.dims[axis]);
            bool grows = an.canProve(growth, sym::Rel::GE, sym::constant(0));
            an.declare(it->second->asVar()->name, grows ? std::max<int64_t>(0, entryRange.lo) : 0);
          }
          members[key].push_back({k, axis});
          type.dims[axis] = it->second;
        }
      }
      if (stable || pass >= kWideningPasses)
        break;
      body.discardBuild();
    }
    bool confirmed = true;
    for (auto &[key, axes] : members) {
      std::set<std::string> growths;
      for (auto [k, axis] : axes)
        growths.insert(an.simplify(sym::sub(out.afterOne[k].dims[axis], out.generic[k].dims[axis]))->str());
      confirmed = confirmed && growths.size() == 1;
    }
    if (confirmed || !share)
      break;
    body.abandonAttempt(); // retry with one generic dim per axis
  }
  return out;
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
  }
}
} // namespace

void unifyDim(Graph &g, const std::string &freshVar, sym::ExprRef value, std::vector<TensorType *> extra) {
  std::map<std::string, sym::ExprRef> m{{freshVar, value}};
  walkRegions(g.body, [&](Region &r) { substituteRegion(r, m); });
  for (TensorType *t : extra)
    for (auto &d : t->dims)
      d = sym::substitute(d, m);
}

} // namespace dnnc::ir

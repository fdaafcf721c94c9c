// Sema: for and while loops, with their carried vars typed by RDP's fixpoint.
#include "frontend/sema/SemaInternal.h"

namespace dnnc::sema {

void Sema::execLoop(const ast::Stmt &s, ScopePtr scope) {
  if (!st_)
    fail(DiagKind::NotConstant, s.range, "a loop needs a model to run in");
  bool isFor = s.kind == ast::Stmt::Kind::For;
  ir::Op *op = st_->graph->newOp(isFor ? OpKind::For : OpKind::While, s.range);
  ExprRef trips = nullptr;
  if (isFor) {
    SVal lo = eval(*s.value, scope), hi = eval(*s.hi, scope);
    if (lo.kind == SVal::Kind::Int && hi.kind == SVal::Kind::Int) {
      op->attrs["lo"] = lo.dim;
      op->attrs["hi"] = hi.dim;
      trips = an().simplify(sym::max(sym::sub(hi.dim, lo.dim), sym::constant(0)));
    } else {
      for (const SVal *b : {&lo, &hi}) {
        ir::Value *t = materialize(*b, DType::I64, b->loc);
        if (t->type.rank() != 0 || !ir::isInteger(t->type.dtype))
          fail(DiagKind::Type, b->loc, fmt::format("loop bounds must be integer scalars, not {}", t->type.str()));
        op->operands.push_back(t);
      }
    }
  }
  std::vector<std::string> carried = carriedVars({&s.body}, scope);
  std::vector<SVal> entry;
  for (const std::string &n : carried) {
    Binding *b = scope->find(n);
    b->val = SVal::ofTensor(materialize(b->val, std::nullopt, s.range));
    entry.push_back(b->val);
    op->operands.push_back(b->val.tensor);
  }
  std::string carriedText;
  for (const std::string &n : carried)
    carriedText += (carriedText.empty() ? "" : ",") + n;
  op->attrs["carried"] = carriedText;

  // Runs the body with the carried vars typed `types`; returns their types after it.
  std::vector<TensorType> types;
  for (const SVal &v : entry)
    types.push_back(v.tensor->type);
  ir::Region *outer = st_->cur;
  std::unique_ptr<ir::Region> body, cond;
  auto runRegion = [&](const ast::Block *block, const ast::Expr *condExpr) {
    auto region = std::make_unique<ir::Region>();
    ScopePtr inner = child(scope);
    if (isFor && block) {
      ir::Value *i = st_->graph->newValue({DType::I64, {}}, s.names[0], s.nameRanges[0]);
      i->owner = region.get();
      region->args.push_back(i);
      inner->names[s.names[0]] = Binding{SVal::ofTensor(i), false, s.nameRanges[0]};
    }
    for (size_t k = 0; k < carried.size(); ++k) {
      ir::Value *a = st_->graph->newValue(types[k], carried[k], scope->find(carried[k])->declLoc);
      a->owner = region.get();
      region->args.push_back(a);
      scope->find(carried[k])->val = SVal::ofTensor(a);
    }
    st_->cur = region.get();
    try {
      if (condExpr) {
        SVal c = eval(*condExpr, inner);
        ir::Value *t = materialize(c, DType::Bool, condExpr->range);
        if (t->type.dtype != DType::Bool || t->type.rank() != 0)
          fail(DiagKind::Type, condExpr->range, fmt::format("the condition of a while must be bool[], not {}", t->type.str()));
        region->yields.push_back(t);
      } else {
        SVal ignored;
        if (execBlock(*block, inner, &ignored))
          fail(DiagKind::ControlFlow, s.range, "a return inside a loop is not supported",
               {{{}, "assign the result to a var and return it after the loop"}});
        for (size_t k = 0; k < carried.size(); ++k) {
          Binding *b = scope->find(carried[k]);
          region->yields.push_back(materialize(b->val, types[k].dtype, s.range));
        }
      }
    } catch (...) {
      st_->cur = outer;
      throw;
    }
    st_->cur = outer;
    for (size_t k = 0; k < carried.size(); ++k)
      scope->find(carried[k])->val = entry[k];
    return region;
  };

  // Fixpoint: run the body; axes whose dims change become generic loop dims; run again.
  // Axes that enter equal and grow by the same constant share one generic dim (a KV
  // cache and the token list of a decoder), which the final pass confirms.
  std::string origin = fmt::format("fresh: loop-variant in the loop at line {}", s.range.begin.line);
  std::vector<TensorType> entryTypes = types;
  for (bool share : {true, false}) {
    std::set<std::pair<size_t, size_t>> generic;
    std::map<std::string, ExprRef> groups; // "entry dim|growth" -> generic dim
    std::map<std::string, std::vector<std::pair<size_t, size_t>>> members;
    types = entryTypes;
    size_t dimsMark = st_->info->dims.size();
    for (int pass = 0;; ++pass) {
      size_t namedMark = st_->info->values.size();
      body = runRegion(&s.body, nullptr);
      bool stable = true;
      for (size_t k = 0; k < carried.size(); ++k) {
        const TensorType &after = body->yields[k]->type;
        if (after.dtype != types[k].dtype || after.rank() != types[k].rank())
          fail(DiagKind::Assign, s.range,
               fmt::format("'{}' enters the loop as {} and leaves an iteration as {}; a var keeps its dtype and rank",
                           carried[k], types[k].str(), after.str()));
        for (size_t axis : ir::loopVariantAxes(types[k], after, an())) {
          if (generic.count({k, axis}))
            continue; // already generic: its growth is read off below
          stable = false;
          if (pass >= 3)
            continue;
          generic.insert({k, axis});
          ExprRef growth = an().simplify(sym::sub(after.dims[axis], types[k].dims[axis]));
          std::string key = share && growth->isConst() ? types[k].dims[axis]->str() + "|" + growth->str()
                                                       : fmt::format("{}|{}", k, axis);
          auto [it, isNew] = groups.try_emplace(key, nullptr);
          if (isNew) {
            it->second = freshDim("L", s.range, origin);
            // The entry size bounds it from below only while the loop cannot shrink it: a
            // loop that drops an element per iteration may reach 0.
            sym::Interval entryRange = an().bounds(types[k].dims[axis]);
            bool grows = an().canProve(growth, Rel::GE, sym::constant(0));
            an().declare(it->second->asVar()->name, grows ? std::max<int64_t>(0, entryRange.lo) : 0);
          }
          members[key].push_back({k, axis});
          types[k].dims[axis] = it->second;
        }
      }
      if (stable || pass >= 3)
        break;
      st_->info->values.resize(namedMark); // the names recorded by the discarded pass
    }
    bool confirmed = true;
    for (auto &[key, axes] : members) {
      std::set<std::string> growths;
      for (auto [k, axis] : axes)
        growths.insert(an().simplify(sym::sub(body->yields[k]->type.dims[axis], types[k].dims[axis]))->str());
      confirmed = confirmed && growths.size() == 1;
    }
    if (confirmed || !share)
      break;
    st_->info->dims.resize(dimsMark); // retry with one generic dim per axis
  }
  if (!isFor)
    cond = runRegion(nullptr, s.value.get());
  bool fresh = false;
  std::string exitOrigin = fmt::format("fresh: the size after the loop at line {}", s.range.begin.line);
  ir::PropagationContext ctx{an(), [&](const std::string &hint) { return freshDim(hint, s.range, exitOrigin); }};
  bool tripsKnown = trips != nullptr;
  if (!tripsKnown) // a while loop: one trip-count dim, made only if some size grows
    for (size_t k = 0; k < carried.size() && !trips; ++k)
      if (types[k].dims != entry[k].tensor->type.dims)
        trips = freshDim("iters", s.range, fmt::format("fresh: the trip count of the loop at line {}", s.range.begin.line));
  for (size_t k = 0; k < carried.size(); ++k) {
    TensorType exit = ir::loopExitType(entry[k].tensor->type, types[k], body->yields[k]->type, trips, tripsKnown, ctx, fresh);
    ir::Value *r = st_->graph->newValue(exit, carried[k], scope->find(carried[k])->declLoc);
    r->def = op;
    op->results.push_back(r);
    scope->find(carried[k])->val = SVal::ofTensor(r);
  }
  if (cond)
    op->regions.push_back(std::move(cond));
  op->regions.push_back(std::move(body));
  op->shapeClass = fresh ? ir::ShapeClass::EDO : ir::ShapeClass::ISDOS;
  st_->cur->ops.push_back(op);
}

} // namespace dnnc::sema

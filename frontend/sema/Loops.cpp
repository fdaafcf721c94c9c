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

  // Builds the body (or a while's condition) with the carried vars typed `types`.
  std::vector<TensorType> entryTypes, types;
  for (const SVal &v : entry)
    entryTypes.push_back(v.tensor->type);
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

  // RDP owns the fixpoint policy; sema builds the body with the types it asks for.
  std::string origin = fmt::format("fresh: loop-variant in the loop at line {}", s.range.begin.line);
  ir::PropagationContext loopCtx{an(), [&](const std::string &hint) { return freshDim(hint, s.range, origin); }};
  size_t namedMark = 0, dimsMark = 0;
  ir::LoopBody loopBody{
      [&](const std::vector<TensorType> &carriedTypes) {
        namedMark = st_->info->values.size();
        types = carriedTypes;
        body = runRegion(&s.body, nullptr);
        std::vector<TensorType> after;
        for (size_t k = 0; k < carried.size(); ++k) {
          after.push_back(body->yields[k]->type);
          if (after[k].dtype != types[k].dtype || after[k].rank() != types[k].rank())
            fail(DiagKind::Assign, s.range,
                 fmt::format("'{}' enters the loop as {} and leaves an iteration as {}; a var keeps its dtype and rank",
                             carried[k], types[k].str(), after[k].str()));
        }
        return after;
      },
      [&] { st_->info->values.resize(namedMark); }, // the names recorded by the discarded build
      [&] { dimsMark = st_->info->dims.size(); },
      [&] { st_->info->dims.resize(dimsMark); }};
  types = ir::loopFixpoint(entryTypes, loopBody, loopCtx).generic; // the last build's types
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
  for (size_t k = 0; k < carried.size(); ++k) // each var's value after the loop (`:type h`, dnnc shapes)
    record(carried[k], "var", SVal::ofTensor(op->results[k]), s.range);
}

} // namespace dnnc::sema

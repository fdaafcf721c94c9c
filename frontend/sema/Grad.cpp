// Sema: grad(y, x), grad(y, [a, b]) and allow_unused (training.md §11). Sema checks what
// a user can get wrong and builds one `grad` op whose results have the xs' types; the
// differentiate pass (ir/transforms/Autodiff.h) replaces it with the backward ops.
#include "frontend/sema/SemaInternal.h"

#include "ir/graph/GradRules.h"

namespace dnnc::sema {

namespace {
std::string nameOf(const ir::Value *v) {
  return v->name.empty() ? v->type.str() : fmt::format("'{}' ({})", v->name, v->type.str());
}
} // namespace

SVal Sema::gradCall(CallArgs &args, const ast::Expr &e) {
  const SVal *y = nullptr, *xs = nullptr;
  bool allowUnused = false;
  for (auto &[arg, val] : args) {
    if (arg->keyword == "allow_unused") {
      if (val.kind != SVal::Kind::Bool)
        fail(DiagKind::Type, arg->range, fmt::format("allow_unused must be true or false, not {}", describe(val)));
      allowUnused = val.b;
    } else if (!arg->keyword.empty() && arg->keyword != "y" && arg->keyword != "x") {
      fail(DiagKind::Keyword, arg->range, fmt::format("'grad' has no parameter '{}'", arg->keyword));
    } else if (arg->keyword == "y" || (arg->keyword.empty() && !y)) {
      y = &val;
    } else {
      xs = &val;
    }
  }
  if (!y || !xs)
    fail(DiagKind::Arity, e.range, "'grad' takes y and x: grad(y, x) or grad(y, [a, b])");
  if (!st_ || st_->cur != &st_->graph->body)
    fail(DiagKind::Grad, e.range, "grad is supported in a model's body only, not inside 'if', 'for' or 'while' yet");
  ir::Value *target = tensorOf(*y, y->loc.valid() ? y->loc : e.range, "the y of 'grad'");
  if (target->type.rank() != 0 || !isFloat(target->type.dtype))
    fail(DiagKind::Grad, y->loc.valid() ? y->loc : e.range,
         fmt::format("grad differentiates a float scalar (f32[], f16[] or bf16[]), not {}", nameOf(target)));
  bool many = xs->kind == SVal::Kind::List || xs->kind == SVal::Kind::Tuple;
  std::vector<SVal> items = many ? xs->items : std::vector<SVal>{*xs};
  if (items.empty())
    fail(DiagKind::Grad, e.range, "grad needs at least one x to differentiate with respect to");
  std::vector<ir::Value *> operands{target};
  std::vector<const ir::Value *> sources;
  for (const SVal &item : items) {
    SourceRange at = item.loc.valid() ? item.loc : e.range;
    ir::Value *x = tensorOf(item, at, "an x of 'grad'");
    if (!isFloat(x->type.dtype))
      fail(DiagKind::Grad, at, fmt::format("cannot differentiate with respect to {}: it is not a float tensor", nameOf(x)));
    operands.push_back(x);
    sources.push_back(x);
  }
  std::vector<bool> reached;
  ir::gradPath(*st_->cur, target, sources, reached);
  if (auto block = ir::gradBlocker(*st_->cur, target, sources))
    fail(DiagKind::Grad, e.range, block->why,
         {{block->op->loc, fmt::format("'{}' is on the path from x to y here", ir::opInfo(block->op->kind).spelling)}});
  for (size_t i = 0; i < sources.size(); ++i)
    if (!reached[i] && !allowUnused)
      fail(DiagKind::Grad, items[i].loc.valid() ? items[i].loc : e.range,
           fmt::format("{} does not depend on {} through float values; write allow_unused = true to get zeros", nameOf(target),
                       nameOf(sources[i])));
  ir::Op *op = emit(OpKind::Grad, operands, {}, sources.size(), e.range, std::nullopt, false);
  std::vector<SVal> results;
  for (size_t i = 0; i < sources.size(); ++i) {
    op->results[i]->type = sources[i]->type;
    results.push_back(SVal::ofTensor(op->results[i]));
  }
  return many ? makeList(results, SVal::Kind::Tuple) : results[0];
}

} // namespace dnnc::sema

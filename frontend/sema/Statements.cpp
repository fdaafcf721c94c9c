// Sema: statements (let, var, assignment, return, if, assert) and blocks.
#include "frontend/sema/SemaInternal.h"
#include "frontend/Stack.h"

namespace dnnc::sema {

namespace {

// Names assigned (not declared) anywhere in a block, in first-assignment order.
void assignedNames(const ast::Block &b, std::vector<std::string> &out) {
  for (const auto &s : b) {
    if (s->kind == ast::Stmt::Kind::Assign && std::find(out.begin(), out.end(), s->names[0]) == out.end())
      out.push_back(s->names[0]);
    assignedNames(s->body, out);
    assignedNames(s->orelse, out);
  }
}

} // namespace

ScopePtr child(ScopePtr parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  s->module = parent->module;
  return s;
}

std::vector<std::string> carriedVars(const std::vector<const ast::Block *> &blocks, ScopePtr scope) {
  std::vector<std::string> names, out;
  for (const ast::Block *b : blocks)
    assignedNames(*b, names);
  for (const std::string &n : names)
    if (Binding *b = scope->find(n); b && b->isMutable)
      out.push_back(n);
  return out;
}

bool Sema::execBlock(const ast::Block &b, ScopePtr scope, SVal *returned) {
  for (const auto &s : b)
    if (execStmt(*s, scope, returned))
      return true;
  return false;
}

bool Sema::execStmt(const ast::Stmt &s, ScopePtr scope, SVal *returned) {
  checkStack(s.range);
  switch (s.kind) {
  case ast::Stmt::Kind::Let:
  case ast::Stmt::Kind::Var: {
    SVal v = eval(*s.value, scope);
    bool isVar = s.kind == ast::Stmt::Kind::Var;
    const char *role = isVar ? "var" : "let";
    if (s.names.size() > 1) {
      if ((v.kind != SVal::Kind::Tuple && v.kind != SVal::Kind::List) || v.items.size() != s.names.size())
        fail(DiagKind::Type, s.range, fmt::format("cannot destructure {} into {} names", describe(v), s.names.size()));
      for (size_t i = 0; i < s.names.size(); ++i) {
        bind(scope, s.names[i], v.items[i], isVar, s.nameRanges[i]);
        record(s.names[i], role, scope->names[s.names[i]].val, s.nameRanges[i]);
      }
      return false;
    }
    if (s.annotation)
      checkAgainst(v, *s.annotation, scope, fmt::format("'{}'", s.names[0]), DiagKind::Annotation, s.value->range, FreshDims::Rename);
    if (isVar && v.isNumber() && st_)
      v = SVal::ofTensor(materialize(v, std::nullopt, s.value->range)); // a var may change at run time
    bind(scope, s.names[0], v, isVar, s.nameRanges[0]);
    record(s.names[0], role, scope->names[s.names[0]].val, s.nameRanges[0]);
    return false;
  }
  case ast::Stmt::Kind::Assign: {
    Binding *b = scope->find(s.names[0]);
    if (!b) {
      if (scope->module && scope->module->globals.count(s.names[0]))
        fail(DiagKind::Assign, s.nameRanges[0], fmt::format("cannot assign to the global '{}'", s.names[0]));
      unknownName(s.names[0], scope, s.nameRanges[0]);
    }
    if (!b->isMutable)
      fail(DiagKind::Assign, s.nameRanges[0], fmt::format("cannot assign to '{}': it is declared with let", s.names[0]),
           {{b->declLoc, fmt::format("'{}' is declared here; use var to make it assignable", s.names[0])}});
    SVal v = eval(*s.value, scope);
    if (v.isNumber() && b->val.kind == SVal::Kind::Tensor)
      v = SVal::ofTensor(materialize(v, b->val.tensor->type.dtype, s.value->range));
    if (b->val.kind == SVal::Kind::Tensor) {
      if (v.kind != SVal::Kind::Tensor)
        fail(DiagKind::Assign, s.value->range, fmt::format("cannot assign {} to the tensor var '{}'", describe(v), s.names[0]));
      const TensorType &old = b->val.tensor->type, &now = v.tensor->type;
      if (old.dtype != now.dtype || old.rank() != now.rank())
        fail(DiagKind::Assign, s.value->range,
             fmt::format("cannot assign {} to '{}', which is {}: a var keeps its dtype and rank", now.str(), s.names[0], old.str()),
             {{b->declLoc, fmt::format("'{}' is declared here", s.names[0])}});
    }
    if (v.kind == SVal::Kind::Tensor && v.tensor->name.empty()) {
      v.tensor->name = s.names[0];
      v.tensor->loc = s.nameRanges[0];
    }
    b->val = v;
    record(s.names[0], "var", v, s.nameRanges[0]);
    return false;
  }
  case ast::Stmt::Kind::Return:
    *returned = eval(*s.value, scope);
    return true;
  case ast::Stmt::Kind::If: {
    bool didReturn = false;
    execIf(s, scope, returned, didReturn);
    return didReturn;
  }
  case ast::Stmt::Kind::For:
  case ast::Stmt::Kind::While: execLoop(s, scope); return false;
  case ast::Stmt::Kind::Assert: execAssert(s, scope); return false;
  case ast::Stmt::Kind::Expr: eval(*s.value, scope); return false;
  }
  return false;
}

void Sema::execIf(const ast::Stmt &s, ScopePtr scope, SVal *returned, bool &didReturn) {
  SVal cond = eval(*s.value, scope);
  if (cond.kind == SVal::Kind::Bool) {
    // A compile-time condition: only the taken branch exists.
    didReturn = execBlock(cond.b ? s.body : s.orelse, child(scope), returned);
    return;
  }
  if (cond.kind != SVal::Kind::Tensor || cond.tensor->type.dtype != DType::Bool || cond.tensor->type.rank() != 0)
    fail(DiagKind::Type, s.value->range,
         fmt::format("the condition of an if must be bool[] (a scalar) or a compile-time bool, not {}", describe(cond)),
         {{{}, "reduce a bool tensor to a scalar first, e.g. max(p) > 0.5"}});
  if (!st_)
    fail(DiagKind::NotConstant, s.range, "a data-dependent if needs a model to run in");
  std::vector<std::string> carried = carriedVars({&s.body, &s.orelse}, scope);
  std::vector<SVal> entry;
  for (const std::string &n : carried) {
    Binding *b = scope->find(n);
    b->val = SVal::ofTensor(materialize(b->val, std::nullopt, s.range));
    entry.push_back(b->val);
  }
  ir::Op *op = st_->graph->newOp(OpKind::If, s.range);
  op->operands.push_back(cond.tensor);
  std::vector<std::vector<ir::Value *>> branchOut;
  ir::Region *outer = st_->cur;
  for (const ast::Block *block : {&s.body, &s.orelse}) {
    auto region = std::make_unique<ir::Region>();
    st_->cur = region.get();
    SVal ignored;
    bool ret;
    try {
      ret = execBlock(*block, child(scope), &ignored);
    } catch (...) {
      st_->cur = outer;
      throw;
    }
    st_->cur = outer;
    if (ret)
      fail(DiagKind::ControlFlow, s.range, "a return inside an if on a run-time condition is not supported",
           {{{}, "assign the result to a var in each branch and return it after the if"}});
    std::vector<ir::Value *> outs;
    for (size_t i = 0; i < carried.size(); ++i) {
      Binding *b = scope->find(carried[i]);
      outs.push_back(materialize(b->val, entry[i].tensor->type.dtype, s.range));
      b->val = entry[i];
    }
    region->yields = outs;
    branchOut.push_back(outs);
    op->regions.push_back(std::move(region));
  }
  bool fresh = false;
  std::string origin = fmt::format("fresh: the branches of the if at line {} disagree", s.range.begin.line);
  ir::PropagationContext ctx{an(), [&](const std::string &hint) { return freshDim(hint, s.range, origin); }};
  for (size_t i = 0; i < carried.size(); ++i) {
    const TensorType &a = branchOut[0][i]->type, &b = branchOut[1][i]->type;
    auto joined = ir::joinTypes(a, b, ctx, fresh);
    if (!joined)
      fail(DiagKind::ControlFlow, s.range,
           fmt::format("'{}' is {} after one branch and {} after the other; branches must agree on dtype and rank", carried[i],
                       a.str(), b.str()));
    ir::Value *r = st_->graph->newValue(*joined, carried[i], scope->find(carried[i])->declLoc);
    r->def = op;
    op->results.push_back(r);
    scope->find(carried[i])->val = SVal::ofTensor(r);
  }
  op->shapeClass = fresh ? ir::ShapeClass::EDO : ir::ShapeClass::ISDOS;
  st_->cur->ops.push_back(op);
  for (size_t i = 0; i < carried.size(); ++i) // each var's value after the if, the branches joined
    record(carried[i], "var", SVal::ofTensor(op->results[i]), s.range);
}

void Sema::execAssert(const ast::Stmt &s, ScopePtr scope) {
  const ast::Expr &e = *s.value;
  auto rel = e.kind == ast::Expr::Kind::Binary ? relOf(e.binaryOp) : std::nullopt;
  if (!rel)
    fail(DiagKind::Type, e.range, "assert takes a relation between dims, such as `assert S == T;`");
  SVal a = eval(*e.items[0], scope), b = eval(*e.items[1], scope);
  if (a.kind != SVal::Kind::Int || b.kind != SVal::Kind::Int)
    fail(DiagKind::Type, e.range, fmt::format("assert relates dims, not {} and {}", describe(a), describe(b)),
         {{{}, "to act on tensor values, use if"}});
  if (an().canProve(a.dim, negate(*rel), b.dim))
    fail(DiagKind::AssertFalse, e.range,
         fmt::format("this assert can never hold: {} {} {} is false for every allowed binding", a.dim->str(), relSpelling(*rel), b.dim->str()));
  an().addFact(a.dim, *rel, b.dim);
  if (st_)
    emit(OpKind::AssertDims, {}, {{"lhs", a.dim}, {"rel", std::string(relSpelling(*rel))}, {"rhs", b.dim}}, 0, e.range, {}, false);
}

} // namespace dnnc::sema

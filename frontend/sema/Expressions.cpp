// Sema: expressions, and the compile-time evaluation of dim arithmetic and numbers.
#include "frontend/sema/SemaInternal.h"
#include "frontend/Stack.h"
#include "ir/graph/ScalarOps.h"

#include <cmath>
#include <stdexcept>

namespace dnnc::sema {

using O = ast::BinaryOp;

std::optional<Rel> relOf(ast::BinaryOp op) {
  switch (op) {
  case O::Eq: return Rel::EQ;
  case O::Ne: return Rel::NE;
  case O::Lt: return Rel::LT;
  case O::Le: return Rel::LE;
  case O::Gt: return Rel::GT;
  case O::Ge: return Rel::GE;
  case O::Add:
  case O::Sub:
  case O::Mul:
  case O::Div:
  case O::Mod:
  case O::Pow:
  case O::Matmul:
  case O::And:
  case O::Or: return std::nullopt;
  }
  return std::nullopt;
}

namespace {
// The graph op a binary operator applies to tensors.
OpKind tensorOp(ast::BinaryOp op) {
  switch (op) {
  case O::Add: return OpKind::Add;
  case O::Sub: return OpKind::Sub;
  case O::Mul: return OpKind::Mul;
  case O::Div: return OpKind::Div;
  case O::Mod: return OpKind::Mod;
  case O::Pow: return OpKind::Pow;
  case O::Matmul: return OpKind::Matmul;
  case O::Eq: return OpKind::Eq;
  case O::Ne: return OpKind::Ne;
  case O::Lt: return OpKind::Lt;
  case O::Le: return OpKind::Le;
  case O::Gt: return OpKind::Gt;
  case O::Ge: return OpKind::Ge;
  case O::And: return OpKind::And;
  case O::Or: return OpKind::Or;
  }
  throw InternalError("unknown binary operator");
}
} // namespace

Rel negate(Rel r) {
  switch (r) {
  case Rel::EQ: return Rel::NE;
  case Rel::NE: return Rel::EQ;
  case Rel::LT: return Rel::GE;
  case Rel::LE: return Rel::GT;
  case Rel::GT: return Rel::LE;
  case Rel::GE: return Rel::LT;
  }
  return r;
}

ExprRef Sema::evalDim(const ast::Expr &e, ScopePtr scope, const char *what) {
  SVal v = eval(e, scope);
  if (v.kind != SVal::Kind::Int)
    fail(DiagKind::InvalidDim, e.range, fmt::format("{} must be an integer dim expression, not {}", what, describe(v)));
  return an().simplify(v.dim);
}

SVal Sema::eval(const ast::Expr &e, ScopePtr scope) {
  checkStack(e.range);
  try {
    return evalUnchecked(e, scope);
  } catch (const std::overflow_error &) { // integer arithmetic on dims and constants
    fail(DiagKind::Range, e.range, "the value of this expression overflows 64 bits");
  }
}

SVal Sema::evalUnchecked(const ast::Expr &e, ScopePtr scope) {
  SVal out;
  switch (e.kind) {
  case ast::Expr::Kind::Int: out = SVal::ofInt(sym::constant(e.intValue)); break;
  case ast::Expr::Kind::Float:
    out.kind = SVal::Kind::Float;
    out.f = e.floatValue;
    break;
  case ast::Expr::Kind::Bool:
    out.kind = SVal::Kind::Bool;
    out.b = e.intValue != 0;
    break;
  case ast::Expr::Kind::String:
    out.kind = SVal::Kind::String;
    out.s = e.text;
    break;
  case ast::Expr::Kind::DType:
    out.kind = SVal::Kind::DType;
    out.dtype = *ir::parseDType(e.text);
    break;
  case ast::Expr::Kind::Name: out = lookup(e.text, scope, e.range); break;
  case ast::Expr::Kind::Tuple:
  case ast::Expr::Kind::List: {
    std::vector<SVal> items;
    for (const auto &i : e.items)
      items.push_back(eval(*i, scope));
    out = makeList(std::move(items), e.kind == ast::Expr::Kind::Tuple ? SVal::Kind::Tuple : SVal::Kind::List);
    break;
  }
  case ast::Expr::Kind::Unary: out = unary(e, scope); break;
  case ast::Expr::Kind::Binary: out = binary(e, scope); break;
  case ast::Expr::Kind::Call: out = call(e, scope); break;
  case ast::Expr::Kind::Index: out = index(e, scope); break;
  case ast::Expr::Kind::Member: {
    SVal base = eval(*e.items[0], scope);
    if (base.kind != SVal::Kind::Module)
      fail(DiagKind::Type, e.range, fmt::format("{} has no member '{}'", describe(base), e.text));
    auto g = lookupGlobal(*base.module, e.text, e.range);
    if (!g)
      fail(DiagKind::UnknownName, e.range, fmt::format("module '{}' has no member '{}'", base.module->name, e.text));
    out = *g;
    break;
  }
  }
  out.loc = e.range;
  return out;
}

SVal Sema::unary(const ast::Expr &e, ScopePtr scope) {
  SVal v = eval(*e.items[0], scope);
  if (e.unaryOp == ast::UnaryOp::Plus && (v.kind == SVal::Kind::Int || v.kind == SVal::Kind::Float || v.kind == SVal::Kind::Tensor))
    return v;
  if (e.unaryOp == ast::UnaryOp::Minus) {
    if (v.kind == SVal::Kind::Int)
      return SVal::ofInt(sym::neg(v.dim));
    if (v.kind == SVal::Kind::Float) {
      v.f = -v.f;
      return v;
    }
    if (v.kind == SVal::Kind::Tensor)
      return SVal::ofTensor(emit(OpKind::Neg, {v.tensor}, {}, 1, e.range)->results[0]);
  }
  if (e.unaryOp == ast::UnaryOp::Not) {
    if (v.kind == SVal::Kind::Bool) {
      v.b = !v.b;
      return v;
    }
    if (v.kind == SVal::Kind::Tensor)
      return SVal::ofTensor(emit(OpKind::Not, {v.tensor}, {}, 1, e.range)->results[0]);
  }
  fail(DiagKind::Type, e.range, fmt::format("cannot apply '{}' to {}", e.text, describe(v)));
}

SVal Sema::compileTimeBinary(const SVal &a, const SVal &b, const ast::Expr &e) {
  using K = SVal::Kind;
  ast::BinaryOp op = e.binaryOp;
  if (op == O::And || op == O::Or) {
    if (a.kind != K::Bool || b.kind != K::Bool)
      fail(DiagKind::Type, e.range, fmt::format("'{}' needs bool operands, not {} and {}", e.text, describe(a), describe(b)));
    SVal r = a;
    r.b = op == O::And ? (a.b && b.b) : (a.b || b.b);
    return r;
  }
  if (a.kind == K::Int && b.kind == K::Int) {
    if (auto rel = relOf(op)) {
      if (an().canProve(a.dim, *rel, b.dim) || an().canProve(a.dim, negate(*rel), b.dim)) {
        SVal r;
        r.kind = K::Bool;
        r.b = an().canProve(a.dim, *rel, b.dim);
        return r;
      }
      return {}; // undecided: compared at run time
    }
    if ((op == O::Div || op == O::Mod) && b.dim->asConst() && *b.dim->asConst() <= 0)
      fail(DiagKind::Range, e.range, fmt::format("'{}' by {} in a dim expression (dims divide by positive numbers)", e.text, b.dim->str()));
    if (op == O::Add) return SVal::ofInt(sym::add(a.dim, b.dim));
    if (op == O::Sub) return SVal::ofInt(sym::sub(a.dim, b.dim));
    if (op == O::Mul) return SVal::ofInt(sym::mul(a.dim, b.dim));
    if (op == O::Div) return SVal::ofInt(sym::floorDiv(a.dim, b.dim));
    if (op == O::Mod) return SVal::ofInt(sym::mod(a.dim, b.dim));
    if (op == O::Pow) {
      auto n = b.dim->asConst();
      if (!n || *n < 0 || *n > 64)
        fail(DiagKind::InvalidDim, e.range, "a dim power needs a constant exponent between 0 and 64");
      ExprRef r = sym::constant(1);
      for (int64_t i = 0; i < *n; ++i)
        r = sym::mul(r, a.dim);
      return SVal::ofInt(r);
    }
  }
  auto num = [](const SVal &v) -> std::optional<double> {
    if (v.kind == K::Float)
      return v.f;
    if (v.kind == K::Int && v.dim->isConst())
      return static_cast<double>(*v.dim->asConst());
    return std::nullopt;
  };
  auto x = num(a), y = num(b);
  if (x && y && (a.kind == K::Float || b.kind == K::Float)) {
    SVal r;
    if (auto rel = relOf(op)) {
      r.kind = K::Bool;
      switch (*rel) {
      case Rel::EQ: r.b = *x == *y; break;
      case Rel::NE: r.b = *x != *y; break;
      case Rel::LT: r.b = *x < *y; break;
      case Rel::LE: r.b = *x <= *y; break;
      case Rel::GT: r.b = *x > *y; break;
      case Rel::GE: r.b = *x >= *y; break;
      }
      return r;
    }
    r.kind = K::Float;
    if (op == O::Add) r.f = *x + *y;
    else if (op == O::Sub) r.f = *x - *y;
    else if (op == O::Mul) r.f = *x * *y;
    else if (op == O::Div) r.f = *x / *y;
    else if (op == O::Mod) r.f = ir::floorMod(*x, *y);
    else if (op == O::Pow) r.f = std::pow(*x, *y);
    else return {};
    return r;
  }
  return {};
}

SVal Sema::binary(const ast::Expr &e, ScopePtr scope) {
  // A left-deep chain (a + b + c + ..., ten thousand terms if need be) is evaluated along
  // its left spine without recursion.
  std::vector<const ast::Expr *> spine{&e};
  while (spine.back()->items[0]->kind == ast::Expr::Kind::Binary)
    spine.push_back(spine.back()->items[0].get());
  SVal acc = eval(*spine.back()->items[0], scope);
  for (auto it = spine.rbegin(); it != spine.rend(); ++it) {
    SVal b = eval(*(*it)->items[1], scope);
    try {
      acc = binaryOp(**it, acc, b);
    } catch (const std::overflow_error &) { // the innermost of a chain's terms that overflows
      fail(DiagKind::Range, (*it)->range, "the value of this expression overflows 64 bits");
    }
    acc.loc = (*it)->range;
  }
  return acc;
}

SVal Sema::binaryOp(const ast::Expr &e, const SVal &a, const SVal &b) {
  const std::string &op = e.text;
  if (a.kind != SVal::Kind::Tensor && b.kind != SVal::Kind::Tensor) {
    if (!a.isNumber() || !b.isNumber())
      fail(DiagKind::Type, e.range, fmt::format("cannot apply '{}' to {} and {}", op, describe(a), describe(b)));
    SVal folded = compileTimeBinary(a, b, e);
    if (folded.kind != SVal::Kind::None)
      return folded;
  }
  for (const SVal *v : {&a, &b})
    if (v->kind != SVal::Kind::Tensor && !v->isNumber())
      fail(DiagKind::Type, v->loc, fmt::format("cannot apply '{}' to {}", op, describe(*v)));
  // Scalar literals adopt the tensor operand's dtype.
  std::optional<DType> adopt;
  if (a.kind == SVal::Kind::Tensor)
    adopt = a.tensor->type.dtype;
  else if (b.kind == SVal::Kind::Tensor)
    adopt = b.tensor->type.dtype;
  else if (a.kind == SVal::Kind::Float || b.kind == SVal::Kind::Float)
    adopt = DType::F32; // a dim not known until run time with a float (`hd ** 0.5`): a float, as in Python
  ir::Value *x = materialize(a, adopt, a.loc), *y = materialize(b, adopt, b.loc);
  return SVal::ofTensor(emit(tensorOp(e.binaryOp), {x, y}, {}, 1, e.range)->results[0]);
}

} // namespace dnnc::sema

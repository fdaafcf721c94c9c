// Symbolic dimension expressions: immutable, interned, in canonical sum-of-products form.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::sym {

class Expr;
using ExprRef = const Expr *;

// An atom is an indivisible factor of a monomial: a named dim, or an operation the
// polynomial form cannot distribute over (floor division, remainder, min, max).
struct Atom {
  enum class Kind { Var, Div, Mod, Min, Max };
  Kind kind;
  std::string name; // Var only
  ExprRef lhs = nullptr, rhs = nullptr;
  std::string key; // canonical text, used for ordering and interning
};

struct Term {
  int64_t coef;
  std::vector<const Atom *> factors; // sorted by key, repeats mean powers
};

// A canonical polynomial: sum of terms (distinct monomials, non-zero coefficients)
// plus a constant. Two equal expressions are the same pointer.
class Expr {
public:
  const std::vector<Term> &terms() const { return terms_; }
  int64_t constant() const { return constant_; }
  bool isConst() const { return terms_.empty(); }
  std::optional<int64_t> asConst() const {
    if (isConst())
      return constant_;
    return std::nullopt;
  }
  // The atom if this expression is exactly one named dim.
  const Atom *asVar() const;
  const std::string &str() const { return text_; }

private:
  friend class Context;
  std::vector<Term> terms_;
  int64_t constant_ = 0;
  std::string text_;
};

ExprRef constant(int64_t v);
ExprRef var(const std::string &name);
ExprRef atomExpr(const Atom *a);
ExprRef add(ExprRef a, ExprRef b);
ExprRef sub(ExprRef a, ExprRef b);
ExprRef mul(ExprRef a, ExprRef b);
ExprRef neg(ExprRef a);
ExprRef floorDiv(ExprRef a, ExprRef b);
ExprRef mod(ExprRef a, ExprRef b);
ExprRef min(ExprRef a, ExprRef b);
ExprRef max(ExprRef a, ExprRef b);

// Rebuilds e with each named dim replaced by its entry in `map` (others kept).
ExprRef substitute(ExprRef e, const std::map<std::string, ExprRef> &map);
// The value of e when every dim in it is bound; nullopt when one is unbound or a
// division by zero occurs.
std::optional<int64_t> evaluate(ExprRef e, const std::map<std::string, int64_t> &binding);
// The names of the dims e mentions, sorted.
std::vector<std::string> freeVars(ExprRef e);

} // namespace dnnc::sym

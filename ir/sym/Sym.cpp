// Construction, canonicalization, printing, substitution and evaluation of dim expressions.
#include "ir/sym/Sym.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <unordered_map>

namespace dnnc::sym {
namespace {

using Monomial = std::vector<const Atom *>;

int64_t checked(__int128 v) {
  if (v > INT64_MAX || v < INT64_MIN)
    throw std::overflow_error("dim expression overflows 64 bits");
  return static_cast<int64_t>(v);
}

int64_t floorDivInt(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --q;
  return q;
}
int64_t floorModInt(int64_t a, int64_t b) { return a - floorDivInt(a, b) * b; }

std::string monomialKey(const Monomial &m) {
  std::string k;
  for (const Atom *a : m) {
    if (!k.empty())
      k += '*';
    k += a->key;
  }
  return k;
}

bool needsParens(ExprRef e) { return e->terms().size() + (e->constant() != 0 ? 1 : 0) > 1 || (e->terms().size() == 1 && (e->terms()[0].coef != 1 || e->terms()[0].factors.size() > 1)); }

std::string operandText(ExprRef e) { return needsParens(e) ? "(" + e->str() + ")" : e->str(); }

bool isCompoundAtom(const Atom *a) { return a->kind == Atom::Kind::Div || a->kind == Atom::Kind::Mod; }

// The right operand of / or %, which bind left to right: a quotient or remainder there
// keeps its parentheses. Atoms are interned by this text, so B/(T/D) must not read as
// (B/T)/D, a different atom.
std::string divisorText(ExprRef e) {
  bool compound = e->constant() == 0 && e->terms().size() == 1 && e->terms()[0].factors.size() == 1 &&
                  isCompoundAtom(e->terms()[0].factors[0]);
  return compound ? "(" + e->str() + ")" : operandText(e);
}

} // namespace

class Context {
public:
  static Context &get() {
    static Context ctx;
    return ctx;
  }

  const Atom *atom(Atom::Kind kind, std::string name, ExprRef lhs, ExprRef rhs) {
    std::string key;
    switch (kind) {
    case Atom::Kind::Var: key = name; break;
    case Atom::Kind::Div: key = operandText(lhs) + "/" + divisorText(rhs); break;
    case Atom::Kind::Mod: key = operandText(lhs) + " % " + divisorText(rhs); break;
    case Atom::Kind::Min: key = "min(" + lhs->str() + ", " + rhs->str() + ")"; break;
    case Atom::Kind::Max: key = "max(" + lhs->str() + ", " + rhs->str() + ")"; break;
    }
    auto [it, inserted] = atoms_.try_emplace(key);
    if (inserted)
      it->second = std::make_unique<Atom>(Atom{kind, std::move(name), lhs, rhs, key});
    return it->second.get();
  }

  // Interns the polynomial given as monomial -> coefficient (zero coefficients dropped).
  ExprRef poly(const std::map<Monomial, int64_t> &coefs, int64_t constant) {
    std::vector<Term> terms;
    for (auto &[m, c] : coefs)
      if (c != 0 && !m.empty())
        terms.push_back({c, m});
    std::sort(terms.begin(), terms.end(), [](const Term &a, const Term &b) {
      if (a.factors.size() != b.factors.size())
        return a.factors.size() > b.factors.size();
      return monomialKey(a.factors) < monomialKey(b.factors);
    });
    std::string text;
    for (const Term &t : terms) {
      int64_t mag = t.coef < 0 ? -t.coef : t.coef;
      if (text.empty())
        text = t.coef < 0 ? "-" : "";
      else
        text += t.coef < 0 ? " - " : " + ";
      std::string factors;
      // A leading minus binds tighter than / and %: -(S % 3) is not -S % 3.
      bool product = t.factors.size() > 1 || mag != 1 || text == "-";
      for (const Atom *a : t.factors) {
        if (!factors.empty())
          factors += '*';
        factors += (product && isCompoundAtom(a)) ? "(" + a->key + ")" : a->key;
      }
      text += mag != 1 ? std::to_string(mag) + "*" + factors : factors;
    }
    if (text.empty())
      text = std::to_string(constant);
    else if (constant != 0)
      text += (constant < 0 ? " - " : " + ") + std::to_string(constant < 0 ? -constant : constant);
    auto [it, inserted] = exprs_.try_emplace(text);
    if (inserted) {
      auto e = std::unique_ptr<Expr>(new Expr());
      e->terms_ = std::move(terms);
      e->constant_ = constant;
      e->text_ = text;
      it->second = std::move(e);
    }
    return it->second.get();
  }

  ExprRef fromAtom(const Atom *a) { return poly({{Monomial{a}, 1}}, 0); }

private:
  std::unordered_map<std::string, std::unique_ptr<Atom>> atoms_;
  std::unordered_map<std::string, std::unique_ptr<Expr>> exprs_;
};

namespace {
Context &ctx() { return Context::get(); }

std::map<Monomial, int64_t> coefMap(ExprRef e) {
  std::map<Monomial, int64_t> m;
  for (const Term &t : e->terms())
    m[t.factors] = t.coef;
  return m;
}

ExprRef minMax(Atom::Kind kind, ExprRef a, ExprRef b) {
  if (a == b)
    return a;
  auto d = sub(a, b)->asConst();
  if (d)
    return ((*d <= 0) == (kind == Atom::Kind::Min)) ? a : b;
  if (a->str() > b->str())
    std::swap(a, b); // commutative: one canonical operand order
  return ctx().fromAtom(ctx().atom(kind, "", a, b));
}

// The quotient when every term of a is divisible by the single-term b, else nullopt.
std::optional<ExprRef> exactDivide(ExprRef a, ExprRef b) {
  if (b->terms().size() != 1 || b->constant() != 0)
    return std::nullopt;
  const Term &d = b->terms()[0];
  if (a->constant() != 0)
    return std::nullopt;
  std::map<Monomial, int64_t> out;
  int64_t constantPart = 0;
  for (const Term &t : a->terms()) {
    if (t.coef % d.coef != 0)
      return std::nullopt;
    Monomial rest = t.factors;
    for (const Atom *f : d.factors) {
      auto it = std::find(rest.begin(), rest.end(), f);
      if (it == rest.end())
        return std::nullopt;
      rest.erase(it);
    }
    if (rest.empty())
      constantPart += t.coef / d.coef;
    else
      out[rest] += t.coef / d.coef;
  }
  return ctx().poly(out, constantPart);
}

// a / b for a polynomial b of several terms when b divides a exactly (3*B + 15 by B + 5,
// 3*B*T + 15*T by B + 5): multivariate long division, each step dividing the remainder's
// leading term (highest degree, then last by key) by b's. The quotient counts only if q*b
// gives a back, so the order of terms decides whether a quotient is found, never its value.
std::optional<ExprRef> polyDivide(ExprRef a, ExprRef b) {
  auto leading = [](ExprRef e) -> std::optional<Term> {
    std::optional<Term> best;
    for (const Term &t : e->terms()) {
      auto keys = [](const Term &x) {
        std::vector<std::string> k;
        for (const Atom *f : x.factors)
          k.push_back(f->key);
        return k;
      };
      if (!best || t.factors.size() > best->factors.size() ||
          (t.factors.size() == best->factors.size() && keys(*best) < keys(t)))
        best = t;
    }
    if (!best && e->constant() != 0)
      best = Term{e->constant(), {}};
    return best;
  };
  std::optional<Term> lb = leading(b);
  if (!lb)
    return std::nullopt;
  ExprRef q = constant(0), r = a;
  for (int step = 0; step < 64; ++step) {
    std::optional<Term> lr = leading(r);
    if (!lr)
      return mul(q, b) == a ? std::optional<ExprRef>(q) : std::nullopt;
    if (lr->coef % lb->coef != 0)
      return std::nullopt;
    Monomial rest = lr->factors;
    for (const Atom *f : lb->factors) {
      auto it = std::find(rest.begin(), rest.end(), f);
      if (it == rest.end())
        return std::nullopt;
      rest.erase(it);
    }
    ExprRef t = rest.empty() ? constant(lr->coef / lb->coef) : ctx().poly({{rest, lr->coef / lb->coef}}, 0);
    try {
      q = add(q, t);
      r = sub(r, mul(t, b));
    } catch (const std::overflow_error &) { // a trial product too large: no exact quotient claimed
      return std::nullopt;
    }
  }
  return std::nullopt;
}
} // namespace

const Atom *Expr::asVar() const {
  if (terms_.size() == 1 && constant_ == 0 && terms_[0].coef == 1 && terms_[0].factors.size() == 1 &&
      terms_[0].factors[0]->kind == Atom::Kind::Var)
    return terms_[0].factors[0];
  return nullptr;
}

ExprRef atomExpr(const Atom *a) { return ctx().fromAtom(a); }
ExprRef constant(int64_t v) { return ctx().poly({}, v); }
ExprRef var(const std::string &name) { return ctx().fromAtom(ctx().atom(Atom::Kind::Var, name, nullptr, nullptr)); }

namespace {
// c*b*(a/b)*F + c*(a % b)*F = c*a*F (floor division and its remainder; a single-term b,
// never 0 where the expression is evaluated). A reshape's index leaves such a pair, as in
// ((4096*i + j)/W)*W + (4096*i + j) % W, which folds back to the flat index 4096*i + j:
// a contiguous load instead of a division and a remainder per element.
ExprRef foldDivMod(ExprRef e) {
  auto atomOf = [](Atom::Kind kind, const Term &t) {
    auto at = std::find_if(t.factors.begin(), t.factors.end(), [&](const Atom *f) { return f->kind == kind; });
    return at == t.factors.end() ? nullptr : *at;
  };
  for (const Term &t : e->terms()) {
    const Atom *m = atomOf(Atom::Kind::Mod, t);
    if (!m)
      continue;
    ExprRef b = m->rhs;
    int64_t bCoef = b->constant();
    Monomial quotient;
    if (!b->isConst()) {
      if (b->constant() != 0 || b->terms().size() != 1)
        continue;
      bCoef = b->terms()[0].coef, quotient = b->terms()[0].factors;
    }
    Monomial rest = t.factors;
    rest.erase(std::find(rest.begin(), rest.end(), m));
    quotient.insert(quotient.end(), rest.begin(), rest.end());
    // The quotient's term: rest * b's monomial * (a / b), coefficient c * b's.
    for (const Term &q : e->terms()) {
      const Atom *d = atomOf(Atom::Kind::Div, q);
      if (!d || d->lhs != m->lhs || d->rhs != b || static_cast<__int128>(q.coef) != static_cast<__int128>(t.coef) * bCoef)
        continue;
      Monomial expected = quotient;
      expected.push_back(d);
      std::sort(expected.begin(), expected.end(), [](const Atom *x, const Atom *y) { return x->key < y->key; });
      if (expected != q.factors)
        continue;
      auto coefs = coefMap(e);
      coefs.erase(q.factors);
      coefs.erase(t.factors);
      return add(ctx().poly(coefs, e->constant()), mul(ctx().poly({{rest, t.coef}}, rest.empty() ? t.coef : 0), m->lhs));
    }
  }
  return e;
}
} // namespace

ExprRef add(ExprRef a, ExprRef b) {
  auto m = coefMap(a);
  for (const Term &t : b->terms())
    m[t.factors] = checked(static_cast<__int128>(m[t.factors]) + t.coef);
  return foldDivMod(ctx().poly(m, checked(static_cast<__int128>(a->constant()) + b->constant())));
}

ExprRef neg(ExprRef a) { return mul(a, constant(-1)); }
ExprRef sub(ExprRef a, ExprRef b) { return add(a, neg(b)); }

ExprRef mul(ExprRef a, ExprRef b) {
  std::map<Monomial, int64_t> m;
  auto withConst = [](ExprRef e) {
    std::vector<Term> ts = e->terms();
    if (e->constant() != 0)
      ts.push_back({e->constant(), {}});
    return ts;
  };
  int64_t c = 0;
  for (const Term &x : withConst(a))
    for (const Term &y : withConst(b)) {
      int64_t coef = checked(static_cast<__int128>(x.coef) * y.coef);
      Monomial f = x.factors;
      f.insert(f.end(), y.factors.begin(), y.factors.end());
      std::sort(f.begin(), f.end(), [](const Atom *p, const Atom *q) { return p->key < q->key; });
      if (f.empty())
        c = checked(static_cast<__int128>(c) + coef);
      else
        m[f] = checked(static_cast<__int128>(m[f]) + coef);
    }
  return ctx().poly(m, c);
}

ExprRef floorDiv(ExprRef a, ExprRef b) {
  auto cb = b->asConst();
  if (cb && *cb == 1)
    return a;
  if (cb && *cb > 0) {
    int64_t c = *cb;
    if (auto ca = a->asConst())
      return constant(floorDivInt(*ca, c));
    // a = c*q + r with 0 <= each coefficient of r < c; floor(a/c) = q + floor(r/c).
    std::map<Monomial, int64_t> q, r;
    for (const Term &t : a->terms()) {
      q[t.factors] = floorDivInt(t.coef, c);
      r[t.factors] = floorModInt(t.coef, c);
    }
    ExprRef qe = ctx().poly(q, floorDivInt(a->constant(), c));
    ExprRef re = ctx().poly(r, floorModInt(a->constant(), c));
    if (re->isConst())
      return qe; // 0 <= r < c
    return add(qe, ctx().fromAtom(ctx().atom(Atom::Kind::Div, "", re, b)));
  }
  if (!cb) {
    if (auto exact = exactDivide(a, b))
      return *exact;
    if (auto exact = polyDivide(a, b))
      return *exact;
    if (a == b)
      return constant(1); // dims are >= 1, so b is never 0 here
  }
  return ctx().fromAtom(ctx().atom(Atom::Kind::Div, "", a, b)); // includes b <= 0: left unevaluated
}

ExprRef mod(ExprRef a, ExprRef b) {
  auto cb = b->asConst();
  if (cb && *cb == 1)
    return constant(0);
  if (cb && *cb > 0) {
    int64_t c = *cb;
    std::map<Monomial, int64_t> r;
    for (const Term &t : a->terms())
      r[t.factors] = floorModInt(t.coef, c);
    ExprRef re = ctx().poly(r, floorModInt(a->constant(), c));
    if (re->isConst())
      return re;
    return ctx().fromAtom(ctx().atom(Atom::Kind::Mod, "", re, b));
  }
  if (!cb && (exactDivide(a, b) || a == b))
    return constant(0);
  return ctx().fromAtom(ctx().atom(Atom::Kind::Mod, "", a, b));
}

ExprRef min(ExprRef a, ExprRef b) { return minMax(Atom::Kind::Min, a, b); }
ExprRef max(ExprRef a, ExprRef b) { return minMax(Atom::Kind::Max, a, b); }

namespace {
template <class AtomFn> ExprRef rebuild(ExprRef e, AtomFn &&atomFn) {
  ExprRef out = constant(e->constant());
  for (const Term &t : e->terms()) {
    ExprRef term = constant(t.coef);
    for (const Atom *a : t.factors)
      term = mul(term, atomFn(a));
    out = add(out, term);
  }
  return out;
}

ExprRef applyAtom(const Atom *a, ExprRef l, ExprRef r) {
  switch (a->kind) {
  case Atom::Kind::Div: return floorDiv(l, r);
  case Atom::Kind::Mod: return mod(l, r);
  case Atom::Kind::Min: return min(l, r);
  case Atom::Kind::Max: return max(l, r);
  case Atom::Kind::Var: break;
  }
  return var(a->name);
}
} // namespace

ExprRef substitute(ExprRef e, const std::map<std::string, ExprRef> &map) {
  if (map.empty())
    return e;
  return rebuild(e, [&](const Atom *a) -> ExprRef {
    if (a->kind == Atom::Kind::Var) {
      auto it = map.find(a->name);
      return it == map.end() ? var(a->name) : it->second;
    }
    return applyAtom(a, substitute(a->lhs, map), substitute(a->rhs, map));
  });
}

std::optional<int64_t> evaluate(ExprRef e, const std::map<std::string, int64_t> &binding) {
  if (e->isConst()) // no dims to substitute: the runtime asks this of static indices at every call
    return e->constant();
  std::map<std::string, ExprRef> map;
  for (auto &[k, v] : binding)
    map[k] = constant(v);
  try {
    ExprRef r = substitute(e, map);
    // A division by zero stays symbolic (the divisor folded to 0), so it is not constant.
    return r->asConst();
  } catch (const std::overflow_error &) {
    return std::nullopt;
  }
}

std::vector<std::string> freeVars(ExprRef e) {
  std::vector<std::string> out;
  for (const Term &t : e->terms())
    for (const Atom *a : t.factors) {
      if (a->kind == Atom::Kind::Var)
        out.push_back(a->name);
      else {
        auto l = freeVars(a->lhs), r = freeVars(a->rhs);
        out.insert(out.end(), l.begin(), l.end());
        out.insert(out.end(), r.begin(), r.end());
      }
    }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

} // namespace dnnc::sym

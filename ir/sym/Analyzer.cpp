// Bounds by interval arithmetic over dims shifted to start at zero, simplification under
// facts, and sound proofs of dim relations (false means unknown).
#include "ir/sym/Analyzer.h"

#include <algorithm>
#include <cstdlib>

namespace dnnc::sym {
namespace {

constexpr int64_t kInf = Interval::kInf;
constexpr int kMaxProofDepth = 3;
// Names the analyzer makes for itself; '$' cannot start a user identifier.
constexpr char kShiftedPrefix = '$';
// Prefix of the remainder dims a proof introduces (see proveNonNegative).
constexpr const char *kScratchPrefix = "%r";

int64_t clampInf(__int128 v) { return v >= kInf ? kInf : v <= -kInf ? -kInf : static_cast<int64_t>(v); }

Interval mulInterval(Interval a, Interval b) {
  __int128 c[4] = {(__int128)a.lo * b.lo, (__int128)a.lo * b.hi, (__int128)a.hi * b.lo, (__int128)a.hi * b.hi};
  return {clampInf(*std::min_element(c, c + 4)), clampInf(*std::max_element(c, c + 4))};
}

Interval addInterval(Interval a, Interval b) {
  return {clampInf((__int128)a.lo + b.lo), clampInf((__int128)a.hi + b.hi)};
}

int64_t floorDivSat(int64_t a, int64_t b) {
  if (a >= kInf || a <= -kInf)
    return a;
  if (b >= kInf)
    return a >= 0 ? 0 : -1;
  int64_t q = a / b;
  if (a % b != 0 && (a < 0) != (b < 0))
    --q;
  return q;
}

} // namespace

const char *relSpelling(Rel r) {
  switch (r) {
  case Rel::EQ: return "==";
  case Rel::NE: return "!=";
  case Rel::LT: return "<";
  case Rel::LE: return "<=";
  case Rel::GT: return ">";
  case Rel::GE: return ">=";
  }
  return "?";
}

void Analyzer::setRange(const std::string &name, int64_t lo, int64_t hi) {
  Interval cur = range(name);
  ranges_[name] = {std::max(cur.lo, lo), std::min(cur.hi, hi)};
  forget();
}

bool Analyzer::memoizable(ExprRef e) const {
  return proofScratch_.empty() || e->str().find(kScratchPrefix) == std::string::npos;
}

Interval Analyzer::range(const std::string &name) const {
  if (auto s = proofScratch_.find(name); s != proofScratch_.end())
    return s->second;
  if (!name.empty() && name[0] == kShiftedPrefix) {
    Interval base = range(name.substr(1));
    return {0, base.hi >= kInf ? kInf : base.hi - base.lo};
  }
  auto it = ranges_.find(name);
  return it == ranges_.end() ? Interval{1, kInf} : it->second;
}

void Analyzer::rename(const std::string &from, const std::string &to) {
  std::map<std::string, ExprRef> m{{from, var(to)}};
  std::map<std::string, ExprRef> equalities;
  for (const auto &[dim, value] : equalities_)
    equalities[dim == from ? to : dim] = substitute(value, m);
  equalities_ = std::move(equalities);
  for (ExprRef &f : nonNegative_)
    f = substitute(f, m);
  for (auto &[dim, c] : divisible_)
    if (dim == from)
      dim = to;
  if (auto it = ranges_.find(from); it != ranges_.end()) {
    ranges_[to] = it->second;
    ranges_.erase(from);
  }
  forget();
}

void Analyzer::addFact(ExprRef a, Rel rel, ExprRef b) {
  forget();
  a = simplify(a);
  b = simplify(b);
  switch (rel) {
  case Rel::EQ: {
    const Atom *va = a->asVar(), *vb = b->asVar();
    auto names = [](ExprRef e) { return freeVars(e); };
    auto mentions = [&](ExprRef e, const std::string &n) {
      auto fv = names(e);
      return std::binary_search(fv.begin(), fv.end(), n);
    };
    if (va && !mentions(b, va->name)) {
      // Keep the range information of the replaced dim.
      Interval r = range(va->name);
      equalities_[va->name] = b;
      if (vb)
        setRange(vb->name, r.lo, r.hi);
    } else if (vb && !mentions(a, vb->name)) {
      equalities_[vb->name] = a;
    } else {
      nonNegative_.push_back(sub(a, b));
      nonNegative_.push_back(sub(b, a));
      // d % c == 0: d is c times some integer, which equalities through products need
      // (T*D == 2*T*(D/2)), beyond what the two bounds give.
      // (`D % 2 == 0`, or `2*(D/2) == D`: a difference of ±(D % c), or of ±(c*(D/c) - D).)
      ExprRef diff = simplify(sub(a, b));
      const std::vector<Term> &t = diff->terms();
      auto single = [](const Term &x, Atom::Kind kind) {
        const Atom *m = x.factors.size() == 1 ? x.factors[0] : nullptr;
        return m && m->kind == kind && m->lhs->asVar() && m->rhs->asConst() && *m->rhs->asConst() > 0 ? m : nullptr;
      };
      if (diff->constant() == 0 && t.size() == 1 && std::abs(t[0].coef) == 1)
        if (const Atom *m = single(t[0], Atom::Kind::Mod))
          divisible_.emplace_back(m->lhs->asVar()->name, *m->rhs->asConst());
      if (diff->constant() == 0 && t.size() == 2)
        for (int q = 0; q < 2; ++q) {
          const Atom *m = single(t[q], Atom::Kind::Div);
          const Term &x = t[1 - q];
          if (m && x.factors.size() == 1 && x.factors[0] == m->lhs->asVar() && t[q].coef == -x.coef * *m->rhs->asConst())
            divisible_.emplace_back(m->lhs->asVar()->name, *m->rhs->asConst());
        }
    }
    return;
  }
  case Rel::NE: return; // a disequality narrows nothing the interval engine can use
  case Rel::GT: return addFact(a, Rel::GE, add(b, constant(1)));
  case Rel::LT: return addFact(a, Rel::LE, sub(b, constant(1)));
  case Rel::GE: return addFact(b, Rel::LE, a);
  case Rel::LE: {
    auto cb = b->asConst(), ca = a->asConst();
    if (a->asVar() && cb)
      setRange(a->asVar()->name, -kInf, *cb);
    else if (b->asVar() && ca)
      setRange(b->asVar()->name, *ca, kInf);
    else
      nonNegative_.push_back(sub(b, a));
    return;
  }
  }
}

// max(c, max(p, q) + k) with c a constant is max(max(c, p + k), q + k): adding distributes
// over max, and the clamps it exposes often fold (max(0, max(0, N - 1) - 1) is
// max(0, N - 2)), so clamps applied one after another (a chain of slices) stay one clamp.
// Null when neither side has that form.
ExprRef Analyzer::flattenClampedMax(ExprRef l, ExprRef r) const {
  if (!l->isConst())
    std::swap(l, r);
  if (!l->isConst() || r->terms().size() != 1 || r->constant() == 0) // with k = 0 there is nothing to distribute
    return nullptr;
  const Term &t = r->terms()[0];
  if (t.coef != 1 || t.factors.size() != 1 || t.factors[0]->kind != Atom::Kind::Max)
    return nullptr;
  ExprRef k = constant(r->constant());
  const Atom *inner = t.factors[0];
  return simplify(max(max(l, add(inner->lhs, k)), add(inner->rhs, k)));
}

ExprRef Analyzer::simplify(ExprRef e) const {
  if (e->isConst())
    return e;
  bool memo = memoizable(e);
  if (memo)
    if (auto it = simplified_.find(e); it != simplified_.end())
      return it->second;
  ExprRef cur = e;
  for (int i = 0; i < 8 && !equalities_.empty(); ++i) {
    ExprRef next = substitute(cur, equalities_);
    if (next == cur)
      break;
    cur = next;
  }
  ExprRef out = constant(cur->constant());
  for (const Term &t : cur->terms()) {
    ExprRef term = constant(t.coef);
    for (const Atom *a : t.factors) {
      ExprRef f = nullptr;
      if (a->kind == Atom::Kind::Var) {
        f = var(a->name);
      } else {
        ExprRef l = simplify(a->lhs), r = simplify(a->rhs);
        switch (a->kind) {
        case Atom::Kind::Min:
          f = canProve(l, Rel::LE, r) ? l : canProve(r, Rel::LE, l) ? r : min(l, r);
          break;
        case Atom::Kind::Max:
          if (ExprRef flat = flattenClampedMax(l, r))
            f = flat;
          else
            f = canProve(l, Rel::GE, r) ? l : canProve(r, Rel::GE, l) ? r : max(l, r);
          break;
        case Atom::Kind::Div: {
          Interval lb = bounds(l), rb = bounds(r);
          f = (lb.lo >= 0 && rb.lo > lb.hi) ? constant(0) : floorDiv(l, r);
          break;
        }
        case Atom::Kind::Mod: {
          Interval lb = bounds(l), rb = bounds(r);
          f = (lb.lo >= 0 && rb.lo > lb.hi) ? l : mod(l, r);
          break;
        }
        case Atom::Kind::Var: break;
        }
      }
      term = mul(term, f);
    }
    out = add(out, term);
  }
  if (memo)
    simplified_[e] = out;
  return out;
}

Interval Analyzer::atomBounds(const Atom *a) const {
  switch (a->kind) {
  case Atom::Kind::Var: return range(a->name);
  case Atom::Kind::Min: {
    Interval l = bounds(a->lhs), r = bounds(a->rhs);
    return {std::min(l.lo, r.lo), std::min(l.hi, r.hi)};
  }
  case Atom::Kind::Max: {
    Interval l = bounds(a->lhs), r = bounds(a->rhs);
    return {std::max(l.lo, r.lo), std::max(l.hi, r.hi)};
  }
  case Atom::Kind::Div: {
    Interval l = bounds(a->lhs), r = bounds(a->rhs);
    if (r.lo <= 0)
      return {};
    int64_t c[4] = {floorDivSat(l.lo, r.lo), floorDivSat(l.lo, r.hi), floorDivSat(l.hi, r.lo), floorDivSat(l.hi, r.hi)};
    return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
  }
  case Atom::Kind::Mod: {
    Interval l = bounds(a->lhs), r = bounds(a->rhs);
    if (r.lo <= 0)
      return {};
    Interval out{0, r.hi >= kInf ? kInf : r.hi - 1};
    if (l.lo >= 0)
      out.hi = std::min(out.hi, l.hi);
    return out;
  }
  }
  return {};
}

Interval Analyzer::rawBounds(ExprRef e) const {
  Interval sum{e->constant(), e->constant()};
  for (const Term &t : e->terms()) {
    Interval prod{t.coef, t.coef};
    for (const Atom *a : t.factors)
      prod = mulInterval(prod, atomBounds(a));
    sum = addInterval(sum, prod);
  }
  return sum;
}

Interval Analyzer::bounds(ExprRef e) const {
  bool memo = memoizable(e);
  if (memo)
    if (auto it = bounded_.find(e); it != bounded_.end())
      return it->second;
  Interval out = shiftedBounds(simplify(e));
  if (memo)
    bounded_[e] = out;
  return out;
}

Interval Analyzer::shiftedBounds(ExprRef e) const {
  // Shifting each dim x in [lo, hi] to lo + x' with x' in [0, hi - lo] makes interval
  // arithmetic exact on sums of non-negative terms: B*T - B becomes B'*T' + T' >= 0.
  std::map<std::string, ExprRef> shift;
  for (const std::string &name : freeVars(e)) {
    Interval r = range(name);
    if (r.lo > -kInf && r.lo != 0 && name[0] != kShiftedPrefix && name[0] != '%')
      shift[name] = add(constant(r.lo), var(std::string(1, kShiftedPrefix) + name));
  }
  Interval plain = rawBounds(e);
  if (shift.empty())
    return plain;
  Interval shifted = rawBounds(substitute(e, shift));
  return {std::max(plain.lo, shifted.lo), std::min(plain.hi, shifted.hi)};
}

bool Analyzer::proveNonNegative(ExprRef d, int depth) const {
  if (bounds(d).lo >= 0)
    return true;
  for (ExprRef f : nonNegative_)
    if (bounds(sub(d, f)).lo >= 0)
      return true;
  if (depth >= kMaxProofDepth)
    return false;
  // Eliminate one floor division by a constant c: c*floor(n/c) = n - r with 0 <= r < c.
  for (const Term &t : d->terms())
    for (const Atom *q : t.factors) {
      if (q->kind != Atom::Kind::Div || !q->rhs->asConst() || *q->rhs->asConst() <= 0)
        continue;
      int64_t c = *q->rhs->asConst();
      std::string rname = kScratchPrefix + std::to_string(depth) + q->key;
      // A nested proof (simplifying an operand) may reuse this name: keep the outer range.
      std::optional<Interval> outer;
      if (auto it = proofScratch_.find(rname); it != proofScratch_.end())
        outer = it->second;
      proofScratch_[rname] = {0, c - 1};
      ExprRef replaced = sub(q->lhs, var(rname)); // = c * q
      ExprRef out = constant(c * d->constant());
      bool ok = true;
      for (const Term &u : d->terms()) {
        ExprRef rest = constant(u.coef);
        int uses = 0;
        for (const Atom *f : u.factors) {
          if (f == q)
            ++uses;
          else
            rest = mul(rest, atomExpr(f));
        }
        if (uses > 1) {
          ok = false;
          break;
        }
        out = add(out, uses ? mul(rest, replaced) : mul(rest, constant(c)));
      }
      bool proved = ok && proveNonNegative(out, depth + 1);
      if (outer)
        proofScratch_[rname] = *outer;
      else
        proofScratch_.erase(rname);
      if (proved)
        return true;
    }
  return false;
}

bool Analyzer::canProve(ExprRef a, Rel rel, ExprRef b) const {
  a = simplify(a);
  b = simplify(b);
  ExprRef one = constant(1);
  switch (rel) {
  case Rel::EQ: { // equal in form, else both ways bounded (facts such as T % 2 == 0 are bounds)
    ExprRef d = simplify(sub(a, b));
    if (d == constant(0) || (!d->asConst() && proveNonNegative(d, 0) && proveNonNegative(simplify(neg(d)), 0)))
      return true;
    if (divisible_.empty() || d->asConst())
      return false;
    // Each d asserted divisible by c written as c times a scratch dim: T*D - 2*T*(D/2)
    // becomes 2*T*q - 2*T*q.
    std::map<std::string, ExprRef> multiples;
    for (const auto &[dim, c] : divisible_)
      multiples[dim] = mul(constant(c), var(dim + "$multiple"));
    return simplify(substitute(d, multiples)) == constant(0);
  }
  case Rel::NE: return proveNonNegative(sub(sub(a, b), one), 0) || proveNonNegative(sub(sub(b, a), one), 0);
  case Rel::LE: return proveNonNegative(sub(b, a), 0);
  case Rel::LT: return proveNonNegative(sub(sub(b, a), one), 0);
  case Rel::GE: return proveNonNegative(sub(a, b), 0);
  case Rel::GT: return proveNonNegative(sub(sub(a, b), one), 0);
  }
  return false;
}

} // namespace dnnc::sym

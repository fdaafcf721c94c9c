// The one symbolic analyzer: dim ranges and assert facts, bounds, simplification, proofs.
#pragma once

#include "ir/sym/Sym.h"

#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace dnnc::sym {

enum class Rel { EQ, NE, LT, LE, GT, GE };
const char *relSpelling(Rel r);

struct Interval {
  static constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  int64_t lo = -kInf, hi = kInf;
  bool bounded() const { return lo > -kInf && hi < kInf; }
};

class Analyzer {
public:
  // Declares (or narrows) the inclusive range of a dim. Dims are >= 1 unless told otherwise.
  void setRange(const std::string &name, int64_t lo, int64_t hi = Interval::kInf);
  // Sets the range of a new dim outright (fresh dims may be 0).
  void declare(const std::string &name, int64_t lo, int64_t hi = Interval::kInf) {
    ranges_[name] = {lo, hi};
    forget();
  }
  Interval range(const std::string &name) const;
  // Records `a rel b` as a known fact (from an `assert`). Equalities whose one side is a
  // dim become substitutions; `d <= c` on a dim narrows its range.
  void addFact(ExprRef a, Rel rel, ExprRef b);
  // Dim `from` is now called `to` (a new name): its range and every fact that mentions it
  // move to the new name, and `from` is free for another dim.
  void rename(const std::string &from, const std::string &to);

  // Canonical form under the known facts: equalities substituted, min/max/div/mod
  // resolved wherever the bounds decide them.
  ExprRef simplify(ExprRef e) const;
  // Sound bounds of e over every binding the ranges and facts allow.
  Interval bounds(ExprRef e) const;
  // True only when `a rel b` holds for every allowed binding; false means unknown.
  bool canProve(ExprRef a, Rel rel, ExprRef b) const;

private:
  // Drops the memoized results; every change to ranges or facts calls it.
  void forget() const {
    simplified_.clear();
    bounded_.clear();
  }
  // Whether the results for e may be memoized: not while e mentions a proof's scratch
  // remainder, whose range lives only as long as that proof.
  bool memoizable(ExprRef e) const;
  bool proveNonNegative(ExprRef d, int depth) const;
  Interval shiftedBounds(ExprRef e) const;
  ExprRef flattenClampedMax(ExprRef l, ExprRef r) const;
  Interval rawBounds(ExprRef e) const;
  Interval atomBounds(const Atom *a) const;

  std::map<std::string, Interval> ranges_;
  std::map<std::string, ExprRef> equalities_; // dim -> what it equals
  std::vector<std::pair<std::string, int64_t>> divisible_; // (d, c): d % c == 0 (asserted)
  std::vector<ExprRef> nonNegative_;          // facts f >= 0
  // Remainder variables introduced while a proof eliminates a floor division.
  mutable std::map<std::string, Interval> proofScratch_;
  // simplify and bounds per interned expression. Both recurse into every min/max/div
  // operand and prove relations between operands, which simplify and bound them again:
  // without these, nested slices (max over floor divisions over max ...) cost time
  // exponential in their depth.
  mutable std::unordered_map<ExprRef, ExprRef> simplified_;
  mutable std::unordered_map<ExprRef, Interval> bounded_;
};

} // namespace dnnc::sym

// Table tests of the symbolic dim algebra and the analyzer's proofs.
#include "ir/sym/Analyzer.h"

#include <catch2/catch.hpp>

using namespace dnnc::sym;

namespace {
ExprRef B = var("B"), T = var("T"), D = var("D");
ExprRef c(int64_t v) { return constant(v); }
} // namespace

TEST_CASE("canonical forms are interned and printed readably", "[sym]") {
  CHECK(add(T, c(1)) == add(c(1), T));
  CHECK(sub(mul(B, add(T, c(1))), B) == mul(B, T));
  CHECK(floorDiv(mul(c(2), T), c(2)) == T);
  CHECK(floorDiv(add(mul(c(2), T), c(3)), c(2)) == add(T, c(1)));
  CHECK(mod(mul(c(4), T), c(2)) == c(0));
  CHECK(floorDiv(mul(mul(B, T), D), mul(T, D)) == B);
  CHECK(floorDiv(mul(c(8), mul(B, T)), mul(B, T)) == c(8));
  CHECK(mod(add(mul(c(8), mul(B, T)), mul(B, T)), mul(B, T)) == c(0));
  // Exact division by a polynomial of several terms (a reshape's -1 over a padded dim).
  CHECK(floorDiv(add(mul(c(3), B), c(15)), add(B, c(5))) == c(3));
  CHECK(floorDiv(mul(add(mul(c(3), B), c(15)), T), add(B, c(5))) == mul(c(3), T));
  CHECK(floorDiv(mul(add(B, c(1)), add(T, c(2))), add(T, c(2))) == add(B, c(1)));
  CHECK(floorDiv(add(mul(c(3), B), c(16)), add(B, c(5)))->str() == "(3*B + 16)/(B + 5)"); // not exact: left as is
  CHECK(min(T, T) == T);
  CHECK(min(c(3), c(5)) == c(3));
  CHECK(min(B, T) == min(T, B));
  CHECK(add(T, c(1))->str() == "T + 1");
  CHECK(sub(mul(B, T), B)->str() == "B*T - B");
  CHECK(mul(floorDiv(add(T, c(7)), c(8)), c(8))->str() == "8*((T + 7)/8)");
  CHECK(min(T, c(2048))->str() == "min(2048, T)");
  CHECK(neg(T)->str() == "-T");
}

TEST_CASE("a quotient times its divisor plus the remainder folds back to the dividend", "[sym]") {
  ExprRef i = var("%3"), j = var("%4"), flat = add(mul(c(4096), i), j);
  // A reshape's index of [N, H*W] into [N, H, W]: (flat/W)*W + flat % W.
  CHECK(add(mul(floorDiv(flat, D), D), mod(flat, D)) == flat);
  CHECK(add(mod(flat, D), mul(D, floorDiv(flat, D))) == flat);
  // Scaled, beside other terms, by a constant divisor, by a product of dims.
  CHECK(add(mul(B, add(mul(floorDiv(j, T), T), mod(j, T))), c(5)) == add(mul(B, j), c(5)));
  CHECK(add(add(mul(c(16), floorDiv(flat, c(16))), mod(flat, c(16))), T) == add(flat, T));
  ExprRef td = mul(T, D);
  CHECK(add(mul(floorDiv(j, td), td), mod(j, td)) == j);
  // Nested, as a reshape into three dims: ((j/D)/T)*T*D + ((j/D) % T)*D + j % D.
  ExprRef q = floorDiv(j, D);
  CHECK(add(add(mul(mul(floorDiv(q, T), T), D), mul(mod(q, T), D)), mod(j, D)) == j);
  // Not a pair: another coefficient, another divisor, another dividend.
  CHECK(add(mul(floorDiv(j, D), mul(c(2), D)), mod(j, D))->str() == "2*(%4/D)*D + %4 % D");
  CHECK(add(mul(floorDiv(j, D), T), mod(j, D))->str() == "(%4/D)*T + %4 % D");
  CHECK(add(mul(floorDiv(i, D), D), mod(j, D))->str() == "(%3/D)*D + %4 % D");
}

TEST_CASE("a divisor that is itself a quotient or remainder keeps its parentheses", "[sym]") {
  // Atoms are interned by their text: (B/T)/D and B/(T/D) once both read "B/T/D" and
  // became one atom, whichever was made first.
  ExprRef left = floorDiv(floorDiv(B, T), D), right = floorDiv(B, floorDiv(T, D));
  CHECK(left != right);
  CHECK(left->str() == "B/T/D");
  CHECK(right->str() == "B/(T/D)");
  CHECK(evaluate(right, {{"B", 100}, {"T", 6}, {"D", 3}}) == 50);
  CHECK(evaluate(left, {{"B", 100}, {"T", 6}, {"D", 3}}) == 5);
  ExprRef remainderFirst = floorDiv(mod(B, T), D), remainderDivisor = mod(B, floorDiv(T, D));
  CHECK(remainderFirst != remainderDivisor);
  CHECK(remainderDivisor->str() == "B % (T/D)");
  CHECK(evaluate(remainderDivisor, {{"B", 7}, {"T", 8}, {"D", 2}}) == 3);
  CHECK(mod(B, mod(T, D))->str() == "B % (T % D)");
  // A leading minus binds tighter than / and % in .dnn source: -S % 3 reads (-S) % 3,
  // which the REPL gave back as (2*S) % 3.
  CHECK(add(neg(mod(var("S"), c(3))), add(T, c(5)))->str() == "-(S % 3) + T + 5");
  CHECK(sub(T, floorDiv(add(T, c(1)), c(2)))->str() == "-((T + 1)/2) + T");
  CHECK(sub(T, mul(c(2), floorDiv(T, c(2))))->str() == "T - 2*(T/2)");
}

TEST_CASE("substitution and evaluation", "[sym]") {
  ExprRef e = add(mul(B, T), floorDiv(T, c(2)));
  CHECK(evaluate(e, {{"B", 2}, {"T", 7}}) == 17);
  CHECK(!evaluate(e, {{"B", 2}}).has_value());
  CHECK(substitute(e, {{"T", add(var("T0"), var("n"))}})->str() == "B*T0 + B*n + (T0 + n)/2");
  CHECK(!evaluate(floorDiv(T, sub(T, T)), {{"T", 3}}).has_value()); // division by zero
  CHECK(freeVars(e) == std::vector<std::string>{"B", "T"});
}

TEST_CASE("analyzer proofs", "[sym]") {
  Analyzer an;
  an.setRange("T", 1, 2048);
  struct Row {
    ExprRef a;
    Rel rel;
    ExprRef b;
    bool provable;
  };
  const Row rows[] = {
      {sub(mul(B, add(T, c(1))), B), Rel::EQ, mul(B, T), true},
      {floorDiv(mul(c(2), T), c(2)), Rel::EQ, T, true},
      {min(T, c(2048)), Rel::EQ, T, true},
      {max(T, c(2048)), Rel::EQ, c(2048), true},
      {mul(floorDiv(add(T, c(7)), c(8)), c(8)), Rel::GE, T, true},
      {mul(floorDiv(T, c(8)), c(8)), Rel::LE, T, true},
      {T, Rel::LE, c(2048), true},
      {T, Rel::LT, c(2048), false},
      {B, Rel::GE, c(1), true},
      {add(T, c(1)), Rel::NE, T, true},
      {add(T, c(1)), Rel::GT, T, true},
      {B, Rel::EQ, T, false},
      {B, Rel::NE, T, false}, // unknown, never "no"
      {mul(B, T), Rel::GE, B, true},
      {mod(T, c(8)), Rel::LT, c(8), true},
      {floorDiv(T, c(4096)), Rel::EQ, c(0), true},
  };
  for (const Row &r : rows) {
    INFO(r.a->str() << " " << relSpelling(r.rel) << " " << r.b->str());
    CHECK(an.canProve(r.a, r.rel, r.b) == r.provable);
  }
}

// Simplifying max(l, r) simplifies l and r, then proves l >= r, which simplifies and bounds
// them again: without memoized results the work triples at each level of a nest.
TEST_CASE("nested max over floor division simplifies in time linear in its depth", "[sym]") {
  Analyzer an;
  const int64_t top = int64_t{1} << 40; // wide enough that 24 halvings keep T in the result
  an.setRange("T", 1, top);
  ExprRef nest = T, plain = T;
  for (int level = 0; level < 24; ++level) {
    nest = max(floorDiv(add(nest, c(level % 3)), c(2)), sub(T, c(top))); // T - top <= 0 <= the quotient
    plain = floorDiv(add(plain, c(level % 3)), c(2));
  }
  ExprRef simple = an.simplify(nest);
  INFO(simple->str());
  CHECK(simple == plain); // every max resolved
  Interval b = an.bounds(nest);
  for (int64_t t : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1} << 24, top - 1, top}) {
    std::optional<int64_t> want = evaluate(plain, {{"T", t}});
    REQUIRE(want);
    CHECK(evaluate(nest, {{"T", t}}) == want);
    CHECK(evaluate(simple, {{"T", t}}) == want);
    CHECK((b.lo <= *want && *want <= b.hi));
  }
}

TEST_CASE("assert facts feed the analyzer", "[sym]") {
  Analyzer an;
  ExprRef S = var("S");
  CHECK_FALSE(an.canProve(S, Rel::EQ, T));
  an.addFact(S, Rel::EQ, T);
  CHECK(an.canProve(S, Rel::EQ, T));
  CHECK(an.canProve(add(S, c(1)), Rel::EQ, add(T, c(1))));
  an.addFact(B, Rel::LE, c(64));
  CHECK(an.bounds(B).hi == 64);
  CHECK(an.canProve(mul(B, c(2)), Rel::LE, c(128)));
  an.addFact(var("K"), Rel::LE, T);
  CHECK(an.canProve(var("K"), Rel::LE, add(T, c(3))));
}

// Equality from bounds both ways: `assert T % 2 == 0` is a pair of bounds (neither side is
// a dim), and T == 2*(T/2) follows only through them.
TEST_CASE("an equality follows from a divisibility fact", "[sym]") {
  Analyzer an;
  ExprRef twiceHalf = mul(c(2), floorDiv(T, c(2)));
  CHECK_FALSE(an.canProve(T, Rel::EQ, twiceHalf));
  an.addFact(mod(T, c(2)), Rel::EQ, c(0));
  CHECK(an.canProve(T, Rel::EQ, twiceHalf));
  CHECK(an.canProve(mod(T, c(2)), Rel::EQ, c(0)));
  CHECK_FALSE(an.canProve(mod(T, c(4)), Rel::EQ, c(0)));
  // Through a product with another dim, too (reshape(q, [B, 2, D/2]) of q: f32[B, D]):
  // the bounds of D % 2 do not reach B*D - 2*B*(D/2), a multiple of D does.
  ExprRef D = var("D");
  CHECK_FALSE(an.canProve(mul(B, D), Rel::EQ, mul(c(2), mul(B, floorDiv(D, c(2))))));
  an.addFact(mul(floorDiv(D, c(2)), c(2)), Rel::EQ, D); // the stdlib's `assert hd * heads == D`
  CHECK(an.canProve(mul(B, D), Rel::EQ, mul(c(2), mul(B, floorDiv(D, c(2))))));
  CHECK_FALSE(an.canProve(mul(B, D), Rel::EQ, mul(c(4), mul(B, floorDiv(D, c(4))))));
}

// Sema renames a fresh dim that a declared type names: the facts move with it, and the
// old name is free for the next fresh dim (which must not inherit them).
TEST_CASE("a renamed dim keeps its range and facts under its new name", "[sym]") {
  Analyzer an;
  an.declare("N", 0, 100);
  an.declare("N2", 0, 100);
  an.addFact(var("N"), Rel::EQ, var("N2"));
  an.rename("N", "J");
  CHECK(an.canProve(var("J"), Rel::EQ, var("N2")));
  CHECK(an.range("J").hi == 100);
  an.declare("N", 0, 7);
  CHECK_FALSE(an.canProve(var("N"), Rel::EQ, var("N2")));
  CHECK_FALSE(an.canProve(var("N"), Rel::EQ, var("J")));
}

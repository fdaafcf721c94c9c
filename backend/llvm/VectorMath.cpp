// Branch-free f32 transcendentals in LLVM IR (see VectorMath.h for the error bounds and
// the special values). Polynomials run through llvm.fmuladd (one FMA where the host
// has it); the range reductions are exact without FMA.
#include "backend/llvm/VectorMath.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <cmath>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>

namespace dnnc::backend {
namespace {

class MathBuilder {
public:
  // lanes: 0 for f32 (and i32, f64, ...) values, else vectors of that many of them.
  MathBuilder(llvm::IRBuilder<> &b, unsigned lanes) : b_(b), lanes_(lanes) {}

  llvm::Value *exp(llvm::Value *x) { return expParts(x, f(0)); }
  llvm::Value *log(llvm::Value *x);
  llvm::Value *tanh(llvm::Value *x);
  llvm::Value *erf(llvm::Value *x);
  llvm::Value *gelu(llvm::Value *x);
  llvm::Value *silu(llvm::Value *x);
  llvm::Value *sinCos(llvm::Value *x, bool cosine);
  llvm::Value *pow(llvm::Value *x, llvm::Value *y);

private:
  llvm::Value *expParts(llvm::Value *hi, llvm::Value *lo, bool canOverflow = true);
  // exp(hi + lo) as er 2^n before the scaling (er in [0.7, 1.42]), lanes with hi below
  // zeroBelow marked: whose result is 0.
  struct ReducedExp {
    llvm::Value *er, *ni, *zero;
  };
  ReducedExp expReduced(llvm::Value *hi, llvm::Value *lo, bool canOverflow, double zeroBelow);
  // v 2^n, rounded once (in two steps, each exact but the last); zeroValue (else +0) in
  // the zero lanes.
  llvm::Value *scaled(llvm::Value *v, const ReducedExp &e, llvm::Value *zeroValue = nullptr);
  std::pair<llvm::Value *, llvm::Value *> erfcOfAbs(llvm::Value *a, llvm::Value *hi, llvm::Value *lo);
  std::pair<llvm::Value *, llvm::Value *> negSquare(llvm::Value *x, double scale = 1.0);
  llvm::Value *erfSmall(llvm::Value *x);
  llvm::Value *log2Double(llvm::Value *x);
  llvm::Value *exp2Double(llvm::Value *t);

  // ---- constants and small helpers ----
  llvm::Type *lanesOf(llvm::Type *t) { return lanes_ ? llvm::FixedVectorType::get(t, lanes_) : t; }
  llvm::Type *f32() { return lanesOf(b_.getFloatTy()); }
  llvm::Type *f64() { return lanesOf(b_.getDoubleTy()); }
  llvm::Type *i32Ty() { return lanesOf(b_.getInt32Ty()); }
  llvm::Type *i64Ty() { return lanesOf(b_.getInt64Ty()); }
  llvm::Type *i1Ty() { return lanesOf(b_.getInt1Ty()); }
  llvm::Constant *i32(int64_t v) { return llvm::ConstantInt::get(i32Ty(), v); }
  llvm::Constant *i64(int64_t v) { return llvm::ConstantInt::get(i64Ty(), v); }
  llvm::Constant *f(double v) { return llvm::ConstantFP::get(f32(), v); }
  llvm::Constant *d(double v) { return llvm::ConstantFP::get(f64(), v); }
  llvm::Value *call(llvm::Intrinsic::ID id, std::initializer_list<llvm::Value *> args) {
    return b_.CreateIntrinsic(id, {(*args.begin())->getType()}, args);
  }
  llvm::Value *fma(llvm::Value *a, llvm::Value *c, llvm::Value *e) { return call(llvm::Intrinsic::fmuladd, {a, c, e}); }
  llvm::Value *abs(llvm::Value *x) { return call(llvm::Intrinsic::fabs, {x}); }
  llvm::Value *copySign(llvm::Value *mag, llvm::Value *sign) { return call(llvm::Intrinsic::copysign, {mag, sign}); }
  llvm::Value *ifNaN(llvm::Value *x, llvm::Value *then, llvm::Value *otherwise) {
    return b_.CreateSelect(b_.CreateFCmpUNO(x, x), then, otherwise);
  }
  // c[0] + c[1] x + c[2] x^2 + ... by Horner's rule.
  llvm::Value *poly(llvm::Value *x, std::initializer_list<double> c) {
    auto t = x->getType();
    const double *last = c.end() - 1;
    llvm::Value *p = llvm::ConstantFP::get(t, *last);
    for (const double *k = last - 1; k >= c.begin(); --k)
      p = fma(p, x, llvm::ConstantFP::get(t, *k));
    return p;
  }
  llvm::Value *bits(llvm::Value *x) { return b_.CreateBitCast(x, i32Ty()); }
  llvm::Value *fromBits(llvm::Value *i) { return b_.CreateBitCast(i, f32()); }
  // x with its 12 low significand bits cleared: its square is exact in f32.
  llvm::Value *highHalf(llvm::Value *x) { return fromBits(b_.CreateAnd(bits(x), i32(0xfffff000u))); }

  llvm::IRBuilder<> &b_;
  unsigned lanes_;
};

// exp(hi + lo) for a small correction lo: the reduction subtracts n ln2 from hi exactly
// (n ln2_hi has at most 23 significant bits) before lo joins. Past 89 exp is inf in f32;
// below -104 it is 0, and those lanes compute exp(0) instead, because scaling into the
// denormals takes a slow microcode assist on x86 (a causal mask's -1e9 would hit it on
// half of the scores). A NaN hi flows through as NaN: the clamp keeps it, and n comes from
// the bits of a float (1.5 * 2^23 added rounds hi log2 e to an integer, ties to even, as
// roundeven would), never from fptosi, which is poison for NaN. A caller whose hi is never
// positive says so (canOverflow false) and skips the clamp.
llvm::Value *MathBuilder::expParts(llvm::Value *hi, llvm::Value *lo, bool canOverflow) {
  ReducedExp e = expReduced(hi, lo, canOverflow, -104.0);
  return scaled(e.er, e);
}

MathBuilder::ReducedExp MathBuilder::expReduced(llvm::Value *hi, llvm::Value *lo, bool canOverflow, double zeroBelow) {
  llvm::Value *zero = b_.CreateFCmpOLT(hi, f(zeroBelow));
  if (canOverflow) // min(hi, 89), NaN kept
    hi = b_.CreateSelect(b_.CreateFCmpOGT(hi, f(89.0)), f(89.0), hi);
  hi = b_.CreateSelect(zero, f(0.0), hi);
  const double kRound = 0x1.8p23;
  llvm::Value *rounded = b_.CreateFAdd(b_.CreateFMul(hi, f(1.44269504088896341)), f(kRound));
  llvm::Value *n = b_.CreateFSub(rounded, f(kRound)); // exact
  llvm::Value *r = fma(b_.CreateFNeg(n), f(0.693359375), hi);
  if (auto *c = llvm::dyn_cast<llvm::Constant>(lo); !c || !c->isNullValue()) // (r + 0 is r, but for -0: same exp)
    r = b_.CreateFAdd(r, lo);
  r = fma(b_.CreateFNeg(n), f(-2.12194440e-4), r);
  // e^r = 1 + r + r^2 P(r), P near-minimax (relative error 3.1e-9); 1 joins last, so
  // that the sum is rounded once.
  llvm::Value *p = poly(r, {0.5000000004185935, 0.16666666529971413, 0.04166649713654613, 0.008333365085349835,
                            0.0013931463464891877, 0.00019853861354332287});
  llvm::Value *er = b_.CreateFAdd(fma(p, b_.CreateFMul(r, r), r), f(1.0));
  // n is the low bits of `rounded`.
  return {er, b_.CreateSub(bits(rounded), bits(f(kRound))), zero};
}

llvm::Value *MathBuilder::scaled(llvm::Value *v, const ReducedExp &e, llvm::Value *zeroValue) {
  // 2^n as 2^n1 2^n2, both normal for n in [-252, 129].
  llvm::Value *n1 = b_.CreateAShr(e.ni, 1), *n2 = b_.CreateSub(e.ni, n1);
  auto pow2 = [&](llvm::Value *k) { return fromBits(b_.CreateShl(b_.CreateAdd(k, i32(127)), 23)); };
  return b_.CreateSelect(e.zero, zeroValue ? zeroValue : f(0.0), b_.CreateFMul(b_.CreateFMul(v, pow2(n1)), pow2(n2)));
}

// x / (1 + e^-x) as x s, s = 1 / (1 + e^-|x|), for x >= 0, and x e^x s for x < 0, where
// x s is multiplied into e^x's reduced form er before the scaling by 2^n: where e^x is
// denormal (x below -87) it has lost bits, and x e^x made from it was up to 18 ulp off
// and 0 below x = -104, while x er s 2^n rounds once. One reduction serves both: its
// zero lanes start at -112, past where x e^x is below 2^-150.
llvm::Value *MathBuilder::silu(llvm::Value *x) {
  ReducedExp e = expReduced(b_.CreateFNeg(abs(x)), f(0.0), false, -112.0);
  llvm::Value *xs = b_.CreateFMul(x, b_.CreateFDiv(f(1.0), b_.CreateFAdd(f(1.0), scaled(e.er, e))));
  // (below -112: x 0, which is -0, and NaN for -inf as x / (1 + e^-x) is)
  return b_.CreateSelect(b_.CreateFCmpOLT(x, f(0.0)), scaled(b_.CreateFMul(xs, e.er), e, b_.CreateFMul(x, f(0.0))), xs);
}

llvm::Value *MathBuilder::log(llvm::Value *x) {
  // Denormals are scaled by 2^23 into the normal range first.
  llvm::Value *tiny = b_.CreateFCmpOLT(x, f(0x1p-126));
  llvm::Value *xs = b_.CreateSelect(tiny, b_.CreateFMul(x, f(0x1p23)), x);
  llvm::Value *i = bits(xs);
  llvm::Value *e = b_.CreateSub(b_.CreateLShr(i, 23), i32(126));
  e = b_.CreateSelect(tiny, b_.CreateSub(e, i32(23)), e);
  llvm::Value *m = fromBits(b_.CreateOr(b_.CreateAnd(i, i32(0x007fffff)), i32(0x3f000000))); // [0.5, 1)
  llvm::Value *low = b_.CreateFCmpOLT(m, f(0.707106781186547524));
  e = b_.CreateSelect(low, b_.CreateSub(e, i32(1)), e);
  llvm::Value *t = b_.CreateFSub(b_.CreateSelect(low, b_.CreateFAdd(m, m), m), f(1.0));
  llvm::Value *fe = b_.CreateSIToFP(e, f32());
  llvm::Value *z = b_.CreateFMul(t, t);
  llvm::Value *p = poly(t, {3.3333331174E-1, -2.4999993993E-1, 2.0000714765E-1, -1.6668057665E-1, 1.4249322787E-1,
                            -1.2420140846E-1, 1.1676998740E-1, -1.1514610310E-1, 7.0376836292E-2});
  llvm::Value *y = b_.CreateFMul(b_.CreateFMul(t, z), p);
  y = fma(fe, f(-2.12194440e-4), y);
  y = fma(z, f(-0.5), y);
  llvm::Value *r = fma(fe, f(0.693359375), b_.CreateFAdd(t, y));
  r = b_.CreateSelect(b_.CreateFCmpOEQ(x, f(INFINITY)), x, r);
  r = b_.CreateSelect(b_.CreateFCmpOEQ(x, f(0.0)), f(-INFINITY), r);
  return b_.CreateSelect(b_.CreateFCmpULT(x, f(0.0)), f(NAN), r); // negative or NaN
}

llvm::Value *MathBuilder::tanh(llvm::Value *x) {
  llvm::Value *a = abs(x);
  llvm::Value *z = b_.CreateFMul(x, x);
  llvm::Value *p = poly(z, {-3.33332819422E-1, 1.33314422036E-1, -5.37397155531E-2, 2.06390887954E-2, -5.70498872745E-3});
  llvm::Value *small = copySign(fma(b_.CreateFMul(p, z), x, x), x); // tanh(-0) = -0
  // exp overflows to inf past |x| = 44, giving 1; NaN stays NaN through exp.
  llvm::Value *e = exp(b_.CreateFAdd(a, a));
  llvm::Value *large = copySign(b_.CreateFSub(f(1.0), b_.CreateFDiv(f(2.0), b_.CreateFAdd(e, f(1.0)))), x);
  return b_.CreateSelect(b_.CreateFCmpOLT(a, f(0.625)), small, large);
}

// erf(x) = x P(x^2) for |x| < 1 (a near-minimax fit of relative error 3.3e-11).
llvm::Value *MathBuilder::erfSmall(llvm::Value *x) {
  llvm::Value *p = poly(b_.CreateFMul(x, x), {1.1283791670580252, -0.3761263843463496, 0.11283781973850585, -0.026865400026979236,
                                              0.0052209453896524816, -0.0008482828212579979, 0.00011256943299939315,
                                              -9.641502872845265e-06});
  return b_.CreateFMul(x, p);
}

// erfc(a) for a = |x| >= 0 (or NaN), given -a^2 as an unevaluated sum hi + lo, as the
// factors of erfc(a) = exp(-a^2) (t H(t)) with t = 1/(1 + a/2): a caller multiplies the
// exponential last, so that only its own result can leave the normal range. H is smooth on t in [0.1538, 1] (a
// from 11 down to 0), between 0.33 and 1, and its minimax polynomial of degree 10 in
// t - 0.5769 (Remez, relative error 3.9e-9) serves every a: no second polynomial for
// small a, which GELU, whose arguments are mostly small, would pay for on every element.
// Past a = 10.06 erfc is below 2^-149; past a = 10.2 the exponential is 0 (-a^2 < -104),
// and so is the product, though t H(t) is not (an infinite a, whose split square is NaN,
// included: t is 0 there).
std::pair<llvm::Value *, llvm::Value *> MathBuilder::erfcOfAbs(llvm::Value *a, llvm::Value *hi, llvm::Value *lo) {
  llvm::Value *t = b_.CreateFDiv(f(1.0), fma(a, f(0.5), f(1.0)));
  llvm::Value *h = poly(b_.CreateFSub(t, f(0.5769230769230769)),
                        {0.5670172938708249, 0.7754098644097904, 0.5860565010279772, 0.08764513823004912, -0.20254405779905946,
                         -0.05373546709527254, 0.11400337037903653, 0.00603834663662395, -0.0753333220791475,
                         0.015116139938748599, 0.03714771761760752});
  return {expParts(hi, lo, false), b_.CreateFMul(t, h)};
}

// -(x^2) scale as hi + lo: hi is the exact square of x's high half (scaled: exact for a
// power of two), lo the rest (rounded).
std::pair<llvm::Value *, llvm::Value *> MathBuilder::negSquare(llvm::Value *x, double scale) {
  llvm::Value *h = highHalf(x);
  llvm::Value *hi = b_.CreateFMul(b_.CreateFMul(h, f(-scale)), h);
  llvm::Value *lo = b_.CreateFMul(b_.CreateFMul(b_.CreateFSub(x, h), f(-scale)), b_.CreateFAdd(x, h));
  return {hi, lo};
}

llvm::Value *MathBuilder::erf(llvm::Value *x) {
  llvm::Value *a = abs(x);
  auto [hi, lo] = negSquare(a);
  auto [e, scale] = erfcOfAbs(a, hi, lo);
  llvm::Value *large = copySign(b_.CreateFSub(f(1.0), b_.CreateFMul(e, scale)), x);
  return b_.CreateSelect(b_.CreateFCmpOLT(a, f(1.0)), erfSmall(x), large);
}

// x/2 erfc(-x/sqrt 2); -z^2 = -x^2/2 comes from x's exact square halved (exact), so the
// rounding of z = -x/sqrt 2 reaches only G, which varies slowly.
llvm::Value *MathBuilder::gelu(llvm::Value *x) {
  llvm::Value *z = b_.CreateFMul(x, f(-M_SQRT1_2));
  auto [hi, lo] = negSquare(x, 0.5);
  auto [e, scale] = erfcOfAbs(abs(z), hi, lo);
  llvm::Value *half = b_.CreateFMul(f(0.5), x);
  // x > 0: x/2 (2 - erfc(|z|)); else x/2 erfc(|z|), whose exponential, when it is below
  // 2^-126 (x < -13), joins last: erfc alone would be denormal where x/2 erfc is not.
  llvm::Value *positive = b_.CreateFMul(half, b_.CreateFSub(f(2.0), b_.CreateFMul(e, scale)));
  llvm::Value *negative = b_.CreateFMul(b_.CreateFMul(half, scale), e);
  return b_.CreateSelect(b_.CreateFCmpOLT(z, f(0.0)), positive, negative);
}

// sin or cos in f64. |x| < pi/4 is its own reduced argument; otherwise |x| 2/pi mod 4 is
// computed exactly enough for every f32 (Payne-Hanek): with |x| = m 2^(E-150) (m the
// 24-bit significand), the bits of 2/pi from b_(E-151) on are the only ones that matter
// mod 4, and a 96-bit window W of them gives m W 2^-94 = |x| 2/pi mod 4 with an error
// below 2^-62 (the closest an f32 comes to a multiple of pi/2 is about 2^-30 relative).
// Scalar only (its table lookup has no vector form): vectorMathFunction applies it lane
// by lane for vectors.
llvm::Value *MathBuilder::sinCos(llvm::Value *x, bool cosine) {
    llvm::Value *ix = b_.CreateAnd(bits(x), i32(0x7fffffff));
  llvm::Value *biased = b_.CreateLShr(ix, 23);
  // Lanes on the direct path index the table too: keep E in [126, 254].
  biased = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, b_.CreateBinaryIntrinsic(llvm::Intrinsic::umax, biased, i32(126)),
                                    i32(254));
  llvm::Value *m = b_.CreateZExt(b_.CreateOr(b_.CreateAnd(ix, i32(0x7fffff)), i32(0x800000)), i64Ty());
  // 2/pi's bits b_1 b_2 ... after 32 zero bits; the window starts at bit E - 120.
  static const uint32_t twoOverPi[] = {0, 0xA2F9836E, 0x4E441529, 0xFC2757D1, 0xF534DDC0, 0xDB629599, 0x3C439041, 0xFE5163AB};
  llvm::Module &mod = *b_.GetInsertBlock()->getModule();
  llvm::GlobalVariable *table = mod.getGlobalVariable("dnnc.vm.two_over_pi", true);
  if (!table) {
    auto *type = llvm::ArrayType::get(b_.getInt32Ty(), std::size(twoOverPi));
    table = new llvm::GlobalVariable(mod, type, true, llvm::GlobalValue::PrivateLinkage,
                                     llvm::ConstantDataArray::get(b_.getContext(), llvm::ArrayRef<uint32_t>(twoOverPi)),
                                     "dnnc.vm.two_over_pi");
  }
  llvm::Value *start = b_.CreateSub(biased, i32(120));
  llvm::Value *word = b_.CreateZExt(b_.CreateLShr(start, 5), i64Ty());
  llvm::Value *shift = b_.CreateZExt(b_.CreateAnd(start, i32(31)), i64Ty());
  auto load = [&](int k) {
    llvm::Value *at = b_.CreateInBoundsGEP(table->getValueType(), table, {b_.getInt64(0), b_.CreateAdd(word, i64(k))});
    return b_.CreateZExt(b_.CreateLoad(b_.getInt32Ty(), at), i64Ty());
  };
  llvm::Value *w0 = load(0), *w1 = load(1), *w2 = load(2), *w3 = load(3);
  llvm::Value *top = b_.CreateOr(b_.CreateShl(b_.CreateOr(b_.CreateShl(w0, 32), w1), shift),
                                 b_.CreateLShr(w2, b_.CreateSub(i64(32), shift)));
  llvm::Value *rest = b_.CreateLShr(b_.CreateShl(b_.CreateOr(b_.CreateShl(w2, 32), w3), shift), 32);
  llvm::Value *prod = b_.CreateAdd(b_.CreateMul(m, top), b_.CreateLShr(b_.CreateMul(m, rest), 32)); // |x| 2/pi mod 4, 2^-62 units
  llvm::Value *q = b_.CreateLShr(prod, 62);
  llvm::Value *frac = b_.CreateAnd(prod, i64((int64_t(1) << 62) - 1));
  llvm::Value *up = b_.CreateICmpUGE(frac, i64(int64_t(1) << 61)); // round to the nearest quadrant
  q = b_.CreateAdd(q, b_.CreateZExt(up, i64Ty()));
  frac = b_.CreateSelect(up, b_.CreateSub(frac, i64(int64_t(1) << 62)), frac);
  llvm::Value *reduced = b_.CreateFMul(b_.CreateSIToFP(frac, f64()), d(M_PI_2 * 0x1p-62));
  llvm::Value *direct = b_.CreateFCmpOLT(fromBits(ix), f(M_PI_4));
  llvm::Value *r = b_.CreateSelect(direct, b_.CreateFPExt(fromBits(ix), f64()), reduced);
  q = b_.CreateSelect(direct, i64(0), q);
  if (cosine)
    q = b_.CreateAdd(q, i64(1)); // cos x = sin(x + pi/2)
  llvm::Value *r2 = b_.CreateFMul(r, r);
  llvm::Value *s = fma(b_.CreateFMul(r, r2), poly(r2, {-1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800, 1.0 / 6227020800}), r);
  llvm::Value *c = fma(r2, poly(r2, {-0.5, 1.0 / 24, -1.0 / 720, 1.0 / 40320, -1.0 / 3628800, 1.0 / 479001600, -1.0 / 87178291200}), d(1.0));
  llvm::Value *odd = b_.CreateICmpNE(b_.CreateAnd(q, i64(1)), i64(0));
  llvm::Value *v = b_.CreateSelect(odd, c, s);
  llvm::Value *negate = b_.CreateICmpNE(b_.CreateAnd(q, i64(2)), i64(0));
  if (!cosine) // sin is odd: the sign of x (also of -0)
    negate = b_.CreateXor(negate, b_.CreateICmpSLT(bits(x), i32(0)));
  v = b_.CreateFPTrunc(b_.CreateSelect(negate, b_.CreateFNeg(v), v), f32());
  return b_.CreateSelect(b_.CreateFCmpUNO(b_.CreateFSub(x, x), f(0.0)), f(NAN), v); // inf - inf and NaN are NaN
}

// log2 of a positive f64 (0 gives -inf, inf inf): x = 2^e m with m in [sqrt(1/2), sqrt 2),
// log m = 2 atanh(s) with s = (m - 1)/(m + 1), |s| < 0.172, by its series to s^17.
llvm::Value *MathBuilder::log2Double(llvm::Value *x) {
    llvm::Value *i = b_.CreateBitCast(x, i64Ty());
  llvm::Value *e = b_.CreateSub(b_.CreateLShr(i, 52), i64(1022));
  llvm::Value *m = b_.CreateBitCast(b_.CreateOr(b_.CreateAnd(i, i64(0x000fffffffffffffLL)), i64(0x3fe0000000000000LL)), f64());
  llvm::Value *low = b_.CreateFCmpOLT(m, d(M_SQRT1_2));
  e = b_.CreateSelect(low, b_.CreateSub(e, i64(1)), e);
  m = b_.CreateSelect(low, b_.CreateFAdd(m, m), m);
  llvm::Value *s = b_.CreateFDiv(b_.CreateFSub(m, d(1.0)), b_.CreateFAdd(m, d(1.0)));
  llvm::Value *s2 = b_.CreateFMul(s, s);
  llvm::Value *series = poly(s2, {2.0, 2.0 / 3, 2.0 / 5, 2.0 / 7, 2.0 / 9, 2.0 / 11, 2.0 / 13, 2.0 / 15, 2.0 / 17});
  llvm::Value *r = fma(b_.CreateFMul(s, series), d(M_LOG2E), b_.CreateSIToFP(e, f64()));
  r = b_.CreateSelect(b_.CreateFCmpOEQ(x, d(INFINITY)), x, r);
  r = b_.CreateSelect(b_.CreateFCmpOEQ(x, d(0.0)), d(-INFINITY), r);
  return ifNaN(x, x, r);
}

// 2^t in f64 for the f32 range: t clamped to [-200, 200], 2^n exact, 2^f (|f| <= 1/2) by
// the Taylor series of e^(f ln 2) to degree 12.
llvm::Value *MathBuilder::exp2Double(llvm::Value *t) {
  t = call(llvm::Intrinsic::maxnum, {call(llvm::Intrinsic::minnum, {t, d(200.0)}), d(-200.0)});
  llvm::Value *n = call(llvm::Intrinsic::roundeven, {t});
  llvm::Value *u = b_.CreateFMul(b_.CreateFSub(t, n), d(M_LN2));
  llvm::Value *p = poly(u, {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880,
                            1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600});
  llvm::Value *scale = b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(b_.CreateFPToSI(n, i64Ty()), i64(1023)), 52), f64());
  return b_.CreateFMul(p, scale);
}

// pow as C99 Annex F: pow(x, +-0) = 1 and pow(1, y) = 1 even for NaN, pow(-1, +-inf) = 1,
// a negative finite x to a non-integer y is NaN, an odd integer y keeps x's sign.
llvm::Value *MathBuilder::pow(llvm::Value *x, llvm::Value *y) {
  llvm::Value *yd = b_.CreateFPExt(y, f64());
  llvm::Value *t = b_.CreateFMul(yd, log2Double(b_.CreateFPExt(abs(x), f64())));
  llvm::Value *r = b_.CreateFPTrunc(ifNaN(t, t, exp2Double(t)), f32());
  llvm::Value *integer = b_.CreateFCmpOEQ(y, call(llvm::Intrinsic::trunc, {y}));
  // |y| < 2^24 so the conversion is exact; larger f32 values are even
  llvm::Value *small = b_.CreateFCmpOLT(abs(y), f(0x1p24));
  llvm::Value *yi = b_.CreateFPToSI(b_.CreateSelect(small, y, f(0.0)), i32Ty());
  llvm::Value *odd = b_.CreateAnd(b_.CreateAnd(small, integer), b_.CreateTrunc(yi, i1Ty()));
  llvm::Value *negative = b_.CreateICmpSLT(bits(x), i32(0));
  r = b_.CreateSelect(b_.CreateAnd(negative, odd), b_.CreateFNeg(r), r);
  llvm::Value *finiteNegative = b_.CreateAnd(b_.CreateFCmpOLT(x, f(0.0)), b_.CreateFCmpOGT(x, f(-INFINITY)));
  r = b_.CreateSelect(b_.CreateAnd(finiteNegative, b_.CreateNot(integer)), f(NAN), r);
  llvm::Value *one = b_.CreateOr(b_.CreateFCmpOEQ(y, f(0.0)), b_.CreateFCmpOEQ(x, f(1.0)));
  one = b_.CreateOr(one, b_.CreateAnd(b_.CreateFCmpOEQ(x, f(-1.0)), b_.CreateFCmpOEQ(abs(y), f(INFINITY))));
  return b_.CreateSelect(one, f(1.0), r);
}

} // namespace

const char *libmName(MathFn fn) {
  switch (fn) {
  case MathFn::Exp: return "expf";
  case MathFn::Log: return "logf";
  case MathFn::Tanh: return "tanhf";
  case MathFn::Erf: return "erff";
  case MathFn::Gelu: return "gelu";
  case MathFn::Silu: return "silu";
  case MathFn::Sin: return "sinf";
  case MathFn::Cos: return "cosf";
  case MathFn::Pow: return "powf";
  }
  return "";
}

llvm::Function *vectorMathFunction(llvm::Module &m, MathFn fn, unsigned lanes) {
  std::string name = std::string("dnnc.vm.") + libmName(fn) + (lanes ? ".v" + std::to_string(lanes) : "");
  if (llvm::Function *existing = m.getFunction(name))
    return existing;
  llvm::LLVMContext &ctx = m.getContext();
  llvm::Type *f32 = llvm::Type::getFloatTy(ctx);
  if (lanes)
    f32 = llvm::FixedVectorType::get(f32, lanes);
  std::vector<llvm::Type *> params(fn == MathFn::Pow ? 2 : 1, f32);
  auto *function = llvm::Function::Create(llvm::FunctionType::get(f32, params, false), llvm::Function::InternalLinkage, name, m);
  function->addFnAttr(llvm::Attribute::AlwaysInline);
  function->addFnAttr(llvm::Attribute::NoUnwind);
  function->addFnAttr(llvm::Attribute::WillReturn);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", function));
  llvm::Value *x = function->getArg(0);
  if (lanes && (fn == MathFn::Sin || fn == MathFn::Cos)) { // lane by lane through the scalar form
    llvm::Function *scalar = vectorMathFunction(m, fn, 0);
    llvm::Value *r = llvm::PoisonValue::get(f32);
    for (unsigned l = 0; l < lanes; ++l)
      r = b.CreateInsertElement(r, b.CreateCall(scalar, {b.CreateExtractElement(x, l)}), l);
    b.CreateRet(r);
    return function;
  }
  MathBuilder mb(b, lanes);
  llvm::Value *r = nullptr;
  switch (fn) {
  case MathFn::Exp: r = mb.exp(x); break;
  case MathFn::Log: r = mb.log(x); break;
  case MathFn::Tanh: r = mb.tanh(x); break;
  case MathFn::Erf: r = mb.erf(x); break;
  case MathFn::Gelu: r = mb.gelu(x); break;
  case MathFn::Silu: r = mb.silu(x); break;
  case MathFn::Sin: r = mb.sinCos(x, false); break;
  case MathFn::Cos: r = mb.sinCos(x, true); break;
  case MathFn::Pow: r = mb.pow(x, function->getArg(1)); break;
  }
  b.CreateRet(r);
  return function;
}

} // namespace dnnc::backend

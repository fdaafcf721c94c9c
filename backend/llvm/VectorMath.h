// The CPU's transcendental functions, emitted as plain LLVM IR (no calls): each is an
// internal always-inline function of the module, branch-free (selects only), so that
// after inlining the loop vectorizer widens it to the host's vector lanes like any
// arithmetic. Scalar libm calls cannot be widened (they may write errno), and libmvec
// has no variant for every function and costs a call per vector.
//
// Error against the exact value (libm in double), in units in the last place of the f32
// result: the bound tests/unit/VectorMathTest.cpp asserts over every 61st f32 bit pattern
// and the special values (DNNC_VM_EXHAUSTIVE=1: all 2^32; pow: 4,000 x 4,000 pairs), on
// an FMA host (llvm.fmuladd may round twice on a host without FMA).
//
//   fn     max ULP  method
//   exp     1       n = round(x log2 e), r = x - n ln2 (two-part ln2), degree-7 polynomial
//                   (Cephes), scaled by 2^n in two steps so that denormal results round once
//   log     1       x = 2^e m, m in [sqrt(1/2), sqrt 2), Cephes' degree-9 polynomial of m - 1
//   tanh    1.5      |x| < 0.625: odd polynomial (Cephes); else 1 - 2/(exp(2|x|) + 1)
//   erf     2.5      |x| < 1: x P(x^2); else 1 - erfc(|x|) with the sign of x, where
//                   erfc(a) = exp(-a^2) t H(t), t = 1/(1 + a/2), H one minimax polynomial for
//                   every a >= 0, a^2 split exactly (Veltkamp) so that exp(-a^2) keeps its
//                   accuracy up to a = 10
//   gelu    7        x/2 erfc(-x/sqrt 2) (erfc(z) = 2 - erfc(-z) for z < 0), with exp(-x^2/2)
//                   from x's exact square, not from the rounded x/sqrt 2 (which would cost
//                   up to 2 z^2 ulp), multiplied in last; no separate small-x polynomial
//                   (6 ulp with one, at 15% more time)
//   silu    4        x / (1 + e^-x); below 0, x e^x / (1 + e^x) with x / (1 + e^x) multiplied
//                   into e^x's reduced form before its scaling by 2^n, so that a denormal
//                   result rounds once (x times a denormal e^x was up to 18 ulp off)
//   sin,cos 1       in f64: |x| < pi/4 directly; else x 2/pi mod 4 by integer Payne-Hanek
//                   (a 96-bit window of 2/pi, exact for every f32), Taylor polynomials
//   pow     1       in f64: exp2(y log2 |x|) (atanh series for log, Taylor for exp2)
//
// Special values, as C99 Annex F / IEEE (what the oracle's double libm gives once
// rounded): NaN in, NaN out (pow(x, 0) = pow(1, y) = 1 even so); exp(-inf) = 0,
// exp(+inf) and exp overflow = inf, results below 2^-149 flush to 0 and denormal results
// are rounded once; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, denormal inputs are
// exact; tanh(+-inf) = +-1, erf(+-inf) = +-1, gelu(inf) = inf, gelu(-inf) is NaN (-inf * 0,
// as the oracle's formula); sin and cos of +-inf are NaN; +-0 keeps its
// sign in tanh, erf, sin; denormal inputs are handled as numbers (no flush to zero).
#pragma once

#include <llvm/IR/Module.h>

namespace dnnc::backend {

enum class MathFn { Exp, Log, Tanh, Erf, Gelu, Silu, Sin, Cos, Pow };

// libm's f32 name for `fn` ("expf"; gelu and silu have none and answer "gelu", "silu").
const char *libmName(MathFn fn);

// `fn` as an internal always-inline function of `m` taking and returning f32 (two
// operands for pow), created on first use; with lanes > 0, taking and returning vectors
// of that many f32, each lane exactly as the f32 form computes it (the same instructions,
// widened; sin and cos call the f32 form per lane). Kernels whose loops the vectorizer
// cannot widen (vectors built by hand, as attention's) call the vector form.
llvm::Function *vectorMathFunction(llvm::Module &m, MathFn fn, unsigned lanes = 0);

} // namespace dnnc::backend

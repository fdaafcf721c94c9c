#!/usr/bin/env python3
"""The scalar semantics of docs/semantics.md, the same on every device (ref, cpu, cpu
unoptimized, cuda-sim), against NumPy: NaN in max/min/argmax/argmin and maximum/minimum,
f16/bf16 rounding inside fused kernels, bool comparisons, float->int casts of inf/NaN/
out-of-range values, logsumexp of masked rows, blocked f32 sums, exact i64 reductions,
empty reductions, integer matmul, value-sized zeros, integer division and modulo.
Each at several shapes: 1, odd, warp and tile edges, and empty where the dims allow."""
import os
import subprocess
import tempfile
import unittest

import warnings

import numpy as np

from dnnc_test_util import Dnnc, assert_matches, run_tests

I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
I32_MIN, I32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max
# Row widths around a GPU warp (the lanes split each row) and 1.
WIDTHS = [(1, 1), (3, 31), (2, 33), (4, 65), (2, 1000)]


def saturating(x, dtype):
    """f32 -> integer as docs/semantics.md defines it: truncate, saturate, NaN -> 0."""
    info = np.iinfo(dtype)
    x = np.asarray(x, np.float64)
    out = np.zeros(x.shape, dtype)
    for k, v in np.ndenumerate(x):
        if np.isnan(v):
            out[k] = 0
        elif v >= 2.0 ** (info.bits - 1):
            out[k] = info.max
        elif v <= -2.0 ** (info.bits - 1):
            out[k] = info.min
        else:
            out[k] = int(np.trunc(v))
    return out


def bf16(x):
    """f32 rounded to the nearest even bfloat16, NaN kept."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), rounded)


class Semantics(unittest.TestCase):
    dnnc: Dnnc

    def model(self, d, name, text):
        path = os.path.join(d, f"{name}.dnn")
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_ok(self, path, inputs, extra=(), n=1):
        outs, p = self.dnnc.run(path, None, inputs, extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(outs), n)
        return outs

    def run_fails(self, path, inputs, message):
        """The run stops with a user error whose text holds `message`."""
        _, p = self.dnnc.run(path, None, inputs)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(message, p.stderr)

    def check(self, got, want, msg, rtol=1e-6, atol=1e-6):
        want = np.asarray(want)
        self.assertEqual(got.shape, want.shape, msg)
        self.assertEqual(got.dtype, want.dtype, msg)
        if np.issubdtype(got.dtype, np.floating):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=msg)
        else:
            np.testing.assert_array_equal(got, want, err_msg=msg)

    def check_each(self, outs, want, msg):
        for k, w in enumerate(want):
            self.check(outs[k], w, f"output {k}, {msg}")

    # ---- accuracy in the tails ----
    def test_gelu_tail(self):
        # gelu(x) = x/2 * erfc(-x/sqrt 2): the form 1 + erf(x/sqrt 2) cancelled to 0 below
        # about -6 on the CPU and the GPU (found by difftest: gelu(-6.36) * -3e38 was 0).
        from math import erfc
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "gelu", "dim N;\nmodel main(x: f32[N]) -> f32[N] {\n  return gelu(x);\n}\n")
            for n in (1, 9, 40):
                x = -np.linspace(0.5, 12.0, n).astype(np.float32)
                want = np.array([0.5 * v * erfc(-v / np.sqrt(2)) for v in x.astype(np.float64)]).astype(np.float32)
                self.check(self.run_ok(m, {"x": x})[0], want, f"gelu N={n}", rtol=1e-5, atol=0)

    def test_silu_tail(self):
        # silu(x) = x / (1 + e^-x) where e^x is denormal (x below -87): x times that e^x was
        # up to 18 ulp off and 0 below -104, while the result stays representable to -107.
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "silu", "dim N;\nmodel main(x: f32[N]) -> f32[N] {\n  return silu(x);\n}\n")
            x = np.concatenate([-np.linspace(85.0, 110.0, 41), [-89.84015, -91.045784, -100.0, -104.0, -105.0, -np.inf]]).astype(np.float32)
            v = x.astype(np.float64)
            with np.errstate(all="ignore"):
                want = (v / (1 + np.exp(-v))).astype(np.float32)
            got = self.run_ok(m, {"x": x})[0]
            finite = np.isfinite(want)
            ulp = np.spacing(np.maximum(np.abs(want[finite]), np.float32(2.0 ** -126))).astype(np.float64)
            self.assertLessEqual(np.max(np.abs(got[finite].astype(np.float64) - want[finite]) / ulp), 4.0, f"{got} vs {want}")
            self.assertTrue(np.isnan(got[-1]), "silu(-inf) is NaN, as -inf / (1 + inf)")

    # ---- f16 / bf16 rounding in fused kernels ----
    def test_narrow_float_rounding(self):
        rng = np.random.default_rng(1)
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "narrow", "dim N;\nmodel main(x: f32[N], y: f32[N]) -> (f32[N], f32[N], f32[N], f32[N]) {\n"
                           "  return (cast(cast(x, f16), f32), cast(cast(x, bf16), f32),\n"
                           "          cast(cast(x, f16) * cast(y, f16) + cast(y, f16), f32), cast(cast(x * 3.0, bf16) - cast(y, bf16), f32));\n}\n")
            for n in (1, 7, 33, 1000):
                x = (rng.standard_normal(n) * 100).astype(np.float32)
                y = (rng.standard_normal(n) * 3).astype(np.float32)
                if n >= 7:
                    x[:6] = [np.nan, np.inf, -np.inf, 70000.0, 1e-8, 65504.0]
                outs = self.run_ok(m, {"x": x, "y": y}, n=4)
                with np.errstate(all="ignore"):
                    h, hy = x.astype(np.float16), y.astype(np.float16)
                    self.check(outs[0], h.astype(np.float32), f"f16 round trip N={n}", 0, 0)
                    self.check(outs[1], bf16(x), f"bf16 round trip N={n}", 0, 0)
                    self.check(outs[2], (h * hy + hy).astype(np.float32), f"f16 chain N={n}", 0, 0)
                    self.check(outs[3], bf16(bf16(x * np.float32(3)) - bf16(y)), f"bf16 chain N={n}", 0, 0)

    # ---- NaN ----
    def test_nan_reductions(self):
        rng = np.random.default_rng(2)
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "nan", "dim R; dim L;\nmodel main(x: f32[R, L]) -> (f32[R], f32[R], i64[R], i64[R], f32[], i64[L]) {\n"
                           "  return (max(x, axis = 1), min(x, axis = 1), argmax(x, axis = 1), argmin(x, axis = 1), max(x), argmax(x, axis = 0));\n}\n")
            for r, l in WIDTHS:
                x = (np.round(rng.standard_normal((r, l)) * 2) / 2).astype(np.float32)
                for row in range(r):  # rows with none, one or several NaNs, anywhere
                    for _ in range(row % 3):
                        x[row, rng.integers(0, l)] = np.nan
                x[0, -1] = np.nan  # a NaN in the last lane's share
                outs = self.run_ok(m, {"x": x}, n=6)
                msg = f"R={r}, L={l}"
                self.check(outs[0], x.max(1), "max " + msg, 0, 0)
                self.check(outs[1], x.min(1), "min " + msg, 0, 0)
                self.check(outs[2], x.argmax(1), "argmax " + msg)
                self.check(outs[3], x.argmin(1), "argmin " + msg)
                self.check(outs[4], np.float32(x.max()), "max all " + msg, 0, 0)
                self.check(outs[5], x.argmax(0), "argmax leading " + msg)

    def test_nan_elementwise(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "nan_ew", "dim N;\nmodel main(x: f32[N], y: f32[N]) -> (f32[N], f32[N], bool[N], bool[N], bool[N], f32[N], bool[N], f32[N], f32[N]) {\n"
                           "  return (maximum(x, y), minimum(x, y), x < y, x != y, x == x, clip(x, -1.0, 1.0), cast(x, bool), relu(x), sign(x));\n}\n")
            vals = np.array([np.nan, 1, -np.inf, np.nan, 0, 2, -3, np.inf, 0.5], np.float32)
            for n in (1, 9, 37):
                x = np.resize(vals, n)
                y = np.resize(vals[::-1].copy(), n)
                outs = self.run_ok(m, {"x": x, "y": y}, n=9)
                msg = f"N={n}"
                self.check(outs[0], np.maximum(x, y), "maximum " + msg, 0, 0)
                self.check(outs[1], np.minimum(x, y), "minimum " + msg, 0, 0)
                self.check(outs[2], x < y, "lt " + msg)
                self.check(outs[3], x != y, "ne " + msg)
                self.check(outs[4], x == x, "eq " + msg)
                self.check(outs[5], np.clip(x, -1, 1), "clip " + msg, 0, 0)
                self.check(outs[6], x.astype(bool), "cast bool " + msg)
                self.check(outs[7], np.maximum(x, 0), "relu " + msg, 0, 0)
                self.check(outs[8], np.sign(x), "sign " + msg, 0, 0)

    def test_float_mod(self):
        # Float % is np.mod: the remainder of floor division with the divisor's sign, a zero
        # remainder too (0.0 % -1.0 is -0.0; the kernels and the reference gave fmod's sign),
        # and constants folded by the compiler alike (-7.0 % 3.0 folded to fmod's -1).
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "fmod", "dim N;\nmodel main(a: f32[N], b: f32[N]) -> (f32[N], f32[N], f32[N]) {\n"
                           "  return (a % b, a % -1.0, a * 0.0 + (-7.0 % 3.0));\n}\n")
            a = np.array([0.0, 2.0, -6.0, -0.0, -2.0, 5.5, -5.5, 7.0, np.nan, 1.0, np.inf], np.float32)
            b = np.array([-1.0, -1.0, 3.0, 1.0, 1.0, -2.0, 2.0, np.inf, 1.0, 0.0, 2.0], np.float32)
            for n in (1, 11, 37):
                x, y = np.resize(a, n), np.resize(b, n)
                outs = self.run_ok(m, {"a": x, "b": y}, n=3)
                with np.errstate(invalid="ignore"):  # NaN where NumPy's is NaN too
                    wants = (np.mod(x, y), np.mod(x, np.float32(-1)), x * np.float32(0) + np.float32(2))
                for k, want in enumerate(wants):
                    self.check(outs[k], want, f"output {k}, N={n}", 0, 0)
                    finite = np.isfinite(want)
                    np.testing.assert_array_equal(np.signbit(outs[k][finite]), np.signbit(want[finite]), f"output {k}, N={n}")

    def test_arange_steps_and_dtypes(self):
        # arange as NumPy's: a negative constant step counts down (it was refused), a range
        # that runs the other way is empty, and dtype = ... makes that dtype.
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "arange", "dim N;\nmodel main(x: f32[N], n: i64[]) -> (i64[A], i64[B], i64[C], i64[D], f32[E], i32[F], f16[G], f32[H]) {\n"
                           "  return (arange(10, 0, -3), arange(N, 0, -2), arange(0, 5, -1), arange(-2, -9, -2), arange(n, dtype = f32) * 0.5,\n"
                           "          arange(N, 1, -1, dtype = i32), arange(0, 7, 2, dtype = f16), arange(n, 0, 0 - 2, dtype = f32));\n}\n")
            for n in (1, 2, 7):  # (a dim is at least 1)
                outs = self.run_ok(m, {"x": np.zeros(n, np.float32), "n": np.array(n + 2, np.int64)}, n=8)
                wants = (np.arange(10, 0, -3), np.arange(n, 0, -2), np.arange(0, 5, -1), np.arange(-2, -9, -2),
                         np.arange(n + 2, dtype=np.float32) * np.float32(0.5), np.arange(n, 1, -1, dtype=np.int32),
                         np.arange(0, 7, 2, dtype=np.float16), np.arange(n + 2, 0, -2, dtype=np.float32))
                self.check_each(outs, wants, f"N={n}")

    def test_nan_max_pool(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "nan_pool", "dim H; dim W;\nmodel main(x: f32[1, 2, H, W]) -> f32[1, 2, H / 2, W / 2] {\n"
                           "  return max_pool2d(x, 2);\n}\n")
            for h, w in ((2, 2), (5, 7), (8, 9)):
                x = np.arange(2 * h * w, dtype=np.float32).reshape(1, 2, h, w)
                x[0, 0, 1, 1] = np.nan
                x[0, 1, 0, 0] = np.nan
                outs = self.run_ok(m, {"x": x})
                v = x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(1, 2, h // 2, 2, w // 2, 2)
                self.check(outs[0], v.max(axis=(3, 5)), f"max_pool2d {h}x{w}", 0, 0)

    # ---- bools ----
    def test_bool_ops(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "bools", "dim N;\nmodel main(a: bool[N], b: bool[N]) -> (bool[N], bool[N], bool[N], bool[N], bool[N], bool[N], bool[N], bool[N], bool[N], bool[N], bool[N], bool[N]) {\n"
                           "  return (a < b, a <= b, a > b, a >= b, a == b, a != b, maximum(a, b), minimum(a, b), a + b, a * b, relu(a), abs(a));\n}\n")
            for n in (1, 4, 33):
                a = np.resize(np.array([False, False, True, True]), n)
                b = np.resize(np.array([False, True, False, True]), n)
                outs = self.run_ok(m, {"a": a, "b": b}, n=12)
                want = [a < b, a <= b, a > b, a >= b, a == b, a != b, np.maximum(a, b), np.minimum(a, b), a + b, a * b,
                        np.maximum(a, False), np.abs(a)]
                self.check_each(outs, want, f"bool op N={n}")

    def test_int_maximum_compare(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "ints", "dim N;\nmodel main(a: i64[N], b: i64[N], c: i32[N]) -> (i64[N], i64[N], bool[N], bool[N], i64[N], i32[N]) {\n"
                           "  return (maximum(a, b), minimum(a, b), a == b, a < b, where(a < b, a, b), maximum(c, -c));\n}\n")
            big = 2 ** 53
            a = np.array([big + 1, big, I64_MIN, I64_MAX, -5, 7, 0], np.int64)
            b = np.array([big, big + 1, I64_MAX, I64_MIN, -5, -7, 1], np.int64)
            c = np.array([1, -2, I32_MIN, I32_MAX, 0, 5, -9], np.int32)
            for n in (1, 7):
                outs = self.run_ok(m, {"a": a[:n], "b": b[:n], "c": c[:n]}, n=6)
                aa, bb, cc = a[:n], b[:n], c[:n]
                with np.errstate(all="ignore"):
                    want = [np.maximum(aa, bb), np.minimum(aa, bb), aa == bb, aa < bb, np.where(aa < bb, aa, bb), np.maximum(cc, -cc)]
                self.check_each(outs, want, f"int op N={n}")

    def test_i32_wraps_inside_fused_kernels(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "i32_wrap", "dim N;\nmodel main(c: i32[N], a: i64[N]) -> (bool[N], i32[N], bool[N]) {\n"
                           "  return ((c + c) < 0, (c * c) / 3, cast(a, i32) < 0);\n}\n")
            c = np.array([2 ** 30 + 5, -2 ** 30 - 7, 3, I32_MAX, I32_MIN, -1, 46341], np.int32)
            a = np.array([2 ** 31, 2 ** 32 - 1, -2 ** 31 - 1, 5, 2 ** 40 + 2 ** 31, -3, 0], np.int64)
            for n in (1, 7):
                outs = self.run_ok(m, {"c": c[:n], "a": a[:n]}, n=3)
                with np.errstate(all="ignore"):
                    want = [(c[:n] + c[:n]) < 0, (c[:n] * c[:n]) // np.int32(3), a[:n].astype(np.int32) < 0]
                self.check_each(outs, want, f"i32 wrap N={n}")

    def test_nan_topk_unique(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "nan_sort", "dim N;\nmodel main(x: f32[N], i: i64[N]) -> (f32[2], i64[2], f32[U], i64[V]) {\n"
                           "  let (v, at) = topk(x, 2);\n  return (v, at, unique(x), unique(i));\n}\n")
            x = np.array([1, np.nan, 3, np.nan, 3, -np.inf, 2], np.float32)
            i = np.array([2 ** 53 + 1, 2 ** 53, 2 ** 53 + 1, 7, -1, 7, 2 ** 53], np.int64)
            outs = self.run_ok(m, {"x": x, "i": i}, n=4)
            self.check(outs[0], np.array([np.nan, np.nan], np.float32), "topk values with NaN", 0, 0)
            self.check(outs[1], np.array([1, 3]), "topk indices with NaN")
            self.check(outs[2], np.unique(x), "unique with NaN", 0, 0)
            self.check(outs[3], np.unique(i), "unique of i64 past 2^53")

    # ---- casts ----
    def test_float_to_int_casts(self):
        special = np.array([np.inf, -np.inf, np.nan, 1e10, -1e10, 3e9, 2.0 ** 31, -2.0 ** 31, 2.0 ** 63, -2.0 ** 63,
                            1e30, -1e30, 2.5, -2.5, 0.99, -0.99, 0.0, 16777217.0], np.float32)
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "casts", "dim N;\nmodel main(x: f32[N]) -> (i32[N], i64[N], i32[N], f32[N], i32[N], i64[N]) {\n"
                           "  return (cast(x, i32), cast(x, i64), cast(x * 2.0, i32) + 1, cast(cast(x, i64), f32),\n"
                           "          full([N], 1e30, dtype = i32) + cast(x * 0.0, i32), full([N], -1e30, dtype = i64));\n}\n")
            for n in (1, 5, len(special)):
                x = special[:n]
                outs = self.run_ok(m, {"x": x}, n=6)
                with np.errstate(all="ignore"):
                    self.check(outs[0], saturating(x, np.int32), f"f32->i32 N={n}")
                    self.check(outs[1], saturating(x, np.int64), f"f32->i64 N={n}")
                    self.check(outs[2], saturating(x * np.float32(2), np.int32) + np.int32(1), f"fused f32->i32 N={n}")
                    self.check(outs[3], saturating(x, np.int64).astype(np.float32), f"f32->i64->f32 N={n}", 0, 0)
                    self.check(outs[4], np.full(n, I32_MAX, np.int32) + saturating(x * np.float32(0), np.int32), f"full 1e30 i32 N={n}")
                    self.check(outs[5], np.full(n, I64_MIN, np.int64), f"full -1e30 i64 N={n}")

    # ---- logsumexp ----
    def test_logsumexp_masked_rows(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "lse", "dim R; dim L;\nmodel main(x: f32[R, L]) -> (f32[R], f32[R, 1]) {\n"
                           "  return (logsumexp(x, axis = 1), logsumexp(where(x > 0.0, x, -1.0 / 0.0), axis = 1, keepdims = true));\n}\n")
            rng = np.random.default_rng(3)
            for r, l in WIDTHS:
                x = rng.standard_normal((r, l)).astype(np.float32)
                x[0] = -np.inf
                if r > 1:
                    x[1, 0] = np.inf
                outs = self.run_ok(m, {"x": x}, n=2)
                masked = np.where(x > 0, x, -np.inf)

                def lse(v):
                    mx = v.max(1, keepdims=True)
                    with np.errstate(all="ignore"):
                        s = mx + np.log(np.exp(v - np.where(np.isinf(mx), 0, mx)).sum(1, keepdims=True))
                    return np.where(np.isinf(mx), mx, s).astype(np.float32)
                self.check(outs[0], lse(x)[:, 0], f"logsumexp R={r} L={l}", 1e-5, 1e-5)
                self.check(outs[1], lse(masked), f"masked logsumexp R={r} L={l}", 1e-5, 1e-5)

    def test_log_softmax_infinite_rows(self):
        # log_softmax is x - logsumexp(x) (scipy.special.log_softmax): a row whose max is +inf
        # gives NaN at its infinities and -inf elsewhere (it was NaN throughout); all -inf
        # is NaN; a finite row is unchanged.
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "lsm", "dim R; dim L;\nmodel main(x: f32[R, L]) -> f32[R, L] {\n  return log_softmax(x, axis = 1);\n}\n")
            rng = np.random.default_rng(5)
            for r, l in WIDTHS:
                x = rng.standard_normal((r, l)).astype(np.float32)
                x[0, 0] = np.inf
                if r > 1:
                    x[1] = -np.inf
                v = x.astype(np.float64)
                mx = v.max(1, keepdims=True)
                with np.errstate(all="ignore"):
                    lse = np.where(np.isposinf(mx), mx, mx + np.log(np.exp(v - np.where(np.isinf(mx), 0, mx)).sum(1, keepdims=True)))
                    want = (v - lse).astype(np.float32)
                self.check(self.run_ok(m, {"x": x})[0], want, f"log_softmax R={r} L={l}", 1e-5, 1e-5)

    # ---- accumulation ----
    def test_long_f32_sums(self):
        n = 2 ** 25
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "long_sum", "dim N; dim A; dim B;\nmodel main(x: f32[A, B]) -> (f32[], f32[], f32[], f32[], f32[]) {\n"
                           "  return (sum(ones([N])), mean(ones([N])), sum(full([N], 0.1)), sum(x + 1.0), logsumexp(zeros([N]), axis = 0));\n}\n")
            x = np.zeros((2 ** 12, 2 ** 13), np.float32)
            outs = self.run_ok(m, {"x": x}, ["--bind", f"N={n}"], n=5)
            self.check(outs[0], np.float32(n), "sum of 2^25 ones", 0, 0)
            self.check(outs[1], np.float32(1), "mean of 2^25 ones", 1e-6, 0)
            self.check(outs[2], np.float32(n * float(np.float32(0.1))), "sum of 2^25 x 0.1", 1e-4, 0)
            self.check(outs[3], np.float32(n), "sum of a 4096 x 8192 matrix", 0, 0)
            self.check(outs[4], np.float32(np.log(n)), "logsumexp of 2^25 zeros", 1e-5, 0)

    def test_f32_product_order(self):
        # A product over a row under 4 vectors with a partial last one (37 lanes: a masked
        # vector loop on AVX-512), its terms computed in the loop. Where a partial product
        # overflows, the order decides (docs/semantics.md): the CPU multiplies serially in
        # f32, so e^80 e^80 is inf before e^-80 e^-80 joins; the GPU's lanes split the row
        # (e^80 meets e^-80 first) and the reference multiplies in f64: both give ~1.
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "prod_order", "dim B;\nmodel main(x: f32[B, 37]) -> f32[B] {\n  return prod(exp(x), axis = 1);\n}\n")
            x = np.zeros((2, 37), np.float32)
            x[0, [0, 1]], x[0, [16, 17]] = 80, -80
            x[1] = np.linspace(-2, 2, 37, dtype=np.float32)
            out = self.run_ok(m, {"x": x})[0]
            serial = self.dnnc.device == "cpu"
            self.check(out[0], np.float32(np.inf if serial else 1), f"prod(exp(x)) past f32's range on {self.dnnc.device}", 1e-5, 0)
            self.check(out[1], np.float32(np.prod(np.exp(x[1].astype(np.float64)))), "prod(exp(x)) of a 37-element row", 1e-5, 0)

    def test_exact_int64_reductions(self):
        big = 2 ** 53
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "i64_reduce", "dim R; dim L;\nmodel main(x: i64[R, L]) -> (i64[R], i64[R], i64[R], i64[R], i64[], i64[R]) {\n"
                           "  return (sum(x, axis = 1), max(x, axis = 1), min(x, axis = 1), prod(x, axis = 1), sum(x), argmax(x, axis = 1));\n}\n")
            rng = np.random.default_rng(4)
            for r, l in WIDTHS:
                x = rng.integers(-3, 4, (r, l)).astype(np.int64) + big
                x[0, -1] = big + 1
                if r > 1:
                    x[1, 0] = I64_MAX  # the sum wraps
                outs = self.run_ok(m, {"x": x}, n=6)
                msg = f"R={r}, L={l}"
                with np.errstate(all="ignore"):
                    want = [x.sum(1), x.max(1), x.min(1), x.prod(1), np.int64(x.sum()), x.argmax(1)]
                for k, w in enumerate(want):
                    self.check(outs[k], w, f"i64 reduction {k} {msg}")

    # ---- empty reductions ----
    def test_empty_reductions(self):
        # x[k:] with k = N is empty: its first dim is a fresh dim from data.
        with tempfile.TemporaryDirectory() as d:
            ok = self.model(d, "empty_ok", "dim N;\nmodel main(x: f32[N, 3], i: i32[N, 3], k: i64[]) -> (f32[3], f32[3], f32[3], i32[3], f32[], f32[E]) {\n"
                            "  let y = x[k:];\n  let j = i[k:];\n"
                            "  return (sum(y, axis = 0), prod(y, axis = 0), mean(y, axis = 0), sum(j, axis = 0), logsumexp(y, axis = [0, 1]), max(y, axis = 1));\n}\n")
            for n in (1, 4):
                x, i = np.ones((n, 3), np.float32), np.ones((n, 3), np.int32)
                outs = self.run_ok(ok, {"x": x, "i": i, "k": np.array(n, np.int64)}, n=6)
                y, j = x[n:], i[n:]
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    want = [y.sum(0), y.prod(0), y.mean(0), j.sum(0).astype(np.int32), np.float32(-np.inf), y.max(1)]
                self.check_each(outs, want, f"empty reduction N={n}")
            for op, axis in (("max", "axis = 0"), ("min", "axis = 0"), ("argmax", "axis = 0"), ("argmin", "axis = 0"), ("max", "axis = [0, 1]")):
                res = "i64[3]" if op.startswith("arg") else ("f32[]" if "[0, 1]" in axis else "f32[3]")
                bad = self.model(d, f"empty_{op}", f"dim N;\nmodel main(x: f32[N, 3], k: i64[]) -> {res} {{\n"
                                 f"  let y = x[k:] * 2.0;\n  return {op}(y, {axis});\n}}\n")
                for n in (1, 5):
                    outs, p = self.dnnc.run(bad, None, {"x": np.ones((n, 3), np.float32), "k": np.array(n, np.int64)})
                    self.assertEqual(p.returncode, 1, f"{op}: {p.stderr}")
                    self.assertIn("zero-size array to reduction operation", p.stderr)
                    self.assertIn(f"'{op}' at line 4", p.stderr)
                # A non-empty slice still works with the same model.
                self.run_ok(bad, {"x": np.ones((2, 3), np.float32), "k": np.array(1, np.int64)})

    # ---- static slices: NumPy's clamped bounds, chained and past the end ----
    def test_slice_chains(self):
        with tempfile.TemporaryDirectory() as d:
            links = "".join(f"  let a{i} = a{i - 1}[1:];\n" for i in range(1, 13))
            m = self.model(d, "slices", "dim N;\nmodel main(x: f32[N, 2]) -> (f32[A, 2], f32[S, 2], f32[E, 2], f32[P, 2]) {\n"
                           f"  let a0 = x;\n{links}"
                           "  return (a12, x[2:N], x[N + 3:], x[1:7:2]);\n}\n")
            for n in (1, 2, 3, 12, 13, 20):  # declared dims are >= 1
                x = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
                outs = self.run_ok(m, {"x": x}, n=4)
                self.check_each(outs, [x[12:], x[2:n], x[n + 3:], x[1:7:2]], f"slices N={n}")

    # ---- integer matmul ----
    def test_integer_matmul(self):
        rng = np.random.default_rng(5)
        with tempfile.TemporaryDirectory() as d:
            for t, npt in (("i32", np.int32), ("i64", np.int64)):
                m = self.model(d, f"mm_{t}", f"dim M; dim K; dim N;\nmodel main(a: {t}[M, K], b: {t}[K, N], v: {t}[K]) -> ({t}[M, N], {t}[2, M, N], {t}[M]) {{\n"
                               "  return (a @ b, stack([a, a]) @ b, a @ v);\n}\n")
                for mm, k, n in ((1, 1, 1), (3, 5, 7), (9, 33, 65)):
                    a = rng.integers(-9, 10, (mm, k)).astype(npt)
                    b = rng.integers(-9, 10, (k, n)).astype(npt)
                    v = rng.integers(-9, 10, (k,)).astype(npt)
                    if t == "i64":
                        a[0, 0] = 2 ** 40 + 3  # products past 2^53 and wrapping sums stay exact
                        b[0, 0] = 2 ** 30 + 1
                    outs = self.run_ok(m, {"a": a, "b": b, "v": v}, n=3)
                    with np.errstate(all="ignore"):
                        self.check(outs[0], a @ b, f"{t} matmul {mm}x{k}x{n}")
                        self.check(outs[1], np.stack([a, a]) @ b, f"{t} batched matmul {mm}x{k}x{n}")
                        self.check(outs[2], a @ v, f"{t} matvec {mm}x{k}x{n}")

    # ---- value-sized creation ----
    def test_value_sized_zeros(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "zeros_n", "dim N;\nmodel main(x: f32[N], k: i64[]) -> (f32[M], f32[P], f32[Q]) {\n"
                           "  let z = zeros([k]) + 1.5;\n  let o = ones([k * 2], dtype = f32) * 2.0;\n"
                           "  let u = zeros([shape(nonzero(x > 0.0), 0)]) - 1.0;\n  return (z, o, u);\n}\n")
            for n, k in ((1, 1), (7, 5), (40, 0)):
                x = np.arange(n, dtype=np.float32) - 3
                outs = self.run_ok(m, {"x": x, "k": np.array(k, np.int64)}, n=3)
                self.check(outs[0], np.full(k, 1.5, np.float32), f"zeros([k]) k={k}")
                self.check(outs[1], np.full(2 * k, 2.0, np.float32), f"ones([k * 2]) k={k}")
                self.check(outs[2], np.full(int((x > 0).sum()), -1.0, np.float32), f"zeros from data N={n}")

    def test_value_shaped_movement(self):
        # reshape, broadcast_to and resize take i64[] values among their sizes, as zeros does
        # (they were refused: 'element types f32 and i64 differ'); the counts are checked
        # when they run, and a gradient flows back through them. Two grads in one model
        # also need the ops that bind the fresh dims ordered before the fused groups that
        # use them only inside (the backward's broadcast to [S, 3, 4]).
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "value_shaped", "model main(x: f32[3, 4], a: i64[]) -> (f32[P, Q], f32[R, 3, 4], f32[S, T], f32[3, 4]) {\n"
                           "  let r = reshape(x, [a, -1]);\n"
                           "  return (r * 2.0, broadcast_to(x, [a, 3, 4]) + 1.0, resize(x, [a, a]),\n"
                           "          grad(sum(r * r), x) + grad(sum(broadcast_to(x, [a, 3, 4])), x));\n}\n")
            x = np.arange(12, dtype=np.float32).reshape(3, 4)
            for a in (1, 2, 3, 6):
                outs = self.run_ok(m, {"x": x, "a": np.array(a, np.int64)}, n=4)
                rows, cols = (np.arange(a) * 3) // a, (np.arange(a) * 4) // a
                self.check_each(outs, (x.reshape(a, -1) * 2, np.broadcast_to(x, (a, 3, 4)) + 1, x[rows][:, cols], 2 * x + a), f"a={a}")
            for a, message in ((5, "cannot reshape f32[3, 4] "), (-2, "has the negative entry -2, given by a value")):
                self.run_fails(m, {"x": x, "a": np.array(a, np.int64)}, message)
            # As in NumPy, sizes past 2^63 are refused even beside a 0 (the count was 0).
            m = self.model(d, "value_shaped_huge", "dim N in 0..8;\nmodel main(x: f32[N], a: i64[]) -> (f32[P, Q, R], f32[S, T, U]) {\n"
                           "  return (reshape(x, [0, a, a]), reshape(x, [a, a, -1]));\n}\n")
            for a, message in ((2 ** 62, "cannot reshape f32[0] into f32[0, 4611686018427387904, 4611686018427387904]: "
                                         "its sizes multiply past 2^63"), (2 ** 20, None)):
                outs, p = self.dnnc.run(m, None, {"x": np.zeros(0, np.float32), "a": np.array(a, np.int64)})
                if message:
                    self.assertEqual(p.returncode, 1, p.stderr)
                    self.assertIn(message, p.stderr)
                else:
                    self.assertEqual(p.returncode, 0, p.stderr)
                    self.assertEqual([o.shape for o in outs], [(0, a, a), (a, a, 0)])
            # The same rule on every device (ref multiplied in double and checked no bytes):
            # sizes multiplying to 2^63 - 1 fit; f32 bytes past 2^64 do not; a -1 beside a 0
            # has no value (NumPy refuses it, as sema does for a constant 0).
            m = self.model(d, "value_shaped_edges", "dim N in 0..8;\nmodel main(x: bool[N], a: i64[], b: i64[]) -> bool[P, Q, R] {\n"
                           "  return reshape(x, [a, b, -1]);\n}\n")
            big = {"x": np.zeros(0, bool), "a": np.array(7, np.int64), "b": np.array((2 ** 63 - 1) // 7, np.int64)}
            self.assertEqual(self.run_ok(m, big, n=1)[0].shape, (7, (2 ** 63 - 1) // 7, 0))
            for a, b, message in ((2 ** 31, 2 ** 31, None), (0, 5, "with -1 beside a size of 0: no one size fits the -1")):
                f = self.model(d, f"value_shaped_f32_{a}", "dim N in 0..8;\nmodel main(x: f32[N], a: i64[], b: i64[]) -> f32[P, Q, R] {\n"
                               "  return reshape(x, [a, b, 0]);\n}\n" if message is None else
                               "dim N in 0..8;\nmodel main(x: f32[N], a: i64[], b: i64[]) -> f32[P, Q, R] {\n  return reshape(x, [a, b, -1]);\n}\n")
                self.run_fails(f, {"x": np.zeros(0, np.float32), "a": np.array(a, np.int64), "b": np.array(b, np.int64)},
                               message or "f32[2147483648, 2147483648, 0]: its byte count overflows 64 bits")
            # Sizes computed from values: the reshape was fused with the add that makes its
            # size, a group no kernel could run ('has neither a kernel nor a host implementation').
            m = self.model(d, "value_shaped_computed", "dim T;\nmodel main(x: f32[T], s: i64[]) -> (f32[K], f32[L]) {\n"
                           "  let k = cast(shape(x, 0), i64);\n  return (reshape(x, [s + 1]), broadcast_to(x[:1], [k * 2]));\n}\n")
            x = np.arange(6, dtype=np.float32)
            outs = self.run_ok(m, {"x": x, "s": np.array(5, np.int64)}, n=2)
            self.check_each(outs, (x, np.full(12, x[0])), "computed sizes")

    def test_assert_between_data_dependent_dims(self):
        # An assert equating two dims made by the data, one of them named by the declared
        # result: the rename lost the assert's fact (an internal error from the verifier).
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "assert_fresh_dims", "dim T;\nmodel main(x: f32[T]) -> f32[J] {\n"
                           "  let m = masked_select(x, x > 0.0);\n  let n = masked_select(x, x < 0.0);\n"
                           "  assert shape(m, 0) == shape(n, 0);\n  return m + n;\n}\n")
            x = np.array([1, -2, 3, -4], np.float32)
            self.check_each(self.run_ok(m, {"x": x}, n=1), (x[x > 0] + x[x < 0],), "two of each")
            self.run_fails(m, {"x": x[:3]}, "assert N == J at line 5 fails: N = 2 and J = 1")

    def test_divisibility_from_asserts(self):
        # `assert T % 2 == 0` makes T - 2*(T/2) zero: reshapes by halves and a T/2*2 input
        # type-check (every assert, the suggested one included, left them unprovable).
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "even", "dim T;\nmodel main(x: f32[T], y: f32[T/2*2]) -> (f32[P, 2], f32[T/2, 2], f32[T]) {\n"
                           "  assert T % 2 == 0;\n  return (reshape(x, [-1, 2]), reshape(x, [T / 2, 2]), x + y);\n}\n")
            x, y = np.arange(6, dtype=np.float32), np.ones(6, np.float32)
            self.check_each(self.run_ok(m, {"x": x, "y": y}, n=3), (x.reshape(3, 2), x.reshape(3, 2), x + y), "T=6")
            self.run_fails(m, {"x": x[:5], "y": y[:4]}, "assert T % 2 == 0 at line 3 fails: T % 2 = 1")
            # Through a product with another dim: nn.attention over a width D that is a dim
            # (its `assert hd * heads == D` did not make [B, T, heads, hd] a reshape of
            # [B, T, D]).
            m = self.model(d, "attention_d", "import nn;\ndim B; dim T; dim D;\n"
                           "model main(q: f32[B, T, D]) -> f32[B, T, D] {\n  return nn.attention(q, q, q, heads = 2);\n}\n")
            q = np.random.default_rng(5).standard_normal((2, 3, 8)).astype(np.float32)
            qh = q.reshape(2, 3, 2, 4).transpose(0, 2, 1, 3)
            s = qh @ qh.transpose(0, 1, 3, 2) / 2.0
            p = np.exp(s - s.max(-1, keepdims=True))
            want = ((p / p.sum(-1, keepdims=True)) @ qh).transpose(0, 2, 1, 3).reshape(2, 3, 8)
            self.check(self.run_ok(m, {"q": q}, n=1)[0], want.astype(np.float32), "heads of 4", rtol=1e-5, atol=1e-6)
            self.run_fails(m, {"q": q[:, :, :7]}, "assert 2*(D/2) == D at line 36 fails: 2*(D/2) = 6 and D = 7")

    def test_i64_literals_past_2_53(self):
        # A constant op holds a double: 9007199254740993 became ...992. Integers past 2^53
        # go through a dim's value, exactly.
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "i64_literal", "model main(a: i64[2]) -> (i64[2], i64[2]) {\n"
                           "  return (a + 9007199254740993, a * 0 - 9223372036854775807);\n}\n")
            a = np.array([0, 5], np.int64)
            self.check_each(self.run_ok(m, {"a": a}, n=2), (a + 9007199254740993, a * 0 - 9223372036854775807), "past 2^53")

    def test_arange_from_values_past_2_63(self):
        # stop - start may pass 2^63 (it wrapped: -5e18 to 5e18 by 1e18 gave no elements,
        # 0 to 2^63 - 1 by 2^62 a negative size); a count past 2^63 is an error.
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "arange_wide", "model main(a: i64[], b: i64[], c: i64[]) -> i64[P] {\n  return arange(a, b, c);\n}\n")
            for a, b, c in ((-5 * 10 ** 18, 5 * 10 ** 18, 10 ** 18), (0, 2 ** 63 - 1, 2 ** 62), (2 ** 63 - 1, -2 ** 63, -3 * 10 ** 18)):
                feeds = {"a": np.array(a, np.int64), "b": np.array(b, np.int64), "c": np.array(c, np.int64)}
                outs = self.run_ok(m, feeds, n=1)
                self.check_each(outs, (np.array(list(range(a, b, c)), np.int64),), f"arange({a}, {b}, {c})")
            outs, p = self.dnnc.run(m, None, {"a": np.array(-2 ** 63, np.int64), "b": np.array(2 ** 63 - 1, np.int64),
                                              "c": np.array(1, np.int64)})
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("arange from -9223372036854775808 to 9223372036854775807 by 1 has more than 2^63 elements", p.stderr)
            # The same bounds written as constants count alike (they were refused: 'the
            # value of this expression overflows 64 bits'), and the same count is refused.
            m = self.model(d, "arange_wide_const", "model main() -> i64[P] {\n"
                           "  return arange(-5000000000000000000, 5000000000000000000, 1000000000000000000);\n}\n")
            self.check_each(self.run_ok(m, {}, n=1), (np.arange(-5 * 10 ** 18, 5 * 10 ** 18, 10 ** 18, dtype=np.int64),), "constants")
            m = self.model(d, "arange_huge_const", "model main() -> i64[P] {\n  return arange(-9223372036854775807 - 1, 9223372036854775807);\n}\n")
            p = subprocess.run([self.dnnc.exe, "check", m], capture_output=True, text=True, timeout=60)  # a compile error
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("arange from -9223372036854775808 to 9223372036854775807 by 1 has more than 2^63 elements [range]", p.stderr)

    # ---- integer division and modulo ----
    def test_integer_division(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.model(d, "idiv", "dim N;\nmodel main(a: i64[N], b: i64[N], c: i32[N], e: i32[N]) -> (i64[N], i64[N], i32[N], i32[N], i32[N]) {\n"
                           "  return (a / b, a % b, c / e, c % e, c ** 3);\n}\n")
            a = np.array([I64_MIN, I64_MIN, 7, -7, 7, -7, 5, I64_MAX, 0, -1], np.int64)
            b = np.array([-1, 1, 2, 2, -2, -2, 0, -1, 0, 3], np.int64)
            c = np.array([I32_MIN, I32_MIN, 7, -7, 7, -7, 5, I32_MAX, 0, 1291], np.int32)
            e = np.array([-1, 1, 2, 2, -2, -2, 0, -1, 0, 3], np.int32)
            for n in (1, 10):
                outs = self.run_ok(m, {"a": a[:n], "b": b[:n], "c": c[:n], "e": e[:n]}, n=5)
                with np.errstate(all="ignore"):
                    want = [a[:n] // b[:n], a[:n] % b[:n], c[:n] // e[:n], c[:n] % e[:n], c[:n] ** 3]
                self.check_each(outs, want, f"integer division N={n}")


if __name__ == "__main__":
    run_tests(Semantics, verbosity=2)

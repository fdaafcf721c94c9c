#!/usr/bin/env python3
"""Every builtin run by the reference interpreter against NumPy, one small model per op,
at several shapes (dims of 1, primes, sizes of 8 and more)."""
import math
import os
import subprocess
import tempfile
import unittest
import warnings

import numpy as np

from dnnc_test_util import Dnnc, assert_matches, conv2d_ref, run_tests

erf = np.vectorize(math.erf)
SHAPES = [(1, 1), (3, 5), (8, 7)]  # values of (A, B)


def sm(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def topk(x, k):
    order = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return [np.take_along_axis(x, order, -1), order]


# name: (result expression in x (f32[A, B]), y (f32[A, B]), m (bool[A, B]), i (i32[A, B]),
#        result type, NumPy reference)
OPS = {
    "neg": ("-x", "f32[A, B]", lambda x, y, m, i: -x),
    "abs": ("abs(x)", "f32[A, B]", lambda x, y, m, i: np.abs(x)),
    "exp": ("exp(x)", "f32[A, B]", lambda x, y, m, i: np.exp(x)),
    "log": ("log(abs(x) + 1.0)", "f32[A, B]", lambda x, y, m, i: np.log(np.abs(x) + 1)),
    "sqrt": ("sqrt(abs(x))", "f32[A, B]", lambda x, y, m, i: np.sqrt(np.abs(x))),
    "rsqrt": ("rsqrt(abs(x) + 0.5)", "f32[A, B]", lambda x, y, m, i: 1 / np.sqrt(np.abs(x) + 0.5)),
    "tanh": ("tanh(x)", "f32[A, B]", lambda x, y, m, i: np.tanh(x)),
    "sigmoid": ("sigmoid(x)", "f32[A, B]", lambda x, y, m, i: 1 / (1 + np.exp(-x))),
    "relu": ("relu(x)", "f32[A, B]", lambda x, y, m, i: np.maximum(x, 0)),
    "gelu": ("gelu(x)", "f32[A, B]", lambda x, y, m, i: 0.5 * x * (1 + erf(x / math.sqrt(2)))),
    "silu": ("silu(x)", "f32[A, B]", lambda x, y, m, i: x / (1 + np.exp(-x))),
    "erf": ("erf(x)", "f32[A, B]", lambda x, y, m, i: erf(x)),
    "sin": ("sin(x)", "f32[A, B]", lambda x, y, m, i: np.sin(x)),
    "cos": ("cos(x)", "f32[A, B]", lambda x, y, m, i: np.cos(x)),
    "floor": ("floor(x * 3.0)", "f32[A, B]", lambda x, y, m, i: np.floor(x.astype(np.float32) * np.float32(3))),
    "ceil": ("ceil(x * 3.0)", "f32[A, B]", lambda x, y, m, i: np.ceil(x.astype(np.float32) * np.float32(3))),
    "round": ("round(x * 3.0)", "f32[A, B]", lambda x, y, m, i: np.round(x.astype(np.float32) * np.float32(3))),
    "sign": ("sign(x)", "f32[A, B]", lambda x, y, m, i: np.sign(x)),
    "add": ("x + y", "f32[A, B]", lambda x, y, m, i: x + y),
    "sub": ("x - y[0]", "f32[A, B]", lambda x, y, m, i: x - y[0]),
    "mul": ("x * 2.5", "f32[A, B]", lambda x, y, m, i: x * 2.5),
    "div": ("x / (abs(y) + 1.0)", "f32[A, B]", lambda x, y, m, i: x / (np.abs(y) + 1)),
    "mod": ("x % 0.75", "f32[A, B]", lambda x, y, m, i: np.mod(x.astype(np.float32), np.float32(0.75))),
    "pow": ("abs(x) ** 1.5", "f32[A, B]", lambda x, y, m, i: np.abs(x) ** 1.5),
    "maximum": ("maximum(x, y)", "f32[A, B]", lambda x, y, m, i: np.maximum(x, y)),
    "minimum": ("minimum(x, 0.0)", "f32[A, B]", lambda x, y, m, i: np.minimum(x, 0)),
    "compare": ("(x < y) or (x >= 0.5) and not m", "bool[A, B]", lambda x, y, m, i: (x < y) | ((x >= 0.5) & ~m)),
    "where": ("where(m, x, y)", "f32[A, B]", lambda x, y, m, i: np.where(m, x, y)),
    "clip": ("clip(x, -0.5, 0.5)", "f32[A, B]", lambda x, y, m, i: np.clip(x, -0.5, 0.5)),
    "cast": ("cast(i, f32) + cast(cast(x * 4.0, i32), f32)", "f32[A, B]",
             lambda x, y, m, i: i + np.trunc(x.astype(np.float32) * np.float32(4))),
    "int_div_mod": ("(i - 5) / 3 + (i - 5) % 3", "i32[A, B]", lambda x, y, m, i: (i - 5) // 3 + (i - 5) % 3),
    "sum": ("sum(x, axis = 0)", "f32[B]", lambda x, y, m, i: x.sum(0)),
    "mean": ("mean(x, axis = -1, keepdims = true)", "f32[A, 1]", lambda x, y, m, i: x.mean(-1, keepdims=True)),
    "max": ("max(x)", "f32[]", lambda x, y, m, i: x.max()),
    "min": ("min(x, axis = 1)", "f32[A]", lambda x, y, m, i: x.min(1)),
    "prod": ("prod(x * 0.5 + 1.0, axis = 0)", "f32[B]", lambda x, y, m, i: (x * 0.5 + 1).prod(0)),
    "argmax": ("argmax(x, axis = 1)", "i64[A]", lambda x, y, m, i: x.argmax(1)),
    "argmin": ("argmin(x, axis = 0)", "i64[B]", lambda x, y, m, i: x.argmin(0)),
    "logsumexp": ("logsumexp(x, axis = -1)", "f32[A]", lambda x, y, m, i: np.log(np.exp(x).sum(-1))),
    "softmax": ("softmax(x, axis = 0)", "f32[A, B]", lambda x, y, m, i: sm(x, 0)),
    "log_softmax": ("log_softmax(x)", "f32[A, B]", lambda x, y, m, i: np.log(sm(x))),
    "matmul": ("x @ transpose(y)", "f32[A, A]", lambda x, y, m, i: x @ y.T),
    "matmul_batch": ("unsqueeze(x, 0) @ stack([transpose(y), transpose(y)])", "f32[2, A, A]",
                     lambda x, y, m, i: np.stack([x @ y.T, x @ y.T])),
    "matvec": ("x @ y[0]", "f32[A]", lambda x, y, m, i: x @ y[0]),
    "reshape": ("reshape(x, [B, -1])", "f32[B, A]", lambda x, y, m, i: x.reshape(x.shape[1], -1)),
    "transpose": ("transpose(x)", "f32[B, A]", lambda x, y, m, i: x.T),
    "broadcast_to": ("broadcast_to(y[0], [3, A, B])", "f32[3, A, B]", lambda x, y, m, i: np.broadcast_to(y[0], (3,) + x.shape)),
    "squeeze": ("squeeze(unsqueeze(x, 1), axis = 1)", "f32[A, B]", lambda x, y, m, i: x),
    "concat": ("concat([x, y, x], axis = 1)", "f32[A, 3 * B]", lambda x, y, m, i: np.concatenate([x, y, x], 1)),
    "split": ("split(concat([x, y], axis = 1), [B, B], axis = 1)[1]", "f32[A, B]", lambda x, y, m, i: y),
    # (the CPU shares the loops before the axis among the parts: none at axis 0)
    "concat_axis0": ("concat([x, y], axis = 0)", "f32[2 * A, B]", lambda x, y, m, i: np.concatenate([x, y], 0)),
    "stack_axis1": ("stack([x, y, x], axis = 1)", "f32[A, 3, B]", lambda x, y, m, i: np.stack([x, y, x], 1)),
    "split_uneven": ("split(concat([x, y, x], axis = 1), [1, 3 * B - 1], axis = 1)[1] * 2.0", "f32[A, 3 * B - 1]",
                     lambda x, y, m, i: np.concatenate([x, y, x], 1)[:, 1:] * 2),
    "split_middle": ("split(stack([x, y, x], axis = 1), [1, 2], axis = 1)[1] + 1.0", "f32[A, 2, B]",
                     lambda x, y, m, i: np.stack([y, x], 1) + 1),
    "flatten": ("flatten(stack([x, y], axis = 2), 1)", "f32[A, 2 * B]",
                lambda x, y, m, i: np.stack([x, y], 2).reshape(x.shape[0], -1)),
    "pad": ("pad(x, [1, 0, 2, 3], 9.0)", "f32[A + 1, B + 5]", lambda x, y, m, i: np.pad(x, ((1, 0), (2, 3)), constant_values=9)),
    # Widths that are dims (the kernel once read them as 0 and shifted the data).
    "pad_dims": ("pad(x, [0, A, B, 1])", "f32[2 * A, 2 * B + 1]",
                 lambda x, y, m, i: np.pad(x, ((0, x.shape[0]), (x.shape[1], 1)))),
    "take": ("take(x, i % B, axis = 1)", "f32[A, A, B]", lambda x, y, m, i: np.take(x, i % x.shape[1], axis=1)),
    "embedding": ("embedding(y, i % A)", "f32[A, B, B]", lambda x, y, m, i: y[i % x.shape[0]]),
    "one_hot": ("one_hot(i, 4)", "f32[A, B, 4]", lambda x, y, m, i: np.eye(4)[np.clip(i, 0, 3)] * (i < 4)[..., None]),
    "slice": ("x[1:, ::2]", "f32[max(0, A - 1), (B + 1) / 2]", lambda x, y, m, i: x[1:, ::2]),
    "point": ("x[-1, ...]", "f32[B]", lambda x, y, m, i: x[-1]),
    # Bounds outside the axis clamp as in NumPy (a start before the beginning once typed the
    # slice longer than its input and read past it).
    "slice_out_of_range": ("x[-10:, -20:3]", "f32[P, Q]", lambda x, y, m, i: x[-10:, -20:3]),
    "slice_past_end": ("x[5:100, 1:-1]", "f32[P, Q]", lambda x, y, m, i: x[5:100, 1:-1]),
    "slice_empty": ("x[3:1, -1:]", "f32[P, Q]", lambda x, y, m, i: x[3:1, -1:]),
    "topk": ("topk(x, 1, axis = 1)[0]", "f32[A, 1]", lambda x, y, m, i: topk(x, 1)[0]),
    "nonzero": ("nonzero(m)", "i64[N, 2]", lambda x, y, m, i: np.stack(np.nonzero(m), 1)),
    "masked_select": ("masked_select(x, m)", "f32[N]", lambda x, y, m, i: x[m]),
    "unique": ("unique(i)", "i32[U]", lambda x, y, m, i: np.unique(i)),
    "arange": ("arange(1, A + B, 2)", "i64[(A + B) / 2]", lambda x, y, m, i: np.arange(1, x.shape[0] + x.shape[1], 2)),
    # Patterns the fusion passes group into one kernel.
    "fused_chain": ("relu(x * y + 1.0) - sigmoid(x)", "f32[A, B]", lambda x, y, m, i: np.maximum(x * y + 1, 0) - 1 / (1 + np.exp(-x))),
    "fused_reshape_transpose": ("reshape(transpose(unsqueeze(x, 2), [1, 0, 2]), [B * A])", "f32[B * A]",
                                lambda x, y, m, i: x.T.reshape(-1)),
    "fused_split_merge": ("reshape(transpose(reshape(concat([x, y], axis = 1), [A, 2, B]), [1, 0, 2]), [2 * A, B])",
                          "f32[2 * A, B]", lambda x, y, m, i: np.concatenate([x, y], 0)),
    "fused_reduction_prologue": ("sum(exp(x - y) * 2.0, axis = 1)", "f32[A]", lambda x, y, m, i: (np.exp(x - y) * 2).sum(1)),
    "fused_gemm_epilogue": ("gelu((x @ transpose(y)) * 0.5 + 1.0)", "f32[A, A]",
                            lambda x, y, m, i: 0.5 * (x @ y.T * 0.5 + 1) * (1 + erf((x @ y.T * 0.5 + 1) / math.sqrt(2)))),
    "fused_gemm_residual": ("x @ transpose(y) + y @ transpose(x)", "f32[A, A]", lambda x, y, m, i: x @ y.T + y @ x.T),
    "fused_softmax_mask": ("softmax(where(m, x * 0.5, -1e9))", "f32[A, B]",
                           lambda x, y, m, i: sm(np.where(m, x * 0.5, -1e9))),
    "full": ("full([A, 2], 1.5) + ones([2]) + zeros([A, 1])", "f32[A, 2]", lambda x, y, m, i: np.full((x.shape[0], 2), 2.5)),
}


class Ops(unittest.TestCase):
    dnnc: Dnnc


def write_model(d, name, header, args, result, expr):
    """Writes `header` then `model main(args) -> result { return expr; }` to d/name.dnn."""
    model = os.path.join(d, f"{name}.dnn")
    with open(model, "w") as f:
        f.write(f"{header}\nmodel main({args}) -> {result} {{\n  return {expr};\n}}\n")
    return model


def make_test(name, expr, result, ref):
    def test(self):
        rng = np.random.default_rng(abs(hash(name)) % 2**32)
        with tempfile.TemporaryDirectory() as d:
            model = write_model(d, name, "dim A; dim B;", "x: f32[A, B], y: f32[A, B], m: bool[A, B], i: i32[A, B]", result, expr)
            for a, b in SHAPES:
                x, y = rng.standard_normal((a, b)).astype(np.float32), rng.standard_normal((a, b)).astype(np.float32)
                m, i = rng.random((a, b)) < 0.5, rng.integers(0, 9, (a, b)).astype(np.int32)
                outs, p = self.dnnc.run(model, None, {"x": x, "y": y, "m": m, "i": i})
                self.assertEqual(p.returncode, 0, p.stderr)
                want = np.asarray(ref(x.astype(np.float64), y.astype(np.float64), m, i))
                got = outs[0]
                self.assertEqual(got.shape, want.shape, f"A={a}, B={b}")
                assert_matches(got, want, 1e-5, 1e-6, f"A={a}, B={b}")
    return test


# Matrix products at sizes around the CPU GEMM's tiles (14 rows with AVX-512, 6 with AVX2,
# with 8-, 4-, 2- and 1-row tails, 2 vectors of columns, tasks of 64 rows by 512 columns, blocks of 256 along k):
# dims of 1, primes, sizes just past each tile, empty sums and products, and both sides of
# the row count (4) up to which B is read in place rather than packed.
GEMM_SHAPES = [(1, 1, 1), (7, 3, 5), (67, 300, 37), (130, 513, 70), (9, 257, 33),  # (M, K, N)
               (2, 0, 40), (0, 5, 7), (4, 33, 300), (5, 70, 513), (1, 300, 257), (3, 40, 530)]
GEMM_MODELS = {
    "plain": ("a: f32[M, K], b: f32[K, N]", "f32[M, N]", lambda m, k, n: ((m, k), (k, n))),
    "batched_lhs": ("a: f32[2, M, K], b: f32[K, N]", "f32[2, M, N]", lambda m, k, n: ((2, m, k), (k, n))),
    "batched_rhs": ("a: f32[M, K], b: f32[3, K, N]", "f32[3, M, N]", lambda m, k, n: ((m, k), (3, k, n))),
    "vector_lhs": ("a: f32[K], b: f32[K, N]", "f32[N]", lambda m, k, n: ((k,), (k, n))),
    "f16": ("a: f16[M, K], b: f16[K, N]", "f16[M, N]", lambda m, k, n: ((m, k), (k, n))),
    "epilogue": ("a: f32[M, K], b: f32[K, N]", "f32[M, N]", lambda m, k, n: ((m, k), (k, n))),
    "transposed_b": ("a: f32[M, K], b: f32[N, K]", "f32[M, N]", lambda m, k, n: ((m, k), (n, k))),
    "transposed_b_batched": ("a: f32[2, M, K], b: f32[2, N, K]", "f32[2, M, N]", lambda m, k, n: ((2, m, k), (2, n, k))),
    "transposed_b_epilogue": ("a: f32[M, K], b: f32[N, K]", "f32[M, N]", lambda m, k, n: ((m, k), (n, k))),
}
# The expression each GEMM model returns (the epilogue one fuses into the GEMM's kernel).
GEMM_EXPRESSIONS = {"epilogue": ("relu(a @ b) * 2.0 - 1.0", lambda a, b: np.maximum(a @ b, 0) * 2 - 1),
                    "transposed_b": ("a @ transpose(b)", lambda a, b: a @ b.T),
                    "transposed_b_batched": ("a @ transpose(b, [0, 2, 1])", lambda a, b: a @ b.transpose(0, 2, 1)),
                    "transposed_b_epilogue": ("tanh(a @ transpose(b)) + 1.0", lambda a, b: np.tanh(a @ b.T) + 1)}


def make_gemm_test(name, args, result, shapes):
    def test(self):
        rng = np.random.default_rng(7)
        with tempfile.TemporaryDirectory() as d:
            expr, ref = GEMM_EXPRESSIONS.get(name, ("a @ b", np.matmul))
            model = write_model(d, f"gemm_{name}", "dim M in 0..65536; dim K in 0..65536; dim N in 0..65536;", args, result, expr)
            for m, k, n in GEMM_SHAPES:
                dtype = np.float16 if name == "f16" else np.float32
                sa, sb = shapes(m, k, n)
                a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
                outs, p = self.dnnc.run(model, None, {"a": a, "b": b})
                self.assertEqual(p.returncode, 0, p.stderr)
                want = ref(a.astype(np.float64), b.astype(np.float64))
                tol = 2e-3 * math.sqrt(k) if name == "f16" else 1e-4
                assert_matches(outs[0].astype(np.float64), want, tol, tol, f"M={m}, K={k}, N={n}")
    return test


# Matrix products by a param (a constant weight): f32 ones whose column count is a multiple
# of 32 read it prepacked in the CPU GEMM's panels (ir/transforms/Prepack.h), transposed
# params included; (70, 40) stays unpacked. --repeat runs the model again on the panels
# kept from the first call, whose output is the one written.
PARAM_GEMM_SHAPES = [(1, 32), (300, 64), (513, 288), (70, 40)]  # (K, N)
PARAM_GEMM_ROWS = [0, 1, 3, 5, 17, 130]
PARAM_GEMM_MODELS = {
    "plain": ("w: f32[K, N]", "x: f32[M, K]", "f32[M, N]", "x @ w", lambda x, w: x @ w),
    "transposed": ("w: f32[N, K]", "x: f32[M, K]", "f32[M, N]", "x @ transpose(w)", lambda x, w: x @ w.T),
    "batched": ("w: f32[K, N]", "x: f32[2, M, K]", "f32[2, M, N]", "x @ w", lambda x, w: x @ w),
    "epilogue": ("w: f32[K, N]", "x: f32[M, K]", "f32[M, N]", "relu(x @ w) * 2.0 - 1.0", lambda x, w: np.maximum(x @ w, 0) * 2 - 1),
}


def make_param_gemm_test(name, param, arg, result, expr, ref):
    def test(self):
        rng = np.random.default_rng(5)
        with tempfile.TemporaryDirectory() as d:
            for k, n in PARAM_GEMM_SHAPES:
                header = f"const K = {k}; const N = {n};\ndim M in 0..65536;\nparam {param};"
                model = write_model(d, f"param_gemm_{name}_{k}_{n}", header, arg, result, expr)
                wshape = (n, k) if name == "transposed" else (k, n)
                w = rng.standard_normal(wshape).astype(np.float32)
                for m in PARAM_GEMM_ROWS:
                    x = rng.standard_normal((2, m, k) if name == "batched" else (m, k)).astype(np.float32)
                    outs, p = self.dnnc.run(model, {"w": w}, {"x": x}, extra=("--repeat", "1"))
                    self.assertEqual(p.returncode, 0, p.stderr)
                    assert_matches(outs[0].astype(np.float64), ref(x.astype(np.float64), w.astype(np.float64)), 1e-4, 1e-4,
                                   f"M={m}, K={k}, N={n}")
    return test


# Convolutions and pools with strides, padding, dilation and groups, at odd image sizes
# (the CPU schedule splits each output row by padding): (C, O, K, stride, padding,
# dilation, groups) with images (N, H, W).
CONVS = [(1, 1, 1, 1, 0, 1, 1), (3, 4, 3, 1, 1, 1, 1), (4, 6, 3, 2, 1, 1, 2), (2, 3, 3, 1, 2, 2, 1),
         (3, 2, 1, 2, 0, 1, 1), (8, 16, 5, 1, 2, 1, 1), (3, 5, 3, 3, 4, 1, 1)]
IMAGES = [(1, 9, 9), (2, 7, 13), (1, 16, 11)]
# Convolutions the CPU runs as an implicit GEMM (lower::conv2dGemm: at least 8 output
# channels per group): the convnet's two layers, 1x1 and 5x5 kernels, odd channel counts
# that leave row tails under the micro-kernel's 14 rows (9 = 8 + 1, 11 = 8 + 2 + 1) and past
# a 64-row task (70 = 4 x 14 + 8, then 4 + 2), groups,
# dilation, stride 3, padding wider than the kernel's reach (taps wholly outside); a 5x5
# kernel without padding (a vector of the padded band ends in the next row's dropped
# positions), 30 input channels (depth 270: two depth blocks, no band), 28 (a stride-1
# band in chunks), strides 3 and 4 with kernels wider than the stride (a gathered band
# with a halo) and a 1x1 kernel at stride 2 (phases no tap reads).
GEMM_CONVS = [(3, 16, 3, 1, 1, 1, 1), (16, 32, 3, 2, 1, 1, 1), (5, 9, 1, 1, 0, 1, 1), (6, 24, 5, 1, 2, 1, 2),
              (4, 70, 3, 1, 1, 2, 1), (7, 11, 3, 3, 4, 1, 1), (2, 8, 5, 2, 2, 1, 1), (3, 8, 5, 1, 0, 1, 1),
              (30, 8, 3, 1, 1, 1, 1), (28, 8, 3, 1, 1, 1, 1), (3, 8, 5, 3, 2, 1, 1), (2, 8, 7, 4, 3, 1, 1),
              (4, 8, 1, 2, 0, 1, 1)]
# Their images: an empty batch; 1x1; positions that end a 16-lane vector (16 wide: each
# vector one output row) and cross one (35 wide: rows split across vectors; both read the
# padded band at stride 1, and pack windows where the band is narrower than a vector);
# 17x19 = 323 positions and 23x29 = 667, past one 512-position task; 40x100, whose tasks'
# bands of input rows are copied a few output rows at a time (the strided layer); 4x250,
# where 28 channels' band at stride 1 is copied one output row at a time; rows 1100 wide,
# whose band is too large for 16 channels (the windows path).
GEMM_IMAGES = [(0, 5, 5), (1, 1, 1), (1, 16, 16), (2, 5, 35), (1, 17, 19), (1, 23, 29), (1, 40, 100), (1, 4, 250),
               (1, 2, 1100)]


def pool_ref(x, k, kind):
    n, c, h, w = x.shape
    v = x[:, :, :h // k * k, :w // k * k].reshape(n, c, h // k, k, w // k, k)
    return v.max(axis=(3, 5)) if kind == "max" else v.mean(axis=(3, 5))


class Windows(unittest.TestCase):
    dnnc: Dnnc

    def run_model(self, d, name, text, inputs):
        model = os.path.join(d, f"{name}.dnn")
        with open(model, "w") as f:
            f.write(text)
        outs, p = self.dnnc.run(model, None, inputs)
        self.assertEqual(p.returncode, 0, p.stderr)
        return outs[0]

    def test_conv2d(self):
        self.check_convs(CONVS, IMAGES, np.random.default_rng(11))

    def test_conv2d_gemm(self):
        self.check_convs(GEMM_CONVS, GEMM_IMAGES, np.random.default_rng(13))

    def test_conv2d_gemm_epilogues(self):
        # Elementwise ops after an implicit-GEMM conv join its kernel as an epilogue, which
        # the padded band applies to the sums in registers where it can: a channel's scale
        # and shift (one element per lane), a residual and a per-column tensor (contiguous
        # lanes), a per-row tensor (gathered per output row), division and minimum; and
        # otherwise (exp under sigmoid) as a pass over the stored output. Images: band,
        # windows (35 wide at stride 2, 1100 wide), chunks (40x100), empty, NaN and inf.
        rng = np.random.default_rng(14)
        epilogues = [("relu(y * reshape(g, [O, 1, 1]) + reshape(b, [O, 1, 1]))",
                      lambda y, a: np.maximum(y * a["g"][:, None, None] + a["b"][:, None, None], 0)),
                     ("relu(y + r) * 0.5", lambda y, a: np.maximum(y + a["r"], 0) * 0.5),
                     ("minimum(y * col, reshape(row, [P, 1])) - 1.0", lambda y, a: np.minimum(y * a["col"], a["row"][:, None]) - 1),
                     ("abs(y) / (y * y + 1.0)", lambda y, a: np.abs(y) / (y * y + 1)),
                     ("sigmoid(y) + reshape(b, [O, 1, 1])", lambda y, a: 1 / (1 + np.exp(-y)) + a["b"][:, None, None])]
        with tempfile.TemporaryDirectory() as d:
            # (C, O, K, stride, padding) and which epilogues: the convnet's first layer all of
            # them; its strided layer and a 5x5 kernel without padding (a band with a halo)
            # the residual and the per-row and per-column tensors.
            for c, o, k, s, p, which in [(3, 16, 3, 1, 1, range(5)), (16, 32, 3, 2, 1, (1, 2)), (5, 9, 5, 1, 0, (2,))]:
                size = lambda v: f"({v} + {2 * p - k}) / {s} + 1"
                for expr, ref in (epilogues[e] for e in which):
                    text = (f"dim N in 0..64; dim H; dim W;\n"
                            f"model main(x: f32[N, {c}, H, W], w: f32[O, {c}, {k}, {k}], g: f32[O], b: f32[O], "
                            f"r: f32[N, O, P, Q], col: f32[Q], row: f32[P]) -> f32[N, O, P, Q] {{\n"
                            f"  let y = conv2d(x, w, stride = {s}, padding = {p});\n  return {expr};\n}}\n")
                    text = text.replace("O", str(o)).replace("P", size("H")).replace("Q", size("W"))
                    for n, h, wd in [(1, 16, 16), (2, 5, 35), (1, 40, 100), (1, 3, 1100), (0, 5, 5), (1, 9, 21)]:
                        if min(h, wd) + 2 * p < k:
                            continue
                        ph, pw = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
                        x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
                        if (h, wd) == (9, 21):
                            x[0, 0, 2, 3], x[0, c - 1, 6, 17] = np.nan, np.inf
                        a = {"w": rng.standard_normal((o, c, k, k)), "g": rng.standard_normal(o), "b": rng.standard_normal(o),
                             "r": rng.standard_normal((n, o, ph, pw)), "col": rng.standard_normal(pw), "row": rng.standard_normal(ph)}
                        a = {name: v.astype(np.float32) for name, v in a.items()}
                        got = self.run_model(d, "conv_epilogue", text, {"x": x, **a})
                        with np.errstate(invalid="ignore", over="ignore"):
                            want = ref(conv2d_ref(x.astype(np.float64), a["w"], s, p, 1, 1), {n: v.astype(np.float64) for n, v in a.items()})
                        assert_matches(got.astype(np.float64), want, 1e-4, 1e-4, f"{expr} after conv C={c} O={o} K={k} s={s} p={p} on {n}x{h}x{wd}")

    def check_convs(self, convs, images, rng):
        with tempfile.TemporaryDirectory() as d:
            for c, o, k, s, p, dl, g in convs:
                size = lambda v: f"({v} + {2 * p - dl * (k - 1) - 1}) / {s} + 1"
                text = (f"dim N in 0..64; dim H; dim W;\nmodel main(x: f32[N, {c}, H, W], w: f32[{o}, {c // g}, {k}, {k}]) -> "
                        f"f32[N, {o}, {size('H')}, {size('W')}] {{\n"
                        f"  return conv2d(x, w, stride = {s}, padding = {p}, dilation = {dl}, groups = {g});\n}}\n")
                for n, h, wd in images:
                    if h + 2 * p < dl * (k - 1) + 1 or wd + 2 * p < dl * (k - 1) + 1:
                        continue
                    x, w = rng.standard_normal((n, c, h, wd)).astype(np.float32), rng.standard_normal((o, c // g, k, k)).astype(np.float32)
                    got = self.run_model(d, "conv", text, {"x": x, "w": w})
                    assert_matches(got.astype(np.float64), conv2d_ref(x.astype(np.float64), w, s, p, dl, g), 1e-4, 1e-4,
                                   f"conv C={c} O={o} K={k} s={s} p={p} d={dl} g={g} on {n}x{h}x{wd}")

    def test_conv2d_kernel_size_from_a_dim(self):
        # The kernel's size may be a dim of the weight's type: it runs as the window loop
        # (the vectorized and GEMM schedules unroll constant taps; they read a garbage size
        # and grew memory without bound).
        rng = np.random.default_rng(15)
        # relu after it and 8 output channels: the fusion pass once joined it to the conv as an
        # implicit GEMM's epilogue.
        text = ("dim N; dim H; dim W;\nmodel main(x: f32[N, 2, H, W], w: f32[8, 2, KH, KW]) -> f32[N, 8, P, Q] {\n"
                "  return relu(conv2d(x, w, padding = 1, stride = 2));\n}\n")
        with tempfile.TemporaryDirectory() as d:
            for (n, h, wd), (kh, kw) in [((1, 5, 7), (2, 2)), ((2, 6, 4), (3, 1)), ((1, 4, 4), (1, 4))]:
                x, w = rng.standard_normal((n, 2, h, wd)).astype(np.float32), rng.standard_normal((8, 2, kh, kw)).astype(np.float32)
                got = self.run_model(d, "conv_dims", text, {"x": x, "w": w})
                assert_matches(got.astype(np.float64), np.maximum(conv2d_ref(x.astype(np.float64), w, 2, 1, 1, 1), 0), 1e-4, 1e-4,
                               f"conv with a {kh}x{kw} kernel from dims on {n}x{h}x{wd}")

    def test_pools(self):
        rng = np.random.default_rng(12)
        with tempfile.TemporaryDirectory() as d:
            for kind in ("max", "avg"):
                for k in (1, 2, 3):
                    text = (f"dim N; dim H; dim W;\nmodel main(x: f32[N, 3, H, W]) -> f32[N, 3, H / {k}, W / {k}] {{\n"
                            f"  return {kind}_pool2d(x, {k});\n}}\n")
                    for n, h, wd in IMAGES:
                        x = rng.standard_normal((n, 3, h, wd)).astype(np.float32)
                        got = self.run_model(d, "pool", text, {"x": x})
                        assert_matches(got.astype(np.float64), pool_ref(x.astype(np.float64), k, kind), 1e-5, 1e-6,
                                       f"{kind}_pool2d k={k} on {n}x{h}x{wd}")


    def test_loop_shrinks_to_empty(self):
        # A loop-carried dim may fall to 0: its type once assumed the entry size's lower
        # bound (N >= 1), and a slice of the emptied value was an internal error.
        text = "dim N;\nmodel main(x: f32[N]) -> f32[M] {\n  var y = x;\n  for i in 0..6 {\n    y = y[1:] * 2.0;\n  }\n  return y;\n}\n"
        with tempfile.TemporaryDirectory() as d:
            for n in (1, 4, 6, 9):
                x = np.arange(n, dtype=np.float32)
                got = self.run_model(d, "shrink", text, {"x": x})
                assert_matches(got, x[6:] * 64, 0, 0, f"N={n}")


    def test_dim_range_from_zero(self):
        # `dim E in 0..8` allows E = 0 (the declared range once narrowed the default 1..inf).
        text = "dim E in 0..8;\nmodel main(x: f32[E, 2]) -> f32[E] {\n  return sum(x, axis = 1) + 1.0;\n}\n"
        with tempfile.TemporaryDirectory() as d:
            for e in (0, 1, 8):
                x = np.ones((e, 2), np.float32)
                assert_matches(self.run_model(d, "from_zero", text, {"x": x}), x.sum(1) + 1, 0, 0, f"E={e}")


# Reductions along rows of widths around a GPU warp (32 lanes split each row and combine
# partials with shuffles): 1, primes on either side of 32 and 64, and long rows. x holds
# few distinct values, so argmax/argmin meet ties and must keep the first index.
REDUCTION_SHAPES = [(1, 1), (3, 31), (2, 33), (4, 65), (1, 1000), (37, 7)]  # (R, L)
REDUCTIONS = {
    "sum": ("sum(x, axis = 1)", "f32[R]", lambda x, i: x.sum(1)),
    "mean_leading": ("mean(x, axis = 0)", "f32[L]", lambda x, i: x.mean(0)),
    "max": ("max(x, axis = 1)", "f32[R]", lambda x, i: x.max(1)),
    "min_all": ("min(x)", "f32[]", lambda x, i: x.min()),
    "prod": ("prod(x * 0.01 + 1.0, axis = 1)", "f32[R]", lambda x, i: (x * 0.01 + 1).prod(1)),
    "argmax": ("argmax(x, axis = 1)", "i64[R]", lambda x, i: x.argmax(1)),
    "argmin_leading": ("argmin(x, axis = 0)", "i64[L]", lambda x, i: x.argmin(0)),
    "int_max": ("max(i, axis = 1)", "i32[R]", lambda x, i: i.max(1)),
    "int_argmax": ("argmax(i, axis = 1)", "i64[R]", lambda x, i: i.argmax(1)),
    "int_min": ("min(i, axis = 1)", "i32[R]", lambda x, i: i.min(1)),
    "int_argmin_leading": ("argmin(i, axis = 0)", "i64[L]", lambda x, i: i.argmin(0)),
    "logsumexp": ("logsumexp(x, axis = 1)", "f32[R]", lambda x, i: np.log(np.exp(x).sum(1))),
    "softmax": ("softmax(x)", "f32[R, L]", lambda x, i: sm(x)),
    "log_softmax_leading": ("log_softmax(x, axis = 0)", "f32[R, L]", lambda x, i: np.log(sm(x, 0))),
    "layer_norm": ("nn.layer_norm(x, ones([L]), zeros([L]))", "f32[R, L]",
                   lambda x, i: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)),
}


def make_reduction_test(name, expr, result, ref):
    def test(self):
        rng = np.random.default_rng(11)
        with tempfile.TemporaryDirectory() as d:
            model = write_model(d, f"reduce_{name}", "import nn;\ndim R; dim L;", "x: f32[R, L], i: i32[R, L]", result, expr)
            for r, l in REDUCTION_SHAPES:
                x = (np.round(rng.standard_normal((r, l)) * 2) / 2).astype(np.float32)
                i = rng.integers(-5, 5, (r, l)).astype(np.int32)
                outs, p = self.dnnc.run(model, None, {"x": x, "i": i})
                self.assertEqual(p.returncode, 0, p.stderr)
                want = np.asarray(ref(x.astype(np.float64), i))
                self.assertEqual(outs[0].shape, want.shape, f"R={r}, L={l}")
                assert_matches(outs[0], want, 1e-5, 1e-5, f"R={r}, L={l}")
    return test


# Row kernels (softmax, log-softmax, layer norm, the row reductions) at row lengths around
# the CPU's vector widths (8 and 16 lanes, several vectors of partial sums), a row past the
# 4096-term sum block, empty rows, and rows holding NaN, inf and -inf (a row of all -inf
# included), against NumPy. Values are multiples of 1/2, so the f32 sums of the finite rows
# are exact in any order (the CPU adds a reduction's terms in vector lanes).
ROW_LENGTHS = [0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 47, 4097, 5000]
ROWS = {
    "softmax": ("softmax(x)", lambda x: sm(x)),
    # x - logsumexp(x): a row whose max is +inf is x - inf (scipy.special.log_softmax)
    "log_softmax": ("log_softmax(x)", lambda x: x - np.where(np.isposinf(mx := x.max(-1, keepdims=True)), mx,
                                                            mx + np.log(np.exp(x - mx).sum(-1, keepdims=True)))),
    "layer_norm": ("nn.layer_norm(x, g, b)", lambda x, g, b: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * g + b),
    "sum": ("sum(x, axis = -1, keepdims = true)", lambda x: x.sum(-1, keepdims=True)),
    "mean": ("mean(x, axis = -1, keepdims = true)", lambda x: x.mean(-1, keepdims=True)),
    "max": ("max(x, axis = -1, keepdims = true)", lambda x: x.max(-1, keepdims=True)),
}


# Reductions over leading axes, kept axes after them (the CPU streams rows over chunks of
# 256 elements of the innermost kept axis, or over groups of whole rows of at most 128
# elements: Lowering::columnReduction). Shapes around the chunk (256), the groups' width
# limit (128), the 4096-row sum block (4097, 8193: a second and third block), empty
# reductions and empty outputs; x holds multiples of 1/2 (sums exact in any order) and,
# from 2 rows and 4 elements on, a NaN, +inf and -inf.
COLUMN_SHAPES = [(1, 1), (5, 3), (0, 7), (7, 0), (4097, 1), (8193, 4), (300, 128), (300, 129), (4097, 257), (3, 600),
                 (2, 256), (64, 97)]  # (R, L)
COLUMNS = {  # name: (args, result, expression, NumPy reference, shape of x from (R, L))
    "sum_leading": ("x: f32[R, L]", "f32[L]", "sum(x, axis = 0)", lambda x: x.sum(0), lambda r, l: (r, l)),
    "mean_batch_time": ("x: f32[K, R, L]", "f32[L]", "mean(x, axis = [0, 1])", lambda x: x.mean((0, 1)), lambda r, l: (2, r, l)),
    "sum_middle": ("x: f32[K, R, L]", "f32[K, L]", "sum(x, axis = 1)", lambda x: x.sum(1), lambda r, l: (3, r, l)),
    "max_middle": ("x: f32[K, R, L]", "f32[K, L]", "max(x, axis = 1)", lambda x: x.max(1), lambda r, l: (3, r, l)),
    "min_keepdims": ("x: f32[R, L]", "f32[1, L]", "min(x, axis = 0, keepdims = true)", lambda x: x.min(0, keepdims=True),
                     lambda r, l: (r, l)),
    "sum_two_kept": ("x: f32[R, K, L]", "f32[K, L]", "sum(x, axis = 0)", lambda x: x.sum(0), lambda r, l: (r, 2, l)),
    "sum_constant_width": ("x: f32[R, 4]", "f32[4]", "sum(x, axis = 0)", lambda x: x.sum(0), lambda r, l: (r, 4)),
    "max_constant_width": ("x: f32[R, 3, 5]", "f32[3, 5]", "max(x, axis = 0)", lambda x: x.max(0), lambda r, l: (r, 3, 5)),
    "mean_constant_width": ("x: f32[K, R, 130]", "f32[K, 130]", "mean(x, axis = 1)", lambda x: x.mean(1), lambda r, l: (2, r, 130)),
    "fused_sum_squares": ("x: f32[R, L]", "f32[L]", "sum(x * x - 1.0, axis = 0)", lambda x: (x * x - 1).sum(0), lambda r, l: (r, l)),
}


# Reductions over trailing axes, which the kernels loop over as one axis of their product
# (Lowering::flattenTrailing; a reshape's index folds back to the flat one, sym::add):
# images of x f32[2, 3, R, L] empty, 1x1, odd, one vector (4x4) and a row past it (3x17),
# and past the 4096-term sum block (65x65); NaN and infinities as above.
TRAILING_SHAPES = [(0, 5), (5, 0), (1, 1), (3, 5), (4, 4), (3, 17), (65, 65)]  # (R, L)
TRAILING = {
    "mean_image": ("x: f32[2, 3, R, L]", "f32[2, 3]", "mean(x, axis = [2, 3])", lambda x: x.mean((2, 3))),
    "max_image": ("x: f32[2, 3, R, L]", "f32[2, 3]", "max(x, axis = [2, 3])", lambda x: x.max((2, 3))),
    "sum_keepdims": ("x: f32[2, 3, R, L]", "f32[2, 1, 1, 1]", "sum(x, axis = [1, 2, 3], keepdims = true)",
                     lambda x: x.sum((1, 2, 3), keepdims=True)),
    "sum_outer_and_image": ("x: f32[2, 3, R, L]", "f32[3]", "sum(x, axis = [0, 2, 3])", lambda x: x.sum((0, 2, 3))),
    "logsumexp_image": ("x: f32[2, 3, R, L]", "f32[2, 3]", "logsumexp(x, axis = [2, 3])",  # an infinite max is the result
                        lambda x: np.where(np.isinf(x.max((2, 3))), x.max((2, 3)),
                                           np.log(np.exp(x - x.max((2, 3), keepdims=True)).sum((2, 3))) + x.max((2, 3)))),
    "mean_reshaped": ("x: f32[2, 3, R, L]", "f32[2, 3]", "mean(relu(reshape(x, [2, 3, R * L])) * 2.0, axis = 2)",
                      lambda x: (np.maximum(x, 0) * 2).reshape(2, 3, -1).mean(2)),
}


def make_column_test(name, args, result, expr, ref, shape, shapes=COLUMN_SHAPES, empty=lambda r, l: r == 0):
    def test(self):
        rng = np.random.default_rng(17)
        with tempfile.TemporaryDirectory() as d:
            model = write_model(d, f"columns_{name}", "dim K in 0..65536; dim R in 0..65536; dim L in 0..65536;", args, result, expr)
            done = set()
            for r, l in shapes:
                sx = shape(r, l)
                if sx in done or (empty(r, l) and ("max" in name or "min" in name or "logsumexp" in name)):
                    continue  # the max of nothing is no number (NumPy raises)
                done.add(sx)
                x = (np.round(rng.standard_normal(sx) * 2) / 2).astype(np.float32)
                if r >= 2 and x.size >= 4:
                    x.reshape(-1)[[x.size // 3, x.size - 1, x.size // 2]] = [np.nan, np.inf, -np.inf]
                outs, p = self.dnnc.run(model, None, {"x": x})
                self.assertEqual(p.returncode, 0, p.stderr)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # inf - inf, 0 / 0
                    want = np.asarray(ref(x.astype(np.float64)))
                self.assertEqual(outs[0].shape, want.shape, f"x {sx}")
                assert_matches(outs[0], want, 1e-6 if "mean" in name or "logsumexp" in name else 0, 0, f"x {sx}")
    return test


def test_column_signed_zeros(self):
    # Equal values keep the first, as the scan of reduction() and the reference interpreter
    # do: max and min of -0 and +0 are whichever comes first down the column (the CPU's
    # passes of four rows, and its row groups within one pass, compare in that order).
    with tempfile.TemporaryDirectory() as d:
        for kind in ("max", "min"):
            model = write_model(d, f"zeros_{kind}", "dim R; dim L;", "x: f32[R, L]", "f32[L]", f"{kind}(x, axis = 0)")
            for length in (2, 300):
                x = np.zeros((5, length), np.float32)
                x[:, 0::2] = [[-0.0], [0.0], [-0.0], [0.0], [0.0]]
                x[:, 1::2] = [[0.0], [-0.0], [-0.0], [0.0], [-0.0]]
                x[3, -1] = np.nan  # and the first NaN stays
                outs, p = self.dnnc.run(model, None, {"x": x})
                self.assertEqual(p.returncode, 0, p.stderr)
                want = np.where(np.arange(length) % 2 == 0, -0.0, 0.0).astype(np.float32)
                want[-1] = np.nan
                np.testing.assert_array_equal(np.signbit(outs[0][:-1]), np.signbit(want[:-1]), f"{kind}, L={length}")
                self.assertTrue(np.isnan(outs[0][-1]), f"{kind}, L={length}")
        # A constant width of at most half a vector: the CPU's row groups (lane group g
        # holds rows g, g + G, ...), where the first in group order need not be the first
        # down the column. Random -0, +0 and -1 (+1 for min) in 300 rows, with a NaN column.
        rng = np.random.default_rng(11)
        for width in (3, 4):
            for kind, other in (("max", -1.0), ("min", 1.0)):
                model = write_model(d, f"zeros_{kind}_{width}", "dim R;", f"x: f32[R, {width}]", f"f32[{width}]",
                                    f"{kind}(x, axis = 0)")
                x = rng.choice(np.array([-0.0, 0.0, other], np.float32), size=(300, width))
                x[20, 0] = np.nan
                outs, p = self.dnnc.run(model, None, {"x": x})
                self.assertEqual(p.returncode, 0, p.stderr)
                best = x.max(axis=0) if kind == "max" else x.min(axis=0)  # NaN-free columns: the value
                first = np.array([x[np.flatnonzero(x[:, n] == best[n])[0], n] for n in range(1, width)])
                self.assertTrue(np.isnan(outs[0][0]), f"{kind}, width {width}")
                np.testing.assert_array_equal(outs[0][1:], first, f"{kind}, width {width}")
                np.testing.assert_array_equal(np.signbit(outs[0][1:]), np.signbit(first), f"{kind}, width {width}\n{x}")


def test_binary_signed_zeros(self):
    # Elementwise maximum and minimum keep the first operand when the two are equal (-0 and
    # +0), as the reductions above and the reference interpreter do, and propagate NaN; alone
    # and fused into a chain (the kernels' vector and scalar loops both: 37 elements).
    with tempfile.TemporaryDirectory() as d:
        model = write_model(d, "zeros_binary", "dim N;", "a: f32[N], b: f32[N]", "(f32[N], f32[N], f32[N], f32[N])",
                            "(maximum(a, b), minimum(a, b), maximum(a * 1.0, b) * 1.0, clip(a, b, b))")
        zeros = np.array([-0.0, 0.0, -0.0, 0.0, 1.0, np.nan, -1.0, np.nan], np.float32)
        a = np.resize(zeros, 37)
        b = np.resize(np.array([0.0, -0.0, -0.0, 0.0, np.nan, 1.0, -2.0, np.nan], np.float32), 37)
        outs, p = self.dnnc.run(model, None, {"a": a, "b": b})
        self.assertEqual(p.returncode, 0, p.stderr)
        nan = np.isnan(a) | np.isnan(b)
        want_max = np.where(nan, np.nan, np.where(b > a, b, a))
        want_min = np.where(nan, np.nan, np.where(b < a, b, a))
        want_clip = np.where(nan, np.nan, np.where(b < want_max, b, want_max))
        for i, want in enumerate((want_max, want_min, want_max, want_clip)):
            np.testing.assert_array_equal(np.isnan(outs[i]), np.isnan(want), f"output {i}")
            np.testing.assert_array_equal(outs[i][~nan], want[~nan], f"output {i}")
            np.testing.assert_array_equal(np.signbit(outs[i][~nan]), np.signbit(want[~nan]), f"output {i}")


def test_fills_sized_by_values(self):
    # A fill whose size is an i64[] value (arange(n), zeros([n])) binds its dim when it runs,
    # so a consumer fused with it would launch before the dim is known: fusion leaves it
    # out (an arange fused with its `* 2` stopped the CPU with an internal error).
    cases = {
        "arange_n": ("n: i64[]", "i64[R]", "arange(n) * 2", lambda n, a, b, s: np.arange(n) * 2),
        "arange_between": ("a: i64[], b: i64[]", "i64[R]", "arange(b, a) * 2", lambda n, a, b, s: np.arange(b, a) * 2),
        "arange_step": ("a: i64[], b: i64[], s: i64[]", "i64[R]", "arange(a, b, s) + 1", lambda n, a, b, s: np.arange(a, b, s) + 1),
        "arange_down": ("a: i64[], b: i64[], s: i64[]", "i64[R]", "arange(b, a, 0 - s) + 1", lambda n, a, b, s: np.arange(b, a, -s) + 1),
        "zeros_n": ("n: i64[]", "f32[R]", "zeros([n]) * 2.0 + 1.0", lambda n, a, b, s: np.zeros(n, np.float32) + 1),
    }
    with tempfile.TemporaryDirectory() as d:
        for name, (args, result, expr, ref) in cases.items():
            model = write_model(d, f"sized_{name}", "", args, result, expr)
            values = {"n": 5, "a": 2, "b": 13, "s": 3}
            inputs = {k: np.array(v, np.int64) for k, v in values.items() if f"{k}: i64[]" in args}
            outs, p = self.dnnc.run(model, None, inputs)
            self.assertEqual(p.returncode, 0, f"{name}: {p.stderr}")
            np.testing.assert_array_equal(outs[0], ref(**values), name)


def test_column_schedule(self):
    # The CPU's kernels stream rows through vector loops (a local array for a sum's blocks
    # or for row groups, which a width known only at run time may take); the GPU's keep a
    # lane per column.
    with tempfile.TemporaryDirectory() as d:
        for name, local in (("sum_leading", True), ("max_middle", True), ("sum_two_kept", True), ("max_constant_width", True),
                            ("min_keepdims", True)):
            args, result, expr, _, _ = COLUMNS[name]
            model = write_model(d, f"columns_{name}", "dim K; dim R; dim L;", args, result, expr)
            for target, local in (("cpu", local), ("cuda", False)):
                p = subprocess.run([self.dnnc.exe, "emit", model, "--emit=kernels", "--target", target], capture_output=True,
                                   text=True, timeout=600)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual("local b" in p.stdout, local, f"{name} on {target}:\n{p.stdout}")
                if target == "cpu":
                    self.assertRegex(p.stdout, r"vectorize \{\n\s+(let row0: f32 = b\d+\[|b\d+\[[^]]*\] = (add|select)\()", p.stdout)

# Normalizations whose whole row computation is one fused op (a row group, Fusion.h): the
# sums and means over the last axis with everything around them, x - mean read twice.
ROW_GROUPS = {
    "layer_norm": "nn.layer_norm(x, g, b)",
    "rms_norm": "nn.rms_norm(x, g)",
    "layer_norm_spelled_out": "(x - mean(x, -1, keepdims = true)) * rsqrt(mean((x - mean(x, -1, keepdims = true)) * "
                              "(x - mean(x, -1, keepdims = true)), -1, keepdims = true) + 1.0e-5)",
    "residual_layer_norm": "nn.layer_norm(x + x * g, g, b)",
}


def test_row_groups_fuse(self):
    oracle = Dnnc(self.dnnc.exe, self.dnnc.examples, "ref")
    with tempfile.TemporaryDirectory() as d:
        for name, expr in ROW_GROUPS.items():
            model = write_model(d, f"group_{name}", "import nn;\ndim R; dim L;", "x: f32[R, L], g: f32[L], b: f32[L]", "f32[R, L]", expr)
            p = subprocess.run([self.dnnc.exe, "emit", model, "--emit=opt"], capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            top = [line for line in p.stdout.splitlines() if line.startswith("  %")]  # the model's own ops, not the group's
            self.assertEqual(sum("= fused(" in line for line in top), 1, f"{name}:\n{p.stdout}")
            self.assertFalse(any("mean(" in line or "sum(" in line for line in top), f"{name}:\n{p.stdout}")
            rng = np.random.default_rng(3)
            x, g, b = rng.standard_normal((5, 33)).astype(np.float32), rng.standard_normal(33).astype(np.float32), rng.standard_normal(33).astype(np.float32)
            outs, p = self.dnnc.run(model, None, {"x": x, "g": g, "b": b})
            self.assertEqual(p.returncode, 0, p.stderr)
            ref, p = oracle.run(model, None, {"x": x, "g": g, "b": b})
            self.assertEqual(p.returncode, 0, p.stderr)
            assert_matches(outs[0], ref[0], 1e-5, 1e-5, name)


def make_row_test(name, expr, ref):
    def test(self):
        rng = np.random.default_rng(13)
        result = "f32[R, 1]" if "keepdims" in expr else "f32[R, L]"
        with tempfile.TemporaryDirectory() as d:
            norm = name == "layer_norm"
            model = write_model(d, f"rows_{name}", "import nn;\ndim R; dim L in 0..65536;",
                                "x: f32[R, L], g: f32[L], b: f32[L]" if norm else "x: f32[R, L]", result, expr)
            for length in ROW_LENGTHS:
                if length == 0 and name == "max":
                    continue  # the max of nothing is no number (NumPy raises)
                x = (np.round(rng.standard_normal((7, length)) * 2) / 2).astype(np.float32)
                if length >= 2:  # rows 1-4: a NaN, +inf, -inf, all -inf; rows 0, 5, 6 finite
                    x[1, length // 2] = np.nan
                    x[2, length - 1] = np.inf
                    x[3, 0] = -np.inf
                    x[4, :] = -np.inf
                g, b = (rng.standard_normal(length).astype(np.float32) for _ in range(2))
                outs, p = self.dnnc.run(model, None, {"x": x, "g": g, "b": b} if norm else {"x": x})
                self.assertEqual(p.returncode, 0, p.stderr)
                args = (x.astype(np.float64), g.astype(np.float64), b.astype(np.float64)) if norm else (x.astype(np.float64),)
                with np.errstate(invalid="ignore", divide="ignore", over="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's mean of an empty row
                    # NumPy has no max of an empty row: a softmax of empty rows is empty
                    want = np.zeros((7, 0)) if length == 0 and "softmax" in name else np.asarray(ref(*args))
                self.assertEqual(outs[0].shape, want.shape, f"L={length}")
                assert_matches(outs[0], want, 1e-5, 1e-5, f"L={length}")
    return test


# Attention as the fuse-attention pass (ir/transforms/FuseAttention.h) finds it, one model per
# form: the stdlib's causal where with -1e9 (and its mirror spelling), no scale or mask, an
# additive mask with rows fully masked (all -1e9: a uniform average of v) and -inf entries,
# one that broadcasts over heads and queries (key padding); causal with a mask whose rows
# put every visible score at or near the fill (or at -inf), where the keys the causal
# where hides take weight too, and causal with a fill of 0 above most visible scores.
# q f32[B, H, T, D], k f32[B, H, S, D], v f32[B, H, S, E]. Every device runs the model as
# one attention op (the oracle's, the CPU kernel's: tasks of 4 blocks of 16 query rows, key
# tiles of 64, so T = 67 and 130 cross tiles and tasks, q's depth 128 at a time (D = 129, 257: two, three
# chunks), 64 of E per register block (E = 70, 129: masked tails); the GPU's: 16 query
# rows per block, key tiles of 32). The NumPy twin rounds
# the scores to f32 where the ops store them (-1e9 + s is -1e9 in f32).
# Tolerance: rtol = atol = 2e-5.
ATTENTION_SHAPES = [(1, 1, 1, 1, 1, 1, 1), (2, 3, 7, 7, 5, 5, 3), (1, 2, 67, 67, 16, 16, 9), (2, 1, 130, 130, 64, 64, 64),
                    (1, 2, 0, 0, 4, 4, 4), (1, 1, 5, 9, 3, 3, 2), (1, 2, 1, 6, 4, 4, 3),
                    (1, 2, 21, 21, 257, 257, 70), (1, 1, 37, 45, 129, 129, 129)]  # (B, H, T, S, D, D, E)
ATTENTION_HEADER = "dim B; dim H; dim T in 0..4096; dim S in 0..4096; dim D; dim E;"
CAUSAL = "unsqueeze(arange(T), 0) <= unsqueeze(arange(T), 1)"
QKV = "q: f32[B, H, T, D], k: f32[B, H, S, D], v: f32[B, H, S, E]"
CAUSAL_QKV = "q: f32[B, H, T, D], k: f32[B, H, T, D], v: f32[B, H, T, E]"
ATTENTION_MODELS = {  # name: (args, expression, scale, causal fill or None, mask shape (of B, H, T, S) or None)
    "causal": (CAUSAL_QKV, f"softmax(where({CAUSAL}, q @ transpose(k) * 0.125, -1e9), axis = -1) @ v", 0.125, -1e9, None),
    "causal_mirror": (CAUSAL_QKV,
                      "softmax(where(unsqueeze(arange(T), 1) >= unsqueeze(arange(T), 0), 0.5 * (q @ transpose(k)), -1e9)) @ v",
                      0.5, -1e9, None),
    "plain": (QKV, "softmax(q @ transpose(k), axis = -1) @ v", 1.0, None, None),
    "masked": (QKV + ", mask: f32[T, S]", "softmax(q @ transpose(k) * 0.25 + mask, axis = -1) @ v", 0.25, None,
               lambda b, h, t, s: (t, s)),
    "key_padding": (QKV + ", mask: f32[B, 1, 1, S]", "softmax(mask + q @ transpose(k), axis = -1) @ v", 1.0, None,
                    lambda b, h, t, s: (b, 1, 1, s)),
    "causal_masked": (CAUSAL_QKV + ", mask: f32[T, T]",
                      f"softmax(where({CAUSAL}, q @ transpose(k) * 0.125 + mask, -1e9), axis = -1) @ v", 0.125, -1e9,
                      lambda b, h, t, s: (t, s)),
    "causal_fill0": (CAUSAL_QKV + ", mask: f32[T, T]", f"softmax(where({CAUSAL}, q @ transpose(k) + mask, 0.0), axis = -1) @ v",
                     1.0, 0.0, lambda b, h, t, s: (t, s)),
}


def attention_mask(name, rng, shape):
    """The mask of form `name`: N(0, 2) scores with the rows and keys each form tests."""
    mask = (rng.standard_normal(shape) * 2).astype(np.float32)
    if name == "masked":
        mask[::3] = -1e9  # rows with every key masked
        if shape[0] > 1:
            mask[1] = -1e9
        mask[:, 1::4] = -np.inf  # never a whole row: key 0 stays
    elif name == "key_padding":
        mask[..., ::2] = -1e9
    elif name == "causal_masked":
        t = shape[0]
        visible = np.arange(t)[None, :] <= np.arange(t)[:, None]
        for i in range(1, t):
            if i % 4 == 1:  # every key -1e9: the visible scores round to the fill, a uniform average of all of v
                mask[i] = -1e9
            elif i % 4 == 2:  # the visible keys -inf: the hidden keys (the fill) take all the weight (the last row: NaN)
                mask[i, visible[i]] = -np.inf
            elif i % 4 == 3:  # the visible keys a float above the fill (64): the hidden keys' weight exp(-64) is not 0 in f32
                mask[i, visible[i]] = np.nextafter(np.float32(-1e9), np.float32(0))
    elif name == "causal_fill0":
        mask += np.array([0, -10, -300], np.float32)[np.arange(shape[0]) % 3, None]  # visible scores below the fill of 0
    return mask


def attention_ref(q, k, v, scale, fill, mask):
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)).astype(np.float32) * np.float32(scale)
    if mask is not None:
        s = s + mask
    if fill is not None:
        t = s.shape[-1]
        s = np.where(np.arange(t)[None, :] <= np.arange(t)[:, None], s, np.float32(fill))
    with np.errstate(invalid="ignore"):  # a row of -inf is NaN, as the ops give
        p = sm(s.astype(np.float64)) if s.shape[-1] else s.astype(np.float64)
    return p @ v.astype(np.float64)


class Attention(unittest.TestCase):
    dnnc: Dnnc

    def test_models_fuse(self):
        # Every form becomes one attention op (what every device runs), the scores gone.
        with tempfile.TemporaryDirectory() as d:
            for name, (args, expr, _, _, _) in ATTENTION_MODELS.items():
                model = write_model(d, f"attention_{name}", ATTENTION_HEADER, args, "f32[B, H, T, E]", expr)
                p = subprocess.run([self.dnnc.exe, "emit", model, "--emit=opt"], capture_output=True, text=True, timeout=600)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stdout.count("= attention("), 1, p.stdout)
                self.assertNotIn("softmax(", p.stdout)


def test_attention_hidden_not_finite(self):
    # inf and NaN among the values of keys a causal row does not see: their weight is 0
    # (fill -1e9) or not (fill 0), and 0 inf, 0 NaN are NaN in the unfused p v, so a row
    # is NaN or inf as NumPy gives, whether the key lies in the row's block of 16 query rows,
    # in a later block of the row's task or past the task.
    rng = np.random.default_rng(17)
    with tempfile.TemporaryDirectory() as d:
        for fill in (-1e9, 0.0):
            expr = f"softmax(where({CAUSAL}, q @ transpose(k) * 0.125, {fill}), axis = -1) @ v"
            model = write_model(d, f"attention_hidden_{abs(int(fill))}", ATTENTION_HEADER, CAUSAL_QKV, "f32[B, H, T, E]", expr)
            for t, planted in ((2, [(1, 0, np.inf)]), (17, [(16, 0, np.nan)]), (40, [(20, 1, np.inf), (33, 3, -np.inf), (35, 0, np.nan)]),
                               (100, [(50, 4, np.nan), (70, 2, np.inf)])):  # the CPU's tasks of 4 blocks, the last first
                q, k = (rng.standard_normal((1, 2, t, 8)).astype(np.float32) for _ in range(2))
                v = rng.standard_normal((1, 2, t, 5)).astype(np.float32)
                for key, col, value in planted:
                    v[0, 1, key, col] = value
                outs, p = self.dnnc.run(model, None, {"q": q, "k": k, "v": v})
                self.assertEqual(p.returncode, 0, p.stderr)
                with np.errstate(invalid="ignore"):
                    want = attention_ref(q, k, v, 0.125, fill, None)
                assert_matches(outs[0], want, 2e-5, 2e-5, f"fill {fill}, T={t}")


Attention.test_attention_hidden_not_finite = test_attention_hidden_not_finite


def make_attention_test(name, args, expr, scale, fill, mask_shape):
    def test(self):
        rng = np.random.default_rng(13)
        with tempfile.TemporaryDirectory() as d:
            model = write_model(d, f"attention_{name}", ATTENTION_HEADER, args, "f32[B, H, T, E]", expr)
            for b, h, t, s, dq, _, e in ATTENTION_SHAPES:
                if fill is not None:
                    s = t
                q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((b, h, t, dq), (b, h, s, dq), (b, h, s, e)))
                inputs = {"q": q, "k": k, "v": v}
                mask = None
                if mask_shape:
                    mask = attention_mask(name, rng, mask_shape(b, h, t, s))
                    inputs["mask"] = mask
                outs, p = self.dnnc.run(model, None, inputs)
                self.assertEqual(p.returncode, 0, p.stderr)
                want = attention_ref(q, k, v, scale, fill, mask)
                self.assertEqual(outs[0].shape, want.shape)
                assert_matches(outs[0], want, 2e-5, 2e-5, f"B={b}, H={h}, T={t}, S={s}, D={dq}, E={e}")
    return test


for _name, _model in ATTENTION_MODELS.items():
    setattr(Attention, f"test_attention_{_name}", make_attention_test(_name, *_model))


for _name, (_expr, _result, _ref) in REDUCTIONS.items():
    setattr(Ops, f"test_reduce_{_name}", make_reduction_test(_name, _expr, _result, _ref))

Ops.test_column_schedule = test_column_schedule
Ops.test_fills_sized_by_values = test_fills_sized_by_values
Ops.test_column_signed_zeros = test_column_signed_zeros
Ops.test_binary_signed_zeros = test_binary_signed_zeros
for _name, _model in COLUMNS.items():
    setattr(Ops, f"test_columns_{_name}", make_column_test(_name, *_model))
for _name, _model in TRAILING.items():
    setattr(Ops, f"test_trailing_{_name}",
            make_column_test(_name, *_model, lambda r, l: (2, 3, r, l), TRAILING_SHAPES, lambda r, l: r * l == 0))

Ops.test_row_groups_fuse = test_row_groups_fuse
for _name, (_expr, _ref) in ROWS.items():
    setattr(Ops, f"test_rows_{_name}", make_row_test(_name, _expr, _ref))

for _name, (_args, _result, _shapes) in GEMM_MODELS.items():
    setattr(Ops, f"test_gemm_{_name}", make_gemm_test(_name, _args, _result, _shapes))

for _name, _model in PARAM_GEMM_MODELS.items():
    setattr(Ops, f"test_param_gemm_{_name}", make_param_gemm_test(_name, *_model))

for _name, (_expr, _result, _ref) in OPS.items():
    setattr(Ops, f"test_{_name}", make_test(_name, _expr, _result, _ref))

if __name__ == "__main__":
    run_tests([Ops, Windows, Attention], verbosity=1)

#!/usr/bin/env python3
"""The CPU GEMM's shape-generic variants (runtime/GemmSelect.h), each forced in turn with
DNNC_GEMM_VARIANT, against the reference interpreter (--device ref): plain, batched,
transposed-B-with-epilogue and prepacked-param matmuls at M, N, K of 0 and 1, odd sizes
and one below, at and above every variant's task rows (16, 32, 64, 128) and columns (64,
128, 256, 512), the micro-kernel's rows (14 with AVX-512, then tiles of 8, 4, 2, 1, or tiles of 8 where
those take fewer cycles) and the
depth block (256). Each model is built once (dnnc build) and every
variant and shape runs that one artifact: a variant is picked at launch, not compiled.
The same at 8 and 4 lanes (DNNC_VECTOR_WIDTH), and every variant's result bit for bit
alike. Then `dnnc tune`'s table round trip: the table it writes is what --tune-table and
DNNC_TUNE_TABLE read, and the model's results do not depend on it."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from dnnc_test_util import Dnnc, assert_matches

VARIANTS = 6  # rt::gemmVariants().size(); an index past them is an error (tests/golden/cli/tune_errors.test)
# (M, K, N)
SHAPES = [(1, 1, 1), (0, 5, 7), (2, 0, 40), (7, 3, 5), (15, 257, 63), (17, 255, 65), (31, 33, 129), (33, 256, 127),
          (63, 70, 255), (65, 300, 257), (127, 129, 511), (129, 257, 513), (16, 64, 64), (5, 1, 1000), (100, 512, 33),
          (1, 512, 16), (3, 40, 300), (4, 9, 47),  # the last: small M read in place, column tails of every width
          (14, 40, 70), (41, 129, 97),  # one micro-kernel tile of 14 rows (AVX-512); 41 = 2 x 14 + 8 + 4 + 1
          (24, 129, 40), (53, 70, 33),  # tasks of 8-row tiles where those take fewer cycles (A in place): 3 x 8; 6 x 8 + 4 + 1
          # at most 16 columns: B read transposed takes the dot products (tiles of 4, 2 and 1
          # rows and columns, a depth of whole vectors and a masked tail, or none at all)
          (18, 33, 11), (5, 0, 6), (6, 15, 3), (9, 17, 2), (7, 64, 13)]
MODELS = {
    "plain": ("dim M in 0..4096; dim K in 0..4096; dim N in 0..4096;", "a: f32[M, K], b: f32[K, N]", "f32[M, N]", "a @ b",
              lambda m, k, n: {"a": (m, k), "b": (k, n)}),
    "batched": ("dim M in 0..4096; dim K in 0..4096; dim N in 0..4096;", "a: f32[3, M, K], b: f32[K, N]", "f32[3, M, N]",
                "a @ b", lambda m, k, n: {"a": (3, m, k), "b": (k, n)}),
    "transposed_epilogue": ("dim M in 0..4096; dim K in 0..4096; dim N in 0..4096;", "a: f32[M, K], b: f32[N, K]",
                            "f32[M, N]", "tanh(a @ transpose(b)) + 1.0", lambda m, k, n: {"a": (m, k), "b": (n, k)}),
}
# A param read from its prepacked panels: K x N fixed, M varies. N = 288 is 9 whole panels
# of 32 columns; N = 1000 and 45 end in a narrower panel (8 and 13 columns), the second
# read transposed (the transformer's output layer: x @ transpose(embedding)).
PARAM = ("const K = 300; const N = 288; dim M in 0..4096;\nparam w: f32[K, N];", "x: f32[M, K]", "f32[M, N]", "x @ w")
# A param of at most 16 columns is stored transposed and multiplied as dot products: the
# MLP's classifier (N = 10), N = 16 with a depth tail, N = 1, and a transposed one (N = 3).
PARAM_TAILS = [(("const K = 300; const N = 1000; dim M in 0..4096;\nparam w: f32[K, N];", "x: f32[M, K]", "f32[M, N]", "x @ w"),
                (300, 1000)),
               (("const K = 70; const N = 45; dim M in 0..4096;\nparam w: f32[N, K];", "x: f32[M, K]", "f32[M, N]",
                 "x @ transpose(w)"), (45, 70)),
               (("const K = 512; const N = 10; dim M in 0..4096;\nparam w: f32[K, N];", "x: f32[M, K]", "f32[M, N]", "x @ w"),
                (512, 10)),
               (("const K = 17; const N = 16; dim M in 0..4096;\nparam w: f32[K, N];", "x: f32[M, K]", "f32[M, N]", "x @ w"),
                (17, 16)),
               (("const K = 20; const N = 1; dim M in 0..4096;\nparam w: f32[K, N];", "x: f32[M, K]", "f32[M, N]", "x @ w"),
                (20, 1)),
               (("const K = 33; const N = 3; dim M in 0..4096;\nparam w: f32[N, K];", "x: f32[M, K]", "f32[M, N]",
                 "x @ transpose(w)"), (3, 33))]
PARAM_ROWS = [0, 1, 4, 5, 14, 15, 17, 33, 41, 65, 129]
# Slices of params of rank 3 and 4 (the transformer's per-layer weights), each packed in
# place in its param's packed copy: a static point, a loop's index (1000 columns: a last
# panel of 8), two points on a rank-4 param, and a narrow one's slices (stored transposed).
SLICED = """const L = 3; const K = 70; const N = 1000; dim M in 0..4096;
param w: f32[L, K, N];
param v: f32[2, L, K, 64];
param u: f32[L, K, 10];
model main(x: f32[M, K]) -> (f32[M, N], f32[M, 64], f32[M, 10]) {
  var y = x @ w[0];
  var z = x @ v[1, 2];
  var s = x @ u[2];
  for l in 1..L {
    y = y + x @ w[l];
    z = z + x @ v[0, l];
    s = s + x @ u[l - 1];
  }
  return (y, z, s);
}
"""


def write(d, name, header, args, result, expr):
    path = os.path.join(d, f"{name}.dnn")
    with open(path, "w") as f:
        f.write(f"{header}\nmodel main({args}) -> {result} {{\n  return {expr};\n}}\n")
    return path


class Variants(unittest.TestCase):
    exe: str
    examples: str

    def setUp(self):
        self.ref = Dnnc(self.exe, self.examples, "ref")
        self.cpu = Dnnc(self.exe, self.examples, "cpu", prebuilt=True)

    def run_variant(self, v, model, weights, inputs):
        os.environ["DNNC_GEMM_VARIANT"] = str(v)
        try:
            return self.cpu.run(model, weights, inputs, ("--threads", "2"))
        finally:
            del os.environ["DNNC_GEMM_VARIANT"]

    def each_variant(self, model, weights, inputs, where, outputs=1):
        want, p = self.ref.run(model, weights, inputs)
        self.assertEqual(p.returncode, 0, p.stderr)
        for v in range(VARIANTS):
            got, p = self.run_variant(v, model, weights, inputs)
            self.assertEqual(p.returncode, 0, f"{where}, variant {v}: {p.stderr}")
            self.assertEqual(len(got), outputs, f"{where}, variant {v}")
            for o in range(outputs):
                self.assertEqual(got[o].shape, want[o].shape, f"{where}, variant {v}, output {o}")
                assert_matches(got[o], want[o], 1e-4, 1e-4, f"{where}, variant {v}, output {o}")

    def test_matmuls(self):
        rng = np.random.default_rng(3)
        with tempfile.TemporaryDirectory() as d:
            for name, (header, args, result, expr, shapes) in MODELS.items():
                model = write(d, name, header, args, result, expr)
                for m, k, n in SHAPES:
                    inputs = {a: rng.standard_normal(s).astype(np.float32) for a, s in shapes(m, k, n).items()}
                    self.each_variant(model, None, inputs, f"{name} at M={m}, K={k}, N={n}")

    def test_nan_and_inf(self):
        # NaN, inf and -inf in A and in B (plain and prepacked) reach exactly the outputs
        # NumPy's product gives them in every variant: a row of A with an inf, a column of B
        # with a -inf (NaN where they meet), a NaN in each; tile-edge M, N and a K past one
        # depth block.
        rng = np.random.default_rng(6)
        with tempfile.TemporaryDirectory() as d:
            m, k, n = 29, 257, 513
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            a[3, 5], a[17, 256], b[7, 512], b[200, 31] = np.inf, np.nan, -np.inf, np.nan
            want = a.astype(np.float64) @ b.astype(np.float64)
            self.assertTrue(np.isnan(want).any() and np.isinf(want).any())
            plain = write(d, "plain", *MODELS["plain"][:4])
            got, p = self.cpu.run(plain, None, {"a": a, "b": b})
            self.assertEqual(p.returncode, 0, p.stderr)
            np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want))
            np.testing.assert_array_equal(np.isinf(got[0]) * np.sign(got[0]), np.isinf(want) * np.sign(want))
            self.each_variant(plain, None, {"a": a, "b": b}, "NaN and inf, plain")
            model = write(d, "tail0", *PARAM_TAILS[0][0])
            w = rng.standard_normal(PARAM_TAILS[0][1]).astype(np.float32)
            w[0, 999], w[299, 0] = -np.inf, np.nan
            x = rng.standard_normal((65, 300)).astype(np.float32)
            x[64, 299], x[13, 0] = np.nan, np.inf
            self.each_variant(model, {"w": w}, {"x": x}, "NaN and inf, prepacked param")
            # and a narrow param's dot products (NumPy's pattern, checked exactly)
            model = write(d, "tail2", *PARAM_TAILS[2][0])
            w = rng.standard_normal(PARAM_TAILS[2][1]).astype(np.float32)
            w[3, 9], w[511, 0] = -np.inf, np.nan
            x = rng.standard_normal((7, 512)).astype(np.float32)
            x[2, 3], x[6, 100] = np.inf, np.nan
            want = x.astype(np.float64) @ w.astype(np.float64)
            got, p = self.cpu.run(model, {"w": w}, {"x": x})
            self.assertEqual(p.returncode, 0, p.stderr)
            np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want))
            np.testing.assert_array_equal(np.isinf(got[0]) * np.sign(got[0]), np.isinf(want) * np.sign(want))
            self.each_variant(model, {"w": w}, {"x": x}, "NaN and inf, narrow prepacked param")

    def test_prepacked_param(self):
        rng = np.random.default_rng(4)
        with tempfile.TemporaryDirectory() as d:
            model = write(d, "param", *PARAM)
            w = {"w": rng.standard_normal((300, 288)).astype(np.float32)}
            for m in PARAM_ROWS:
                self.each_variant(model, w, {"x": rng.standard_normal((m, 300)).astype(np.float32)}, f"param at M={m}")
            for k, ((header, args, result, expr), shape) in enumerate(PARAM_TAILS):
                model = write(d, f"tail{k}", header, args, result, expr)
                w = {"w": rng.standard_normal(shape).astype(np.float32)}
                depth = shape[0] if expr == "x @ w" else shape[1]
                for m in (1, 5, 7, 17, 65):
                    self.each_variant(model, w, {"x": rng.standard_normal((m, depth)).astype(np.float32)},
                                      f"{expr} at N={shape[1] if expr == 'x @ w' else shape[0]}, M={m}")

    def test_narrower_vectors(self):
        # The kernels an AVX2 (8 lanes: tiles of 6 rows, sums of 8 accumulators in two
        # groups) or SSE host (4 lanes) would run, built here with DNNC_VECTOR_WIDTH: tile
        # and depth edges, the dot products, and a narrow and a wide prepacked param.
        rng = np.random.default_rng(8)
        shapes = [(7, 3, 5), (15, 257, 63), (17, 255, 65), (41, 129, 97), (18, 33, 11), (6, 15, 3), (7, 64, 13), (1, 512, 16),
                  (3, 40, 300)]
        with tempfile.TemporaryDirectory() as d:
            for lanes in ("8", "4"):
                os.environ["DNNC_VECTOR_WIDTH"] = lanes
                try:
                    self.cpu = Dnnc(self.exe, self.examples, "cpu", prebuilt=True)
                    for name in ("plain", "transposed_epilogue"):
                        header, args, result, expr, shape_of = MODELS[name]
                        model = write(d, f"{name}{lanes}", header, args, result, expr)
                        for m, k, n in shapes:
                            inputs = {a: rng.standard_normal(s).astype(np.float32) for a, s in shape_of(m, k, n).items()}
                            self.each_variant(model, None, inputs, f"{lanes} lanes: {name} at M={m}, K={k}, N={n}")
                    for (header, args, result, expr), shape in (PARAM_TAILS[2], PARAM_TAILS[0]):
                        model = write(d, f"param{shape[1]}_{lanes}", header, args, result, expr)
                        w = {"w": rng.standard_normal(shape).astype(np.float32)}
                        for m in (5, 17):
                            self.each_variant(model, w, {"x": rng.standard_normal((m, shape[0])).astype(np.float32)},
                                              f"{lanes} lanes: {expr} at N={shape[1]}, M={m}")
                    if lanes == "4":  # below any AVX host's width: a tune table is for the CPU's own kernels
                        p = subprocess.run([self.exe, "tune", "--print"], capture_output=True, text=True, timeout=600)
                        self.assertEqual(p.returncode, 1, p.stderr)
                        self.assertEqual(p.stderr, "dnnc: error: dnnc tune times the kernels this CPU runs; DNNC_VECTOR_WIDTH=4 "
                                                   "(for tests) would fit others\n")
                finally:
                    del os.environ["DNNC_VECTOR_WIDTH"]

    def test_same_bits_in_every_variant(self):
        # A product sums in one order whatever variant runs it (so a result does not depend
        # on --threads or the tune table): every variant's output equals variant 0's bit for
        # bit. The transposed N = 80 has a last block of 16 columns (which once took the dot
        # products in some variants only); N = 10 is the dot products' in all.
        rng = np.random.default_rng(7)
        with tempfile.TemporaryDirectory() as d:
            cases = [(write(d, "plain", *MODELS["plain"][:4]), None,
                      {"a": rng.standard_normal((33, 300)), "b": rng.standard_normal((300, 80))}),
                     (write(d, "transposed", *MODELS["transposed_epilogue"][:4]), None,
                      {"a": rng.standard_normal((64, 300)), "b": rng.standard_normal((80, 300))}),
                     (write(d, "narrow", *PARAM_TAILS[2][0]), {"w": rng.standard_normal((512, 10)).astype(np.float32)},
                      {"x": rng.standard_normal((65, 512))})]
            for model, weights, inputs in cases:
                inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
                outs = []
                for v in range(VARIANTS):
                    got, p = self.run_variant(v, model, weights, inputs)
                    self.assertEqual(p.returncode, 0, p.stderr)
                    outs.append(got[0])
                for v in range(1, VARIANTS):
                    np.testing.assert_array_equal(outs[v], outs[0], f"{model}: variant {v} against variant 0")

    def test_prepacked_param_slices(self):
        rng = np.random.default_rng(6)
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "sliced.dnn")
            with open(model, "w") as f:
                f.write(SLICED)
            w = {"w": rng.standard_normal((3, 70, 1000)).astype(np.float32),
                 "v": rng.standard_normal((2, 3, 70, 64)).astype(np.float32),
                 "u": rng.standard_normal((3, 70, 10)).astype(np.float32)}
            for m in (0, 1, 5, 17, 65):
                self.each_variant(model, w, {"x": rng.standard_normal((m, 70)).astype(np.float32)}, f"slices at M={m}",
                                  outputs=3)

    def test_tune_table_round_trip(self):
        rng = np.random.default_rng(5)
        with tempfile.TemporaryDirectory() as d:
            table = os.path.join(d, "cache", "tune.json")
            p = subprocess.run([self.exe, "tune", "--min-time", "0.001", "-o", table], capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(f"wrote {table}", p.stdout)
            with open(table) as f:
                t = json.load(f)
            self.assertEqual(len(t["variants"]), VARIANTS)
            self.assertIn(t["lanes"], (4, 8, 16), t)
            for v in t["variants"]:
                for key in ("per_task", "per_k", "per_k_cols", "per_k_fill", "stream_per_task", "stream_per_k",
                            "panel_per_task", "panel_per_k", "panel_per_k_fill"):
                    self.assertGreaterEqual(v[key], 0, v)
                # A task's multiply-adds cost something, B prepacked or not.
                self.assertGreater(v["per_k_fill"], 0, v)
                self.assertGreater(v["panel_per_k_fill"], 0, v)
            # --print writes nothing and prints the same structure.
            p = subprocess.run([self.exe, "tune", "--min-time", "0.001", "--print"], capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            printed = json.loads(p.stdout[:p.stdout.rindex("}") + 1])
            self.assertEqual([v["name"] for v in printed["variants"]], [v["name"] for v in t["variants"]])
            model = write(d, "plain", *MODELS["plain"][:4])
            inputs = {"a": rng.standard_normal((33, 70)).astype(np.float32), "b": rng.standard_normal((70, 300)).astype(np.float32)}
            want, p = self.ref.run(model, None, inputs)
            self.assertEqual(p.returncode, 0, p.stderr)
            got, p = self.cpu.run(model, None, inputs, ("--tune-table", table))
            self.assertEqual(p.returncode, 0, p.stderr)
            assert_matches(got[0], want[0], 1e-4, 1e-4, "--tune-table")
            os.environ["DNNC_TUNE_TABLE"] = table
            try:
                got, p = self.cpu.run(model, None, inputs)
            finally:
                del os.environ["DNNC_TUNE_TABLE"]
            self.assertEqual(p.returncode, 0, p.stderr)
            assert_matches(got[0], want[0], 1e-4, 1e-4, "DNNC_TUNE_TABLE")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--examples", required=True)
    a, rest = ap.parse_known_args()
    Variants.exe, Variants.examples = a.dnnc, a.examples
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

#!/usr/bin/env python3
"""The CPU's parallel kernels against the reference interpreter (--device ref): softmax,
log-softmax, layer norm, reductions and elementwise ops whose rows are a collapsed nest of
all their independent dims, so that B=1 still splits across threads. Each runs at shapes
with a dim of 1, odd sizes, row counts just around a chunk edge and below the thread count,
and an empty dim, with 1, 2, 3 and 7 threads (more threads than this machine has cores).
The row lengths make the larger shapes cost enough for the runtime to split them into
several chunks (ThreadPool::kMinChunkNs); the small ones check that a kernel too small to
split is still right."""
import os
import tempfile
import unittest

import numpy as np

from dnnc_test_util import assert_matches, run_on_devices

THREADS = [1, 2, 3, 7]
# (B, T, D): B=1 (rows only along T), odd and prime sizes, 8*3*4+1 rows (one past an even
# split into 4 chunks per thread for 2 and 3 threads), fewer rows than threads with long
# rows, empty dims.
SHAPES = [(1, 1, 1), (1, 67, 515), (3, 5, 7), (1, 97, 384), (2, 3, 4099), (1, 0, 5), (0, 3, 5), (2, 4, 0)]

# name: (result type, expression in x: f32[B, T, D] and g: f32[D])
MODELS = {
    "softmax": ("f32[B, T, D]", "softmax(x, axis = -1)"),
    "log_softmax": ("f32[B, T, D]", "log_softmax(x, axis = -1)"),
    "softmax_middle": ("f32[B, T, D]", "softmax(x, axis = 1)"),  # rows along T: B x D collapsed
    "layer_norm": ("f32[B, T, D]", "nn.layer_norm(x, g, g * 0.5)"),
    "sum_rows": ("f32[B, T]", "sum(x, axis = -1)"),
    "max_rows": ("f32[B, T]", "max(x, axis = -1)"),
    "argmax_rows": ("i64[B, T]", "argmax(x, axis = -1)"),
    "mean_middle": ("f32[B, D]", "mean(x, axis = 1)"),
    "gelu_scale": ("f32[B, T, D]", "gelu(x) * g + 1.0"),
}
# A max over an empty axis is an error on every device (tested elsewhere), not a result.
NEEDS_ROW = {"max_rows": 2, "argmax_rows": 2}


def write_model(d, name, result, expr):
    path = os.path.join(d, f"{name}.dnn")
    with open(path, "w") as f:
        f.write(f"import nn;\ndim B in 0..8192; dim T in 0..8192; dim D in 0..8192;\nmodel main(x: f32[B, T, D], g: f32[D]) -> {result} {{\n"
                f"  return {expr};\n}}\n")
    return path


def make_test(name, result, expr):
    def test(self):
        rng = np.random.default_rng(sum(map(ord, name)))
        with tempfile.TemporaryDirectory() as d:
            model = write_model(d, name, result, expr)
            for b, t, dd in SHAPES:
                if name in NEEDS_ROW and (b, t, dd)[NEEDS_ROW[name]] == 0:
                    continue
                x = rng.standard_normal((b, t, dd)).astype(np.float32)
                g = rng.standard_normal(dd).astype(np.float32)
                inputs = {"x": x, "g": g}
                want, p = self.ref.run(model, None, inputs)
                self.assertEqual(p.returncode, 0, p.stderr)
                for threads in THREADS:
                    got, p = self.cpu.run(model, None, inputs, ("--threads", str(threads)))
                    where = f"{name} at B={b}, T={t}, D={dd}, --threads {threads}"
                    self.assertEqual(p.returncode, 0, f"{where}: {p.stderr}")
                    self.assertEqual(got[0].shape, want[0].shape, where)
                    assert_matches(got[0], want[0], 2e-5, 2e-5, where)
    return test


class Parallel(unittest.TestCase):
    pass


for _name, (_result, _expr) in MODELS.items():
    setattr(Parallel, f"test_{_name}", make_test(_name, _result, _expr))


if __name__ == "__main__":
    run_on_devices(Parallel, ref="ref", cpu="cpu")

#!/usr/bin/env python3
"""dropout(x, p) (spec training.md §11): drops in training with a counter-based RNG, the
identity otherwise.

- In a model whose body takes a grad (training, seed 0, step 0): the kept fraction is
  within 4 standard deviations of 1 - p at n = 200000, kept values are x / (1 - p), the
  mask is the one tests/numerics/dnnc_test_util.dropout_keep draws (a NumPy re-write of
  base/Random.h), two dropouts draw different masks, the gradient uses the forward mask,
  and ref, cpu and cuda-sim give the same bits.
- In `dnnc run` without a grad: the identity, bit for bit (nn.dropout too).
- In `dnnc train`: each step draws a fresh mask from (--seed, step): the logged losses are
  NumPy's for that mask at every step, on every device, and another seed gives others
  (SGD with lr 1e-30 leaves w's f32 values as they are, so only the mask changes).
- p outside [0, 1] is a diagnostic (tests/fail/fail_dropout_p.dnn).
(The gradient against finite differences is test_grad.py's case `dropout`.)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnnc_test_util import dropout_keep, run_with_exe, write_safetensors  # noqa: E402

DEVICES = ("ref", "cpu", "cuda-sim")

TRAINING = """import nn;
dim N;
model main(x: f32[N]) -> (f32[N], f32[N], f32[N]) {
  let y = nn.dropout(x, 0.3);
  let z = dropout(x, p = 0.5);
  return (y, z, grad(sum(y * 3.0), x));
}
"""

INFERENCE = """import nn;
dim N;
model main(x: f32[N]) -> (f32[N], f32[N]) {
  return (nn.dropout(x, 0.3), dropout(x, 0.9));
}
"""

STEP = """dim B;
param w: f32[4];
model main(x: f32[B, 4]) -> f32[] {
  return sum(dropout(x * w, 0.5));
}
"""


class Dropout(unittest.TestCase):
    exe = None

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def run_model(self, source, x, device):
        d = self.dir.name
        with open(os.path.join(d, "m.dnn"), "w") as f:
            f.write(source)
        np.save(os.path.join(d, "x.npy"), x)
        out = os.path.join(d, "out-" + device)
        p = subprocess.run([self.exe, "run", os.path.join(d, "m.dnn"), "--input", f"x={d}/x.npy", "--device", device,
                            "--out", out], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [np.load(os.path.join(out, f)) for f in sorted(os.listdir(out))]

    def test_training_mask(self):
        n = 200000
        x = np.random.default_rng(1).uniform(0.5, 1.5, n).astype(np.float32)
        first = None
        for device in DEVICES:
            with self.subTest(device=device):
                y, z, g = self.run_model(TRAINING, x, device)
                for out, p, stream in ((y, 0.3, 0), (z, 0.5, 1)):
                    kept = out != 0
                    sigma = np.sqrt(p * (1 - p) / n)
                    self.assertLess(abs(kept.mean() - (1 - p)), 4 * sigma, (p, kept.mean()))
                    np.testing.assert_array_equal(kept, dropout_keep(x.shape, p, stream=stream))
                    np.testing.assert_allclose(out[kept], x[kept] / (1 - p), rtol=1e-6)
                self.assertFalse(np.array_equal(y != 0, z != 0))  # two streams, two masks
                np.testing.assert_allclose(g, (y != 0) * 3.0 / 0.7, rtol=1e-6)  # the forward mask again
                if first is None:
                    first = (y, z, g)
                for a, b in zip(first, (y, z, g)):
                    np.testing.assert_array_equal(a, b)  # the same bits on every device

    def test_inference_is_identity(self):
        x = np.random.default_rng(2).standard_normal(1001).astype(np.float32)
        for device in DEVICES:
            with self.subTest(device=device):
                for out in self.run_model(INFERENCE, x, device):
                    np.testing.assert_array_equal(out, x)

    def train_losses(self, seed, device, x, w):
        d = self.dir.name
        with open(os.path.join(d, "step.dnn"), "w") as f:
            f.write(STEP)
        np.save(os.path.join(d, "x.npy"), x)
        write_safetensors(os.path.join(d, "w.safetensors"), {"w": w})
        p = subprocess.run([self.exe, "train", os.path.join(d, "step.dnn"), "--data", f"x={d}/x.npy", "--batch", str(len(x)),
                            "--steps", "3", "--optimizer", "sgd", "--lr", "1e-30", "--weights", os.path.join(d, "w.safetensors"),
                            "--seed", str(seed), "--json", "--device", device], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return [json.loads(line)["loss"] for line in p.stdout.splitlines()]

    def test_fresh_mask_per_step(self):
        rng = np.random.default_rng(3)
        x = rng.uniform(0.5, 1.5, (50, 4)).astype(np.float32)
        w = rng.uniform(0.5, 1.5, 4).astype(np.float32)
        xw = x.astype(np.float64) * w
        for seed in (7, 8):
            want = [(xw * dropout_keep(xw.shape, 0.5, seed=seed, step=s)).sum() / 0.5 for s in (1, 2, 3)]
            self.assertEqual(len(set(want)), 3)
            for device in DEVICES:
                with self.subTest(seed=seed, device=device):
                    np.testing.assert_allclose(self.train_losses(seed, device, x, w), want, rtol=1e-5)


if __name__ == "__main__":
    run_with_exe(Dropout)

#!/usr/bin/env python3
"""In-place training updates (spec training.md §11-§12: params and optimizer state updated
in place, kept on the device between steps). `dnnc train` writes each updated param and
state tensor over the old one; `--no-in-place` returns them as new tensors and copies them
back, the path in-place replaced. Both must log the same losses and save the same params
and state bit for bit, on cpu and cuda-sim, for test_train's MLP classifier and one-block
LM and for the examples made trainable (the transformer with its `for` over stacked
params, the lstm with its `for` over T), with SGD, momentum, Adam and AdamW (with weight
decay), and with recomputation. The runs' own counters (`--verbose`) show that in place
did happen: every update written in place, no output allocated by the executor after the
first step (the copy path allocates some every step), and on cuda-sim the params and state
uploaded once and downloaded once (for --save), however many steps run.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnnc_test_util import read_safetensors, run_with_exe  # noqa: E402
from test_recompute import STDLIB, TrainingRuns, example  # noqa: E402
from test_train import LM, MODEL  # noqa: E402

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")


class InPlace(TrainingRuns):
    seed = 7

    def train(self, model, data, device, optimizer, steps, batch, extra):
        out = self.path(f"out-{len(extra)}.safetensors")
        args = [self.exe, "train", model, "-I", STDLIB, "--batch", str(batch), "--steps", str(steps), "--optimizer", optimizer,
                "--lr", "0.01", "--weight-decay", "0.01", "--json", "--device", device, "--seed", "3", "--save", out, "--verbose",
                *extra]
        for d in data:
            args += ["--data", d]
        p = subprocess.run(args, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        losses = [json.loads(line)["loss"] for line in p.stdout.splitlines()]
        with open(out, "rb") as f, open(out + ".state", "rb") as g:
            return losses, f.read(), g.read(), p.stderr

    def counters(self, stderr):
        m = re.search(r"^updated in place: (\d+) of (\d+) params and state tensors; output allocations after the first step: (\d+)$",
                      stderr, re.M)
        self.assertIsNotNone(m, stderr)
        return tuple(int(g) for g in m.groups())

    def resident_copies(self, stderr):
        m = re.search(r"of memory kept on the device between runs: (\d+) uploads, (\d+) downloads$", stderr, re.M)
        self.assertIsNotNone(m, stderr)
        return int(m.group(1)), int(m.group(2))

    def check(self, name, source, data, batch, optimizers=OPTIMIZERS, steps=4, extra=()):
        model = self.path(name + ".dnn")
        with open(model, "w") as f:
            f.write(source)
        for device in ("cpu", "cuda-sim"):
            for optimizer in optimizers:
                with self.subTest(model=name, device=device, optimizer=optimizer, extra=extra):
                    losses, params, state, err = self.train(model, data, device, optimizer, steps, batch, list(extra))
                    want = self.train(model, data, device, optimizer, steps, batch, [*extra, "--no-in-place"])
                    self.assertEqual(len(losses), steps)
                    self.assertEqual(losses, want[0])  # floats as logged: bit for bit
                    self.assertEqual(params, want[1], "the saved params differ")
                    self.assertEqual(state, want[2], "the saved optimizer state differs")
                    updated, tensors, allocations = self.counters(err)
                    self.assertEqual(updated, tensors)
                    self.assertEqual(allocations, 0)
                    copied, _, copy_allocations = self.counters(want[3])
                    self.assertEqual(copied, 0)
                    self.assertGreaterEqual(copy_allocations, (steps - 1) * tensors)  # the copy path's, each step

    def test_classifier(self):
        self.check("classifier", MODEL, self.classifier_data(), batch=3)

    def test_lm(self):
        self.check("lm", LM, self.lm_data(), batch=5, optimizers=("sgd", "adam"))

    def transformer(self):
        src = example("transformer", dict(D=16, H=2, L=2, V=50), "nn.cross_entropy(prediction, targets)", "targets: i32[B, T]")
        t = self.rng.integers(0, 50, (5, 9)).astype(np.int32)
        return src, [self.save("tokens", t[:, :8]), self.save("targets", t[:, 1:])]

    def test_transformer_example(self):
        # Two optimizers, one with state per param and one with two (and weight decay): each
        # run compiles a training graph for ~1 min on 2 cores, and the four optimizers'
        # updates are each checked on the classifier already.
        src, data = self.transformer()
        self.check("transformer", src, data, batch=2, optimizers=("momentum", "adamw"))

    def test_transformer_recomputed(self):
        """With --recompute all the backward pass reads the params again (the recomputed
        forward ops): those reads too come before the updates."""
        src, data = self.transformer()
        self.check("transformer", src, data, batch=2, optimizers=("adamw",), extra=("--recompute", "all"))

    def test_lstm_example(self):
        src = example("lstm", dict(I=3, H=4, C=3), "nn.cross_entropy(prediction, labels)", "labels: i32[B]")
        self.check("lstm", src, [self.save("xs", self.rng.standard_normal((5, 4, 3)).astype(np.float32)),
                                 self.save("labels", self.rng.integers(0, 3, 5).astype(np.int32))], batch=2,
                   optimizers=("momentum", "adam"))

    def test_slice_of_an_updated_param(self):
        """A param read as a slice w[0] (a view of its memory, no copy): the ops that read
        the slice come before w's update too. The order let g @ w[0]ᵀ, which a's gradient
        needs, and a metric's z @ w[0] read the new w (cpu and cuda-sim; ref was right)."""
        models = {
            "grad": ("dim B in 1..4096;\nparam a: f32[16, 256] = normal(0.0, 0.1);\nparam w: f32[2, 256, 64] = normal(0.0, 0.1);\n"
                     "model main(x: f32[B, 16]) -> f32[] {\n  let o = (x @ a) @ w[0];\n  return mean(o * o);\n}\n",
                     {"x": (8, 16)}),
            "metric": ("dim B in 1..4;\ndim K in 1..4096;\nparam w: f32[2, 64, 64] = normal(0.0, 0.1);\n"
                       "model main(x: f32[B, 64], z: f32[K, 64]) -> (f32[], f32[]) {\n  let o = x @ w[0];\n"
                       "  return (mean(o * o), sum(z @ w[0]));\n}\n", {"x": (8, 64), "z": (8, 64)}),
        }
        for name, (source, shapes) in models.items():
            model = self.path(f"slice_{name}.dnn")
            with open(model, "w") as f:
                f.write(source)
            data = [self.save(f"{name}_{k}", self.rng.standard_normal(shape).astype(np.float32)) for k, shape in shapes.items()]
            data = [f"{k}={d.split('=', 1)[1]}" for k, d in zip(shapes, data)]
            runs = {}
            for device, extra in (("ref", ()), ("cpu", ()), ("cpu", ("--no-in-place",)), ("cuda-sim", ())):
                out = self.path(f"slice-{name}-{device}-{len(extra)}.safetensors")
                args = [self.exe, "train", model, "--batch", "4", "--steps", "3", "--optimizer", "sgd", "--lr", "1.0", "--json",
                        "--device", device, "--seed", "3", "--save", out, *extra]
                for d in data:
                    args += ["--data", d]
                p = subprocess.run(args, capture_output=True, text=True, timeout=600)
                self.assertEqual(p.returncode, 0, p.stderr)
                runs[(device, extra)] = ([json.loads(line) for line in p.stdout.splitlines()], read_safetensors(out))
            want_log, want = runs[("ref", ())]
            for key, (log, params) in runs.items():
                with self.subTest(model=name, run=key):
                    for got, expected in zip(log, want_log):
                        for metric in set(expected) - {"step", "ms"}:
                            self.assertAlmostEqual(got[metric], expected[metric], delta=1e-4 * max(1.0, abs(expected[metric])))
                    for param in want:
                        np.testing.assert_allclose(params[param], want[param], rtol=1e-4, atol=1e-6, err_msg=param)

    def test_params_stay_on_the_device(self):
        """cuda-sim: the params and Adam's state (and the layer rows read as views of the
        stacked params) are uploaded in the first step and downloaded once, for --save:
        the same counts after 2 steps as after 6. The copy path has no such memory."""
        src, data = self.transformer()
        model = self.path("transformer.dnn")
        with open(model, "w") as f:
            f.write(src)
        copies = [self.resident_copies(self.train(model, data, "cuda-sim", "adam", steps, 2, [])[3]) for steps in (2, 6)]
        self.assertEqual(copies[0], copies[1])
        uploads, downloads = copies[0]
        self.assertEqual(downloads, 8 * 3)  # 8 params, 2 state tensors each
        self.assertGreaterEqual(uploads, 8 * 3)
        copy_path = self.train(model, data, "cuda-sim", "adam", 2, 2, ["--no-in-place"])[3]
        self.assertNotIn("kept on the device", copy_path)


if __name__ == "__main__":
    run_with_exe(InPlace)

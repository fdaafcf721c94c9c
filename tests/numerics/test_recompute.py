#!/usr/bin/env python3
"""Recomputation changes no value (spec training.md §13): `dnnc train --recompute auto` and
`--recompute all` log the same losses and save the same weights as `--recompute none`, on
ref, cpu and cuda-sim, for the examples made trainable (mlp, transformer with its layer
loop, lstm, convnet), test_train's MLP classifier and a one-block transformer LM (layer
norm, causal attention, GELU MLP). Each mode must also really recompute something in the
step it compiles (`dnnc emit --train --emit=plan` lists the decisions), so the comparison
is not between three identical graphs. On the reference interpreter with
--no-fuse-attention the results are bit for bit the same (it computes each op alone, so a
recomputed op gives the same bits). Elsewhere they agree to rtol 1e-6 for the losses and
to 1e-5 of each tensor's largest magnitude for the weights: the compiled devices fuse a
recomputed op into another kernel than the forward one (floating-point contraction may
differ in the last bit), and once the backward pass no longer reads the attention
probabilities the forward attention becomes one fused `attention` op (its output differs
from matmul(p, v) in the last bits, on ref too).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnnc_test_util import example_with_loss, read_safetensors, run_with_exe  # noqa: E402
from test_train import LM, MODEL  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STDLIB = os.path.join(ROOT, "stdlib")


def example(name, consts, loss, inputs):
    with open(os.path.join(ROOT, "examples", name + ".dnn")) as f:
        return example_with_loss(f.read(), consts, loss, inputs)[0]


class TrainingRuns(unittest.TestCase):
    """A temporary folder for models, data and checkpoints (no tests of its own: the base
    of this file's tests and test_train_inplace.py's)."""
    exe = None
    seed = 11

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.rng = np.random.default_rng(self.seed)

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def save(self, name, array):
        np.save(self.path(name + ".npy"), array)
        return f"{name}={self.path(name + '.npy')}"

    def classifier_data(self):
        """test_train's MLP classifier: 7 samples of x and one-hot y."""
        x = self.rng.standard_normal((7, 6)).astype(np.float32)
        y = np.eye(3, dtype=np.float32)[self.rng.integers(0, 3, 7)]
        return [self.save("x", x), self.save("y", y)]

    def lm_data(self):
        """The one-block LM's: 11 sequences at T = 12."""
        seq = (np.arange(11 * 13) * 7) % 50
        t = np.stack([seq[i:i + 13] for i in range(11)]).astype(np.int32)
        return [self.save("tokens", t[:, :12]), self.save("targets", t[:, 1:])]


class Recompute(TrainingRuns):

    def recomputed(self, model, mode):
        p = subprocess.run([self.exe, "emit", model, "-I", STDLIB, "--emit=plan", "--train=adam", "--recompute", mode],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        return len(re.findall(r"^  recompute ", p.stdout, re.M))

    def check(self, name, source, data, batch, steps=3):
        model = self.path(name + ".dnn")
        with open(model, "w") as f:
            f.write(source)
        self.assertGreater(self.recomputed(model, "all"), 0, f"{name}: --recompute all recomputes nothing")
        self.assertEqual(self.recomputed(model, "none"), 0)
        for device, flags in (("ref", ["--no-fuse-attention"]), ("ref", []), ("cpu", []), ("cuda-sim", [])):
            exact = bool(flags)
            runs = {}
            for mode in ("none", "auto", "all"):
                out = self.path(f"{name}-{device}-{mode}.safetensors")
                args = [self.exe, "train", model, "-I", STDLIB, "--batch", str(batch), "--steps", str(steps), "--optimizer", "adam",
                        "--lr", "0.01", "--json", "--device", device, "--seed", "3", "--save", out, "--recompute", mode, *flags]
                for d in data:
                    args += ["--data", d]
                p = subprocess.run(args, capture_output=True, text=True, timeout=600)
                self.assertEqual(p.returncode, 0, f"{name} {device} {mode}: {p.stderr}")
                runs[mode] = ([json.loads(line)["loss"] for line in p.stdout.splitlines()], read_safetensors(out))
            losses, weights = runs["none"]
            self.assertEqual(len(losses), steps)
            for mode in ("auto", "all"):
                with self.subTest(model=name, device=device, mode=mode, flags=flags):
                    got_losses, got = runs[mode]
                    self.assertEqual(sorted(got), sorted(weights))
                    if exact:
                        self.assertEqual(got_losses, losses)
                        for k, w in weights.items():
                            np.testing.assert_array_equal(got[k], w, err_msg=k)
                    else:
                        np.testing.assert_allclose(got_losses, losses, rtol=1e-6)
                        for k, w in weights.items():
                            np.testing.assert_allclose(got[k], w, rtol=0, atol=1e-5 * float(np.abs(w).max()), err_msg=k)

    def test_classifier(self):
        self.check("classifier", MODEL, self.classifier_data(), batch=3)

    def test_lm(self):
        """The one-block LM at T = 12 and an odd batch (5, then the short 1 of 11 samples)."""
        self.check("lm", LM, self.lm_data(), batch=5, steps=3)

    def test_transformer_example(self):
        src = example("transformer", dict(D=16, H=2, L=2, V=50), "nn.cross_entropy(prediction, targets)", "targets: i32[B, T]")
        t = self.rng.integers(0, 50, (4, 9)).astype(np.int32)
        self.check("transformer", src, [self.save("tokens", t), self.save("targets", t)], batch=3)

    def test_mlp_example(self):
        src = example("mlp", dict(D=12, H=9, C=4), "-mean(sum(log(prediction) * one_hot(labels, C), axis = -1))", "labels: i32[B]")
        self.check("mlp", src, [self.save("x", self.rng.standard_normal((5, 12)).astype(np.float32)),
                                self.save("labels", self.rng.integers(0, 4, 5).astype(np.int32))], batch=1)

    def test_lstm_example(self):
        src = example("lstm", dict(I=3, H=4, C=3), "nn.cross_entropy(prediction, labels)", "labels: i32[B]")
        self.check("lstm", src, [self.save("xs", self.rng.standard_normal((5, 4, 3)).astype(np.float32)),
                                 self.save("labels", self.rng.integers(0, 3, 5).astype(np.int32))], batch=2)

    def test_versions_by_shape(self):
        """auto's versions by shape: the example transformer's attention probabilities
        (B*H*T*T) are recomputed only where they are a large part of the stash and the
        memory plan says that lowers the peak, so a folder of batches at T = 5 and T = 40
        runs two versions of the step, both compiled before the first step; the losses and
        weights are those of --recompute none."""
        src = example("transformer", dict(D=16, H=2, L=2, V=50), "nn.cross_entropy(prediction, targets)", "targets: i32[B, T]")
        model = self.path("versions.dnn")
        with open(model, "w") as f:
            f.write(src)
        p = subprocess.run([self.exe, "emit", model, "-I", STDLIB, "--emit=plan", "--train=adam"], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("2 versions by shape (this is version 1; the memory plan picks a binding's):\n", p.stdout)
        self.assertRegex(p.stdout, r"version 1: only what every shape recomputes\n    version 2 \(from B=1, T=\d+\): also recomputes p\n")
        self.assertRegex(p.stdout, r"  stash +p f32\[B, 2, T, T\] .*by shape")
        data = self.path("steps")
        for s, t in enumerate((5, 40, 5, 40)):
            os.makedirs(os.path.join(data, f"{s:06d}"))
            seq = self.rng.integers(0, 50, (3 - s % 2, t + 1)).astype(np.int32)
            np.save(os.path.join(data, f"{s:06d}", "tokens.npy"), seq[:, :-1].copy())
            np.save(os.path.join(data, f"{s:06d}", "targets.npy"), seq[:, 1:].copy())
        for device in ("cpu", "cuda-sim"):
            runs = {}
            # On the simulated GPU also with each step's params as new tensors: the two
            # versions' executables then see params in memory the other's step freed, and
            # neither may keep a device copy of the old values there.
            for mode in ("none", "auto") + (("auto --no-in-place",) if device == "cuda-sim" else ()):
                out = self.path(f"versions-{device}-{mode.replace(' ', '')}.safetensors")
                p = subprocess.run([self.exe, "train", model, "-I", STDLIB, "--data", data, "--steps", "4", "--optimizer", "adam", "--lr", "0.01",
                                    "--json", "--verbose", "--device", device, "--seed", "3", "--save", out, "--recompute", *mode.split()],
                                   capture_output=True, text=True, timeout=600)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("kernels compiled after the first step: 0\n", p.stderr)
                runs[mode] = ([json.loads(line)["loss"] for line in p.stdout.splitlines()], read_safetensors(out), p.stderr)
            with self.subTest(device=device):
                self.assertNotIn("steps by recompute version", runs["none"][2])
                for mode in runs.keys() - {"none"}:
                    self.assertIn("steps by recompute version: 2, 2\n", runs[mode][2])
                    np.testing.assert_allclose(runs[mode][0], runs["none"][0], rtol=1e-6, err_msg=mode)
                    for k, w in runs["none"][1].items():
                        np.testing.assert_allclose(runs[mode][1][k], w, rtol=0, atol=1e-5 * float(np.abs(w).max()), err_msg=f"{mode}: {k}")

    def test_repl_versions(self):
        """`:mem train` sizes the step of the version the bound dims run: at T = 2048 the
        example transformer (D = 256) recomputes its T x T probabilities too, and stashes a
        third or less of what none stashes."""
        src = example("transformer", {}, "nn.cross_entropy(prediction, targets)", "targets: i32[B, T]")
        model = self.path("tr.dnn")
        with open(model, "w") as f:
            f.write(src)
        stashed = {}
        for mode in ("none", "auto"):
            for t in (1, 2048):
                p = subprocess.run([self.exe, "repl", model, "-I", STDLIB], input=f":bind B=8,T={t}\n:set recompute {mode}\n:mem train adam\n",
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(p.returncode, 0, p.stderr)
                stashed[mode, t] = int(re.search(r"stashed activations: (\d+) bytes", p.stdout).group(1))
                if mode == "auto":
                    version = re.search(r"version (\d+) of (\d+) by shape", p.stdout)
                    self.assertIsNotNone(version, p.stdout)
                    self.assertIn(f"(this is version {version.group(1)}; ", p.stdout)
                    stashed["version", t] = version.group(1)
        self.assertNotEqual(stashed["version", 1], stashed["version", 2048])
        self.assertLessEqual(3 * stashed["auto", 2048], stashed["none", 2048])


if __name__ == "__main__":
    run_with_exe(Recompute)

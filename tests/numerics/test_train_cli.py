#!/usr/bin/env python3
"""`dnnc train`'s data folders, checkpoints and interruption (spec training.md §12):

- `--data DIR` of per-step batches with their own B and T: the one compiled step runs them
  all (`--verbose` reports `kernels compiled after the first step: 0`, read from the
  compiler's counter) and cpu and cuda-sim log the reference interpreter's losses
  (rtol 1e-3); every batch is checked before the first step, errors name the file and
  nothing is trained or saved.
- `--save`/`--resume`: 2 steps, then a resume to step 5, give bit-identical params and
  optimizer state (and the same last three losses) as 5 steps in one go, for every
  optimizer on ref and cpu; the params file loads in `dnnc run --weights`.
- SIGINT: a run interrupted while it checkpoints every step leaves complete, mutually
  consistent files and no temporary ones, and resumes from them; interrupted before its
  first checkpoint it leaves none.
- docs/training.md's worked example (scripts/charlm.py's data, examples/train/charlm.dnn)
  trains a few steps.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnnc_test_util import read_safetensors, run_with_exe, write_safetensors  # noqa: E402
from test_train import LM, MODEL  # noqa: E402

# (B, T) of each step folder: odd sizes, a single sample, a single token, T at its maximum.
SHAPES = [(3, 5), (1, 7), (4, 1), (2, 64), (5, 3)]


class TrainCli(unittest.TestCase):
    exe = None

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = self.dir.name
        rng = np.random.default_rng(5)
        with open(self.path("m.dnn"), "w") as f:
            f.write(MODEL)
        with open(self.path("lm.dnn"), "w") as f:
            f.write(LM)
        np.save(self.path("x.npy"), rng.standard_normal((10, 6)).astype(np.float32))
        np.save(self.path("y.npy"), np.eye(3, dtype=np.float32)[rng.integers(0, 3, 10)])
        write_safetensors(self.path("init.safetensors"),
                          {"w1": (rng.standard_normal((6, 8)) * 0.5).astype(np.float32),
                           "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
                           "w2": (rng.standard_normal((8, 3)) * 0.5).astype(np.float32)})

    def tearDown(self):
        self.dir.cleanup()

    def path(self, *parts):
        return os.path.join(self.d, *parts)

    def train(self, *args, model="m.dnn", data=None, timeout=300):
        data = data if data is not None else ["--data", f"x={self.path('x.npy')}", "--data", f"y={self.path('y.npy')}"]
        return subprocess.run([self.exe, "train", self.path(model), *data, *args], capture_output=True, text=True,
                              timeout=timeout)

    def make_folder(self, name, shapes, seed=0):
        """Per-step batches of next-token data for the LM: tokens and targets of each (B, T)."""
        rng = np.random.default_rng(seed)
        for s, (b, t) in enumerate(shapes):
            step = self.path(name, f"{s:06d}")
            os.makedirs(step)
            seq = rng.integers(0, 50, (b, t + 1)).astype(np.int32)
            np.save(os.path.join(step, "tokens.npy"), seq[:, :-1])
            np.save(os.path.join(step, "targets.npy"), seq[:, 1:])
        return self.path(name)

    # --data DIR

    def test_folder_of_variable_shapes_compiles_once(self):
        folder = self.make_folder("steps", SHAPES)
        losses = {}
        for device in ("ref", "cpu", "cuda-sim"):
            with self.subTest(device=device):
                p = self.train("--epochs", "2", "--optimizer", "adam", "--lr", "0.01", "--json", "--verbose", "--device", device,
                               model="lm.dnn", data=["--data", folder])
                self.assertEqual(p.returncode, 0, p.stderr)
                logs = [json.loads(line) for line in p.stdout.splitlines()]
                self.assertEqual([e["step"] for e in logs], list(range(1, 2 * len(SHAPES) + 1)))
                losses[device] = [e["loss"] for e in logs]
                if device != "ref":
                    self.assertRegex(p.stderr, rf"compiled the training step for {device}[^:\n]*: [1-9][0-9]* kernels\n")
                    self.assertIn("kernels compiled after the first step: 0\n", p.stderr)
        for device in ("cpu", "cuda-sim"):
            np.testing.assert_allclose(losses[device], losses["ref"], rtol=1e-3, err_msg=device)

    def test_folder_matches_sliced_files(self):
        """A folder holding the slices `--batch 4` would cut trains exactly as the slices do."""
        x, y = np.load(self.path("x.npy")), np.load(self.path("y.npy"))
        for s, begin in enumerate(range(0, 10, 4)):
            os.makedirs(self.path("mlp", f"{s:06d}"))
            np.save(self.path("mlp", f"{s:06d}", "x.npy"), x[begin:begin + 4])
            np.save(self.path("mlp", f"{s:06d}", "y.npy"), y[begin:begin + 4])
        init = ["--weights", self.path("init.safetensors"), "--optimizer", "momentum", "--lr", "0.1", "--epochs", "2", "--json",
                "--device", "cpu"]
        sliced = self.train("--batch", "4", *init)
        folder = self.train(*init, data=["--data", self.path("mlp")])
        self.assertEqual(sliced.returncode, 0, sliced.stderr)
        self.assertEqual(folder.returncode, 0, folder.stderr)
        self.assertEqual([json.loads(v)["loss"] for v in folder.stdout.splitlines()],
                         [json.loads(v)["loss"] for v in sliced.stdout.splitlines()])

    def test_folder_errors_name_the_file_and_train_nothing(self):
        good = [(2, 3), (1, 4), (3, 2)]
        cases = []
        folder = self.make_folder("dtype", good)
        np.save(os.path.join(folder, "000002", "targets.npy"), np.zeros((3, 2), np.float32))
        cases.append((folder, f"{folder}/000002/targets.npy: input 'targets' must be i32[B, T] but is f32[3, 2]"))
        folder = self.make_folder("dims", good)
        np.save(os.path.join(folder, "000001", "targets.npy"), np.zeros((1, 5), np.int32))
        cases.append((folder, f"{folder}/000001/targets.npy: input 'targets' is i32[1, 5]: axis 1 should be T = 4 but is 5"))
        folder = self.make_folder("range", good + [(1, 65)])
        cases.append((folder, f"{folder}/000003/tokens.npy: input 'tokens' (i32[1, 65], axis 1): dim T = 65 is outside its range 1..64"))
        folder = self.make_folder("missing", good)
        os.remove(os.path.join(folder, "000000", "tokens.npy"))
        cases.append((folder, f"{folder}/000000/tokens.npy: missing (every step folder has a .npy file for each input of model "
                              "'main')"))
        folder = self.make_folder("extra", good)
        np.save(os.path.join(folder, "000001", "mask.npy"), np.zeros((1, 4), np.int32))
        cases.append((folder, f"{folder}/000001/mask.npy: model 'main' has no input 'mask' (its inputs: tokens, targets)"))
        folder = self.make_folder("gap", good)
        os.rename(os.path.join(folder, "000001"), os.path.join(folder, "000007"))
        cases.append((folder, f"--data {folder}: the step folders must be numbered 000000, 000001, ... without gaps; found "
                              "'000002' where '000001' belongs"))
        os.makedirs(self.path("empty"))
        cases.append((self.path("empty"), f"--data {self.path('empty')}: no step folders (000000, 000001, ...) in it"))
        cases.append((self.path("nowhere"), f"--data {self.path('nowhere')}: not a folder"))
        for folder, message in cases:
            with self.subTest(message=message):
                save = self.path("never.safetensors")
                p = self.train("--device", "cpu", "--save", save, model="lm.dnn", data=["--data", folder])
                self.assertEqual(p.returncode, 1)
                self.assertEqual(p.stdout, "")  # no step ran
                self.assertTrue(p.stderr.startswith("dnnc: error: " + message), p.stderr)
                self.assertFalse(os.path.exists(save))

    def test_worked_example_trains(self):
        """docs/training.md's worked example, shortened: scripts/charlm.py's folder of
        variable-length windows of examples/data/lighthouse.txt trains
        examples/train/charlm.dnn (a few steps, on the reference interpreter)."""
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        folder = self.path("charlm")
        p = subprocess.run([sys.executable, os.path.join(root, "scripts", "charlm.py"), "data",
                            os.path.join(root, "examples", "data", "lighthouse.txt"), folder, "--steps", "3", "--batch", "2"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run([self.exe, "train", os.path.join(root, "examples", "train", "charlm.dnn"), "--data", folder,
                            "--optimizer", "adam", "--lr", "3e-3", "--device", "ref", "--json"], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        losses = [json.loads(v)["loss"] for v in p.stdout.splitlines()]
        self.assertEqual(len(losses), 3)
        self.assertTrue(all(0 < v < 10 for v in losses), losses)  # cross-entropy over 128 codes, from random weights

    # --save and --resume

    def test_resume_continues_exactly(self):
        for optimizer in ("sgd", "momentum", "adam", "adamw"):
            for device in ("ref", "cpu"):
                with self.subTest(optimizer=optimizer, device=device):
                    common = ["--batch", "4", "--optimizer", optimizer, "--lr", "0.05", "--weight-decay", "0.01", "--json",
                              "--device", device, "--threads", "2"]
                    whole, half, resumed = (self.path(f"{optimizer}-{device}-{k}.safetensors") for k in ("5", "2", "2+3"))
                    p5 = self.train("--steps", "5", "--weights", self.path("init.safetensors"), "--save", whole, *common)
                    p2 = self.train("--steps", "2", "--weights", self.path("init.safetensors"), "--save", half, *common)
                    p3 = self.train("--steps", "5", "--resume", half + ".state", "--save", resumed, *common)
                    for p in (p5, p2, p3):
                        self.assertEqual(p.returncode, 0, p.stderr)
                    self.assertEqual([json.loads(v)["step"] for v in p3.stdout.splitlines()], [3, 4, 5])
                    self.assertEqual([json.loads(v)["loss"] for v in p3.stdout.splitlines()],
                                     [json.loads(v)["loss"] for v in p5.stdout.splitlines()][2:])
                    for name in (whole, whole + ".state"):
                        want, got = read_safetensors(name), read_safetensors(name.replace(whole, resumed))
                        self.assertEqual(sorted(want), sorted(got))
                        for k in want:
                            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name}: {k}")
                    state = read_safetensors(whole + ".state")
                    self.assertEqual(int(state["dnnc.step"]), 5)
                    names = {"sgd": [], "momentum": ["momentum_buffer"], "adam": ["exp_avg", "exp_avg_sq"],
                             "adamw": ["exp_avg", "exp_avg_sq"]}[optimizer]
                    self.assertEqual(sorted(state), sorted(["dnnc.step", "dnnc.optimizer", "w1", "b1", "w2"] +
                                                           [f"{p}.{n}" for p in ("w1", "b1", "w2") for n in names]))
        # The params file is what dnnc run --weights reads.
        p = subprocess.run([self.exe, "run", self.path("m.dnn"), "--weights", self.path("adam-cpu-5.safetensors"), "--input",
                            f"x={self.path('x.npy')}", "--input", f"y={self.path('y.npy')}", "--out", self.path("run")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)

    def tiny(self, name, source):
        """Writes the model NAME.dnn and the data x3.npy (two rows of three); returns where
        --save goes and the --data arguments."""
        with open(self.path(name + ".dnn"), "w") as f:
            f.write(source)
        np.save(self.path("x3.npy"), np.array([[1, 2, 3], [0.5, -1, 2]], np.float32))
        return self.path(name + ".safetensors"), ["--data", f"x={self.path('x3.npy')}"]

    def test_named_outputs_train_and_log_under_their_names(self):
        # A named output (or any) stopped training on cpu and cuda-sim ('output_names' does
        # not name every output: the step's update outputs had none), and ref logged out1.
        save, data = self.tiny("named", "dim B;\nparam w: f32[3] = full(1.0);\n"
                                        "model main(x: f32[B, 3]) -> (loss: f32[], wsum: f32[]) {\n  return (mean(x * w * w), sum(w));\n}\n")
        for device in ("cpu", "ref", "cuda-sim"):
            with self.subTest(device=device):
                p = self.train("--steps", "1", "--json", "--lr", "0.1", "--device", device, "--save", save, model="named.dnn", data=data)
                self.assertEqual(p.returncode, 0, p.stderr)
                log = json.loads(p.stdout.splitlines()[0])
                self.assertEqual((log["loss"], log["wsum"]), (1.25, 3.0))
                # d loss / dw_j = 2 w_j sum_b x_bj / 6 (the mean of 2 x 3), with w = 1
                np.testing.assert_allclose(read_safetensors(save)["w"], 1 - 0.1 * 2 * np.array([1.5, 1.0, 5.0]) / 6, rtol=1e-6)

    def test_param_the_loss_does_not_read_is_not_trained(self):
        # As PyTorch skips a parameter without a gradient: u, read only by a metric, was
        # moved by weight decay (sgd, adamw) or by Adam's decay-driven steps.
        save, data = self.tiny("u", "dim B;\nparam w: f32[3] = full(1.0);\nparam u: f32[3] = full(2.0);\n"
                                    "model main(x: f32[B, 3]) -> (f32[], f32[]) {\n  return (mean(x * w * w), sum(u));\n}\n")
        for optimizer in ("sgd", "adam", "adamw"):
            with self.subTest(optimizer=optimizer):
                p = self.train("--steps", "2", "--optimizer", optimizer, "--weight-decay", "0.5", "--save", save, model="u.dnn", data=data)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("note: param 'u' is not trained: the loss does not depend on it", p.stderr)
                saved = read_safetensors(save)
                np.testing.assert_array_equal(saved["u"], [2, 2, 2])
                self.assertTrue(np.all(saved["w"] < 1))
        # Nor through an index, a comparison or a cast to an integer: the loss reads v and
        # s, but no gradient reaches them (PyTorch's v.grad and s.grad stay None).
        save, data = self.tiny("argmax", "dim B;\nparam w: f32[3] = full(1.0);\nparam v: f32[3] = full(2.0);\n"
                                         "param s: f32[] = full(0.5);\nmodel main(x: f32[B, 3]) -> f32[] {\n"
                                         "  let i = cast(argmax(v), f32) + cast(cast(s * 4.0, i32), f32);\n"
                                         "  return mean(where(x > s, x * w * w, x)) + i;\n}\n")
        for device in ("ref", "cpu"):
            with self.subTest(device=device):
                p = self.train("--steps", "2", "--weight-decay", "0.5", "--device", device, "--save", save, model="argmax.dnn", data=data)
                self.assertEqual(p.returncode, 0, p.stderr)
                for name in ("v", "s"):
                    self.assertIn(f"note: param '{name}' is not trained: the loss does not depend on it", p.stderr)
                saved = read_safetensors(save)
                np.testing.assert_array_equal(saved["v"], [2, 2, 2])
                np.testing.assert_array_equal(saved["s"], 0.5)
                self.assertTrue(np.all(saved["w"] < 1))
        _, data = self.tiny("none", "param u: f32[3] = full(2.0);\nmodel main(x: f32[B, 3]) -> (f32[], f32[]) {\n  return (mean(x), sum(u));\n}\n")
        p = self.train("--steps", "1", model="none.dnn", data=data)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("model 'main' has no param to train: the loss depends on none of u", p.stderr)

    def test_resume_errors(self):
        save = self.path("c.safetensors")
        p = self.train("--steps", "2", "--optimizer", "adam", "--save", save, "--device", "ref")
        self.assertEqual(p.returncode, 0, p.stderr)
        cases = [
            (self.train("--steps", "4", "--optimizer", "sgd", "--resume", save + ".state", "--device", "ref"), 1,
             f"--resume {save}.state: it holds the state of --optimizer adam, not sgd"),
            (self.train("--steps", "2", "--optimizer", "adam", "--resume", save + ".state", "--device", "ref"), 1,
             f"--resume {save}.state: it is already at step 2, and this run ends at step 2"),
            (self.train("--steps", "4", "--optimizer", "adam", "--resume", save, "--device", "ref"), 1,
             f"--resume {save}: no tensor 'dnnc.optimizer' (is it a .state file that dnnc train --save wrote?)"),
            (self.train("--steps", "4", "--resume", save + ".state", "--weights", save), 2,
             "--resume continues from the params in its checkpoint: it takes no --weights"),
            (self.train("--steps", "4", "--save-every", "2"), 2, "--save-every needs --save OUT"),
            (self.train("--batch", "4", data=["--data", self.d]), 2,
             f"--batch slices NAME=X.npy data; the batches of --data {self.d} are its step folders"),
        ]
        # --save's place is checked before training, and a checkpoint that cannot be
        # written whole leaves nothing (a folder in the params' place left a new .state).
        folder = self.path("taken.safetensors")
        os.makedirs(folder)
        cases += [
            (self.train("--steps", "1", "--save", folder, "--device", "ref"), 1, f"cannot write '{folder}': it is a directory"),
            (self.train("--steps", "1", "--save", "/nonexistent/x.safetensors"), 1,
             "cannot write '/nonexistent/x.safetensors': the folder '/nonexistent' does not exist"),
            (self.train("--steps", "2", "--epochs", "5"), 2, "--epochs and --steps both say how long to train: give one"),
        ]
        state = read_safetensors(save + ".state")
        state["w1"] = state["w1"][:3]
        write_safetensors(self.path("bad.state"), state)
        cases.append((self.train("--steps", "4", "--optimizer", "adam", "--resume", self.path("bad.state"), "--device", "ref"), 1,
                      f"--resume {self.path('bad.state')}: 'w1' is f32[3, 8], but the model needs f32[6, 8]"))
        # Another model's state: what this step takes none of is named (in a note, an error
        # under --strict); it was accepted without a word.
        state = read_safetensors(save + ".state")
        state.update({"v": np.zeros(2, np.float32), "v.exp_avg": np.zeros(2, np.float32), "v.exp_avg_sq": np.zeros(2, np.float32)})
        write_safetensors(self.path("other.state"), state)
        unused = f"--resume {self.path('other.state')}: 3 tensors in it are used by no param of this training step: 'v', 'v.exp_avg', 'v.exp_avg_sq'"
        cases.append((self.train("--steps", "3", "--optimizer", "adam", "--resume", self.path("other.state"), "--device", "ref",
                                 "--strict"), 1, unused + " (--strict)"))
        p = self.train("--steps", "3", "--optimizer", "adam", "--resume", self.path("other.state"), "--device", "ref")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("dnnc: note: " + unused + "\n", p.stderr)
        for p, code, message in cases:
            with self.subTest(message=message):
                self.assertEqual(p.returncode, code, p.stderr)
                self.assertTrue(p.stderr.startswith("dnnc: error: " + message), p.stderr)
        self.assertFalse(os.path.exists(folder + ".state"))

    # SIGINT

    def interrupt(self, args, after_lines):
        """Starts a long training, sends SIGINT once `after_lines` log lines came, waits."""
        proc = subprocess.Popen([self.exe, "train", self.path("m.dnn"), "--data", f"x={self.path('x.npy')}", "--data",
                                 f"y={self.path('y.npy')}", "--steps", "100000000", "--batch", "4", "--device", "cpu", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(after_lines):
            self.assertTrue(proc.stdout.readline())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        return proc.returncode, err

    def test_sigint_leaves_the_last_complete_checkpoint(self):
        save = self.path("ck.safetensors")
        for attempt in range(3):  # SIGINT lands mid-write in some attempts and between writes in others: both must hold
            with self.subTest(attempt=attempt):
                code, err = self.interrupt(["--save", save, "--save-every", "1", "--optimizer", "momentum", "--json"],
                                           after_lines=5 + 20 * attempt)
                self.assertEqual(code, 130, err)
                self.assertRegex(err, r"^dnnc: interrupted; the last complete checkpoint is step [0-9]+ in "
                                      rf"{save} \(resume with --resume {save}\.state\)\n$")
                self.assertEqual(sorted(os.listdir(self.d)),
                                 sorted(["m.dnn", "lm.dnn", "x.npy", "y.npy", "init.safetensors", "ck.safetensors",
                                         "ck.safetensors.state"]))  # no .tmp file
                state, params = read_safetensors(save + ".state"), read_safetensors(save)
                self.assertEqual(int(err.split("step ")[1].split()[0]), int(state["dnnc.step"]))
                for k in params:  # the two files are the same checkpoint
                    np.testing.assert_array_equal(params[k], state[k])
                done = int(state["dnnc.step"])
                p = self.train("--steps", str(done + 2), "--batch", "4", "--optimizer", "momentum", "--resume", save + ".state",
                               "--device", "cpu", "--json")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual([json.loads(v)["step"] for v in p.stdout.splitlines()], [done + 1, done + 2])

    def test_sigint_before_a_checkpoint_leaves_none(self):
        save = self.path("none.safetensors")
        code, err = self.interrupt(["--save", save, "--save-every", "100000000"], after_lines=2)
        self.assertEqual(code, 130, err)
        self.assertEqual(err, "dnnc: interrupted; no checkpoint was written\n")
        self.assertFalse([f for f in os.listdir(self.d) if f.startswith("none")])


if __name__ == "__main__":
    run_with_exe(TrainCli)

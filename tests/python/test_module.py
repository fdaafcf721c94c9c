#!/usr/bin/env python3
"""The Python module (docs/python.md, spec interop.md §17), imported from the build tree
by /usr/bin/python3:

- load once, run at several batch sizes: equal to `dnnc run` on the same inputs and
  weights and to NumPy; the same from a built artifact;
- several outputs as a tuple (and by name with run()), named outputs, an EDO model;
- inputs / outputs / dims / shapes() against `dnnc shapes --json` and the REPL's :dims;
  memory() and solve_memory() against the REPL's :mem and :solve;
- inputs read in place: a C-contiguous array of the input's dtype is not copied (run
  twice, input_copies stays 0), a strided one is copied once and gives the same result;
  DLPack producers (a wrapper object here, PyTorch tensors when torch imports) likewise;
- errors carry dnnc's text: a parse error with file:line:col, a missing file, a wrong
  input name, dtype, rank and shape, a missing input, a bad device, bad dims;
- the GIL is released while a model runs (another Python thread runs meanwhile), and
  threads calling models at once get what lone calls give;
- dnnc.train gives the losses and params of the `dnnc train` CLI.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "numerics"))
from dnnc_test_util import read_safetensors, write_safetensors  # noqa: E402
from test_train import MODEL as CLASSIFIER  # noqa: E402  (a loss and an accuracy)

import dnnc  # noqa: E402  (PYTHONPATH=<build>/python, set by ctest)

EXE = EXAMPLES = None

TWO_OUTPUTS = """dim B;
dim D in 1..64;
param w: f32[D, 3];
model main(x: f32[B, D]) -> (total: f32[B], proj: f32[B, 3]) {
  return (sum(x, axis = 1), x @ w);
}
"""



def mlp_weights(rng):
    return {"w1": (rng.standard_normal((784, 512)) * 0.05).astype(np.float32),
            "b1": (rng.standard_normal(512) * 0.1).astype(np.float32),
            "w2": (rng.standard_normal((512, 10)) * 0.05).astype(np.float32),
            "b2": (rng.standard_normal(10) * 0.1).astype(np.float32)}


def mlp_numpy(p, x):
    h = np.maximum(x.astype(np.float64) @ p["w1"] + p["b1"], 0)
    z = h @ p["w2"] + p["b2"]
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class DLPackOnly:
    """A DLPack producer that is not an ndarray (as a PyTorch tensor is)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class Module(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.d = self.dir.name
        self.rng = np.random.default_rng(3)
        self.mlp = os.path.join(EXAMPLES, "mlp.dnn")
        self.p = mlp_weights(self.rng)
        self.w = self.path("mlp.safetensors")
        write_safetensors(self.w, self.p)

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.d, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def cli_run(self, model, inputs, weights=None):
        args = [EXE, "run", model, "--device", "cpu", "--out", self.path("out")]
        if weights:
            args += ["--weights", weights]
        for name, a in inputs.items():
            np.save(self.path(name + ".npy"), a)
            args += ["--input", f"{name}={self.path(name + '.npy')}"]
        p = subprocess.run(args, capture_output=True, text=True, check=True)
        names = re.findall(r"^(\w+): .* -> ", p.stdout, re.M)
        return [np.load(self.path(os.path.join("out", n + ".npy"))) for n in names]

    def repl(self, model, lines):
        p = subprocess.run([EXE, "repl", model], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
        return p.stdout.splitlines()

    def error(self, fn, *args, **kwargs):
        with self.assertRaises(dnnc.Error) as e:
            fn(*args, **kwargs)
        return str(e.exception)

    # -- running --------------------------------------------------------------------------

    def test_run_matches_cli_and_numpy_at_several_batches(self):
        m = dnnc.load(self.mlp, device="cpu", weights=self.w)
        for b in (1, 3, 17, 2):  # one load, every batch size
            x = self.rng.standard_normal((b, 784)).astype(np.float32)
            y = m(x=x)
            self.assertIsInstance(y, np.ndarray)
            self.assertEqual((y.shape, y.dtype), ((b, 10), np.float32))
            np.testing.assert_allclose(y, mlp_numpy(self.p, x), rtol=1e-4, atol=1e-6)
            np.testing.assert_array_equal(y, self.cli_run(self.mlp, {"x": x}, self.w)[0])
            np.testing.assert_array_equal(y, m(x))  # positionally
        self.assertEqual(m.input_copies, 0)

    def test_artifact_runs_as_the_source(self):
        artifact = self.path("mlp.dnnc")
        subprocess.run([EXE, "build", self.mlp, "-o", artifact], check=True)
        a = dnnc.load(artifact, weights=self.w)
        m = dnnc.load(self.mlp, device="cpu", weights=self.w)
        for b in (2, 5):
            x = self.rng.standard_normal((b, 784)).astype(np.float32)
            np.testing.assert_array_equal(a(x=x), m(x=x))
        self.assertEqual(list(a.inputs), ["x"])
        self.assertIn("needs the model's .dnn source: '" + artifact + "' is a built artifact", self.error(a.memory, B=2))
        self.assertIn("was built for cpu, not for device='cuda'", self.error(dnnc.load, artifact, device="cuda"))

    def test_two_artifacts_loaded_at_once_run_their_own_kernels(self):
        # The second artifact's kernels, opened from /proc/self/fd/N with the first's N
        # reused, were the first one's (same kernel names): sums over 4 columns for 8.
        paths = []
        for width in (4, 8):
            src = self.write(f"sum{width}.dnn", f"dim B;\nmodel main(x: f32[B, {width}]) -> f32[B] {{\n  return sum(x, axis = -1);\n}}\n")
            paths.append(self.path(f"sum{width}.dnnc"))
            subprocess.run([EXE, "build", src, "-o", paths[-1]], check=True, capture_output=True)
        a, b = (dnnc.load(p) for p in paths)
        np.testing.assert_array_equal(b(np.ones((2, 8), np.float32)), [8, 8])
        np.testing.assert_array_equal(a(np.ones((4, 4), np.float32)), [4, 4, 4, 4])

    def test_include_takes_one_folder_as_a_string(self):
        # include="lib" is one folder, as weights="w.safetensors" is one file (it was split
        # into the characters 'l', 'i', 'b': "cannot find module 'helpers'").
        os.makedirs(self.path("lib"))
        with open(self.path("lib/helpers.dnn"), "w") as f:
            f.write("fn twice(x: f32[N]) -> f32[N] {\n  return x * 2.0;\n}\n")
        src = self.write("uses.dnn", "import helpers;\nmodel main(x: f32[3]) -> f32[3] {\n  return helpers.twice(x);\n}\n")
        m = dnnc.load(src, device="cpu", include=self.path("lib"))
        np.testing.assert_array_equal(m(np.arange(3, dtype=np.float32)), [0, 2, 4])

    def test_several_outputs_named(self):
        src = self.write("two.dnn", TWO_OUTPUTS)
        w = {"w": self.rng.standard_normal((5, 3)).astype(np.float32)}
        write_safetensors(self.path("two.safetensors"), w)
        m = dnnc.load(src, device="cpu", weights=self.path("two.safetensors"))
        self.assertEqual(m.outputs, {"total": "f32[B]", "proj": "f32[B, 3]"})
        for b in (1, 4):
            x = self.rng.standard_normal((b, 5)).astype(np.float32)
            total, proj = m(x=x)
            np.testing.assert_allclose(total, x.sum(1), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(proj, x @ w["w"], rtol=1e-5, atol=1e-6)
            named = m.run(x=x)
            self.assertEqual(list(named), ["total", "proj"])
            np.testing.assert_array_equal(named["proj"], proj)
            for got, want in zip((total, proj), self.cli_run(src, {"x": x}, self.path("two.safetensors"))):
                np.testing.assert_array_equal(got, want)

    def test_edo_model_tuple_matches_cli(self):
        detect = os.path.join(EXAMPLES, "detect.dnn")
        write_safetensors(self.path("d.safetensors"), {"wcls": self.rng.standard_normal((64, 20)).astype(np.float32)})
        m = dnnc.load(detect, device="cpu", weights=self.path("d.safetensors"))
        self.assertEqual(list(m.outputs), ["out0", "out1"])
        for a in (7, 40, 3):
            feats = self.rng.standard_normal((a, 64)).astype(np.float32)
            boxes = self.rng.standard_normal((a, 4)).astype(np.float32)
            out = m(feats, boxes=boxes)
            self.assertIsInstance(out, tuple)
            want = self.cli_run(detect, {"feats": feats, "boxes": boxes}, self.path("d.safetensors"))
            self.assertEqual(len(out), 2)
            for got, w in zip(out, want):
                np.testing.assert_array_equal(got, w)

    def test_params_from_initializers_are_named_in_a_warning(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m = dnnc.load(self.mlp, device="cpu")
            m(x=np.zeros((1, 784), np.float32))
        texts = [str(w.message) for w in caught]
        self.assertIn("dnnc: param 'w1' (f32[784, 512]) filled from its initializer normal(0.0, 0.02): no weights were given",
                      texts)

    # -- introspection --------------------------------------------------------------------

    def test_inputs_outputs_dims_shapes(self):
        tf = os.path.join(EXAMPLES, "transformer.dnn")
        m = dnnc.load(tf, device="ref")
        cli = json.loads(subprocess.run([EXE, "shapes", tf, "--bind", "B=2,T=7", "--json"], capture_output=True, text=True,
                                        check=True).stdout)
        self.assertEqual(m.inputs, {"tokens": "i32[B, T]"})
        self.assertEqual(list(m.outputs), ["out0"])
        shapes = m.shapes(B=2, T=7)
        self.assertEqual(shapes, {v["name"]: v for v in cli["values"]})
        self.assertEqual(shapes["tokens"]["dims"], [2, 7])
        # :dims lines are "NAME  in LO..HI  ..."
        for line in self.repl(tf, [":dims"]):
            name, lo, hi = re.match(r"(\w+)\s+in (\d+)\.\.(\w+)", line).groups()
            self.assertEqual(m.dims[name], (int(lo), None if hi == "inf" else int(hi)), line)
        self.assertEqual(set(m.dims), {re.match(r"\w+", l).group(0) for l in self.repl(tf, [":dims"])})
        self.assertIn("model 'main' has no dim 'Q' (its dims: ", self.error(m.shapes, Q=3))
        self.assertIn("the value of dim 'B' must be an int, not str", self.error(m.shapes, B="2"))

    def test_memory_and_solve_match_the_repl(self):
        tf = os.path.join(EXAMPLES, "transformer.dnn")
        m = dnnc.load(tf, device="ref")
        mem = m.memory(B=8, T=128)
        lines = self.repl(tf, [":bind B=8 T=128", ":mem"])
        arena = int(re.search(r"^arena: (\d+) bytes", "\n".join(lines), re.M).group(1))
        params, count, inputs, outputs = map(int, re.search(
            r"params: (\d+) bytes \((\d+) tensors\); inputs: (\d+) bytes; outputs: (\d+) bytes", "\n".join(lines)).groups())
        self.assertEqual((mem["arena"], mem["params"], mem["param_tensors"], mem["inputs"], mem["outputs"]),
                         (arena, params, count, inputs, outputs))
        # Unbound: formulas, as the REPL prints them.
        formula = m.memory()["arena"]
        self.assertIsInstance(formula, str)
        self.assertIn(f"arena: {formula} bytes", self.repl(tf, [":mem"]))
        for limit, dims in (("16MiB", {"T": 128}), ("1GiB", {"T": 32}), ("1KiB", {"T": 64})):
            line = self.repl(tf, [f":bind T={dims['T']}", f":solve mem <= {limit} for B"])[-1]
            got = m.solve_memory(limit, "B", **dims)
            if line.startswith("no value"):
                self.assertIsNone(got, line)
            elif line.startswith("any value"):
                self.assertEqual(got, int(re.search(r"B = (\d+) needs", line).group(1)), line)
            else:
                self.assertEqual(f"B = {got}", line)
        self.assertIn("the arena also depends on T: pass it", self.error(m.solve_memory, "16GiB", "B"))
        self.assertIn("'16 gigs' is not a memory size", self.error(m.solve_memory, "16 gigs", "B", T=8))
        self.assertIn("model 'main' has no dim 'Z'", self.error(m.solve_memory, "16GiB", "Z", T=8))

    # -- zero copy and DLPack -------------------------------------------------------------

    def test_inputs_are_read_in_place_when_their_layout_allows(self):
        m = dnnc.load(self.mlp, device="cpu", weights=self.w)
        x = self.rng.standard_normal((4, 784)).astype(np.float32)
        before = x.copy()
        y1, y2 = m(x=x), m(x=x)
        self.assertEqual(m.input_copies, 0)
        np.testing.assert_array_equal(x, before)  # read in place, never written
        wide = self.rng.standard_normal((4, 1568)).astype(np.float32)
        strided = wide[:, ::2]  # not C-contiguous: copied once
        self.assertFalse(strided.flags.c_contiguous)
        np.testing.assert_array_equal(m(x=strided), m(x=np.ascontiguousarray(strided)))
        self.assertEqual(m.input_copies, 1)
        np.testing.assert_array_equal(y1, y2)
        # The outputs are arrays NumPy owns through the runtime's buffer: writable, alive
        # after the model is gone.
        del m
        y1[0, 0] = 5
        self.assertEqual(y1[0, 0], 5)

    def test_dlpack_producers(self):
        m = dnnc.load(self.mlp, device="cpu", weights=self.w)
        x = self.rng.standard_normal((3, 784)).astype(np.float32)
        np.testing.assert_array_equal(m(x=DLPackOnly(x)), m(x=x))
        self.assertEqual(m.input_copies, 0)
        try:
            import torch
        except ImportError:
            print("torch does not import here: the DLPack path was checked with a NumPy-backed producer only")
            return
        np.testing.assert_array_equal(m(x=torch.from_numpy(x)), m(x=x))
        self.assertEqual(m.input_copies, 0)

    # -- errors ---------------------------------------------------------------------------

    def test_errors_carry_dnnc_text(self):
        bad = self.write("bad.dnn", "dim B;\nmodel main(x: f32[B]) -> f32[B] {\n  return x +;\n}\n")
        text = self.error(dnnc.load, bad)
        self.assertRegex(text, "^" + re.escape(bad) + r":3:13: error: mismatched input ';' expecting .* \[parse-error\]\n")
        self.assertTrue(text.endswith("    3 |   return x +;\n      |             ^"), text)  # as the CLI renders it
        self.assertIn("error:", self.error(dnnc.load, self.path("none.dnn")))
        self.assertIn("none.dnn", self.error(dnnc.load, self.path("none.dnn")))
        self.assertEqual(self.error(dnnc.load, self.mlp, device="tpu"),
                         "unknown device 'tpu' (devices: auto, cpu, cuda, ref, cuda-sim)")
        self.assertEqual(self.error(dnnc.load, self.mlp, model="other"), "no model named 'other'")
        m = dnnc.load(self.mlp, device="cpu", weights=self.w)
        x = np.zeros((2, 784), np.float32)
        self.assertEqual(self.error(m, z=x), "model 'main' has no input 'z' (its inputs: x)")
        self.assertEqual(self.error(m), "no value for an input of model 'main': 'x' (f32[B, 784])")
        self.assertEqual(self.error(m, x, x), "model 'main' takes 1 inputs, but 2 were given")
        self.assertEqual(self.error(m, x, x=x), "input 'x' is given twice")
        # Dims past 64 bits, or past the largest dnnc gives a dim: dnnc.Error, not a cast error.
        self.assertEqual(self.error(m.shapes, B=2**70), "the value of dim 'B' does not fit in 64 bits: 1180591620717411303424")
        self.assertEqual(self.error(m.shapes, B=2**62), "B = 4611686018427387904 is past the largest value dnnc gives a dim, "
                                                        "2305843009213693951")
        self.assertEqual(self.error(m, x=x.astype(np.float64)),
                         "input 'x' must be f32[B, 784] (numpy.float32) but is a float64 array of shape (2, 784): "
                         "convert it with .astype(numpy.float32)")
        self.assertEqual(self.error(m, x=np.zeros(784, np.float32)), "input 'x' must have rank 2 (f32[B, 784]) but is f32[784]")
        self.assertIn("input 'x' is f32[2, 783]: axis 1 should be 784", self.error(m, x=np.zeros((2, 783), np.float32)))
        self.assertEqual(self.error(m, x="text"), "input 'x' must be f32[B, 784] (numpy.float32) but is a <U4 array of shape (): "
                                                  "convert it with .astype(numpy.float32)")
        write_safetensors(self.path("part.safetensors"), {"w1": self.p["w1"]})
        # Params with static shapes load with the model: their errors are the load's.
        text = self.error(dnnc.load, self.mlp, device="cpu", weights=self.path("part.safetensors"))
        for name in ("'b1'", "'w2'", "'b2'", "random_params=True"):
            self.assertIn(name, text)
        self.assertEqual(self.error(dnnc.load, self.mlp, weights=self.path("none.safetensors")),
                         f"cannot read '{self.path('none.safetensors')}': No such file or directory")

    # -- the GIL --------------------------------------------------------------------------

    def test_gil_is_released_while_a_model_runs(self):
        # With a switch interval of 100 s no thread is preempted: the main thread, woken
        # by `entered`, gets the GIL only when the worker gives it up. The worker does so
        # inside the model's run; were the GIL held there, the main thread would run only
        # once the run had returned (`finished` set).
        m = dnnc.load(self.mlp, device="cpu", weights=self.w)
        x = self.rng.standard_normal((3000, 784)).astype(np.float32)
        entered, state = threading.Event(), {"finished": False}

        def work():
            entered.set()
            for _ in range(3):
                m(x=x)
            state["finished"] = True

        old = sys.getswitchinterval()
        sys.setswitchinterval(100)
        try:
            t = threading.Thread(target=work)
            t.start()
            entered.wait()
            ran_during = not state["finished"]
            progress = sum(range(1000))  # Python work while the model runs
        finally:
            sys.setswitchinterval(old)
        t.join()
        self.assertTrue(ran_during, "the main thread ran only after the model had finished: the GIL was held")
        self.assertEqual(progress, 499500)
        self.assertTrue(state["finished"])

    def test_threads_running_models_at_once_take_turns(self):
        # Two models and one shared between threads, called at the same time: each
        # result is what a lone call gives.
        a = dnnc.load(self.mlp, device="cpu", weights=self.w)
        b = dnnc.load(self.mlp, device="cpu", weights=self.w)
        xs = [self.rng.standard_normal((n, 784)).astype(np.float32) for n in (300, 7, 120, 1, 64, 33)]
        want = [a(x=x) for x in xs]
        got = [None] * len(xs)

        def work(k):
            got[k] = (a if k % 3 else b)(x=xs[k])

        threads = [threading.Thread(target=work, args=(k,)) for k in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)

    # -- training -------------------------------------------------------------------------

    def test_train_matches_the_cli(self):
        src = self.write("cls.dnn", CLASSIFIER)
        x = self.rng.standard_normal((10, 6)).astype(np.float32)
        y = np.eye(3, dtype=np.float32)[self.rng.integers(0, 3, 10)]
        init = {"w1": (self.rng.standard_normal((6, 8)) * 0.5).astype(np.float32),
                "b1": (self.rng.standard_normal(8) * 0.1).astype(np.float32),
                "w2": (self.rng.standard_normal((8, 3)) * 0.5).astype(np.float32)}
        write_safetensors(self.path("init.safetensors"), init)
        np.save(self.path("x.npy"), x)
        np.save(self.path("y.npy"), y)
        for optimizer in ("adam", "sgd"):
            p = subprocess.run([EXE, "train", src, "--data", f"x={self.path('x.npy')}", "--data", f"y={self.path('y.npy')}",
                                "--batch", "4", "--steps", "5", "--optimizer", optimizer, "--lr", "0.01", "--device", "cpu",
                                "--weights", self.path("init.safetensors"), "--json", "--save", self.path("cli.safetensors")],
                               capture_output=True, text=True, check=True)
            cli = [json.loads(line) for line in p.stdout.splitlines()]
            r = dnnc.train(src, data={"x": x, "y": y}, optimizer=optimizer, lr=0.01, batch=4, steps=5, device="cpu",
                           weights=self.path("init.safetensors"), save=self.path("py.safetensors"))
            self.assertEqual(r["steps"], 5)
            self.assertEqual(r["losses"], [s["loss"] for s in cli])
            self.assertEqual(r["metrics"], [{"accuracy": s["accuracy"]} for s in cli])
            saved = read_safetensors(self.path("cli.safetensors"))
            self.assertEqual(set(r["params"]), set(saved))
            for name, value in saved.items():
                np.testing.assert_array_equal(r["params"][name], value)
                np.testing.assert_array_equal(read_safetensors(self.path("py.safetensors"))[name], value)
        self.assertIn("unknown optimizer 'adagrad'", self.error(dnnc.train, src, data={"x": x, "y": y}, optimizer="adagrad"))
        self.assertEqual(self.error(dnnc.train, src, data={"x": x}), "no data for input 'y' of model 'main'")
        self.assertEqual(self.error(dnnc.train, src, data={"x": x.astype(np.float64), "y": y}),
                         "the data for input 'x' are float64: dnnc takes float32, float16, int32, int64 or bool")
        self.assertIn("input 'y' must have rank 2", self.error(dnnc.train, src, data={"x": x, "y": y[:, 0]}))
        self.assertEqual(self.error(dnnc.train, src, data={"x": x, "q": y}), "model 'main' has no input 'q' (its inputs: x, y)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--examples", required=True)
    a, rest = ap.parse_known_args()
    EXE, EXAMPLES = a.dnnc, a.examples
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

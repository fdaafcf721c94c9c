#!/usr/bin/env python3
"""Compiled loops (runtime/Executable.h, loop paths) against the reference interpreter
(--device ref): `for` loops whose steps after the first replay prepared launches on the
CPU, and loops that must stay walked op by op, at T = 0, 1, 2, odd T, B = 1 and odd B,
with 1 and 2 threads. Each run's `--profile` must name the path the loop took (and why
it was refused), so a loop that silently left the fast path fails here."""
import os
import re
import tempfile
import unittest

import numpy as np

from dnnc_test_util import assert_matches, run_on_devices

# name: (source, {param: shape in I, H}, the path each loop takes at T >= 2, in program
# order: "compiled" or the start of the reason it is walked)
MODELS = {
    # The LSTM of examples/lstm.dnn at small sizes: a counter-indexed input, two carried
    # values, GEMMs and fused gates.
    "lstm": ("""import nn;
const I = 5; const H = 7;
dim B in 0..64; dim T in 0..64;
param wx: f32[I, 4 * H];
param wh: f32[H, 4 * H];
param b: f32[4 * H];
model main(xs: f32[B, T, I]) -> (f32[B, H], f32[B, H]) {
  var h = zeros([B, H]);
  var c = zeros([B, H]);
  for t in 0..T {
    let (h2, c2) = nn.lstm_cell(xs[:, t], h, c, wx, wh, b);
    h = h2;
    c = c2;
  }
  return (h, c);
}
""", {"wx": ("I", "4H"), "wh": ("H", "4H"), "b": ("4H",)}, ["compiled"]),
    # A carried value that also flows out of the loop unchanged in one position, the
    # counter used as a number, and a result read after the loop.
    "counter": ("""dim B in 0..64; dim T in 0..64;
param w: f32[5, 5];
model main(xs: f32[B, T, 5]) -> (f32[B, 5], f32[B, 5]) {
  var h = zeros([B, 5]);
  var keep = sum(xs, axis = 1);
  for t in 0..T {
    h = tanh(h @ w + xs[:, t] * cast(t, f32) * 0.1);
    keep = keep;
  }
  return (h, keep * 2.0);
}
""", {"w": (5, 5)}, ["compiled"]),
    # An index computed from the counter is data to the runtime: walked, with the host
    # checking each step's index.
    "halves": ("""dim B in 0..64; dim T in 0..64;
model main(xs: f32[B, T, 3]) -> f32[B, 3] {
  var h = zeros([B, 3]);
  for t in 0..T {
    h = tanh(h * 0.5 + xs[:, t / 2]);
  }
  return h;
}
""", {}, ["indices read from data: 'index' at line 5"]),
    # T - 1 - t: T's value, made on the host, is the same every step (no reason to walk),
    # but the index it makes with the counter is data to the runtime: walked.
    "reverse": ("""dim B in 0..64; dim T in 0..64;
model main(xs: f32[B, T, 3]) -> f32[B, 3] {
  var h = zeros([B, 3]);
  for t in 0..T {
    h = tanh(h * 0.5 + xs[:, T - 1 - t]);
  }
  return h;
}
""", {}, ["indices read from data: 'index' at line 5"]),
    # Yields that swap carried values: copying one carried buffer over another would read
    # an overwritten one, so it is walked.
    "swap": ("""dim B in 0..64; dim T in 0..64;
model main(xs: f32[B, T, 3]) -> f32[B, 3] {
  var a = zeros([B, 3]);
  var b = a + 1.0;
  for t in 0..T {
    let s = tanh(a + b + xs[:, t]);
    a = b;
    b = s;
  }
  return a * 3.0 + b;
}
""", {}, ["carried value 0 yields carried value 1"]),
    # Yields that exchange two carried values outright (each arg the other's yield): the
    # walk copies every yield before any carried value is replaced.
    "exchange": ("""dim B in 0..64; dim T in 0..64;
model main(xs: f32[B, T, 3]) -> f32[B, 3] {
  var a = zeros([B, 3]);
  var b = a + 1.0;
  var c = a;
  for t in 0..T {
    let s = a;
    a = b;
    b = s;
    c = c * 0.5 + xs[:, t] + a;
  }
  return a * 3.0 + b + c;
}
""", {}, ["carried value 0 yields carried value 1"]),
    # Carried values updated by the host's index_add: `acc`, read by nothing else, in place
    # in its carried buffer (a training step's stash rows and gradient sums); `seen`, whose
    # old value is read after its update, into a copy.
    "index_add": ("""dim B in 0..64; dim T in 0..64;
model main(xs: f32[B, T, 3]) -> (f32[T, B, 3], f32[4, B, 3]) {
  var acc = zeros([T, B, 3]);
  var seen = zeros([4, B, 3]) + 1.0;
  for t in 0..T {
    let before = seen;
    seen = index_add(seen, reshape(t % 4, [1]), reshape(xs[:, t], [1, B, 3]), axis = 0);
    acc = index_add(acc, reshape(t, [1]), reshape(xs[:, t] * 2.0 + before[t % 4], [1, B, 3]), axis = 0);
  }
  return (acc, seen);
}
""", {}, ["a host op"]),
    # A nested loop: the outer one holds control flow and is walked; the inner one, run
    # anew at each outer step, is compiled.
    "nested": ("""dim B in 0..64; dim T in 0..64;
param w: f32[4, 4];
model main(xs: f32[B, T, 4]) -> f32[B, 4] {
  var h = zeros([B, 4]);
  for t in 0..T {
    var g = h;
    for k in 0..3 {
      g = tanh(g @ w + xs[:, t]);
    }
    h = g * 0.5 + h;
  }
  return h;
}
""", {"w": (4, 4)}, ["nested control flow", "compiled"]),
    # The body's last op is elementwise and may write in place over an operand that dies
    # there, but `t0`, made before the loop, does not: the next step reads it again. The
    # plan put the sum over `t0`.
    "held_outside": ("""dim B in 0..64; dim T in 0..64;
model main(xs: f32[B, T, 3]) -> f32[B, 3] {
  let t0 = exp(sum(xs, axis = 1) * 0.1);
  var s = zeros([B, 3]);
  for t in 0..T {
    s = s + t0;
  }
  return s;
}
""", {}, ["compiled"]),
    # Nor does `a`, a yield, copied after the body: the plan put `c` over it.
    "held_yield": ("""dim B in 0..64; dim T in 0..64;
model main(xs: f32[B, T, 3]) -> (f32[B, 3], f32[B, 3]) {
  var a = zeros([B, 3]);
  var c = a;
  for t in 0..T {
    a = xs[:, t] + 1.0;
    c = a * 2.0;
  }
  return (a, c);
}
""", {}, ["compiled"]),
}
SHAPES = [(1, 0), (1, 1), (1, 2), (3, 1), (3, 7), (1, 13), (5, 4), (8, 33)]
THREADS = [1, 2]


def param_shape(dims, consts):
    out = []
    for d in dims:
        out.append(d if isinstance(d, int) else (4 * consts[d[1:]] if d.startswith("4") else consts[d]))
    return tuple(out)


def loop_lines(stdout):
    return [l for l in stdout.splitlines() if l.startswith("loop at ")]


def make_test(name, source, params, paths):
    def test(self):
        rng = np.random.default_rng(sum(map(ord, name)))
        consts = {"I": 5, "H": 7}
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, f"{name}.dnn")
            with open(model, "w") as f:
                f.write(source)
            weights = {p: (rng.standard_normal(param_shape(s, consts)) * 0.5).astype(np.float32) for p, s in params.items()}
            width = int(re.search(r"xs: f32\[B, T, (\w+)\]", source).group(1).replace("I", "5"))
            for b, t in SHAPES:
                x = rng.standard_normal((b, t, width)).astype(np.float32)
                want, p = self.ref.run(model, weights or None, {"xs": x})
                self.assertEqual(p.returncode, 0, p.stderr)
                for threads in THREADS:
                    where = f"{name} at B={b}, T={t}, --threads {threads}"
                    got, p = self.cpu.run(model, weights or None, {"xs": x}, ("--threads", str(threads), "--profile"))
                    self.assertEqual(p.returncode, 0, f"{where}: {p.stderr}")
                    self.assertEqual(len(got), len(want), where)
                    for g, w in zip(got, want):
                        self.assertEqual(g.shape, w.shape, where)
                        assert_matches(g, w, 1e-5, 1e-5, where)
                    lines = loop_lines(p.stdout)
                    ran = paths if t > 0 else paths[:1]  # an inner loop runs only in an outer step
                    self.assertEqual(len(lines), len(ran), f"{where}: {p.stdout}")
                    for line, path in zip(lines, ran):
                        # A nested loop never runs when the outer one has no steps.
                        inner_t = 3 if path == paths[-1] and len(paths) > 1 else t
                        if inner_t < 2:
                            self.assertIn("interpreted op by op: fewer than two iterations", line, where)
                        elif path == "compiled":
                            self.assertRegex(line, r": compiled: after the first, each step replays \d+ kernel launch", where)
                        else:
                            self.assertIn(f"interpreted op by op: {path}", line, where)
    return test


class Loops(unittest.TestCase):
    def test_index_out_of_range_in_compiled_loop_is_located(self):
        """A compiled loop checks the counter's indices for every step at once: its error
        names the op and line as the walk's does (it named neither)."""
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "past_end.dnn")
            with open(model, "w") as f:
                f.write("dim B;\nmodel main(x: f32[B, 3]) -> f32[3] {\n  var s = zeros([3]);\n"
                        "  for i in 0..B+1 {\n    s = s + x[i];\n  }\n  return s;\n}\n")
            x = np.arange(15, dtype=np.float32).reshape(5, 3)
            for runner in (self.ref, self.cpu):
                _, p = runner.run(model, None, {"x": x})
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertEqual(p.stderr.strip().splitlines()[-1],
                                 "dnnc: error: 'index' at line 5: index 5 is out of range for dim 0 of f32[5, 3] (size 5)")

    def test_profile_of_walked_loop_names_the_device(self):
        """cuda-sim keeps memory of its own: its loops are walked, and the profile says so."""
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "swap.dnn")
            with open(model, "w") as f:
                f.write(MODELS["lstm"][0])
            rng = np.random.default_rng(3)
            weights = {p: rng.standard_normal(param_shape(s, {"I": 5, "H": 7})).astype(np.float32)
                       for p, s in MODELS["lstm"][1].items()}
            x = rng.standard_normal((2, 4, 5)).astype(np.float32)
            want, p = self.ref.run(model, weights, {"xs": x})
            self.assertEqual(p.returncode, 0, p.stderr)
            got, p = self.sim.run(model, weights, {"xs": x}, ("--profile",))
            self.assertEqual(p.returncode, 0, p.stderr)
            for g, w in zip(got, want):
                assert_matches(g, w, 1e-5, 1e-5)
            self.assertEqual(loop_lines(p.stdout),
                             ["loop at line 10: interpreted op by op: the device keeps memory of its own (4 steps in 1 run)"])


for _name, (_source, _params, _paths) in MODELS.items():
    setattr(Loops, f"test_{_name}", make_test(_name, _source, _params, _paths))


if __name__ == "__main__":
    run_on_devices(Loops, ref="ref", cpu="cpu", sim="cuda-sim")

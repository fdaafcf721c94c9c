#!/usr/bin/env python3
"""grad(y, x) checked against central finite differences in float64 NumPy.

Each case is one op (or a small composition) in a model that takes its operands as inputs,
forms loss = sum(op(...) * r) with a random r (so every element of the op's result counts
with its own weight) and returns grad(loss, [operands]). The NumPy twin of the op gives
the finite differences. Every case runs at three bindings of its dims (size 1, odd, even)
on the reference interpreter, the CPU and the simulated GPU.
"""
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnnc_test_util import conv2d_ref, dropout_keep, run_with_exe  # noqa: E402

erf = np.vectorize(math.erf)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def index_add(x, idx, src):
    out = x.copy()
    np.add.at(out, (slice(None), idx), src)
    return out


def pool2d(x, k, stride=None, padding=0, op="max"):
    """max_pool2d (padding never wins) or avg_pool2d counting the padding (PyTorch's default)."""
    stride = stride or k
    fill = -np.inf if op == "max" else 0.0
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=fill)
    oh, ow = (x.shape[2] - k) // stride + 1, (x.shape[3] - k) // stride + 1
    wins = np.stack([x[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
                     for i in range(k) for j in range(k)])
    return wins.max(0) if op == "max" else wins.mean(0)


def topk(x, k, axis):
    return -np.sort(-x, axis=axis).take(range(k), axis=axis)


def logsumexp(x, axis):
    m = x.max(axis, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis, keepdims=True))).squeeze(axis)


# name: (expression over a, b, c; NumPy twin; operand shapes; result shape; value kind)
# Shapes use the dims M and N. Kinds: "any" (away from 0), "pos" (positive), "distinct",
# "zeros" (every third element exactly 0).
MN, N_, M_ = "M, N", "N", "M"
CASES = {
    "neg": ("neg(a)", lambda a: -a, [MN], MN, "any"),
    "abs": ("abs(a)", np.abs, [MN], MN, "any"),
    "exp": ("exp(a)", np.exp, [MN], MN, "any"),
    "log": ("log(a)", np.log, [MN], MN, "pos"),
    "sqrt": ("sqrt(a)", np.sqrt, [MN], MN, "pos"),
    "rsqrt": ("rsqrt(a)", lambda a: 1 / np.sqrt(a), [MN], MN, "pos"),
    "tanh": ("tanh(a)", np.tanh, [MN], MN, "any"),
    "sigmoid": ("sigmoid(a)", sigmoid, [MN], MN, "any"),
    "relu": ("relu(a)", lambda a: np.maximum(a, 0), [MN], MN, "any"),
    "gelu": ("gelu(a)", lambda a: 0.5 * a * (1 + erf(a / math.sqrt(2))), [MN], MN, "any"),
    "silu": ("silu(a)", lambda a: a * sigmoid(a), [MN], MN, "any"),
    "erf": ("erf(a)", erf, [MN], MN, "any"),
    "sin": ("sin(a)", np.sin, [MN], MN, "any"),
    "cos": ("cos(a)", np.cos, [MN], MN, "any"),
    "floor": ("floor(a) + a", lambda a: np.floor(a) + a, [MN], MN, "any"),
    "cast": ("cast(cast(a, f16), f32)", lambda a: a, [MN], MN, "any"),
    "add_broadcast": ("a + b", np.add, [MN, N_], MN, "any"),
    "sub_broadcast": ("a - b", np.subtract, ["M, 1", MN], MN, "any"),
    "mul_broadcast": ("a * b", np.multiply, [MN, N_], MN, "any"),
    "div": ("a / b", np.divide, [MN, "1, N"], MN, "pos"),
    "pow": ("pow(a, b)", np.power, [MN, MN], MN, "pos"),
    "maximum": ("maximum(a, b)", np.maximum, [MN, MN], MN, "distinct"),
    "minimum": ("minimum(a, b)", np.minimum, [MN, N_], MN, "distinct"),
    "where": ("where(a > 0.0, a * 2.0, b)", lambda a, b: np.where(a > 0, a * 2, b), [MN, N_], MN, "any"),
    "clip": ("clip(a, b, c)", lambda a, b, c: np.minimum(np.maximum(a, b), c), [MN, N_, N_], MN, "distinct"),
    "sum_axis": ("sum(a, 1)", lambda a: a.sum(1), [MN], M_, "any"),
    "sum_keepdims": ("sum(a, 0, keepdims = true)", lambda a: a.sum(0, keepdims=True), [MN], "1, N", "any"),
    "mean": ("mean(a, 1)", lambda a: a.mean(1), [MN], M_, "any"),
    "max": ("max(a, 1)", lambda a: a.max(1), [MN], M_, "distinct"),
    "min_keepdims": ("min(a, 0, keepdims = true)", lambda a: a.min(0, keepdims=True), [MN], "1, N", "distinct"),
    "logsumexp": ("logsumexp(a, 1)", lambda a: logsumexp(a, 1), [MN], M_, "any"),
    "softmax": ("softmax(a, -1)", lambda a: softmax(a, -1), [MN], MN, "any"),
    "log_softmax": ("log_softmax(a, 0)", lambda a: np.log(softmax(a, 0)), [MN], MN, "any"),
    "matmul": ("a @ b", np.matmul, [MN, "N, 3"], "M, 3", "any"),
    "matmul_batched": ("a @ b", np.matmul, ["2, M, N", "N, M"], "2, M, M", "any"),
    "matmul_vector": ("a @ b", np.matmul, [N_, "N, M"], M_, "any"),
    "matvec": ("a @ b", np.matmul, [MN, N_], M_, "any"),
    "reshape": ("reshape(a, [N, M])", lambda a: a.reshape(a.shape[1], a.shape[0]), [MN], "N, M", "any"),
    "transpose": ("transpose(a, [1, 0])", lambda a: a.T, [MN], "N, M", "any"),
    "broadcast_to": ("broadcast_to(a, [M, N])", lambda a: np.broadcast_to(a, (R["M"], a.shape[0])), [N_], MN, "any"),
    "unsqueeze": ("unsqueeze(a, 1)", lambda a: a[:, None], [MN], "M, 1, N", "any"),
    "squeeze": ("squeeze(a, 1)", lambda a: a[:, 0], ["M, 1, N"], MN, "any"),
    "flatten": ("flatten(a)", lambda a: a.reshape(-1), ["M, N, 2"], "2*M*N", "any"),
    "concat": ("concat([a, b], 1)", lambda a, b: np.concatenate([a, b], 1), [MN, "M, 2"], "M, N + 2", "any"),
    "stack": ("stack([a, b], 0)", lambda a, b: np.stack([a, b]), [MN, MN], "2, M, N", "any"),
    "split": ("split(a, [1, N], 1)[1]", lambda a: a[:, 1:], ["M, N + 1"], MN, "any"),
    "pad": ("pad(a, [1, 2])", lambda a: np.pad(a, ((1, 2), (0, 0))), [MN], "M + 3, N", "any"),
    "slice": ("a[1:, -2]", lambda a: a[1:, -2], ["M + 1, N + 2"], M_, "any"),
    # Gathers: repeated indices sum their gradients (scatter-add through index_add).
    "take": ("take(a, arange(N) / 2, 1)", lambda a: a[:, np.arange(a.shape[1]) // 2], [MN], MN, "any"),
    "embedding": ("embedding(a, arange(M + 2) % N)", lambda a: a[np.arange(R["M"] + 2) % a.shape[0]], ["N, 3"], "M + 2, 3", "any"),
    "index_add": ("index_add(a, arange(N + 1) % N, b, 1)", lambda a, b: index_add(a, np.arange(a.shape[1] + 1) % a.shape[1], b),
                  [MN, "M, N + 1"], MN, "any"),
    "slice_strided": ("a[:, 1:6:2]", lambda a: a[:, 1:6:2], ["M, 7"], "M, 3", "any"),
    "slice_point_strided": ("a[::3, 1]", lambda a: a[::3, 1], ["7, N + 1"], "3", "any"),
    # A run-time start (a value, not a dim): the result's length is unknown, so the loss sums it.
    "slice_runtime": ("sum(exp(a[sum(arange(2)):, 1:]))", lambda a: np.exp(a[1:, 1:]).sum(), [MN], "", "any"),
    # prod without dividing by x: rows with no zero, one zero and two or more.
    "prod": ("prod(a, 1)", lambda a: a.prod(1), [MN], M_, "zeros"),
    "prod_all": ("prod(a)", lambda a: a.prod(), ["M, 2"], "", "any"),
    # Convolution and pooling (spatial dims fixed, batch and channels free).
    "conv2d": ("conv2d(a, b)", conv2d_ref, ["M, N, 5, 4", "3, N, 2, 3"], "M, 3, 4, 2", "any"),
    "conv2d_strided": ("conv2d(a, b, stride = 2, padding = 1, dilation = 2, groups = 2)",
                       lambda a, b: conv2d_ref(a, b, 2, 1, 2, 2), ["M, 2 * N, 7, 8", "4, N, 3, 2"], "M, 4, 3, 4", "any"),
    "max_pool2d": ("max_pool2d(a, 2)", lambda a: pool2d(a, 2), ["M, N, 5, 4"], "M, N, 2, 2", "distinct"),
    "max_pool2d_padded": ("max_pool2d(a, 3, stride = 2, padding = 1)", lambda a: pool2d(a, 3, 2, 1),
                          ["M, N, 5, 6"], "M, N, 3, 3", "distinct"),
    "avg_pool2d": ("avg_pool2d(a, 3, stride = 2, padding = 1)", lambda a: pool2d(a, 3, 2, 1, "avg"),
                   ["M, N, 5, 6"], "M, N, 3, 3", "any"),
    # Nearest-neighbour resize, up along one axis and down along the other: cells copied
    # several times sum, cells never read get none.
    "resize": ("resize(a, [2 * M + 1, 2])", lambda a: a[np.arange(2 * a.shape[0] + 1) * a.shape[0] // (2 * a.shape[0] + 1)][
               :, np.arange(2) * a.shape[1] // 2], ["M, N + 3"], "2 * M + 1, 2", "any"),
    # Selections: the gradient goes back to the selected elements' places.
    "topk": ("topk(a, 2)[0]", lambda a: topk(a, 2, -1), ["M, N + 2"], "M, 2", "distinct"),
    "topk_axis0": ("topk(a, 3, 0)[0]", lambda a: topk(a, 3, 0), ["M + 2, N"], "3, N", "distinct"),
    "masked_select": ("sum(exp(masked_select(a, a > 0.0)))", lambda a: np.exp(a[a > 0]).sum(), [MN], "", "any"),
    "masked_select_broadcast": ("sum(sin(masked_select(a, arange(N) % 2 == 0)) * 2.0)",
                                lambda a: (np.sin(a[:, np.arange(a.shape[1]) % 2 == 0]) * 2).sum(), [MN], "", "any"),
    # A model whose body takes a grad trains its dropouts: seed 0, step 0, the first stream.
    "dropout": ("dropout(a, 0.4)", lambda a: a * dropout_keep(a.shape, 0.4) / 0.6, [MN], MN, "any"),
    "reuse": ("a * a + exp(a) * a", lambda a: a * a + np.exp(a) * a, [MN], MN, "any"),
    # Compositions: an MLP's log-probabilities, a layer norm, an attention head.
    "mlp": ("log_softmax(relu(a @ b) @ c, -1)", lambda a, b, c: np.log(softmax(np.maximum(a @ b, 0) @ c, -1)),
            [MN, "N, 6", "6, 3"], "M, 3", "any"),
    "layer_norm": ("(a - mean(a, -1, keepdims = true)) * rsqrt(mean((a - mean(a, -1, keepdims = true)) ** 2.0, -1, "
                   "keepdims = true) + 0.1) * b", lambda a, b: (a - a.mean(-1, keepdims=True)) /
                   np.sqrt(((a - a.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True) + 0.1) * b, [MN, N_], MN, "any"),
    "attention": ("softmax(a @ transpose(b) * 0.5, -1) @ c", lambda a, b, c: softmax(a @ b.T * 0.5, -1) @ c,
                  [MN, MN, MN], MN, "any"),
}


def loop(y, trips, step):
    for i in range(trips):
        y = step(i, y)
    return y


def while_twin(y, cond, step):
    while cond(y):
        y = step(y)
    return y


# Control flow (training.md §11: differentiated as executed): statements that set y. `if`
# through the branch taken (both branches, by the operands' signs: kinds "pos" and "neg"),
# `for` through every iteration (constant and symbolic trip counts, 0 and 1 at M = 1 and
# N = 1, stacked rows w[l], nested loops, an if inside a loop, run-time bounds), `while` (a
# counter, a data-dependent trip count, 0 trips). Twins run the same loops.
def if_twin(a, b):
    return a * b if a.sum() > 0 else np.exp(a)


IF_BODY = "var y = a;\n  if sum(a) > 0.0 { y = a * b; } else { y = exp(a); }"
CONTROL = {
    "if_then": (IF_BODY, if_twin, [MN, N_], MN, "pos"),
    "if_else": (IF_BODY, if_twin, [MN, N_], MN, "neg"),
    "if_nested": ("var y = a;\n  if sum(a) > 0.0 { y = a * b;\n    if sum(b) < 0.0 { y = sin(y) + b; } }",
                  lambda a, b: (np.sin(a * b) + b if b.sum() < 0 else a * b) if a.sum() > 0 else a, [MN, N_], MN, "neg_b"),
    "for_const": ("var y = a;\n  for i in 0..3 { y = tanh(y * b) + a; }",
                  lambda a, b: loop(a, 3, lambda i, y: np.tanh(y * b) + a), [MN, N_], MN, "any"),
    "for_symbolic": ("var y = a;\n  for t in 0..N { y = tanh(y @ b); }",
                     lambda a, b: loop(a, a.shape[1], lambda i, y: np.tanh(y @ b)), [MN, "N, N"], MN, "any"),
    "for_trips_from_1": ("var y = a;\n  var z = b;\n  for t in 1..M { y = y * sigmoid(z) + 0.5 * y;  z = z * 0.5 + sum(y, 0); }\n"
                         "  y = y + z;",
                         lambda a, b: (lambda yz: yz[0] + yz[1])(loop((a, b), R["M"] - 1, lambda i, yz: (
                             yz[0] * sigmoid(yz[1]) + 0.5 * yz[0],
                             yz[1] * 0.5 + (yz[0] * sigmoid(yz[1]) + 0.5 * yz[0]).sum(0)))), [MN, N_], MN, "any"),
    "for_stacked_rows": ("var y = a;\n  for l in 0..N { y = tanh(y * b[l] + c[l, 1]); }",
                         lambda a, b, c: loop(a, a.shape[1], lambda l, y: np.tanh(y * b[l] + c[l, 1])),
                         [MN, "N, N", "N, 2"], MN, "any"),
    "for_negative_row": ("var y = a;\n  for l in 0..2 { y = y * b[l - 2]; }",
                         lambda a, b: loop(a, 2, lambda l, y: y * b[l - 2]), [MN, "2, N"], MN, "any"),
    "for_nested": ("var y = a;\n  for i in 0..2 {\n    for j in 0..N { y = sin(y) * b[j]; }\n    y = y + a;\n  }",
                   lambda a, b: loop(a, 2, lambda i, y: loop(y, a.shape[1], lambda j, z: np.sin(z) * b[j]) + a),
                   [MN, "N, N"], MN, "any"),
    "for_if": ("var y = a;\n  for i in 0..N {\n    if i % 2 == 0 { y = y * b[i]; } else { y = exp(y * 0.5) - b[i]; }\n  }",
               lambda a, b: loop(a, a.shape[1], lambda i, y: y * b[i] if i % 2 == 0 else np.exp(y * 0.5) - b[i]),
               [MN, "N, N"], MN, "any"),
    "for_runtime_bounds": ("var y = a;\n  for i in argmin(b)..argmax(b) + 1 { y = tanh(y * b[i]) + a; }",
                           lambda a, b: loop(a, max(int(b.argmax()) + 1 - int(b.argmin()), 0),
                                             lambda i, y: np.tanh(y * b[int(b.argmin()) + i]) + a), [MN, N_], MN, "distinct"),
    # One gradient for a carried value and an outer one (an add passes it to both): the
    # backward loop's sum for c and the carried s share it.
    "for_shared_grad": ("var y = a;\n  var s = b;\n  for l in 0..N { y = tanh(y * (s + c)[l]);  s = b * 0.5; }",
                        lambda a, b, c: loop((a, b), a.shape[1], lambda l, ys: (np.tanh(ys[0] * (ys[1] + c)[l]), b * 0.5))[0],
                        [MN, "N, N", "N, N"], MN, "any"),
    # while: through every iteration run, the trip count found by running (0 at "while_none").
    "while_counter": ("var y = a;\n  var k = 0.0;\n  while k < 3.0 { y = sin(y) * b; k = k + 1.0; }",
                      lambda a, b: loop(a, 3, lambda i, y: np.sin(y) * b), [MN, N_], MN, "any"),
    "while_data": ("var y = a;\n  while sum(y * y) < 40.0 { y = y * 1.5 + tanh(b) * 0.1; }",
                   lambda a, b: while_twin(a, lambda y: (y * y).sum() < 40, lambda y: y * 1.5 + np.tanh(b) * 0.1),
                   [MN, N_], MN, "any"),
    "while_none": ("var y = a;\n  while sum(y) > 1000.0 { y = y * b; }", lambda a, b: a, [MN, N_], MN, "any"),
}
SHAPES = [{"M": 1, "N": 1}, {"M": 3, "N": 5}, {"M": 4, "N": 8}]
R = {}  # the binding a NumPy twin may read (broadcast_to's target)


def shape_of(text, binding):
    return tuple(int(eval(d, {}, dict(binding))) for d in text.split(",")) if text else ()


def values(rng, shape, kind, j):
    """Operand j's values: no two within 0.01 of each other or of a kink, across operands too."""
    x = rng.uniform(0.2, 1.5, shape) * np.where(rng.random(shape) < 0.5, -1, 1)
    if kind == "pos":
        return np.abs(x)
    if kind == "neg" or (kind == "neg_b" and j == 1):  # neg_b: a positive, b negative (the nested if's thens)
        return -np.abs(x)
    if kind == "neg_b":
        return np.abs(x)
    if kind == "distinct":  # ties and kinks of max/min/clip stay out of the differences' reach
        return (rng.permutation(np.prod(shape, dtype=int)).reshape(shape) - np.prod(shape) / 2) * 0.25 + 0.1 + 0.037 * j
    if kind == "zeros":  # prod's gradient with no, one and several zeros in a row (exact: prod is linear in each)
        x.reshape(-1)[1::3] = 0
    return x


def finite_differences(loss, args, h=1e-6):
    grads = []
    for i, a in enumerate(args):
        g = np.zeros_like(a)
        for k in np.ndindex(a.shape):
            plus = [x.copy() for x in args]
            minus = [x.copy() for x in args]
            plus[i][k] += h
            minus[i][k] -= h
            g[k] = (loss(*plus) - loss(*minus)) / (2 * h)
        grads.append(g)
    return grads


class Gradients(unittest.TestCase):
    exe = None

    def check(self, name):
        if name in CASES:
            expr, twin, shapes, out, kind = CASES[name]
            statements = f"let y = {expr};"
        else:
            statements, twin, shapes, out, kind = CONTROL[name]
        names = "abc"[:len(shapes)]
        params = ", ".join(f"{n}: f32[{s}]" for n, s in zip(names, shapes))
        result = ", ".join(f"f32[{s}]" for s in shapes)
        source = (f"dim M;\ndim N;\nmodel main({params}, r: f32[{out}]) -> (f32[], {result}) {{\n"
                  f"  {statements}\n  let loss = sum(y * r);\n"
                  f"  let g = grad(loss, [{', '.join(names)}]);\n  return (loss, {', '.join(f'g[{i}]' for i in range(len(shapes)))});\n}}\n")
        rng = np.random.default_rng(len(name))
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "m.dnn")
            with open(model, "w") as f:
                f.write(source)
            for binding in SHAPES:
                R.update(binding)
                args = [values(rng, shape_of(s, binding), kind, j) for j, s in enumerate(shapes)]
                r = rng.uniform(-1, 1, shape_of(out, binding))
                loss = lambda *xs: float((twin(*xs) * r).sum())
                want = finite_differences(loss, args)
                inputs = []
                for n, v in list(zip(names, args)) + [("r", r)]:
                    np.save(os.path.join(d, n + ".npy"), v.astype(np.float32))
                    inputs += ["--input", f"{n}={d}/{n}.npy"]
                for device in ("ref", "cpu", "cuda-sim"):
                    with self.subTest(case=name, binding=binding, device=device):
                        out_dir = os.path.join(d, "out-" + device)
                        p = subprocess.run([self.exe, "run", model, *inputs, "--device", device, "--out", out_dir],
                                           capture_output=True, text=True, timeout=120)
                        self.assertEqual(p.returncode, 0, source + p.stderr)
                        for i, w in enumerate(want):
                            got = np.load(os.path.join(out_dir, f"out{i + 1}.npy")).astype(np.float64)
                            np.testing.assert_allclose(got, w, rtol=2e-3, atol=2e-3, err_msg=f"d loss / d {names[i]}\n{source}")


def test_two_grads_over_one_loop(self):
    """Two grads whose paths cross the same loop (a for, a while): each gets what it gets
    alone. (The last grad's stashing copy takes the loop's place; an earlier one's must
    not, or the later grad differentiates that copy, stashes and all.)"""
    loops = {"for": "for i in 0..N { y = tanh(y * w[i]) + a; }", "while": "var k = 0.0;\n  while k < 3.0 { y = sin(y) * w[0]; k = k + 1.0; }"}
    rng = np.random.default_rng(7)
    a, w, r = (rng.uniform(-1, 1, shape).astype(np.float32) for shape in ((3, 4), (4, 4), (3, 4)))
    with tempfile.TemporaryDirectory() as d:
        inputs = []
        for n, v in (("a", a), ("w", w), ("r", r)):
            np.save(os.path.join(d, n + ".npy"), v)
            inputs += ["--input", f"{n}={d}/{n}.npy"]
        for kind, body in loops.items():
            def run(grads, device):
                source = (f"dim M;\ndim N;\nmodel main(a: f32[M, N], w: f32[N, N], r: f32[M, N]) -> ({', '.join(['f32[N, N]'] * len(grads))}) {{\n"
                          f"  var y = a;\n  {body}\n" + "".join(f"  let g{k} = grad({g}, [w]);\n" for k, g in enumerate(grads)) +
                          f"  return ({', '.join(f'g{k}[0]' for k in range(len(grads)))});\n}}\n")
                model = os.path.join(d, f"{kind}{len(grads)}.dnn")
                with open(model, "w") as f:
                    f.write(source)
                out = os.path.join(d, f"out-{kind}-{len(grads)}-{grads[0][:3]}-{device}")
                p = subprocess.run([self.exe, "run", model, *inputs, "--device", device, "--out", out], capture_output=True, text=True,
                                   timeout=120)
                self.assertEqual(p.returncode, 0, source + p.stderr)
                return [np.load(os.path.join(out, f"out{k}.npy")) for k in range(len(grads))]
            first, second = "sum(y * r)", "sum(y * y)"
            for device in ("ref", "cpu", "cuda-sim"):
                with self.subTest(loop=kind, device=device):
                    both = run([first, second], device)
                    np.testing.assert_allclose(both[0], run([first], device)[0], rtol=1e-5, atol=1e-6)
                    np.testing.assert_allclose(both[1], run([second], device)[0], rtol=1e-5, atol=1e-6)


def test_pow_zero_exponent(self):
    """d(x^y)/dx is 0 where y = 0, x = 0 included (y x^(y-1) there is 0 * inf: it was NaN),
    as PyTorch's; d(x^y)/dy is x^y log x, 0 where x = 0."""
    source = ("model main(a: f32[3], b: f32[3], r: f32[3]) -> (f32[3], f32[3], f32[3]) {\n"
              "  let constant = sum((a ** 0.0) * r) + sum((a ** 1.0) * r);\n"
              "  return (grad(constant, a), grad(sum(pow(a, b) * r), a), grad(sum(pow(a, b) * r), b));\n}\n")
    a, b, r = np.array([0, 1, 2], np.float32), np.array([0, 0, 2], np.float32), np.array([1, 2, 3], np.float32)
    want = (r, np.array([0, 0, 2 * 2 * 3], np.float32), np.array([0, 0, 4 * np.log(2) * 3], np.float32))
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "pow.dnn")
        with open(model, "w") as f:
            f.write(source)
        inputs = []
        for n, v in (("a", a), ("b", b), ("r", r)):
            np.save(os.path.join(d, n + ".npy"), v)
            inputs += ["--input", f"{n}={d}/{n}.npy"]
        for device in ("ref", "cpu", "cuda-sim"):
            with self.subTest(device=device):
                out = os.path.join(d, "out-" + device)
                p = subprocess.run([self.exe, "run", model, *inputs, "--device", device, "--out", out], capture_output=True, text=True,
                                   timeout=120)
                self.assertEqual(p.returncode, 0, p.stderr)
                for k, w in enumerate(want):
                    np.testing.assert_allclose(np.load(os.path.join(out, f"out{k}.npy")), w, rtol=1e-6, atol=1e-6, err_msg=f"output {k}")


def test_grad_of_grad_unsupported(self):
    """A grad of a grad through an op whose backward has no gradient (conv2d's, a while's
    growing stashes) is a clear error naming the op and its line (it was an internal error)."""
    cases = {
        "conv2d": ("x: f32[1, 2, 5, 5], w: f32[2, 2, 3, 3]", "let gi = grad(sum(tanh(conv2d(x, w, padding = 1))), x);",
                   "'conv2d_grad_input' at line 2: no gradient can be taken through it"),
        "while": ("x: f32[3], w: f32[3]", "var y = x;\n  while sum(y * y) < 50.0 { y = y * 1.3 + sin(w); }\n  let gi = grad(sum(y * y), w);",
                  "'while' at line 4: no gradient can be taken through it"),
    }
    with tempfile.TemporaryDirectory() as d:
        for name, (args, inner, message) in cases.items():
            model = os.path.join(d, f"{name}.dnn")
            with open(model, "w") as f:
                f.write(f"model main({args}) -> f32[] {{\n  {inner}\n  return sum(grad(sum(gi * gi), x));\n}}\n")
            p = subprocess.run([self.exe, "run", model, "--random-inputs", "--out", os.path.join(d, "out")], capture_output=True,
                               text=True, timeout=120)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(message, p.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "out")), "a failed run leaves no output")


def test_normalize_zero_row(self):
    """nn.normalize's gradient at a zero row is r / eps, as PyTorch's (the floor under the
    norm made it 0 * sqrt'(0) = NaN), and the other rows' (r - y (y . r)) / |x|."""
    rng = np.random.default_rng(3)
    x, r = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    x[0] = 0
    norm = np.linalg.norm(x.astype(np.float64), axis=-1, keepdims=True)
    y = x / np.maximum(norm, 1e-12)
    want = np.where(norm > 0, (r - y * (y * r).sum(-1, keepdims=True)) / np.maximum(norm, 1e-12), r / 1e-12)
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "m.dnn")
        with open(model, "w") as f:
            f.write("import nn;\nmodel main(x: f32[3, 4], r: f32[3, 4]) -> f32[3, 4] {\n  return grad(sum(nn.normalize(x) * r), x);\n}\n")
        np.save(os.path.join(d, "x.npy"), x)
        np.save(os.path.join(d, "r.npy"), r)
        for device in ("ref", "cpu", "cuda-sim"):
            with self.subTest(device=device):
                out = os.path.join(d, "out-" + device)
                p = subprocess.run([self.exe, "run", model, "--input", f"x={d}/x.npy", "--input", f"r={d}/r.npy", "--device", device,
                                    "--out", out], capture_output=True, text=True, timeout=120)
                self.assertEqual(p.returncode, 0, p.stderr)
                np.testing.assert_allclose(np.load(os.path.join(out, "out0.npy")), want, rtol=1e-4, atol=1e-5)


Gradients.test_normalize_zero_row = test_normalize_zero_row
Gradients.test_grad_of_grad_unsupported = test_grad_of_grad_unsupported
Gradients.test_pow_zero_exponent = test_pow_zero_exponent
Gradients.test_two_grads_over_one_loop = test_two_grads_over_one_loop
for case in list(CASES) + list(CONTROL):
    setattr(Gradients, f"test_{case}", lambda self, case=case: self.check(case))


if __name__ == "__main__":
    run_with_exe(Gradients)

#!/usr/bin/env python3
"""The loss gradient of every example model with a float param path, against NumPy.

Each model is the example file itself with its constants made small and its `return e;`
turned into `let prediction = e; let loss = ...; return (loss, grad(loss, [every param]))`,
so the gradients flow through the example's own code: the MLP's layers, the transformer's
`for` over stacked layer params read as w[l] (a constant trip count), the LSTM's `for` over
the dim T (a symbolic one), early_exit's data-dependent `if` (both branches). The param
gradients are checked against central finite differences of a float64 NumPy twin of the
model at three bindings of its dims, on ref, cpu and cuda-sim. Not here: convnet (conv2d
has no gradient yet), decode (its tokens come from argmax: no float path), detect (its
params reach the outputs through topk's values, which have no gradient yet).
"""
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnnc_test_util import example_with_loss, write_safetensors  # noqa: E402

erf = np.vectorize(math.erf)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def one_hot(labels, c):
    return np.eye(c)[labels]


def cross_entropy(logits, labels):  # nn.cross_entropy
    return -np.mean(np.sum(log_softmax(logits) * one_hot(labels, logits.shape[-1]), -1))


def layer_norm(x, g, b, eps=1e-5):  # nn.layer_norm
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps) * g + b


def causal_attention(x, wqkv, wo, heads):  # nn.causal_attention
    b, t, d = x.shape
    hd = d // heads
    q, k, v = np.split(x @ wqkv, 3, -1)
    split = lambda a: a.reshape(b, t, heads, hd).transpose(0, 2, 1, 3)
    scores = split(q) @ split(k).transpose(0, 1, 3, 2) * (1 / hd ** 0.5)
    visible = np.arange(t)[None, :] <= np.arange(t)[:, None]
    p = np.exp(log_softmax(np.where(visible, scores, -1e9)))
    return (p @ split(v)).transpose(0, 2, 1, 3).reshape(b, t, d) @ wo


def mlp_twin(p, c, x, labels):
    h = np.maximum(x @ p["w1"] + p["b1"], 0)
    probs = np.exp(log_softmax(h @ p["w2"] + p["b2"]))
    return -np.mean(np.sum(np.log(probs) * one_hot(labels, c["C"]), -1))


BRANCH = []  # the branch early_exit's twin took in its latest call


def early_exit_twin(p, c, x, labels):
    h = np.maximum(x @ p["w1"], 0)
    probs = np.exp(log_softmax(h @ p["head1"]))
    if probs.max(-1).min() < 0.9:
        BRANCH[:] = ["deep"]
        probs = np.exp(log_softmax(np.maximum(np.maximum(h @ p["w2"], 0) @ p["w3"], 0) @ p["head2"]))
    else:
        BRANCH[:] = ["early"]
    return -np.mean(np.sum(np.log(probs) * one_hot(labels, c["C"]), -1))


def transformer_twin(p, c, tokens, labels):
    x = p["wte"][tokens] + p["wpe"][:tokens.shape[1]]
    for l in range(c["L"]):
        h = layer_norm(x, p["ln_g"][l, 0], p["ln_b"][l, 0])
        x = x + causal_attention(h, p["wqkv"][l], p["wo"][l], c["H"])
        u = layer_norm(x, p["ln_g"][l, 1], p["ln_b"][l, 1]) @ p["w1"][l]
        x = x + (0.5 * u * (1 + erf(u / math.sqrt(2)))) @ p["w2"][l]
    return cross_entropy(x @ p["wte"].T, labels)


def lstm_twin(p, c, xs, labels):
    h = np.zeros((xs.shape[0], c["H"]))
    cell = np.zeros_like(h)
    for t in range(xs.shape[1]):
        i, f, g, o = np.split(xs[:, t] @ p["wx"] + h @ p["wh"] + p["b"], 4, -1)
        cell = sigmoid(f) * cell + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(cell)
    return cross_entropy(h @ p["wout"], labels)


# example: (constants, the loss over `prediction` and `labels`, the labels' type, the input, twin,
# bindings: (dims, scales of params other than the default 0.5)). The MLP and early_exit
# return probabilities, so their loss is the negative log-likelihood; early_exit's large
# head1 makes the shallow head confident (the if's else) at its last binding.
NLL = "-mean(sum(log(prediction) * one_hot(labels, C), axis = -1))"
MODELS = {
    "mlp": (dict(D=6, H=5, C=4), NLL, "i32[B]", "x", mlp_twin, [(dict(B=1), {}), (dict(B=3), {}), (dict(B=4), {})]),
    "early_exit": (dict(D=6, C=4), NLL, "i32[B]", "x", early_exit_twin,
                   [(dict(B=1), {}), (dict(B=3), {}), (dict(B=2), {"head1": 20.0})]),
    "transformer": (dict(D=8, H=2, L=2, V=7), "nn.cross_entropy(prediction, labels)", "i32[B, T]", "tokens", transformer_twin,
                    [(dict(B=1, T=1), {}), (dict(B=2, T=3), {}), (dict(B=3, T=4), {})]),
    "lstm": (dict(I=3, H=4, C=3), "nn.cross_entropy(prediction, labels)", "i32[B]", "xs", lstm_twin,
             [(dict(B=1, T=1), {}), (dict(B=2, T=3), {}), (dict(B=3, T=5), {})]),
}


def shape_of(type_text, dims):
    inner = type_text[type_text.index("[") + 1:-1]
    return tuple(int(eval(d, {}, dims)) for d in inner.split(","))


def finite_differences(loss, params, reads, h=1e-6):
    """d loss / d params[name] at the elements `reads[name]` selects (the rows the model reads;
    the others get no gradient, which the check asserts separately)."""
    grads = {}
    for name, a in params.items():
        g = np.zeros_like(a)
        for k in np.ndindex(a[reads.get(name, ...)].shape):
            plus, minus = dict(params), dict(params)
            plus[name], minus[name] = a.copy(), a.copy()
            plus[name][k] += h
            minus[name][k] -= h
            g[k] = (loss(plus) - loss(minus)) / (2 * h)
        grads[name] = g
    return grads


class ModelGradients(unittest.TestCase):
    exe = None

    def check(self, example):
        consts, loss, labels_type, input_name, twin, bindings = MODELS[example]
        with open(os.path.join(ROOT, "examples", example + ".dnn")) as f:
            original = f.read()
        source, names = example_with_loss(original, consts, loss, f"labels: {labels_type}", grads=True)
        param_types = dict(re.findall(r"^param (\w+):\s*(f32\[[^\]]*\])", source, re.M))
        input_type = re.search(rf"{input_name}: ((?:f32|i32)\[[^\]]*\])", source).group(1)
        rng = np.random.default_rng(len(example))
        taken = set()
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "m.dnn")
            with open(model, "w") as f:
                f.write(source)
            for binding, scales in bindings:
                dims = dict(consts, **binding)
                params = {}
                for n in names:
                    shape = shape_of(param_types[n], dims)
                    params[n] = rng.normal(1.0 if n.startswith("ln_g") else 0.0, 0.1 if n.startswith("ln_") else scales.get(n, 0.5),
                                           shape)
                params = {n: v.astype(np.float32).astype(np.float64) for n, v in params.items()}
                shape = shape_of(input_type, dims)
                classes = dims["V"] if example == "transformer" else dims["C"]
                if input_type.startswith("i32"):
                    x = rng.integers(0, dims["V"], shape).astype(np.int32)
                else:
                    x = rng.normal(0, 1, shape).astype(np.float32)
                label_shape = shape_of(labels_type, dims)
                labels = rng.integers(0, classes, label_shape).astype(np.int32)
                reads = {"wpe": np.s_[:dims["T"]]} if example == "transformer" else {}
                loss = lambda p: twin(p, consts, x.astype(np.float64) if x.dtype != np.int32 else x, labels)
                loss(params)
                taken.update(BRANCH)
                # Params the loss does not depend on at this point get zeros, which do not show much.
                unused = {"wh"} if example == "lstm" and dims["T"] == 1 else set()  # h @ wh with h = 0 at step 1
                if example == "early_exit":
                    unused = {"head1"} if BRANCH == ["deep"] else {"w2", "w3", "head2"}
                want = finite_differences(loss, params, reads)
                write_safetensors(os.path.join(d, "w.safetensors"), {n: v.astype(np.float32) for n, v in params.items()})
                np.save(os.path.join(d, "x.npy"), x)
                np.save(os.path.join(d, "labels.npy"), labels)
                for device in ("ref", "cpu", "cuda-sim"):
                    with self.subTest(model=example, binding=binding, device=device):
                        out = os.path.join(d, "out-" + device)
                        p = subprocess.run([self.exe, "run", model, "-I", os.path.join(ROOT, "stdlib"), "--weights",
                                            os.path.join(d, "w.safetensors"), "--input", f"{input_name}={d}/x.npy",
                                            "--input", f"labels={d}/labels.npy", "--device", device, "--out", out],
                                           capture_output=True, text=True, timeout=300)
                        self.assertEqual(p.returncode, 0, p.stderr)
                        for i, n in enumerate(names):
                            got = np.load(os.path.join(out, f"out{i + 1}.npy")).astype(np.float64)
                            if n not in unused:
                                self.assertGreater(np.abs(want[n]).max(), 1e-6, f"{n}: the check needs a gradient that is not 0")
                            np.testing.assert_allclose(got, want[n], rtol=2e-3, atol=1e-4 * max(1.0, np.abs(want[n]).max()),
                                                       err_msg=f"d loss / d {n} of {example} at {binding} on {device}")
        if example == "early_exit":
            self.assertEqual(taken, {"deep", "early"})


for name in MODELS:
    setattr(ModelGradients, f"test_{name}", lambda self, name=name: self.check(name))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    a, rest = ap.parse_known_args()
    ModelGradients.exe = a.dnnc
    unittest.main(argv=[sys.argv[0]] + rest)

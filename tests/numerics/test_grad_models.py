#!/usr/bin/env python3
"""The loss gradient of every example model with a float param path, against NumPy.

Each model is the example file itself with its constants made small and its `return e;`
turned into `let prediction = e; let loss = ...; return (loss, grad(loss, [every param]))`,
so the gradients flow through the example's own code: the MLP's layers, the transformer's
`for` over stacked layer params read as w[l] (a constant trip count), the LSTM's `for` over
the dim T (a symbolic one), early_exit's data-dependent `if` (both branches), convnet's
convolutions (padded, one strided), max pooling and global average pool, and detect's
masked_select of the confident anchors and topk of those (EDO dims M and R: the values'
gradients scatter back to the anchors kept and chosen). The param gradients are checked
against central finite differences of a float64 NumPy twin of the model at three bindings of
its dims, on ref, cpu and cuda-sim. Not here: decode (its output, tokens, comes from argmax:
no float path to differentiate).
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
from dnnc_test_util import conv2d_ref, example_with_loss, write_safetensors  # noqa: E402

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


def mlp_twin(p, c, d):
    h = np.maximum(d["x"] @ p["w1"] + p["b1"], 0)
    probs = np.exp(log_softmax(h @ p["w2"] + p["b2"]))
    return -np.mean(np.sum(np.log(probs) * one_hot(d["labels"], c["C"]), -1))


BRANCH = []  # the branch early_exit's twin took in its latest call


def early_exit_twin(p, c, d):
    h = np.maximum(d["x"] @ p["w1"], 0)
    probs = np.exp(log_softmax(h @ p["head1"]))
    if probs.max(-1).min() < 0.9:
        BRANCH[:] = ["deep"]
        probs = np.exp(log_softmax(np.maximum(np.maximum(h @ p["w2"], 0) @ p["w3"], 0) @ p["head2"]))
    else:
        BRANCH[:] = ["early"]
    return -np.mean(np.sum(np.log(probs) * one_hot(d["labels"], c["C"]), -1))


def transformer_twin(p, c, d):
    tokens = d["tokens"]
    x = p["wte"][tokens] + p["wpe"][:tokens.shape[1]]
    for l in range(c["L"]):
        h = layer_norm(x, p["ln_g"][l, 0], p["ln_b"][l, 0])
        x = x + causal_attention(h, p["wqkv"][l], p["wo"][l], c["H"])
        u = layer_norm(x, p["ln_g"][l, 1], p["ln_b"][l, 1]) @ p["w1"][l]
        x = x + (0.5 * u * (1 + erf(u / math.sqrt(2)))) @ p["w2"][l]
    return cross_entropy(x @ p["wte"].T, d["labels"])


def lstm_twin(p, c, d):
    xs = d["xs"]
    h = np.zeros((xs.shape[0], c["H"]))
    cell = np.zeros_like(h)
    for t in range(xs.shape[1]):
        i, f, g, o = np.split(xs[:, t] @ p["wx"] + h @ p["wh"] + p["b"], 4, -1)
        cell = sigmoid(f) * cell + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(cell)
    return cross_entropy(h @ p["wout"], d["labels"])


def conv_block(x, w, g, b, stride=1):  # nn.conv_block
    return np.maximum(conv2d_ref(x, w, stride, 1) * g[:, None, None] + b[:, None, None], 0)


def max_pool2d(x, k):  # stride k, no padding: the windows that fit
    n, c, height, width = x.shape
    oh, ow = height // k, width // k
    return x[:, :, :oh * k, :ow * k].reshape(n, c, oh, k, ow, k).max((3, 5))


def convnet_twin(p, c, d):
    a = conv_block(d["img"], p["w1"], p["g1"], p["b1"])
    f = conv_block(max_pool2d(a, 2), p["w2"], p["g2"], p["b2"], stride=2).mean((2, 3))
    return cross_entropy(f @ p["wfc"], d["labels"])


DETECTED = []  # (A, M, R) of detect's twin's latest call: anchors, those kept, and of those the ones chosen


def detect_twin(p, c, d):
    scores = sigmoid(d["feats"] @ p["wcls"]).max(-1)
    keep = scores > 0.5
    kept, kept_boxes = scores[keep], d["boxes"][keep]
    order = np.argsort(-kept, kind="stable")[:min(c["K"], len(kept))]
    DETECTED[:] = [(len(scores), len(kept), len(order))]
    return np.sum(kept[order] * kept_boxes[order].sum(-1))


def normal(*names):
    """Data: float inputs `names` ~ N(0, 1), as float32 values."""
    return lambda rng, dims, shapes: {n: rng.normal(0, 1, shapes[n]).astype(np.float32) for n in names}


def with_labels(data, classes):
    """`data` and i32 labels in 0..classes (a const of the example)."""
    def make(rng, dims, shapes):
        d = data(rng, dims, shapes)
        d["labels"] = rng.integers(0, dims[classes], shapes["labels"]).astype(np.int32)
        return d
    return make


def token_data(name):
    return lambda rng, dims, shapes: {name: rng.integers(0, dims["V"], shapes[name]).astype(np.int32)}


# example: its constants; the loss over `prediction` (what the example returned, or the
# names `pattern` gives its tuple) and the inputs added; the twin; the data (model inputs by
# name, labels included); the bindings: (dims, scales of params other than the default 0.5).
# Optional: `reads` (param -> the rows the model reads at dims), `unused` (params the loss does
# not depend on at dims, or in the branch the twin took). The MLP and early_exit return
# probabilities, so their loss is the negative log-likelihood; early_exit's large head1 makes
# the shallow head confident (the if's else) at its last binding. detect's loss weighs each
# chosen score by the sum of its box, so the gradient must reach the right anchors.
NLL = "-mean(sum(log(prediction) * one_hot(labels, C), axis = -1))"
CE = "nn.cross_entropy(prediction, labels)"
MODELS = {
    "mlp": dict(consts=dict(D=6, H=5, C=4), loss=NLL, inputs="labels: i32[B]", twin=mlp_twin,
                data=with_labels(normal("x"), "C"), bindings=[(dict(B=1), {}), (dict(B=3), {}), (dict(B=4), {})]),
    "early_exit": dict(consts=dict(D=6, C=4), loss=NLL, inputs="labels: i32[B]", twin=early_exit_twin,
                       data=with_labels(normal("x"), "C"), bindings=[(dict(B=1), {}), (dict(B=3), {}), (dict(B=2), {"head1": 20.0})],
                       unused=lambda dims: {"head1"} if BRANCH == ["deep"] else {"w2", "w3", "head2"}),
    "transformer": dict(consts=dict(D=8, H=2, L=2, V=7), loss=CE, inputs="labels: i32[B, T]", twin=transformer_twin,
                        data=with_labels(token_data("tokens"), "V"),
                        bindings=[(dict(B=1, T=1), {}), (dict(B=2, T=3), {}), (dict(B=3, T=4), {})],
                        reads=lambda dims: {"wpe": np.s_[:dims["T"]]}),
    "lstm": dict(consts=dict(I=3, H=4, C=3), loss=CE, inputs="labels: i32[B]", twin=lstm_twin,
                 data=with_labels(normal("xs"), "C"), bindings=[(dict(B=1, T=1), {}), (dict(B=2, T=3), {}), (dict(B=3, T=5), {})],
                 unused=lambda dims: {"wh"} if dims["T"] == 1 else set()),  # h @ wh with h = 0 at step 1
    # H and W: the smallest (8), odd (9: the pool drops a row) and 11 by 8; N from 1.
    "convnet": dict(consts={}, loss=CE, inputs="labels: i32[N]", twin=convnet_twin,
                    data=with_labels(normal("img"), "C"),
                    bindings=[(dict(N=1, H=8, W=8, C=10), {}), (dict(N=2, H=9, W=9, C=10), {}), (dict(N=3, H=11, W=8, C=10), {})]),
    # A = 1 (one anchor, kept), and more anchors than K with some below the threshold.
    "detect": dict(consts=dict(D=6, C=3, K=3), loss="sum(top_scores * sum(top_boxes, axis = -1))", inputs="",
                   pattern="(top_scores, top_boxes)", twin=detect_twin, data=normal("feats", "boxes"),
                   bindings=[(dict(A=1), {}), (dict(A=5), {}), (dict(A=9), {})]),
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
        m = MODELS[example]
        with open(os.path.join(ROOT, "examples", example + ".dnn")) as f:
            original = f.read()
        source, names = example_with_loss(original, m["consts"], m["loss"], m["inputs"], grads=True,
                                          prediction=m.get("pattern", "prediction"))
        param_types = dict(re.findall(r"^param (\w+):\s*(f32\[[^\]]*\])", source, re.M))
        input_types = dict(re.findall(r"(\w+): ((?:f32|i32)\[[^\]]*\])", re.search(r"^model main\((.*)\) ->", source, re.M).group(1)))
        rng = np.random.default_rng(len(example))
        taken = set()
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "m.dnn")
            with open(model, "w") as f:
                f.write(source)
            for binding, scales in m["bindings"]:
                dims = dict(m["consts"], **binding)
                params = {}
                for n in names:
                    shape = shape_of(param_types[n], dims)
                    params[n] = rng.normal(1.0 if n.startswith("ln_g") else 0.0, 0.1 if n.startswith("ln_") else scales.get(n, 0.5),
                                           shape)
                params = {n: v.astype(np.float32).astype(np.float64) for n, v in params.items()}
                data = m["data"](rng, dims, {n: shape_of(t, dims) for n, t in input_types.items()})
                self.assertEqual(sorted(data), sorted(input_types))
                as64 = {n: a.astype(np.float64) if a.dtype == np.float32 else a for n, a in data.items()}
                loss = lambda p: m["twin"](p, m["consts"], as64)
                loss(params)
                taken.update(BRANCH if example == "early_exit" else DETECTED if example == "detect" else [])
                # Params the loss does not depend on at this point get zeros, which do not show much.
                unused = m.get("unused", lambda dims: set())(dims)
                want = finite_differences(loss, params, m.get("reads", lambda dims: {})(dims))
                write_safetensors(os.path.join(d, "w.safetensors"), {n: v.astype(np.float32) for n, v in params.items()})
                args = []
                for n, a in data.items():
                    np.save(os.path.join(d, n + ".npy"), a)
                    args += ["--input", f"{n}={d}/{n}.npy"]
                for device in ("ref", "cpu", "cuda-sim"):
                    with self.subTest(model=example, binding=binding, device=device):
                        out = os.path.join(d, "out-" + device)
                        p = subprocess.run([self.exe, "run", model, "-I", os.path.join(ROOT, "stdlib"), "--weights",
                                            os.path.join(d, "w.safetensors"), *args, "--device", device, "--out", out],
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
        if example == "detect":  # a single anchor, kept; anchors below the threshold; more kept than K
            self.assertIn((1, 1, 1), taken)
            self.assertTrue(any(kept < anchors for anchors, kept, _ in taken), taken)
            self.assertTrue(any(chosen < kept for _, kept, chosen in taken), taken)


for name in MODELS:
    setattr(ModelGradients, f"test_{name}", lambda self, name=name: self.check(name))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    a, rest = ap.parse_known_args()
    ModelGradients.exe = a.dnnc
    unittest.main(argv=[sys.argv[0]] + rest)

#!/usr/bin/env python3
"""Whole example models run by `dnnc run` against NumPy references written here, at three
shape bindings each (including dims of 1 and primes). Tolerance: float32 values agree
to rtol 1e-4, atol 1e-5; integer outputs exactly."""
import math
import unittest

import numpy as np

from dnnc_test_util import Dnnc, assert_matches, conv2d_ref, run_tests

RTOL, ATOL = 1e-4, 1e-5
erf = np.vectorize(math.erf)


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps) * g + b


def gelu(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


class Models(unittest.TestCase):
    dnnc: Dnnc

    def check(self, model, weights, inputs, expected):
        outs, p = self.dnnc.run(model, weights, inputs)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(outs), len(expected))
        for got, want in zip(outs, expected):
            self.assertEqual(got.shape, want.shape)
            assert_matches(got, want, RTOL, ATOL)

    def test_mlp(self):
        rng = np.random.default_rng(1)
        w = {"w1": f32(rng, 784, 512, scale=0.05), "b1": f32(rng, 512), "w2": f32(rng, 512, 10, scale=0.05), "b2": f32(rng, 10)}
        for b in (1, 3, 8):
            x = f32(rng, b, 784)
            h = np.maximum(x.astype(np.float64) @ w["w1"] + w["b1"], 0)
            self.check("mlp.dnn", w, {"x": x}, [softmax(h @ w["w2"] + w["b2"])])

    def test_transformer(self):
        rng = np.random.default_rng(2)
        D, H, L, V = 256, 4, 2, 1000
        w = {"wte": f32(rng, V, D, scale=0.02), "wpe": f32(rng, 2048, D, scale=0.02),
             "ln_g": 1 + f32(rng, L, 2, D, scale=0.1), "ln_b": f32(rng, L, 2, D, scale=0.1),
             "wqkv": f32(rng, L, D, 3 * D, scale=0.05), "wo": f32(rng, L, D, D, scale=0.05),
             "w1": f32(rng, L, D, 4 * D, scale=0.05), "w2": f32(rng, L, 4 * D, D, scale=0.05)}
        for b, t in ((1, 1), (2, 7), (3, 13), (1, 70)):  # T = 70: the fused attention's second key tile
            tokens = rng.integers(0, V, (b, t)).astype(np.int32)
            x = w["wte"][tokens].astype(np.float64) + w["wpe"][:t]
            for l in range(L):
                h = layer_norm(x, w["ln_g"][l, 0], w["ln_b"][l, 0])
                q, k, v = np.split(h @ w["wqkv"][l], 3, axis=-1)
                heads = lambda z: z.reshape(b, t, H, D // H).transpose(0, 2, 1, 3)
                s = heads(q) @ heads(k).transpose(0, 1, 3, 2) / math.sqrt(D // H)
                s = np.where(np.arange(t)[None, :] <= np.arange(t)[:, None], s, -1e9)
                att = (softmax(s) @ heads(v)).transpose(0, 2, 1, 3).reshape(b, t, D)
                x = x + att @ w["wo"][l]
                x = x + gelu(layer_norm(x, w["ln_g"][l, 1], w["ln_b"][l, 1]) @ w["w1"][l]) @ w["w2"][l]
            self.check("transformer.dnn", w, {"tokens": tokens}, [x @ w["wte"].T])

    def test_lstm(self):
        rng = np.random.default_rng(3)
        I, H, C = 64, 128, 10
        w = {"wx": f32(rng, I, 4 * H, scale=0.1), "wh": f32(rng, H, 4 * H, scale=0.1), "b": f32(rng, 4 * H, scale=0.1),
             "wout": f32(rng, H, C, scale=0.1)}
        for b, t in ((1, 1), (2, 5), (3, 11)):
            xs = f32(rng, b, t, I)
            h = np.zeros((b, H))
            c = np.zeros((b, H))
            for s in range(t):
                i, f, g, o = np.split(xs[:, s] @ w["wx"] + h @ w["wh"] + w["b"], 4, axis=-1)
                c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
                h = sigmoid(o) * np.tanh(c)
            self.check("lstm.dnn", w, {"xs": xs}, [h @ w["wout"]])

    def test_convnet(self):
        rng = np.random.default_rng(4)
        w = {"w1": f32(rng, 16, 3, 3, 3, scale=0.3), "g1": 1 + f32(rng, 16, scale=0.1), "b1": f32(rng, 16, scale=0.1),
             "w2": f32(rng, 32, 16, 3, 3, scale=0.2), "g2": 1 + f32(rng, 32, scale=0.1), "b2": f32(rng, 32, scale=0.1),
             "wfc": f32(rng, 32, 10, scale=0.3)}
        cb = lambda x, wt, g, bb, stride: np.maximum(conv2d_ref(x, wt, stride, 1) * g[:, None, None] + bb[:, None, None], 0)
        for n, h, wd in ((1, 8, 8), (2, 13, 10), (1, 17, 23)):
            img = f32(rng, n, 3, h, wd)
            a = cb(img.astype(np.float64), w["w1"], w["g1"], w["b1"], 1)
            p = a[:, :, : h // 2 * 2, : wd // 2 * 2].reshape(n, 16, h // 2, 2, wd // 2, 2).max(axis=(3, 5))
            c = cb(p, w["w2"], w["g2"], w["b2"], 2)
            self.check("convnet.dnn", w, {"img": img}, [c.mean(axis=(2, 3)) @ w["wfc"]])

    def test_early_exit_both_branches(self):
        rng = np.random.default_rng(5)
        D = 128
        for confident in (True, False):
            w = {"w1": f32(rng, D, D, scale=0.1), "head1": f32(rng, D, 10, scale=3.0 if confident else 0.01),
                 "w2": f32(rng, D, D, scale=0.1), "w3": f32(rng, D, D, scale=0.1), "head2": f32(rng, D, 10, scale=0.1)}
            for b in (1, 2, 5):
                x = f32(rng, b, D, scale=5.0 if confident else 1.0)
                h = np.maximum(x.astype(np.float64) @ w["w1"], 0)
                early = softmax(h @ w["head1"])
                out = early
                if early.max(-1).min() < 0.9:
                    out = softmax(np.maximum(np.maximum(h @ w["w2"], 0) @ w["w3"], 0) @ w["head2"])
                self.check("early_exit.dnn", w, {"x": x}, [out])

    def test_decode(self):
        rng = np.random.default_rng(6)
        D, V = 64, 500
        w = {"wte": f32(rng, V, D), "wq": f32(rng, D, D, scale=0.2), "wk": f32(rng, D, D, scale=0.2),
             "wv": f32(rng, D, D, scale=0.2), "wout": f32(rng, D, V, scale=0.2)}
        for b, t0 in ((1, 1), (2, 3), (3, 7)):
            prompt = rng.integers(1, V, (b, t0)).astype(np.int32)
            tokens = prompt.copy()
            e = w["wte"][prompt].astype(np.float64)
            kc, vc = e @ w["wk"], e @ w["wv"]
            for _ in range(32):
                x = w["wte"][tokens[:, -1]].astype(np.float64)
                kc = np.concatenate([kc, (x @ w["wk"])[:, None]], axis=1)
                vc = np.concatenate([vc, (x @ w["wv"])[:, None]], axis=1)
                att = softmax((x @ w["wq"])[:, None] @ kc.transpose(0, 2, 1) * 0.125)
                nxt = ((att @ vc)[:, 0] @ w["wout"]).argmax(-1).astype(np.int32)
                tokens = np.concatenate([tokens, nxt[:, None]], axis=1)
                if (nxt == 0).all():
                    break
            self.check("decode.dnn", w, {"prompt": prompt}, [tokens])

    def test_detect(self):
        rng = np.random.default_rng(7)
        w = {"wcls": f32(rng, 64, 20, scale=0.3)}
        for a in (1, 7, 50):
            feats, boxes = f32(rng, a, 64), f32(rng, a, 4)
            scores = sigmoid(feats.astype(np.float64) @ w["wcls"]).max(-1)
            keep = scores > 0.5
            kept, kept_boxes = scores[keep], boxes[np.nonzero(keep)[0]]
            order = np.argsort(-kept, kind="stable")[: min(10, len(kept))]
            self.check("detect.dnn", w, {"feats": feats, "boxes": boxes}, [kept[order], kept_boxes[order]])


if __name__ == "__main__":
    run_tests(Models, verbosity=2)

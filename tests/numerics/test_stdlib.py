#!/usr/bin/env python3
"""The stdlib's blocks for real architectures (stdlib/nn.dnn: linear and linear_t with and
without bias, multihead_attention with key padding, biases and causality, feed_forward,
the pre- and post-LN encoder and decoder blocks, masked_mean, normalize, rope) run by
`dnnc run` against NumPy twins written here in float64, each at four shapes: every dim
1 and odd sizes with D and F dims (one model for both), odd sizes with heads of 3 and 1
dims (a prime length), and a larger one.

Each block's weights are model inputs, so one model serves every binding of B, T and S.
D, F and the head count are consts in most models (a const head size makes the attention
scale a constant, which the fuse-attention pass needs: on ref and cpu such a model runs the
fused attention op) and dims in the others (the scale `1.0 / hd ** 0.5` of a symbolic head
size is then an f32 computed at run time). Masks are 1 for tokens and 0 for padding, with
one sequence fully padded where B > 1 (a query whose keys are all padding averages them
evenly: the twin rounds the padded scores to f32 as the ops store them, -1e9 + s being
-1e9 there). Tolerance: rtol 1e-4, atol 1e-5, as the example models'."""
import math
import tempfile
import unittest

import numpy as np

from dnnc_test_util import Dnnc, assert_matches, run_tests
from test_models import gelu, layer_norm, softmax
from test_ops import write_model

RTOL, ATOL = 1e-4, 1e-5
# (B, T, S, D, F, heads, symbolic D and F)
# (symbolic D takes one head: with more, reshaping [B, T, D] into heads of D / heads needs
# D = heads * (D / heads), which the checker cannot prove of a symbolic D; docs/stdlib.md)
# A model is compiled once per header: the two symbolic shapes share one.
SHAPES = [(1, 1, 1, 1, 1, 1, True), (2, 4, 3, 5, 3, 1, True), (2, 5, 3, 6, 7, 3, False), (3, 13, 70, 8, 16, 2, False)]


def linear_t(x, w, b=None):
    return x @ w.T + (0 if b is None else b)


def mha(xq, xkv, key_mask, wq, bq, wk, bk, wv, bv, wo, bo, heads, causal=False):
    b, t, d = xq.shape
    s = xkv.shape[1]
    hd = d // heads
    split = lambda z, n: z.reshape(b, n, heads, hd).transpose(0, 2, 1, 3)
    q, k, v = split(linear_t(xq, wq, bq), t), split(linear_t(xkv, wk, bk), s), split(linear_t(xkv, wv, bv), s)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + ((1 - key_mask) * -1e9)[:, None, None, :]
    scores = scores.astype(np.float32).astype(np.float64)  # as stored: -1e9 + s is -1e9 in f32
    if causal:
        scores = np.where(np.arange(s)[None, :] <= np.arange(t)[:, None], scores, -np.inf)
    return linear_t((softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, t, d), wo, bo)


def ffn(x, w1, b1, w2, b2):
    return linear_t(gelu(linear_t(x, w1, b1)), w2, b2)


def attn_weights(w, p):
    return [w[p + n] for n in ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo")]


def encoder(pre):
    def block(w, heads, eps=1e-5):
        x, m = w["x"], w["mask"]
        ln1 = lambda z: layer_norm(z, w["ln1_g"], w["ln1_b"], eps)
        ln2 = lambda z: layer_norm(z, w["ln2_g"], w["ln2_b"], eps)
        ff = lambda z: ffn(z, w["w1"], w["b1"], w["w2"], w["b2"])
        if pre:
            h = x + mha(ln1(x), ln1(x), m, *attn_weights(w, ""), heads)
            return h + ff(ln2(h))
        h = ln1(x + mha(x, x, m, *attn_weights(w, ""), heads))
        return ln2(h + ff(h))
    return block


def decoder(pre):
    def block(w, heads, eps=1e-5):
        x, m, mem, mm = w["x"], w["mask"], w["mem"], w["mem_mask"]
        ln = lambda z, k: layer_norm(z, w[f"ln{k}_g"], w[f"ln{k}_b"], eps)
        ff = lambda z: ffn(z, w["w1"], w["b1"], w["w2"], w["b2"])
        if pre:
            h1 = x + mha(ln(x, 1), ln(x, 1), m, *attn_weights(w, "s"), heads, causal=True)
            h2 = h1 + mha(ln(h1, 2), mem, mm, *attn_weights(w, "c"), heads)
            return h2 + ff(ln(h2, 3))
        h1 = ln(x + mha(x, x, m, *attn_weights(w, "s"), heads, causal=True), 1)
        h2 = ln(h1 + mha(h1, mem, mm, *attn_weights(w, "c"), heads), 2)
        return ln(h2 + ff(h2), 3)
    return block


def rope_ref(x, pos, base=10000.0):
    # Hugging Face Llama: inv_freq = 1 / base^(arange(0, E, 2) / E), emb = cat(freqs, freqs),
    # x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1).
    e = x.shape[-1]
    inv_freq = 1.0 / base ** (np.arange(0, e, 2) / e)
    freqs = pos[:, None].astype(np.float64) * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], -1)
    rotated = np.concatenate([-x[..., e // 2:], x[..., :e // 2]], -1)
    return x * np.cos(emb) + rotated * np.sin(emb)


ATTN = [("wq", "D, D"), ("bq", "D"), ("wk", "D, D"), ("bk", "D"), ("wv", "D, D"), ("bv", "D"), ("wo", "D, D"), ("bo", "D")]
FFN = [("w1", "F, D"), ("b1", "F"), ("w2", "D, F"), ("b2", "D")]
LN = lambda k: [(f"ln{k}_g", "D"), (f"ln{k}_b", "D")]
PREFIXED = lambda p, args: [(p + n, t) for n, t in args]
ENCODER = [("x", "B, T, D"), ("mask", "B, T")] + ATTN + LN(1) + FFN + LN(2)
DECODER = ([("x", "B, T, D"), ("mask", "B, T"), ("mem", "B, S, D"), ("mem_mask", "B, S")] + PREFIXED("s", ATTN) + LN(1)
           + PREFIXED("c", ATTN) + LN(2) + FFN + LN(3))

# name: (the inputs (name, dims) in the nn function's order, keyword arguments in .dnn,
#        the result's dims, the twin (inputs by name, heads) -> result)
BLOCKS = {
    "linear": ([("x", "B, T, D"), ("v", "D, F")], "", "B, T, F", lambda w, h: w["x"] @ w["v"]),
    "linear_bias": ([("x", "B, T, D"), ("v", "D, F"), ("b1", "F")], "", "B, T, F", lambda w, h: w["x"] @ w["v"] + w["b1"]),
    "linear_t": ([("x", "B, T, D"), ("w1", "F, D")], "", "B, T, F", lambda w, h: linear_t(w["x"], w["w1"])),
    "linear_t_bias": ([("x", "B, T, D"), ("w1", "F, D"), ("b1", "F")], "", "B, T, F",
                      lambda w, h: linear_t(w["x"], w["w1"], w["b1"])),
    "multihead_attention": ([("x", "B, T, D"), ("mem", "B, S, D"), ("mem_mask", "B, S")] + ATTN, "heads = H", "B, T, D",
                            lambda w, h: mha(w["x"], w["mem"], w["mem_mask"], *attn_weights(w, ""), h)),
    "multihead_attention_causal": ([("x", "B, T, D"), ("x", "B, T, D"), ("mask", "B, T")] + ATTN, "heads = H, causal = true",
                                   "B, T, D", lambda w, h: mha(w["x"], w["x"], w["mask"], *attn_weights(w, ""), h, True)),
    "feed_forward": ([("x", "B, T, D")] + FFN, "", "B, T, D", lambda w, h: ffn(w["x"], w["w1"], w["b1"], w["w2"], w["b2"])),
    "post_ln_encoder_block": (ENCODER, "heads = H", "B, T, D", encoder(False)),
    "post_ln_encoder_block_eps": (ENCODER, "heads = H, eps = 1e-12", "B, T, D", lambda w, h: encoder(False)(w, h, 1e-12)),
    "pre_ln_encoder_block": (ENCODER, "heads = H", "B, T, D", encoder(True)),
    "post_ln_decoder_block": (DECODER, "heads = H", "B, T, D", decoder(False)),
    "pre_ln_decoder_block": (DECODER, "heads = H", "B, T, D", decoder(True)),
    "masked_mean": ([("x", "B, T, D"), ("mask", "B, T")], "", "B, D",
                    lambda w, h: (w["x"] * w["mask"][..., None]).sum(1) / np.maximum(w["mask"].sum(1), 1e-9)[:, None]),
    "normalize": ([("x", "B, T, D")], "", "B, T, D",
                  lambda w, h: w["x"] / np.maximum(np.linalg.norm(w["x"], axis=-1, keepdims=True), 1e-12)),
    "rope": ([("r", "B, H, T, 2 * D"), ("pos", "T")], "", "B, H, T, 2 * D", lambda w, h: rope_ref(w["r"], w["pos"])),
    "rope_base": ([("r", "B, H, T, 2 * D"), ("pos", "T")], "base = 500.0", "B, H, T, 2 * D",
                  lambda w, h: rope_ref(w["r"], w["pos"], 500.0)),
}


def function_of(name):
    for suffix in ("_bias", "_causal", "_eps", "_base"):
        name = name.removesuffix(suffix)
    return name


def inputs_for(rng, args, b, t, s, d, f, heads):
    sizes = {"B": b, "T": t, "S": s, "D": d, "F": f, "H": heads}
    out = {}
    for name, dims in args:
        shape = tuple(eval(e, {}, sizes) for e in dims.split(", "))
        if name in ("mask", "mem_mask"):
            m = (rng.random(shape) < 0.7).astype(np.float32)
            m[:, 0] = 1  # a token in every sequence ...
            if shape[0] > 1:
                m[-1] = 0  # ... but the last, all padding
            out[name] = m
        elif name == "pos":
            out[name] = np.arange(shape[0], dtype=np.int64) * 3 + 2  # positions past the first (a cache)
        elif name.endswith("_g"):
            out[name] = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        elif name == "x" and d > 1:
            out[name] = rng.standard_normal(shape).astype(np.float32)
            out[name][0, 0] = 0  # normalize's eps: a zero row
        else:
            out[name] = (rng.standard_normal(shape) * (0.5 if name[0] in "wbv" or name[1:2] in ("w", "b") else 1)).astype(np.float32)
    return out


def make_test(name, args, kwargs, result, twin):
    def test(self):
        rng = np.random.default_rng(17)
        models = {}  # header -> model
        params = ", ".join(f"{n}: {'i64' if n == 'pos' else 'f32'}[{dims}]" for n, dims in dict(args).items())
        call = ", ".join([n for n, _ in args] + ([kwargs] if kwargs else []))
        with tempfile.TemporaryDirectory() as tmp:
            for b, t, s, d, f, heads, symbolic in SHAPES:
                dims = "dim D; dim F;" if symbolic else f"const D = {d}; const F = {f};"
                header = f"import nn;\ndim B; dim T; dim S; {dims} const H = {heads};"
                if header not in models:
                    models[header] = write_model(tmp, f"{name}_{len(models)}", header, params, f"f32[{result}]",
                                                 f"nn.{function_of(name)}({call})")
                model = models[header]
                inputs = inputs_for(rng, args, b, t, s, d, f, heads)
                outs, p = self.dnnc.run(model, None, inputs)
                self.assertEqual(p.returncode, 0, p.stderr)
                want = twin({k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in inputs.items()}, heads)
                where = f"B={b}, T={t}, S={s}, D={d}, F={f}, heads={heads}"
                self.assertEqual(outs[0].shape, want.shape, where)
                assert_matches(outs[0], want, RTOL, ATOL, where)
    return test


class Stdlib(unittest.TestCase):
    dnnc: Dnnc

    def test_rope_odd_size_is_an_error(self):
        # rope pairs the two halves of the last dim: an odd size fails the stdlib's assert
        # before anything runs, naming it.
        with tempfile.TemporaryDirectory() as tmp:
            model = write_model(tmp, "rope_odd", "import nn;\ndim T; dim E;", "x: f32[T, E], pos: i64[T]", "f32[T, E]",
                                "nn.rope(x, pos)")
            _, p = self.dnnc.run(model, None, {"x": np.ones((3, 5), np.float32), "pos": np.arange(3, dtype=np.int64)})
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertRegex(p.stderr, r"^dnnc: error: assert 2\*\(E/2\) == E at line \d+ fails: 2\*\(E/2\) = 4 and E = 5\n$")

    def test_heads_must_divide_the_width(self):
        # A const width that the head count does not divide fails the stdlib's assert when
        # the model is checked.
        with tempfile.TemporaryDirectory() as tmp:
            args = ", ".join(f"{n}: f32[{dims}]" for n, dims in [("x", "B, T, D"), ("mask", "B, T")] + ATTN)
            model = write_model(tmp, "mha_heads", "import nn;\ndim B; dim T; const D = 5;", args, "f32[B, T, D]",
                                f"nn.multihead_attention(x, x, mask, {', '.join(n for n, _ in ATTN)}, heads = 2)")
            inputs = inputs_for(np.random.default_rng(1), [("x", "B, T, D"), ("mask", "B, T")] + ATTN, 1, 2, 2, 5, 1, 2)
            _, p = self.dnnc.run(model, None, inputs)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertRegex(p.stderr, r"stdlib/nn\.dnn:\d+:\d+: error: this assert can never hold: 4 == 5 is false for every "
                                       r"allowed binding \[assert-false\]\n +\d+ \|   assert hd \* heads == D;\n")


for _name, _block in BLOCKS.items():
    setattr(Stdlib, f"test_{_name}", make_test(_name, *_block))

if __name__ == "__main__":
    run_tests(Stdlib, verbosity=2)

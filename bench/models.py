#!/usr/bin/env python3
"""CPU time of each example model compiled by dnnc next to PyTorch on the CPU, same
weights, same inputs and the same thread count, measured side by side in one run and
printed as ratios. Each model is built once (`dnnc build`); every shape runs that
artifact. dnnc's time is `dnnc run --repeat` (median, end to end: interpreter, host ops,
allocation and kernels); PyTorch's is the median of the same number of forward passes
under torch.inference_mode(). The outputs are compared too.

    python3 bench/models.py --dnnc build/dnnc [--threads N] [--repeat R]
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "numerics"))
from dnnc_test_util import write_safetensors  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")


def f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mlp_weights(rng):
    return {"w1": f32(rng, 784, 512, scale=0.05), "b1": f32(rng, 512), "w2": f32(rng, 512, 10, scale=0.05), "b2": f32(rng, 10)}


def mlp_torch(w, x):
    return torch.softmax(torch.relu(x @ w["w1"] + w["b1"]) @ w["w2"] + w["b2"], -1)


D, H, L, V = 256, 4, 2, 1000


def transformer_weights(rng):
    return {"wte": f32(rng, V, D, scale=0.02), "wpe": f32(rng, 2048, D, scale=0.02),
            "ln_g": 1 + f32(rng, L, 2, D, scale=0.1), "ln_b": f32(rng, L, 2, D, scale=0.1),
            "wqkv": f32(rng, L, D, 3 * D, scale=0.05), "wo": f32(rng, L, D, D, scale=0.05),
            "w1": f32(rng, L, D, 4 * D, scale=0.05), "w2": f32(rng, L, 4 * D, D, scale=0.05)}


def transformer_torch(w, tokens):
    b, t = tokens.shape
    x = w["wte"][tokens.long()] + w["wpe"][:t]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    heads = lambda z: z.reshape(b, t, H, D // H).transpose(1, 2)
    for l in range(L):
        h = F.layer_norm(x, (D,), w["ln_g"][l, 0], w["ln_b"][l, 0])
        q, k, v = (h @ w["wqkv"][l]).split(D, -1)
        s = heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(D // H)
        s = torch.where(mask, s, torch.tensor(-1e9))
        att = (torch.softmax(s, -1) @ heads(v)).transpose(1, 2).reshape(b, t, D)
        x = x + att @ w["wo"][l]
        x = x + F.gelu(F.layer_norm(x, (D,), w["ln_g"][l, 1], w["ln_b"][l, 1]) @ w["w1"][l]) @ w["w2"][l]
    return x @ w["wte"].T


def lstm_weights(rng):
    return {"wx": f32(rng, 64, 512, scale=0.1), "wh": f32(rng, 128, 512, scale=0.1), "b": f32(rng, 512, scale=0.1),
            "wout": f32(rng, 128, 10, scale=0.1)}


def lstm_torch(w, xs):
    b, t, _ = xs.shape
    h = torch.zeros(b, 128)
    c = torch.zeros(b, 128)
    for s in range(t):
        i, f, g, o = (xs[:, s] @ w["wx"] + h @ w["wh"] + w["b"]).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return h @ w["wout"]


def convnet_weights(rng):
    return {"w1": f32(rng, 16, 3, 3, 3, scale=0.3), "g1": 1 + f32(rng, 16, scale=0.1), "b1": f32(rng, 16, scale=0.1),
            "w2": f32(rng, 32, 16, 3, 3, scale=0.2), "g2": 1 + f32(rng, 32, scale=0.1), "b2": f32(rng, 32, scale=0.1),
            "wfc": f32(rng, 32, 10, scale=0.3)}


def convnet_torch(w, img):
    block = lambda x, wt, g, b, stride: torch.relu(F.conv2d(x, wt, stride=stride, padding=1) * g[:, None, None] + b[:, None, None])
    a = block(img, w["w1"], w["g1"], w["b1"], 1)
    c = block(F.max_pool2d(a, 2), w["w2"], w["g2"], w["b2"], 2)
    return c.mean((2, 3)) @ w["wfc"]


# model: (weights, torch forward, input name, [(label, input maker)])
MODELS = {
    "mlp": (mlp_weights, mlp_torch, "x", [(f"B={b}", lambda r, b=b: f32(r, b, 784)) for b in (1, 32, 256)]),
    "transformer": (transformer_weights, transformer_torch, "tokens",
                    [(f"B={b},T={t}", lambda r, b=b, t=t: r.integers(0, V, (b, t)).astype(np.int32))
                     for b, t in ((1, 16), (1, 128), (4, 128))]),
    "lstm": (lstm_weights, lstm_torch, "xs", [(f"B={b},T={t}", lambda r, b=b, t=t: f32(r, b, t, 64))
                                              for b, t in ((1, 16), (8, 32), (32, 64))]),
    "convnet": (convnet_weights, convnet_torch, "img", [(f"N={n},H=W={s}", lambda r, n=n, s=s: f32(r, n, 3, s, s))
                                                        for n, s in ((1, 32), (4, 64), (8, 96))]),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"threads: {a.threads} (dnnc --threads, torch.set_num_threads); torch {torch.__version__}; "
          f"median of {a.repeat} runs each")
    print(f"{'model':<12} {'shape':<16} {'dnnc ms':>9} {'torch ms':>9} {'dnnc/torch':>10} {'max |diff|':>11}")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        for name in a.models.split(","):
            make_weights, forward, input_name, shapes = MODELS[name]
            w = make_weights(rng)
            write_safetensors(os.path.join(d, "w.safetensors"), w)
            artifact = os.path.join(d, name + ".dnnc")
            subprocess.run([a.dnnc, "build", os.path.join(EXAMPLES, name + ".dnn"), "-o", artifact], check=True,
                           capture_output=True)
            tw = {k: torch.from_numpy(v) for k, v in w.items()}
            for label, make_input in shapes:
                x = make_input(rng)
                np.save(os.path.join(d, "x.npy"), x)
                p = subprocess.run([a.dnnc, "run", artifact, "--weights", os.path.join(d, "w.safetensors"), "--input",
                                    f"{input_name}={os.path.join(d, 'x.npy')}", "--out", os.path.join(d, "out"),
                                    "--threads", str(a.threads), "--repeat", str(a.repeat), "--stats"],
                                   capture_output=True, text=True, check=True)
                ours = float(re.search(r"time per run: ([\d.]+) ms", p.stdout).group(1))
                got = np.load(os.path.join(d, "out", "out0.npy"))
                tx = torch.from_numpy(x)
                with torch.inference_mode():
                    want = forward(tw, tx)
                    times = []
                    for _ in range(a.repeat):
                        start = time.perf_counter()
                        forward(tw, tx)
                        times.append((time.perf_counter() - start) * 1e3)
                theirs = statistics.median(times)
                diff = float(np.abs(got - want.numpy()).max())
                print(f"{name:<12} {label:<16} {ours:>9.3f} {theirs:>9.3f} {ours / theirs:>10.2f} {diff:>11.2e}", flush=True)


if __name__ == "__main__":
    main()

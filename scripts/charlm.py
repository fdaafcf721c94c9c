#!/usr/bin/env python3
"""The worked example of docs/training.md: character-level next-token data for
examples/train/charlm.dnn, and the picture of its loss curve.

  scripts/charlm.py data TEXT DIR [--steps 400] [--batch 16] [--seed 0]
      writes DIR/000000/tokens.npy, targets.npy, ... for `dnnc train --data DIR`: each step
      B windows of the text at random offsets, every step with its own length T (16..64:
      the compiled step runs them all), targets the tokens shifted by one character.
  scripts/charlm.py plot LOSSES.jsonl OUT.png
      draws the `dnnc train --json` losses (needs matplotlib: Debian's python3-matplotlib or
      pip; nothing in the test suite does).
"""
import argparse
import json
import os

import numpy as np


def data(a):
    codes = np.frombuffer(open(a.text, "rb").read(), dtype=np.uint8)
    if codes.max() >= 128:
        raise SystemExit(f"{a.text}: the model's vocabulary is ASCII (codes 0..127)")
    rng = np.random.default_rng(a.seed)
    for s in range(a.steps):
        t = int(rng.integers(16, 65))
        starts = rng.integers(0, len(codes) - t - 1, a.batch)
        windows = np.stack([codes[i:i + t + 1] for i in starts]).astype(np.int32)
        step = os.path.join(a.dir, f"{s:06d}")
        os.makedirs(step, exist_ok=True)
        np.save(os.path.join(step, "tokens.npy"), windows[:, :-1])
        np.save(os.path.join(step, "targets.npy"), windows[:, 1:])
    print(f"wrote {a.steps} steps of {a.batch} windows (T from 16 to 64) of {a.text} ({len(codes)} characters) to {a.dir}")


def plot(a):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    logs = [json.loads(line) for line in open(a.losses) if line.startswith("{")]
    steps, losses = [e["step"] for e in logs], [e["loss"] for e in logs]
    k = 20  # a running mean over k steps shows the trend under the per-batch noise
    smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(steps, losses, color="#9db7d5", linewidth=0.8, label="loss per step (each batch its own B×T)")
    ax.plot(steps[k - 1:], smooth, color="#1f4e8c", linewidth=2, label=f"mean of the last {k} steps")
    ax.axhline(np.log(128), color="grey", linestyle=":", linewidth=1, label="ln 128 (uniform over ASCII)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_title("dnnc train examples/train/charlm.dnn on examples/data/lighthouse.txt (Adam)")
    ax.title.set_fontsize(9)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out)
    print(f"{a.out}: {len(losses)} steps, loss {losses[0]:.3f} -> mean of the last {k} {smooth[-1]:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data")
    d.add_argument("text")
    d.add_argument("dir")
    d.add_argument("--steps", type=int, default=400)
    d.add_argument("--batch", type=int, default=16)
    d.add_argument("--seed", type=int, default=0)
    p = sub.add_parser("plot")
    p.add_argument("losses")
    p.add_argument("out")
    a = ap.parse_args()
    data(a) if a.cmd == "data" else plot(a)


if __name__ == "__main__":
    main()

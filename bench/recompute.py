#!/usr/bin/env python3
"""Recomputation (spec training.md §13): what --recompute none / auto / all do to a training
step's memory and time, on the example transformer (T = 128, 512, 1024), the example LSTM and
the example convnet, each with a cross-entropy loss and Adam.

Memory, from the REPL (nothing runs): at each shape, `:set recompute MODE` then
`:mem train adam` gives the stashed activations (forward values the backward pass keeps)
and the planned arena (the step's peak of intermediates); `:solve train mem <= 2GiB for B`
with the other dims bound gives the largest batch whose whole step (params, Adam state,
inputs, outputs and the arena) fits 2 GiB.

Time: `dnnc train --json --device cpu` with each mode from the same seed on the same data,
the per-step median of steps 2..N (the first compiles nothing but warms caches), the modes
interleaved for --rounds rounds and each mode's best round counting (the machine's load
varies); the ratios auto/none and all/none are of those. The losses of the three modes are
printed side by side (they must agree: tests/numerics/test_recompute.py checks it).

The examples' layers are `for` loops: their backward pass is a reverse loop that replays
each layer's forward ops from the layer's stashed input, so the stash counted here is the
step's top level plus one iteration of each backward loop body.

    /usr/bin/python3 bench/recompute.py --dnnc build/dnnc [--threads 2] [--steps 4] [--rounds 2] [--rows transformer-512] [--memory-only]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import STDLIB, TRAINABLE, with_loss  # noqa: E402

TRAINABLE["convnet"] = [("model main(img: f32[N, 3, H, W]) -> f32[N, 10] {",
                         "model main(img: f32[N, 3, H, W], labels: f32[N, 10]) -> f32[] {"),
                        ("  return f @ wfc;", "  return -mean(sum(log_softmax(f @ wfc, -1) * labels, axis = 1));")]
MODES = ("none", "auto", "all")
# (row name, example, batch dim, binding, data maker)
ROWS = [
    ("transformer-128", "transformer", "B", dict(B=8, T=128)),
    ("transformer-512", "transformer", "B", dict(B=8, T=512)),
    ("transformer-1024", "transformer", "B", dict(B=4, T=1024)),
    ("lstm-64", "lstm", "B", dict(B=8, T=64)),
    ("convnet-64", "convnet", "N", dict(N=8, H=64, W=64)),
]


def data_for(example, dims, rng):
    if example == "transformer":
        seq = rng.integers(0, 1000, (dims["B"], dims["T"] + 1)).astype(np.int32)
        return {"tokens": seq[:, :-1].copy(), "targets": seq[:, 1:].copy()}
    labels = lambda n: np.eye(10, dtype=np.float32)[rng.integers(0, 10, n)]  # noqa: E731
    if example == "lstm":
        return {"xs": rng.standard_normal((dims["B"], dims["T"], 64)).astype(np.float32), "labels": labels(dims["B"])}
    return {"img": rng.standard_normal((dims["N"], 3, dims["H"], dims["W"])).astype(np.float32), "labels": labels(dims["N"])}


def repl(exe, path, lines):
    p = subprocess.run([exe, "repl", path, "-I", STDLIB], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=1200)
    if p.returncode != 0 or p.stderr.strip():
        raise RuntimeError(p.stdout + p.stderr)
    return p.stdout


def memory(exe, path, mode, dims, batch_dim):
    """(stashed bytes, arena bytes, largest batch in 2 GiB) of the Adam step under `mode`."""
    bind = " ".join(f"{k}={v}" for k, v in dims.items())
    others = " ".join(f"{k}={v}" for k, v in dims.items() if k != batch_dim)
    out = repl(exe, path, [f":set recompute {mode}", f":bind {bind}", ":mem train adam", f":unbind {batch_dim}"] +
               ([f":bind {others}"] if others else []) + [f":solve train mem <= 2GiB for {batch_dim}"])
    stash = int(re.search(r"stashed activations: (\d+) bytes", out).group(1))
    arena = int(re.search(r"^  arena: (\d+) bytes", out, re.M).group(1))
    solved = re.search(rf"^{batch_dim} = (\d+)$", out, re.M) or re.search(rf"any value of {batch_dim} fits: {batch_dim} = (\d+)", out)
    return stash, arena, int(solved.group(1)) if solved else 0


def step(exe, path, mode, data, threads, steps, workdir):
    """(median ms of steps 2..N, losses) of `dnnc train --recompute mode`."""
    args = []
    for name, x in data.items():
        np.save(os.path.join(workdir, name + ".npy"), x)
        args += ["--data", f"{name}={workdir}/{name}.npy"]
    batch = len(next(iter(data.values())))
    p = subprocess.run([exe, "train", path, "-I", STDLIB, *args, "--batch", str(batch), "--steps", str(steps), "--optimizer", "adam",
                        "--lr", "1e-3", "--seed", "1", "--device", "cpu", "--threads", str(threads), "--json", "--recompute", mode],
                       capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip())
    logs = [json.loads(line) for line in p.stdout.splitlines()]
    return statistics.median(e["ms"] for e in logs[1:]), [e["loss"] for e in logs]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=4, help="steps per run (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; each mode's best round counts")
    ap.add_argument("--rows", default=",".join(r[0] for r in ROWS))
    ap.add_argument("--memory-only", action="store_true", help="the plan's figures only (exact on any machine); no steps run")
    a = ap.parse_args()
    mib = lambda b: b / 2**20  # noqa: E731
    print(f"threads: {a.threads}; Adam; per-step median of steps 2..{a.steps}, best of {a.rounds} interleaved rounds")
    print(f"{'row':<17} {'shape':<14} {'stash MiB none/auto/all':>25} {'none/auto':>9} {'arena MiB none/auto/all':>25} "
          f"{'ms none':>8} {'auto/none':>9} {'all/none':>8} {'max B@2GiB none/auto':>20}  losses agree")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        for row, example, batch_dim, dims in [r for r in ROWS if r[0] in a.rows.split(",")]:
            path = os.path.join(d, f"{example}.dnn")
            with open(path, "w") as f:
                f.write(with_loss(example))
            mem = {m: memory(a.dnnc, path, m, dims, batch_dim) for m in MODES}
            shape = ",".join(f"{k}={v}" for k, v in dims.items())
            stash = "/".join(f"{mib(mem[m][0]):.1f}" for m in MODES)
            arena = "/".join(f"{mib(mem[m][1]):.1f}" for m in MODES)
            if a.memory_only:
                print(f"{row:<17} {shape:<14} {stash:>25} {mem['none'][0] / max(mem['auto'][0], 1):>8.2f}x {arena:>25} "
                      f"{'-':>8} {'-':>9} {'-':>8} {mem['none'][2]:>9}/{mem['auto'][2]:<10}", flush=True)
                continue
            data = data_for(example, dims, rng)
            times, losses = {m: [] for m in MODES}, {}
            for _ in range(a.rounds):  # interleaved, so a change in the machine's load hits every mode alike
                for m in MODES:
                    ms, losses[m] = step(a.dnnc, path, m, data, a.threads, a.steps, d)
                    times[m].append(ms)
            best = {m: min(times[m]) for m in MODES}
            agree = max(abs(x - y) / abs(y) for m in MODES for x, y in zip(losses[m], losses["none"]))
            print(f"{row:<17} {shape:<14} {stash:>25} {mem['none'][0] / max(mem['auto'][0], 1):>8.2f}x {arena:>25} "
                  f"{best['none']:>8.1f} {best['auto'] / best['none']:>9.3f} {best['all'] / best['none']:>8.3f} "
                  f"{mem['none'][2]:>9}/{mem['auto'][2]:<10}  rel diff {agree:.1e}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Training-step time and memory: dnnc train against PyTorch eager on this CPU.

For the example transformer (B=8, T=128 and T=512) and the example LSTM (B=8, T=8 and T=64) with a
cross-entropy loss, one Adam step (lr 1e-3) from the same weights on the same data with the
same thread count: dnnc's per-step time is the median of the `ms` that `dnnc train --json`
logs for steps 2..N (one compile serves them all; the first step is not timed), PyTorch's
the median of forward + backward + `optimizer.step()` over as many steps after one warm-up;
the two alternate for --rounds rounds and each one's best round counts (the machine's
load varies).
The first step's losses are compared (they start from the same weights). PyTorch comes
from the bench venv (bench/peers.py finds it the same way; without torch only dnnc's
figures print).

Memory: the training step's planned arena (`:mem train adam` in the REPL, no
recomputation) against the most bytes live at once in that plan (the live-set lower bound
no placement can beat), at each shape.

The examples themselves run: their layers are `for` loops, which the training step
differentiates (the backward pass is a `for` too, recomputing each iteration from its
stashed inputs). The bench checks that at start and stops if a loop has no backward `for`.

    DNNC_BENCH_VENV=/work/bench-venv $DNNC_BENCH_VENV/bin/python bench/train.py --dnnc build/dnnc [--threads 2] [--steps 6] [--models transformer,lstm]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import HAVE_TORCH, V, example, f32, lstm_torch, lstm_weights, transformer_torch, transformer_weights  # noqa: E402
from peers import write_safetensors  # noqa: E402

if HAVE_TORCH:
    import torch
    import torch.nn.functional as F

STDLIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "stdlib")

# Each example with its loss: the signature and return statement replaced.
TRAINABLE = {
    "transformer": [("model main(tokens: i32[B, T]) -> f32[B, T, V] {",
                     "model main(tokens: i32[B, T], targets: i32[B, T]) -> f32[] {"),
                    ("  return x @ transpose(wte);",
                     "  return -mean(sum(log_softmax(x @ transpose(wte), -1) * one_hot(targets, V), axis = -1));")],
    "lstm": [("model main(xs: f32[B, T, I]) -> f32[B, C] {", "model main(xs: f32[B, T, I], labels: f32[B, C]) -> f32[] {"),
             ("  return h @ wout;", "  return -mean(sum(log_softmax(h @ wout, -1) * labels, axis = 1));")],
}


def with_loss(name):
    src = example(name)
    for old, new in TRAINABLE[name]:
        assert old in src, (name, old)
        src = src.replace(old, new)
    return src


def differentiable(exe, path):
    """Whether dnnc differentiates through the example's `for` loop: its training step has
    a loop in the backward pass too. (Without gradients through loops, the differentiate
    pass either stops or, for params read only inside the loop, gives them zero
    gradients: a step that runs but trains nothing there.)"""
    p = subprocess.run([exe, "emit", path, "--emit=grad", "--train", "-I", STDLIB], capture_output=True, text=True)
    return p.returncode == 0 and len(re.findall(r"= for\(", p.stdout)) >= 2


def dnnc_step(exe, path, data, weights, threads, steps, workdir):
    """(median ms of steps 2..N, first loss) of `dnnc train` with Adam."""
    wpath = os.path.join(workdir, "w.safetensors")
    write_safetensors(wpath, weights)
    args = []
    for name, x in data.items():
        np.save(os.path.join(workdir, name + ".npy"), x)
        args += ["--data", f"{name}={workdir}/{name}.npy"]
    batch = len(next(iter(data.values())))
    p = subprocess.run([exe, "train", path, "-I", STDLIB, *args, "--batch", str(batch), "--steps", str(steps), "--optimizer",
                        "adam", "--lr", "1e-3", "--weights", wpath, "--device", "cpu", "--threads", str(threads), "--json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip())
    logs = [json.loads(line) for line in p.stdout.splitlines()]
    return statistics.median(e["ms"] for e in logs[1:]), logs[0]["loss"]


def torch_step(forward, loss_of, data, weights, steps):
    """(median ms of forward + backward + Adam step after one warm-up, first loss)."""
    params = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
    inputs = {k: torch.from_numpy(v) for k, v in data.items()}
    opt = torch.optim.Adam(params.values(), lr=1e-3)
    times, first = [], None
    for s in range(steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(forward, params, inputs)
        loss.backward()
        opt.step()
        if s:
            times.append((time.perf_counter() - start) * 1e3)
        first = loss.item() if first is None else first
    return statistics.median(times), first


def transformer_loss(forward, w, d):
    logits = forward(w, d["tokens"])
    return F.cross_entropy(logits.reshape(-1, V), d["targets"].reshape(-1).long())


def lstm_loss(forward, w, d):
    return -(torch.log_softmax(forward(w, d["xs"]), -1) * d["labels"]).sum(1).mean()


def planned_memory(exe, path, binding):
    """(planned arena, most live at once) of the Adam training step, in bytes."""
    p = subprocess.run([exe, "repl", path, "-I", STDLIB], input=f":bind {binding}\n:mem train adam\n", capture_output=True,
                       text=True)
    arena = re.search(r"^  arena: (\d+) bytes", p.stdout, re.M)
    live = re.search(r"most live at once: (\d+) bytes", p.stdout)
    if not arena or not live:
        raise RuntimeError(p.stdout + p.stderr)
    return int(arena.group(1)), int(live.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=6, help="steps per run (the first is not timed)")
    ap.add_argument("--models", default="transformer,lstm")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; each tool's best round counts")
    a = ap.parse_args()
    if HAVE_TORCH:
        torch.set_num_threads(a.threads)
        print(f"torch {torch.__version__} (MKL: {torch.backends.mkl.is_available()}); ", end="")
    else:
        print("torch is not installed: dnnc only; ", end="")
    print(f"threads: {a.threads}; Adam; per-step median of steps 2..{a.steps}, best of {a.rounds} interleaved rounds")
    print(f"{'model':<12} {'shape':<11} {'source':<22} {'dnnc ms':>9} {'torch ms':>9} {'dnnc/torch':>10} {'|loss diff|':>11}"
          f" {'arena MiB':>10} {'live MiB':>9} {'arena/live':>10}")
    rng = np.random.default_rng(0)
    rows = [r for r in [("transformer", 8, 128), ("transformer", 8, 512), ("lstm", 8, 8), ("lstm", 8, 64)] if r[0] in a.models.split(",")]
    with tempfile.TemporaryDirectory() as d:
        for name, b, t in rows:
            src = with_loss(name)
            path = os.path.join(d, f"{name}.dnn")
            open(path, "w").write(src)
            source = f"examples/{name}.dnn"
            if not differentiable(a.dnnc, path):
                sys.exit(f"{source}: the training step has no backward loop (dnnc emit --emit=grad --train)")
            if name == "transformer":
                w = transformer_weights(rng)
                seq = rng.integers(0, V, (b, t + 1)).astype(np.int32)
                data = {"tokens": seq[:, :-1].copy(), "targets": seq[:, 1:].copy()}
                forward, loss_of = transformer_torch, transformer_loss
            else:
                w = lstm_weights(rng)
                data = {"xs": f32(rng, b, t, 64), "labels": np.eye(10, dtype=np.float32)[rng.integers(0, 10, b)]}
                forward, loss_of = lstm_torch, lstm_loss
            ms, torch_ms = [], []
            for _ in range(a.rounds):  # interleaved, so a change in the machine's load hits both alike
                step_ms, loss = dnnc_step(a.dnnc, path, data, w, a.threads, a.steps, d)
                ms.append(step_ms)
                if HAVE_TORCH:
                    step_ms, torch_loss = torch_step(forward, loss_of, data, w, a.steps)
                    torch_ms.append(step_ms)
            ms, torch_ms = min(ms), min(torch_ms) if torch_ms else float("nan")
            torch_loss = torch_loss if HAVE_TORCH else float("nan")
            arena, live = planned_memory(a.dnnc, path, f"B={b} T={t}")
            print(f"{name:<12} {f'B={b},T={t}':<11} {source:<22} {ms:>9.1f} {torch_ms:>9.1f} {ms / torch_ms:>10.2f} "
                  f"{abs(loss - torch_loss):>11.2e} {arena / 2**20:>10.1f} {live / 2**20:>9.1f} {arena / live:>10.2f}",
                  flush=True)


if __name__ == "__main__":
    main()

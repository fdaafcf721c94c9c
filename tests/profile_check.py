#!/usr/bin/env python3
"""`dnnc run --profile` and `dnnc train --profile`: the rows' shares (kernels, host ops and
the executor's own time) sum to the total's 100%, their times to the total's, and by
default the op rows come sorted by time, longest first. On the CPU (transformer: loops,
param views, fused GEMMs; a training step of a small MLP) and on cuda-sim (detect: EDO
host ops)."""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile

RUNS = [
    ["transformer.dnn", "--bind", "B=1,T=16", "--repeat", "3", "--device", "cpu"],
    ["detect.dnn", "--bind", "A=64", "--repeat", "2", "--device", "cuda-sim"],
    ["train", "--steps", "4", "--batch", "8", "--optimizer", "adam", "--device", "cpu"],
]
# The training run's model (its first output the loss) and data, x f32[16, 12] and y f32[16, 3].
TRAIN_MODEL = """dim B;
param w1: f32[12, 32];
param w2: f32[32, 3];
model main(x: f32[B, 12], y: f32[B, 3]) -> f32[] {
  let p = softmax(tanh(x @ w1) @ w2, axis = -1);
  return -mean(sum(y * log(p + 1e-6), axis = 1));
}
"""


def write_npy(path, rows, columns, value):
    """An f32 [rows, columns] .npy file of value(i, j)."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, columns)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{rows * columns}f", *(value(i, j) for i in range(rows) for j in range(columns))))


def command(dnnc, examples, model, flags, out):
    if model != "train":
        return [dnnc, "run", f"{examples}/{model}", "--out", out, "--profile", *flags]
    with open(os.path.join(out, "train.dnn"), "w") as f:
        f.write(TRAIN_MODEL)
    write_npy(os.path.join(out, "x.npy"), 16, 12, lambda i, j: ((i * 7 + j * 3) % 11) / 11 - 0.5)
    write_npy(os.path.join(out, "y.npy"), 16, 3, lambda i, j: float(i % 3 == j))
    return [dnnc, "train", os.path.join(out, "train.dnn"), "--data", f"x={out}/x.npy", "--data", f"y={out}/y.npy",
            "--profile", *flags]


def table(dnnc, examples, model, flags, out):
    """The profile's rows as (name, ms, share), or None with the output when there is none."""
    p = subprocess.run(command(dnnc, examples, model, flags, out), capture_output=True, text=True)
    lines = p.stdout.splitlines()
    header = next((k for k, l in enumerate(lines) if l.startswith("op ")), None)
    if p.returncode != 0 or header is None:
        return None, f"exit {p.returncode}, no table\n{p.stdout}{p.stderr}"
    rows = []
    for row in lines[header + 1:]:
        m = re.match(r"(.+?)\s+(?:\d+\s+)?(\d+\.\d+)\s+(\d+\.\d+)%", row)
        if not m:
            return None, f"unreadable row {row!r}"
        rows.append((m.group(1), float(m.group(2)), float(m.group(3))))
    return rows, ""


ap = argparse.ArgumentParser(description=__doc__)
for flag in ("--dnnc", "--examples"):
    ap.add_argument(flag, required=True)
args = ap.parse_args()
failures = 0
with tempfile.TemporaryDirectory() as d:
    for model, *flags in RUNS:
        parsed, why = table(args.dnnc, args.examples, model, flags, d)
        if parsed is None:
            print(f"FAIL {model}: {why}")
            failures += 1
            continue
        (last, total_ms, total_share), ops = parsed[-1], parsed[:-1]
        shares = sum(share for _, _, share in ops)
        times = sum(ms for _, ms, _ in ops)
        # Each share is rounded to 0.1%, each time to 1 us.
        if last != "total" or total_share != 100.0 or abs(shares - 100.0) > 0.05 * len(ops) + 0.01:
            print(f"FAIL {model}: shares sum to {shares:.2f}% over {len(ops)} rows")
            failures += 1
        if abs(times - total_ms) > 0.0005 * len(ops) + 0.001:
            print(f"FAIL {model}: times sum to {times:.3f} ms, the total is {total_ms:.3f} ms")
            failures += 1
        by_op = [ms for name, ms, _ in ops if name != "executor"]
        if by_op != sorted(by_op, reverse=True) or ops[-1][0] != "executor":
            print(f"FAIL {model}: rows not sorted by time, then the executor's: {ops}")
            failures += 1
        print(f"{model} {' '.join(flags)}: {len(ops)} rows, shares {shares:.1f}%, times {times:.3f} of {total_ms:.3f} ms")
sys.exit(1 if failures else 0)

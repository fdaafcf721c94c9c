#!/usr/bin/env python3
"""`dnnc run --profile`: the rows' shares (kernels, host ops and the executor's own time)
sum to the total's 100%, their times to the total's, and by default the op rows come
sorted by time, longest first. On the CPU (transformer: loops, param views, fused GEMMs)
and on cuda-sim (detect: EDO host ops)."""
import argparse
import re
import subprocess
import sys
import tempfile

RUNS = [
    ["transformer.dnn", "--bind", "B=1,T=16", "--repeat", "3", "--device", "cpu"],
    ["detect.dnn", "--bind", "A=64", "--repeat", "2", "--device", "cuda-sim"],
]


def table(dnnc, examples, model, flags, out):
    """The profile's rows as (name, ms, share), or None with the output when there is none."""
    p = subprocess.run([dnnc, "run", f"{examples}/{model}", "--out", out, "--profile", *flags], capture_output=True, text=True)
    lines = p.stdout.splitlines()
    header = next((k for k, l in enumerate(lines) if l.startswith("op ")), None)
    if p.returncode != 0 or header is None:
        return None, f"exit {p.returncode}, no table\n{p.stdout}{p.stderr}"
    rows = []
    for row in lines[header + 1:]:
        m = re.match(r"(\S+(?: \S+)?)\s+(?:\d+\s+)?(\d+\.\d+)\s+(\d+\.\d+)%", row)
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

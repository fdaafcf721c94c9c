#!/usr/bin/env python3
"""What a second thread gives: each case (softmax and layer norm rows, the LSTM and the
transformer examples) run with --threads 1 and --threads 2 by one or two dnnc builds, all
in interleaved rounds (so a busy machine slows every column alike), printing the median
time per call and the 2-thread/1-thread speedup of each build side by side.

  usage: parallel.py --dnnc build/dnnc [--vs OTHER/dnnc] [--rounds 7] [--repeat 30]"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")

ROWS = {
    "softmax": "softmax(x, axis = -1)",
    "layer_norm": "nn.layer_norm(x, g, g)",
}


def row_model(d, name, rank):
    dims = ["B", "T", "D"][3 - rank:]
    path = os.path.join(d, f"{name}{rank}.dnn")
    with open(path, "w") as f:
        f.write(f"import nn;\ndim {'; dim '.join(dims)};\n"
                f"model main(x: f32[{', '.join(dims)}], g: f32[D]) -> f32[{', '.join(dims)}] {{\n  return {ROWS[name]};\n}}\n")
    return path


def cases(d):
    out = []
    for name in ROWS:
        out.append((f"{name} [1, 512, 384]", row_model(d, name, 3), "B=1,T=512,D=384"))
        out.append((f"{name} [512, 384]", row_model(d, name, 2), "T=512,D=384"))
    for b in (1, 16):
        out.append((f"lstm B={b}, T=32", os.path.join(EXAMPLES, "lstm.dnn"), f"B={b},T=32"))
    out.append(("transformer B=1, T=512", os.path.join(EXAMPLES, "transformer.dnn"), "B=1,T=512"))
    out.append(("transformer B=4, T=128", os.path.join(EXAMPLES, "transformer.dnn"), "B=4,T=128"))
    return out


def time_ms(exe, model, bind, threads, repeat, out):
    p = subprocess.run([exe, "run", model, "--bind", bind, "--device", "cpu", "--threads", str(threads), "--stats",
                        "--repeat", str(repeat), "--out", out], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"{exe} run {model} failed:\n{p.stderr}")
    m = re.search(r"time per run: ([0-9.]+) (ms|us|s)", p.stdout)
    scale = {"s": 1e3, "ms": 1.0, "us": 1e-3}[m.group(2)]
    return float(m.group(1)) * scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True, help="the build measured ('after')")
    ap.add_argument("--vs", help="a second build measured alongside ('before')")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=30)
    a = ap.parse_args()
    builds = [("after", a.dnnc)] + ([("before", a.vs)] if a.vs else [])
    with tempfile.TemporaryDirectory() as d:
        table = cases(d)
        times = {}  # (case, build, threads) -> [ms per round]
        for _ in range(a.rounds):
            for label, model, bind in table:
                for build, exe in builds:
                    for threads in (1, 2):
                        times.setdefault((label, build, threads), []).append(
                            time_ms(exe, model, bind, threads, a.repeat, os.path.join(d, "out")))
        head = f"{'case':26}" + "".join(f" {b + ' 1t':>11} {b + ' 2t':>11} {b + ' 2t/1t':>12}" for b, _ in builds)
        print(f"median ms per call over {a.rounds} interleaved rounds of --repeat {a.repeat}\n" + head)
        for label, _, _ in table:
            row = f"{label:26}"
            for build, _ in builds:
                one = statistics.median(times[(label, build, 1)])
                two = statistics.median(times[(label, build, 2)])
                row += f" {one:11.3f} {two:11.3f} {one / two:11.2f}x"
            print(row)


if __name__ == "__main__":
    main()

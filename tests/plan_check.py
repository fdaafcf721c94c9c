#!/usr/bin/env python3
"""The memory plan agrees with execution: for every example at three bindings, the arena
bytes `dnnc run --stats` actually used equal what the REPL's :mem predicts, and running
with the plan gives the same outputs as running without it (--no-memory-plan)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

BINDINGS = {
    "mlp": ["B=1", "B=3", "B=17"],
    "transformer": ["B=1,T=1", "B=2,T=7", "B=3,T=64"],
    "lstm": ["B=1,T=1", "B=2,T=5", "B=4,T=13"],
    "convnet": ["N=1,H=8,W=8", "N=2,H=13,W=10", "N=1,H=17,W=23"],
    "early_exit": ["B=1", "B=2", "B=5"],
    "decode": ["B=1,T0=1", "B=2,T0=3", "B=3,T0=7"],
    "detect": ["A=1", "A=7", "A=50"],
}

ap = argparse.ArgumentParser()
ap.add_argument("--dnnc", required=True)
ap.add_argument("--examples", required=True)
args = ap.parse_args()

failures = 0
with tempfile.TemporaryDirectory() as d:
    for model, bindings in BINDINGS.items():
        path = os.path.join(args.examples, model + ".dnn")
        for binding in bindings:
            repl = subprocess.run([args.dnnc, "repl", path], input=f":bind {binding.replace(',', ' ')}\n:mem\n",
                                  capture_output=True, text=True)
            predicted = re.search(r"^arena: (\d+) bytes$", repl.stdout, re.M)
            outs = {}
            for flag in ("", "--no-memory-plan"):
                out = os.path.join(d, "out" + flag)
                run = subprocess.run([args.dnnc, "run", path, "--bind", binding, "--stats", "--out", out, "--seed", "3",
                                      "--device", "cpu"] + ([flag] if flag else []), capture_output=True, text=True)
                if run.returncode != 0:
                    print(f"FAIL {model} {binding} {flag}: {run.stderr}")
                    failures += 1
                    break
                outs[flag] = [np.load(os.path.join(out, f)) for f in sorted(os.listdir(out))]
                if not flag:
                    used = re.search(r"^arena: (\d+) bytes", run.stdout, re.M)
            else:
                same = all(np.array_equal(a, b) for a, b in zip(outs[""], outs["--no-memory-plan"]))
                ok = predicted and used and predicted.group(1) == used.group(1) and same
                failures += not ok
                print(f"{'ok' if ok else 'FAIL'} {model} {binding}: :mem {predicted.group(1) if predicted else '?'} bytes, "
                      f"run used {used.group(1) if used else '?'}; outputs {'identical' if same else 'DIFFER'} without the plan")
sys.exit(1 if failures else 0)

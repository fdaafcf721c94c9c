#!/usr/bin/env python3
"""What fusion and memory planning buy, per example at three bindings, in one table:
kernels launched unfused vs fused; the planned arena vs the naive sum of all
intermediates vs the live-set lower bound (the most bytes live at once over the
schedule); CPU time unfused vs fused (median of --repeat runs each, measured side by
side in this run). Each variant is built once (`dnnc build`) and run from its artifact.

    python3 bench/optimizations.py --dnnc build/dnnc [--repeat R] [--threads N]
"""
import argparse
import os
import re
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
BINDINGS = {
    "mlp": ["B=1", "B=32", "B=256"],
    "transformer": ["B=1,T=16", "B=1,T=128", "B=4,T=128"],
    "lstm": ["B=1,T=16", "B=8,T=32", "B=32,T=64"],
    "convnet": ["N=1,H=32,W=32", "N=4,H=64,W=64", "N=8,H=96,W=96"],
    "early_exit": ["B=1", "B=16", "B=128"],
    "decode": ["B=1,T0=8", "B=4,T0=32", "B=8,T0=128"],
    "detect": ["A=100", "A=1000", "A=10000"],
}


def stat(pattern, text):
    m = re.search(pattern, text, re.M)
    return m.group(1) if m else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    print(f"threads: {a.threads}; time: median of {a.repeat} runs, end to end")
    print(f"{'model':<12} {'dims':<15} {'kernels':>13} {'arena':>10} {'naive':>10} {'live max':>10} {'arena/':>7} "
          f"{'arena/':>7} {'ms':>9} {'ms':>9} {'speedup':>8}")
    print(f"{'':<12} {'':<15} {'unfused>fused':>13} {'bytes':>10} {'sum':>10} {'bytes':>10} {'live':>7} {'naive':>7} "
          f"{'unfused':>9} {'fused':>9} {'':>8}")
    with tempfile.TemporaryDirectory() as d:
        for model, bindings in BINDINGS.items():
            src = os.path.join(EXAMPLES, model + ".dnn")
            artifacts = {}
            for variant, flags in (("unfused", ["--no-fuse"]), ("fused", [])):
                artifacts[variant] = os.path.join(d, f"{model}.{variant}.dnnc")
                subprocess.run([a.dnnc, "build", src, "-o", artifacts[variant], *flags], check=True, capture_output=True)
            for binding in bindings:
                runs = {}
                for variant, path in artifacts.items():
                    p = subprocess.run([a.dnnc, "run", path, "--bind", binding, "--stats", "--repeat", str(a.repeat),
                                        "--threads", str(a.threads), "--out", os.path.join(d, "out")],
                                       capture_output=True, text=True, check=True)
                    runs[variant] = p.stdout
                repl = subprocess.run([a.dnnc, "repl", src], input=f":bind {binding.replace(',', ' ')}\n:mem\n",
                                      capture_output=True, text=True).stdout
                arena = int(stat(r"^arena: (\d+) bytes", runs["fused"]))
                naive = int(stat(r"naive sum of intermediates: (\d+) bytes", repl))
                live = int(stat(r"most live at once: (\d+) bytes", repl))
                t_unfused = float(stat(r"time per run: ([\d.]+) ms", runs["unfused"]))
                t_fused = float(stat(r"time per run: ([\d.]+) ms", runs["fused"]))
                launched = r"kernels launched: (\d+)"
                kernels = stat(launched, runs["unfused"]) + ">" + stat(launched, runs["fused"])
                print(f"{model:<12} {binding:<15} {kernels:>13} {arena:>10} {naive:>10} {live:>10} "
                      f"{arena / live if live else 0:>7.2f} {arena / naive if naive else 0:>7.2f} {t_unfused:>9.3f} "
                      f"{t_fused:>9.3f} {t_unfused / t_fused:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Compile time against model size: generates models of 250/1k/4k/16k statements and
1k/4k-operand concat and sum expressions, times `dnnc check`, `dnnc emit --emit=plan`
(every pass, no LLVM) and `dnnc build` (and, with --steps ...,run, `dnnc run --device
cpu` at a tiny shape) on each, with the object cache off, and prints the table
with the growth ratio per 4x in size. Near-linear passes give ratios near 4; a
quadratic pass gives ratios near 16.

  bench/compile_time.py --dnnc build/dnnc [--sizes 1000,4000,16000] [--steps check,plan,build,run] [--keep DIR]

`--emit DIR` only writes the generated models (tests use one of them)."""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time


def statements(n):
    """n `let` statements of elementwise ops, each using the one before and one further back."""
    lines = ["dim B;", "model main(x: f32[B, 4]) -> f32[B, 4] {", "  let v0 = x * 0.5;"]
    for i in range(1, n):
        back = max(0, i - 1 - (i * 7919) % 5)
        op = ("relu({a}) + {b}", "{a} * 0.5 - {b}", "tanh({a}) * {b}", "{a} + {b} * 0.25")[i % 4]
        lines.append(f"  let v{i} = " + op.format(a=f"v{i - 1}", b=f"v{back}") + ";")
    lines += [f"  return v{n - 1};", "}"]
    return "\n".join(lines) + "\n"


def concat(n):
    """One concat of n operands."""
    xs = ", ".join("x" for _ in range(n))
    return ("dim B;\n"
            f"model main(x: f32[B, 2]) -> f32[B, {2 * n}] {{\n"
            f"  return concat([{xs}], axis = 1);\n}}\n")


def summation(n):
    """One sum of n terms (a left-deep chain of '+')."""
    terms = " + ".join("x" for _ in range(n))
    return ("dim B;\n"
            "model main(x: f32[B, 4]) -> f32[B, 4] {\n"
            f"  return {terms};\n}}\n")


MODELS = {"statements": statements, "concat": concat, "sum": summation}
DEFAULT_SIZES = {"statements": [250, 1000, 4000, 16000], "concat": [1000, 4000], "sum": [1000, 4000]}
# dnnc build spends ~40 ms of LLVM per kernel, and the statement models have ~3 kernels per
# statement (most values have two readers, so little fuses): build them at small sizes.
DEFAULT_BUILD_MAX = {"statements": 1000, "concat": 4000, "sum": 4000}


def timed(cmd, timeout, wall):
    """Seconds the command took: its CPU time (user + system, steady on a busy machine),
    or with --wall the elapsed time."""
    t = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    dt = time.perf_counter() - t if wall else (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[:200]}"
    return dt, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", default="build/dnnc")
    ap.add_argument("--models", default="statements,concat,sum")
    ap.add_argument("--sizes", help="sizes for every model (default: 1k/4k/16k statements, 1k/4k operands)")
    ap.add_argument("--steps", default="check,plan,build",
                    help="check (parse and sema), plan (dnnc emit --emit=plan: fusion, execution order, memory "
                         "plan, lowering to kernel IR, no LLVM), build (dnnc build: all of it and LLVM), run "
                         "(dnnc run --device cpu at B=1)")
    ap.add_argument("--build-max", type=int, help="build and run only models up to this size (default: 1000 "
                                                   "statements, 4000 operands)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--wall", action="store_true", help="report elapsed time, not CPU time")
    ap.add_argument("--keep", help="write the models here instead of a temporary folder")
    ap.add_argument("--emit", help="only write the models into this folder")
    a = ap.parse_args()
    names = a.models.split(",")
    sizes = {m: ([int(s) for s in a.sizes.split(",")] if a.sizes else DEFAULT_SIZES[m]) for m in names}
    folder = a.emit or a.keep or tempfile.mkdtemp(prefix="dnnc-compile-time-")
    os.makedirs(folder, exist_ok=True)
    files = {}
    for m in names:
        for n in sizes[m]:
            path = os.path.join(folder, f"{m}_{n}.dnn")
            with open(path, "w") as f:
                f.write(MODELS[m](n))
            files[m, n] = path
    if a.emit:
        print("\n".join(files.values()))
        return 0
    os.environ["DNNC_CACHE_DIR"] = "off"  # time LLVM, not the object cache of an earlier run
    commands = {"check": lambda p: [a.dnnc, "check", p],
                "plan": lambda p: [a.dnnc, "emit", p, "--emit=plan", "-o", p + ".plan"],
                "build": lambda p: [a.dnnc, "build", p, "-o", p + ".dnnc"],
                "run": lambda p: [a.dnnc, "run", p, "--device", "cpu", "--bind", "B=1", "--out", p + ".out",
                                  "--threads", "1"]}
    steps = [(s, commands[s]) for s in a.steps.split(",")]
    print(("elapsed" if a.wall else "CPU") + " seconds; x/4x: the growth from the size 4x smaller")
    print(f"{'model':<12}{'size':>7}" + "".join(f"{s:>10}{'x/4x':>7}" for s, _ in steps))
    failed = False
    for m in names:
        prev = {}
        for n in sizes[m]:
            row = f"{m:<12}{n:>7}"
            for s, cmd in steps:
                if s in ("build", "run") and n > (a.build_max or DEFAULT_BUILD_MAX[m]):
                    row += f"{'':>10}{'':>7}"
                    continue
                dt, err = timed(cmd(files[m, n]), a.timeout, a.wall)
                if dt is None:
                    row += f"{'-':>10}{'':>7}"
                    print(f"  {s} {m} {n}: {err}", file=sys.stderr)
                    failed = True
                    prev.pop(s, None)
                    continue
                ratio = ""
                if s in prev and prev[s][0] * 4 == n:
                    ratio = f"{dt / max(prev[s][1], 1e-3):.1f}"
                row += f"{dt:>9.2f}s{ratio:>7}"
                prev[s] = (n, dt)
            print(row, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

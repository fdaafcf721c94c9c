#!/usr/bin/env python3
"""The random-program differential tester (NNSmith-style).

Generates well-typed .dnn programs over every builtin (gen.py), runs each on `ref`, `cpu`,
`cpu --no-fuse` and `cuda-sim`, and compares every device with the program's NumPy twin
(npref.py) and with the reference interpreter: ints and bools bit-exact, NaN and inf
positions equal, floats within a tolerance. Exit 3 (internal error), a signal, a timeout,
exit 1 on a program NumPy evaluates, or exit 0 where NumPy refuses are failures too.
A failing program is shrunk (shrink.py) and can be saved as a regression case.

  difftest.py --dnnc build/dnnc --seed 1 --count 60            # a fixed slice (ctest)
  difftest.py --dnnc build/dnnc --time 600 --shrink --save DIR # a long run
  difftest.py --dnnc build/dnnc --replay tests/fuzz/regressions # the saved cases
  difftest.py --dnnc build/dnnc --seed 7 --show                 # print one program
"""
import argparse
import concurrent.futures as cf
import json
import pickle
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402
import npref  # noqa: E402

DEVICES = [("ref", ["--device", "ref"]), ("cpu", ["--device", "cpu"]), ("cpu-nofuse", ["--device", "cpu", "--no-fuse"]),
           ("cuda-sim", ["--device", "cuda-sim"])]
EXTRA_DEVICES = [("cuda-sim-nofuse", ["--device", "cuda-sim", "--no-fuse"])]  # for regression cases that name it
ALL_OPS = ["zeros", "ones", "full", "arange", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu",
           "silu", "erf", "sin", "cos", "floor", "ceil", "round", "sign", "not", "add", "sub", "mul", "div", "mod", "pow",
           "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "where", "clip", "cast", "sum", "mean",
           "max", "min", "prod", "argmax", "argmin", "logsumexp", "softmax", "log_softmax", "matmul", "conv2d", "max_pool2d",
           "avg_pool2d", "reshape", "transpose", "broadcast_to", "unsqueeze", "squeeze", "concat", "stack", "split", "flatten",
           "pad", "take", "embedding", "one_hot", "topk", "resize", "nonzero", "masked_select", "unique"]
TOL = {"f32": (2e-3, 1e-4), "f16": (2e-2, 2e-3), "bf16": (5e-2, 1e-2)}
TIMEOUT = 60


class Failure:
    """One way a program failed: kind (internal, crash, hang, reject, noerror, mismatch,
    diverge, ...), the device and a detail line."""

    def __init__(self, kind, device, detail):
        self.kind, self.device, self.detail = kind, device, detail

    @property
    def key(self):
        return (self.kind, self.device)

    def __repr__(self):
        return f"{self.kind} on {self.device}: {self.detail}"


def run_device(dnnc, model, inputs_dir, input_names, flags, timeout=TIMEOUT):
    """(rc or 'hang', stderr, outputs)."""
    out = tempfile.mkdtemp(dir=os.path.dirname(model))
    args = [dnnc, "run", model, "--out", out, *flags]
    for n in input_names:
        args += ["--input", f"{n}={os.path.join(inputs_dir, n + '.npy')}"]
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "hang", "", []
    outs, k = [], 0
    while p.returncode == 0 and os.path.exists(os.path.join(out, f"out{k}.npy")):
        outs.append(np.load(os.path.join(out, f"out{k}.npy")))
        k += 1
    shutil.rmtree(out, ignore_errors=True)
    return p.returncode, p.stderr.strip(), outs


KNOWN = dict(gen.KNOWN_OPEN)  # the KNOWN_OPEN entries in force for this run (main sets it)


def compare(got, want, dt, i64_via_double=False):
    """None if got matches want (of dnn dtype dt), else a reason. i64_via_double: the
    values are the oracle's, which rounds i64 through double (KNOWN_OPEN oracle_i64_via_double)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if dt not in npref.FLOATS:
        bad = got != want
        if i64_via_double and dt == "i64":
            g, w = got.astype(np.float64), want.astype(np.float64)
            bad = bad & ~(np.abs(g - w) <= 2.0**-50 * np.abs(w))
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            return f"{int(bad.sum())} of {bad.size} differ, e.g. at {i}: {got[i]} != {want[i]}"
        return None
    g, w = got.astype(np.float64), want.astype(np.float64)
    rtol, atol = TOL[dt]
    with np.errstate(all="ignore"):
        ok = (np.isnan(g) & np.isnan(w)) | (g == w) | (np.isfinite(g) & np.isfinite(w) & (np.abs(g - w) <= atol + rtol * np.abs(w)))
    if not ok.all():
        i = tuple(np.argwhere(~ok)[0])
        return f"{int((~ok).sum())} of {ok.size} differ, e.g. at {i}: {g[i]!r} != {w[i]!r}"
    return None


def expected(prog_np_text, inputs):
    """(outputs, None) or (None, ExpectedError message)."""
    try:
        with np.errstate(all="ignore"):
            return gen.np_eval(prog_np_text, inputs), None
    except npref.ExpectedError as e:
        return None, str(e)
    except Exception as e:  # a twin that cannot evaluate: a tester bug, reported as such
        raise RuntimeError(f"the NumPy twin failed: {e!r}") from e


def check(dnnc, dnn_text, np_text, inputs, out_dtypes, devices=None, workdir=None):
    """Runs one program everywhere: the list of Failures (empty: it passed)."""
    devices = devices or [d for d, _ in DEVICES]
    want, refusal = expected(np_text, inputs)
    failures, results = [], {}
    with tempfile.TemporaryDirectory(dir=workdir) as d:
        model = os.path.join(d, "model.dnn")
        with open(model, "w") as f:
            f.write(dnn_text)
        for n, a in inputs.items():
            np.save(os.path.join(d, n + ".npy"), a)
        for name, flags in DEVICES + EXTRA_DEVICES:
            if name not in devices:
                continue
            rc, err, outs = run_device(dnnc, model, d, list(inputs), flags)
            results[name] = outs
            lines = err.splitlines()
            last = next((l for l in lines if "error" in l), lines[-1] if lines else "")
            if rc == "hang":
                failures.append(Failure("hang", name, f"no answer in {TIMEOUT} s"))
            elif rc == 3:
                failures.append(Failure("internal", name, last))
            elif rc < 0 or rc > 3:
                failures.append(Failure("crash", name, f"exit {rc} {last}"))
            elif rc == 2:
                failures.append(Failure("usage", name, last))
            elif refusal is not None:
                if rc == 0:
                    failures.append(Failure("noerror", name, f"exit 0 where NumPy refuses ({refusal})"))
            elif rc == 1:
                failures.append(Failure("reject", name, last))
            elif len(outs) != len(want):
                failures.append(Failure("count", name, f"{len(outs)} outputs, {len(want)} expected"))
            else:
                lenient = name == "ref" and "oracle_i64_via_double" in KNOWN
                for k, (g, w, dt) in enumerate(zip(outs, want, out_dtypes)):
                    why = compare(g, w, dt, lenient)
                    if why:
                        failures.append(Failure("mismatch", name, f"out{k} ({dt}) vs NumPy: {why}"))
                        break
    # device against device: each against the oracle (already implied where NumPy agrees
    # with both; this names the devices that disagree with the oracle too)
    ref = results.get("ref")
    if ref and refusal is None and not any(f.device == "ref" for f in failures):
        for name, outs in results.items():
            if name == "ref" or not outs or any(f.device == name for f in failures) or len(outs) != len(ref):
                continue
            for k, (g, r, dt) in enumerate(zip(outs, ref, out_dtypes)):
                why = compare(g, r, dt, "oracle_i64_via_double" in KNOWN)
                if why:
                    failures.append(Failure("diverge", name, f"out{k} ({dt}) vs ref: {why}"))
                    break
    return failures


def check_program(dnnc, p, devices=None):
    devices = [d for d in (devices or [d for d, _ in DEVICES]) if d not in getattr(p, "skip_devices", ())]
    return check(dnnc, p.dnn_text(), p.np_text(), p.input_arrays(), [v.dt for v in p.outputs], devices)


def run_seed(args, seed):
    t0 = time.time()
    try:
        p = gen.generate(seed, known_open=args.known, max_stmts=args.max_stmts)
    except Exception as e:  # a generator bug: report it as such
        return seed, None, [Failure("generator", "-", repr(e))], time.time() - t0
    try:
        fails = check_program(args.dnnc, p)
    except RuntimeError as e:
        fails = [Failure("twin", "-", str(e))]
    return seed, p, fails, time.time() - t0


def save_case(dirname, p, failures, note=""):
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, "model.dnn"), "w") as f:
        f.write(p.dnn_text())
    with open(os.path.join(dirname, "expected.py"), "w") as f:
        f.write("# The NumPy twin of model.dnn (npref semantics): program(R, inputs...) -> outputs\n" + p.np_text())
    np.savez(os.path.join(dirname, "inputs.npz"), **p.input_arrays())
    case = {"seed": p.seed, "failure": [[f.kind, f.device, f.detail] for f in failures],
            "out_dtypes": [v.dt for v in p.outputs], "status": "open", "known_open": "", "note": note,
            "command": "dnnc run model.dnn " + " ".join(f"--input {n}={n}.npy" for n in p.input_arrays()) + " --device DEV"}
    with open(os.path.join(dirname, "case.json"), "w") as f:
        json.dump(case, f, indent=1)


def replay(args):
    """Replays every case under args.replay: a case whose status is 'fixed' must pass; an
    'open' one is expected to fail (XFAIL) and is reported when it passes (XPASS)."""
    root = args.replay
    cases = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "case.json")))
    bad = 0
    for c in cases:
        d = os.path.join(root, c)
        case = json.load(open(os.path.join(d, "case.json")))
        inputs = dict(np.load(os.path.join(d, "inputs.npz")))
        KNOWN.clear()  # a case checks its own bug strictly
        KNOWN.update({k: v for k, v in args.known.items() if k != case.get("known_open")})
        try:
            fails = check(args.dnnc, open(os.path.join(d, "model.dnn")).read(), open(os.path.join(d, "expected.py")).read(),
                          inputs, case["out_dtypes"], case.get("devices"))
        except RuntimeError as e:
            print(f"FAIL     {c}: {e}")
            bad += 1
            continue
        status = case.get("status", "fixed")
        if status == "open":
            word = "XFAIL" if fails else "XPASS (fixed? set its status to 'fixed')"
        else:
            word = "ok" if not fails else "FAIL"
            bad += bool(fails)
        print(f"{word:8} {c}" + "".join(f"\n         {f}" for f in fails))
    print(f"{len(cases)} regression cases, {bad} failing")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--seed", type=int, default=1, help="the first seed (programs use seed, seed+1, ...)")
    ap.add_argument("--count", type=int, default=None, help="programs to run")
    ap.add_argument("--time", type=float, default=None, help="seconds to run for (instead of --count)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--max-stmts", type=int, default=10)
    ap.add_argument("--enable", action="append", default=[], help="generate a KNOWN_OPEN feature anyway (or 'all')")
    ap.add_argument("--shrink", action="store_true", help="shrink each failing program")
    ap.add_argument("--save", default=None, help="save shrunk failures as regression cases under this folder")
    ap.add_argument("--replay", default=None, help="replay the regression cases under this folder")
    ap.add_argument("--show", action="store_true", help="print the program of --seed and its NumPy twin")
    ap.add_argument("--keep", default=None, help="pickle each failing program into this folder")
    ap.add_argument("--load", default=None, help="with --show: the pickled program to show (and --shrink)")
    ap.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args()
    args.known = {} if "all" in args.enable else {k: v for k, v in gen.KNOWN_OPEN.items() if k not in args.enable}
    KNOWN.clear()
    KNOWN.update(args.known)
    if args.replay:
        return replay(args)
    if args.show:
        if args.load:
            with open(args.load, "rb") as f:
                p = pickle.load(f)
            args.seed = p.seed
        else:
            p = gen.generate(args.seed, known_open=args.known, max_stmts=args.max_stmts)
        print(p.dnn_text())
        print(p.np_text())
        fails = check_program(args.dnnc, p)
        for f in fails:
            print(f)
        if fails and args.shrink:
            import shrink
            small, sig = shrink.shrink(args.dnnc, p, fails[0])
            print(f"--- shrunk to {len(small.stmts)} statements ---")
            print(small.dnn_text())
            print(small.np_text())
            for k, a in small.input_arrays().items():
                print(f"{k} = np.array({a.tolist()!r}, dtype=np.{a.dtype})")
            for f in sig:
                print(f)
            if args.save:
                save_case(os.path.join(args.save, f"seed{args.seed}_{fails[0].kind}_{fails[0].device}"), small, sig)
        return 0
    if args.count is None and args.time is None:
        args.count = 50
    t0 = time.time()
    done, failed, covered, sigs, skipped = 0, [], set(), {}, {}
    seeds = iter(range(args.seed, args.seed + (args.count if args.count is not None else 10**9)))
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        pending = set()
        while True:
            while len(pending) < 2 * args.jobs and (args.time is None or time.time() - t0 < args.time):
                s = next(seeds, None)
                if s is None:
                    break
                pending.add(pool.submit(run_seed, args, s))
            if not pending:
                break
            finished, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                seed, p, fails, dt = fut.result()
                done += 1
                if p is not None:
                    covered.update(p.ops())
                    for dev in getattr(p, "skip_devices", ()):
                        skipped[dev] = skipped.get(dev, 0) + 1
                if args.verbose:
                    print(f"seed {seed}: {'ok' if not fails else fails} ({dt:.1f} s)", flush=True)
                if fails:
                    failed.append((seed, p, fails))
                    if args.keep and p is not None:  # the program itself: seeds change meaning when gen.py changes
                        os.makedirs(args.keep, exist_ok=True)
                        with open(os.path.join(args.keep, f"seed{seed}.pickle"), "wb") as f:
                            pickle.dump(p, f)
                    for f in fails:
                        sigs.setdefault(f.key, []).append(seed)
                    print(f"FAIL seed {seed}: " + "; ".join(map(repr, fails)), flush=True)
    elapsed = time.time() - t0
    print(f"\nprograms generated: {done}")
    print(f"ops covered: {len(covered & set(ALL_OPS))}/{len(ALL_OPS)} builtins"
          + (f" (never: {', '.join(sorted(set(ALL_OPS) - covered))})" if set(ALL_OPS) - covered else "")
          + f"; control flow: {', '.join(sorted(covered & {'if', 'for', 'while'}))}")
    print(f"devices compared: {', '.join(d for d, _ in DEVICES)} and NumPy"
          + "".join(f"; {dev} skipped for {n} programs (KNOWN_OPEN)" for dev, n in sorted(skipped.items())))
    print(f"KNOWN_OPEN features avoided: {', '.join(sorted(args.known)) or 'none'}")
    print(f"failing programs: {len(failed)}")
    for (kind, dev), seeds_ in sorted(sigs.items()):
        print(f"  {kind} on {dev}: {len(seeds_)} (seeds {', '.join(map(str, seeds_[:8]))}{' ...' if len(seeds_) > 8 else ''})")
    print(f"time: {elapsed:.1f} s, {1000 * elapsed / max(done, 1):.0f} s per 1,000 programs with {args.jobs} jobs")
    if args.shrink and failed:
        import shrink
        for seed, p, fails in failed:
            if p is None:
                continue
            small, sig = shrink.shrink(args.dnnc, p, fails[0])
            print(f"\n--- seed {seed}: {fails[0].kind} on {fails[0].device}, shrunk to {len(small.stmts)} statements ---")
            print(small.dnn_text())
            if args.save:
                save_case(os.path.join(args.save, f"seed{seed}_{fails[0].kind}_{fails[0].device}"), small, sig)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

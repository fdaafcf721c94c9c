#!/usr/bin/env python3
"""examples/runtime/run_artifact (the C API, no compiler) runs built artifacts and agrees
with `dnnc run` on the same artifact and inputs, at two shapes each, and on a checkpoint
read by names from shards (named outputs), with the loader's notes (dnnc_last_notes)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--dnnc", required=True)
ap.add_argument("--runner", required=True)
ap.add_argument("--examples", required=True)
args = ap.parse_args()

CASES = {  # model: [{input: (shape, dtype)}] at two bindings
    "mlp.dnn": [{"x": ((1, 784), np.float32)}, {"x": ((5, 784), np.float32)}],
    "transformer.dnn": [{"tokens": ((1, 3), np.int32)}, {"tokens": ((2, 11), np.int32)}],
}


def pattern(shape, dtype):
    i = np.arange(int(np.prod(shape)))
    values = np.sin(0.1 * i.astype(np.float32)) if dtype == np.float32 else i % 7
    return values.astype(dtype).reshape(shape)


failures = 0
with tempfile.TemporaryDirectory() as d:
    for model, bindings in CASES.items():
        artifact = os.path.join(d, model + ".dnnc")
        subprocess.run([args.dnnc, "build", os.path.join(args.examples, model), "-o", artifact], check=True)
        for inputs in bindings:
            shapes = [f"{name}={'x'.join(map(str, shape))}" for name, (shape, _) in inputs.items()]
            p = subprocess.run([args.runner, artifact, *shapes], capture_output=True, text=True)
            q_args = [args.dnnc, "run", artifact, "--out", os.path.join(d, "out")]
            for name, (shape, dtype) in inputs.items():
                np.save(os.path.join(d, name + ".npy"), pattern(shape, dtype))
                q_args += ["--input", f"{name}={os.path.join(d, name + '.npy')}"]
            q = subprocess.run(q_args, capture_output=True, text=True)
            if p.returncode != 0 or q.returncode != 0:
                print(f"FAIL {model} {shapes}: {p.stderr}{q.stderr}")
                failures += 1
                continue
            want = np.load(os.path.join(d, "out", "out0.npy")).astype(np.float64)
            m = re.search(r"out0: shape \[([\d, ]*)\], sum (\S+), first:(.*)", p.stdout)
            shape = tuple(int(x) for x in m.group(1).split(", ")) if m.group(1) else ()
            first = [float(x) for x in m.group(3).split()]
            ok = (shape == want.shape and np.isclose(float(m.group(2)), want.sum(), rtol=1e-4, atol=1e-4)
                  and np.allclose(first, want.reshape(-1)[:4], rtol=1e-4, atol=1e-5))
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'} {model} {shapes}: {p.stdout.strip().splitlines()[-1]}")
    # A checkpoint by Hugging Face names (tests/golden/cli/weights.dnn, bf16 and f64 tensors,
    # stacked layers) through the C API from its two shards, against dnnc run on the same
    # artifact from the shards' index: named outputs print under their names.
    golden = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "cli")
    artifact = os.path.join(d, "weights.dnnc")
    subprocess.run([args.dnnc, "build", os.path.join(golden, "weights.dnn"), "-o", artifact], check=True)
    shards = [os.path.join(golden, "inputs", f"ckpt-0000{k}-of-00002.safetensors") for k in (1, 2)]
    p = subprocess.run([args.runner, artifact, "--weights", shards[0], "--weights", shards[1], "ids=3", "mask=3"],
                       capture_output=True, text=True)
    q_args = [args.dnnc, "run", artifact, "--out", os.path.join(d, "out"), "--weights",
              os.path.join(golden, "inputs", "ckpt.safetensors.index.json")]
    for name, dtype in (("ids", np.int32), ("mask", np.float32)):
        np.save(os.path.join(d, name + ".npy"), pattern((3,), dtype))
        q_args += ["--input", f"{name}={os.path.join(d, name + '.npy')}"]
    q = subprocess.run(q_args, capture_output=True, text=True)
    m = re.search(r"^h: shape \[3, 3\], sum (\S+), first:(.*)", p.stdout, re.M)
    ok = p.returncode == 0 and q.returncode == 0 and m is not None and "out1: shape [3]" in p.stdout
    if ok:
        want = np.load(os.path.join(d, "out", "h.npy")).astype(np.float64)
        ok = (np.isclose(float(m.group(1)), want.sum(), rtol=1e-4, atol=1e-4)
              and np.allclose([float(x) for x in m.group(2).split()], want.reshape(-1)[:4], rtol=1e-4, atol=1e-5))
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'} weights.dnn from shards: {p.stdout.strip()} {p.stderr.strip()} {q.stderr.strip()}")
    # The loader's notes through dnnc_last_notes (run_artifact prints each on stderr): the
    # checkpoint's tensors no param uses, as dnnc run says it; without weights, each param
    # filled from its initializer.
    want = ("run_artifact: note: 2 tensors in the weights are used by no param of model 'main': "
            "'pooler.dense.bias', 'pooler.dense.weight'\n")
    ok = p.stderr == want
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'} notes of weights.dnn from shards: {p.stderr!r}")
    p = subprocess.run([args.runner, artifact, "ids=2", "mask=2"], capture_output=True, text=True)
    want = "".join(f"run_artifact: note: param '{name}' ({ty}) filled from its initializer {init}: no weights were given\n"
                   for name, ty, init in (("emb", "f32[4, 3]", "normal(0.0, 0.02)"), ("wq", "f32[2, 3, 3]", "normal(0.0, 0.02)"),
                                          ("bq", "f32[2, 3]", "normal(0.0, 0.02)"), ("scale", "f32[3]", "ones()")))
    ok = p.returncode == 0 and p.stderr == want
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'} notes of weights.dnn without weights: {p.stderr!r}")
    # Bad shapes on its command line are usage errors with a message, not an abort.
    artifact = os.path.join(d, "mlp.dnn.dnnc")
    for shape, message in (("x=-2x784", "run_artifact: '-2' is not a dim (a count from 0 to 2^40) in 'x=-2x784'"),
                           ("x=2xx784", "run_artifact: '' is not a dim (a count from 0 to 2^40) in 'x=2xx784'"),
                           ("x=99999999999x99999999999", "run_artifact: input 'x' is too large")):
        p = subprocess.run([args.runner, artifact, shape], capture_output=True, text=True)
        ok = p.returncode == 2 and p.stderr.strip() == message
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'} run_artifact {shape}: exit {p.returncode}, {p.stderr.strip()}")
sys.exit(1 if failures else 0)

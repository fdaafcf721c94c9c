#!/usr/bin/env python3
"""Every example's kernels as PTX for sm_80 and sm_90, each assembled by CUDA's ptxas.
Exits 77 (ctest: skipped) where the CUDA toolkit is not installed."""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--dnnc", required=True)
ap.add_argument("--examples", required=True)
args = ap.parse_args()

cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
ptxas = shutil.which("ptxas") or (os.path.join(cuda, "bin", "ptxas") if os.path.exists(os.path.join(cuda, "bin", "ptxas")) else None)
if not ptxas:
    print("SKIPPED: no ptxas (install the CUDA toolkit or set CUDA_HOME)")
    sys.exit(77)

failures = 0
with tempfile.TemporaryDirectory() as d:
    for model in sorted(glob.glob(os.path.join(args.examples, "*.dnn"))):
        for arch in ("sm_80", "sm_90"):
            ptx = os.path.join(d, "k.ptx")
            p = subprocess.run([args.dnnc, "emit", model, "--emit=ptx", "--arch", arch, "-o", ptx], capture_output=True, text=True)
            if p.returncode != 0:
                print(f"FAIL {model} {arch}: dnnc exited {p.returncode}\n{p.stderr}")
                failures += 1
                continue
            text = open(ptx).read()
            entries = text.count("\n.visible .entry")
            # Each kernel states its block size (.maxntid), so that ptxas keeps its registers
            # within what a block of that size may have: a launch never asks for too many.
            bounded = len(re.findall(r"\n\.maxntid \d+, 1, 1", text))
            q = subprocess.run([ptxas, "-v", f"-arch={arch}", ptx, "-o", os.path.join(d, "k.cubin")], capture_output=True, text=True)
            registers = [int(r) for r in re.findall(r"Used (\d+) registers", q.stderr)]
            status = "ok" if q.returncode == 0 and entries > 0 and bounded == entries and max(registers, default=0) <= 255 else "FAIL"
            failures += status != "ok"
            print(f"{status} {os.path.basename(model)} {arch}: {entries} kernels, {bounded} with .maxntid, at most "
                  f"{max(registers, default=0)} registers{'' if q.returncode == 0 else chr(10) + q.stderr}")
sys.exit(1 if failures else 0)

#!/usr/bin/env python3
"""docs/builtins.md is what `dnnc builtins --markdown` prints from the op registry
(ir/graph/Ops.def): fails, showing the difference and how to regenerate, when it is not.
Checks first that a document one line off is reported stale (the check can fail)."""
import argparse
import difflib
import subprocess
import sys

HOW = "regenerate it: build/dnnc builtins --markdown > docs/builtins.md"


def stale(doc, generated):
    """The failure message when `doc` differs from `generated`, else None."""
    if doc == generated:
        return None
    diff = "".join(list(difflib.unified_diff(doc.splitlines(True), generated.splitlines(True), "docs/builtins.md",
                                             "dnnc builtins --markdown"))[:60])
    return f"docs/builtins.md is stale: the op registry (ir/graph/Ops.def) says otherwise; {HOW}\n{diff}"


ap = argparse.ArgumentParser()
ap.add_argument("--dnnc", required=True)
ap.add_argument("--doc", required=True)
a = ap.parse_args()
p = subprocess.run([a.dnnc, "builtins", "--markdown"], capture_output=True, text=True)
if p.returncode != 0 or "| `gelu(x)` |" not in p.stdout:
    sys.exit(f"dnnc builtins --markdown failed (exit {p.returncode}):\n{p.stderr}")
lines = p.stdout.splitlines(True)
message = stale("".join(lines[:-1]), p.stdout)
if message is None or HOW not in message or "+" + lines[-1] not in message:
    sys.exit(f"the staleness check missed a dropped line:\n{message}")
with open(a.doc) as f:
    message = stale(f.read(), p.stdout)
if message:
    sys.exit(message)
print(f"docs/builtins.md is fresh ({p.stdout.count(chr(10) + '| `')} builtins)")

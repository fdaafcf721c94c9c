#!/usr/bin/env python3
"""Robustness: every example (and the stdlib) truncated at many points and with random
byte edits is fed to `dnnc check`, which must exit 0 or 1 (with a located diagnostic on
1), never crash (no other status, no signal) and never hang. Seeded, so reproducible."""
import argparse
import concurrent.futures
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

DIAG = re.compile(r"(^|\n)\S+:\d+:\d+: error: .* \[[a-z-]+\]\n|(^|\n)\S*: ?error: ")


def mutations(data, rng, count):
    out = []
    n = len(data)
    for i in range(1, count + 1):  # cut points spread over the file
        out.append(("truncate", data[: n * i // (count + 1)]))
    alphabet = b"()[]{},;:=+-*/%@.<>!#\"'\\_ \n\t0123456789abcxyzTBD\x00\xff\xc3"
    for _ in range(count):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(b) + 1)
            op = rng.choice(["replace", "insert", "delete", "duplicate"])
            if op == "replace" and pos < len(b):
                b[pos] = rng.choice(alphabet)
            elif op == "insert":
                b[pos:pos] = bytes([rng.choice(alphabet)])
            elif op == "delete" and pos < len(b):
                del b[pos : pos + rng.randint(1, 8)]
            else:
                end = min(len(b), pos + rng.randint(1, 20))
                b[pos:pos] = b[pos:end]
        out.append(("edit", bytes(b)))
    return out


def check(dnnc, stdlib, workdir, name, data):
    path = os.path.join(workdir, name)
    with open(path, "wb") as f:
        f.write(data)
    env = dict(os.environ, DNNC_STDLIB=stdlib)
    try:
        p = subprocess.run([dnnc, "check", path], capture_output=True, timeout=20, env=env)
    except subprocess.TimeoutExpired:
        return "hang (over 20 s)"
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode == 0:
        return None if not err else f"exit 0 but printed: {err[:300]}"
    if p.returncode != 1:
        return f"exit {p.returncode}: {err[-600:]}"
    if not DIAG.search(err):
        return f"exit 1 without a diagnostic: {err[:300]}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--stdlib", required=True)
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("examples")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    cases = []
    for name in sorted(os.listdir(a.examples)):
        if name.endswith(".dnn"):
            with open(os.path.join(a.examples, name), "rb") as f:
                data = f.read()
            cases += [(name, kind, d) for kind, d in mutations(data, rng, a.count)]
    with open(os.path.join(a.stdlib, "nn.dnn"), "rb") as f:
        stdlib_cases = mutations(f.read(), rng, a.count // 2)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        def one(i_case):
            i, (name, kind, data) = i_case
            d = os.path.join(tmp, str(i))
            os.makedirs(d)
            return name, kind, data, check(a.dnnc, os.path.abspath(a.stdlib), d, name, data)

        def one_stdlib(i_case):
            i, (kind, data) = i_case
            d = os.path.join(tmp, f"s{i}")
            os.makedirs(d)
            with open(os.path.join(d, "nn.dnn"), "wb") as f:
                f.write(data)
            shutil.copy(os.path.join(a.examples, "transformer.dnn"), d)
            return "nn.dnn", kind, data, check(a.dnnc, d, d, "transformer.dnn", open(os.path.join(d, "transformer.dnn"), "rb").read())

        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            results = list(pool.map(one, enumerate(cases))) + list(pool.map(one_stdlib, enumerate(stdlib_cases)))
    for name, kind, data, problem in results:
        if problem:
            failures.append((name, kind, data, problem))
    print(f"{len(results)} mutated inputs checked, {len(failures)} failures")
    for name, kind, data, problem in failures[:10]:
        print(f"--- {name} ({kind}): {problem}\n{data.decode('utf-8', 'replace')[:2000]}\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

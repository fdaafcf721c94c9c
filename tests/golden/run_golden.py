#!/usr/bin/env python3
"""Golden-file tests (FileCheck-style, Carbon's fail_*.dnn): a test file holds its RUN
lines and, at its end, the exact output it expects.

  # RUN: dnnc check %s                  one command; %s is this file, %examples the examples
  # RUN: env DNNC_NUM_THREADS=0 dnnc ... with an environment variable set
  # STDIN: :type x                       a line fed to the commands' standard input
  # EXIT: 1                              the exit status expected of every RUN (default 0)
  # MASK: [0-9]+\.[0-9]+                 a regex whose matches print as `~` (output that varies: times);
                                        with a mask, runs of spaces print as one (columns change width)
  # ---- expected output ----           everything after this line, with '# ' removed

The output compared is, for each RUN, `$ COMMAND` then its stdout and stderr. Paths are
relative to the test's folder; the stdlib folder prints as <stdlib>.
Use --update to rewrite the expected block from what the commands print now."""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys

MARK = "# ---- expected output ----"


def parse(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    head, _, expected = text.partition(MARK + "\n")
    runs, stdin, exit_code, masks = [], [], 0, []
    for line in head.splitlines():
        if line.startswith("# RUN: "):
            runs.append(line[len("# RUN: "):])
        elif line.startswith("# STDIN: ") or line == "# STDIN:":
            stdin.append(line[len("# STDIN: "):])
        elif line.startswith("# EXIT: "):
            exit_code = int(line[len("# EXIT: "):])
        elif line.startswith("# MASK: "):
            masks.append(re.compile(line[len("# MASK: "):]))
    want = "".join(l[2:] + "\n" if l.startswith("# ") else "\n" for l in expected.splitlines())
    return head, runs, stdin, exit_code, masks, want


def run(dnnc, path, runs, stdin, stdlib, examples, masks):
    folder = os.path.dirname(os.path.abspath(path))
    out = []
    codes = []
    for cmd in runs:
        rel_examples = os.path.relpath(examples, folder)
        shown = cmd.replace("%s", os.path.basename(path)).replace("%examples", rel_examples)
        args = shlex.split(shown)
        # `dnnc` may follow `env NAME=VALUE`.
        args = [os.path.abspath(dnnc) if a == "dnnc" else a for a in args]
        # The built-in GEMM table, not this machine's tuned one, and no forced variant:
        # --profile names the variants it picks (a RUN line may still set either).
        env = {k: v for k, v in os.environ.items() if k != "DNNC_GEMM_VARIANT"}
        env.update(DNNC_STDLIB=stdlib, DNNC_TUNE_TABLE=os.path.join(folder, "no-such-tune-table.json"))
        # Each run writes into an empty --out folder: what an earlier test left there would
        # show in the note about outputs this run did not write.
        if "--out" in args and args.index("--out") + 1 < len(args) and args[args.index("--out") + 1].startswith("/tmp/dnnc_golden"):
            shutil.rmtree(args[args.index("--out") + 1], ignore_errors=True)
        feed = "".join(l.replace("%examples", rel_examples) + "\n" for l in stdin)
        p = subprocess.run(args, cwd=folder, input=feed,
                           capture_output=True, text=True, env=env, timeout=60)
        # A sanitized build's notice about the simulated GPU's swapcontext is not dnnc's output.
        stderr = re.sub(r"==\d+==WARNING: ASan doesn't fully support makecontext/swapcontext[^\n]*\n?", "", p.stderr)
        text = (p.stdout + stderr).replace(stdlib, "<stdlib>")
        for mask in masks:
            text = mask.sub("~", text)
        if masks:
            text = re.sub(" +", " ", text)
        out.append(f"$ {shown}\n{text}")
        codes.append(p.returncode)
    return "".join(out), codes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--stdlib", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--update", action="store_true")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    failed = 0
    for path in a.files:
        head, runs, stdin, exit_code, masks, want = parse(path)
        if not runs:
            print(f"{path}: no RUN line", file=sys.stderr)
            failed += 1
            continue
        got, codes = run(a.dnnc, path, runs, stdin, os.path.abspath(a.stdlib), os.path.abspath(a.examples), masks)
        if a.update:
            body = "".join(("# " + l).rstrip() + "\n" for l in got.splitlines())
            with open(path, "w", encoding="utf-8") as f:
                f.write(head.rstrip("\n") + "\n" + MARK + "\n" + body)
            continue
        bad_codes = [c for c in codes if c != exit_code]
        norm = lambda t: "\n".join(l.rstrip() for l in t.rstrip().splitlines())
        if norm(got) != norm(want) or bad_codes:
            failed += 1
            print(f"FAIL {path}", file=sys.stderr)
            if bad_codes:
                print(f"  exit statuses {codes}, expected {exit_code}", file=sys.stderr)
            import difflib
            sys.stderr.writelines(difflib.unified_diff(want.rstrip().splitlines(True), got.rstrip().splitlines(True),
                                                       "expected", "actual"))
            print(file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

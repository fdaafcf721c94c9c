#!/usr/bin/env python3
"""Checks dnnc's layering: every source may include only its own folder and the folders
of the libraries its library depends on (transitively), as declared with dnnc_library()
and dnnc_layer() in the CMake files (written to <build>/layers.txt). On top of the
declared graph, a few rules hold whatever the declarations say: the IR and the runtime
never reach the frontend, the backend or the driver, and the runtime never links the
reference interpreter (the tests' oracle must stay independent of what it checks).

Exit 0 when all holds; 1 with one line per violation (file:line: what) otherwise."""
import argparse
import os
import re
import sys

# (layer prefix, forbidden folder prefix or library, why)
RULES = [
    ("ir/", "frontend", "the IR sits below the frontend"),
    ("ir/", "backend", "the IR sits below the backend"),
    ("ir/", "tools", "the IR sits below the driver"),
    ("runtime", "frontend", "the runtime needs no compiler"),
    ("runtime", "backend", "the runtime needs no compiler"),
    ("runtime", "tools", "the runtime sits below the driver"),
    ("runtime", "ir/transforms", "the runtime needs no compiler"),
    ("runtime", "api", "the runtime needs no compiler"),
    ("ir/", "api", "the IR sits below the compiler's library API"),
    ("backend", "api", "the backend sits below the compiler's library API"),
    ("frontend", "api", "the frontend sits below the compiler's library API"),
    ("api", "tools", "the library API sits below the driver"),
    ("runtime", "dnnc_interp", "the reference interpreter is the tests' independent oracle, not the runtime's executor"),
    ("import", "frontend", "the importer writes .dnn text; the driver checks it with the frontend"),
    ("import", "backend", "the importer writes .dnn text and compiles nothing"),
    ("import", "tools", "the importer sits below the driver"),
    ("base", "ir", "base sits below every phase"),
    ("base", "runtime", "base sits below every phase"),
]
PROJECT_FOLDERS = ("base", "ir", "runtime", "backend", "frontend", "import", "api", "tools", "python")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_layers(path):
    lib_dir, deps, dirs = {}, {}, []
    for line in open(path):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "lib":
            lib_dir[parts[1]] = parts[2]
        elif parts[0] == "dep":
            deps.setdefault(parts[1], []).append(parts[2])
        elif parts[0] == "dir":
            dirs.append(parts[1])
    return lib_dir, deps, dirs


def closure(dir_, lib_dir, deps):
    """The dnnc libraries `dir_` may use, directly or through its dependencies."""
    seen, pending = set(), list(deps.get(dir_, []))
    while pending:
        lib = pending.pop()
        if lib in seen or lib not in lib_dir:
            continue
        seen.add(lib)
        pending.extend(deps.get(lib_dir[lib], []))
    return seen


def check(root, lib_dir, deps, dirs):
    problems = []
    for d in dirs:
        libs = closure(d, lib_dir, deps)
        allowed = {d} | {lib_dir[l] for l in libs}
        for prefix, forbidden, why in RULES:
            if not (d == prefix or d.startswith(prefix)):
                continue
            bad = [l for l in libs if l == forbidden or lib_dir[l].startswith(forbidden)]
            if bad:
                problems.append(f"{d}: depends on {', '.join(sorted(bad))}, which {d} must not use: {why}")
        folder = os.path.join(root, d)
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if not os.path.isfile(path) or not name.endswith((".h", ".cpp", ".def")):
                continue
            for number, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = INCLUDE.match(line)
                if not m or "/" not in m.group(1) or m.group(1).split("/")[0] not in PROJECT_FOLDERS:
                    continue
                target = os.path.dirname(m.group(1))
                rel = os.path.relpath(path, root)
                for prefix, forbidden, why in RULES:
                    if (d == prefix or d.startswith(prefix)) and target.startswith(lib_dir.get(forbidden, forbidden)):
                        problems.append(f"{rel}:{number}: includes {m.group(1)}: {why}")
                        break
                else:
                    if target not in allowed:
                        problems.append(f"{rel}:{number}: includes {m.group(1)}, but {d} may use only "
                                        f"{', '.join(sorted(allowed))} (declare the dependency in CMake if it is meant)")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", required=True, help="layers.txt written by CMake")
    ap.add_argument("--root", required=True, help="the source tree")
    args = ap.parse_args()
    problems = check(args.root, *read_layers(args.layers))
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

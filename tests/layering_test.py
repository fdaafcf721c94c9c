#!/usr/bin/env python3
"""The layering check (scripts/check_layering.py): the real tree passes, and an upward
include, a forbidden dependency or an undeclared one each fail with a message naming it."""
import os
import subprocess
import sys
import tempfile

checker, layers, root = sys.argv[1:4]


def run(layers_path, root_path):
    p = subprocess.run([sys.executable, checker, "--layers", layers_path, "--root", root_path],
                       capture_output=True, text=True)
    return p.returncode, p.stderr


def expect(code, err, want):
    if code != 1 or want not in err:
        sys.exit(f"expected exit 1 with {want!r}, got {code}: {err}")


code, err = run(layers, root)
if code != 0:
    sys.exit(f"the source tree breaks its layering:\n{err}")

with tempfile.TemporaryDirectory() as tmp:
    def tree(files, lines):
        for d in ("base", "ir/graph", "ir/kernel", "ir/transforms", "ir/interp", "runtime", "frontend"):
            os.makedirs(os.path.join(tmp, d), exist_ok=True)
        for path, text in files.items():
            with open(os.path.join(tmp, path), "w") as f:
                f.write(text)
        with open(os.path.join(tmp, "layers.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        return os.path.join(tmp, "layers.txt")

    declared = ["lib dnnc_base base", "dir base", "lib dnnc_graph ir/graph", "dep ir/graph dnnc_base", "dir ir/graph",
                "lib dnnc_kernel_ir ir/kernel", "dep ir/kernel dnnc_graph", "dir ir/kernel",
                "lib dnnc_transforms ir/transforms", "dep ir/transforms dnnc_graph", "dir ir/transforms",
                "lib dnnc_interp ir/interp", "dep ir/interp dnnc_graph", "dir ir/interp",
                "lib dnnc_runtime runtime", "dep runtime dnnc_graph", "dir runtime",
                "lib dnnc_frontend frontend", "dep frontend dnnc_transforms", "dir frontend"]
    # A runtime that includes the frontend.
    expect(*run(tree({"runtime/Exe.cpp": '#include "base/Tensor.h"\n#include "frontend/Sema.h"\n'}, declared), tmp),
           "runtime/Exe.cpp:2: includes frontend/Sema.h: the runtime needs no compiler")
    os.remove(os.path.join(tmp, "runtime/Exe.cpp"))
    # A kernel IR that includes the transforms (not among its dependencies).
    expect(*run(tree({"ir/kernel/K.h": '#include "ir/transforms/Fusion.h"\n'}, declared), tmp),
           "ir/kernel/K.h:1: includes ir/transforms/Fusion.h, but ir/kernel may use only")
    os.remove(os.path.join(tmp, "ir/kernel/K.h"))
    # A runtime that links the reference interpreter, whatever it includes.
    expect(*run(tree({}, declared + ["dep runtime dnnc_interp"]), tmp),
           "runtime: depends on dnnc_interp, which runtime must not use")
    # A base that includes the IR.
    expect(*run(tree({"base/B.h": '#include "ir/graph/Graph.h"\n'}, declared), tmp),
           "base/B.h:1: includes ir/graph/Graph.h: base sits below every phase")
print("layering: the tree passes; 4 violations caught")

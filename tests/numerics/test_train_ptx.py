#!/usr/bin/env python3
"""The training step's PTX, assembled by CUDA's ptxas (spec training.md §12: `dnnc train
--device cuda` runs it; no GPU is needed to check that it assembles).

Every example with a float path to a loss (the models of test_grad_models.py, at the
examples' own sizes: the transformer with D = 256 and V = 1000, the MLP with 784 inputs),
its loss added as there, made into a training step by `dnnc emit --train=OPTIMIZER
--emit=ptx`, is assembled by ptxas for its architecture (sm_80 or sm_90, alternating). The
MLP goes through every optimizer (SGD and AdamW with weight decay, so the L2 and the
decoupled decay are in the step), the transformer through SGD and AdamW, the others through
AdamW, whose update has the most ops (the backward kernels do not depend on the optimizer;
the transformer's steps take 10-25 s each to emit and assemble). Exits 77 (ctest: skipped)
where the CUDA toolkit is not installed.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnnc_test_util import example_with_loss, run_with_exe  # noqa: E402
from test_grad_models import MODELS, ROOT  # noqa: E402

# (optimizer, its settings for dnnc emit)
EVERY_OPTIMIZER = [("sgd", ["--weight-decay", "0.01"]), ("momentum", ["--momentum", "0.8"]), ("adam", []),
                   ("adamw", ["--weight-decay", "0.01"])]
CONFIGS = {name: EVERY_OPTIMIZER if name == "mlp" else EVERY_OPTIMIZER[::3] if name == "transformer" else EVERY_OPTIMIZER[3:]
           for name in MODELS}


def find_ptxas():
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    return shutil.which("ptxas") or (os.path.join(cuda, "bin", "ptxas") if os.path.exists(os.path.join(cuda, "bin", "ptxas")) else None)


class TrainPtx(unittest.TestCase):
    exe = None
    ptxas = None

    def test_training_steps_assemble(self):
        n = 0
        with tempfile.TemporaryDirectory() as d:
            for example, configs in CONFIGS.items():
                m = MODELS[example]
                with open(os.path.join(ROOT, "examples", example + ".dnn")) as f:
                    source, _ = example_with_loss(f.read(), {}, m["loss"], m["inputs"], prediction=m.get("pattern", "prediction"))
                model = os.path.join(d, example + ".dnn")
                with open(model, "w") as f:
                    f.write(source)
                for optimizer, settings in configs:
                    arch = ("sm_80", "sm_90")[n % 2]
                    n += 1
                    with self.subTest(example=example, optimizer=optimizer, arch=arch):
                        ptx = os.path.join(d, "step.ptx")
                        p = subprocess.run([self.exe, "emit", model, "-I", os.path.join(ROOT, "stdlib"), f"--train={optimizer}",
                                            *settings, "--emit=ptx", "--arch", arch, "-o", ptx], capture_output=True, text=True,
                                           timeout=600)
                        self.assertEqual(p.returncode, 0, p.stderr)
                        with open(ptx) as f:
                            text = f.read()
                        self.assertIn(f".target {arch}", text)
                        self.assertGreater(text.count("\n.visible .entry "), 10)  # the forward, backward and update kernels
                        q = subprocess.run([self.ptxas, f"-arch={arch}", ptx, "-o", os.path.join(d, "step.cubin")],
                                           capture_output=True, text=True, timeout=600)
                        self.assertEqual(q.returncode, 0, q.stderr)

    def test_twins_launch_one_entry(self):
        """Kernels with the same code (exp of x and of y) are one PTX entry: `dnnc emit
        --emit=ptx` lists the twin in a comment, and a cuda artifact names the entry the
        twin launches (format 5), in a PTX that ptxas assembles."""
        model = "dim N;\nmodel main(x: f32[N], y: f32[N]) -> (f32[N], f32[N]) {\n  return (exp(x), exp(y));\n}\n"
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "twins.dnn")
            with open(path, "w") as f:
                f.write(model)
            e = subprocess.run([self.exe, "emit", path, "--emit=ptx", "--no-fuse"], capture_output=True, text=True, timeout=300)
            self.assertEqual(e.returncode, 0, e.stderr)
            entries = re.findall(r"^\.visible \.entry (\w+)\(", e.stdout, re.M)
            twins = re.findall(r"^// (\w+) launches (\w+)$", e.stdout, re.M)
            self.assertEqual(len(entries), 1, e.stdout)
            self.assertEqual(len(twins), 1)
            self.assertEqual(twins[0][1], entries[0])
            artifact = os.path.join(d, "twins.dnnc")
            b = subprocess.run([self.exe, "build", path, "-o", artifact, "--target", "cuda", "--arch", "sm_80"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(b.returncode, 0, b.stderr)
            with open(artifact, "rb") as f:
                data = f.read()
            header_size, payload_size = struct.unpack("<QQ", data[8:24])
            header = json.loads(data[32:32 + header_size])
            self.assertEqual(header["format"], 5)
            kernels = header["kernels"]
            self.assertEqual([k.get("entry") for k in kernels], [None, kernels[0]["name"]])
            ptx = os.path.join(d, "twins.ptx")
            with open(ptx, "wb") as f:
                f.write(data[32 + header_size:32 + header_size + payload_size])
            q = subprocess.run([self.ptxas, "-arch=sm_80", ptx, "-o", os.path.join(d, "twins.cubin")], capture_output=True,
                               text=True, timeout=300)
            self.assertEqual(q.returncode, 0, q.stderr)


if __name__ == "__main__":
    TrainPtx.ptxas = find_ptxas()
    if not TrainPtx.ptxas:
        print("SKIPPED: no ptxas (install the CUDA toolkit or set CUDA_HOME)")
        sys.exit(77)
    run_with_exe(TrainPtx)

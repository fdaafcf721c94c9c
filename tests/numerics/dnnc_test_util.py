"""Helpers for tests that run dnnc on files they write: .npy and .safetensors writers and
a runner that returns the outputs as NumPy arrays."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

SAFE_DTYPES = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("int32"): "I32",
               np.dtype("int64"): "I64", np.dtype("bool"): "BOOL"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        raw = a.tobytes()
        header[name] = {"dtype": SAFE_DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class Dnnc:
    def __init__(self, exe, examples, device="ref"):
        self.exe, self.examples, self.device = exe, examples, device

    def run(self, model, weights, inputs, extra=()):
        """Runs dnnc on `model` with the given arrays; returns (outputs, completed process)."""
        with tempfile.TemporaryDirectory() as d:
            args = [self.exe, "run", os.path.join(self.examples, model) if not os.path.isabs(model) else model,
                    "--out", os.path.join(d, "out"), "--device", self.device, *extra]
            if weights is not None:
                write_safetensors(os.path.join(d, "w.safetensors"), weights)
                args += ["--weights", os.path.join(d, "w.safetensors")]
            for name, a in inputs.items():
                np.save(os.path.join(d, name + ".npy"), a)
                args += ["--input", f"{name}={os.path.join(d, name + '.npy')}"]
            p = subprocess.run(args, capture_output=True, text=True, timeout=600)
            outs = []
            k = 0
            while os.path.exists(os.path.join(d, "out", f"out{k}.npy")):
                outs.append(np.load(os.path.join(d, "out", f"out{k}.npy")))
                k += 1
            return outs, p


def assert_matches(got, want, rtol, atol, msg=""):
    """Floats agree within the tolerances; integers and bools exactly."""
    if np.issubdtype(got.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=msg)
    else:
        np.testing.assert_array_equal(got, want, err_msg=msg)


def run_tests(cls, verbosity=2):
    """The command line of the NumPy test scripts: --dnnc, --examples, --device."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--device", default="ref")
    a, rest = ap.parse_known_args()
    cls.dnnc = Dnnc(a.dnnc, a.examples, a.device)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=verbosity)

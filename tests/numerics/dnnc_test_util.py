"""Helpers for tests that run dnnc on files they write: .npy and .safetensors writers and
a runner that returns the outputs as NumPy arrays."""
import argparse
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

SAFE_DTYPES = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("int32"): "I32",
               np.dtype("int64"): "I64", np.dtype("bool"): "BOOL", np.dtype("float64"): "F64"}


class BF16:
    """An array stored as bfloat16 (NumPy has no such dtype): `bits` holds the rounded
    values' upper halves, `values` the float32 values they stand for."""

    def __init__(self, a):
        u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
        rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)  # to nearest, ties to even
        self.bits = rounded.astype(np.uint16)
        self.values = (self.bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _splitmix64(z):
    z = (np.asarray(z, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def dropout_keep(shape, p, seed=0, step=0, stream=0):
    """dropout's keep mask (base/Random.h, written again here): element i of a row-major
    tensor is kept when (mix(key ^ i) >> 40) / 2^24 >= p, key = mix(mix(mix(seed) ^ step) ^ stream)."""
    with np.errstate(over="ignore"):
        key = _splitmix64(_splitmix64(_splitmix64(np.uint64(seed)) ^ np.uint64(step)) ^ np.uint64(stream))
        bits = _splitmix64(key ^ np.arange(int(np.prod(shape)), dtype=np.uint64))
    return ((bits >> np.uint64(40)).astype(np.float64) * 2.0 ** -24 >= p).reshape(shape)


def conv2d_ref(x, w, stride=1, padding=0, dilation=1, groups=1):
    """PyTorch's conv2d (cross-correlation; stride, zero padding, dilation, groups) in
    float64, the tests' NumPy twin: each group's output is one tensordot of the input's
    windows (a strided view, no copies) with the group's weights."""
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = sliding_window_view(xp, (dilation * (kh - 1) + 1, dilation * (kw - 1) + 1), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride, ::dilation, ::dilation]  # N, C, OH, OW, KH, KW
    og = o // groups
    return np.concatenate([np.tensordot(windows[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og], axes=([1, 4, 5], [1, 2, 3]))
                           for g in range(groups)], -1).transpose(0, 3, 1, 2)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        dtype = "BF16" if isinstance(a, BF16) else None
        a = a.bits if isinstance(a, BF16) else a
        a = np.ascontiguousarray(a).reshape(np.shape(a))  # ascontiguousarray makes a 0-d array 1-d
        raw = a.tobytes()
        header[name] = {"dtype": dtype or SAFE_DTYPES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    """The tensors of a .safetensors file, by name (the dtypes write_safetensors writes)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    dtypes = {v: k for k, v in SAFE_DTYPES.items()}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out


class Dnnc:
    """Runs dnnc. With `prebuilt`, each model is compiled once by `dnnc build` and every run
    loads that artifact: the runner checks that no run compiled anything and that the
    artifact never changed, so every shape a test tries comes from one compilation."""

    def __init__(self, exe, examples, device="ref", prebuilt=False, options=()):
        self.exe, self.examples, self.device, self.options = exe, examples, device, list(options)
        self.prebuilt = prebuilt and device != "ref"
        self.artifacts = {}  # model path -> (artifact path, its bytes' hash)
        self._build_dir = tempfile.TemporaryDirectory()

    def artifact(self, model):
        if model not in self.artifacts:
            path = os.path.join(self._build_dir.name, f"{len(self.artifacts)}.dnnc")
            target = ["--target", "cuda"] if self.device == "cuda" else []
            p = subprocess.run([self.exe, "build", model, "-o", path, *target, *self.options], capture_output=True, text=True,
                               timeout=600)
            if p.returncode != 0:
                raise AssertionError(f"dnnc build {model} failed:\n{p.stderr}")
            self.artifacts[model] = (path, digest(path))
        return self.artifacts[model][0]

    def run(self, model, weights, inputs, extra=()):
        """Runs dnnc on `model` with the given arrays; returns (outputs, completed process)."""
        source = os.path.join(self.examples, model) if not os.path.isabs(model) else model
        if self.prebuilt:
            source = self.artifact(source)
            extra = (*extra, "--stats")
        with tempfile.TemporaryDirectory() as d:
            args = [self.exe, "run", source, "--out", os.path.join(d, "out"), "--device", self.device, *self.options, *extra]
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
            if self.prebuilt and p.returncode == 0:
                if "kernels compiled: 0" not in p.stdout:
                    raise AssertionError(f"running the artifact of {model} compiled kernels:\n{p.stdout}")
                path, want = next(v for v in self.artifacts.values() if v[0] == source)
                if digest(path) != want:
                    raise AssertionError(f"the artifact of {model} changed between runs")
            return outs, p


def example_with_loss(source, consts, loss, inputs, grads=False, prediction="prediction"):
    """An example model (its source) made trainable at a small size: its constants set from
    `consts` (the others keep their values), `inputs` (e.g. "labels: i32[B]"; "" for none)
    added to its model's inputs and its `return e;` turned into `let prediction = e; return
    LOSS;` (`loss` an expression over `prediction`), or with `grads` into `return (loss,
    grad(loss, [every float param]))`. `prediction` may be a pattern that destructures a
    model's tuple of outputs, e.g. "(scores, boxes)". Returns the source and the float
    params' names in order."""
    source = re.sub(r"const (\w+) = (\d+);", lambda m: f"const {m.group(1)} = {consts.get(m.group(1), m.group(2))};", source)
    params = re.findall(r"^param (\w+):\s*(f32\[[^\]]*\])", source, re.M)
    outputs = "(f32[], " + ", ".join(t for _, t in params) + ")" if grads else "f32[]"
    source, n = re.subn(r"^model main\((.*)\) -> .* \{$",
                        lambda m: f"model main({m.group(1)}{', ' + inputs if inputs else ''}) -> {outputs} {{", source, flags=re.M)
    assert n == 1, "the example's model line changed"
    names = [name for name, _ in params]
    result = (f"let gs = grad(loss, [{', '.join(names)}]);\n  return (loss, {', '.join(f'gs[{i}]' for i in range(len(names)))});"
              if grads else "return loss;")
    source, n = re.subn(r"^  return (.*);\n\}",
                        lambda m: f"  let {prediction} = {m.group(1)};\n  let loss = {loss};\n  {result}\n}}", source, flags=re.M)
    assert n == 1, "the example's return changed"
    return source, names


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def assert_matches(got, want, rtol, atol, msg=""):
    """Floats agree within the tolerances; integers and bools exactly."""
    if np.issubdtype(got.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=msg)
    else:
        np.testing.assert_array_equal(got, want, err_msg=msg)


def skip_without_gpu(exe, examples):
    """Exits 77 (ctest: skipped) when dnnc finds no working CUDA GPU here."""
    p = subprocess.run([exe, "run", os.path.join(examples, "mlp.dnn"), "--device", "cuda", "--bind", "B=1",
                        "--out", tempfile.mkdtemp()], capture_output=True, text=True, timeout=600)
    if p.returncode != 0 and "--device cuda:" in p.stderr:
        print("SKIPPED: " + p.stderr.strip())
        sys.exit(77)


def run_tests(classes, verbosity=2):
    """The command line of the NumPy test scripts: --dnnc, --examples, --device. Runs the
    tests of `classes` (one TestCase class or a list)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--device", default="ref")
    ap.add_argument("--prebuilt", action="store_true", help="compile each model once with dnnc build")
    ap.add_argument("--unoptimized", action="store_true", help="compile with --no-fuse --no-memory-plan")
    a, rest = ap.parse_known_args()
    if a.device == "cuda":
        skip_without_gpu(a.dnnc, a.examples)
    runner = Dnnc(a.dnnc, a.examples, a.device, a.prebuilt, ["--no-fuse", "--no-memory-plan"] if a.unoptimized else [])
    for cls in classes if isinstance(classes, list) else [classes]:
        cls.dnnc = runner
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=verbosity)


def run_with_exe(cls):
    """The command line of tests that run every device themselves: --dnnc only; the path
    goes to `cls.exe`."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    a, rest = ap.parse_known_args()
    cls.exe = a.dnnc
    unittest.main(argv=[sys.argv[0]] + rest)


def run_on_devices(cls, **devices):
    """The command line of tests that compare devices side by side: --dnnc, --examples;
    each keyword names an attribute of `cls` and the device its runner uses
    (run_on_devices(Loops, ref="ref", cpu="cpu"))."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--examples", required=True)
    a, rest = ap.parse_known_args()
    for attr, device in devices.items():
        setattr(cls, attr, Dnnc(a.dnnc, a.examples, device))
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

#!/usr/bin/env python3
"""Bad inputs to `dnnc run`: each gives one clear message, exit status 1, and no output."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from dnnc_test_util import write_safetensors


class BadInputs(unittest.TestCase):
    exe = examples = None

    def fails(self, model, args, message, files=None):
        """Runs dnnc with `files` (name -> bytes or array) written into a fresh folder."""
        with tempfile.TemporaryDirectory() as d:
            for name, content in (files or {}).items():
                path = os.path.join(d, name)
                if isinstance(content, bytes):
                    open(path, "wb").write(content)
                elif isinstance(content, dict):
                    write_safetensors(path, content)
                else:
                    np.save(path, content)
            model = model.replace("%d", d)
            model_path = model if os.path.isabs(model) else os.path.join(self.examples, model)
            p = subprocess.run([self.exe, "run", model_path, "--out", os.path.join(d, "out"),
                                *[a.replace("%d", d) for a in args]], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            # One error (its lines last), after the notes a demo run prints (random inputs,
            # interop.md §15).
            lines = p.stderr.strip().splitlines()
            errors = [k for k, line in enumerate(lines) if line.startswith("dnnc: error: ")]
            self.assertEqual(len(errors), 1, p.stderr)
            self.assertTrue(all(line.startswith("dnnc: note: ") for line in lines[:errors[0]]), p.stderr)
            self.assertIn(message, "\n".join(lines[errors[0]:]))
            self.assertFalse(os.path.exists(os.path.join(d, "out")), "output was written despite the error")

    def fails_everywhere(self, source, args, message, env=None, files=None):
        """`source` (model text) fails with `message` on every device, sizes checked before
        anything is allocated."""
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "m.dnn")
            with open(model, "w") as f:
                f.write(source)
            for device in ("ref", "cpu", "cuda-sim"):
                with self.subTest(device=device):
                    old = {k: os.environ.get(k) for k in (env or {})}
                    os.environ.update(env or {})
                    try:
                        self.fails(model, args + ["--device", device], message, files)
                    finally:
                        for k, v in old.items():
                            if v is None:
                                os.environ.pop(k)
                            else:
                                os.environ[k] = v

    def test_imported_module_that_does_not_parse(self):
        # Its syntax error once (it was reported twice), then the import that read it.
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "m.dnn"), "w") as f:
                f.write("import broken;\ndim B;\nmodel main(x: f32[B]) -> f32[B] { return x; }\n")
            with open(os.path.join(d, "broken.dnn"), "w") as f:
                f.write("fn f(x: f32[N]) -> f32[N] {\n  return x +* 1.0;\n}\n")
            p = subprocess.run([self.exe, "check", "m.dnn"], capture_output=True, text=True, cwd=d, timeout=60)
            self.assertEqual(p.returncode, 1, p.stderr)
            errors = [line for line in p.stderr.splitlines() if ": error: " in line]
            self.assertEqual(len(errors), 2, p.stderr)
            self.assertTrue(errors[0].startswith("./broken.dnn:2:13: error: extraneous input '*'"), p.stderr)
            self.assertEqual(errors[1], "m.dnn:1:8: error: cannot import module 'broken': ./broken.dnn does not parse [import]")

    def test_negative_size(self):
        self.fails_everywhere("dim A;\nmodel main(x: f32[A]) -> f32[M] {\n  return zeros([A - 5]) + 1.0;\n}\n",
                              ["--bind", "A=2"], "dim 0 is A - 5 = -3, which is negative at A = 2")
        self.fails_everywhere("dim H;\nmodel main(x: f32[1, 1, H, H], w: f32[1, 1, 5, 5]) -> f32[1, 1, P, P] {\n"
                              "  return conv2d(x, w);\n}\n", ["--bind", "H=3"],
                              "the result of 'conv2d' at line 3 is f32[1, 1, H - 4, H - 4]: dim 2 is H - 4 = -1, which is negative at H = 3")

    def test_index_out_of_range(self):
        """A point index outside its dim names the index as a dim expression and its value: a
        negative literal that sema made `C - 3` (inside a fused kernel it once wrote outside
        the arena), `C - 3` as written (it was reported as -3, not -1), a runtime index, an
        index tensor of `take`."""
        self.fails_everywhere("dim C;\nmodel main(x: f32[C, 8]) -> f32[8] {\n  return relu(x[-3] * 2.0);\n}\n",
                              ["--bind", "C=2"], "index C - 3 = -1 is out of range for dim 0 of f32[2, 8] (size 2)")
        self.fails_everywhere("dim C;\nmodel main(x: f32[C, 8]) -> f32[8] {\n  return x[C - 3];\n}\n",
                              ["--bind", "C=2"], "index C - 3 = -1 is out of range for dim 0 of f32[2, 8] (size 2)")
        self.fails_everywhere("dim C;\nmodel main(x: i64[C, 8]) -> i64[1, 1] {\n  return unsqueeze(x, 2)[-3, 1:2:1];\n}\n",
                              ["--bind", "C=2"], "index C - 3 = -1 is out of range for dim 0 of i64[2, 8, 1] (size 2)")
        self.fails_everywhere("dim C;\nmodel main(x: f32[C, 8], i: i64[]) -> f32[8] {\n  return x[i] * 2.0;\n}\n",
                              ["--bind", "C=2", "--input", "i=%d/i.npy", "--random-inputs"], "index -3 is out of range for dim 0 of f32[2, 8] (size 2)",
                              files={"i.npy": np.array(-3, np.int64)})
        self.fails_everywhere("dim C;\nmodel main(x: f32[C, 8], i: i64[3]) -> f32[3, 8] {\n  return take(x, i, 0);\n}\n",
                              ["--bind", "C=2", "--input", "i=%d/i.npy", "--random-inputs"], "index 5 is out of range for dim 0 of f32[2, 8] (size 2)",
                              files={"i.npy": np.array([0, 5, 1], np.int64)})
        # A slice of a weight the model leaves unused is still checked where the weight's
        # other slices are read from its prepacked copy (the prepack pass once dropped it).
        self.fails_everywhere("param w: f32[3, 4, 64];\nmodel main(x: f32[2, 4], i: i64[]) -> f32[2, 64] {\n"
                              "  let unused = w[i];\n  return x @ w[0] + x @ w[i % 3];\n}\n",
                              ["--input", "i=%d/i.npy", "--random-inputs"], "index 7 is out of range for dim 0 of f32[3, 4, 64] (size 3)",
                              files={"i.npy": np.array(7, np.int64)})

    def test_max_iterations(self):
        self.fails_everywhere("dim B;\nmodel main(x: f32[B]) -> f32[B] {\n  var y = x;\n  while sum(y) > -1.0e30 {\n"
                              "    y = y + 1.0;\n  }\n  return y;\n}\n", ["--bind", "B=3", "--max-iterations", "10"],
                              "'while' at line 4 ran 10 iterations and its condition still holds (--max-iterations 10)")

    def test_size_overflow(self):
        # 2^21 cubed is 2^63 elements: the byte count once wrapped to 0 and the run wrote
        # through a null buffer.
        self.fails_everywhere("dim A;\nmodel main(x: f32[A]) -> f32[A, A, A] {\n  return zeros([A, A, A]) + 1.0;\n}\n",
                              ["--bind", "A=2097152"], "is f32[2097152, 2097152, 2097152]: its element count overflows 64 bits")

    def test_out_of_memory(self):
        self.fails_everywhere("dim A;\nmodel main(x: f32[A]) -> f32[A, A, A] {\n  return zeros([A, A, A]) + 1.0;\n}\n",
                              ["--bind", "A=200"], "out of memory: 32000000 bytes for a f32[200, 200, 200] tensor, more than "
                              "the 1000000 bytes available (DNNC_MAX_MEMORY)", env={"DNNC_MAX_MEMORY": "1000000"})

    def test_arena_out_of_memory(self):
        os.environ["DNNC_MAX_MEMORY"] = "10000000"
        # The transformer at B=8, T=512: 7168*B*T + 1024000 (the packed copy of wte) bytes.
        try:
            self.fails("transformer.dnn", ["--bind", "B=8,T=512", "--device", "cpu"],
                       "out of memory: 36675584 bytes for the planned intermediates, more than the 10000000 bytes available")
        finally:
            os.environ.pop("DNNC_MAX_MEMORY")

    def test_outputs_all_or_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "out")
            os.makedirs(os.path.join(out, "out1.npy"))  # the second output cannot be written
            run = [self.exe, "run", os.path.join(self.examples, "detect.dnn"), "--bind", "A=5", "--out", out]
            p = subprocess.run(run, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("cannot write", p.stderr)
            self.assertEqual(sorted(os.listdir(out)), ["out1.npy"], "the first output was written despite the error")
            os.rmdir(os.path.join(out, "out1.npy"))
            # Nothing but this run's outputs is touched: outK.npy files it did not write (an
            # earlier run's, or a user's out3.npy given as the input: every such file was
            # deleted) stay, named in a note.
            three = os.path.join(d, "three.dnn")
            with open(three, "w") as f:
                f.write("model main(x: f32[2]) -> (f32[2], f32[2], f32[2]) {\n  return (x, x + 1.0, x + 2.0);\n}\n")
            np.save(os.path.join(out, "out3.npy"), np.ones(2, np.float32))
            open(os.path.join(out, "notes.txt"), "w").close()
            p = subprocess.run([self.exe, "run", three, "--input", f"x={out}/out3.npy", "--out", out], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(f"note: out3.npy in '{out}' was not written by this run", p.stderr)
            p = subprocess.run(run, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(f"note: out2.npy, out3.npy in '{out}' were not written by this run", p.stderr)
            self.assertEqual(sorted(os.listdir(out)), ["notes.txt", "out0.npy", "out1.npy", "out2.npy", "out3.npy"])
            np.testing.assert_array_equal(np.load(os.path.join(out, "out3.npy")), np.ones(2, np.float32))

    def tokens(self, shape, dtype=np.int32):
        return ["--input", "tokens=%d/t.npy"], {"t.npy": np.zeros(shape, dtype)}

    def test_wrong_rank(self):
        args, files = self.tokens((2, 3, 4))
        self.fails("transformer.dnn", args, "input 'tokens' must have rank 2 (i32[B, T]) but is i32[2, 3, 4]", files)

    def test_wrong_dtype(self):
        args, files = self.tokens((2, 3), np.int64)
        self.fails("transformer.dnn", args, "input 'tokens' must be i32[B, T] but is i64[2, 3]", files)

    def test_dim_out_of_range(self):
        args, files = self.tokens((1, 4096))
        self.fails("transformer.dnn", args, "dim T = 4096 is outside its range 1..2048", files)

    def test_dims_disagree_between_inputs(self):
        self.fails("detect.dnn", ["--input", "feats=%d/f.npy", "--input", "boxes=%d/b.npy"],
                   "input 'boxes' is f32[40, 4]: axis 0 should be A = 50 but is 40",
                   {"f.npy": np.zeros((50, 64), np.float32), "b.npy": np.zeros((40, 4), np.float32)})

    def test_bind_disagrees_with_input(self):
        args, files = self.tokens((2, 3))
        self.fails("transformer.dnn", args + ["--bind", "T=5"], "axis 1 should be T = 5 but is 3", files)

    def test_violated_assert(self):
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "m.dnn")
            open(model, "w").write("dim T;\nmodel main(x: f32[T]) -> f32[T] {\n  assert T % 4 == 0;\n  return x;\n}\n")
            self.fails(model, ["--bind", "T=6"], "assert T % 4 == 0 at line 3 fails: T % 4 = 2")

    def test_unknown_input_and_unbound_dim(self):
        self.fails("mlp.dnn", ["--input", "y=%d/y.npy"], "model 'main' has no input 'y' (its inputs: x)",
                   {"y.npy": np.zeros((1,), np.float32)})
        self.fails("mlp.dnn", [], "input 'x' (f32[B, 784]) is not given and dim B is unknown")

    def test_malformed_npy(self):
        good = np.zeros((2, 3), np.int32)
        with tempfile.TemporaryDirectory() as d:
            np.save(os.path.join(d, "g.npy"), good)
            raw = open(os.path.join(d, "g.npy"), "rb").read()
        cases = [(raw[:-5], "is truncated or padded"), (b"NOTNUMPY" + raw[8:], "does not start with the .npy magic"),
                 (raw[:9], "not a valid .npy file"),
                 (raw.replace(b"'<i4'", b"'>i4'"), "holds dtype '>i4'"),
                 (raw.replace(b"False", b"True "), "Fortran order")]
        for content, message in cases:
            with self.subTest(message=message):
                args, _ = self.tokens((2, 3))
                self.fails("transformer.dnn", args, message, {"t.npy": content})
        args, _ = self.tokens((2, 3))
        self.fails("transformer.dnn", args, "holds dtype '<f8'", {"t.npy": np.zeros((2, 3))})
        self.fails("transformer.dnn", ["--input", "tokens=%d/none.npy"], "cannot read")

    @staticmethod
    def npy(header, data=b"", version=1):
        """A .npy file with this header dict text (padded as NumPy pads it)."""
        prefix = 10 if version == 1 else 12
        h = header + " " * ((64 - (prefix + len(header) + 1) % 64) % 64) + "\n"
        size = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
        return b"\x93NUMPY" + bytes([version, 0]) + size + h.encode() + data

    def test_npy_header_checked(self):
        """The header dict is parsed by hand: each malformed one is named, sizes are checked."""
        args, _ = self.tokens((2, 3))
        cases = [
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
             "is i32[4294967296, 4294967296]: its element count overflows 64 bits"),
            ("{'descr': '<i8', 'fortran_order': False, 'shape': (2305843009213693952,), }",
             "is i64[2305843009213693952]: its byte count overflows 64 bits"),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
             "dim 0 of 'shape' (99999999999999999999...) does not fit in 64 bits"),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (1000000, 1000000), }",
             "i32[1000000, 1000000] needs 4000000000000 bytes of data, the file has 24"),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (2, -3), }", "'shape' is not a tuple of non-negative integers"),
            ("{'descr': '<i4', 'fortran_order': False, }", "the header has no 'shape'"),
            ("{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", "the header has 'descr' twice"),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", "the header has an unknown key 'extra'"),
            ("{'descr': '<i4, 'fortran_order': False, 'shape': (2, 3), }", "expected ',' or '}' at byte 17 of the header"),
            ("{'descr': '<i4', 'fortran_order': Maybe, 'shape': (2, 3), }", "'fortran_order' is neither True nor False"),
            ("['descr', '<i4']", "the header is not a Python dict"),
            ("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3)} junk", "the header has bytes after its dict"),
        ]
        for header, message in cases:
            with self.subTest(message=message):
                self.fails("transformer.dnn", args, message, {"t.npy": self.npy(header, bytes(24))})
        self.fails("transformer.dnn", args, "the header claims 200000000 bytes, more than the 100000000",
                   {"t.npy": b"\x93NUMPY\x02\x00" + struct.pack("<I", 200000000) + b"{"})
        self.fails("transformer.dnn", args, "the header is truncated: it claims 1000000 bytes but the file has 1",
                   {"t.npy": b"\x93NUMPY\x02\x00" + struct.pack("<I", 1000000) + b"{"})

    def test_devices_are_not_read(self):
        # A device never ends: /dev/zero given as an input, the weights or the source was
        # read until memory ran out.
        for model, args in (("mlp.dnn", ["--input", "x=/dev/zero"]), ("mlp.dnn", ["--weights", "/dev/zero", "--bind", "B=1"]),
                            ("/dev/urandom", [])):
            with self.subTest(model=model, args=args):
                self.fails(model, args, "cannot read '/dev/")
                self.fails(model, args, "': it is a device, not a file")

    def test_npy_long_header(self):
        """A valid .npy whose header is long (std::regex recursed over it until the stack
        overflowed) is read, in every format version."""
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "m.dnn")
            open(model, "w").write("dim N;\nmodel main(x: i32[N]) -> i32[N] {\n  return x + x;\n}\n")
            values = np.arange(5, dtype=np.int32)
            for version, pad in ((1, 60000), (2, 1000000), (3, 300000)):
                header = "{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }" + " " * pad
                open(os.path.join(d, "x.npy"), "wb").write(self.npy(header, values.tobytes(), version))
                p = subprocess.run([self.exe, "run", model, "--input", "x=" + os.path.join(d, "x.npy"), "--out",
                                    os.path.join(d, "out"), "--device", "ref"], capture_output=True, text=True, timeout=120)
                self.assertEqual(p.returncode, 0, p.stderr)
                np.testing.assert_array_equal(np.load(os.path.join(d, "out", "out0.npy")), values * 2)

    def test_bool_bytes_other_than_0_or_1(self):
        # Refused in .npy inputs as in weights, naming the file (the .npy error named none).
        bools = np.frombuffer(bytes([0, 1, 2, 1]), dtype=np.bool_)
        self.fails_everywhere("model main(m: bool[4]) -> bool[4] {\n  return not m;\n}\n", ["--input", "m=%d/m.npy"],
                              "/m.npy' is not a valid .npy file: bool element 2 holds the byte 2, not 0 or 1", files={"m.npy": bools})

    def test_bf16_output(self):
        # Found before the run, leaving no --out folder (it failed after the run, naming
        # no output, and left the folder made).
        self.fails_everywhere("dim B;\nmodel main(x: f32[B, 4]) -> (a: f32[B, 4], b: bf16[B, 4]) {\n"
                              "  return (x, cast(x, bf16));\n}\n", ["--random-inputs", "--bind", "B=2"],
                              "output 'b' is bf16[B, 4], and the .npy format has no bf16 type: return cast(..., f32) instead")

    def test_malformed_safetensors(self):
        w = {"w1": np.zeros((784, 512), np.float32), "b1": np.zeros(512, np.float32),
             "w2": np.zeros((512, 10), np.float32), "b2": np.zeros(10, np.float32)}
        args = ["--weights", "%d/w.safetensors", "--bind", "B=1"]
        self.fails("mlp.dnn", args, "param 'b2' (f32[10]): no tensor 'b2'",
                   {"w.safetensors": {k: v for k, v in w.items() if k != "b2"}})
        self.fails("mlp.dnn", args + ["--strict"], "1 tensor in the weights is used by no param of model 'main': 'extra' (--strict)",
                   {"w.safetensors": {**w, "extra": np.zeros(1, np.float32)}})
        self.fails("mlp.dnn", args, "tensor 'b1' in", {"w.safetensors": {**w, "b1": np.zeros(511, np.float32)}})
        self.fails("mlp.dnn", args, "is i32[512] but param 'b1' (f32[512]) is f32",
                   {"w.safetensors": {**w, "b1": np.zeros(512, np.int32)}})
        with tempfile.TemporaryDirectory() as d:
            write_safetensors(os.path.join(d, "w.safetensors"), w)
            raw = open(os.path.join(d, "w.safetensors"), "rb").read()
        header_len = struct.unpack("<Q", raw[:8])[0]
        cases = [(raw[:5], "shorter than its 8-byte header size"),
                 (struct.pack("<Q", 1 << 40) + raw[8:], "the header claims"),
                 (raw[:8] + b"[" + raw[9:], "its header does not start with '{'"),
                 (raw[:9] + b"!" + raw[10:], "JSON header does not parse"),
                 # The parser took a NUL for the end of the text: what followed went unread.
                 (raw[:8 + header_len - 4] + b"\0 {{" + raw[8 + header_len:], "its JSON header holds a NUL byte"),
                 (raw[:-100], "lies outside the"),
                 (raw[:8] + raw[8:8 + header_len].replace(b'"F32"', b'"U16"') + raw[8 + header_len:], "dtype \"U16\" is not supported")]
        for content, message in cases:
            with self.subTest(message=message):
                self.fails("mlp.dnn", args, message, {"w.safetensors": content})

    def test_safetensors_validated(self):
        """Headers are validated as the safetensors crate does: offsets tile the data, sizes
        are overflow-checked."""
        args = ["--weights", "%d/w.safetensors", "--bind", "B=1"]

        def raw(header, data):
            h = json.dumps(header).encode()
            return struct.pack("<Q", len(h)) + h + data

        def t(dtype, shape, begin, end):
            return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
        cases = [
            ({"a": t("F32", [1], 0, 4), "b": t("F32", [1], 0, 4)}, 4, "tensors 'a' and 'b' overlap: [0, 4) and [0, 4)"),
            ({"a": t("F32", [1], 4, 8)}, 8, "the data bytes [0, 4) belong to no tensor"),
            ({"a": t("F32", [1], 0, 4)}, 12, "the data bytes [4, 12) belong to no tensor"),
            ({"a": t("F32", [1], 4, 0)}, 4, "tensor 'a': its data_offsets [4, 0) end before they begin"),
            ({"a": t("F32", [4294967296, 4294967296], 0, 0)}, 0,
             "w.safetensors' is f32[4294967296, 4294967296]: its element count overflows 64 bits"),
            ({"a": t("F32", [4611686018427387904], 0, 0)}, 0,
             "w.safetensors' is f32[4611686018427387904]: its byte count overflows 64 bits"),
            ({"a": t("F32", [-1], 0, 0)}, 0, "tensor 'a': shape holds something other than non-negative 64-bit integers"),
            ({"a": t("F32", [2], 0, 4)}, 4, "tensor 'a': f32[2] needs 8 bytes but data_offsets give 4"),
            ({"a": t("F32", [1], 0, 4)}, 2, "tensor 'a': its data [0, 4) lies outside the 2 data bytes"),
            ({"a": {**t("F32", [1], 0, 4), "x": 1}}, 4, "tensor 'a': it has keys other than dtype, shape and data_offsets"),
            ({"__metadata__": {"k": 1}}, 0, "__metadata__ entry 'k' is not a string"),
        ]
        for header, size, message in cases:
            with self.subTest(message=message):
                self.fails("mlp.dnn", args, message, {"w.safetensors": raw(header, bytes(size))})
        self.fails("mlp.dnn", args, "the header claims 200000000 bytes, more than the 100000000",
                   {"w.safetensors": struct.pack("<Q", 200000000) + b"{}"})


class BadArtifacts(unittest.TestCase):
    """Artifacts from `dnnc build`, damaged: checked before anything runs."""
    fails = BadInputs.fails

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.good = os.path.join(cls.dir.name, "mlp.dnnc")
        subprocess.run([cls.exe, "build", os.path.join(cls.examples, "mlp.dnn"), "-o", cls.good], check=True,
                       capture_output=True)
        cls.bytes = open(cls.good, "rb").read()

    def test_truncated(self):
        self.fails("%d/m.dnnc", [], "is truncated", {"m.dnnc": self.bytes[: len(self.bytes) // 2]})

    def test_flipped_byte(self):
        damaged = bytearray(self.bytes)
        damaged[len(damaged) // 3] ^= 0x40
        self.fails("%d/m.dnnc", [], "is corrupt: its checksum does not match", {"m.dnnc": bytes(damaged)})

    def test_header_only(self):
        self.fails("%d/m.dnnc", [], "is truncated", {"m.dnnc": self.bytes[:20]})

    def test_wrong_device(self):
        self.fails(self.good, ["--device", "cuda"], "was built for cpu, not for --device cuda")
        # The other way round, the target is checked before the GPU is opened (it said
        # 'no CUDA driver on this machine').
        cuda = os.path.join(self.dir.name, "mlp_cuda.dnnc")
        subprocess.run([self.exe, "build", os.path.join(self.examples, "mlp.dnn"), "-o", cuda, "--target", "cuda"], check=True,
                       capture_output=True)
        self.fails(cuda, ["--device", "cpu"], f"'{cuda}' was built for cuda, not for --device cpu (rebuild it with --target cpu)")
        self.fails(self.good, ["--device", "cuda-sim"], "--device cuda-sim runs the model's source (compiled for the simulator): "
                                                       "give it the .dnn file, not an artifact")
        # (ref said the CPU artifact was built for cpu, "rebuild it with --target cpu")
        self.fails(self.good, ["--device", "ref"], "--device ref runs the model's source (on the reference interpreter): "
                                                  "give it the .dnn file, not an artifact")

    def test_model_not_in_the_artifact(self):
        self.fails(self.good, ["--model", "other"], "holds model 'main', not 'other'")  # (it ran main)

    def resealed_text(self, edit):
        """The artifact with the text of its JSON header changed by `edit`, checksum made valid."""
        header_size, payload_size = struct.unpack("<QQ", self.bytes[8:24])
        text, payload = edit(self.bytes[32:32 + header_size].decode()).encode(), self.bytes[32 + header_size:]

        def fnv1a(data, h=1469598103934665603):
            for byte in data:
                h = ((h ^ byte) * 1099511628211) % (1 << 64)
            return h
        return self.bytes[:8] + struct.pack("<QQQ", len(text), payload_size, fnv1a(payload, fnv1a(text))) + text + payload

    def test_header_numbers_checked(self):
        """Numbers in the header are integers in range (floats such as 1e300 were converted
        with undefined behaviour), dim expressions that overflow are malformed, and nesting
        is bounded (the readers recursed until the stack overflowed): fuzz_artifact's findings."""
        def kernel0(key, value):
            def edit(h):
                h["kernels"][0][key] = value
            return edit
        self.fails("%d/m.dnnc", [], "has a malformed header: block_threads is not a 64-bit integer",
                   {"m.dnnc": self.resealed(kernel0("block_threads", 1e300))})
        self.fails("%d/m.dnnc", [], "has a malformed header: a kernel's op is not a 64-bit integer",
                   {"m.dnnc": self.resealed(kernel0("op", 2 ** 64 - 1))})
        self.fails("%d/m.dnnc", [], "malformed model in artifact: 'main_file' has the wrong type",
                   {"m.dnnc": self.resealed(lambda h: h["graph"].update(main_file=1e300))})
        self.fails("%d/m.dnnc", [], "malformed model in artifact: 'main_file' is out of range",
                   {"m.dnnc": self.resealed(lambda h: h["graph"].update(main_file=2 ** 40))})
        self.fails("%d/m.dnnc", [], "has a malformed header: dim expression overflows 64 bits",
                   {"m.dnnc": self.resealed(lambda h: h["arena"].update(bytes={"c": 2 ** 63 - 1, "t": [[1]]}))})
        deep = '{"c":0,"t":[[1,["max",' * 20000 + '{"c":1,"t":[]}' + ',{"c":1,"t":[]}]]]}' * 20000
        self.fails("%d/m.dnnc", [], "has a malformed header: it nests 80004 levels deep, more than the 512 dnnc writes",
                   {"m.dnnc": self.resealed_text(lambda t: t.replace('"arena":{"bytes":', '"arena":{"bytes":' + deep + ',"x":', 1))})

    def resealed(self, edit):
        """The artifact with its JSON header changed by `edit` and its checksum made valid
        again: damage a checksum cannot catch (another dnnc's output, a hand-made file)."""
        def edit_text(text):
            header = json.loads(text)
            edit(header)
            return json.dumps(header)
        return self.resealed_text(edit_text)

    def test_other_format(self):
        self.fails("%d/m.dnnc", [], "has artifact format 1, this runtime reads formats 4 to 5 (rebuild it with this dnnc)",
                   {"m.dnnc": self.resealed(lambda h: h.update(format=1))})
        with tempfile.TemporaryDirectory() as d:  # format 4 (no GPU twins) still reads
            old = os.path.join(d, "old.dnnc")
            with open(old, "wb") as f:
                f.write(self.resealed(lambda h: h.update(format=4)))
            p = subprocess.run([self.exe, "run", old, "--out", os.path.join(d, "out"), "--random-inputs", "--bind", "B=2"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)

    def test_bad_entry(self):
        """A kernel that launches another's entry (format 5: GPU twins) names a kernel with an
        entry of its own, by a string."""
        def entry(value):
            def edit(h):
                h["kernels"][1]["entry"] = value
            return edit
        self.fails("%d/m.dnnc", [], "launches 'k999_nothing', which is no entry of its kernels",
                   {"m.dnnc": self.resealed(entry("k999_nothing"))})
        self.fails("%d/m.dnnc", [], "has a malformed header", {"m.dnnc": self.resealed(entry(7))})

    def test_bad_gemm_b(self):
        """How a GEMM reads B (format 4): a known kind, an integer, present."""
        def gemm_b(value):
            def edit(h):
                if value is None:
                    h["kernels"][0]["gemm"].pop()
                else:
                    h["kernels"][0]["gemm"][4] = value
            return edit
        self.fails("%d/m.dnnc", [], "has a kernel whose GEMM reads B in an unknown way (3)", {"m.dnnc": self.resealed(gemm_b(3))})
        self.fails("%d/m.dnnc", [], "has a malformed header: a GEMM's B is not a 64-bit integer",
                   {"m.dnnc": self.resealed(gemm_b(1.5))})
        self.fails("%d/m.dnnc", [], "has a malformed header: ", {"m.dnnc": self.resealed(gemm_b(None))})

    def test_bad_block_threads(self):
        def zero_threads(h):
            h["kernels"][0]["block_threads"] = 0
        self.fails("%d/m.dnnc", [], "has a kernel with 0 threads per block", {"m.dnnc": self.resealed(zero_threads)})

    def test_unknown_dim(self):
        self.fails(self.good, ["--bind", "Q=3"], "model 'main' has no dim 'Q'")

    def test_bad_input_shape(self):
        self.fails(self.good, ["--input", "x=%d/x.npy"], "input 'x' must have rank 2", {"x.npy": np.zeros((2, 3, 4), np.float32)})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--dnnc", required=True)
    ap.add_argument("--examples", required=True)
    a, rest = ap.parse_known_args()
    for cls in (BadInputs, BadArtifacts):
        cls.exe, cls.examples = os.path.abspath(a.dnnc), os.path.abspath(a.examples)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

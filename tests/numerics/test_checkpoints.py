#!/usr/bin/env python3
"""Checkpoints by name (interop.md §15) and named outputs, end to end through dnnc run.

- examples/bert/bert.dnn (its consts made small) reads a checkpoint generated here in
  Hugging Face's layout: BertModel's names, one tensor per layer stacked by
  `from "encoder.layer.{l}...."`, [out, in] linear weights, bf16 tensors (f16 and f64 ones
  too, converted to the f32 params), plus tensors no param uses (the pooler, position_ids:
  one note). Its named outputs hidden.npy and emb.npy match a float64 NumPy twin of BERT on
  ref, cpu and cuda-sim at B, T = 1, 1 / 2, 5 / 3, P (padding masked in the later rows).
- The same checkpoint split into shards read through a *.safetensors.index.json, and given as
  repeated --weights, gives the same bits; so do the params under their own names (what
  dnnc train --save writes).
- --strict refuses the unused tensors.
- dnnc train --weights reads the same way and --save writes own names that dnnc run reads.
(The diagnostics' exact texts: tests/golden/cli/weights.test, tests/fail/fail_from_name.dnn.)
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dnnc_test_util import BF16, read_safetensors, run_with_exe, write_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONSTS = {"V": 50, "P": 16, "D": 8, "H": 2, "F": 12, "L": 2}
DEVICES = ("ref", "cpu", "cuda-sim")
SHAPES = ((1, 1), (2, 5), (3, CONSTS["P"]))


def checkpoint(rng):
    """BertModel's tensors by their Hugging Face names: the stored tensors (BF16, f16, f64,
    int64 arrays) and the float64 values they hold."""
    V, P, D, F, L = (CONSTS[k] for k in "VPDFL")
    stored = {}

    def put(name, shape, kind="bf16", scale=0.3, offset=0.0):
        a = (rng.standard_normal(shape) * scale + offset).astype(np.float32)
        stored[name] = {"bf16": lambda: BF16(a), "f16": lambda: a.astype(np.float16), "f64": lambda: a.astype(np.float64)}[kind]()
    put("embeddings.word_embeddings.weight", (V, D))
    put("embeddings.position_embeddings.weight", (P, D))
    put("embeddings.token_type_embeddings.weight", (2, D))
    put("embeddings.LayerNorm.weight", (D,), "f64", 0.1, 1.0)
    put("embeddings.LayerNorm.bias", (D,), "f16", 0.1)
    for l in range(L):
        p = f"encoder.layer.{l}."
        for n in ("query", "key", "value"):
            put(p + f"attention.self.{n}.weight", (D, D))
            put(p + f"attention.self.{n}.bias", (D,), scale=0.1)
        put(p + "attention.output.dense.weight", (D, D))
        put(p + "attention.output.dense.bias", (D,), scale=0.1)
        put(p + "attention.output.LayerNorm.weight", (D,), scale=0.1, offset=1.0)
        put(p + "attention.output.LayerNorm.bias", (D,), scale=0.1)
        put(p + "intermediate.dense.weight", (F, D))
        put(p + "intermediate.dense.bias", (F,), scale=0.1)
        put(p + "output.dense.weight", (D, F))
        put(p + "output.dense.bias", (D,), scale=0.1)
        put(p + "output.LayerNorm.weight", (D,), scale=0.1, offset=1.0)
        put(p + "output.LayerNorm.bias", (D,), scale=0.1)
    put("pooler.dense.weight", (D, D))
    put("pooler.dense.bias", (D,))
    stored["embeddings.position_ids"] = np.arange(P, dtype=np.int64)[None]
    values = {k: (v.values if isinstance(v, BF16) else v).astype(np.float64) for k, v in stored.items()}
    return stored, values


def bert(w, ids, mask):
    """BertModel's forward pass in float64 (exact GELU, LayerNorm eps 1e-12, padding keys
    masked), and the mask-weighted mean of its last states."""
    H, L = CONSTS["H"], CONSTS["L"]
    B, T = ids.shape
    erf = np.vectorize(math.erf)

    def ln(x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * w[name + ".weight"] + w[name + ".bias"]

    def dense(x, name):
        return x @ w[name + ".weight"].T + w[name + ".bias"]
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:T] + \
        w["embeddings.token_type_embeddings.weight"][0]
    x = ln(x, "embeddings.LayerNorm")
    m = mask.astype(np.float64)
    for l in range(L):
        p = f"encoder.layer.{l}."
        D = x.shape[-1]
        hd = D // H
        q, k, v = (dense(x, p + f"attention.self.{n}").reshape(B, T, H, hd).transpose(0, 2, 1, 3) for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + ((1.0 - m) * -1e9)[:, None, None, :]
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        x = ln(x + dense(a.transpose(0, 2, 1, 3).reshape(B, T, D), p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = dense(x, p + "intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
        x = ln(x + dense(h, p + "output.dense"), p + "output.LayerNorm")
    emb = (x * m[:, :, None]).sum(1) / np.maximum(m.sum(1), 1e-9)[:, None]
    return x, emb


class Checkpoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(ROOT, "examples", "bert", "bert.dnn")) as f:
            source = f.read()
        source, n = re.subn(r"const (\w+) = \d+;", lambda m: f"const {m.group(1)} = {CONSTS[m.group(1)]};", source)
        assert n == len(CONSTS), "the example's consts changed"
        cls.model = cls.path("bert.dnn")
        with open(cls.model, "w") as f:
            f.write(source)
        cls.stored, cls.values = checkpoint(np.random.default_rng(0))
        write_safetensors(cls.path("model.safetensors"), cls.stored)

    @classmethod
    def path(cls, name):
        return os.path.join(cls.dir.name, name)

    def run_bert(self, weights, b, t, device="ref", extra=(), ok=True):
        rng = np.random.default_rng(b * 100 + t)
        ids = rng.integers(0, CONSTS["V"], (b, t)).astype(np.int64)
        mask = np.ones((b, t), np.int64)
        for r in range(1, b):  # later rows end in padding
            mask[r, max(1, t - 2 * r):] = 0
        np.save(self.path("ids.npy"), ids)
        np.save(self.path("mask.npy"), mask)
        out = tempfile.mkdtemp(dir=self.dir.name)
        args = [self.exe, "run", self.model, "--device", device, "--out", out, "--input", f"input_ids={self.path('ids.npy')}",
                "--input", f"attention_mask={self.path('mask.npy')}", *extra]
        for w in weights:
            args += ["--weights", w]
        p = subprocess.run(args, capture_output=True, text=True, timeout=600)
        if not ok:
            return None, p
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["emb.npy", "hidden.npy"])  # named outputs, no out0.npy
        got = (np.load(os.path.join(out, "hidden.npy")), np.load(os.path.join(out, "emb.npy")))
        return (got, bert(self.values, ids, mask)), p

    def test_bert_matches_numpy(self):
        for device in DEVICES:
            for b, t in SHAPES:
                with self.subTest(device=device, B=b, T=t):
                    (got, want), p = self.run_bert([self.path("model.safetensors")], b, t, device)
                    for g, w in zip(got, want):
                        self.assertEqual(g.shape, w.shape)
                        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)
                    # The pooler and position_ids are used by no param: one note, and no other (a
                    # sanitized build's notice about the simulator's swapcontext is not dnnc's).
                    stderr = re.sub(r"==\d+==WARNING: ASan doesn't fully support makecontext/swapcontext[^\n]*\n?", "", p.stderr)
                    self.assertEqual(stderr, "dnnc: note: 3 tensors in the weights are used by no param of model 'main': "
                                               "'embeddings.position_ids', 'pooler.dense.bias', 'pooler.dense.weight'\n")

    def test_shards_and_own_names(self):
        (want, _), _ = self.run_bert([self.path("model.safetensors")], 2, 5)
        names = sorted(self.stored)
        shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
                  "model-00002-of-00002.safetensors": names[len(names) // 2:]}
        for shard, part in shards.items():
            write_safetensors(self.path(shard), {n: self.stored[n] for n in part})
        with open(self.path("model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": {n: s for s, part in shards.items() for n in part}}, f)
        # The params under their own names, stacked (what dnnc train --save writes).
        own = {"word_emb": "embeddings.word_embeddings.weight", "pos_emb": "embeddings.position_embeddings.weight",
               "type_emb": "embeddings.token_type_embeddings.weight", "emb_ln_g": "embeddings.LayerNorm.weight",
               "emb_ln_b": "embeddings.LayerNorm.bias"}
        stacked = {"wq": "attention.self.query.weight", "bq": "attention.self.query.bias", "wk": "attention.self.key.weight",
                   "bk": "attention.self.key.bias", "wv": "attention.self.value.weight", "bv": "attention.self.value.bias",
                   "wo": "attention.output.dense.weight", "bo": "attention.output.dense.bias",
                   "ln1_g": "attention.output.LayerNorm.weight", "ln1_b": "attention.output.LayerNorm.bias",
                   "wi": "intermediate.dense.weight", "bi": "intermediate.dense.bias", "wf": "output.dense.weight",
                   "bf": "output.dense.bias", "ln2_g": "output.LayerNorm.weight", "ln2_b": "output.LayerNorm.bias"}
        mine = {k: self.values[v].astype(np.float32) for k, v in own.items()}
        mine.update({k: np.stack([self.values[f"encoder.layer.{l}.{v}"] for l in range(CONSTS["L"])]).astype(np.float32)
                     for k, v in stacked.items()})
        write_safetensors(self.path("own.safetensors"), mine)
        for weights in ([self.path("model.safetensors.index.json")], [self.path(s) for s in shards], [self.path("own.safetensors")]):
            with self.subTest(weights=[os.path.basename(w) for w in weights]):
                (got, _), p = self.run_bert(weights, 2, 5)
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(g, w)

    def test_train_reads_and_saves(self):
        """dnnc train --weights reads `from` names (stacked, bf16 and f16 converted) and saves
        the params by their own names, which dnnc run reads back: with lr 1e-30 the saved
        stack is the checkpoint's values and both runs agree bit for bit."""
        d = self.path("train")
        os.makedirs(d)
        with open(os.path.join(d, "m.dnn"), "w") as f:
            f.write("const L = 2;\ndim B;\nparam w: f32[L, 3, 3] from \"layer.{l}.weight\";\n"
                    "model main(x: f32[B, 3], y: f32[B, 3]) -> f32[] {\n  var h = x;\n  for l in 0..L {\n"
                    "    h = h @ transpose(w[l]);\n  }\n  return mean((h - y) * (h - y));\n}\n")
        rng = np.random.default_rng(1)
        layers = [BF16(rng.standard_normal((3, 3))), rng.standard_normal((3, 3)).astype(np.float16)]
        write_safetensors(os.path.join(d, "hf.safetensors"), {f"layer.{l}.weight": w for l, w in enumerate(layers)})
        for name in ("x", "y"):
            np.save(os.path.join(d, name + ".npy"), rng.standard_normal((4, 3)).astype(np.float32))
        data = ["--data", f"x={d}/x.npy", "--data", f"y={d}/y.npy"]
        for device in DEVICES:
            with self.subTest(device=device):
                saved = os.path.join(d, f"saved-{device}.safetensors")
                p = subprocess.run([self.exe, "train", os.path.join(d, "m.dnn"), *data, "--steps", "1", "--lr", "1e-30",
                                    "--weights", os.path.join(d, "hf.safetensors"), "--save", saved, "--device", device],
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(p.returncode, 0, p.stderr)
                want = np.stack([layers[0].values, layers[1].astype(np.float32)])
                np.testing.assert_array_equal(read_safetensors(saved)["w"], want)
                outs = []
                for weights in (os.path.join(d, "hf.safetensors"), saved):
                    out = os.path.join(d, "out")
                    p = subprocess.run([self.exe, "run", os.path.join(d, "m.dnn"), "--weights", weights, "--input",
                                        f"x={d}/x.npy", "--input", f"y={d}/y.npy", "--out", out, "--device", device],
                                       capture_output=True, text=True, timeout=300)
                    self.assertEqual(p.returncode, 0, p.stderr)
                    outs.append(np.load(os.path.join(out, "out0.npy")))
                np.testing.assert_array_equal(outs[0], outs[1])

    def test_f64_rounds_once_to_f16_and_bf16(self):
        # A float64 tensor rounds to an f16 or bf16 param once, to nearest even (it went
        # through f32 first: 1 + 2^-11 + 2^-40 became 1.0 in f16, not 1 + 2^-10).
        v = np.array([1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -40, 1 + 2 ** -11, -(1 + 2 ** -11 + 2 ** -40), 1e300, 1e-300,
                      65520.0, 2.0 ** -25 + 2.0 ** -60], np.float64)
        write_safetensors(self.path("f64.safetensors"), {"a": v, "c": v})
        with open(self.path("f64.dnn"), "w") as f:
            f.write("param a: f16[8];\nparam c: bf16[8];\nmodel main(x: f32[1]) -> (f32[8], f32[8]) {\n"
                    "  return (cast(a, f32), cast(c, f32));\n}\n")
        # bf16 as the nearest of its values (8 significant bits), by hand: ties do not occur here.
        bf16 = [1.0, 1 + 2 ** -7, 1.0, -1.0, np.inf, 0.0, 65536.0, 2.0 ** -25]
        for device in ("cpu", "ref"):
            out = tempfile.mkdtemp(dir=self.dir.name)
            p = subprocess.run([self.exe, "run", self.path("f64.dnn"), "--weights", self.path("f64.safetensors"), "--device",
                                device, "--out", out, "--random-inputs"], capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            with np.errstate(over="ignore"):
                np.testing.assert_array_equal(np.load(os.path.join(out, "out0.npy")), v.astype(np.float16).astype(np.float32))
            np.testing.assert_array_equal(np.load(os.path.join(out, "out1.npy")), np.array(bf16, np.float32))

    def test_strict(self):
        _, p = self.run_bert([self.path("model.safetensors")], 1, 3, extra=["--strict"], ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("dnnc: error: 3 tensors in the weights are used by no param of model 'main': 'embeddings.position_ids', "
                      "'pooler.dense.bias', 'pooler.dense.weight' (--strict)", p.stderr)


if __name__ == "__main__":
    run_with_exe(Checkpoints)

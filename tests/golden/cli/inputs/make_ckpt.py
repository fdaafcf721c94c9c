#!/usr/bin/env python3
"""Writes the small checkpoints that weights.dnn and weights_errors.test read (committed;
rerun after changing them): Hugging Face names, bf16, shards with an index, and broken
variants (float64 and bf16 tensors; a layer and a bias missing, a misspelled name, an integer tensor)."""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "numerics"))
from dnnc_test_util import BF16, write_safetensors  # noqa: E402

rng = np.random.default_rng(14)
full = {"embeddings.word_embeddings.weight": BF16(rng.standard_normal((4, 3))),
        "pooler.dense.weight": rng.standard_normal((3, 3)).astype(np.float32),
        "pooler.dense.bias": rng.standard_normal(3).astype(np.float32),
        "scale.weight": rng.standard_normal(3)}  # f64
for l in range(2):
    full[f"encoder.layer.{l}.attention.self.query.weight"] = BF16(rng.standard_normal((3, 3)))
    full[f"encoder.layer.{l}.attention.self.query.bias"] = rng.standard_normal(3).astype(np.float16)
write_safetensors(os.path.join(HERE, "ckpt.safetensors"), full)
names = sorted(full)
shards = {"ckpt-00001-of-00002.safetensors": names[:3], "ckpt-00002-of-00002.safetensors": names[3:]}
for shard, part in shards.items():
    write_safetensors(os.path.join(HERE, shard), {n: full[n] for n in part})
with open(os.path.join(HERE, "ckpt.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": {n: s for s, part in shards.items() for n in part}}, f, indent=1, sort_keys=True)
    f.write("\n")
with open(os.path.join(HERE, "ckpt_bad.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": {"pooler.dense.bias": "../ckpt.safetensors"}}, f)
    f.write("\n")
with open(os.path.join(HERE, "ckpt_missing.safetensors.index.json"), "w") as f:  # a shard that is not there
    json.dump({"metadata": {}, "weight_map": {"pooler.dense.bias": "ckpt-gone.safetensors"}}, f)
    f.write("\n")
with open(os.path.join(HERE, "ckpt_nul.safetensors.index.json"), "w") as f:  # the name's end would open ckpt.safetensors
    json.dump({"metadata": {}, "weight_map": {"pooler.dense.bias": "ckpt.safetensors\0.x"}}, f)
    f.write("\n")
broken = {k: v for k, v in full.items() if "query.bias" not in k and not k.startswith("encoder.layer.1")}
broken["encoder.layer.1.attention.self.querry.weight"] = full["encoder.layer.1.attention.self.query.weight"]
write_safetensors(os.path.join(HERE, "ckpt_broken.safetensors"), broken)
write_safetensors(os.path.join(HERE, "ckpt_int.safetensors"),
                  {**full, "embeddings.word_embeddings.weight": np.arange(12, dtype=np.int64).reshape(4, 3)})
write_safetensors(os.path.join(HERE, "ckpt_stack.safetensors"),
                  {**full, "encoder.layer.1.attention.self.query.weight": np.zeros((3, 2), np.float32)})
np.save(os.path.join(HERE, "ids.npy"), np.array([0, 3], np.int32))
np.save(os.path.join(HERE, "mask.npy"), np.array([1.0, 0.0], np.float32))

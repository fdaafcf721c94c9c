#!/usr/bin/env bash
# The GPU checks, as one script for a machine with an NVIDIA GPU: builds, runs the `gpu`,
# `ptx` and `cuda-sim` tests and the CUDA path of every example, and writes logs under $OUT (or
# ./gpu-logs). Prints a summary line per step; exits non-zero if a GPU test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "no nvidia-smi" > "$out/nvidia-smi.txt"
./scripts/install-deps.sh > "$out/install.log" 2>&1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$out/cmake.log" 2>&1
cmake --build build > "$out/build.log" 2>&1 || { echo "build failed"; tail -20 "$out/build.log"; exit 1; }
(cd build && ctest -L "gpu|ptx|cuda-sim" --output-on-failure -j8) > "$out/ctest-gpu.log" 2>&1
status=$?
tail -15 "$out/ctest-gpu.log"
for m in mlp transformer lstm convnet; do
  ./build/dnnc run "examples/$m.dnn" --device cuda --stats --repeat 10 --out "$out/$m" \
    $(case $m in mlp) echo --bind B=64;; transformer) echo --bind B=1,T=128;; lstm) echo --bind B=8,T=32;; convnet) echo --bind N=4,H=64,W=64;; esac) \
    > "$out/run-$m.log" 2>&1
  echo "$m: $(grep -E 'device|time per run' "$out/run-$m.log" | tr '\n' ' ')"
done
# The fused attention kernel against the unfused ops it replaces (checked without a GPU by
# ptxas and cuda-sim only, docs/performance.md "Fused attention"): the transformer with and
# without --no-fuse-attention, interleaved, three rounds: the time per run of each, and
# the profile's line of the attention kernel (the fused runs).
for round in 1 2 3; do
  for flags in fused --no-fuse-attention; do
    log="$out/attention${flags#fused}-$round.log"
    ./build/dnnc run examples/transformer.dnn --device cuda --bind B=4,T=512 --repeat 20 --stats --profile --out "$out/attention" \
      $([ "$flags" = fused ] || echo "$flags") > "$log" 2>&1
    echo "attention $flags round $round: exit $?, $(grep -E 'time per run|_attention ' "$log" | tr -s ' ' | tr '\n' ' ')"
  done
done
# A training step on the GPU: the worked character LM for 20 steps of per-step batches on
# cuda and cpu; the logged losses should agree to ~1e-3 (the same step, two devices).
/usr/bin/python3 scripts/charlm.py data examples/data/lighthouse.txt "$out/charlm-data" --steps 20 > "$out/charlm-data.log" 2>&1
for dev in cuda cpu; do
  ./build/dnnc train examples/train/charlm.dnn --data "$out/charlm-data" --steps 20 --optimizer adam --lr 3e-3 \
    --device $dev --json --verbose > "$out/train-$dev.jsonl" 2> "$out/train-$dev.log"
  echo "train on $dev: exit $?, $(tail -1 "$out/train-$dev.jsonl")"
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys
logs = {d: [json.loads(l) for l in open(f"{sys.argv[1]}/train-{d}.jsonl")] for d in ("cuda", "cpu")}
diff = max((abs(a["loss"] - b["loss"]) / max(abs(b["loss"]), 1e-6) for a, b in zip(logs["cuda"], logs["cpu"])), default=float("nan"))
ms = lambda d: sorted(e["ms"] for e in logs[d][1:])[len(logs[d][1:]) // 2] if len(logs[d]) > 1 else float("nan")
print(f"train cuda vs cpu: {len(logs['cuda'])} steps, max relative loss difference {diff:.2e}, median ms/step cuda {ms('cuda'):.2f} cpu {ms('cpu'):.2f}")
PY
exit $status

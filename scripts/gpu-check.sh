#!/usr/bin/env bash
# The GPU checks, as one script for a machine with an NVIDIA GPU: the NumPy tests on
# `--device cuda` (ops, models from prebuilt artifacts, semantics, stdlib; split across the
# cores), every example on CUDA with its time per run, the fused attention kernel against
# the unfused ops it replaces, and a training step on cuda against cpu.
#   scripts/gpu-check.sh                    installs the dependencies and builds here
#   scripts/gpu-check.sh --prebuilt BUNDLE  runs dnnc from scripts/gpu-bundle.sh's bundle,
#                                           for a GPU machine that cannot install them
# Writes summary.txt and logs.tar.gz under $OUT (or ./gpu-logs); prints the summary as it
# goes. Every step has a time limit, and so has the whole run (GPU_CHECK_SECONDS, default
# 480). Exits non-zero if a GPU test failed or dnnc did not run.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=${OUT:-$repo/gpu-logs}
logs=$out/logs
mkdir -p "$logs"
py=${PYTHON:-python3}
status=0
say() { echo "$*" | tee -a "$out/summary.txt"; }
# Each step's time limit: its own, cut to what is left of the whole run's (GPU_CHECK_SECONDS,
# default 480), so the logs are packed before a lease or a CI job's limit ends the script.
deadline=${GPU_CHECK_SECONDS:-480}
limit() { local left=$((deadline - SECONDS)); echo $(($1 < left ? $1 : (left > 1 ? left : 1))); }
finish() {
  tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
  exit $status
}
trap finish EXIT
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1 || echo "no nvidia-smi" > "$logs/nvidia-smi.txt"
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)"
say "host: $(nproc) cores ($(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed "s/^ //")), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown OS}"), glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"

if [ "${1:-}" = --prebuilt ]; then
  [ -f "${2:-}" ] || { say "--prebuilt needs a bundle file (scripts/gpu-bundle.sh makes one)"; status=2; exit; }
  home=$(mktemp -d)
  tar -C "$home" -xJf "$2"
  dnnc=$home/dnnc/dnnc
  if ! "$dnnc" --version > "$logs/version.log" 2>&1; then
    export DNNC_BUNDLE_GLIBC=1 # this machine's C library is older than the one dnnc was built with
    "$dnnc" --version > "$logs/version.log" 2>&1 || { say "dnnc from the bundle does not start:"; cat "$logs/version.log" | tee -a "$out/summary.txt"; status=2; exit; }
  fi
  export DNNC_STDLIB=$repo/stdlib
  say "dnnc: $(cat "$logs/version.log") from $2 (bundled C library: ${DNNC_BUNDLE_GLIBC:-0})"
else
  ./scripts/install-deps.sh > "$logs/install.log" 2>&1
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$logs/cmake.log" 2>&1
  cmake --build build > "$logs/build.log" 2>&1 || { say "build failed"; tail -20 "$logs/build.log"; status=1; exit; }
  dnnc=$repo/build/dnnc
fi
"$dnnc" run examples/mlp.dnn --device cuda --bind B=1 --out "$logs/smoke" > "$logs/smoke.log" 2>&1
say "smoke (mlp on cuda): exit $? $(grep -m1 -i error "$logs/smoke.log")"

# The NumPy tests on the GPU, all four scripts at once, each one's tests dealt round-robin
# to processes, a script's share of the cores by its number of tests (on the H100 machine
# an op's test took ~5 s: compiles for the GPU dominate).
test_ids() { # the unittest ids (Class.test) of a test script
  (cd tests/numerics && "$py" - "$1" <<'PY'
import sys, unittest
suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
def walk(s):
    for t in s:
        yield from walk(t) if isinstance(t, unittest.TestSuite) else [t.id().split(".", 1)[1]]
print("\n".join(walk(suite)))
PY
  )
}
tests=(test_ops test_models test_semantics test_stdlib)
declare -A count
total=0
for t in "${tests[@]}"; do
  count[$t]=$(test_ids $t | wc -l)
  total=$((total + count[$t]))
done
start=$SECONDS
for t in "${tests[@]}"; do
  extra=$([ $t = test_models ] && echo --prebuilt)
  mapfile -t ids < <(test_ids $t)
  shards=$(( $(nproc) * count[$t] / (total > 0 ? total : 1) ))
  shards=$(( shards > 2 ? shards : 2 ))
  for ((s = 0; s < shards; s++)); do
    mine=()
    for ((i = s; i < ${#ids[@]}; i += shards)); do mine+=("${ids[i]}"); done
    [ ${#mine[@]} -gt 0 ] || continue
    timeout $(limit 180) "$py" tests/numerics/$t.py --dnnc "$dnnc" --examples examples --device cuda $extra "${mine[@]}" \
      > "$logs/$t-$s.log" 2>&1 &
  done
done
wait
for t in "${tests[@]}"; do
  ran=$(cat "$logs/$t"-*.log | awk '/^Ran [0-9]+ test/ {n += $2} END {print n + 0}')
  bad=$(for f in "$logs/$t"-*.log; do # a shard passed if unittest's last word is OK
    tail -n 3 "$f" | grep -q '^OK' || grep -hE "^(FAIL|ERROR):|^SKIPPED" "$f" ||
      echo "$(basename "$f"): did not finish ($(grep -o '^[.sx]*' "$f" | tr -d '\n' | wc -c) tests passed)"
  done | sort | uniq)
  [ "$ran" -eq "${count[$t]}" ] && [ -z "$bad" ] || status=1
  say "$t on cuda: ran $ran of ${count[$t]} tests (all four scripts in $((SECONDS - start)) s)$([ -n "$bad" ] && printf ', not passing:\n%s' "$bad")"
done

for m in mlp transformer lstm convnet; do
  timeout $(limit 30) "$dnnc" run "examples/$m.dnn" --device cuda --stats --repeat 10 --out "$logs/$m" \
    $(case $m in mlp) echo --bind B=64;; transformer) echo --bind B=1,T=128;; lstm) echo --bind B=8,T=32;; convnet) echo --bind N=4,H=64,W=64;; esac) \
    > "$logs/run-$m.log" 2>&1
  say "$m: exit $?, $(grep -E 'device|time per run' "$logs/run-$m.log" | tr '\n' ' ')"
done
# The fused attention kernel against the unfused ops it replaces (checked without a GPU by
# ptxas and cuda-sim only, docs/performance.md "Fused attention"): the transformer with and
# without --no-fuse-attention, interleaved, three rounds: the time per run of each, and
# the profile's line of the attention kernel (the fused runs).
for round in 1 2 3; do
  for flags in fused --no-fuse-attention; do
    log="$logs/attention${flags#fused}-$round.log"
    timeout $(limit 30) "$dnnc" run examples/transformer.dnn --device cuda --bind B=4,T=512 --repeat 20 --stats --profile --out "$logs/attention" \
      $([ "$flags" = fused ] || echo "$flags") > "$log" 2>&1
    say "attention $flags round $round: exit $?, $(grep -E 'time per run|_attention ' "$log" | tr -s ' ' | tr '\n' ' ')"
  done
done
# A training step on the GPU: the worked character LM for 20 steps of per-step batches on
# cuda and cpu; the logged losses should agree to ~1e-3 (the same step, two devices). (The
# CPU's compile of the step takes ~35 s on a 2-core Xeon, over 60 s on the H100 machine.)
"$py" scripts/charlm.py data examples/data/lighthouse.txt "$logs/charlm-data" --steps 20 > "$logs/charlm-data.log" 2>&1
for dev in cuda cpu; do
  timeout $(limit 150) "$dnnc" train examples/train/charlm.dnn --data "$logs/charlm-data" --steps 20 --optimizer adam --lr 3e-3 \
    --device $dev --json --verbose > "$logs/train-$dev.jsonl" 2> "$logs/train-$dev.log"
  say "train on $dev: exit $?, $(tail -1 "$logs/train-$dev.jsonl")"
done
"$py" - "$logs" <<'PY' 2>&1 | tee -a "$out/summary.txt"
import json, sys
logs = {d: [json.loads(l) for l in open(f"{sys.argv[1]}/train-{d}.jsonl") if l.startswith("{")] for d in ("cuda", "cpu")}
diff = max((abs(a["loss"] - b["loss"]) / max(abs(b["loss"]), 1e-6) for a, b in zip(logs["cuda"], logs["cpu"])), default=float("nan"))
ms = lambda d: sorted(e["ms"] for e in logs[d][1:])[len(logs[d][1:]) // 2] if len(logs[d]) > 1 else float("nan")
print(f"train cuda vs cpu: {len(logs['cuda'])} steps, max relative loss difference {diff:.2e}, median ms/step cuda {ms('cuda'):.2f} cpu {ms('cpu'):.2f}")
PY
# dnnc against PyTorch (and ONNX Runtime where it has its CUDA provider) on the GPU:
# bench/peers.py --device cuda, two interleaved rounds; its rows as it prints them.
PYTHONUNBUFFERED=1 timeout $(limit 150) "$py" bench/peers.py --dnnc "$dnnc" --device cuda --rounds 2 --repeat 20 \
  --models mlp,transformer,lstm,convnet,micro --peers eager,ort > "$logs/peers.log" 2>&1
say "peers on cuda: exit $?"
grep -vE "^\s|^Traceback|Warning" "$logs/peers.log" | tee -a "$out/summary.txt"

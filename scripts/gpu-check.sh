#!/usr/bin/env bash
# The GPU checks, as one script for a machine with an NVIDIA GPU: the NumPy tests on
# `--device cuda` (ops, models from prebuilt artifacts, semantics, stdlib; split across
# processes), every example on CUDA with its time per run, the fused attention kernel
# against the unfused ops it replaces, a training step on cuda against cpu, and
# bench/peers.py --device cuda. Needs this checkout (tests/, examples/, stdlib/) and a
# python3 with NumPy (and torch for the peers).
#   scripts/gpu-check.sh                    installs the dependencies and builds here
#   scripts/gpu-check.sh --prebuilt BUNDLE  runs dnnc from scripts/gpu-bundle.sh's bundle,
#                                           for a GPU machine that cannot install them
# Writes summary.txt and logs.tar.gz under $OUT (or ./gpu-logs); prints the summary as it
# goes. Every step has a time limit, and so have all steps after the build together
# (GPU_CHECK_SECONDS, default 480), so that the logs are packed before a lease ends.
# Exits non-zero if dnnc did not run, a test failed or did not finish, a CUDA step
# failed, or the two devices' training losses differ by more than 1e-3.
set -uo pipefail
bundle=${2:-}
[ "${1:-}" = --prebuilt ] && [ -n "$bundle" ] && bundle=$(realpath -- "$bundle")
repo=$(realpath -- "$(dirname "$0")/..")
out=${OUT:-$repo/gpu-logs}
mkdir -p "$out" && out=$(realpath -- "$out") || exit 2
cd "$repo" || exit 2
logs=$out/logs
rm -rf "$logs" "$out/logs.tar.gz"
mkdir -p "$logs"
: > "$out/summary.txt"
py=${PYTHON:-python3}
status=0
home=""
say() { echo "$*" | tee -a "$out/summary.txt"; }
finish() {
  local pids
  pids=$(jobs -p)
  [ -z "$pids" ] || kill $pids 2> /dev/null
  [ -z "$home" ] || rm -rf "$home"
  tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
  exit $status
}
trap finish EXIT
# A step's time limit: its own, cut to what is left of the whole run's; `timeout -k` also
# ends a process that ignores the polite signal (one stuck in a driver call).
deadline=$((SECONDS + ${GPU_CHECK_SECONDS:-480}))
limit() { local left=$((deadline - SECONDS)); echo $(($1 < left ? $1 : (left > 1 ? left : 1))); }
bounded() { timeout -k 10 "$(limit "$1")" "${@:2}"; }
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1 || echo "no nvidia-smi" > "$logs/nvidia-smi.txt"
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)"
say "host: $(nproc) cores ($(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed "s/^ //")), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown OS}"), glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"

if [ "${1:-}" = --prebuilt ]; then
  [ -f "$bundle" ] || { say "--prebuilt needs a bundle file (scripts/gpu-bundle.sh makes one)"; status=2; exit; }
  home=$(mktemp -d)
  tar -C "$home" -xJf "$bundle"
  dnnc=$home/dnnc/dnnc
  if ! bounded 30 "$dnnc" --version > "$logs/version.log" 2>&1; then
    export DNNC_BUNDLE_GLIBC=1 # this machine's C library is older than the one dnnc was built with
    bounded 30 "$dnnc" --version > "$logs/version.log" 2>&1 ||
      { say "dnnc from the bundle does not start:"; tee -a "$out/summary.txt" < "$logs/version.log"; status=2; exit; }
  fi
  export DNNC_STDLIB=$repo/stdlib
  say "dnnc: $(cat "$logs/version.log") from $bundle (bundled C library: ${DNNC_BUNDLE_GLIBC:-0})"
else
  ./scripts/install-deps.sh > "$logs/install.log" 2>&1
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$logs/cmake.log" 2>&1
  cmake --build build > "$logs/build.log" 2>&1 || { say "build failed"; tail -20 "$logs/build.log"; status=1; exit; }
  dnnc=$repo/build/dnnc
  deadline=$((SECONDS + ${GPU_CHECK_SECONDS:-480})) # the limit counts from here
fi
# A CUDA step's exit status: printed, and any failure makes the script's status 1.
cuda_step() { [ "$1" -eq 0 ] || status=1; echo "exit $1"; }
bounded 60 "$dnnc" run examples/mlp.dnn --device cuda --bind B=1 --out "$logs/smoke" > "$logs/smoke.log" 2>&1
say "smoke (mlp on cuda): $(cuda_step $?) $(grep -m1 -i error "$logs/smoke.log")"

# The NumPy tests on the GPU, all four scripts at once, each one's tests dealt round-robin
# to processes. On the H100 machine (16 cores) 4 processes for the op tests passed as many
# tests in 180 s as 12 did: each keeps several cores busy.
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
start=$SECONDS
for t in "${tests[@]}"; do
  extra=$([ $t = test_models ] && echo --prebuilt)
  if ! test_ids $t > "$logs/$t.ids" 2> "$logs/$t.ids-error"; then
    say "$t: cannot list its tests: $(tail -n 1 "$logs/$t.ids-error")"
    status=1
    continue
  fi
  mapfile -t ids < "$logs/$t.ids"
  shards=$(( (${#ids[@]} + 39) / 40 )) cap=$(( $(nproc) / 4 )) # ~40 tests a process, a process per 4 cores
  shards=$(( shards < cap ? shards : cap ))
  shards=$(( shards > 2 ? shards : 2 ))
  for ((s = 0; s < shards; s++)); do
    mine=()
    for ((i = s; i < ${#ids[@]}; i += shards)); do mine+=("${ids[i]}"); done
    [ ${#mine[@]} -gt 0 ] || continue
    (bounded 300 "$py" tests/numerics/$t.py --dnnc "$dnnc" --examples examples --device cuda $extra "${mine[@]}" \
       > "$logs/$t-$s.log" 2>&1
     echo $? > "$logs/$t-$s.rc") &
  done
done
wait
for t in "${tests[@]}"; do
  [ -f "$logs/$t.ids" ] || continue
  # A shard's exit status: 0 all passed, 1 some failed, 77 no GPU, 124/137 cut off by its
  # limit. Passes counted from unittest's progress (dots at verbosity 1, "... ok" at 2).
  passed=0 listed=$(wc -l < "$logs/$t.ids") bad=""
  for rc in "$logs/$t"-*.rc; do
    log=${rc%.rc}.log
    passed=$((passed + $(grep -o '^[.FEsx]*' "$log" | tr -cd . | wc -c) + $(grep -c ' \.\.\. ok$' "$log")))
    case $(cat "$rc") in
      0) ;;
      124 | 137) bad+="$(basename "$log"): cut off by its time limit"$'\n' ;;
      *) bad+="$(grep -hE '^(FAIL|ERROR):|^SKIPPED' "$log" || echo "$(basename "$log"): exit $(cat "$rc")")"$'\n' ;;
    esac
  done
  [ "$passed" -eq "$listed" ] && [ -z "$bad" ] || status=1
  say "$t on cuda: $passed of $listed tests passed (all four scripts in $((SECONDS - start)) s)$([ -n "$bad" ] && printf '; not passing:\n%s' "${bad%$'\n'}")"
done

for m in mlp transformer lstm convnet; do
  bounded 30 "$dnnc" run "examples/$m.dnn" --device cuda --stats --repeat 10 --out "$logs/$m" \
    $(case $m in mlp) echo --bind B=64;; transformer) echo --bind B=1,T=128;; lstm) echo --bind B=8,T=32;; convnet) echo --bind N=4,H=64,W=64;; esac) \
    > "$logs/run-$m.log" 2>&1
  say "$m: $(cuda_step $?), $(grep -E 'device|time per run' "$logs/run-$m.log" | tr '\n' ' ')"
done
# The fused attention kernel against the unfused ops it replaces (checked without a GPU by
# ptxas and cuda-sim only, docs/performance.md "Fused attention"): the transformer with and
# without --no-fuse-attention, interleaved, three rounds: the time per run of each, and
# the profile's line of the attention kernel (the fused runs).
for round in 1 2 3; do
  for flags in fused --no-fuse-attention; do
    log="$logs/attention${flags#fused}-$round.log"
    bounded 30 "$dnnc" run examples/transformer.dnn --device cuda --bind B=4,T=512 --repeat 20 --stats --profile --out "$logs/attention" \
      $([ "$flags" = fused ] || echo "$flags") > "$log" 2>&1
    say "attention $flags round $round: $(cuda_step $?), $(grep -E 'time per run|_attention ' "$log" | tr -s ' ' | tr '\n' ' ')"
  done
done
# A training step on the GPU: the worked character LM for 20 steps of per-step batches on
# cuda and cpu; the logged losses should agree to ~1e-3 (the same step, two devices). (The
# CPU's compile of the step took 35-60 s on the H100 machine.)
bounded 60 "$py" scripts/charlm.py data examples/data/lighthouse.txt "$logs/charlm-data" --steps 20 > "$logs/charlm-data.log" 2>&1
for dev in cuda cpu; do
  bounded 150 "$dnnc" train examples/train/charlm.dnn --data "$logs/charlm-data" --steps 20 --optimizer adam --lr 3e-3 \
    --device $dev --json --verbose > "$logs/train-$dev.jsonl" 2> "$logs/train-$dev.log"
  rc=$?
  say "train on $dev: $([ $dev = cuda ] && cuda_step $rc || echo "exit $rc"), $(tail -1 "$logs/train-$dev.jsonl")"
done
"$py" - "$logs" <<'PY' 2>&1 | tee -a "$out/summary.txt" || status=1
import json, math, sys
logs = {d: [json.loads(l) for l in open(f"{sys.argv[1]}/train-{d}.jsonl") if l.startswith("{")] for d in ("cuda", "cpu")}
diff = max((abs(a["loss"] - b["loss"]) / max(abs(b["loss"]), 1e-6) for a, b in zip(logs["cuda"], logs["cpu"])), default=float("nan"))
ms = lambda d: sorted(e["ms"] for e in logs[d][1:])[len(logs[d][1:]) // 2] if len(logs[d]) > 1 else float("nan")
print(f"train cuda vs cpu: {len(logs['cuda'])} steps, max relative loss difference {diff:.2e}, median ms/step cuda {ms('cuda'):.2f} cpu {ms('cpu'):.2f}")
sys.exit(0 if len(logs["cuda"]) == len(logs["cpu"]) > 0 and diff <= 1e-3 else 1)
PY
# dnnc against PyTorch (and ONNX Runtime where it has its CUDA provider) on the GPU:
# bench/peers.py --device cuda, two interleaved rounds; its rows as it prints them.
PYTHONUNBUFFERED=1 bounded 150 "$py" bench/peers.py --dnnc "$dnnc" --device cuda --rounds 2 --repeat 20 \
  --models mlp,transformer,lstm,convnet,micro --peers eager,ort > "$logs/peers.log" 2>&1
say "peers on cuda: $(cuda_step $?)"
grep -vE "^\s|^Traceback|Warning" "$logs/peers.log" | tee -a "$out/summary.txt"

#!/usr/bin/env bash
# A long run of the random-program differential tester (tests/fuzz/README.md).
#   scripts/difftest.sh                 # 10 minutes from seed 100000
#   scripts/difftest.sh -n 2000         # 2,000 programs
#   scripts/difftest.sh -t 3600 -s 7 -j 4 --shrink --save /tmp/cases
# Prints programs generated, ops covered, devices compared, failures (by kind and device,
# with seeds) and the time per 1,000 programs. `--show --seed S --shrink` replays one.
set -euo pipefail
cd "$(dirname "$0")/.."
dnnc=${DNNC:-build/dnnc}
seed=100000; count=""; time=600; jobs=2; extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n) count=$2; time=""; shift 2 ;;
    -t) time=$2; shift 2 ;;
    -s) seed=$2; shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
[ -x "$dnnc" ] || { echo "no $dnnc: build first (cmake --build build)"; exit 2; }
args=(--dnnc "$dnnc" --seed "$seed" --jobs "$jobs")
[ -n "$count" ] && args+=(--count "$count")
[ -n "$time" ] && args+=(--time "$time")
exec /usr/bin/python3 tests/fuzz/difftest.py "${args[@]}" "${extra[@]}"

#!/bin/bash
# The vector-math micro models and the example models, two dnnc builds side by side:
#   bench/vecmath.sh BEFORE_DNNC AFTER_DNNC      (THREADS=1 by default; ONLY=substring)
# Five interleaved rounds (before, after, before, ...), each `--repeat N`; prints the median
# of the per-round medians and the min of the per-round minimums, and their ratios.
set -euo pipefail
B=$1; A=$2; T=${THREADS:-1}; here=$(cd "$(dirname "$0")" && pwd); E=$here/../examples; M=$here/vecmath
run() { "$@" --device cpu --stats --threads "$T" --out "${TMPDIR:-/tmp}/vecmath-bench" 2>&1 |
  sed -n 's/.*time per run: \([0-9.]*\) ms (median of [0-9]*; min \([0-9.]*\) ms).*/\1 \2/p'; }
cases=("$M/gelu.dnn --bind M=512,N=1536 --repeat 30" "$M/tanh.dnn --bind M=512,N=1024 --repeat 30"
       "$M/sig.dnn --bind M=512,N=1024 --repeat 30" "$M/ew.dnn --bind B=32,H=128 --repeat 200"
       "$M/ln.dnn --bind M=512 --repeat 50" "$M/softmax.dnn --bind M=512,N=1024 --repeat 30"
       "$E/lstm.dnn --bind B=4,T=128 --repeat 10" "$E/lstm.dnn --bind B=32,T=64 --repeat 10"
       "$E/transformer.dnn --bind B=1,T=128 --repeat 10" "$E/transformer.dnn --bind B=4,T=512 --repeat 3")
for c in "${cases[@]}"; do
  [[ -n "${ONLY:-}" && "$c" != *"$ONLY"* ]] && continue
  bs=""; as=""
  for r in 1 2 3 4 5; do bs="$bs;$(run "$B" run $c)"; as="$as;$(run "$A" run $c)"; done
  python3 - "$bs" "$as" "$(basename "${c%% --repeat*}")" <<'PY'
import statistics as s, sys
parse = lambda t: [tuple(map(float, x.split())) for x in t.split(';') if x.strip()]
b, a, name = parse(sys.argv[1]), parse(sys.argv[2]), sys.argv[3]
mb, ma = s.median(x[0] for x in b), s.median(x[0] for x in a)
nb, na = min(x[1] for x in b), min(x[1] for x in a)
print(f'{name:<40} median {mb:9.3f} -> {ma:9.3f} ms ({ma / mb:.2f}x)   min {nb:9.3f} -> {na:9.3f} ms ({na / nb:.2f}x)')
PY
done

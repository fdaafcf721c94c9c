#!/usr/bin/env bash
# Installs what is missing, builds dnnc, and runs the main job: compiles the example
# transformer once for this machine and runs it at two shapes (B=2, T=7 and B=1, T=128)
# with seeded random weights and tokens, writing out/out0.npy. Pass a .dnn file (and
# `dnnc run` options) to run another model instead.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target dnnc
if [ $# -gt 0 ]; then
  exec ./build/dnnc run "$@"
fi
./build/dnnc shapes examples/transformer.dnn --bind B=2,T=7
mkdir -p out
./build/dnnc build examples/transformer.dnn -o out/transformer.dnnc
./build/dnnc run out/transformer.dnnc --bind B=2,T=7 --out out --stats
./build/dnnc run out/transformer.dnnc --bind B=1,T=128 --out out --stats

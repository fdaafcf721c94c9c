#!/usr/bin/env bash
# Installs what is missing, builds dnnc, and runs the main job: the shapes of the example
# transformer, symbolic and at B=2, T=7. Pass a .dnn file (and dnnc shapes options) to
# run it on another model.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target dnnc
if [ $# -gt 0 ]; then
  exec ./build/dnnc shapes "$@"
fi
./build/dnnc shapes examples/transformer.dnn
./build/dnnc shapes examples/transformer.dnn --bind B=2,T=7

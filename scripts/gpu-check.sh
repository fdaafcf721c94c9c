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
exit $status

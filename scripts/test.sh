#!/usr/bin/env bash
# Installs what is missing, builds dnnc and its tests, and runs the whole suite; then
# builds again with AddressSanitizer and UndefinedBehaviorSanitizer and runs the frontend,
# reference-interpreter, CPU-device and runtime tests (parser, sema, diagnostics,
# robustness fuzzing, dnnc run and built artifacts against NumPy and on bad inputs) under
# them. GPU tests report as skipped where no GPU works.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
(cd build && ctest --output-on-failure -j"$jobs")
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDNNC_SANITIZE=ON -DDNNC_BENCH=OFF >/dev/null
cmake --build build-asan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -L "frontend|ref|cpu|runtime" -j"$jobs")

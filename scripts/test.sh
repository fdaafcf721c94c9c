#!/usr/bin/env bash
# Installs what is missing, builds dnnc and its tests, and runs the whole suite; then
# builds again with AddressSanitizer and UndefinedBehaviorSanitizer and runs the frontend,
# reference-interpreter, CPU-device and runtime tests (parser, sema, diagnostics,
# robustness fuzzing, dnnc run and built artifacts against NumPy and on bad inputs) under
# them; last, builds the libFuzzer harnesses (clang-19, tests/fuzz) and runs each for a
# short fixed time from its committed corpus (ctest label fuzz). GPU tests report as
# skipped where no GPU works.
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
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DDNNC_FUZZ=ON -DDNNC_BENCH=OFF >/dev/null
cmake --build build-fuzz --target dnnc_fuzzers
(cd build-fuzz && ctest --output-on-failure -L fuzz -j"$jobs")

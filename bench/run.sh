#!/usr/bin/env bash
# Benchmarks (not part of the test suite): GEMM vs this CPU's FMA peak, each example vs
# PyTorch on the CPU at the same thread count, and fusion / memory planning effects.
# Installs Debian's python3-torch when missing. Pass --threads N to pin the thread count.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=$(nproc)
if [ "${1:-}" = "--threads" ]; then threads=$2; fi
/usr/bin/python3 -c "import torch" 2>/dev/null || {
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >/dev/null
}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target dnnc gemm_bench
echo "== GEMM vs FMA peak"; ./build/bench/gemm_bench --threads "$threads"
echo "== examples vs PyTorch"; /usr/bin/python3 bench/models.py --dnnc build/dnnc --threads "$threads"
echo "== fusion and memory planning"; /usr/bin/python3 bench/optimizations.py --dnnc build/dnnc --threads "$threads"

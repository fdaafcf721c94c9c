#!/usr/bin/env bash
# Benchmarks (not part of the test suite): GEMM vs this CPU's FMA peak, dnnc vs its peers
# (PyTorch eager with MKL, torch.compile, ONNX Runtime: bench/peers.py) and what fusion and
# memory planning buy. The peers come from PyPI into a venv this script makes or finds
# ($DNNC_BENCH_VENV, default ~/.cache/dnnc/bench-venv); without network they are skipped.
# Pass --threads N to pin the thread count; other arguments go to peers.py.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=$(nproc)
if [ "${1:-}" = "--threads" ]; then threads=$2; shift 2; fi
venv=${DNNC_BENCH_VENV:-$HOME/.cache/dnnc/bench-venv}
if ! "$venv/bin/python" -c "import torch, onnx, onnxruntime" 2>/dev/null; then
  echo "making the peers' venv in $venv (pip: numpy torch onnx onnxruntime)"
  /usr/bin/python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q numpy torch onnx onnxruntime ||
    echo "could not install the peers: peers.py skips what is missing"
fi
python=$venv/bin/python
"$python" -c "import numpy" 2>/dev/null || python=/usr/bin/python3
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target dnnc gemm_bench
echo "== GEMM vs FMA peak"; ./build/bench/gemm_bench --threads "$threads"
echo "== dnnc vs peers"; "$python" bench/peers.py --dnnc build/dnnc --threads "$threads" "$@"
echo "== fusion and memory planning"; /usr/bin/python3 bench/optimizations.py --dnnc build/dnnc --threads "$threads"

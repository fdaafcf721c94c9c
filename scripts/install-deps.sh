#!/usr/bin/env bash
# Installs the Debian packages dnnc builds and tests with; does nothing when all are present.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache
  antlr4 libantlr4-runtime-dev
  catch2 libboost-program-options-dev libedit-dev
  nlohmann-json3-dev libfmt-dev
  llvm-19-dev llvm-19-tools
  clang-19 libclang-rt-19-dev
  python3-numpy
  pybind11-dev python3-dev
  libonnx-dev libprotobuf-dev protobuf-compiler python3-onnx
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null

#!/usr/bin/env bash
# Packs a built dnnc for a GPU machine that cannot install this project's dependencies
# (no network, another Linux distribution): the binary without its debug info, the shared
# libraries it loads (lib/), and this machine's C and C++ runtimes (glibc/), which the
# launcher uses only where the other machine's C library is older than this one's (with
# the C library's other parts, which the CUDA driver loads). x86-64 Linux only.
#   scripts/gpu-bundle.sh [BUNDLE]      (default .gpu-bundle/dnnc.tar.xz; DNNC=path/to/dnnc)
# scripts/gpu-check.sh --prebuilt BUNDLE runs the GPU checks with it.
set -euo pipefail
cd "$(dirname "$0")/.."
exe=${DNNC:-build/dnnc}
bundle=${1:-.gpu-bundle/dnnc.tar.xz}
[ -x "$exe" ] || { echo "gpu-bundle: no dnnc at $exe (build it first, or set DNNC)" >&2; exit 1; }
if ldd "$exe" | grep 'not found' >&2; then
  echo "gpu-bundle: $exe needs libraries this machine lacks" >&2
  exit 1
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/dnnc/lib" "$stage/dnnc/glibc"
objcopy --strip-debug "$exe" "$stage/dnnc/dnnc.bin"
ldd "$exe" | awk '/=> \// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so.* | libm.so.* | libstdc++.so.* | libgcc_s.so.*) cp -L "$lib" "$stage/dnnc/glibc/" ;;
    *) cp -L "$lib" "$stage/dnnc/lib/" ;;
  esac
done
cp -L /lib64/ld-linux-x86-64.so.2 "$stage/dnnc/glibc/"
libc_dir=$(dirname "$(ldd "$exe" | awk '$1 == "libc.so.6" {print $3}')")
for part in libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 libresolv.so.2; do
  [ -e "$libc_dir/$part" ] && cp -L "$libc_dir/$part" "$stage/dnnc/glibc/"
done
# The launcher passes the library path to the dynamic loader, not through LD_LIBRARY_PATH,
# so the programs dnnc starts (cc, which links CPU kernels) keep their own libraries.
# libcuda.so.1, opened at run time, is still found where the system's loader finds it.
cat > "$stage/dnnc/dnnc" <<'EOF'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
if [ "${DNNC_BUNDLE_GLIBC:-0}" = 1 ]; then
  exec "$here/glibc/ld-linux-x86-64.so.2" --library-path "$here/lib:$here/glibc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$here/dnnc.bin" "$@"
fi
exec /lib64/ld-linux-x86-64.so.2 --library-path "$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$here/dnnc.bin" "$@"
EOF
chmod +x "$stage/dnnc/dnnc"
mkdir -p "$(dirname "$bundle")"
tar -C "$stage" -cf - dnnc | xz -T0 -6 > "$bundle"
echo "gpu-bundle: $bundle ($(du -h "$bundle" | cut -f1); dnnc $(git describe --always --dirty 2>/dev/null || echo unknown))"

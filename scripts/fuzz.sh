#!/usr/bin/env bash
# Long libFuzzer runs of the harnesses under tests/fuzz (ASan + UBSan): builds build-fuzz
# with clang-19, then runs each named harness (default: all) for SECONDS (default 600)
# on JOBS workers, growing a corpus under fuzz-out/<harness>/corpus (the committed seeds
# in tests/fuzz/corpus/<harness> are read, never written). Crashes land in
# fuzz-out/<harness>/; reproduce one with build-fuzz/tests/fuzz/fuzz_<harness> FILE.
#
#   scripts/fuzz.sh                      # every harness, 10 minutes each
#   scripts/fuzz.sh 3600 frontend repl   # two harnesses, an hour each
#   JOBS=4 scripts/fuzz.sh 600 npy       # four workers
#   MERGE=1 scripts/fuzz.sh 600 npy      # then merge new coverage into the committed corpus
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(frontend npy safetensors artifact repl)
jobs=${JOBS:-1}
./scripts/install-deps.sh
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-19 \
  -DCMAKE_CXX_COMPILER=clang++-19 -DDNNC_FUZZ=ON -DDNNC_BENCH=OFF >/dev/null
cmake --build build-fuzz --target dnnc_fuzzers
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for h in "${harnesses[@]}"; do
  out=fuzz-out/$h
  mkdir -p "$out/corpus"
  par=()
  [ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
  leaks=(-detect_leaks=1) # see tests/fuzz/CMakeLists.txt: NO_LEAK_CHECK
  case $h in frontend | repl) leaks=(-detect_leaks=0) ;; esac
  dict=()
  [ -f "tests/fuzz/$h.dict" ] && dict=(-dict="tests/fuzz/$h.dict")
  echo "== $h: ${seconds}s, $jobs job(s), corpus $out/corpus"
  if ! build-fuzz/tests/fuzz/fuzz_"$h" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=20 \
      -print_final_stats=1 -artifact_prefix="$out/" "${par[@]}" "${leaks[@]}" "${dict[@]}" \
      "$out/corpus" "tests/fuzz/corpus/$h" 2>&1 | tee "$out/log.txt" | grep -E "^#[0-9]+ +(DONE|pulse)|^stat::|ERROR|FINDING|^Done"; then
    :
  fi
  if grep -qE "ERROR: |FUZZ FINDING" "$out"/log.txt fuzz-*.log 2>/dev/null; then
    echo "!! $h: a finding; see $out/"
    status=1
  fi
  if [ "${MERGE:-0}" = 1 ]; then
    build-fuzz/tests/fuzz/fuzz_"$h" -merge=1 "tests/fuzz/corpus/$h" "$out/corpus" >/dev/null 2>&1
  fi
done
exit $status

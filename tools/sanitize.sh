#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (gcc), CPU only.
#   bash tools/sanitize.sh                  # build into build-asan/, run every test, log under results/
#   SKIP_BUILD=1 CTEST_ARGS="-R Npz" bash tools/sanitize.sh
#   OUT_DIR=results/sanitizers/2026-11-27/s42 bash tools/sanitize.sh   # write elsewhere
# Any sanitizer report fails its test (halt_on_error, UBSan errors are fatal). Leak checking is
# off: OpenMPI, oneDNN's JIT and Python (the PyTorch peers) keep allocations alive to exit by
# design, and those reports would drown everything else. CUDA is off (there is no GPU to run it
# on here, and nvcc's host code would not be instrumented anyway). The build takes about an hour
# on 2 cores; the run two to three times the normal suite.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-asan}
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  # CMake takes the first configure's compiler and linker flags from the environment.
  CXXFLAGS="$flags" CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" BUILD_DIR="$build" \
    CMAKE_ARGS="-DBENCHHOST_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo" bash tools/setup.sh
fi
out=${OUT_DIR:-results/sanitizers/$(date -u +%F)}
# Whether the tree is dirty is asked before anything is written under $out, which may hold
# committed files of an earlier run.
commit="$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo " (dirty)")"
mkdir -p "$out"
# The tests that crash on purpose (crash isolation, hostile plugin files) need the signal itself,
# not ASan's report of it: ASan leaves SEGV, BUS and FPE alone and reports everything else.
# allocator_may_return_null: a request larger than ASan supports fails like any malloc, so the
# tests of typed out-of-memory errors see what they would see without ASan.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Python loads the instrumented SDK only through subprocesses of the host, so it needs no preload.
{ date -u; uname -a; gcc --version | head -n 1; echo "commit: $commit"; } > "$out/environment.txt"
set +e
ctest --test-dir "$build" --output-on-failure --timeout 2700 -j2 ${CTEST_ARGS:-} > "$out/ctest.log" 2>&1
rc=$?
set -e
grep -E "tests passed|tests failed|Total Test time" "$out/ctest.log" | tee "$out/summary.txt"
grep -E "ERROR: AddressSanitizer|runtime error:" "$out/ctest.log" | sort | uniq -c | tee -a "$out/summary.txt" || true
exit $rc

#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root, after tools/device/pack.sh
# here (carry [".device"]). Unpacks the bundle, makes /work/main point at this checkout (the
# build's absolute paths), and writes each test binary's output, a summary and the device's own
# description under $OUT.
#   bash tools/device/run_tests.sh            # the GPU tests of every test area
#   TESTS="test_cuda" GTEST_FILTER='*Dense*' bash tools/device/run_tests.sh
# A TESTS entry is a test binary, or binary=filter to run only the filter's tests of it. By default
# every test area that has a tests/<area>/gpu_tests file runs bin/test_<area> with the gtest filter
# that file holds (its first line that is not a comment): an area names its own GPU tests, and a
# new workload's tests join by adding that file.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
. tools/device/env.sh || exit 2
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; nvidia-smi -L; } > "$out/device.txt" 2>&1
status=0
default_tests=""
for f in tests/*/gpu_tests; do
  area=$(basename "$(dirname "$f")")
  default_tests+=" test_$area=$(grep -v '^#' "$f" | head -n 1)"
done
for entry in ${TESTS:-$default_tests}; do
  t=${entry%%=*}
  filter=${GTEST_FILTER:-}
  [ "$entry" != "$t" ] && filter=${entry#*=}
  bin="$build/bin/$t"
  [ -x "$bin" ] || { echo "missing $t" >> "$out/summary.txt"; status=1; continue; }
  # A hung kernel or collective must not eat the lease: each binary gets TEST_TIMEOUT seconds.
  timeout -k 5 "${TEST_TIMEOUT:-150}" "$bin" --gtest_color=no ${filter:+--gtest_filter="$filter"} > "$out/$t.log" 2>&1
  rc=$?
  [ $rc = 124 ] || [ $rc = 137 ] && echo "$t: timed out after ${TEST_TIMEOUT:-150} s" >> "$out/$t.log"
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$out/$t.log" | tr '\n' ' ')" >> "$out/summary.txt"
  [ $rc = 0 ] || status=1
  # On this machine a CUDA test may skip only for a missing capability (e.g. Hopper), never
  # because the GPU cannot be used at all: that would pass every test without running any.
  no_gpu=$(grep -m1 -oE "(the CUDA backend library could not be loaded|requested but 0 (cuda|CUDA) device\(s\) are visible).*" "$out/$t.log")
  if [ -n "$no_gpu" ]; then
    echo "$t: the GPU was not usable, CUDA tests skipped: $no_gpu" >> "$out/summary.txt"
    status=1
  fi
done
cat "$out/device.txt" "$out/summary.txt"
exit $status

#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root, after tools/device/pack.sh
# here. Writes each test binary's output and the device's own description under $OUT.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; } > "$out/device.txt" 2>&1
status=0
for t in ${TESTS:-test_cuda test_nn_ops}; do
  [ -x ".device/bin/$t" ] || { echo "missing $t" >> "$out/summary.txt"; continue; }
  ".device/bin/$t" --gtest_color=no > "$out/$t.log" 2>&1
  rc=$?
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')" >> "$out/summary.txt"
  [ $rc = 0 ] || status=1
done
cat "$out/device.txt" "$out/summary.txt"
exit $status

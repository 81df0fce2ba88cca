#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root, after tools/device/pack.sh
# here (carry [".device"]). Unpacks the bundle, makes /work/main point at this checkout (the
# build's absolute paths), and writes each test binary's output, a summary and the device's own
# description under $OUT.
#   bash tools/device/run_tests.sh                      # test_cuda and test_nn_ops
#   TESTS="test_cuda" GTEST_FILTER='*Dense*' bash tools/device/run_tests.sh
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
tar -xJf .device/bundle.tar.xz || { echo "no .device/bundle.tar.xz: run tools/device/pack.sh here first and carry .device"; exit 2; }
if [ "$PWD" != /work/main ]; then
  mkdir -p /work && { [ -e /work/main ] || ln -s "$PWD" /work/main; }
fi
build=$(cat .device/build_dir)
export LD_LIBRARY_PATH="$PWD/$build/lib:$PWD/$build/syslib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuDNN and NCCL may come from Python wheels on the device rather than /usr/local/cuda.
for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; nvidia-smi -L; } > "$out/device.txt" 2>&1
status=0
for t in ${TESTS:-test_cuda test_nn_ops}; do
  bin="$build/bin/$t"
  [ -x "$bin" ] || { echo "missing $t" >> "$out/summary.txt"; status=1; continue; }
  "$bin" --gtest_color=no ${GTEST_FILTER:+--gtest_filter="$GTEST_FILTER"} > "$out/$t.log" 2>&1
  rc=$?
  echo "$t rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')" >> "$out/summary.txt"
  [ $rc = 0 ] || status=1
done
cat "$out/device.txt" "$out/summary.txt"
exit $status

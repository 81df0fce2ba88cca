#!/usr/bin/env bash
# One device call that brings a GPU up: the machine's own description, every CUDA test
# (run_tests.sh), then the throughput pairs (bench_gpu.sh), each phase under its own time budget so
# the call ends inside the device tool's 10-minute limit with everything it has. Runs on the GPU
# machine from the repository root after tools/device/pack.sh here (carry [".device"]):
#   bash tools/device/session.sh          # about 9.5 minutes at most (150 + 40 + 120 + 250 s of budgets): timeout_s 580
#   TESTS_BUDGET=200 BENCH_BUDGET=280 WORKLOADS="resnet50 bert" bash tools/device/session.sh
#   TESTS="test_cuda test_gpt3=*Cuda*" PROFILE_ONLY='^resnet50_benchhost_bf16$' ONLY='^gpt3' bash tools/device/session.sh
# The device tool brings back at most 8 files, so every log goes into $OUT/bringup.tar.gz (rewritten
# after each phase); the summaries are printed last, where the tool's reply shows them.
set -uo pipefail
final=${OUT:-/tmp/out}
work=${WORK:-/tmp/bringup}
rm -rf "$work" && mkdir -p "$work" "$final"
t0=$SECONDS
save() { tar -czf "$final/bringup.tar.gz" -C "$work" . 2>/dev/null; }
{
  date -u; uname -r; nvidia-smi 2>&1; nvidia-smi -q 2>&1 | grep -iE 'product name|driver version|cuda version|vbios|clocks|power limit' | head -30
  nvcc --version 2>&1 | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version())' 2>&1
  ls /usr/local/cuda/lib64 2>&1 | grep -E 'cudnn|nccl|cublas' | head
} > "$work/device.txt"
save
OUT=$work/tests TEST_TIMEOUT=${TEST_TIMEOUT:-90} timeout -k 5 "${TESTS_BUDGET:-150}" bash tools/device/run_tests.sh > "$work/tests.out" 2>&1
echo "tests phase rc=$? after $((SECONDS - t0)) s" >> "$work/phases.txt"
save
# The convolutions of ResNet-50 and U-Net shapes through the SDK ops, every cuDNN graph-API
# candidate listed (bench/cudnn/bench_cudnn_conv.cpp, Note [cuDNN graph convolutions]);
# CONV_BUDGET=0 skips it, CONV_LEGACY=1 also lists the legacy API's algorithms.
if [ "${CONV_BUDGET:-40}" != 0 ]; then
  ( . tools/device/env.sh >/dev/null && BENCHHOST_CUDNN_GRAPH_VERBOSE=1 timeout -k 5 "${CONV_BUDGET:-40}" \
      "$build/bin/bench_cudnn_conv" "" "$([ "${CONV_LEGACY:-0}" = 1 ] || echo sdk)" ) \
    > "$work/conv.csv" 2> "$work/conv_candidates.txt"
  echo "conv phase rc=$? after $((SECONDS - t0)) s" >> "$work/phases.txt"
  save
fi
# Our runs that rank the ops of their timed steps by device time, each shape apart (Note [Op
# times]; PROFILE_OP_TIMES=1 totals per op and dtype only); PROFILE_ONLY= (empty) skips it. The
# default profiles what results/gpu/2026-11-27 (H200) left behind PyTorch in bf16: Mask R-CNN at
# 0.16x (channels-last since 4835076, not yet measured), ResNet-50 at 0.48x, U-Net at 0.42x and
# GPT-3 at 0.87x.
PROFILE_ONLY=${PROFILE_ONLY-'^(maskrcnn_benchhost_bf16|resnet50_benchhost_bf16|unet3d_benchhost_bf16|gpt3_125m_benchhost_bf16)$'}
if [ -n "$PROFILE_ONLY" ]; then
  OUT=$work/profile ITERS=2 OP_TIMES=${PROFILE_OP_TIMES:-shapes} ONLY=$PROFILE_ONLY RUN_TIMEOUT=${RUN_TIMEOUT:-60} \
    WORKLOADS=${PROFILE_WORKLOADS:-"maskrcnn resnet50 unet3d gpt3"} \
    timeout -k 5 "${PROFILE_BUDGET:-120}" bash tools/device/bench_gpu.sh > "$work/profile.out" 2>&1
  echo "profile phase rc=$? after $((SECONDS - t0)) s" >> "$work/phases.txt"
  save
fi
OUT=$work/bench ITERS=${ITERS:-10} RUN_TIMEOUT=${RUN_TIMEOUT:-60} \
  WORKLOADS=${WORKLOADS:-"resnet50 bert gpt3 retinanet unet3d dlrm_dcnv2 rnnt maskrcnn"} \
  timeout -k 5 "${BENCH_BUDGET:-250}" bash tools/device/bench_gpu.sh > "$work/bench.out" 2>&1
echo "bench phase rc=$? after $((SECONDS - t0)) s" >> "$work/phases.txt"
save
head -c 3000 "$work/device.txt"
echo "== tests"; cat "$work/tests/summary.txt" 2>/dev/null
for f in "$work"/tests/test_*.log; do  # the first failures, where the reply shows them
  grep -qE '^\[  FAILED  \]|timed out' "$f" 2>/dev/null || continue
  echo "-- $(basename "$f")"; grep -B2 -A6 -m3 -E 'Failure|error|timed out' "$f" | head -c 1500
done
if [ -d "$work/profile" ]; then
  echo "== profile (top ops by device time)"
  for f in "$work"/profile/*.log; do echo "-- $(basename "$f")"; grep -E '^benchhost_op_times' "$f" | head -14 | cut -c1-240; done
fi
if [ -f "$work/conv.csv" ]; then
  echo "== convolutions (ms; conv_candidates.txt has every graph-API candidate)"; grep -E '^sdk,' "$work/conv.csv"
  grep -m3 -E 'error|failed|Error' "$work/conv_candidates.txt"
fi
echo "== bench"; cat "$work/bench/summary.txt" 2>/dev/null
cat "$work/phases.txt"

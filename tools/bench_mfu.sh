#!/usr/bin/env bash
# MFU of the four original workloads' training step on this CPU, against the peak calibrated with
# the SDK's own GEMM (docs/cli.md, *MFU*): each mini configuration, synthetic data, a small batch,
# a few timed steps. Raw JSON, CSV and console output go to OUT (default results/cpu/<date>/mfu).
#   tools/bench_mfu.sh [OUT]        THREADS=2 ITERATIONS=5 BUILD=build
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results/cpu/$(date -u +%F)/mfu}
build=${BUILD:-build}
threads=${THREADS:-2}
iterations=${ITERATIONS:-5}
mkdir -p "$out"
# The first run measures the peak afresh (refresh), the others reuse it from the cache.
calibrate=refresh
for spec in resnet50:8 bert:8 gpt3:4 dlrm_dcnv2:256; do
  w=${spec%%:*} b=${spec##*:}
  "$build/bin/benchhost" --plugin "$w" --config mini --mode train --synthetic -b "$b" -w 2 -i "$iterations" \
    --threads "$threads" --calibrate-peak "$calibrate" -o "$out/$w.json" --csv "$out/$w.csv" 2>&1 | tee "$out/$w.log"
  calibrate=auto
done
cp "${XDG_CACHE_HOME:-$HOME/.cache}/benchhost/peak.json" "$out/peak_cache.json"

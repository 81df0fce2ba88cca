#!/usr/bin/env bash
# Data loader throughput, benchhost vs PyTorch's DataLoader, in one run on the same files.
#   tools/bench_data_pipeline.sh                 (uses build/bin/bench_data_pipeline)
#   BUILD_DIR=build-x THREADS=1,2 EPOCHS=3 IMAGES=512 DIR=/tmp/x tools/bench_data_pipeline.sh
# Prints both tables and a joined one: samples/s per pipeline and thread count, and the ratio
# benchhost / PyTorch (> 1: benchhost is faster). The pipelines are described in
# bench/data/bench_data_pipeline.cpp and tools/peers/data_loader_peer.py. PyTorch's "threads" are
# DataLoader worker processes (num_workers).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
threads=${THREADS:-1,2}
epochs=${EPOCHS:-3}
images=${IMAGES:-512}
dir=${DIR:-${TMPDIR:-/tmp}/benchhost_data_bench}
bin="$build_dir/bin/bench_data_pipeline"
[ -x "$bin" ] || { echo "bench_data_pipeline: $bin not built (ninja -C $build_dir bench_data_pipeline)" >&2; exit 1; }
ours=$(mktemp) peer=$(mktemp)
trap 'rm -f "$ours" "$peer"' EXIT

echo "== benchhost ($bin), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" --dir "$dir" --threads "$threads" --epochs "$epochs" --images "$images" --only idx | tee -a "$ours"
"$bin" --dir "$dir" --threads "$threads" --epochs "$epochs" --images "$images" --only jpeg | tee -a "$ours"
echo
if /usr/bin/python3 -c 'import torch, torchvision, PIL' 2>/dev/null; then
  echo "== PyTorch DataLoader (/usr/bin/python3 tools/peers/data_loader_peer.py), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/python3 -W ignore tools/peers/data_loader_peer.py --dir "$dir" --threads "$threads" --epochs "$epochs" | tee "$peer"
else
  echo "== PyTorch peer skipped: /usr/bin/python3 lacks torch, torchvision or PIL" \
       "(apt-get install python3-torch python3-torchvision python3-pil)"
fi
echo
echo "== samples/s (benchhost threads vs PyTorch num_workers)"
awk '
  FNR == NR && $1 == "RESULT" { ours[$2 " " $3] = $4; order[++n] = $2 " " $3; next }
  $1 == "RESULT" { peer[$2 " " $3] = $4 }
  END {
    printf "%-8s %7s %14s %14s %8s\n", "pipeline", "threads", "benchhost", "pytorch", "ratio"
    for (i = 1; i <= n; ++i) {
      k = order[i]; split(k, f, " ")
      p = (k in peer) ? sprintf("%14.1f", peer[k]) : sprintf("%14s", "-")
      r = (k in peer && peer[k] > 0) ? sprintf("%7.2fx", ours[k] / peer[k]) : sprintf("%8s", "-")
      printf "%-8s %7s %14.1f %s %s\n", f[1], f[2], ours[k], p, r
    }
  }' "$ours" "$peer"

#!/usr/bin/env bash
# ResNet timings, benchhost vs eager PyTorch (Debian's python3-torch, same oneDNN underneath), in
# one run with the same thread count:
#   mini  : a training step of configs/resnet50/mini.conf's model (28x28x1, batch 128)
#   full  : a ResNet-50 v1.5 training step (224x224x3, batch 8): forward + backward + SGD
#   block : one bottleneck block (256-64-256, 56x56, batch 8) forward + backward
# benchhost runs NHWC (its default); PyTorch runs both its default NCHW and channels_last, and
# the ratio is against PyTorch's faster one (> 1: benchhost is faster).
#   tools/bench_resnet50.sh                       (build/bin/bench_resnet50, 2 threads)
#   BUILD_DIR=build-x THREADS=2 ITERS=5 tools/bench_resnet50.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
threads=${THREADS:-2}
. tools/threads.sh  # the same OpenMP/BLAS settings for benchhost and its peer
iters=${ITERS:-5}
warmup=${WARMUP:-2}
bin="$build_dir/bin/bench_resnet50"
[ -x "$bin" ] || { echo "bench_resnet50: $bin not built (ninja -C $build_dir bench_resnet50)" >&2; exit 1; }
ours=$(mktemp) peer=$(mktemp)
trap 'rm -f "$ours" "$peer"' EXIT

echo "== benchhost ($bin, nhwc, $threads threads), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" --threads "$threads" --iters "$iters" --warmup "$warmup" --layout nhwc | tee "$ours"
echo
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "== PyTorch peer skipped: /usr/bin/python3 has no torch (apt-get install python3-torch)"
  exit 0
fi
peer_py=tools/peers/resnet50_peer.py
common=(--threads "$threads" --iters "$iters" --warmup "$warmup")
mini=(--blocks 1,1,1,1 --base-width 8 --num-classes 10 --in-channels 1 --small-stem --batch-size 128 --image-size 28)
echo "== PyTorch ($peer_py), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for cl in "" --channels-last; do
  tag=${cl:+channels_last}; tag=${tag:-nchw}
  /usr/bin/python3 "$peer_py" bench "${common[@]}" "${mini[@]}" $cl | sed "s/^{/{\"bench\": \"mini\", \"layout\": \"$tag\", /" | tee -a "$peer"
  /usr/bin/python3 "$peer_py" bench "${common[@]}" --batch-size 8 --image-size 224 $cl | sed "s/^{/{\"bench\": \"full\", \"layout\": \"$tag\", /" | tee -a "$peer"
  /usr/bin/python3 "$peer_py" block "${common[@]}" --batch-size 8 --image-size 56 $cl | sed "s/^{/{\"bench\": \"block\", \"layout\": \"$tag\", /" | tee -a "$peer"
done
echo
echo "== ms per step (median of $iters), $threads threads; ratio = best PyTorch / benchhost (> 1: benchhost faster)"
/usr/bin/python3 - "$ours" "$peer" <<'PY'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
peer = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
print("%-6s %14s %14s %18s %8s" % ("bench", "benchhost", "pytorch nchw", "pytorch ch-last", "ratio"))
for o in ours:
    p = {r["layout"]: r["ms_per_step"] for r in peer if r["bench"] == o["bench"]}
    best = min(p.values()) if p else float("nan")
    print("%-6s %14.1f %14.1f %18.1f %8.2f" % (o["bench"], o["ms_per_step"], p.get("nchw", float("nan")),
                                              p.get("channels_last", float("nan")), best / o["ms_per_step"]))
PY

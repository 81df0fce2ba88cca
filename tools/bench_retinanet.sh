#!/usr/bin/env bash
# RetinaNet training-step timings, benchhost vs eager PyTorch with torchvision 0.14's pieces
# (tools/peers/retinanet_peer.py bench), in one run with the same thread count, alternating:
#   mini : configs/retinanet/mini.conf's model (narrow ResNeXt-FPN), 128x128, batch 16
#   full : the MLPerf RetinaNet (ResNeXt50-32x4d FPN, 264 classes), FULL_SIZE^2 (320 by default;
#          800 is the reference's and takes tens of seconds per image on two cores), batch 2
# Both sides run a whole training step on random images with the same four boxes per image:
# forward, anchors, matching, focal + L1 losses, backward, Adam. benchhost's figure is the p50 step
# time of `benchhost --mode train --synthetic`; the ratio is PyTorch / benchhost (> 1: benchhost
# faster).   BUILD_DIR=build THREADS=2 ITERS=5 FULL_SIZE=320 tools/bench_retinanet.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
threads=${THREADS:-2}
. tools/threads.sh
iters=${ITERS:-5}
warmup=${WARMUP:-2}
full_size=${FULL_SIZE:-320}
bh="$build_dir/bin/benchhost"
[ -x "$bh" ] || { echo "bench_retinanet: $bh not built" >&2; exit 1; }
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null || { echo "== PyTorch peer skipped: /usr/bin/python3 has no torch/torchvision"; exit 0; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mini_model=(--blocks 1,1,1,1 --groups 4 --width-per-group 4 --stem-channels 16 --fpn-channels 32 --head-convs 2
            --num-classes 4 --trainable-layers 5)
for bench in mini full; do
  if [ "$bench" = mini ]; then
    ours=(--config mini -b 16); peer=("${mini_model[@]}" --batch-size 16 --image-size 128 --anchor-scale 0.5)
  else
    ours=(--config mlperf -b 2 --retinanet.image-size "$full_size" --retinanet.pretrained-backbone false)
    peer=(--batch-size 2 --image-size "$full_size")
  fi
  echo "== $bench: benchhost, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$bh" --plugin retinanet --mode train --synthetic --threads "$threads" -w "$warmup" -i "$iters" "${ours[@]}" \
    -o "$out/$bench.json" | grep -E '^(kind|train)'
  echo "== $bench: PyTorch (tools/peers/retinanet_peer.py), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/python3 tools/peers/retinanet_peer.py bench --threads "$threads" --iters "$iters" --warmup "$warmup" \
    "${peer[@]}" | tee "$out/$bench.peer.json"
done
echo
echo "== ms per step (median of $iters), $threads threads; ratio = PyTorch / benchhost (> 1: benchhost faster)"
/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
print("%-6s %12s %12s %8s" % ("bench", "benchhost", "pytorch", "ratio"))
for b in ("mini", "full"):
    ours = json.load(open(os.path.join(d, b + ".json")))["results"][0]["step_ms"]["p50"]
    peer = json.loads(open(os.path.join(d, b + ".peer.json")).read())["ms_per_step"]
    print("%-6s %12.1f %12.1f %8.2f" % (b, ours, peer, peer / ours))
PY

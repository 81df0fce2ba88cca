#!/usr/bin/env bash
# Mask R-CNN training-step timings, benchhost vs eager PyTorch with torchvision 0.14's MaskRCNN
# (tools/peers/maskrcnn_peer.py bench), in one run with the same thread count, alternating:
#   mini : configs/maskrcnn/mini.conf's model (narrow R-FPN, 5 classes), 128x128, batch 8
#   full : the MLPerf Mask R-CNN (R-50-FPN, 81 classes), FULL_SIZE^2 (320 by default; 800x1333 is
#          the reference's and takes minutes per step on two cores), batch 2
# Both sides run a whole training step on random images with the same four boxes (and masks) per
# image: backbone, FPN, RPN losses and proposals, RoI sampling, box and mask heads and losses,
# backward, SGD. The torch side is torchvision's MaskRCNN around the same body and FPN (stride in
# the 1x1), with torchvision's own conventions (no +1 boxes, masks as images cropped by RoIAlign
# where ours rasterises polygons per RoI). benchhost's figure is the p50 step time of
# `benchhost --mode train --synthetic`; the ratio is PyTorch / benchhost (> 1: benchhost faster).
# The full model starts from random weights without the pretrained body's batch-norm statistics:
# on raw BGR pixels its activations overflow within a step or two and the run would end DIVERGED,
# so its pixels are divided by 57 and its learning rate is 1e-4 (neither changes the work done).
#   BUILD_DIR=build THREADS=2 ITERS=5 FULL_SIZE=320 tools/bench_maskrcnn.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
threads=${THREADS:-2}
. tools/threads.sh
iters=${ITERS:-5}
warmup=${WARMUP:-2}
full_size=${FULL_SIZE:-320}
bh="$build_dir/bin/benchhost"
[ -x "$bh" ] || { echo "bench_maskrcnn: $bh not built" >&2; exit 1; }
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null || { echo "== PyTorch peer skipped: /usr/bin/python3 has no torch/torchvision"; exit 0; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mini_cfg='{"blocks":[1,1,1,1],"stem_channels":16,"fpn_channels":32,"num_classes":5,"num_anchors":3,
 "representation_size":128,"mask_convs":2,"mask_channels":32,"box_resolution":7,"mask_resolution":14,"freeze_at":0,
 "anchor_scale":0.5,"rpn_pre_nms_top_n":300,"rpn_post_nms_top_n":300,"rpn_batch_size_per_image":128,
 "roi_batch_size_per_image":128}'
full_cfg='{"blocks":[3,4,6,3],"stem_channels":64,"fpn_channels":256,"num_classes":81,"num_anchors":3,
 "representation_size":1024,"mask_convs":4,"mask_channels":256,"box_resolution":7,"mask_resolution":14,"freeze_at":2,
 "anchor_scale":1.0,"rpn_pre_nms_top_n":2000,"rpn_post_nms_top_n":2000,"rpn_batch_size_per_image":256,
 "roi_batch_size_per_image":512}'
for bench in mini full; do
  if [ "$bench" = mini ]; then
    ours=(--config mini -b 8); peer=(--batch-size 8 --image-size 128 --config "$mini_cfg")
  else
    ours=(--config mlperf -b 2 --maskrcnn.min-size "$full_size" --maskrcnn.max-size "$full_size"
          --maskrcnn.pretrained-backbone false --maskrcnn.pixel-std 57 --maskrcnn.lr 0.0001)
    peer=(--batch-size 2 --image-size "$full_size" --config "$full_cfg")
  fi
  echo "== $bench: benchhost, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$bh" --plugin maskrcnn --mode train --synthetic --threads "$threads" -w "$warmup" -i "$iters" "${ours[@]}" \
    -o "$out/$bench.json" | grep -E '^(kind|train)'
  echo "== $bench: PyTorch (tools/peers/maskrcnn_peer.py bench), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/python3 tools/peers/maskrcnn_peer.py bench --threads "$threads" --iters "$iters" --warmup "$warmup" \
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

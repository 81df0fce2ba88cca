#!/usr/bin/env bash
# 3D U-Net training-step timings, benchhost vs eager PyTorch (Debian's python3-torch), in one run
# with the same thread count:
#   mini : a training step of configs/unet3d/mini.conf's model (filters 8..64, 32^3, batch 2)
#   full : a training step of the MLPerf model (filters 32..320) on FULL_PATCH^3 patches (64 by
#          default; 128^3 is the reference's and takes minutes per step on two cores), batch 2
# Both are forward + DiceCE + backward + SGD with Nesterov momentum. benchhost runs NDHWC (its
# default); PyTorch runs its default NCDHW and channels_last_3d, and the ratio is against
# PyTorch's faster one (> 1: benchhost is faster).
#   tools/bench_unet3d.sh                    (build/bin/bench_unet3d, 2 threads)
#   BUILD_DIR=build-x THREADS=2 ITERS=5 FULL_PATCH=64 tools/bench_unet3d.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
threads=${THREADS:-2}
. tools/threads.sh  # the same OpenMP/BLAS settings for benchhost and its peer
iters=${ITERS:-5}
warmup=${WARMUP:-2}
full_patch=${FULL_PATCH:-64}
bin="$build_dir/bin/bench_unet3d"
[ -x "$bin" ] || { echo "bench_unet3d: $bin not built (ninja -C $build_dir bench_unet3d)" >&2; exit 1; }
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "== PyTorch peer skipped: /usr/bin/python3 has no torch (apt-get install python3-torch)"
  "$bin" --threads "$threads" --iters "$iters" --warmup "$warmup" --full-patch "$full_patch"
  exit 0
fi
ours=$(mktemp) peer=$(mktemp)
trap 'rm -f "$ours" "$peer"' EXIT
peer_py=tools/peers/unet3d_peer.py
common=(--threads "$threads" --iters "$iters" --warmup "$warmup" --batch-size 2)
# Alternate the sides bench by bench (the machine is shared: one side must not get a quiet spell).
for bench in mini full; do
  if [ "$bench" = mini ]; then shape=(--filters 8,16,32,64 --patch 32); else shape=(--patch "$full_patch"); fi
  echo "== $bench: benchhost ($bin, ndhwc, $threads threads), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$bin" --threads "$threads" --iters "$iters" --warmup "$warmup" --full-patch "$full_patch" --only "$bench" | tee -a "$ours"
  for cl in "" --channels-last; do
    tag=${cl:+channels_last}; tag=${tag:-ncdhw}
    echo "== $bench: PyTorch ($peer_py, $tag), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/python3 "$peer_py" bench "${common[@]}" "${shape[@]}" $cl | sed "s/^{/{\"bench\": \"$bench\", \"layout\": \"$tag\", /" | tee -a "$peer"
  done
done
echo
echo "== ms per step (median of $iters), $threads threads; ratio = best PyTorch / benchhost (> 1: benchhost faster)"
/usr/bin/python3 - "$ours" "$peer" <<'PY'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
peer = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
print("%-6s %6s %14s %14s %18s %8s" % ("bench", "patch", "benchhost", "pytorch ncdhw", "pytorch ch-last", "ratio"))
for o in ours:
    p = {r["layout"]: r["ms_per_step"] for r in peer if r["bench"] == o["bench"]}
    best = min(p.values()) if p else float("nan")
    print("%-6s %6d %14.1f %14.1f %18.1f %8.2f" % (o["bench"], o["patch"], o["ms_per_step"], p.get("ncdhw", float("nan")),
                                                   p.get("channels_last", float("nan")), best / o["ms_per_step"]))
PY

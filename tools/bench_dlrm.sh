#!/usr/bin/env bash
# bench_dlrm.sh: DLRM-DCNv2 mini training throughput, benchhost vs the PyTorch peer, side by side
# on this machine: the same model shapes (configs/dlrm_dcnv2/mini.conf), batch, thread count and
# random (synthetic) batches, Adagrad on every parameter. Prints both samples/s and the ratio.
#   tools/bench_dlrm.sh [BUILD_DIR] [THREADS] [BATCH] [STEPS]
# Not a test: timings depend on the machine and its load. Both sides run with
# OMP_WAIT_POLICY=PASSIVE (libgomp workers otherwise spin between parallel regions).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
threads=${2:-2}
. "$here/tools/threads.sh"  # the same OpenMP/BLAS settings for benchhost and its peer
batch=${3:-1024}
steps=${4:-40}
conf=$here/configs/dlrm_dcnv2/mini.conf
[ -x "$build/bin/benchhost" ] || { echo "bench_dlrm.sh: no $build/bin/benchhost (build first)" >&2; exit 2; }
opt() { sed -n "s/^dlrm_dcnv2\.$1 *= *//p" "$conf"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$threads "$build/bin/benchhost" --plugin dlrm_dcnv2 --config "$conf" --mode train \
  --synthetic -b "$batch" -w 5 -i "$steps" --threads "$threads" -o "$tmp/bh.json" > "$tmp/bh.log" 2>&1 \
  || { cat "$tmp/bh.log" >&2; exit 1; }
ours=$(/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results'][0]; print(r['samples_per_second'] if r['status']=='PASSED' else 0)" "$tmp/bh.json")

peer=$(OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$threads /usr/bin/python3 "$here/tools/peers/dlrm_peer.py" bench \
  --table-sizes "$(opt table-sizes)" --multi-hot-sizes "$(opt multi-hot-sizes)" \
  --embedding-dim "$(opt embedding-dim)" --bottom-mlp "$(opt bottom-mlp)" --top-mlp "$(opt top-mlp)" \
  --cross-layers "$(opt cross-layers)" --cross-rank "$(opt cross-rank)" --lr "$(opt learning-rate)" \
  --batch "$batch" --steps "$steps" --warmup 5 --threads "$threads" \
  | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['samples_per_second'])")

/usr/bin/python3 - "$ours" "$peer" "$threads" "$batch" <<'PY'
import sys
ours, peer, threads, batch = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
print(f"dlrm_dcnv2 mini training, batch {batch}, {threads} threads, synthetic batches")
print(f"  benchhost      {ours:12.1f} samples/s")
print(f"  PyTorch peer   {peer:12.1f} samples/s")
print(f"  ratio          {ours / peer if peer else float('nan'):12.3f}x  (benchhost / PyTorch)")
PY

#!/usr/bin/env bash
# TransformerBlock forward+backward on the CPU, benchhost vs PyTorch, in one run, on the same
# shapes and thread count. Prints both lines and the ratio pytorch_ms / benchhost_ms (> 1:
# benchhost is faster), for wall time and for process CPU time (with THREADS=1 on a loaded
# machine the CPU-time ratio is the trustworthy one).
#   tools/bench_transformer_block.sh                       (build/bin/bench_transformer_block)
#   BUILD_DIR=build-x THREADS=2 ITERS=30 tools/bench_transformer_block.sh [--pre-ln] [--batch 8 ...]
# Both programs use GNU OpenMP (oneDNN here, ATen there): on a shared or loaded machine run with
# OMP_WAIT_POLICY=passive, which stops idle OpenMP workers from spinning (it applies to both
# sides; on a 2-core box at load ~15 it halved both times at 2 threads).
# Extra arguments go to both programs (--batch --seq --hidden --heads --ffn --dropout --pre-ln).
# Defaults: batch 8, seq 128, hidden 256, 4 heads, FFN 1024, dropout 0.1, post-LN (BERT).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
threads=${THREADS:-$(nproc)}
. tools/threads.sh  # the same OpenMP/BLAS settings for benchhost and its peer
iters=${ITERS:-20}
bin="$build_dir/bin/bench_transformer_block"
[ -x "$bin" ] || { echo "bench_transformer_block: $bin not built (ninja -C $build_dir bench_transformer_block)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "PyTorch peer unavailable: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 1; }

echo "== shapes: ${*:-defaults}; threads $threads; iters $iters; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
ours=$("$bin" --threads "$threads" --iters "$iters" "$@")
echo "$ours"
peer=$(/usr/bin/python3 -W ignore tools/peers/transformer_block_peer.py --threads "$threads" --iters "$iters" "$@")
echo "$peer"
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }
o=$(field "$ours" fwd_bwd_ms_median)
p=$(field "$peer" fwd_bwd_ms_median)
of=$(field "$ours" fwd_ms_median)
pf=$(field "$peer" fwd_ms_median)
oc=$(field "$ours" cpu_ms_median)
pc=$(field "$peer" cpu_ms_median)
awk -v o="$o" -v p="$p" -v of="$of" -v pf="$pf" -v oc="$oc" -v pc="$pc" 'BEGIN {
  printf "fwd+bwd median wall: benchhost %.3f ms, pytorch %.3f ms, ratio pytorch/benchhost = %.2f\n", o, p, p / o
  printf "fwd     median wall: benchhost %.3f ms, pytorch %.3f ms, ratio pytorch/benchhost = %.2f\n", of, pf, pf / of
  printf "fwd+bwd median CPU:  benchhost %.3f ms, pytorch %.3f ms, ratio pytorch/benchhost = %.2f (process CPU time, all threads)\n", oc, pc, pc / oc
}'

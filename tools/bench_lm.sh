#!/usr/bin/env bash
# bench_lm.sh: CPU training throughput of our bert and gpt3 mini configurations next to their
# PyTorch peers (tools/peers/{bert,gpt3}_peer.py), same model shapes, batch and thread count,
# one after the other in one run. Synthetic data on both sides (full-length rows), so the data
# pipeline is not measured. A benchmark, not a test: never run by ctest.
#   tools/bench_lm.sh                      build/ , 2 threads
#   BUILD_DIR=build-x THREADS=4 STEPS=30 tools/bench_lm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
threads=${THREADS:-2}
. tools/threads.sh  # the same OpenMP/BLAS settings for benchhost and its peer
steps=${STEPS:-20}
warmup=${WARMUP:-3}
py=/usr/bin/python3
bin="$build/bin/benchhost"
[ -x "$bin" ] || { echo "bench_lm: $bin not found (build first, or set BUILD_DIR)" >&2; exit 1; }
"$py" -c 'import torch' 2>/dev/null || { echo "bench_lm: $py has no torch (apt-get install python3-torch)" >&2; exit 1; }

conf() {  # conf FILE KEY -> value of "KEY = value" in a config file
  sed -n "s/^$2[[:space:]]*=[[:space:]]*\([^#[:space:]]*\).*/\1/p" "$1" | tail -n 1
}

printf '%-6s %6s %8s %14s %14s %8s\n' workload batch threads "ours samples/s" "torch samples/s" ratio
for w in bert gpt3; do
  c=configs/$w/mini.conf
  batch=$(conf "$c" "$w.batch-size")
  if [ "$w" = bert ]; then
    json=$(printf '{"layers":%s,"hidden":%s,"heads":%s,"ffn":%s,"vocab":%s,"max_positions":%s,"seq_len":%s,"max_predictions":%s}' \
      "$(conf $c bert.layers)" "$(conf $c bert.hidden)" "$(conf $c bert.heads)" "$(conf $c bert.ffn)" \
      "$(conf $c bert.vocab)" "$(conf $c bert.max-positions)" "$(conf $c bert.seq-len)" "$(conf $c bert.max-predictions)")
  else
    json=$(printf '{"layers":%s,"hidden":%s,"heads":%s,"ffn":%s,"vocab":%s,"max_positions":%s,"seq_len":%s}' \
      "$(conf $c gpt3.layers)" "$(conf $c gpt3.hidden)" "$(conf $c gpt3.heads)" "$(conf $c gpt3.ffn)" \
      "$(conf $c gpt3.vocab)" "$(conf $c gpt3.seq-len)" "$(conf $c gpt3.seq-len)")
  fi
  ours=$("$bin" run --plugin "$w" --config "$c" --mode train --synthetic -b "$batch" -w "$warmup" -i "$steps" \
           --threads "$threads" 2>&1 | sed -n 's/.*train b=[0-9]* n=[0-9]*: \([0-9.]*\) samples\/s.*/\1/p' | head -n 1)
  theirs=$(OMP_NUM_THREADS=$threads "$py" "tools/peers/${w}_peer.py" bench --config "$json" --batch "$batch" \
             --steps "$steps" --warmup "$warmup" --threads "$threads" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["samples_per_second"])')
  [ -n "$ours" ] || { echo "bench_lm: benchhost printed no throughput for $w" >&2; exit 1; }
  ratio=$("$py" -c "print(f'{$ours / $theirs:.2f}')")
  printf '%-6s %6s %8s %14.1f %14.1f %7sx\n' "$w" "$batch" "$threads" "$ours" "$theirs" "$ratio"
done

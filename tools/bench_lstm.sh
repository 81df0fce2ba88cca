#!/usr/bin/env bash
# nn::LSTM forward+backward on the CPU, benchhost vs torch.nn.LSTM, at RNN-T encoder size
# (240 -> 1024, 2 layers, T 100, B 8, f32) by default. The two programs run alternately, ROUNDS
# times (default 5), each one warm-up iteration then one timed; the medians over the rounds and
# the ratio pytorch_ms / benchhost_ms (> 1: benchhost is faster) are printed, for wall time and
# for process CPU time (on a loaded machine the CPU-time ratio is the trustworthy one).
#   tools/bench_lstm.sh                       (build/bin/bench_lstm, THREADS=2)
#   BUILD_DIR=build-x THREADS=2 ROUNDS=5 tools/bench_lstm.sh [--T 100 --B 8 --I 240 --H 1024 --layers 2]
# Run with OMP_WAIT_POLICY=passive on a shared machine (it applies to both sides).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
threads=${THREADS:-2}
rounds=${ROUNDS:-5}
. tools/threads.sh  # the same OpenMP/BLAS settings for benchhost and its peer
bin="$build_dir/bin/bench_lstm"
[ -x "$bin" ] || { echo "bench_lstm: $bin not built (cmake --build $build_dir --target bench_lstm)" >&2; exit 1; }
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "PyTorch peer unavailable: /usr/bin/python3 has no torch (apt-get install python3-torch)" >&2; exit 1; }

echo "== shapes: ${*:-defaults (T 100, B 8, I 240, H 1024, 2 layers)}; threads $threads; rounds $rounds, alternating"
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }
ow=() pw=() oc=() pc=()
for ((r = 1; r <= rounds; r++)); do
  ours=$("$bin" --threads "$threads" --iters 1 --warmup 1 "$@")
  echo "round $r: $ours (load $(cut -d' ' -f1 /proc/loadavg))"
  peer=$(/usr/bin/python3 -W ignore tools/peers/lstm_peer.py bench --threads "$threads" --iters 1 "$@")
  echo "round $r: $peer (load $(cut -d' ' -f1 /proc/loadavg))"
  ow+=("$(field "$ours" fwd_bwd_ms_median)") pw+=("$(field "$peer" fwd_bwd_ms_median)")
  oc+=("$(field "$ours" cpu_ms_median)") pc+=("$(field "$peer" cpu_ms_median)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
awk -v o="$(median "${ow[@]}")" -v p="$(median "${pw[@]}")" -v oc="$(median "${oc[@]}")" -v pc="$(median "${pc[@]}")" 'BEGIN {
  printf "fwd+bwd median wall: benchhost %.1f ms, pytorch %.1f ms, ratio pytorch/benchhost = %.2f\n", o, p, p / o
  printf "fwd+bwd median CPU:  benchhost %.1f ms, pytorch %.1f ms, ratio pytorch/benchhost = %.2f (process CPU time, all threads)\n", oc, pc, pc / oc
}'

#!/usr/bin/env bash
# The transducer (RNN-T) loss, forward + backward with reduction mean, benchhost (oneTBB CPU
# implementation, nn/transducer.hpp) vs torchaudio.functional.rnnt_loss on the CPU (Debian's
# python3-torchaudio), on the same inputs at the reference's micro-batch: B 16, T 150, U 40,
# V 1024 (unequal lengths; the longest utterance has exactly T frames and another exactly U labels).
# Each side runs ROUNDS times, alternating (the machine is shared: one side must not get a quiet
# spell), each run one warm-up and one timed iteration in a fresh process, THREADS threads each;
# the report is the median per side and the ratio torchaudio / benchhost (> 1: benchhost faster).
#   tools/bench_transducer_loss.sh                 (build/bin/bench_transducer_loss, 2 threads, 5 rounds)
#   BUILD_DIR=build-x THREADS=2 ROUNDS=5 tools/bench_transducer_loss.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
threads=${THREADS:-2}
rounds=${ROUNDS:-5}
. tools/threads.sh  # the same OpenMP/BLAS settings for benchhost and its peer
bin="$build_dir/bin/bench_transducer_loss"
[ -x "$bin" ] || { echo "bench_transducer_loss: $bin not built (ninja -C $build_dir bench_transducer_loss)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
shape=(--batch 16 --frames 150 --labels 40 --classes 1024)
echo "== inputs: B 16, T 150, U 40, V 1024 (f32 logits, $(( 16 * 150 * 41 * 1024 * 4 / 1048576 )) MiB), in $dir"
"$bin" --dir "$dir" --write-inputs "${shape[@]}" --threads "$threads" --warmup 0 --iters 1 > /dev/null
have_peer=1
/usr/bin/python3 -c 'import torch, torchaudio' 2>/dev/null || have_peer=0
ours=() peer=()
for r in $(seq 1 "$rounds"); do
  echo "== round $r: benchhost, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  line=$("$bin" --dir "$dir" "${shape[@]}" --threads "$threads" --warmup 1 --iters 1)
  echo "$line"
  ours+=("$line")
  if ((have_peer)); then
    echo "== round $r: torchaudio, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    line=$(/usr/bin/python3 tools/peers/rnnt_peer.py bench_transducer_loss "$dir" --threads "$threads" --warmup 1 --iters 1)
    echo "$line"
    peer+=("$line")
  fi
done
((have_peer)) || echo "== torchaudio peer skipped: /usr/bin/python3 has no torch/torchaudio"
echo
/usr/bin/python3 - "$threads" "$(printf '%s\n' "${ours[@]}")" "$(printf '%s\n' "${peer[@]:-}")" <<'PY'
import json, statistics, sys
threads = sys.argv[1]
ours = [json.loads(l) for l in sys.argv[2].splitlines() if l.startswith("{")]
peer = [json.loads(l) for l in sys.argv[3].splitlines() if l.startswith("{")]
o = statistics.median(r["median_ms"] for r in ours)
print("== forward + backward, ms, median of %d runs, %s threads" % (len(ours), threads))
print("benchhost  %10.1f  (runs: %s)" % (o, ", ".join("%.1f" % r["median_ms"] for r in ours)))
if peer:
    p = statistics.median(r["median_ms"] for r in peer)
    print("torchaudio %10.1f  (runs: %s)" % (p, ", ".join("%.1f" % r["median_ms"] for r in peer)))
    print("loss: benchhost %.6f, torchaudio %.6f" % (ours[-1]["loss"], peer[-1]["loss"]))
    print("ratio torchaudio / benchhost: %.2f (> 1: benchhost faster)" % (p / o))
PY

#!/usr/bin/env bash
# RNN-T training-step timings, benchhost vs eager PyTorch (torch.nn.LSTM + torchaudio's rnnt_loss,
# tools/peers/rnnt_peer.py bench_model_step), in one run with the same thread count:
#   mini : configs/rnnt/mini.conf's model (40 mels, encoder 128 x 1+1, prediction 64, joint 64,
#          43 classes), 60 spliced frames, 4 labels, batch 16
#   full : the MLPerf model (49,006,080 parameters), FULL_FRAMES spliced frames (150 by default;
#          the reference's longest are ~560) and FULL_LABELS labels (40), batch FULL_BATCH (4)
# Both sides run a whole step on random data: forward, transducer loss, backward, global-norm clip
# and the optimizer (ours LAMB + EMA as the workload; PyTorch Adam, it has no LAMB). benchhost's
# figure is the p50 step time of `benchhost --mode train --synthetic`; the ratio is PyTorch /
# benchhost (> 1: benchhost faster).
#   BUILD_DIR=build THREADS=2 ITERS=5 FULL_FRAMES=150 tools/bench_rnnt.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
threads=${THREADS:-2}
. tools/threads.sh
iters=${ITERS:-5}
warmup=${WARMUP:-2}
full_frames=${FULL_FRAMES:-150}
full_labels=${FULL_LABELS:-40}
full_batch=${FULL_BATCH:-4}
bh="$build_dir/bin/benchhost"
[ -x "$bh" ] || { echo "bench_rnnt: $bh not built" >&2; exit 1; }
/usr/bin/python3 -c 'import torch, torchaudio' 2>/dev/null || { echo "== PyTorch peer skipped: /usr/bin/python3 has no torch/torchaudio"; exit 0; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for bench in mini full; do
  if [ "$bench" = mini ]; then
    frames=60 labels=4 batch=16
    ours=(--config mini --rnnt.vocab-size 42)
    config='{"in_features": 120, "enc_n_hid": 128, "enc_pre_rnn_layers": 1, "enc_post_rnn_layers": 1, "enc_stack_time_factor": 2, "pred_n_hid": 64, "pred_rnn_layers": 1, "joint_n_hid": 64, "n_classes": 43}'
  else
    frames=$full_frames labels=$full_labels batch=$full_batch
    ours=(--config mlperf)
    config='{"in_features": 240, "enc_n_hid": 1024, "enc_pre_rnn_layers": 2, "enc_post_rnn_layers": 3, "enc_stack_time_factor": 2, "pred_n_hid": 512, "pred_rnn_layers": 2, "joint_n_hid": 512, "n_classes": 1024}'
  fi
  echo "== $bench: benchhost, $frames frames, $labels labels, batch $batch, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$bh" --plugin rnnt --mode train --synthetic --threads "$threads" -w "$warmup" -i "$iters" -b "$batch" "${ours[@]}" \
    --rnnt.grad-accumulation 1 --rnnt.synthetic-frames "$frames" --rnnt.synthetic-labels "$labels" \
    -o "$out/$bench.json" | grep -E '^(kind|train)'
  mkdir -p "$out/$bench.peer"
  echo "{\"config\": $config, \"shape\": [$frames, $batch, $labels]}" > "$out/$bench.peer/meta.json"
  echo "== $bench: PyTorch (tools/peers/rnnt_peer.py), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/python3 tools/peers/rnnt_peer.py bench_model_step "$out/$bench.peer" --threads "$threads" --iters "$iters" \
    --warmup "$warmup" | tee "$out/$bench.peer.json"
done
echo
echo "== ms per step (median of $iters), $threads threads; ratio = PyTorch / benchhost (> 1: benchhost faster)"
/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
print("%-6s %12s %12s %8s" % ("bench", "benchhost", "pytorch", "ratio"))
for b in ("mini", "full"):
    ours = json.load(open(os.path.join(d, b + ".json")))["results"][0]["step_ms"]["p50"]
    peer = json.loads(open(os.path.join(d, b + ".peer.json")).read())["median_ms"]
    print("%-6s %12.1f %12.1f %8.2f" % (b, ours, peer, peer / ours))
PY

#!/usr/bin/env bash
# RNN-T feature pipeline on one utterance (15 s at 16 kHz by default), benchhost vs the
# torch/torchaudio chain (tools/peers/audio_features_peer.py bench), both on 1 thread, median of 5.
# eval: trim, dither, pre-emphasis, spectrogram, mel, log, normalise, splice; train: resample to
# 1.1 x 16 kHz first and SpecAugment before the splice. Ratio = PyTorch ms / benchhost ms
# (> 1: benchhost faster).
#   tools/bench_audio_features.sh            (build/bin/bench_audio_features)
#   BUILD_DIR=build-x SECONDS_=15 tools/bench_audio_features.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
seconds=${SECONDS_:-15}
bin="$build_dir/bin/bench_audio_features"
[ -x "$bin" ] || { echo "bench_audio_features: $bin not built (cmake --build $build_dir --target bench_audio_features)" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
echo "== benchhost ($bin, 1 thread), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
ours=$("$bin" "$seconds")
echo "$ours"
if ! /usr/bin/python3 -c 'import torch, torchaudio' 2>/dev/null; then
  echo "== PyTorch peer skipped: /usr/bin/python3 has no torch/torchaudio (apt-get install python3-torchaudio)"
  exit 0
fi
echo "== torch/torchaudio (tools/peers/audio_features_peer.py bench, 1 thread), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
peer=$(/usr/bin/python3 tools/peers/audio_features_peer.py bench "$seconds")
echo "$peer"
echo
echo "== ms per utterance (median of 5), 1 thread; ratio = PyTorch / benchhost"
printf '%-6s %10s %10s %7s\n' chain benchhost pytorch ratio
for chain in eval train; do
  a=$(echo "$ours" | grep "\"chain\": \"$chain\"" | sed 's/.*"ms_median_of_5": \([0-9.]*\).*/\1/')
  b=$(echo "$peer" | grep "\"chain\": \"$chain\"" | sed 's/.*"ms_median_of_5": \([0-9.]*\).*/\1/')
  printf '%-6s %10.2f %10.2f %7.2f\n' "$chain" "$a" "$b" "$(echo "$b / $a" | bc -l)"
done

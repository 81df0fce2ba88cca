#!/usr/bin/env bash
# GPU throughput, benchhost side by side with PyTorch on the same GPU, in one run. Runs on the GPU
# machine (device tool) from the repository root after tools/device/pack.sh here (carry
# [".device"]); writes every raw output and a summary to $OUT (commit them under results/gpu/).
#   bash tools/device/bench_gpu.sh
#   DEVICE=cpu ITERS=1 RN_BATCH=2 RN_SIZE=64 LM_BATCH=1 PYTHON=/usr/bin/python3 bash tools/device/bench_gpu.sh
#                                                    # plumbing check here, no GPU (slow: full-size models)
# Pairs (benchhost precision vs PyTorch mode; our CUDA ops are f32, so tf32 is our fastest):
#   resnet50, batch RN_BATCH (256) at RN_SIZE (224), synthetic: ours fp32 and tf32 vs PyTorch
#   channels-last eager fp32 (TF32 allowed, PyTorch's default for convolutions) and AMP bf16.
#   gpt3 125m (seq 2048), batch LM_BATCH (8), synthetic tokens: ours fp32 and tf32 (samples/s,
#   MFU) vs tools/peers/gpt3_peer.py (the same model and AdamW) fp32, tf32 and AMP bf16.
#   bert-large seq 128 (mlperf.conf with bert.seq-len 128), batch LM_BATCH, synthetic: ours fp32
#   and tf32 vs tools/peers/bert_peer.py (the same model and LAMB) fp32, tf32 and AMP bf16.
#   The peers' shapes are read from the same config files (conf below).
#   dlrm_dcnv2, the MLPerf model shape (configs/dlrm_dcnv2/mlperf.conf) at batch DLRM_BATCH (65536)
#   with every table capped at DLRM_ROWS rows (4M: 28.2M rows, 14.4 GB of weights, so weights,
#   gradient buffers and Adagrad state fit one 80 GB GPU), synthetic: ours fp32 and tf32 vs
#   tools/peers/dlrm_peer.py (the same model and Adagrad) fp32 and AMP bf16.
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
. tools/device/env.sh || exit 2
dev=${DEVICE:-cuda}
iters=${ITERS:-20}
rn_batch=${RN_BATCH:-256}
rn_size=${RN_SIZE:-224}
lm_batch=${LM_BATCH:-8}
bh="$build/bin/benchhost"
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1; nvidia-smi -L 2>&1;
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1; } > "$out/device.txt"

ours() {  # name, then benchhost arguments
  local name=$1; shift
  "$bh" --mode train --synthetic --device "$dev" -w 3 -i "$iters" -o "$out/$name.json" "$@" > "$out/$name.log" 2>&1
  python3 - "$out/$name.json" "$name" >> "$out/summary.txt" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["results"][0]
    print(f"{sys.argv[2]:28s} {r['status']:8s} {r.get('samples_per_second') or 0:12.1f} samples/s  MFU {r.get('mfu')}  {r.get('message', '')}")
except Exception as e:
    print(f"{sys.argv[2]:28s} no report ({e})")
PY
}
peer() {  # name, then peer script arguments
  local name=$1; shift
  "${PYTHON:-python3}" "$@" > "$out/$name.json" 2> "$out/$name.log"
  python3 - "$out/$name.json" "$name" >> "$out/summary.txt" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    v = r.get("images_per_second") or r.get("samples_per_second")
    print(f"{sys.argv[2]:28s} {'PASSED':8s} {v:12.1f} samples/s  {r.get('peer', r.get('torch', ''))} amp={r.get('amp')}")
except Exception as e:
    print(f"{sys.argv[2]:28s} failed ({e}); see {sys.argv[2]}.log")
PY
}

rn_opts=(--plugin resnet50 --config mlperf -b "$rn_batch" --resnet50.image-size "$rn_size")
ours resnet50_benchhost_fp32 "${rn_opts[@]}" --precision fp32
ours resnet50_benchhost_tf32 "${rn_opts[@]}" --precision tf32
peer resnet50_pytorch_fp32 tools/peers/resnet50_peer.py bench --device "$dev" --channels-last --batch-size "$rn_batch" \
  --image-size "$rn_size" --iters "$iters" --warmup 3
peer resnet50_pytorch_amp_bf16 tools/peers/resnet50_peer.py bench --device "$dev" --channels-last --amp bf16 \
  --batch-size "$rn_batch" --image-size "$rn_size" --iters "$iters" --warmup 3
conf() {  # conf FILE KEY -> the value of "KEY = value" in a config file (the last one)
  sed -n "s/^$2[[:space:]]*=[[:space:]]*\([^#[:space:]]*\).*/\1/p" "$1" | tail -n 1
}
lm_peer() {  # name, peer script, config JSON: PyTorch fp32, tf32 and AMP bf16 on $dev
  local name=$1 script=$2 json=$3 mode
  for mode in fp32 tf32 amp_bf16; do
    local flags=()
    [ "$mode" = tf32 ] && flags=(--tf32)
    [ "$mode" = amp_bf16 ] && flags=(--amp bf16)
    peer "${name}_pytorch_$mode" "$script" bench --device "$dev" "${flags[@]}" --config "$json" --batch "$lm_batch" \
      --steps "$iters" --warmup 3 --threads "$(nproc)"
  done
}
gc=configs/gpt3/125m.conf
g_hidden=$(conf $gc gpt3.hidden) g_seq=$(conf $gc gpt3.seq-len) g_ffn=$(conf $gc gpt3.ffn) g_pos=$(conf $gc gpt3.max-positions)
[ "${g_ffn:-0}" = 0 ] && g_ffn=$((4 * g_hidden))  # the plugin's defaults for 0
[ "${g_pos:-0}" = 0 ] && g_pos=$g_seq
gpt_json=$(printf '{"layers":%s,"hidden":%s,"heads":%s,"ffn":%s,"vocab":%s,"max_positions":%s,"seq_len":%s}' \
  "$(conf $gc gpt3.layers)" "$g_hidden" "$(conf $gc gpt3.heads)" "$g_ffn" "$(conf $gc gpt3.vocab)" "$g_pos" "$g_seq")
ours gpt3_125m_benchhost_fp32 --plugin gpt3 --config 125m -b "$lm_batch" --precision fp32
ours gpt3_125m_benchhost_tf32 --plugin gpt3 --config 125m -b "$lm_batch" --precision tf32
lm_peer gpt3_125m tools/peers/gpt3_peer.py "$gpt_json"
bc=configs/bert/mlperf.conf
bert_json=$(printf '{"layers":%s,"hidden":%s,"heads":%s,"ffn":%s,"vocab":%s,"max_positions":%s,"seq_len":128,"max_predictions":%s}' \
  "$(conf $bc bert.layers)" "$(conf $bc bert.hidden)" "$(conf $bc bert.heads)" "$(conf $bc bert.ffn)" \
  "$(conf $bc bert.vocab)" "$(conf $bc bert.max-positions)" "$(conf $bc bert.max-predictions)")
ours bert_large_s128_benchhost_fp32 --plugin bert --config mlperf -b "$lm_batch" --bert.seq-len 128 --precision fp32
ours bert_large_s128_benchhost_tf32 --plugin bert --config mlperf -b "$lm_batch" --bert.seq-len 128 --precision tf32
lm_peer bert_large_s128 tools/peers/bert_peer.py "$bert_json"
dc=configs/dlrm_dcnv2/mlperf.conf
dl_batch=${DLRM_BATCH:-65536}
dl_tables=$(conf $dc dlrm_dcnv2.table-sizes | tr ',' '\n' | awk -v cap="${DLRM_ROWS:-4000000}" '{printf "%s%d", (NR > 1 ? "," : ""), ($1 < cap ? $1 : cap)}')
dl_hot=$(conf $dc dlrm_dcnv2.multi-hot-sizes)
ours dlrm_dcnv2_benchhost_fp32 --plugin dlrm_dcnv2 --config mlperf -b "$dl_batch" --dlrm_dcnv2.table-sizes "$dl_tables" --precision fp32
ours dlrm_dcnv2_benchhost_tf32 --plugin dlrm_dcnv2 --config mlperf -b "$dl_batch" --dlrm_dcnv2.table-sizes "$dl_tables" --precision tf32
for amp in none bf16; do
  peer "dlrm_dcnv2_pytorch_amp_$amp" tools/peers/dlrm_peer.py bench --device "$dev" --amp "$amp" --table-sizes "$dl_tables" \
    --multi-hot-sizes "$dl_hot" --batch "$dl_batch" --steps "$iters" --warmup 3 --threads "$(nproc)"
done
cat "$out/device.txt" "$out/summary.txt"

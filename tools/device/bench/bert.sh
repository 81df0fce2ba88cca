# bert on the GPU (sourced by tools/device/bench_gpu.sh): BERT-large at seq 128 (mlperf.conf with
# bert.seq-len 128), batch LM_BATCH (8), synthetic: ours fp32, tf32 and bf16 vs tools/peers/bert_peer.py
# (the same model and LAMB) fp32, tf32 and AMP bf16.
lm_batch=${LM_BATCH:-8}
bc=configs/bert/mlperf.conf
bert_json=$(printf '{"layers":%s,"hidden":%s,"heads":%s,"ffn":%s,"vocab":%s,"max_positions":%s,"seq_len":128,"max_predictions":%s}' \
  "$(conf $bc bert.layers)" "$(conf $bc bert.hidden)" "$(conf $bc bert.heads)" "$(conf $bc bert.ffn)" \
  "$(conf $bc bert.vocab)" "$(conf $bc bert.max-positions)" "$(conf $bc bert.max-predictions)")
ours bert_large_s128_benchhost_fp32 --plugin bert --config mlperf -b "$lm_batch" --bert.seq-len 128 --precision fp32
ours bert_large_s128_benchhost_tf32 --plugin bert --config mlperf -b "$lm_batch" --bert.seq-len 128 --precision tf32
ours bert_large_s128_benchhost_bf16 --plugin bert --config mlperf -b "$lm_batch" --bert.seq-len 128 --precision bf16
BENCHHOST_OP_SKIP=sdpa_forward/cuda.gemm,sdpa_backward/cuda.gemm \
  ours bert_large_s128_benchhost_tf32_fused_attention --plugin bert --config mlperf -b "$lm_batch" --bert.seq-len 128 --precision tf32
peer_modes bert_large_s128 tools/peers/bert_peer.py --config "$bert_json" --batch "$lm_batch"

# gpt3 on the GPU (sourced by tools/device/bench_gpu.sh): the 125m config (seq 2048), batch LM_BATCH
# (8), synthetic tokens: ours fp32, tf32 and bf16 (samples/s, MFU) vs tools/peers/gpt3_peer.py (the same
# model and AdamW) fp32, tf32 and AMP bf16.
lm_batch=${LM_BATCH:-8}
gc=configs/gpt3/125m.conf
g_hidden=$(conf $gc gpt3.hidden) g_seq=$(conf $gc gpt3.seq-len) g_ffn=$(conf $gc gpt3.ffn) g_pos=$(conf $gc gpt3.max-positions)
[ "${g_ffn:-0}" = 0 ] && g_ffn=$((4 * g_hidden))  # the plugin's defaults for 0
[ "${g_pos:-0}" = 0 ] && g_pos=$g_seq
gpt_json=$(printf '{"layers":%s,"hidden":%s,"heads":%s,"ffn":%s,"vocab":%s,"max_positions":%s,"seq_len":%s}' \
  "$(conf $gc gpt3.layers)" "$g_hidden" "$(conf $gc gpt3.heads)" "$g_ffn" "$(conf $gc gpt3.vocab)" "$g_pos" "$g_seq")
ours gpt3_125m_benchhost_fp32 --plugin gpt3 --config 125m -b "$lm_batch" --precision fp32
ours gpt3_125m_benchhost_tf32 --plugin gpt3 --config 125m -b "$lm_batch" --precision tf32
ours gpt3_125m_benchhost_bf16 --plugin gpt3 --config 125m -b "$lm_batch" --precision bf16
# The same bf16 step with attention in the fused SIMT kernels (what ran before the cuBLASLt path,
# Note [Attention through GEMMs]): the two implementations side by side in one run.
BENCHHOST_OP_SKIP=sdpa_forward/cuda.gemm,sdpa_backward/cuda.gemm \
  ours gpt3_125m_benchhost_bf16_fused_attention --plugin gpt3 --config 125m -b "$lm_batch" --precision bf16
peer_modes gpt3_125m tools/peers/gpt3_peer.py --config "$gpt_json" --batch "$lm_batch"

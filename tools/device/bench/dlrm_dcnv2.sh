# dlrm_dcnv2 on the GPU (sourced by tools/device/bench_gpu.sh): the MLPerf model shape
# (configs/dlrm_dcnv2/mlperf.conf) at batch DLRM_BATCH (65536) with every table capped at DLRM_ROWS
# rows (4M: 28.2M rows, 14.4 GB of weights, so weights, gradient buffers and Adagrad state fit one
# 80 GB GPU), synthetic: ours fp32, tf32 and bf16 vs tools/peers/dlrm_peer.py (the same model and
# Adagrad) fp32 and AMP bf16.
dc=configs/dlrm_dcnv2/mlperf.conf
dl_batch=${DLRM_BATCH:-65536}
dl_tables=$(conf $dc dlrm_dcnv2.table-sizes | tr ',' '\n' | awk -v cap="${DLRM_ROWS:-4000000}" '{printf "%s%d", (NR > 1 ? "," : ""), ($1 < cap ? $1 : cap)}')
dl_hot=$(conf $dc dlrm_dcnv2.multi-hot-sizes)
ours dlrm_dcnv2_benchhost_fp32 --plugin dlrm_dcnv2 --config mlperf -b "$dl_batch" --dlrm_dcnv2.table-sizes "$dl_tables" --precision fp32
ours dlrm_dcnv2_benchhost_tf32 --plugin dlrm_dcnv2 --config mlperf -b "$dl_batch" --dlrm_dcnv2.table-sizes "$dl_tables" --precision tf32
ours dlrm_dcnv2_benchhost_bf16 --plugin dlrm_dcnv2 --config mlperf -b "$dl_batch" --dlrm_dcnv2.table-sizes "$dl_tables" --precision bf16
for amp in none bf16; do
  peer "dlrm_dcnv2_pytorch_amp_$amp" tools/peers/dlrm_peer.py bench --device "$dev" --amp "$amp" --table-sizes "$dl_tables" \
    --multi-hot-sizes "$dl_hot" --batch "$dl_batch" --steps "$iters" --warmup 3 --threads "$(nproc)"
done

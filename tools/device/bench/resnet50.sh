# resnet50 on the GPU (sourced by tools/device/bench_gpu.sh): batch RN_BATCH (256) at RN_SIZE (224),
# synthetic data: ours fp32, tf32 and bf16 vs PyTorch channels-last eager fp32 (TF32 allowed, PyTorch's
# default for convolutions) and AMP bf16.
rn_batch=${RN_BATCH:-256}
rn_size=${RN_SIZE:-224}
rn_opts=(--plugin resnet50 --config mlperf -b "$rn_batch" --resnet50.image-size "$rn_size")
ours resnet50_benchhost_fp32 "${rn_opts[@]}" --precision fp32
ours resnet50_benchhost_tf32 "${rn_opts[@]}" --precision tf32
ours resnet50_benchhost_bf16 "${rn_opts[@]}" --precision bf16
peer resnet50_pytorch_fp32 tools/peers/resnet50_peer.py bench --device "$dev" --channels-last --batch-size "$rn_batch" \
  --image-size "$rn_size" --iters "$iters" --warmup 3
peer resnet50_pytorch_amp_bf16 tools/peers/resnet50_peer.py bench --device "$dev" --channels-last --amp bf16 \
  --batch-size "$rn_batch" --image-size "$rn_size" --iters "$iters" --warmup 3

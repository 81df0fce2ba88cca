# unet3d on the GPU (sourced by tools/device/bench_gpu.sh): the MLPerf 3D U-Net, batch U3_BATCH (2)
# of U3_PATCH^3 (128^3) synthetic patches: ours fp32, tf32 and bf16 vs PyTorch eager fp32 (NCDHW
# and channels_last_3d) and AMP bf16.
u3_batch=${U3_BATCH:-2}
u3_patch=${U3_PATCH:-128}
u3_opts=(--plugin unet3d --config mlperf -b "$u3_batch" --unet3d.patch-size "$u3_patch,$u3_patch,$u3_patch")
ours unet3d_benchhost_fp32 "${u3_opts[@]}" --precision fp32
ours unet3d_benchhost_tf32 "${u3_opts[@]}" --precision tf32
ours unet3d_benchhost_bf16 "${u3_opts[@]}" --precision bf16
peer unet3d_pytorch_fp32 tools/peers/unet3d_peer.py bench --device "$dev" --batch-size "$u3_batch" \
  --patch "$u3_patch" --iters "$iters" --warmup 3
peer unet3d_pytorch_fp32_channels_last tools/peers/unet3d_peer.py bench --device "$dev" --channels-last \
  --batch-size "$u3_batch" --patch "$u3_patch" --iters "$iters" --warmup 3
peer unet3d_pytorch_amp_bf16 tools/peers/unet3d_peer.py bench --device "$dev" --channels-last --amp bf16 \
  --batch-size "$u3_batch" --patch "$u3_patch" --iters "$iters" --warmup 3

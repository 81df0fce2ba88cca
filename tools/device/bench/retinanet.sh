# retinanet on the GPU (sourced by tools/device/bench_gpu.sh): the MLPerf RetinaNet, batch RT_BATCH
# (32) of 800x800 synthetic images: ours fp32, tf32 and bf16 (the ResNeXt backbone and FPN in the
# policy's type, the loss on the device) vs PyTorch eager fp32 (NCHW and channels_last) and AMP
# bf16 on the same model, batch and image size (tools/peers/retinanet_peer.py bench: torchvision's
# AnchorGenerator, Matcher and RetinaNetHead.compute_loss, then Adam).
rt_batch=${RT_BATCH:-32}
rt_opts=(--plugin retinanet --config mlperf -b "$rt_batch" --retinanet.pretrained-backbone false)
ours retinanet_benchhost_fp32 "${rt_opts[@]}" --precision fp32
ours retinanet_benchhost_tf32 "${rt_opts[@]}" --precision tf32
ours retinanet_benchhost_bf16 "${rt_opts[@]}" --precision bf16
peer retinanet_pytorch_fp32 tools/peers/retinanet_peer.py bench --device "$dev" --batch-size "$rt_batch" \
  --image-size 800 --iters "$iters" --warmup 3
peer retinanet_pytorch_fp32_channels_last tools/peers/retinanet_peer.py bench --device "$dev" --channels-last \
  --batch-size "$rt_batch" --image-size 800 --iters "$iters" --warmup 3
peer retinanet_pytorch_amp_bf16 tools/peers/retinanet_peer.py bench --device "$dev" --channels-last --amp bf16 \
  --batch-size "$rt_batch" --image-size 800 --iters "$iters" --warmup 3

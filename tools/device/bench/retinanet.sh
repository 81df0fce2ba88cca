# retinanet on the GPU (sourced by tools/device/bench_gpu.sh): the MLPerf RetinaNet, batch RN_BATCH
# (32) of 800x800 synthetic images: ours fp32, tf32 and bf16 (the ResNeXt backbone and FPN in the
# policy's type, the loss on the device). No PyTorch pair yet: tools/peers/retinanet_peer.py has no
# bench command (issue 22 leaves it open).
rt_batch=${RT_BATCH:-32}
rt_opts=(--plugin retinanet --config mlperf -b "$rt_batch" --retinanet.pretrained-backbone false)
ours retinanet_benchhost_fp32 "${rt_opts[@]}" --precision fp32
ours retinanet_benchhost_tf32 "${rt_opts[@]}" --precision tf32
ours retinanet_benchhost_bf16 "${rt_opts[@]}" --precision bf16

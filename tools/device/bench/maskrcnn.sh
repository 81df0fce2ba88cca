# maskrcnn on the GPU (sourced by tools/device/bench_gpu.sh): the MLPerf Mask R-CNN (R-50-FPN),
# batch MR_BATCH (8) of MR_SIZE^2 (800) synthetic images: ours fp32, tf32 and bf16 (the model on
# the device; targets, proposals and RoI sampling on the host) vs PyTorch eager fp32 and bf16
# autocast (NCHW, and channels-last) on torchvision's MaskRCNN around the same body and FPN
# (tools/peers/maskrcnn_peer.py bench).
mr_batch=${MR_BATCH:-8}
mr_size=${MR_SIZE:-800}
mr_opts=(--plugin maskrcnn --config mlperf -b "$mr_batch" --maskrcnn.min-size "$mr_size" --maskrcnn.max-size "$mr_size"
         --maskrcnn.pretrained-backbone false --maskrcnn.pixel-std 57 --maskrcnn.lr 0.0001)  # see tools/bench_maskrcnn.sh
ours maskrcnn_benchhost_fp32 "${mr_opts[@]}" --precision fp32
ours maskrcnn_benchhost_tf32 "${mr_opts[@]}" --precision tf32
ours maskrcnn_benchhost_bf16 "${mr_opts[@]}" --precision bf16
mr_peer_config='{"blocks":[3,4,6,3],"stem_channels":64,"fpn_channels":256,"num_classes":81,"num_anchors":3,
  "representation_size":1024,"mask_convs":4,"mask_channels":256,"box_resolution":7,"mask_resolution":14,"freeze_at":2,
  "anchor_scale":1.0,"rpn_pre_nms_top_n":2000,"rpn_post_nms_top_n":2000,"rpn_batch_size_per_image":256,
  "roi_batch_size_per_image":512}'
for mr_amp in none bf16; do
  peer "maskrcnn_pytorch_$([ $mr_amp = none ] && echo fp32 || echo $mr_amp)" tools/peers/maskrcnn_peer.py bench \
    --device "$dev" --batch-size "$mr_batch" --image-size "$mr_size" --iters "$iters" --warmup 3 --amp "$mr_amp" \
    --config "$mr_peer_config"
done
# PyTorch at its fastest beside our channels-last model (maskrcnn.layout nhwc, the default).
peer maskrcnn_pytorch_bf16_channels_last tools/peers/maskrcnn_peer.py bench --device "$dev" --batch-size "$mr_batch" \
  --image-size "$mr_size" --iters "$iters" --warmup 3 --amp bf16 --channels-last --config "$mr_peer_config"

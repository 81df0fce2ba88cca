# rnnt on the GPU (sourced by tools/device/bench_gpu.sh): the MLPerf RNN-T (49.0M parameters),
# batch RN_BATCH (16, the reference's micro-batch per GPU) of RN_FRAMES (300) spliced frames and
# RN_LABELS (60) labels, synthetic: ours fp32 and tf32 (cuDNN LSTMs, our transducer kernels) vs
# PyTorch eager fp32 (torch.nn.LSTM + torchaudio's rnnt_loss, Adam for the missing LAMB) on the
# same model and shapes (tools/peers/rnnt_peer.py bench_model_step).
rn_batch=${RN_BATCH:-16}
rn_frames=${RN_FRAMES:-300}
rn_labels=${RN_LABELS:-60}
rn_opts=(--plugin rnnt --config mlperf -b "$rn_batch" --rnnt.grad-accumulation 1 --rnnt.synthetic-frames "$rn_frames"
         --rnnt.synthetic-labels "$rn_labels")
ours rnnt_benchhost_fp32 "${rn_opts[@]}" --precision fp32
ours rnnt_benchhost_tf32 "${rn_opts[@]}" --precision tf32
ours rnnt_benchhost_bf16 "${rn_opts[@]}" --precision bf16
rn_meta=$(mktemp -d)
echo "{\"config\": {\"in_features\": 240, \"enc_n_hid\": 1024, \"enc_pre_rnn_layers\": 2, \"enc_post_rnn_layers\": 3, \"enc_stack_time_factor\": 2, \"pred_n_hid\": 512, \"pred_rnn_layers\": 2, \"joint_n_hid\": 512, \"n_classes\": 1024}, \"shape\": [$rn_frames, $rn_batch, $rn_labels]}" > "$rn_meta/meta.json"
peer rnnt_pytorch_fp32 tools/peers/rnnt_peer.py bench_model_step "$rn_meta" --device "$dev" --iters "$iters" --warmup 3

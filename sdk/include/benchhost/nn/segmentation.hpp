#pragma once
/// @file nn/segmentation.hpp  Instance normalisation over volumes and the DiceCE segmentation loss
/// (3D U-Net, MLPerf image_segmentation), forward and backward, as plain functions (llm.c style)
/// and, for the normalisation, as an nn::Layer module.
///
/// Layout. Activations and logits are 5-d, NCDHW or NDHWC (nn/volume.hpp); every function takes
/// the VolumeLayout so nothing is guessed. Label volumes are [N, D, H, W] whatever the layout.
/// Channel vectors (gamma, beta and their gradients) are f32 [C].
///
/// Semantics are PyTorch's and the MLPerf reference's exactly:
/// - InstanceNorm3d(C, affine=True, track_running_stats=False): for each (n, c) the mean and the
///   biased variance over D*H*W; y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c], in
///   training and evaluation alike (no running statistics). Optionally followed by ReLU in the
///   same pass (the model always runs conv -> instance norm -> ReLU).
/// - DiceCE (image_segmentation/pytorch/model/losses.py): p = softmax over channels, t = one-hot
///   of the labels; Dice_{n,c} = (2 sum_s p t + smooth) / (sum_s t + sum_s p + smooth) for
///   c = 1..C-1 (background excluded); dice_loss = mean_{n, c >= 1} (1 - Dice_{n,c});
///   ce = mean over all voxels of -log p[label]; loss = (dice_loss + ce) / 2.
///
/// Backend. The functions validate their arguments, allocate the outputs and dispatch through
/// the op registry (nn/registry.hpp) to ops named instance_norm3d_forward,
/// instance_norm3d_backward, dice_ce_loss_forward, dice_ce_loss_backward and argmax_channels.
/// CPU: oneTBB-parallel kernels (sdk/src/nn/cpu/instance_norm.cpp, dice_ce.cpp) over fixed chunks
/// of voxels, so results do not depend on the thread count, and plain-loop references; CUDA:
/// our kernels (sdk/src/nn/cuda/instance_norm.cu, dice_ce.cu) with per-(n, c) block reductions
/// in double, which have not yet been run on a GPU.
///
/// Precision: f32, f16 or bf16 activations and logits (outputs in the input's dtype; the
/// probabilities saved for the loss's backward are f32); statistics and reductions in f32 with
/// f64 accumulation across chunks. Half types go through f32 promotion (nn/registry.hpp).
/// Ownership: outputs are new tensors; inputs are never modified except the gradients that a
/// function says it accumulates into (`+=`).
/// Threading: the functions may be called from several threads; layers are not thread-safe.
/// Errors: a shape, dtype or layout mismatch throws InvalidArgument naming the function and the
/// shapes; a label outside [0, C) throws DataError naming the value and its voxel.

#include <cstdint>

#include "benchhost/nn/module.hpp"
#include "benchhost/nn/volume.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn {

// ============================================================================================
// Instance normalisation (per sample and channel, over D, H, W)
// ============================================================================================

struct InstanceNormSpec {
  double eps = 1e-5;
  /// Apply ReLU to the output in the same pass (like BatchNormSpec::fuse_relu); the backward
  /// then takes the gradient w.r.t. the post-ReLU output and masks it with the saved output.
  bool fuse_relu = false;
  VolumeLayout layout = VolumeLayout::ncdhw;
};

/// What the backward pass of an instance norm needs from its forward pass.
struct InstanceNormSaved {
  Tensor mean;    ///< f32 [N * C], index n * C + c
  Tensor rstd;    ///< f32 [N * C]: 1 / sqrt(biased variance + eps)
  Tensor output;  ///< the post-ReLU output when fuse_relu (its sign is the ReLU mask), else undefined
};

/// y = instance_norm(x) * gamma + beta (then ReLU when spec.fuse_relu). x is 5-d in spec.layout
/// with at least one voxel; gamma and beta are contiguous f32 [C] on x's device. Fills `saved`.
Tensor instance_norm3d_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const InstanceNormSpec& spec, InstanceNormSaved& saved);

/// dx (x's shape and dtype); accumulates dgamma += dL/dgamma and dbeta += dL/dbeta (f32 [C]).
/// `x` is the forward input, `saved` what the forward filled. With fuse_relu, dy is the gradient
/// w.r.t. the post-ReLU output.
Tensor instance_norm3d_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                const InstanceNormSaved& saved, const InstanceNormSpec& spec,
                                Tensor& dgamma, Tensor& dbeta);

/// Instance normalisation over volumes. Parameters "weight" (gamma, ones) and "bias" (beta,
/// zeros), both excluded from weight decay; no buffers (instance statistics in every mode).
/// Keeps its input's dtype under a precision policy (like BatchNorm2d); statistics are f32.
/// A forward pass in eval mode keeps nothing; backward() after it throws InvalidArgument.
class InstanceNorm3d : public Layer {
 public:
  InstanceNorm3d(std::int64_t channels, const InstanceNormSpec& spec);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  Parameter& gamma() { return *gamma_; }
  Parameter& beta() { return *beta_; }
  const InstanceNormSpec& spec() const { return spec_; }
  std::int64_t channels() const { return channels_; }

 private:
  std::int64_t channels_;
  InstanceNormSpec spec_;
  Parameter* gamma_ = nullptr;
  Parameter* beta_ = nullptr;
  Tensor x_;
  InstanceNormSaved saved_;
};

// ============================================================================================
// DiceCE loss
// ============================================================================================

struct DiceCeResult {
  float loss = 0, dice_loss = 0, ce_loss = 0;
  Tensor probs;       ///< f32 softmax, same shape/layout/device as the logits (for backward)
  Tensor dice_terms;  ///< f32 [N, C, 3]: sum p*t, sum t, sum p per (n, c), class 0 included
  DType logits_dtype = DType::f32;  ///< the forward's logits dtype (that of the gradient)
};

/// The DiceCE loss of `logits` (5-d in `layout`, C >= 2 channels) against `labels` ([N, D, H, W],
/// u8 or i32, values in [0, C), on the logits' device). Returns host floats and the saved
/// tensors. A label outside [0, C) throws DataError naming it.
DiceCeResult dice_ce_loss_forward(const Tensor& logits, const Tensor& labels, VolumeLayout layout,
                                  double smooth = 1e-6);

/// d(dloss * loss) / d logits, exact through the softmax: a tensor of the logits' shape, layout
/// and dtype (fwd.logits_dtype). `labels`, `layout` and `smooth` must be the forward's.
Tensor dice_ce_loss_backward(const DiceCeResult& fwd, const Tensor& labels, VolumeLayout layout,
                             double smooth = 1e-6, float dloss = 1.0f);

/// Voxel argmax over channels (the first maximum wins): u8 [N, D, H, W] from 5-d logits in
/// `layout` with at most 256 channels (for evaluation).
Tensor argmax_channels(const Tensor& logits, VolumeLayout layout);

}  // namespace benchhost::nn

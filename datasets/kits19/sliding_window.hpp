#pragma once
/// @file datasets/kits19/sliding_window.hpp  The 3D U-Net reference's sliding-window inference
/// over one whole case (MLPerf image_segmentation/pytorch runtime/inference.py), on the host.
///
/// Note [Reference sliding window]
/// For an image [1, D, H, W] (one channel), roi r per dimension, overlap o:
///   1. strides s = int(r * (1 - o)) per dimension.
///   2. Crop: b = dim % s; if b < s // 2 the image AND the label lose b voxels, b // 2 in front
///      and b - b // 2 at the back; otherwise nothing is cropped.
///   3. Pad the image only (the label stays cropped), constant pad_value (-2.2 in the
///      reference): b = (s - dim % s) % s, plus s more when dim + b < r; b // 2 in front.
///   4. Windows at 0, s, 2s, ... (n = (padded - r) // s + 1 per dimension, loops D, H, W
///      outermost to innermost); each model call's logits are multiplied by the weight patch and
///      added into a float32 accumulator, the weight patch into a float32 norm map.
///   5. Weight patch: g = scipy.signal.gaussian(r, 0.125 r), i.e. g_i = exp(-(i - (r-1)/2)^2 /
///      (2 (0.125 r)^2)); the 3-d outer product g_d g_h g_w, then the cube root, then divided by
///      its maximum, all in double precision, then cast to float32. The reference builds it from
///      roi[0] alone (a cube); a non-cubic roi uses each dimension's own g here, which equals the
///      reference whenever it is defined.
///   6. result / norm (float32), then the slice [front, front + original_dim) of the padded
///      volume per dimension, with original_dim the size BEFORE step 2's crop, clipped at the
///      padded end: exactly the reference's slicing. When step 2 cropped and step 3 then padded
///      (only for dim < r) this is longer than the cropped label; the reference then fails in
///      its Dice assert, here `label` and `logits` simply differ in shape (the caller checks).
/// Here the windows are handed to the model `batch` at a time (the reference calls it once per
/// window; a model without cross-sample coupling gives the same logits either way).

#include <array>
#include <cstdint>
#include <functional>

#include "benchhost/tensor.hpp"

namespace benchhost::kits19 {

struct SlidingWindowOptions {
  std::array<std::int64_t, 3> roi{128, 128, 128};  ///< window size per dimension (D, H, W)
  double overlap = 0.5;                            ///< strides = int(roi * (1 - overlap))
  float pad_value = -2.2f;                         ///< constant image padding
  std::int64_t batch = 1;                          ///< windows per model call (the last may be fewer)
  int num_classes = 3;                             ///< channels of the model's output
};

struct SlidingWindowResult {
  Tensor logits;   ///< f32 [C, D', H', W']: the gaussian-weighted average of the window logits
  Tensor label;    ///< u8 [D', H', W'] the label cropped as the reference crops it (step 2)
  Tensor classes;  ///< u8 [D', H', W'] argmax over C of logits (first maximum wins, like torch)
};

/// The model: f32 CPU patches [B, 1, rD, rH, rW] -> f32 CPU logits [B, C, rD, rH, rW] (NCDHW).
using PatchModel = std::function<Tensor(const Tensor& patches)>;

/// Sliding-window inference over one case (Note [Reference sliding window]). `image` f32 CPU
/// [1, D, H, W], `label` u8 CPU [1, D, H, W] (or [D, H, W]). Throws InvalidArgument for bad
/// shapes or options, or a model output of the wrong shape or dtype.
SlidingWindowResult sliding_window_inference(const Tensor& image, const Tensor& label, const SlidingWindowOptions& o,
                                             const PatchModel& model);

/// The weight patch of step 5, f32 [rD, rH, rW].
Tensor gaussian_weight_patch(const std::array<std::int64_t, 3>& roi);

}  // namespace benchhost::kits19

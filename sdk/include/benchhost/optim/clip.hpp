#pragma once
/// @file optim/clip.hpp  Global gradient norm and clipping by it.
///
/// The global norm is sqrt(sum over parameters of sum(grad^2)): float lanes within 256-element
/// blocks, blocks and chunks accumulated in double, in a deterministic order (independent of
/// the thread count). For a parameter with sparse_rows only those rows count (the others are not
/// meaningful; see nn::Parameter). Gradients may live on the CPU or on CUDA devices: per device
/// one multi-tensor op computes every parameter's sum of squares ("multi_tensor_sumsq", a
/// deterministic reduction), and the norm is read back with one small copy (the norm is a host
/// value, so this synchronises the device once per call); clipping scales in place with
/// "multi_tensor_scale_check".

#include <vector>

#include "benchhost/nn/module.hpp"

namespace benchhost::optim {

/// L2 norm of all gradients together.
float global_grad_norm(const std::vector<nn::Parameter*>& params);

/// Scale every gradient by max_norm / (norm + 1e-6) when norm > max_norm; returns the norm
/// before clipping. A non-finite norm (Inf/NaN gradients) is returned as is and the gradients
/// are left untouched, so the caller (or the loss scaler) can skip the step.
/// Throws InvalidArgument if max_norm <= 0.
float clip_grad_norm(const std::vector<nn::Parameter*>& params, float max_norm);

}  // namespace benchhost::optim

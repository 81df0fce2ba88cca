#pragma once
/// @file nn/volume.hpp  Layout of 5-d (volumetric) activations, shared by the 3-d convolutions
/// (nn/conv3d.hpp), instance normalisation and the segmentation losses (nn/segmentation.hpp).
///
/// A 5-d activation tensor is either NCDHW (shape [N, C, D, H, W], PyTorch's default) or NDHWC
/// (shape [N, D, H, W, C], channels last); the logical shape says which, and every function
/// takes the VolumeLayout so nothing is guessed. Weights never depend on the layout (PyTorch's
/// OIDHW for convolutions, [C] for channel vectors), so weights files are interchangeable
/// between layouts and with PyTorch.

#include <cstdint>
#include <string>

#include "benchhost/tensor.hpp"

namespace benchhost::nn {

enum class VolumeLayout { ncdhw, ndhwc };

/// "ncdhw" / "ndhwc".
const char* volume_layout_name(VolumeLayout layout);
/// "ncdhw" or "ndhwc" (also "channels_last"), case-insensitive; throws InvalidArgument otherwise.
VolumeLayout parse_volume_layout(const std::string& text);

/// Logical dimensions of a volumetric activation, independent of layout.
struct VolumeDims {
  std::int64_t n = 0, c = 0, d = 0, h = 0, w = 0;
  std::int64_t spatial() const { return d * h * w; }
};
/// Read N, C, D, H, W from a 5-d shape in `layout`; throws InvalidArgument (naming `what`) if the
/// shape is not 5-d.
VolumeDims volume_dims(const Shape& shape, VolumeLayout layout, const char* what);
/// The shape of an activation with these dimensions in `layout`.
Shape volume_shape(const VolumeDims& d, VolumeLayout layout);

}  // namespace benchhost::nn

// Layout helpers for 5-d activations (nn/volume.hpp).
#include "benchhost/nn/volume.hpp"

#include <algorithm>
#include <cctype>

#include "benchhost/error.hpp"

namespace benchhost::nn {

const char* volume_layout_name(VolumeLayout layout) {
  return layout == VolumeLayout::ncdhw ? "ncdhw" : "ndhwc";
}

VolumeLayout parse_volume_layout(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "ncdhw") return VolumeLayout::ncdhw;
  if (t == "ndhwc" || t == "channels_last") return VolumeLayout::ndhwc;
  BH_THROW(InvalidArgument, "unknown volume layout '{}' (expected ncdhw or ndhwc)", text);
}

VolumeDims volume_dims(const Shape& shape, VolumeLayout layout, const char* what) {
  BH_CHECK_AS(InvalidArgument, shape.size() == 5, "{}: expected a 5-d {} tensor, got shape {}",
              what, volume_layout_name(layout), shape_str(shape));
  if (layout == VolumeLayout::ncdhw) return {shape[0], shape[1], shape[2], shape[3], shape[4]};
  return {shape[0], shape[4], shape[1], shape[2], shape[3]};
}

Shape volume_shape(const VolumeDims& d, VolumeLayout layout) {
  if (layout == VolumeLayout::ncdhw) return {d.n, d.c, d.d, d.h, d.w};
  return {d.n, d.d, d.h, d.w, d.c};
}

}  // namespace benchhost::nn

#pragma once
/// @file datasets/kits19/components.hpp  3-d connected components of a u8 volume and their
/// bounding boxes, as the 3D U-Net reference's foreground crop computes them.
///
/// Note [Reference component semantics]
/// RandBalancedCrop.rand_foreg_cropd (MLPerf image_segmentation/pytorch/data_loading/
/// pytorch_loader.py) does
///     foreg_slices = scipy.ndimage.find_objects(scipy.ndimage.measurements.label(label == cl)[0])
///     slice_volumes = [np.prod([s.stop - s.start for s in sl]) for sl in foreg_slices]
///     slice_idx = np.argsort(slice_volumes)[-2:]
/// so, exactly:
///   - the labelling is scipy.ndimage.label with its default structure, the cross: two voxels
///     are connected when they differ by one in exactly one coordinate (6-connectivity in 3-d;
///     NOT skimage.measure.label's full 26-connectivity);
///   - scipy numbers the components 1..n in raster (C) order of their first voxel, and
///     find_objects gives their bounding boxes in that order;
///   - components are ranked by **bounding-box volume**, not voxel count, and the two with the
///     largest boxes are kept, in ascending order of box volume. np.argsort's default sort is
///     stable for the handful of components a kidney mask has (numpy sorts arrays of up to 16
///     elements by insertion sort), so among equal volumes the later-numbered component ranks
///     higher; we use that stable order for any count.

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace benchhost::kits19 {

/// An axis-aligned box [lo, hi) per dimension (D, H, W), like one scipy find_objects entry.
struct Box {
  std::array<std::int64_t, 3> lo{0, 0, 0};
  std::array<std::int64_t, 3> hi{0, 0, 0};
  /// (hi - lo) multiplied over the 3 dimensions: the volume the reference ranks by.
  std::int64_t volume() const { return (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]); }
  bool operator==(const Box&) const = default;
};

/// The components of (mask == value).
struct Components {
  /// Per voxel (C order, the mask's shape): 0 outside, else the component number 1..count(),
  /// numbered in raster order of each component's first voxel (scipy.ndimage.label's numbering).
  std::vector<std::int32_t> labels;
  /// boxes[k] / sizes[k]: bounding box and voxel count of component k + 1.
  std::vector<Box> boxes;
  std::vector<std::int64_t> sizes;
  std::int64_t count() const { return static_cast<std::int64_t>(boxes.size()); }
};

/// Label the 6-connected components of the voxels of `mask` (shape {D, H, W}, C order) equal to
/// `value`. Throws InvalidArgument when mask.size() != D*H*W.
Components label_components(std::span<const std::uint8_t> mask, const std::array<std::int64_t, 3>& shape,
                            std::uint8_t value);

/// Only the bounding boxes of the components of (mask == value), in component-number order
/// (scipy find_objects), without keeping the per-voxel labels beyond the call.
std::vector<Box> component_boxes(std::span<const std::uint8_t> mask, const std::array<std::int64_t, 3>& shape,
                                 std::uint8_t value);

/// The reference's choice among find_objects boxes: the (up to) `k` boxes of largest volume, in
/// ascending order of volume, ties ranked by component number (Note [Reference component
/// semantics]): exactly `[boxes[i] for i in np.argsort(volumes, kind="stable")[-k:]]`.
std::vector<Box> largest_boxes(const std::vector<Box>& boxes, int k = 2);

}  // namespace benchhost::kits19

#pragma once
/// @file plugins/maskrcnn/data.hpp  The maskrcnn workload's data: COCO 2017 (datasets/coco/
/// coco2017.hpp) through the SDK's parallel loader with the reference transforms, batches padded
/// to a multiple of 32, the evaluation split with its annotations, and synthetic batches.
///
/// Note [Mask R-CNN transforms]
/// maskrcnn_benchmark's data/transforms (build_transforms) in order:
///   - Resize(min_size, max_size): the shorter side to min_size unless the longer side would then
///     exceed max_size, in which case size = round(max_size * short / long); the shorter output
///     side is `size`, the longer int(size * long / short) (truncated). Boxes and polygon
///     coordinates scale by (out_w / w, out_h / h). Pixels: bilinear (the SDK's resize; PIL's
///     bilinear differs slightly where it shrinks).
///   - RandomHorizontalFlip(0.5) in training, with the legacy +1 convention: x1' = W - x2 - 1,
///     x2' = W - x1 - 1, polygon x' = W - x - 1.
///   - ToTensor, then BGR x 255 minus PIXEL_MEAN [102.9801, 115.9465, 122.7717], divided by
///     PIXEL_STD (the reference: 1; a from-scratch mini without batch statistics divides by the
///     pixels' spread instead, maskrcnn.pixel-std).
/// The collate (to_image_list with SIZE_DIVISIBILITY 32) pads each image with zeros at its
/// bottom and right to the batch's largest height and width rounded up to a multiple of 32.
/// Aspect-ratio grouping (batches of all-landscape or all-portrait images) is not done: the
/// batch pads to the larger of both sides, which costs compute but not correctness.

#include <cstdint>
#include <memory>
#include <vector>

#include "benchhost/data/pipeline.hpp"
#include "benchhost/nn/detection.hpp"
#include "benchhost/workload.hpp"
#include "coco2017.hpp"

namespace benchhost::maskrcnn {

/// The output size (height, width) of Resize(min_size, max_size) for an h x w image.
std::pair<int, int> resized_size(int h, int w, int min_size, int max_size);

/// Note [Mask R-CNN transforms] over a COCO 2017 split. get() gives:
///   "image" f32 [3, oh, ow] (BGR x 255 - mean), "image_size" i64 [2] (oh, ow),
///   "boxes" f32 [G, 4], "labels" i64 [G], "polygons" f64 [C], "polygon_sizes" i64 [P],
///   "polygon_object" i64 [P] (transformed like the image), "image_id" i64 [], "orig_size" i64 [2].
class MaskRcnnDataset final : public data::Dataset {
 public:
  MaskRcnnDataset(std::shared_ptr<const coco::Coco2017Dataset> inner, bool train, int min_size, int max_size,
                  float pixel_std = 1.0f);
  std::int64_t size() const override { return inner_->size(); }
  data::Sample get(const data::SampleContext& ctx) const override;
  using data::Dataset::get;
  std::string source(std::int64_t index) const override { return inner_->source(index); }
  const coco::Coco2017Dataset& inner() const { return *inner_; }

 private:
  std::shared_ptr<const coco::Coco2017Dataset> inner_;
  bool train_;
  int min_size_, max_size_;
  float pixel_std_;
};

/// The collate of Note [Mask R-CNN transforms]: "image" f32 [B, 3, Hp, Wp] zero-padded,
/// "image_size" i64 [B, 2], "boxes" f32 [B, G, 4] / "labels" i64 [B, G] / "num_boxes" i64 [B]
/// (coco::detection_collate's padding), "polygons" f64 [C], "polygon_sizes" i64 [P],
/// "polygon_object" i64 [P] (object index within its image), "polygon_image" i64 [P],
/// "image_id" i64 [B], "orig_size" i64 [B, 2].
data::TensorDict maskrcnn_collate(const std::vector<data::Sample>& samples);

/// The training targets of one image of a batch, on the CPU.
struct ImageTargets {
  Tensor boxes;                       ///< f32 [G, 4] xyxy (legacy convention), resized frame
  Tensor labels;                      ///< i64 [G], 1..K-1
  std::vector<nn::Polygons> polygons; ///< per object
  std::int64_t height = 0, width = 0; ///< the resized image before padding
  /// The image's sampling streams (its dataset index): an image draws the same anchors and RoIs
  /// whatever its batch, position or rank (Note [Mask R-CNN losses]).
  std::uint64_t sample_key = 0;
};

/// The targets of every image of a collated batch (DataError on inconsistent fields).
std::vector<ImageTargets> batch_targets(const data::Batch& batch);

struct DataSources {
  /// The evaluation split (null for synthetic data): its annotations are the ground truth.
  std::shared_ptr<const coco::Coco2017Dataset> eval_split;
  std::unique_ptr<data::BatchSource> train;
  std::unique_ptr<data::BatchSource> eval;  ///< this rank's share, in order; null for synthetic
  std::int64_t samples_per_epoch = 0;       ///< training images of one epoch over all ranks
  std::int64_t eval_samples = 0;            ///< evaluation images over all ranks
  /// Synthetic data only: the targets of every image (four boxes, each its own rectangle polygon).
  std::vector<ImageTargets> synthetic_targets;
};

/// The aspect-ratio group of every sample of a split (DATALOADER.ASPECT_RATIO_GROUPING,
/// maskrcnn_benchmark's _quantize(height / width, [1])): 0 where the image is wider than tall, 1
/// otherwise; for the sampler's grouped batches (data/sampler.hpp, Note [Grouped batches]).
std::vector<std::int32_t> aspect_ratio_groups(const coco::Coco2017Split& split);

/// Real data (maskrcnn.data-dir, generated first when maskrcnn.generate) or synthetic batches.
DataSources build_data_sources(const RunContext& ctx, std::int64_t batch_size);

}  // namespace benchhost::maskrcnn

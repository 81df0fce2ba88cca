#pragma once
/// @file plugins/retinanet/data.hpp  The retinanet workload's data: the OpenImages-MLPerf export
/// (datasets/coco/openimages.hpp) through the SDK's parallel loader with the reference
/// transforms, the evaluation split this rank scores with its ground truth for COCO mAP, and
/// synthetic batches for throughput.

#include <cstdint>
#include <memory>

#include "benchhost/data/pipeline.hpp"
#include "benchhost/workload.hpp"
#include "coco_json.hpp"

namespace benchhost::retinanet {

struct DataSources {
  /// The evaluation split's annotations (null for synthetic data): declared first, the loaders
  /// read the datasets that hold it.
  std::shared_ptr<const coco::CocoFile> eval_coco;
  /// {"image" [B,3,S,S] or [B,S,S,3], "boxes" f32 [B,G,4], "labels" i64 [B,G], "num_boxes" i64 [B], ...}
  std::unique_ptr<data::BatchSource> train;
  std::unique_ptr<data::BatchSource> eval;   ///< this rank's share, in order; null for synthetic
  std::int64_t samples_per_epoch = 0;        ///< training images of one epoch over all ranks
  std::int64_t eval_samples = 0;             ///< evaluation images over all ranks
  std::int64_t num_classes = 0;              ///< K of the data (category ids 0..K-1)
  /// Synthetic data only: the boxes of every image [B, G, 4] (xyxy in the resized frame), four
  /// well-formed boxes per image (uniform random numbers would make boxes with x2 < x1).
  Tensor synthetic_boxes;
};

/// Real data (retinanet.data-dir, generated first when retinanet.generate) or synthetic batches.
DataSources build_data_sources(const RunContext& ctx, std::int64_t batch_size, bool channels_last);

}  // namespace benchhost::retinanet

#pragma once
/// @file datasets/coco/openimages.hpp  The OpenImages-MLPerf detection dataset (MLPerf RetinaNet,
/// key "ssd") with the reference's training and evaluation transforms.
///
/// Layout (what MLPerf's download_openimages_mlperf.sh writes through FiftyOne's COCO exporter):
///   <root>/<split>/data/<id>.jpg
///   <root>/<split>/labels/openimages-mlperf.json     COCO instances (coco_json.hpp)
/// with split = "train" or "validation". Category ids are 0-based and used directly as class
/// indices (direct_category_index). Every image named in the JSON is a sample, in file order,
/// also one without annotations (the reference keeps them).
///
/// A sample (DetectionTransform, both splits):
///   "image"     f32 [3, S, S] (or [S, S, 3] with Layout::hwc), normalised, resized to S x S
///   "boxes"     f32 [G, 4]  x1, y1, x2, y2 in the pixels of the resized image
///   "labels"    i64 [G]     category ids
///   "image_id"  i64 []      the COCO image id
///   "orig_size" i64 [2]     height, width of the file (to scale detections back)
/// G varies per image: batch with detection_collate (below), not the default stacking collate.
///
/// Note [RetinaNet reference transforms]
/// The reference (mlcommons/training single_stage_detector, torchvision-derived) does, per image:
///   1. ConvertCocoPolysToMask(filter_iscrowd=False): boxes xywh -> xyxy (x2 = x + w), clamped to
///      [0, W] x [0, H]; boxes with x2 <= x1 or y2 <= y1 dropped; crowd (IsGroupOf) boxes KEPT;
///   2. training only: RandomHorizontalFlip(0.5): image mirrored, x1' = W - x2, x2' = W - x1;
///   3. ToTensor: [0, 1];
///   4. in the model's transform: Normalize(mean (0.485, 0.456, 0.406), std (0.229, 0.224,
///      0.225)), then F.interpolate to S x S bilinear, align_corners=False, no antialias; boxes
///      times (S / W, S / H) (float32 ratios, as torchvision's resize_boxes).
/// Here steps 2-4 on the image are one pass (data::resized_crop_normalize over the whole image):
/// the bilinear taps of the u8 pixels, then the per-channel affine. Normalisation is affine per
/// channel and bilinear weights sum to 1, so this equals normalise-then-resize up to float
/// rounding (~1e-6); mirroring by reversed taps equals resizing the mirrored image exactly.
/// Randomness: one draw of ctx.rng().uniform() < flip_probability (Note [Per-sample randomness]).
///
/// Errors are DataErrors naming the file: a missing split, data or labels directory; an image in
/// the JSON without its file; a file that does not decode; a file whose size differs from the
/// JSON's height/width.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "benchhost/data/image.hpp"
#include "coco_json.hpp"

namespace benchhost::coco {

/// One split of the layout, its JSON parsed.
struct OpenImagesSplit {
  std::string root;
  std::string split;        ///< "train" | "validation"
  std::string data_dir;     ///< <root>/<split>/data
  std::string labels_path;  ///< <root>/<split>/labels/openimages-mlperf.json
  std::shared_ptr<const CocoFile> coco;
  std::int64_t num_classes = 0;  ///< K: category ids are 0..K-1
};

/// Read <root>/<split>/labels/openimages-mlperf.json after checking the directories exist.
/// Does not open the images (get() does). DataError naming the missing path or the JSON problem.
OpenImagesSplit open_openimages_split(const std::string& root, const std::string& split);

/// Note [RetinaNet reference transforms].
struct DetectionTransform {
  bool train = true;              ///< random horizontal flip; false: never flip
  float flip_probability = 0.5f;
  int out_height = 800;
  int out_width = 800;
  data::Normalization norm;       ///< ImageNet mean/std, the reference's
  data::Layout layout = data::Layout::chw;
  bool check_image_size = true;   ///< the file's size must equal the JSON's height/width
};

/// Ground truth of one image in image pixels: boxes x1, y1, x2, y2 (4 floats each) and labels.
struct DetectionTarget {
  std::vector<float> boxes;
  std::vector<std::int64_t> labels;
  std::vector<std::uint8_t> iscrowd;
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
};

/// Step 1 of the Note: the annotations of images[image_pos] as xyxy, clamped to the image's
/// JSON size, degenerate boxes dropped, crowd boxes kept.
DetectionTarget coco_target(const CocoFile& file, std::size_t image_pos);
/// Mirror xyxy boxes in an image `width` wide: x1' = width - x2, x2' = width - x1.
void hflip_boxes(DetectionTarget& target, float width);
/// Scale xyxy boxes from an in_h x in_w image to out_h x out_w (x by out_w / in_w, y by
/// out_h / in_h, the ratios in float as torchvision computes them).
void resize_boxes(DetectionTarget& target, int in_h, int in_w, int out_h, int out_w);

/// The dataset over one split (thread-safe: get() only reads shared state).
class OpenImagesDataset final : public data::Dataset {
 public:
  OpenImagesDataset(OpenImagesSplit split, DetectionTransform transform);
  std::int64_t size() const override { return static_cast<std::int64_t>(split_.coco->images.size()); }
  data::Sample get(const data::SampleContext& ctx) const override;
  using data::Dataset::get;
  /// The image file of sample `index`.
  std::string source(std::int64_t index) const override;
  const OpenImagesSplit& split() const { return split_; }
  const DetectionTransform& transform() const { return transform_; }

 private:
  OpenImagesSplit split_;
  DetectionTransform transform_;
};

/// The training dataset (flip on) and the evaluation one (no flip) of `root`, output size S x S.
std::shared_ptr<OpenImagesDataset> make_openimages_train(const std::string& root, int image_size = 800);
std::shared_ptr<OpenImagesDataset> make_openimages_eval(const std::string& root, int image_size = 800);

/// Note [Padded detection batches]
/// A batch of B detection samples with G_b boxes each, G = max(max_b G_b, 1):
///   "image"     stacked as usual [B, 3, S, S]
///   "boxes"     f32 [B, G, 4]  rows >= G_b are zeros
///   "labels"    i64 [B, G]     rows >= G_b are -1
///   "num_boxes" i64 [B]        G_b
///   "image_id"  i64 [B], "orig_size" i64 [B, 2]
/// G is at least 1 so that no tensor has a zero-size dimension a device copy would have to
/// special-case; num_boxes, not the padding values, is what says which rows are real.
/// Other fields of the samples are stacked like data::collate does. Matches data::CollateFn.
data::TensorDict detection_collate(const std::vector<data::Sample>& samples);

}  // namespace benchhost::coco

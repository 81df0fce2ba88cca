#pragma once
/// @file datasets/coco/coco2017.hpp  COCO 2017 instance segmentation as it lies on disk (MLPerf
/// Mask R-CNN, maskrcnn_benchmark's COCODataset): images, boxes, contiguous labels, polygon masks
/// and the crowd regions.
///
/// Layout (object_detection/download_dataset.sh; paths_catalog's coco_2017_{train,val}):
///   <root>/train2017/*.jpg, <root>/val2017/*.jpg
///   <root>/annotations/instances_train2017.json, instances_val2017.json   (coco_json.hpp)
/// with split = "train2017" or "val2017" (also "train" / "val").
///
/// Note [COCO 2017 validation]
/// open_coco2017_split() parses the JSON (coco_json.hpp's checks) and then checks what an instance
/// segmentation run relies on. Each failure is a DataError naming the annotations file, the image
/// id and the annotation id (and the image file where one is involved):
///   - an image whose file is not in the image directory (Coco2017Options::check_files);
///   - an annotation of an unknown category or image;
///   - a box with a negative or zero width or height, or a non-finite number;
///   - iscrowd 0 without polygons (no segmentation, or an RLE), or a polygon with an odd number of
///     coordinates, fewer than 6, or a non-finite coordinate;
///   - iscrowd 1 whose RLE "size" differs from the image's [height, width], or that has no mask.
/// Problems coco_json.hpp finds first (it names the JSON path, e.g. `$.annotations[12].bbox[2]`)
/// are re-thrown with the annotation's id and image id put in front.
///
/// Note [Mask R-CNN targets]
/// What maskrcnn_benchmark's COCODataset (data/datasets/coco.py) gives the model, per image:
///   - images in image-id order (it sorts the ids); with remove_images_without_annotations (the
///     reference's training setting) only images with at least one annotation (crowd included,
///     as COCO's getAnnIds(iscrowd=None) returns them) of which at least one box has w > 1 and
///     h > 1 (has_valid_annotation);
///   - crowd annotations removed from the training targets; here they are kept apart (crowd_*),
///     for the evaluation, which ignores detections on them;
///   - boxes xywh -> xyxy with the legacy +1 convention (BoxList "TO_REMOVE"): x2 = x + max(w - 1,
///     0), y2 = y + max(h - 1, 0); clipped to [0, W - 1] x [0, H - 1]; boxes with x2 <= x1 or
///     y2 <= y1 after clipping removed together with their masks and labels (clip_to_image with
///     remove_empty);
///   - labels: categories sorted by id mapped to 1..K (contiguous_category_index), 0 the
///     background;
///   - masks: each object's polygons as written (SegmentationMask in "poly" mode), which
///     nn::polygon_mask_targets crops and rasterises per proposal.
/// Samples are loaded by index through const methods only: one dataset serves many loader threads.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "benchhost/nn/detection.hpp"
#include "coco_json.hpp"

namespace benchhost::coco {

struct Coco2017Options {
  /// Keep only images with a valid annotation (Note [Mask R-CNN targets]); the reference does for
  /// training, never for evaluation.
  bool remove_images_without_annotations = false;
  bool check_files = true;       ///< at open: every image in the JSON has its file
  bool check_image_size = true;  ///< at load: the file's size equals the JSON's height/width
};

/// One split of the layout, its JSON parsed and validated (Note [COCO 2017 validation]).
struct Coco2017Split {
  std::string root;
  std::string split;             ///< "train2017" | "val2017"
  std::string image_dir;         ///< <root>/<split>
  std::string annotations_path;  ///< <root>/annotations/instances_<split>.json
  std::shared_ptr<const CocoFile> coco;
  std::map<std::int64_t, std::int64_t> label_of_category;  ///< category id -> 1..K
  std::vector<std::int64_t> category_of_label;             ///< [0] = 0 (background), [k] = id of label k
  std::int64_t num_classes = 0;                            ///< K, without the background
  std::vector<std::size_t> samples;  ///< positions in coco->images, by image id (filtered: see options)
};

/// Read and validate a split. DataError naming the missing directory or file, or the problem
/// (Note [COCO 2017 validation]); InvalidArgument for an unknown split name.
Coco2017Split open_coco2017_split(const std::string& root, const std::string& split, const Coco2017Options& options = {});

/// The checks of Note [COCO 2017 validation] on a parsed file (image files looked up in
/// `image_dir` when check_files). Throws the first problem found as a DataError.
void validate_coco2017(const CocoFile& file, const std::string& image_dir, bool check_files);

/// The targets of one image (Note [Mask R-CNN targets]), in image pixels.
struct InstanceTarget {
  std::vector<float> boxes;               ///< 4 per object: x1, y1, x2, y2
  std::vector<std::int64_t> labels;       ///< 1..K
  std::vector<nn::Polygons> masks;        ///< per object, its polygons
  std::vector<std::int64_t> annotation_ids;
  // Crowd regions (not training targets; the evaluation's ignore regions).
  std::vector<float> crowd_boxes;         ///< 4 per region, converted like `boxes`, never dropped
  std::vector<std::int64_t> crowd_labels;
  std::vector<nn::Rle> crowd_masks;       ///< RLEs (polygons of a crowd annotation rasterised)
  std::vector<std::int64_t> crowd_annotation_ids;
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
};

/// Note [Mask R-CNN targets] for images[image_pos] of the split's file.
InstanceTarget coco2017_target(const Coco2017Split& split, std::size_t image_pos);

/// One loaded image with its targets.
struct InstanceSample {
  Tensor image;               ///< u8 [H, W, 3] RGB, as decoded (the SDK's JPEG decoder)
  std::int64_t image_id = 0;
  std::string file;           ///< the image file
  InstanceTarget target;
};

/// The dataset over one split. get() gives tensors (for data loaders):
///   "image"           u8 [H, W, 3] RGB
///   "boxes"           f32 [G, 4] xyxy, "labels" i64 [G]
///   "polygons"        f64 [C] every polygon's coordinates, object after object (the file's
///                     values: Note [Polygon coordinates are doubles])
///   "polygon_sizes"   i64 [P] coordinates of each polygon
///   "polygon_object"  i64 [P] the object (0..G-1) each polygon belongs to
///   "image_id"        i64 [], "orig_size" i64 [2] (height, width)
/// (polygons_of() turns the three polygon fields back into per-object polygons). load() gives
/// everything, crowd regions included. Both only read shared state: safe from many threads.
class Coco2017Dataset final : public data::Dataset {
 public:
  Coco2017Dataset(Coco2017Split split, Coco2017Options options = {});
  std::int64_t size() const override { return static_cast<std::int64_t>(split_.samples.size()); }
  data::Sample get(const data::SampleContext& ctx) const override;
  using data::Dataset::get;
  InstanceSample load(std::int64_t index) const;
  /// The image file of sample `index`.
  std::string source(std::int64_t index) const override;
  const Coco2017Split& split() const { return split_; }

 private:
  Coco2017Split split_;
  Coco2017Options options_;
};

/// The per-object polygons of a sample from Coco2017Dataset::get() (DataError when the polygon
/// fields are inconsistent).
std::vector<nn::Polygons> polygons_of(const data::Sample& sample);

/// The training split (images without valid annotations removed) and the evaluation one.
std::shared_ptr<Coco2017Dataset> make_coco2017_train(const std::string& root);
std::shared_ptr<Coco2017Dataset> make_coco2017_eval(const std::string& root);

}  // namespace benchhost::coco

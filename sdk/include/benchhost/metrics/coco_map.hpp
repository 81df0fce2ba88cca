#pragma once
/// @file metrics/coco_map.hpp  COCO detection mAP with the semantics of pycocotools 2.0
/// `COCOeval` (RetinaNet's `ssd` metric; Mask R-CNN's box metric), merged across ranks.
///
/// Inputs, per image (identified by an int64 id):
///   ground truth  {category_id, box x,y,w,h, area (the annotation's `area` field, never
///                  recomputed), iscrowd}; add_ground_truth() registers the image, also with no
///                  objects (an image that only has false positives).
///   detections    {category_id, box x,y,w,h, score}; add_detections() may be called several
///                  times per image (results append, in call order).
/// The evaluated images are the ones given ground truth (COCOeval's imgIds = the GT images); the
/// categories are those with at least one ground-truth object (COCOeval's categories without GT
/// are -1 and skipped in every mean, so the two agree; detections of such a category count
/// nowhere).
///
/// What is computed (COCOeval.evaluate / accumulate / summarize, iouType 'bbox'):
///   IoU thresholds linspace(.5, .95, 10), recall thresholds linspace(0, 1, 101), maxDets
///   {1, 10, 100} per image PER CATEGORY, area ranges all [0, 1e10], small [0, 32^2], medium
///   [32^2, 96^2], large [96^2, 1e10] (closed intervals) on the GT `area`; a GT is ignored when
///   crowd or outside the range. Per (image, category): detections stably sorted by descending
///   score and cut to 100, GT non-ignored first; each detection, best score first, takes the
///   still-free GT (a crowd GT is never used up) with the highest IoU >= the threshold, preferring
///   non-ignored GT (on equal IoU the later GT in that order wins, as in evaluateImg's `<` test);
///   a detection on an ignored GT is ignored, an unmatched one whose own area (w*h) is outside
///   the range is ignored. Crowd IoU = intersection / area(detection). Per category, area and
///   maxDet the detections of all images (image ids ascending, each image's first maxDet) are
///   stably sorted by descending score; precision is made monotone from the right and sampled at
///   the recall thresholds (searchsorted left, missing points 0). stats() are summarize()'s 12
///   numbers; stats[0] (AP@[.5:.95], all areas, maxDets 100) is the MLPerf eval_accuracy.
///
/// Note [COCO map across ranks]
/// Each rank adds the images it evaluated; compute() is a collective that makes every rank hold
/// every image (sizes by allgather, then each rank's serialised images padded to the largest,
/// one u8 allgather) and evaluates the union, so the result is the one of a single rank holding
/// everything, bit for bit on every rank. Before sending, each (image, category) keeps only its
/// best 100 detections (all that any statistic reads). An image given ground truth on several
/// ranks (a DistributedSampler pads its last batch with repeats) is taken once, from the lowest
/// rank, with that rank's detections, as torchvision's COCO evaluator keeps the first of
/// repeated image ids. A rank that holds detections of an image it gave no ground truth makes
/// compute() throw InvalidArgument on every rank (the check runs on the gathered data, so no
/// rank is left waiting; COCO.loadRes likewise refuses results for unknown images): add an
/// image's ground truth and detections on the rank that evaluated it.
/// Gathering raw detections rather than per-image match results costs every rank the whole
/// evaluation; the RetinaNet validation set (24,781 images x 300 detections, 7.4 M) is about
/// 200 MB gathered and, parallel over categories, 20 s of compute() on 2 busy cores (measured
/// with the generator of CocoMap.ScalesToManyDetections; 0.66 GB peak memory).
///
/// Note [IoU per image and category]
/// Matching reads one D x G IoU matrix per (image, category) from a single function chosen by
/// the IoU type; matching, accumulation and summary are shared unchanged.
///   bbox  box IoU (maskApi.c bbIou); a detection's own area is its box's w * h.
///   segm  COCOeval iouType 'segm' (Mask R-CNN's mask mAP): the IoU of the `mask` RLEs by
///         nn::rle_iou (crowd: intersection over the detection's mask area); a detection's own
///         area is its mask's pixel count (loadRes sets it so); the GT's `area` is still the
///         annotation's field, as COCOeval reads it for both types. Every mask of an image must
///         have that image's size (COCO's annToRLE / the pasted masks do); a crowd GT carries
///         its RLE, a polygon GT the rle_from_polygons of its parts. Boxes are not read.
/// A mask is only checked (non-empty size, counts adding up to height * width) by an evaluator
/// of type segm; a bbox evaluator ignores it, so one set of structs can feed both evaluators.
///
/// Note [BBOX and SEGM]
/// Mask R-CNN reports its MLPerf eval_accuracy as a dictionary, {"BBOX": b, "SEGM": s}, the
/// stats[0] of a bbox and a segm evaluation of the same images (CocoBoxMaskAccuracy). The run
/// reaches its target when both reach theirs (0.377 and 0.339 in the closed division).
///
/// Threading: an evaluator is used by one thread at a time; compute() runs its work on oneTBB.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "benchhost/nn/detection.hpp"  // nn::Rle

namespace benchhost {

class Communicator;  // comm/communicator.hpp

namespace metrics {

/// One ground-truth object (a COCO annotation).
struct CocoGroundTruth {
  std::int64_t category_id = 0;
  std::array<float, 4> box{};  ///< x, y, width, height
  float area = 0;              ///< the annotation's `area` (for boxes usually w*h; not recomputed)
  bool iscrowd = false;
  nn::Rle mask;                ///< the object's mask at image size (segm only; Note [IoU per image and category])
};

/// One detection (a COCO result entry).
struct CocoDetection {
  std::int64_t category_id = 0;
  std::array<float, 4> box{};  ///< x, y, width, height
  float score = 0;
  nn::Rle mask;  ///< the pasted mask at image size (segm only)
};

/// What the IoU of a detection and a GT is computed on (Note [IoU per image and category]).
enum class CocoIouType : std::uint8_t { bbox, segm };

/// Indices into CocoResult::stats, in COCOeval.summarize() order.
enum CocoStat : int {
  kCocoAP = 0,     ///< AP @[.50:.95], area all, maxDets 100 (the MLPerf metric)
  kCocoAP50,       ///< AP @.50
  kCocoAP75,       ///< AP @.75
  kCocoAPSmall,    ///< AP, area small
  kCocoAPMedium,   ///< AP, area medium
  kCocoAPLarge,    ///< AP, area large
  kCocoAR1,        ///< AR, maxDets 1
  kCocoAR10,       ///< AR, maxDets 10
  kCocoAR100,      ///< AR, maxDets 100
  kCocoARSmall,    ///< AR, area small
  kCocoARMedium,   ///< AR, area medium
  kCocoARLarge,    ///< AR, area large
  kCocoStatCount
};

/// The result of CocoEvaluator::compute().
struct CocoResult {
  /// summarize()'s 12 numbers; -1 where no category has a non-ignored GT in the area range.
  std::array<double, kCocoStatCount> stats{};
  double map() const { return stats[kCocoAP]; }
  /// Categories with at least one non-crowd GT (ascending) and their AP@[.5:.95] (area all,
  /// maxDets 100): the per-category terms of stats[0].
  std::vector<std::int64_t> category_ids;
  std::vector<double> category_ap;
  /// Over all ranks, after repeated images are dropped (Note [COCO map across ranks]);
  /// detections counts those evaluated (at most 100 per image and category).
  std::int64_t images = 0, ground_truths = 0, detections = 0;
};

/// Mask R-CNN's eval_accuracy (Note [BBOX and SEGM]).
struct CocoBoxMaskAccuracy {
  double bbox = 0;  ///< stats[0] of the bbox evaluation
  double segm = 0;  ///< stats[0] of the segm evaluation
  /// MLPerf's value, `{"BBOX": b, "SEGM": s}` (each number in its shortest round-trip form).
  std::string to_json() const;
  /// Both targets reached (>=).
  bool reached(double bbox_target, double segm_target) const { return bbox >= bbox_target && segm >= segm_target; }
};

/// Accumulates ground truth and detections per image; compute() evaluates them.
class CocoEvaluator {
 public:
  explicit CocoEvaluator(CocoIouType iou_type = CocoIouType::bbox);
  CocoIouType iou_type() const { return iou_type_; }

  /// Registers image `image_id` with its ground truth (possibly none). Throws InvalidArgument
  /// when this image already has ground truth on this rank, or for a non-finite box or area, a
  /// negative width, height or area; for segm also for a mask with no size or counts that do
  /// not add up to height * width.
  void add_ground_truth(std::int64_t image_id, std::span<const CocoGroundTruth> objects);
  /// Appends detections of image `image_id` (before or after its ground truth). Throws
  /// InvalidArgument for a non-finite box or score, or a negative width or height; for segm
  /// also for a mask as add_ground_truth refuses it. Masks of different sizes within one image
  /// make compute() throw InvalidArgument (from nn::rle_iou).
  void add_detections(std::int64_t image_id, std::span<const CocoDetection> detections);

  /// Evaluates every image added on this rank, or (comm with more than one rank) on all ranks:
  /// a collective every rank calls, every rank gets the same result (Note [COCO map across
  /// ranks]). Throws InvalidArgument when a rank has detections of an image it gave no ground
  /// truth.
  CocoResult compute(Communicator* comm = nullptr) const;

  /// Images registered (with ground truth) and objects added on this rank.
  std::int64_t images() const { return gt_images_; }
  std::int64_t ground_truths() const { return gt_count_; }
  std::int64_t detections() const { return dt_count_; }
  void reset();

  /// One image as added on this rank (public for the implementation's helpers).
  struct Image {
    std::int64_t id = 0;
    bool has_ground_truth = false;
    std::vector<CocoGroundTruth> gts;
    std::vector<CocoDetection> dts;
  };

 private:
  Image& image(std::int64_t image_id);

  CocoIouType iou_type_;
  std::vector<Image> images_;                           ///< in order of first mention
  std::unordered_map<std::int64_t, std::size_t> index_;  ///< image id -> images_ position
  std::int64_t gt_images_ = 0, gt_count_ = 0, dt_count_ = 0;
};

}  // namespace metrics
}  // namespace benchhost

#pragma once
/// @file datasets/coco/synthetic_coco2017.hpp  Small instance-segmentation data in the COCO 2017
/// layout (coco2017.hpp): real JPEG files and instances_{train,val}2017.json with polygon
/// segmentations and crowd RLEs, for tests and the mini Mask R-CNN.
///
/// Note [Planted polygons]
/// The images are drawn as in Note [Planted shapes] (synthetic.hpp), with the same drawing code
/// (planted.hpp: size, background, colours, painting order, occlusion), except for what an
/// instance mask needs:
///   - every shape is ONE simple polygon, so that its COCO segmentation is exact: circle (a
///     regular 32-gon inscribed in the shape's square), square, triangle (apex top centre), star
///     (five points, 10 vertices, inner radius 0.45 of the outer), cross (a 12-gon, arms a third
///     of the side wide) and diamond. OpenImages' ring is not used: its outline is two polygons,
///     and COCO's polygon list is a union of parts (annToRLE merges them), so a hole cannot be
///     written as polygons; the star takes its place as the non-convex shape.
///   - a shape is painted as the SDK rasterises its polygon (nn::rle_from_polygon, pycocotools'
///     rule), from the coordinates as written to the JSON (rounded to 1/100 pixel), so
///     the annotation is the painted object itself: rasterising the segmentation gives exactly
///     the object's pixels (its full extent, also where a later object hides it, as the box of
///     Note [Planted shapes]).
///   - bbox = the tight box [x, y, w, h] of those pixels; area = their count (COCO's area is the
///     mask's pixel area).
///   - category ids are deliberately non-contiguous and not in shape order: circle 3, square 7,
///     triangle 1, star 12, cross 18, diamond 25 (the first `classes` shapes are used); the
///     categories are listed by id with supercategory "shape", as COCO lists its 80.
///   - with probability 1/7 an image's last object is a crowd group: 3-5 small shapes of one
///     class clustered in a region, ONE annotation with iscrowd 1 whose segmentation is the RLE
///     of the group's painted pixels (compressed counts string, Note [COCO compressed RLE]),
///     bbox its tight box and area its pixel count. Both splits have them (training drops them,
///     evaluation ignores detections on them).
/// Image k of a split has id k + 1 and file name "%012d.jpg" of its id, as COCO names files;
/// annotation ids start at 1 in each split. Each image is a pure function of (seed, split, k);
/// JPEGs come from the SDK's encoder at quality 90, so the same options give the same bytes.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/tensor.hpp"
#include "coco_json.hpp"

namespace benchhost {
class Communicator;  // comm/communicator.hpp
}

namespace benchhost::coco {

struct Coco2017SyntheticOptions {
  int train_images = 256;
  int val_images = 64;
  int min_size = 96;   ///< pixels, per side
  int max_size = 160;
  int classes = 4;     ///< 1..6 shapes
  int max_objects = 6; ///< per image, >= 1
  std::uint64_t seed = 1;
};

struct Coco2017SyntheticReport {
  int train_images = 0, val_images = 0;
  std::int64_t train_annotations = 0, val_annotations = 0;  ///< written (0 when not generated)
  std::int64_t train_crowd = 0, val_crowd = 0;              ///< of which iscrowd 1
  bool generated = false;  ///< false: the directory was already there
};

/// The categories of `classes` shapes, by id (Note [Planted polygons]).
std::vector<CocoCategory> coco2017_synthetic_categories(int classes);

/// Write <root>/{train2017,val2017}/*.jpg, <root>/annotations/instances_{train,val}2017.json and
/// <root>/coco2017_synthetic.txt (the options). Atomic: written in a temporary directory beside
/// `root`, then renamed. InvalidArgument for bad options or when `root` exists; DataError when
/// the files cannot be written.
Coco2017SyntheticReport generate_coco2017_synthetic(const std::string& root, const Coco2017SyntheticOptions& opts);

/// Generate `root` unless it exists (nothing is rewritten then). With a communicator of more than
/// one rank, rank 0 generates while the others wait (every rank must call). A directory written
/// with other options is a DataError (remove it to regenerate); one without coco2017_synthetic.txt
/// (real COCO) is left alone.
Coco2017SyntheticReport ensure_coco2017_synthetic(const std::string& root, const Coco2017SyntheticOptions& opts,
                                                  Communicator* comm = nullptr);

/// Image `index` of split 0 (train2017) or 1 (val2017) as the generator draws it, before JPEG
/// encoding: what the files and annotations are made from (for tests).
struct SyntheticInstanceImage {
  Tensor pixels;  ///< u8 [H, W, 3] RGB
  struct Object {
    std::int64_t category_id = 0;
    bool iscrowd = false;
    std::vector<std::vector<double>> polygons;  ///< iscrowd 0: one polygon as written; crowd: its members'
    Tensor mask;                    ///< u8 [H, W]: the object's painted pixels (full extent)
    std::array<float, 4> bbox{};    ///< x, y, w, h: the tight box of `mask`
    std::int64_t area = 0;          ///< pixels in `mask`
    std::array<std::uint8_t, 3> colour{};
  };
  std::vector<Object> objects;  ///< in painting order
};
SyntheticInstanceImage render_coco2017_synthetic(const Coco2017SyntheticOptions& opts, int split, int index);

/// The text of coco2017_synthetic.txt for these options.
std::string coco2017_synthetic_options_text(const Coco2017SyntheticOptions& opts);

}  // namespace benchhost::coco

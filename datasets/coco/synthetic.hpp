#pragma once
/// @file datasets/coco/synthetic.hpp  Small detection data in the OpenImages-MLPerf layout
/// (openimages.hpp): real JPEG files and the COCO JSON, for tests and the mini RetinaNet.
///
/// Note [Planted shapes]
/// Image k of a split is a pure function of (seed, split, k):
///   - size: height and width each uniform in [min_size, max_size];
///   - background: a random base colour, a linear colour gradient in a random direction (up to
///     +-50 per channel across the image) and i.i.d. pixel noise (+-20), so a detector cannot find
///     objects by "anything not flat";
///   - 1..max_objects objects, painted in order (later ones occlude earlier ones; overlap allowed):
///     a shape (the class) of side s = U(0.1, 0.6) * min(height, width) pixels, at a random
///     position inside the image, in a random colour at least 80 (max over channels) away from
///     the background's base colour; with probability 0.15 an image's last object is instead a
///     group of 3-5 small shapes of one class (side 6-10% of min(height, width)) clustered in a
///     region, annotated as ONE box with iscrowd 1 (OpenImages' IsGroupOf);
///   - annotations: the exact tight box of each object's own painted pixels (its full extent, also
///     where a later object hides it), bbox [x, y, w, h] in pixels, area = w * h.
/// Shapes, in the order classes are taken: circle, square, triangle, ring, cross, diamond (1 <=
/// classes <= 6); the categories are the chosen names in alphabetical order with ids 0..K-1 and
/// supercategory null, as FiftyOne's export writes them. Image ids start at 1 in each split,
/// file names are 16 hex digits (like OpenImages ids), annotation ids start at 1.
/// JPEGs come from the SDK's encoder (data::encode_jpeg, quality 90): same options, same bytes.
/// The drawing code (size, background, colours, painting) is planted.hpp's, shared with the COCO
/// 2017 generator (Note [Planted polygons], synthetic_coco2017.hpp).

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/tensor.hpp"

namespace benchhost {
class Communicator;  // comm/communicator.hpp
}

namespace benchhost::coco {

struct OpenImagesSyntheticOptions {
  int train_images = 512;
  int val_images = 128;
  int min_size = 96;   ///< pixels, per side
  int max_size = 160;
  int classes = 4;     ///< 1..6 shapes
  int max_objects = 6; ///< per image, >= 1
  std::uint64_t seed = 1;
};

struct OpenImagesSyntheticReport {
  int train_images = 0, val_images = 0;
  std::int64_t train_boxes = 0, val_boxes = 0;  ///< annotations written (0 when not generated)
  bool generated = false;  ///< false: the directory was already there
};

/// The class names of `classes` shapes in category-id order (alphabetical).
std::vector<std::string> synthetic_class_names(int classes);

/// Write <root>/{train,validation}/data/*.jpg, <root>/{train,validation}/labels/
/// openimages-mlperf.json and <root>/openimages_synthetic.txt (the options). Atomic: written in
/// a temporary directory beside `root`, then renamed to `root`. InvalidArgument for bad options
/// or when `root` exists; DataError when the files cannot be written.
OpenImagesSyntheticReport generate_openimages_synthetic(const std::string& root, const OpenImagesSyntheticOptions& opts);

/// Generate `root` unless it exists. With a communicator of more than one rank, rank 0 generates
/// while the others wait at a barrier (every rank must call). A directory written by the
/// generator with other options is a DataError (remove it to regenerate); one without
/// openimages_synthetic.txt (real data) is left alone.
OpenImagesSyntheticReport ensure_openimages_synthetic(const std::string& root, const OpenImagesSyntheticOptions& opts,
                                                      Communicator* comm = nullptr);

/// Image `index` of split 0 (train) or 1 (validation) as the generator draws it, before JPEG
/// encoding: what the files and annotations are made from (for tests).
struct SyntheticImage {
  Tensor pixels;  ///< u8 [H, W, 3] RGB
  struct Object {
    std::int64_t category_id = 0;
    std::array<float, 4> bbox{};  ///< x, y, w, h: the tight box of the painted pixels
    bool iscrowd = false;
    std::array<std::uint8_t, 3> colour{};
  };
  std::vector<Object> objects;  ///< in painting order
};
SyntheticImage render_openimages_synthetic(const OpenImagesSyntheticOptions& opts, int split, int index);

/// The text of openimages_synthetic.txt for these options.
std::string openimages_synthetic_options_text(const OpenImagesSyntheticOptions& opts);

}  // namespace benchhost::coco

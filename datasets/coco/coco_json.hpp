#pragma once
/// @file datasets/coco/coco_json.hpp  The COCO instances JSON format (images, categories,
/// annotations with boxes and segmentations), parsed, validated and indexed.
///
/// What is read (every other key is ignored; OpenImages' extra attributes such as IsOccluded
/// included):
///   images[]      {id, file_name, height, width}
///   categories[]  {id, name, supercategory (string or null; optional)}
///   annotations[] {id, image_id, category_id, bbox [x, y, w, h], area (optional: w*h),
///                  iscrowd (0/1 or bool; optional: 0),
///                  segmentation (optional): polygons [[x1, y1, x2, y2, ...], ...]
///                                or RLE {"counts": [runs...] | "compressed string", "size": [h, w]}}
/// Integers may be written as integral floats (480.0), as some exporters do.
///
/// Validation (each failure is a DataError "<file>: <JSON path>: <problem>", the path written like
/// `$.annotations[3].bbox[2]`): ids unique per section; annotations name an existing image and
/// category; every number finite; bbox w, h >= 0; image height, width >= 1; each polygon has an
/// even number >= 6 of coordinates; RLE runs are >= 0 and sum to h * w.
///
/// Note [Polygon coordinates are doubles]
/// pycocotools rasterises a polygon from the JSON's numbers as doubles, first snapping each vertex
/// to a fifth-of-a-pixel grid with (int)(5 x + 0.5). COCO writes coordinates with two decimals, and
/// at x = k.1, k.3, k.5, k.7, k.9 that expression is an exact tie: the double (56.1 is
/// 56.1000000000000014) lands on 281, the float (56.0999985) on 280, moving the vertex by a fifth
/// of a pixel and the mask by a few boundary pixels. So polygons are kept as doubles, and whatever
/// rasterises ground truth the way COCOeval does (annToRLE) sees the file's values. Mask R-CNN's
/// training targets are made from float32 polygons in the reference; nn::polygon_mask_targets
/// does that rounding itself.
///
/// Note [Hostile COCO files]
/// The reader is fuzzed (tests/fuzz/fuzz_coco.cpp). Before nlohmann_json sees the bytes, a scan
/// bounds the nesting depth (CocoReadOptions::max_depth) so neither the parser nor the value's
/// destructor can recurse without limit, and the file size is bounded (max_bytes); after that,
/// every allocation is proportional to the input: RLE masks are kept as run lengths and never
/// expanded, so a "size": [1e9, 1e9] costs nothing (its runs must still sum to h * w, checked in
/// 64 bits). Malformed JSON is a DataError naming the file and the byte offset.
///
/// Note [COCO compressed RLE]
/// pycocotools' string form of run lengths (maskApi.c rleToString / rleFrString), written here
/// from its definition: each run is a signed integer written in groups of 5 bits, least
/// significant first, one character per group ('0' + group, group | 0x20 when more groups
/// follow); bit 0x10 of the last group is the sign (the value is sign-extended from there).
/// Runs from the third on (index > 2) are stored as the difference from the run two places
/// before (run[i] - run[i-2]), which keeps alternating background/foreground runs small.
/// Decoding here refuses what the C code would silently mis-handle: a character outside
/// '0'..'o', more than 7 groups for one value (beyond 32 bits), and runs outside [0, 2^32).

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace benchhost::coco {

struct CocoImage {
  std::int64_t id = 0;
  std::string file_name;
  std::int64_t height = 0;
  std::int64_t width = 0;
  friend bool operator==(const CocoImage&, const CocoImage&) = default;
};

struct CocoCategory {
  std::int64_t id = 0;
  std::string name;
  std::optional<std::string> supercategory;  ///< null or absent: nullopt
  friend bool operator==(const CocoCategory&, const CocoCategory&) = default;
};

/// A run-length mask, column-major (COCO's order): runs alternate 0s and 1s, starting with 0s.
struct Rle {
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::vector<std::uint32_t> counts;
  bool compressed = false;  ///< the file held the compressed string (written back the same way)
  friend bool operator==(const Rle&, const Rle&) = default;
};

struct Segmentation {
  enum class Kind { none, polygons, rle };
  Kind kind = Kind::none;
  /// kind == polygons: each x1, y1, x2, y2, ... as the file has them (doubles, as pycocotools
  /// reads them: Note [Polygon coordinates are doubles]).
  std::vector<std::vector<double>> polygons;
  Rle rle;                                   ///< kind == rle
  friend bool operator==(const Segmentation&, const Segmentation&) = default;
};

struct CocoAnnotation {
  std::int64_t id = 0;
  std::int64_t image_id = 0;
  std::int64_t category_id = 0;
  std::array<float, 4> bbox{};  ///< x, y, w, h in pixels
  double area = 0;
  bool iscrowd = false;
  Segmentation segmentation;
  friend bool operator==(const CocoAnnotation&, const CocoAnnotation&) = default;
};

struct CocoReadOptions {
  std::size_t max_bytes = std::size_t{1} << 32;  ///< larger files are refused (4 GiB)
  int max_depth = 32;                            ///< deepest [ / { nesting accepted
};

/// A parsed instances file with its index. Read-only after construction: safe to share between
/// threads.
class CocoFile {
 public:
  std::string source;  ///< the file name used in error messages
  std::vector<CocoImage> images;          ///< in file order
  std::vector<CocoCategory> categories;   ///< in file order
  std::vector<CocoAnnotation> annotations;  ///< in file order

  /// Position in `images` of the image with this id; nullopt when there is none.
  std::optional<std::size_t> image_position(std::int64_t image_id) const;
  /// Position in `categories`; nullopt when there is none.
  std::optional<std::size_t> category_position(std::int64_t category_id) const;
  /// Positions in `annotations` of the annotations of images[image_pos], in file order.
  const std::vector<std::size_t>& annotations_of(std::size_t image_pos) const;

  /// Build the id maps and the per-image index, validating ids and references (DataError naming
  /// `source` and the JSON path). Called by the readers; call it again after editing the vectors.
  void build_index();

 private:
  std::unordered_map<std::int64_t, std::size_t> image_pos_, category_pos_;
  std::vector<std::vector<std::size_t>> per_image_;
};

/// Parse an instances file held in memory; `name` is used in error messages.
CocoFile parse_coco_json(std::span<const std::uint8_t> bytes, const std::string& name,
                         const CocoReadOptions& options = {});
CocoFile parse_coco_json(const std::string& text, const std::string& name, const CocoReadOptions& options = {});
/// Read and parse a file (DataError naming it when it cannot be read).
CocoFile read_coco_json(const std::string& path, const CocoReadOptions& options = {});

/// The file as COCO JSON (keys in the usual order; RLE in the form it was read; boxes in the
/// shortest decimal form that reads back as the same float, 23.07 rather than 23.069999694824219,
/// polygon coordinates likewise as doubles; compact unless indent >= 0).
/// parse_coco_json(to_coco_json(f)) gives back f.
std::string to_coco_json(const CocoFile& file, int indent = -1);
/// Write to_coco_json(file) to `path` (through a temporary file and a rename).
void write_coco_json(const CocoFile& file, const std::string& path);

/// Note [COCO compressed RLE]. `name` is used in error messages.
std::vector<std::uint32_t> rle_from_string(const std::string& s, const std::string& name);
std::string rle_to_string(std::span<const std::uint32_t> counts);

/// Mask R-CNN's convention: categories sorted by id get contiguous indices first, first+1, ...
/// (first = 1 keeps 0 for the background). Maps category id -> index.
std::map<std::int64_t, std::int64_t> contiguous_category_index(const CocoFile& file, std::int64_t first = 1);
/// The OpenImages-MLPerf convention: the category id is the class index, so the ids must be
/// exactly 0..K-1 (DataError naming the file otherwise). Maps id -> id; K = its size.
std::map<std::int64_t, std::int64_t> direct_category_index(const CocoFile& file);

}  // namespace benchhost::coco

#pragma once
// Helpers shared by the COCO tests: a temporary directory, a hand-written instances file with
// every field kind, and file bytes.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace benchhost::coco::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / fmt::format("bh_coco_{}_{}", tag, ::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

/// Every field kind: categories with non-contiguous ids and a null supercategory, polygons, an
/// uncompressed RLE, two compressed RLEs (strings built by hand from the format's definition,
/// Note [COCO compressed RLE]), an annotation without segmentation, iscrowd as bool, integral
/// floats for integers, extra keys.
///   "352L":  3 -> '3'; 5 -> '5'; 2 -> '2'; run 3 is 1, stored as 1 - 5 = -4: low 5 bits 11100 = 28
///            with the sign bit set and nothing left -> one char 48 + 28 = 'L'.
///   "T3`04": 100 = 00011 00100 -> groups 4 (+0x20: more) = 36 -> 'T', then 3 -> '3';
///            16 = 10000: the group has bit 0x10 set but the value is positive, so a second
///            group follows: 16 | 0x20 = 48 -> '`', then 0 -> '0'; run 2 (no delta yet) 4 -> '4'.
inline const char* kAllKinds = R"({
  "info": {"description": "hand-written"}, "licenses": [],
  "categories": [
    {"id": 1, "name": "person", "supercategory": "human"},
    {"id": 5, "name": "airplane", "supercategory": null},
    {"id": 3, "name": "car"}
  ],
  "images": [
    {"id": 10, "file_name": "a.jpg", "height": 480, "width": 640, "license": null, "coco_url": null},
    {"id": 7, "file_name": "b.jpg", "height": 100.0, "width": 200}
  ],
  "annotations": [
    {"id": 1, "image_id": 10, "category_id": 1, "bbox": [10.5, 20.25, 30, 40], "area": 1200.5, "iscrowd": 0,
     "segmentation": [[10.5, 20.25, 40.5, 20.25, 40.5, 60.25], [1, 2, 3, 4, 5, 6, 7, 8]], "IsOccluded": 1},
    {"id": 2, "image_id": 10, "category_id": 5, "bbox": [0, 0, 4, 2], "area": 8, "iscrowd": 1,
     "segmentation": {"counts": [1, 2, 3, 2, 4], "size": [3, 4]}},
    {"id": 3, "image_id": 7, "category_id": 3, "bbox": [1, 1, 1, 1], "area": 1, "iscrowd": true,
     "segmentation": {"counts": "352L", "size": [1, 11]}},
    {"id": 4, "image_id": 7, "category_id": 3, "bbox": [2, 2, 0, 5], "iscrowd": 1,
     "segmentation": {"counts": "T3`04", "size": [10, 12]}},
    {"id": 5, "image_id": 10, "category_id": 5, "bbox": [5, 6, 7, 8]}
  ]
})";

}  // namespace benchhost::coco::test

// COCO instances JSON (datasets/coco/coco_json.cpp): parse_coco_json with its validation and
// index, the category conventions, the detection targets, and the invariant that what was read
// survives the writer (to_coco_json -> parse gives the same file); the COCO 2017 reader's checks
// and Mask R-CNN targets (coco2017.hpp: crowd polygons rasterised, Note [Hostile polygons]); the
// compressed RLE decoder on the raw input.
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "coco2017.hpp"
#include "coco_json.hpp"
#include "fuzz.hpp"
#include "openimages.hpp"
#include "synthetic.hpp"
#include "synthetic_coco2017.hpp"

namespace bh_fuzz {
std::vector<Bytes> seeds() {
  using namespace benchhost::coco;
  std::vector<Bytes> out;
  // Every field kind, written by the project's writer.
  CocoFile f;
  f.categories = {{1, "person", "human"}, {5, "airplane", std::nullopt}, {3, "car", std::nullopt}};
  f.images = {{10, "a.jpg", 48, 64}, {7, "b.jpg", 10, 12}};
  CocoAnnotation poly{1, 10, 1, {10.5f, 20.25f, 30, 40}, 1200.5, false, {}};
  poly.segmentation.kind = Segmentation::Kind::polygons;
  poly.segmentation.polygons = {{10.5f, 20.25f, 40.5f, 20.25f, 40.5f, 60.25f}, {1, 2, 3, 4, 5, 6, 7, 8}};
  CocoAnnotation rle{2, 10, 5, {0, 0, 4, 2}, 8, true, {}};
  rle.segmentation.kind = Segmentation::Kind::rle;
  rle.segmentation.rle = {3, 4, {1, 2, 3, 2, 4}, false};
  CocoAnnotation packed{3, 7, 3, {1, 1, 11, 9}, 99, true, {}};
  packed.segmentation.kind = Segmentation::Kind::rle;
  packed.segmentation.rle = {10, 12, {100, 16, 4}, true};
  CocoAnnotation plain{4, 7, 5, {-2, 3, 0, 4}, 0, false, {}};
  f.annotations = {poly, rle, packed, plain};
  f.build_index();
  out.push_back(to_bytes(to_coco_json(f)));
  out.push_back(to_bytes(to_coco_json(f, 1)));
  // A generated OpenImages-MLPerf split.
  OpenImagesSyntheticOptions o;
  o.train_images = 3;
  o.val_images = 1;
  o.min_size = 16;
  o.max_size = 24;
  const std::filesystem::path root = scratch_dir() / "seed_openimages";
  generate_openimages_synthetic(root.string(), o);
  out.push_back(read_bytes(root / "train" / "labels" / "openimages-mlperf.json"));
  // A generated COCO 2017 split: polygons, crowd RLEs, non-contiguous category ids.
  Coco2017SyntheticOptions c;
  c.train_images = 8;
  c.val_images = 1;
  c.min_size = 16;
  c.max_size = 24;
  const std::filesystem::path coco_root = scratch_dir() / "seed_coco2017";
  generate_coco2017_synthetic(coco_root.string(), c);
  out.push_back(read_bytes(coco_root / "annotations" / "instances_train2017.json"));
  return out;
}
}  // namespace bh_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace benchhost::coco;
  const std::span<const std::uint8_t> in(data, size);
  bh_fuzz::refused_or_read([&] {
    const CocoFile f = parse_coco_json(in, "fuzz.json");
    contiguous_category_index(f, 1);
    bh_fuzz::refused_or_read([&] { direct_category_index(f); });
    for (std::size_t i = 0; i < f.images.size(); ++i) {
      const DetectionTarget t = coco_target(f, i);
      for (std::size_t k = 0; k < t.boxes.size(); k += 4)  // clamped and non-degenerate
        if (!(t.boxes[k] >= 0 && t.boxes[k + 2] > t.boxes[k] && t.boxes[k + 2] <= static_cast<float>(f.images[i].width) &&
              t.boxes[k + 1] >= 0 && t.boxes[k + 3] > t.boxes[k + 1] &&
              t.boxes[k + 3] <= static_cast<float>(f.images[i].height)))
          std::abort();
    }
    bh_fuzz::refused_or_read([&] {  // the COCO 2017 reader's checks, then every image's targets
      validate_coco2017(f, "", /*check_files=*/false);
      Coco2017Split split;
      split.coco = std::make_shared<CocoFile>(f);
      split.label_of_category = contiguous_category_index(f, 1);
      const auto classes = static_cast<std::int64_t>(split.label_of_category.size());
      for (std::size_t i = 0; i < f.images.size(); ++i) {
        const InstanceTarget t = coco2017_target(split, i);
        const auto w = static_cast<float>(f.images[i].width), h = static_cast<float>(f.images[i].height);
        if (t.masks.size() != t.labels.size() || t.boxes.size() != 4 * t.labels.size()) std::abort();
        for (std::size_t k = 0; k < t.boxes.size(); k += 4)  // legacy +1 boxes, clipped to the last pixel
          if (!(t.boxes[k] >= 0 && t.boxes[k + 2] >= t.boxes[k] && t.boxes[k + 2] <= w - 1 && t.boxes[k + 1] >= 0 &&
                t.boxes[k + 3] >= t.boxes[k + 1] && t.boxes[k + 3] <= h - 1))
            std::abort();
        for (const std::int64_t label : t.labels)
          if (label < 1 || label > classes) std::abort();
        for (const auto& m : t.crowd_masks)
          if (m.height != f.images[i].height || m.width != f.images[i].width) std::abort();
      }
    });
    const CocoFile g = parse_coco_json(to_coco_json(f), "fuzz-again.json");
    if (g.images != f.images || g.categories != f.categories || g.annotations != f.annotations) std::abort();
  });
  bh_fuzz::refused_or_read([&] {
    const std::string s(reinterpret_cast<const char*>(data), std::min<std::size_t>(size, 4096));
    const auto counts = rle_from_string(s, "fuzz.rle");
    if (rle_from_string(rle_to_string(counts), "fuzz.rle") != counts) std::abort();
  });
  return 0;
}

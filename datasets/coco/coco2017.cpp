// COCO 2017 instance segmentation on disk (coco2017.hpp).
#include "coco2017.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "benchhost/data/file.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/error.hpp"

namespace benchhost::coco {
namespace fs = std::filesystem;
namespace {

// A coco_json DataError about $.annotations[i] again, with the annotation's id and image id in
// front (Note [COCO 2017 validation]); other errors unchanged.
[[noreturn]] void rethrow_with_ids(const DataError& e, const std::string& path) {
  static const std::regex where(R"(\$\.annotations\[(\d+)\])");
  std::smatch m;
  const std::string& msg = e.message();
  if (std::regex_search(msg, m, where)) {
    try {
      std::ifstream in(path, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      const nlohmann::json j = nlohmann::json::parse(text.str());
      const nlohmann::json& a = j.at("annotations").at(std::stoull(m[1].str()));
      const std::string id = a.contains("id") ? a["id"].dump() : "?";
      const std::string image = a.contains("image_id") ? a["image_id"].dump() : "?";
      const std::string prefix = path + ": ";
      const std::string rest = msg.rfind(prefix, 0) == 0 ? msg.substr(prefix.size()) : msg;
      BH_THROW(DataError, "{}: image id {}, annotation id {}: {}", path, image, id, rest);
    } catch (const DataError&) {
      throw;
    } catch (const std::exception&) {
      // The file is not readable as plain JSON: the original message is the best there is.
    }
  }
  throw e;
}

std::string split_dir_name(const std::string& split) {
  if (split == "train2017" || split == "train") return "train2017";
  if (split == "val2017" || split == "val") return "val2017";
  BH_THROW(InvalidArgument, "COCO 2017: split '{}' is not train2017 or val2017", split);
}

// xywh -> xyxy with the +1 convention, clipped; false when empty after clipping.
bool to_xyxy(const std::array<float, 4>& b, float w, float h, std::array<float, 4>& out) {
  const float x2 = b[0] + std::max(b[2] - 1.0f, 0.0f), y2 = b[1] + std::max(b[3] - 1.0f, 0.0f);
  out = {std::clamp(b[0], 0.0f, w - 1), std::clamp(b[1], 0.0f, h - 1), std::clamp(x2, 0.0f, w - 1),
         std::clamp(y2, 0.0f, h - 1)};
  return out[2] > out[0] && out[3] > out[1];
}

// has_valid_annotation: some annotation, and not every box at most 1 pixel in w or h.
bool has_valid_annotation(const CocoFile& f, std::size_t image_pos) {
  const auto& anns = f.annotations_of(image_pos);
  return std::any_of(anns.begin(), anns.end(), [&](std::size_t k) {
    const auto& b = f.annotations[k].bbox;
    return b[2] > 1 && b[3] > 1;
  });
}

}  // namespace

void validate_coco2017(const CocoFile& f, const std::string& image_dir, bool check_files) {
  std::error_code ec;
  if (check_files)
    for (const CocoImage& im : f.images) {
      const fs::path p = fs::path(image_dir) / im.file_name;
      if (!fs::is_regular_file(p, ec))
        BH_THROW(DataError, "{}: image id {}: its file {} does not exist", f.source, im.id, p.string());
    }
  for (const CocoAnnotation& a : f.annotations) {
    const auto image_pos = f.image_position(a.image_id);
    auto fail = [&](const std::string& what) {
      BH_THROW(DataError, "{}: image id {}, annotation id {}: {}", f.source, a.image_id, a.id, what);
    };
    if (!image_pos) fail("no image has this id");
    if (!f.category_position(a.category_id)) fail(fmt::format("unknown category id {}", a.category_id));
    const CocoImage& im = f.images[*image_pos];
    for (const float v : a.bbox)
      if (!std::isfinite(v)) fail(fmt::format("bbox [{}] has a non-finite number", fmt::join(a.bbox, ", ")));
    if (a.bbox[2] < 0 || a.bbox[3] < 0)
      fail(fmt::format("bbox [{}] has a negative width or height", fmt::join(a.bbox, ", ")));
    if (a.bbox[2] == 0 || a.bbox[3] == 0) fail(fmt::format("bbox [{}] is empty (zero width or height)", fmt::join(a.bbox, ", ")));
    const Segmentation& s = a.segmentation;
    if (!a.iscrowd) {
      if (s.kind != Segmentation::Kind::polygons || s.polygons.empty())
        fail(s.kind == Segmentation::Kind::rle ? "iscrowd 0 with an RLE mask: expected polygons"
                                               : "iscrowd 0 without a polygon segmentation");
    } else if (s.kind == Segmentation::Kind::none) {
      fail("iscrowd 1 without a segmentation (expected an RLE)");
    }
    for (std::size_t p = 0; p < s.polygons.size(); ++p) {
      const auto& poly = s.polygons[p];
      if (poly.size() % 2 != 0 || poly.size() < 6)
        fail(fmt::format("polygon {} has {} coordinates: it needs an even number, at least 6", p, poly.size()));
      for (const double v : poly)
        if (!std::isfinite(v)) fail(fmt::format("polygon {} has a non-finite coordinate", p));
    }
    if (s.kind == Segmentation::Kind::rle && (s.rle.height != im.height || s.rle.width != im.width))
      fail(fmt::format("RLE size [{}, {}] differs from the image's [{}, {}] (height, width) of {}", s.rle.height,
                       s.rle.width, im.height, im.width, im.file_name));
  }
}

Coco2017Split open_coco2017_split(const std::string& root, const std::string& split, const Coco2017Options& options) {
  const std::string name = split_dir_name(split);
  std::error_code ec;
  BH_CHECK_AS(DataError, fs::is_directory(root, ec), "COCO 2017: data directory {} does not exist", root);
  Coco2017Split s;
  s.root = root;
  s.split = name;
  s.image_dir = (fs::path(root) / name).string();
  s.annotations_path = (fs::path(root) / "annotations" / fmt::format("instances_{}.json", name)).string();
  BH_CHECK_AS(DataError, fs::is_directory(s.image_dir, ec), "COCO 2017: image directory {} does not exist",
              s.image_dir);
  BH_CHECK_AS(DataError, fs::is_regular_file(s.annotations_path, ec), "COCO 2017: annotations file {} does not exist",
              s.annotations_path);
  std::shared_ptr<CocoFile> coco;
  try {
    coco = std::make_shared<CocoFile>(read_coco_json(s.annotations_path));
  } catch (const DataError& e) {
    rethrow_with_ids(e, s.annotations_path);
  }
  BH_CHECK_AS(DataError, !coco->images.empty(), "COCO 2017: {} lists no images", s.annotations_path);
  BH_CHECK_AS(DataError, !coco->categories.empty(), "COCO 2017: {} lists no categories", s.annotations_path);
  validate_coco2017(*coco, s.image_dir, options.check_files);
  s.label_of_category = contiguous_category_index(*coco, 1);
  s.num_classes = static_cast<std::int64_t>(s.label_of_category.size());
  s.category_of_label.assign(static_cast<std::size_t>(s.num_classes) + 1, 0);
  for (const auto& [id, label] : s.label_of_category) s.category_of_label[static_cast<std::size_t>(label)] = id;
  for (std::size_t i = 0; i < coco->images.size(); ++i)
    if (!options.remove_images_without_annotations || has_valid_annotation(*coco, i)) s.samples.push_back(i);
  std::sort(s.samples.begin(), s.samples.end(),
            [&](std::size_t a, std::size_t b) { return coco->images[a].id < coco->images[b].id; });
  BH_CHECK_AS(DataError, !s.samples.empty(), "COCO 2017: {} has no image with a valid annotation", s.annotations_path);
  s.coco = std::move(coco);
  return s;
}

InstanceTarget coco2017_target(const Coco2017Split& split, std::size_t image_pos) {
  const CocoFile& f = *split.coco;
  const CocoImage& im = f.images.at(image_pos);
  const auto w = static_cast<float>(im.width), h = static_cast<float>(im.height);
  InstanceTarget t;
  for (const std::size_t k : f.annotations_of(image_pos)) {
    const CocoAnnotation& a = f.annotations[k];
    std::array<float, 4> box{};
    // Empty after clipping: dropped with its mask; crowd regions are the evaluation's and kept.
    if (!to_xyxy(a.bbox, w, h, box) && !a.iscrowd) continue;
    const std::int64_t label = split.label_of_category.at(a.category_id);
    const Segmentation& s = a.segmentation;
    const nn::Polygons& polys = s.polygons;
    if (a.iscrowd) {
      nn::Rle rle;
      if (s.kind == Segmentation::Kind::rle)
        rle = nn::Rle{s.rle.height, s.rle.width, s.rle.counts};
      else
        rle = nn::rle_from_polygons(polys, im.height, im.width);
      t.crowd_boxes.insert(t.crowd_boxes.end(), box.begin(), box.end());
      t.crowd_labels.push_back(label);
      t.crowd_masks.push_back(std::move(rle));
      t.crowd_annotation_ids.push_back(a.id);
    } else {
      t.boxes.insert(t.boxes.end(), box.begin(), box.end());
      t.labels.push_back(label);
      t.masks.push_back(polys);
      t.annotation_ids.push_back(a.id);
    }
  }
  return t;
}

Coco2017Dataset::Coco2017Dataset(Coco2017Split split, Coco2017Options options)
    : split_(std::move(split)), options_(options) {
  BH_CHECK_AS(InvalidArgument, split_.coco != nullptr, "Coco2017Dataset: the split has no parsed annotations");
}

std::string Coco2017Dataset::source(std::int64_t index) const {
  data::check_index(index, size());
  const CocoImage& im = split_.coco->images[split_.samples[static_cast<std::size_t>(index)]];
  return (fs::path(split_.image_dir) / im.file_name).string();
}

InstanceSample Coco2017Dataset::load(std::int64_t index) const {
  data::check_index(index, size());
  const std::size_t pos = split_.samples[static_cast<std::size_t>(index)];
  const CocoImage& im = split_.coco->images[pos];
  InstanceSample out;
  out.file = source(index);
  out.image_id = im.id;
  std::error_code ec;
  BH_CHECK_AS(DataError, fs::is_regular_file(out.file, ec), "COCO 2017: image file {} (id {} in {}) does not exist",
              out.file, im.id, split_.annotations_path);
  const std::vector<std::uint8_t> bytes = data::read_file(out.file);
  if (options_.check_image_size) {
    const data::ImageInfo info = data::read_image_info(bytes, out.file);
    if (info.height != im.height || info.width != im.width)
      BH_THROW(DataError, "COCO 2017: {} (image id {}) is {}x{} (width x height), {} says {}x{}", out.file, im.id,
               info.width, info.height, split_.annotations_path, im.width, im.height);
  }
  out.image = data::decode_image(bytes, out.file, 3);
  out.target = coco2017_target(split_, pos);
  return out;
}

data::Sample Coco2017Dataset::get(const data::SampleContext& ctx) const {
  InstanceSample s = load(ctx.index);
  const InstanceTarget& t = s.target;
  std::vector<double> coords;
  std::vector<std::int64_t> sizes, owner;
  for (std::size_t o = 0; o < t.masks.size(); ++o)
    for (const auto& p : t.masks[o]) {
      coords.insert(coords.end(), p.begin(), p.end());
      sizes.push_back(static_cast<std::int64_t>(p.size()));
      owner.push_back(static_cast<std::int64_t>(o));
    }
  const std::int64_t g = t.size(), c = static_cast<std::int64_t>(coords.size()), np = static_cast<std::int64_t>(sizes.size());
  const std::int64_t h = s.image.size(0), w = s.image.size(1);
  const Tensor polygon_tensor = Tensor::empty({c}, DType::f64);
  std::copy(coords.begin(), coords.end(), polygon_tensor.data<double>());
  return data::Sample{{"image", s.image},
                      {"boxes", Tensor::from_vector(t.boxes, {g, 4})},
                      {"labels", Tensor::from_vector_i64(t.labels, {g})},
                      {"polygons", polygon_tensor},
                      {"polygon_sizes", Tensor::from_vector_i64(sizes, {np})},
                      {"polygon_object", Tensor::from_vector_i64(owner, {np})},
                      {"image_id", Tensor::from_vector_i64({s.image_id}, {})},
                      {"orig_size", Tensor::from_vector_i64({h, w}, {2})}};
}

std::vector<nn::Polygons> polygons_of(const data::Sample& sample) {
  const Tensor coords = sample.at("polygons").contiguous();
  const Tensor sizes = sample.at("polygon_sizes").contiguous();
  const Tensor owner = sample.at("polygon_object").contiguous();
  const std::int64_t g = sample.at("labels").size(0);
  BH_CHECK_AS(DataError, sizes.dim() == 1 && owner.dim() == 1 && sizes.size(0) == owner.size(0),
              "polygons_of: polygon_sizes and polygon_object must be i64 [P] of one length");
  std::vector<nn::Polygons> out(static_cast<std::size_t>(g));
  BH_CHECK_AS(DataError, coords.dim() == 1 && coords.dtype() == DType::f64, "polygons_of: polygons must be f64 [C]");
  const double* xy = coords.data<double>();
  std::int64_t at = 0;
  for (std::int64_t p = 0; p < sizes.size(0); ++p) {
    const std::int64_t n = sizes.data<std::int64_t>()[p], o = owner.data<std::int64_t>()[p];
    BH_CHECK_AS(DataError, n >= 0 && at + n <= coords.numel() && o >= 0 && o < g,
                "polygons_of: polygon {} ({} coordinates, object {}) does not fit {} coordinates and {} objects", p, n,
                o, coords.numel(), g);
    out[static_cast<std::size_t>(o)].emplace_back(xy + at, xy + at + n);
    at += n;
  }
  return out;
}

std::shared_ptr<Coco2017Dataset> make_coco2017_train(const std::string& root) {
  Coco2017Options o;
  o.remove_images_without_annotations = true;
  return std::make_shared<Coco2017Dataset>(open_coco2017_split(root, "train2017", o), o);
}

std::shared_ptr<Coco2017Dataset> make_coco2017_eval(const std::string& root) {
  return std::make_shared<Coco2017Dataset>(open_coco2017_split(root, "val2017"));
}

}  // namespace benchhost::coco

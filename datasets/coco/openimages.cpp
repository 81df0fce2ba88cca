// OpenImages-MLPerf layout and the RetinaNet reference transforms (openimages.hpp).
#include "openimages.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "benchhost/data/file.hpp"
#include "benchhost/error.hpp"

namespace benchhost::coco {
namespace fs = std::filesystem;

OpenImagesSplit open_openimages_split(const std::string& root, const std::string& split) {
  if (split != "train" && split != "validation")
    BH_THROW(InvalidArgument, "OpenImages: split '{}' is not train or validation", split);
  std::error_code ec;
  BH_CHECK_AS(DataError, fs::is_directory(root, ec), "OpenImages: data directory {} does not exist", root);
  const fs::path split_dir = fs::path(root) / split;
  BH_CHECK_AS(DataError, fs::is_directory(split_dir, ec), "OpenImages: split directory {} does not exist",
              split_dir.string());
  OpenImagesSplit s;
  s.root = root;
  s.split = split;
  s.data_dir = (split_dir / "data").string();
  s.labels_path = (split_dir / "labels" / "openimages-mlperf.json").string();
  BH_CHECK_AS(DataError, fs::is_directory(s.data_dir, ec), "OpenImages: image directory {} does not exist",
              s.data_dir);
  BH_CHECK_AS(DataError, fs::is_regular_file(s.labels_path, ec), "OpenImages: labels file {} does not exist",
              s.labels_path);
  auto coco = std::make_shared<CocoFile>(read_coco_json(s.labels_path));
  s.num_classes = static_cast<std::int64_t>(direct_category_index(*coco).size());
  BH_CHECK_AS(DataError, !coco->images.empty(), "OpenImages: {} lists no images", s.labels_path);
  s.coco = std::move(coco);
  return s;
}

DetectionTarget coco_target(const CocoFile& file, std::size_t image_pos) {
  const CocoImage& im = file.images.at(image_pos);
  const auto w = static_cast<float>(im.width), h = static_cast<float>(im.height);
  DetectionTarget t;
  for (const std::size_t k : file.annotations_of(image_pos)) {
    const CocoAnnotation& a = file.annotations[k];
    const float x1 = std::clamp(a.bbox[0], 0.0f, w);
    const float y1 = std::clamp(a.bbox[1], 0.0f, h);
    const float x2 = std::clamp(a.bbox[0] + a.bbox[2], 0.0f, w);
    const float y2 = std::clamp(a.bbox[1] + a.bbox[3], 0.0f, h);
    if (!(x2 > x1 && y2 > y1)) continue;  // degenerate after clamping: dropped
    t.boxes.insert(t.boxes.end(), {x1, y1, x2, y2});
    t.labels.push_back(a.category_id);
    t.iscrowd.push_back(a.iscrowd ? 1 : 0);
  }
  return t;
}

void hflip_boxes(DetectionTarget& target, float width) {
  for (std::size_t i = 0; i + 3 < target.boxes.size(); i += 4) {
    const float x1 = target.boxes[i], x2 = target.boxes[i + 2];
    target.boxes[i] = width - x2;
    target.boxes[i + 2] = width - x1;
  }
}

void resize_boxes(DetectionTarget& target, int in_h, int in_w, int out_h, int out_w) {
  BH_CHECK_AS(InvalidArgument, in_h > 0 && in_w > 0 && out_h > 0 && out_w > 0,
              "resize_boxes: sizes {}x{} -> {}x{} must be positive", in_w, in_h, out_w, out_h);
  const float rx = static_cast<float>(out_w) / static_cast<float>(in_w);
  const float ry = static_cast<float>(out_h) / static_cast<float>(in_h);
  for (std::size_t i = 0; i + 3 < target.boxes.size(); i += 4) {
    target.boxes[i] *= rx;
    target.boxes[i + 1] *= ry;
    target.boxes[i + 2] *= rx;
    target.boxes[i + 3] *= ry;
  }
}

OpenImagesDataset::OpenImagesDataset(OpenImagesSplit split, DetectionTransform transform)
    : split_(std::move(split)), transform_(transform) {
  BH_CHECK_AS(InvalidArgument, split_.coco != nullptr, "OpenImagesDataset: the split has no parsed labels");
  BH_CHECK_AS(InvalidArgument, transform_.out_height > 0 && transform_.out_width > 0,
              "OpenImagesDataset: output size {}x{} must be positive", transform_.out_width, transform_.out_height);
  BH_CHECK_AS(InvalidArgument, transform_.flip_probability >= 0 && transform_.flip_probability <= 1,
              "OpenImagesDataset: flip probability {} is not in [0, 1]", transform_.flip_probability);
}

std::string OpenImagesDataset::source(std::int64_t index) const {
  data::check_index(index, size());
  return (fs::path(split_.data_dir) / split_.coco->images[static_cast<std::size_t>(index)].file_name).string();
}

data::Sample OpenImagesDataset::get(const data::SampleContext& ctx) const {
  data::check_index(ctx.index, size());
  const auto pos = static_cast<std::size_t>(ctx.index);
  const CocoImage& im = split_.coco->images[pos];
  const std::string path = source(ctx.index);
  std::error_code ec;
  BH_CHECK_AS(DataError, fs::is_regular_file(path, ec), "OpenImages: image file {} (id {} in {}) does not exist",
              path, im.id, split_.labels_path);
  const std::vector<std::uint8_t> bytes = data::read_file(path);
  if (transform_.check_image_size) {
    const data::ImageInfo info = data::read_image_info(bytes, path);
    if (info.height != im.height || info.width != im.width)
      BH_THROW(DataError, "OpenImages: {} is {}x{} (width x height), {} says {}x{}", path, info.width, info.height,
               split_.labels_path, im.width, im.height);
  }
  const Tensor hwc = data::decode_image(bytes, path, 3);
  const int h = static_cast<int>(hwc.size(0)), w = static_cast<int>(hwc.size(1));

  Rng rng = ctx.rng();
  const bool flip = transform_.train && rng.uniform() < transform_.flip_probability;
  DetectionTarget t = coco_target(*split_.coco, pos);
  if (flip) hflip_boxes(t, static_cast<float>(w));
  const int oh = transform_.out_height, ow = transform_.out_width;
  resize_boxes(t, h, w, oh, ow);

  const Tensor image = transform_.layout == data::Layout::chw ? Tensor::empty({3, oh, ow}) : Tensor::empty({oh, ow, 3});
  data::resized_crop_normalize(hwc, data::CropBox{0, 0, h, w}, oh, ow, flip, transform_.norm, transform_.layout,
                               image.data<float>());
  const std::int64_t g = t.size();
  return data::Sample{{"image", image},
                      {"boxes", Tensor::from_vector(t.boxes, {g, 4})},
                      {"labels", Tensor::from_vector_i64(t.labels, {g})},
                      {"image_id", Tensor::from_vector_i64({im.id}, {})},
                      {"orig_size", Tensor::from_vector_i64({h, w}, {2})}};
}

std::shared_ptr<OpenImagesDataset> make_openimages_train(const std::string& root, int image_size) {
  DetectionTransform t;
  t.train = true;
  t.out_height = t.out_width = image_size;
  return std::make_shared<OpenImagesDataset>(open_openimages_split(root, "train"), t);
}

std::shared_ptr<OpenImagesDataset> make_openimages_eval(const std::string& root, int image_size) {
  DetectionTransform t;
  t.train = false;
  t.out_height = t.out_width = image_size;
  return std::make_shared<OpenImagesDataset>(open_openimages_split(root, "validation"), t);
}

data::TensorDict detection_collate(const std::vector<data::Sample>& samples) {
  BH_CHECK_AS(InvalidArgument, !samples.empty(), "detection_collate: no samples");
  const auto b = static_cast<std::int64_t>(samples.size());
  std::int64_t g = 1;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const Tensor& boxes = samples[i].at("boxes");
    const Tensor& labels = samples[i].at("labels");
    if (boxes.dim() != 2 || boxes.size(1) != 4 || boxes.dtype() != DType::f32)
      BH_THROW(DataError, "detection_collate: sample {}: boxes must be f32 [G, 4]", i);
    if (labels.dim() != 1 || labels.size(0) != boxes.size(0) || labels.dtype() != DType::i64)
      BH_THROW(DataError, "detection_collate: sample {}: labels must be i64 [{}]", i, boxes.size(0));
    g = std::max(g, boxes.size(0));
  }
  Tensor boxes = Tensor::zeros({b, g, 4});
  Tensor labels = Tensor::full({b, g}, -1.0, DType::i64);
  Tensor count = Tensor::empty({b}, DType::i64);
  std::vector<data::Sample> rest(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const Tensor sb = samples[i].at("boxes").contiguous();
    const Tensor sl = samples[i].at("labels").contiguous();
    const std::int64_t n = sb.size(0);
    if (n > 0) {
      std::memcpy(boxes.data<float>() + static_cast<std::int64_t>(i) * g * 4, sb.data<float>(), n * 4 * sizeof(float));
      std::memcpy(labels.data<std::int64_t>() + static_cast<std::int64_t>(i) * g, sl.data<std::int64_t>(),
                  n * sizeof(std::int64_t));
    }
    count.data<std::int64_t>()[i] = n;
    for (const auto& [name, t] : samples[i].fields())
      if (name != "boxes" && name != "labels") rest[i].set(name, t);
  }
  data::TensorDict out;
  const data::TensorDict stacked = data::collate(rest);
  for (const auto& [name, t] : stacked.fields()) {
    out.set(name, t);
    if (name == "image") {  // keep the usual order: image, boxes, labels, num_boxes, ...
      out.set("boxes", boxes);
      out.set("labels", labels);
      out.set("num_boxes", count);
    }
  }
  if (!out.has("boxes")) {
    out.set("boxes", boxes);
    out.set("labels", labels);
    out.set("num_boxes", count);
  }
  return out;
}

}  // namespace benchhost::coco

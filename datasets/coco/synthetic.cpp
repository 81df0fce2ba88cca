// Planted-shapes generator in the OpenImages-MLPerf layout (Note [Planted shapes], synthetic.hpp).
#include "synthetic.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "benchhost/data/generated.hpp"
#include "benchhost/comm/communicator.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/error.hpp"
#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"
#include "coco_json.hpp"
#include "planted.hpp"

namespace benchhost::coco {
namespace fs = std::filesystem;
namespace {

using planted::Box;
using planted::Canvas;
using planted::uniform_int;

constexpr const char* kMarker = "openimages_synthetic.txt";
constexpr std::array<const char*, 6> kShapes = {"circle", "square", "triangle", "ring", "cross", "diamond"};

// Whether the pixel centre (x, y) (in [0, s)^2, relative to the shape's square) is inside.
bool inside(const std::string& shape, double x, double y, double s) {
  const double c = s / 2, dx = x - c, dy = y - c;
  if (shape == "circle") return dx * dx + dy * dy <= c * c;
  if (shape == "square") return true;
  if (shape == "triangle") return y >= 0 && std::fabs(dx) <= c * y / s;  // apex top centre, base at the bottom
  if (shape == "ring") return dx * dx + dy * dy <= c * c && dx * dx + dy * dy >= 0.3 * c * c;
  if (shape == "cross") return std::fabs(dx) <= s / 6 || std::fabs(dy) <= s / 6;
  return std::fabs(dx) + std::fabs(dy) <= c;  // diamond
}

// Category id of each shape index: the position of its name among the chosen names, sorted.
std::vector<std::int64_t> category_of_shape(int classes) {
  const std::vector<std::string> names = synthetic_class_names(classes);
  std::vector<std::int64_t> id(static_cast<std::size_t>(classes));
  for (int s = 0; s < classes; ++s)
    id[static_cast<std::size_t>(s)] = std::find(names.begin(), names.end(), kShapes[static_cast<std::size_t>(s)]) - names.begin();
  return id;
}

SyntheticImage render(const OpenImagesSyntheticOptions& o, int split, int index) {
  Rng rng(o.seed, (static_cast<std::uint64_t>(split + 1) << 32) + static_cast<std::uint64_t>(index));
  const std::vector<std::int64_t> category = category_of_shape(o.classes);
  SyntheticImage r;
  std::array<int, 3> base{};
  Canvas cv = planted::background(rng, o.min_size, o.max_size, base);
  auto colour = [&] { return planted::object_colour(rng, base); };
  const int side = std::min(cv.h, cv.w);
  const int n = uniform_int(rng, 1, o.max_objects);
  for (int m = 0; m < n; ++m) {
    const int shape_index = uniform_int(rng, 0, o.classes - 1);
    const std::string shape = kShapes[static_cast<std::size_t>(shape_index)];
    const std::array<int, 3> col = colour();
    Box box;
    SyntheticImage::Object obj;
    obj.category_id = category[static_cast<std::size_t>(shape_index)];
    for (int k = 0; k < 3; ++k) obj.colour[k] = static_cast<std::uint8_t>(col[k]);
    const bool group = m == n - 1 && rng.uniform() < 0.15f;
    if (group) {
      obj.iscrowd = true;
      const int members = uniform_int(rng, 3, 5);
      const int region = std::max(8, static_cast<int>(side * 0.35));
      const int rx = uniform_int(rng, 0, cv.w - region), ry = uniform_int(rng, 0, cv.h - region);
      for (int g = 0; g < members; ++g) {
        const int s = std::max(4, static_cast<int>(std::lround(side * rng.uniform(0.06f, 0.10f))));
        const int left = rx + uniform_int(rng, 0, std::max(0, region - s));
        const int top = ry + uniform_int(rng, 0, std::max(0, region - s));
        box.add(cv.paint(left, top, s, col, [&](double x, double y) { return inside(shape, x, y, s); }));
      }
    } else {
      const int s = std::max(6, static_cast<int>(std::lround(side * rng.uniform(0.1f, 0.6f))));
      const int left = uniform_int(rng, 0, cv.w - s), top = uniform_int(rng, 0, cv.h - s);
      box = cv.paint(left, top, s, col, [&](double x, double y) { return inside(shape, x, y, s); });
    }
    if (box.empty()) continue;
    obj.bbox = {static_cast<float>(box.x0), static_cast<float>(box.y0), static_cast<float>(box.x1 - box.x0 + 1),
                static_cast<float>(box.y1 - box.y0 + 1)};
    r.objects.push_back(obj);
  }
  r.pixels = cv.pixels();
  return r;
}

std::string file_stem(std::uint64_t seed, int split, int index) {
  // mix64 is a bijection, so distinct (split, index) give distinct names.
  return fmt::format("{:016x}", mix64(mix64(seed) + (static_cast<std::uint64_t>(split) << 40) +
                                      static_cast<std::uint64_t>(index)));
}

void write_bytes(const fs::path& p, const std::vector<std::uint8_t>& bytes) {
  planted::write_bytes("make_openimages_synthetic", p, bytes);
}

// One split into dir/<split>/{data,labels}; returns the number of annotations.
std::int64_t write_split(const fs::path& dir, const char* split_name, int split, int count,
                         const OpenImagesSyntheticOptions& o) {
  const fs::path data_dir = dir / split_name / "data", labels_dir = dir / split_name / "labels";
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  fs::create_directories(labels_dir, ec);
  BH_CHECK_AS(DataError, !ec, "make_openimages_synthetic: cannot create {}: {}", data_dir.string(), ec.message());
  struct Written {
    int height = 0, width = 0;
    std::vector<SyntheticImage::Object> objects;
  };
  std::vector<Written> images(static_cast<std::size_t>(count));
  std::vector<std::exception_ptr> errors(images.size());
  tbb::parallel_for(0, count, [&](int i) {
    try {
      SyntheticImage r = render(o, split, i);
      write_bytes(data_dir / (file_stem(o.seed, split, i) + ".jpg"), data::encode_jpeg(r.pixels, 90));
      images[static_cast<std::size_t>(i)] = {static_cast<int>(r.pixels.size(0)), static_cast<int>(r.pixels.size(1)),
                                             std::move(r.objects)};
    } catch (...) {
      errors[static_cast<std::size_t>(i)] = std::current_exception();
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);

  const std::vector<std::string> names = synthetic_class_names(o.classes);
  CocoFile f;
  for (std::size_t c = 0; c < names.size(); ++c) f.categories.push_back({static_cast<std::int64_t>(c), names[c], std::nullopt});
  std::int64_t ann_id = 1;
  for (int i = 0; i < count; ++i) {
    const Written& r = images[static_cast<std::size_t>(i)];
    const std::int64_t image_id = i + 1;
    f.images.push_back({image_id, file_stem(o.seed, split, i) + ".jpg", r.height, r.width});
    for (const SyntheticImage::Object& obj : r.objects) {
      CocoAnnotation a;
      a.id = ann_id++;
      a.image_id = image_id;
      a.category_id = obj.category_id;
      a.bbox = obj.bbox;
      a.area = static_cast<double>(obj.bbox[2]) * obj.bbox[3];
      a.iscrowd = obj.iscrowd;
      f.annotations.push_back(a);
    }
  }
  f.source = (labels_dir / "openimages-mlperf.json").string();
  f.build_index();
  write_coco_json(f, f.source);
  return static_cast<std::int64_t>(f.annotations.size());
}

void check_options(const OpenImagesSyntheticOptions& o) {
  BH_CHECK_AS(InvalidArgument, o.train_images >= 1 && o.val_images >= 1,
              "make_openimages_synthetic: need at least one training and one validation image ({}, {})", o.train_images,
              o.val_images);
  BH_CHECK_AS(InvalidArgument, o.min_size >= 16 && o.min_size <= o.max_size && o.max_size <= 4096,
              "make_openimages_synthetic: image sizes {}..{} must satisfy 16 <= min <= max <= 4096", o.min_size,
              o.max_size);
  BH_CHECK_AS(InvalidArgument, o.classes >= 1 && o.classes <= static_cast<int>(kShapes.size()),
              "make_openimages_synthetic: classes {} not in 1..{}", o.classes, kShapes.size());
  BH_CHECK_AS(InvalidArgument, o.max_objects >= 1 && o.max_objects <= 100,
              "make_openimages_synthetic: max objects {} not in 1..100", o.max_objects);
}

bool check_existing(const std::string& root, const OpenImagesSyntheticOptions& o, OpenImagesSyntheticReport& r) {
  if (!data::generated_with("OpenImages synthetic", root, kMarker, openimages_synthetic_options_text(o))) return false;
  r = OpenImagesSyntheticReport{};
  r.train_images = o.train_images;
  r.val_images = o.val_images;
  return true;
}

}  // namespace

SyntheticImage render_openimages_synthetic(const OpenImagesSyntheticOptions& opts, int split, int index) {
  check_options(opts);
  BH_CHECK_AS(InvalidArgument, split == 0 || split == 1, "render_openimages_synthetic: split {} is not 0 or 1", split);
  return render(opts, split, index);
}

std::vector<std::string> synthetic_class_names(int classes) {
  BH_CHECK_AS(InvalidArgument, classes >= 1 && classes <= static_cast<int>(kShapes.size()),
              "synthetic_class_names: classes {} not in 1..{}", classes, kShapes.size());
  std::vector<std::string> names(kShapes.begin(), kShapes.begin() + classes);
  std::sort(names.begin(), names.end());
  return names;
}

std::string openimages_synthetic_options_text(const OpenImagesSyntheticOptions& o) {
  return fmt::format(
      "openimages-mlperf synthetic v1\ntrain_images {}\nval_images {}\nmin_size {}\nmax_size {}\nclasses {}\n"
      "max_objects {}\nseed {}\n",
      o.train_images, o.val_images, o.min_size, o.max_size, o.classes, o.max_objects, o.seed);
}

OpenImagesSyntheticReport generate_openimages_synthetic(const std::string& root, const OpenImagesSyntheticOptions& o) {
  check_options(o);
  OpenImagesSyntheticReport r;
  planted::write_atomically("make_openimages_synthetic", root, [&](const fs::path& staging) {
    r.train_boxes = write_split(staging, "train", 0, o.train_images, o);
    r.val_boxes = write_split(staging, "validation", 1, o.val_images, o);
    const std::string text = openimages_synthetic_options_text(o);
    write_bytes(staging / kMarker, std::vector<std::uint8_t>(text.begin(), text.end()));
  });
  r.train_images = o.train_images;
  r.val_images = o.val_images;
  r.generated = true;
  return r;
}

OpenImagesSyntheticReport ensure_openimages_synthetic(const std::string& root, const OpenImagesSyntheticOptions& o, Communicator* comm) {
  // Note [Generated once across ranks] (benchhost/data/generated.hpp).
  return data::ensure_generated<OpenImagesSyntheticReport>(
      comm, "OpenImages synthetic", root, [&](OpenImagesSyntheticReport& r) { return check_existing(root, o, r); },
      [&] { return generate_openimages_synthetic(root, o); });
}

}  // namespace benchhost::coco

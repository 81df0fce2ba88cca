// Planted-polygons generator in the COCO 2017 layout (Note [Planted polygons],
// synthetic_coco2017.hpp).
#include "synthetic_coco2017.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "benchhost/data/generated.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/error.hpp"
#include "benchhost/nn/detection.hpp"
#include "benchhost/random.hpp"
#include "planted.hpp"

namespace benchhost::coco {
namespace fs = std::filesystem;
namespace {

using planted::Box;
using planted::Canvas;
using planted::uniform_int;

constexpr const char* kTool = "make_coco2017_synthetic";
constexpr const char* kMarker = "coco2017_synthetic.txt";
constexpr std::array<const char*, 6> kShapes = {"circle", "square", "triangle", "star", "cross", "diamond"};
constexpr std::array<std::int64_t, 6> kCategoryIds = {3, 7, 1, 12, 18, 25};
constexpr double kPi = 3.14159265358979323846;

double round_coord(double v) { return std::round(v * 100.0) / 100.0; }

// The outline of shape `shape` in the s x s square at (left, top), clockwise in image axes.
std::vector<double> outline(int shape, int left, int top, int s) {
  const double cx = left + s / 2.0, cy = top + s / 2.0, r = s / 2.0;
  std::vector<std::array<double, 2>> v;
  switch (shape) {
    case 0:  // circle
      for (int k = 0; k < 32; ++k) v.push_back({cx + r * std::cos(2 * kPi * k / 32), cy + r * std::sin(2 * kPi * k / 32)});
      break;
    case 1:  // square
      v = {{left + 0.0, top + 0.0}, {left + s + 0.0, top + 0.0}, {left + s + 0.0, top + s + 0.0}, {left + 0.0, top + s + 0.0}};
      break;
    case 2:  // triangle
      v = {{cx, top + 0.0}, {left + s + 0.0, top + s + 0.0}, {left + 0.0, top + s + 0.0}};
      break;
    case 3:  // star, first point up
      for (int k = 0; k < 10; ++k) {
        const double a = -kPi / 2 + kPi * k / 5, rr = k % 2 == 0 ? r : 0.45 * r;
        v.push_back({cx + rr * std::cos(a), cy + rr * std::sin(a)});
      }
      break;
    case 4: {  // cross: arms s/3 wide
      const double a = s / 6.0;
      v = {{cx - a, top + 0.0}, {cx + a, top + 0.0}, {cx + a, cy - a}, {left + s + 0.0, cy - a},
           {left + s + 0.0, cy + a}, {cx + a, cy + a}, {cx + a, top + s + 0.0}, {cx - a, top + s + 0.0},
           {cx - a, cy + a}, {left + 0.0, cy + a}, {left + 0.0, cy - a}, {cx - a, cy - a}};
      break;
    }
    default:  // diamond
      v = {{cx, top + 0.0}, {left + s + 0.0, cy}, {cx, top + s + 0.0}, {left + 0.0, cy}};
  }
  std::vector<double> xy;
  for (const auto& p : v) xy.insert(xy.end(), {round_coord(p[0]), round_coord(p[1])});
  return xy;
}

// The SDK's rasterisation of polygons (pycocotools' rule) as an u8 [h, w] mask.
Tensor rasterise(const std::vector<std::vector<double>>& polygons, int h, int w) {
  return nn::rle_decode(nn::rle_from_polygons(polygons, h, w));
}

SyntheticInstanceImage render(const Coco2017SyntheticOptions& o, int split, int index) {
  // Streams apart from the OpenImages generator's ((split + 1) << 32 + index).
  Rng rng(o.seed, (std::uint64_t{0xC0C0} << 40) + (static_cast<std::uint64_t>(split + 1) << 32) +
                      static_cast<std::uint64_t>(index));
  SyntheticInstanceImage r;
  std::array<int, 3> base{};
  Canvas cv = planted::background(rng, o.min_size, o.max_size, base);
  const int side = std::min(cv.h, cv.w);
  const int n = uniform_int(rng, 1, o.max_objects);
  for (int m = 0; m < n; ++m) {
    const int shape = uniform_int(rng, 0, o.classes - 1);
    const std::array<int, 3> col = planted::object_colour(rng, base);
    SyntheticInstanceImage::Object obj;
    obj.category_id = kCategoryIds[static_cast<std::size_t>(shape)];
    for (int k = 0; k < 3; ++k) obj.colour[k] = static_cast<std::uint8_t>(col[k]);
    if (m == n - 1 && rng.uniform() < 1.0f / 7.0f) {
      obj.iscrowd = true;
      const int members = uniform_int(rng, 3, 5);
      const int region = std::max(8, static_cast<int>(side * 0.35));
      const int rx = uniform_int(rng, 0, cv.w - region), ry = uniform_int(rng, 0, cv.h - region);
      for (int g = 0; g < members; ++g) {
        const int s = std::max(4, static_cast<int>(std::lround(side * rng.uniform(0.06f, 0.10f))));
        const int left = rx + uniform_int(rng, 0, std::max(0, region - s));
        const int top = ry + uniform_int(rng, 0, std::max(0, region - s));
        obj.polygons.push_back(outline(shape, left, top, s));
      }
    } else {
      const int s = std::max(6, static_cast<int>(std::lround(side * rng.uniform(0.1f, 0.6f))));
      const int left = uniform_int(rng, 0, cv.w - s), top = uniform_int(rng, 0, cv.h - s);
      obj.polygons.push_back(outline(shape, left, top, s));
    }
    obj.mask = rasterise(obj.polygons, cv.h, cv.w);
    const Box box = cv.paint_mask(obj.mask.data<std::uint8_t>(), col);
    if (box.empty()) continue;
    obj.bbox = box.xywh();
    const std::uint8_t* mk = obj.mask.data<std::uint8_t>();
    obj.area = std::count_if(mk, mk + static_cast<std::ptrdiff_t>(cv.h) * cv.w, [](std::uint8_t v) { return v != 0; });
    r.objects.push_back(std::move(obj));
  }
  r.pixels = cv.pixels();
  return r;
}

std::string file_name(std::int64_t image_id) { return fmt::format("{:012d}.jpg", image_id); }

struct SplitCounts {
  std::int64_t annotations = 0, crowd = 0;
};

// One split: images into dir/<name>2017, the JSON into dir/annotations.
SplitCounts write_split(const fs::path& dir, const std::string& name, int split, int count,
                        const Coco2017SyntheticOptions& o) {
  const fs::path image_dir = dir / (name + "2017"), ann_dir = dir / "annotations";
  std::error_code ec;
  fs::create_directories(image_dir, ec);
  fs::create_directories(ann_dir, ec);
  BH_CHECK_AS(DataError, !ec, "{}: cannot create {}: {}", kTool, image_dir.string(), ec.message());
  struct Written {
    int height = 0, width = 0;
    std::vector<SyntheticInstanceImage::Object> objects;
  };
  std::vector<Written> images(static_cast<std::size_t>(count));
  std::vector<std::exception_ptr> errors(images.size());
  tbb::parallel_for(0, count, [&](int i) {
    try {
      SyntheticInstanceImage r = render(o, split, i);
      planted::write_bytes(kTool, image_dir / file_name(i + 1), data::encode_jpeg(r.pixels, 90));
      images[static_cast<std::size_t>(i)] = {static_cast<int>(r.pixels.size(0)), static_cast<int>(r.pixels.size(1)),
                                             std::move(r.objects)};
    } catch (...) {
      errors[static_cast<std::size_t>(i)] = std::current_exception();
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);

  CocoFile f;
  f.categories = coco2017_synthetic_categories(o.classes);
  SplitCounts c;
  for (int i = 0; i < count; ++i) {
    const Written& w = images[static_cast<std::size_t>(i)];
    const std::int64_t image_id = i + 1;
    f.images.push_back({image_id, file_name(image_id), w.height, w.width});
    for (const SyntheticInstanceImage::Object& obj : w.objects) {
      CocoAnnotation a;
      a.id = static_cast<std::int64_t>(f.annotations.size()) + 1;
      a.image_id = image_id;
      a.category_id = obj.category_id;
      a.bbox = obj.bbox;
      a.area = static_cast<double>(obj.area);
      a.iscrowd = obj.iscrowd;
      if (obj.iscrowd) {
        const nn::Rle rle = nn::rle_encode(obj.mask);
        a.segmentation.kind = Segmentation::Kind::rle;
        a.segmentation.rle = Rle{rle.height, rle.width, rle.counts, true};
        ++c.crowd;
      } else {
        a.segmentation.kind = Segmentation::Kind::polygons;
        a.segmentation.polygons = obj.polygons;
      }
      f.annotations.push_back(std::move(a));
    }
  }
  f.source = (ann_dir / fmt::format("instances_{}2017.json", name)).string();
  f.build_index();
  write_coco_json(f, f.source);
  c.annotations = static_cast<std::int64_t>(f.annotations.size());
  return c;
}

void check_options(const Coco2017SyntheticOptions& o) {
  BH_CHECK_AS(InvalidArgument, o.train_images >= 1 && o.val_images >= 1,
              "{}: need at least one training and one validation image ({}, {})", kTool, o.train_images, o.val_images);
  BH_CHECK_AS(InvalidArgument, o.min_size >= 16 && o.min_size <= o.max_size && o.max_size <= 4096,
              "{}: image sizes {}..{} must satisfy 16 <= min <= max <= 4096", kTool, o.min_size, o.max_size);
  BH_CHECK_AS(InvalidArgument, o.classes >= 1 && o.classes <= static_cast<int>(kShapes.size()),
              "{}: classes {} not in 1..{}", kTool, o.classes, kShapes.size());
  BH_CHECK_AS(InvalidArgument, o.max_objects >= 1 && o.max_objects <= 100, "{}: max objects {} not in 1..100",
              kTool, o.max_objects);
}

}  // namespace

std::vector<CocoCategory> coco2017_synthetic_categories(int classes) {
  BH_CHECK_AS(InvalidArgument, classes >= 1 && classes <= static_cast<int>(kShapes.size()),
              "coco2017_synthetic_categories: classes {} not in 1..{}", classes, kShapes.size());
  std::vector<CocoCategory> out;
  for (int s = 0; s < classes; ++s)
    out.push_back({kCategoryIds[static_cast<std::size_t>(s)], kShapes[static_cast<std::size_t>(s)], "shape"});
  std::sort(out.begin(), out.end(), [](const CocoCategory& a, const CocoCategory& b) { return a.id < b.id; });
  return out;
}

SyntheticInstanceImage render_coco2017_synthetic(const Coco2017SyntheticOptions& opts, int split, int index) {
  check_options(opts);
  BH_CHECK_AS(InvalidArgument, split == 0 || split == 1, "render_coco2017_synthetic: split {} is not 0 or 1", split);
  return render(opts, split, index);
}

std::string coco2017_synthetic_options_text(const Coco2017SyntheticOptions& o) {
  return fmt::format(
      "coco2017 synthetic v1\ntrain_images {}\nval_images {}\nmin_size {}\nmax_size {}\nclasses {}\n"
      "max_objects {}\nseed {}\n",
      o.train_images, o.val_images, o.min_size, o.max_size, o.classes, o.max_objects, o.seed);
}

Coco2017SyntheticReport generate_coco2017_synthetic(const std::string& root, const Coco2017SyntheticOptions& o) {
  check_options(o);
  Coco2017SyntheticReport r;
  planted::write_atomically(kTool, root, [&](const fs::path& staging) {
    const SplitCounts train = write_split(staging, "train", 0, o.train_images, o);
    const SplitCounts val = write_split(staging, "val", 1, o.val_images, o);
    r.train_annotations = train.annotations, r.train_crowd = train.crowd;
    r.val_annotations = val.annotations, r.val_crowd = val.crowd;
    const std::string text = coco2017_synthetic_options_text(o);
    planted::write_bytes(kTool, staging / kMarker, std::vector<std::uint8_t>(text.begin(), text.end()));
  });
  r.train_images = o.train_images;
  r.val_images = o.val_images;
  r.generated = true;
  return r;
}

Coco2017SyntheticReport ensure_coco2017_synthetic(const std::string& root, const Coco2017SyntheticOptions& o,
                                                  Communicator* comm) {
  // Note [Generated once across ranks] (benchhost/data/generated.hpp).
  return data::ensure_generated<Coco2017SyntheticReport>(
      comm, "COCO 2017 synthetic", root,
      [&](Coco2017SyntheticReport& r) {
        if (!data::generated_with("COCO 2017 synthetic", root, kMarker, coco2017_synthetic_options_text(o))) return false;
        r = Coco2017SyntheticReport{};
        r.train_images = o.train_images;
        r.val_images = o.val_images;
        return true;
      },
      [&] { return generate_coco2017_synthetic(root, o); });
}

}  // namespace benchhost::coco

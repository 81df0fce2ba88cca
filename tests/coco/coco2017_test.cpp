// COCO 2017 instance segmentation: the planted-polygons generator (same seed same bytes, ensure),
// generator -> reader round trip (boxes, polygons against the drawn masks, crowd RLEs, category
// mapping), the reference's target rules, each corrupt-input error, loading from many threads,
// and pycocotools' annToMask against our rasterisation where pycocotools is installed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "benchhost/data/image.hpp"
#include "benchhost/error.hpp"
#include "benchhost/nn/detection.hpp"
#include "coco2017.hpp"
#include "common.hpp"
#include "common/thread_comm.hpp"
#include "synthetic_coco2017.hpp"

using namespace benchhost;
using namespace benchhost::coco;
namespace fs = std::filesystem;

namespace {

Coco2017SyntheticOptions small() {
  Coco2017SyntheticOptions o;
  o.train_images = 21;
  o.val_images = 14;
  o.min_size = 48;
  o.max_size = 80;
  o.classes = 6;
  o.seed = 7;
  return o;
}

std::map<std::string, std::string> tree(const std::string& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[fs::relative(e.path(), root).string()] = test::bytes_of(e.path().string());
  return out;
}

// IoU of two u8 masks of one size.
double iou(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::uint8_t* p = a.data<std::uint8_t>();
  const std::uint8_t* q = b.data<std::uint8_t>();
  std::int64_t inter = 0, uni = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    inter += (p[i] && q[i]) ? 1 : 0;
    uni += (p[i] || q[i]) ? 1 : 0;
  }
  return uni == 0 ? 1.0 : static_cast<double>(inter) / static_cast<double>(uni);
}

Tensor raster(const nn::Polygons& polys, std::int64_t h, std::int64_t w) {
  return nn::rle_decode(nn::rle_from_polygons(polys, h, w));
}

// Independent of the SDK: pixel (x, y) is set when its centre (x + 0.5, y + 0.5) is inside one of
// the polygons by the even-odd rule on the exact coordinates (no fifth-of-a-pixel grid).
Tensor point_in_polygon(const nn::Polygons& polys, std::int64_t h, std::int64_t w) {
  Tensor m = Tensor::zeros({h, w}, DType::u8);
  for (const auto& p : polys) {
    const std::size_t n = p.size() / 2;
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x) {
        const double px = x + 0.5 - 1e-6, py = y + 0.5 + 1e-6;  // ties: see the caller
        bool in = false;
        for (std::size_t i = 0, j = n - 1; i < n; j = i++) {
          const double xi = p[2 * i], yi = p[2 * i + 1], xj = p[2 * j], yj = p[2 * j + 1];
          if ((yi > py) != (yj > py) && px < (xj - xi) * (py - yi) / (yj - yi) + xi) in = !in;
        }
        if (in) m.data<std::uint8_t>()[y * w + x] = 1;
      }
  }
  return m;
}

// Mean over 4x4 blocks and channels of |mean(a) - mean(b)|: JPEG loses the pixel noise, not the
// picture.
double block_difference(const Tensor& a, const Tensor& b) {
  const std::int64_t h = a.size(0), w = a.size(1);
  const std::uint8_t* p = a.data<std::uint8_t>();
  const std::uint8_t* q = b.data<std::uint8_t>();
  double diff = 0;
  int blocks = 0;
  for (std::int64_t by = 0; by + 4 <= h; by += 4)
    for (std::int64_t bx = 0; bx + 4 <= w; bx += 4)
      for (int c = 0; c < 3; ++c) {
        double m = 0;
        for (std::int64_t y = by; y < by + 4; ++y)
          for (std::int64_t x = bx; x < bx + 4; ++x) m += p[(y * w + x) * 3 + c] - q[(y * w + x) * 3 + c];
        diff += std::fabs(m) / 16;
        ++blocks;
      }
  return blocks == 0 ? 0 : diff / blocks;
}

// The generated root shared by the read-only tests (generated once per process).
const std::string& generated_root() {
  static test::TempDir dir("c17");
  static const std::string root = [] {
    generate_coco2017_synthetic(dir / "root", small());
    return dir / "root";
  }();
  return root;
}

}  // namespace

TEST(Coco2017Synthetic, SameSeedSameBytesAndEnsure) {
  test::TempDir dir("c17s");
  auto o = small();
  o.train_images = 6;
  o.val_images = 3;
  const auto r = generate_coco2017_synthetic(dir / "a", o);
  EXPECT_TRUE(r.generated);
  EXPECT_GE(r.train_annotations, 6);
  generate_coco2017_synthetic(dir / "b", o);
  const auto a = tree(dir / "a");
  EXPECT_EQ(a.size(), 6u + 3u + 2u + 1u);
  EXPECT_TRUE(a == tree(dir / "b"));
  EXPECT_TRUE(a.count("train2017/000000000006.jpg") && a.count("val2017/000000000003.jpg") &&
              a.count("annotations/instances_train2017.json") && a.count("annotations/instances_val2017.json"));
  EXPECT_THROW(generate_coco2017_synthetic(dir / "a", o), InvalidArgument);
  // ensure: nothing rewritten when present; other options refused; across ranks rank 0 writes.
  const auto before = fs::last_write_time(fs::path(dir / "a") / "annotations/instances_val2017.json");
  EXPECT_FALSE(ensure_coco2017_synthetic(dir / "a", o).generated);
  EXPECT_EQ(before, fs::last_write_time(fs::path(dir / "a") / "annotations/instances_val2017.json"));
  auto o2 = o;
  o2.seed = 8;
  EXPECT_THROW(ensure_coco2017_synthetic(dir / "a", o2), DataError);
  test_support::Group group(2);
  std::vector<Coco2017SyntheticReport> reports(2);
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k)
    threads.emplace_back([&, k] {
      test_support::ThreadComm comm(group, k);
      reports[static_cast<std::size_t>(k)] = ensure_coco2017_synthetic(dir / "c", o2, &comm);
    });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(reports[0].generated);
  EXPECT_FALSE(reports[1].generated);
  EXPECT_NE(tree(dir / "c").at("annotations/instances_train2017.json"), a.at("annotations/instances_train2017.json"));
  o.classes = 7;
  EXPECT_THROW(generate_coco2017_synthetic(dir / "d", o), InvalidArgument);
}

// Boxes (floats) and polygons (doubles) are written in their shortest form and read back the same.
TEST(Coco2017Synthetic, ShortestFloatsInTheJson) {
  CocoFile f;
  f.images.push_back({1, "a.jpg", 10, 10});
  f.categories.push_back({3, "circle", std::nullopt});
  CocoAnnotation a;
  a.id = 1, a.image_id = 1, a.category_id = 3, a.bbox = {0.1f, 23.07f, 2, 1e-3f};
  a.segmentation.kind = Segmentation::Kind::polygons;
  a.segmentation.polygons = {{59.57, 29.4, 80.51, 31.07, 1.0 / 3.0, 7}};
  f.annotations.push_back(a);
  f.build_index();
  const std::string text = to_coco_json(f);
  EXPECT_NE(text.find("[0.1,23.07,2.0,0.001]"), std::string::npos) << text;
  EXPECT_NE(text.find("[[59.57,29.4,80.51,31.07,0.3333333333333333,7.0]]"), std::string::npos) << text;
  EXPECT_EQ(parse_coco_json(text, "t.json").annotations, f.annotations);
}

// Note [Polygon coordinates are doubles]: at a tie of the fifth-of-a-pixel grid the float would
// move the vertex; the file's double is kept.
TEST(Coco2017Synthetic, PolygonTiesKeepTheFilesDoubles) {
  const CocoFile f = parse_coco_json(
      std::string(R"({"images": [{"id": 1, "file_name": "a.jpg", "height": 10, "width": 20}],
        "categories": [{"id": 1, "name": "x"}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [7.7, 1, 4.6, 5.3],
                         "segmentation": [[10, 1, 12.3, 6.1, 7.7, 6.3]]}]})"),
      "ties.json");
  const auto& poly = f.annotations[0].segmentation.polygons[0];
  EXPECT_EQ(poly[2], 12.3);
  nn::Polygons as_float = {poly};
  for (double& v : as_float[0]) v = static_cast<float>(v);
  // pycocotools 2.0 (maskApi.c built from source) gives area 11 for the doubles, 12 for the
  // float32 values of the same coordinates.
  EXPECT_EQ(nn::rle_area(nn::rle_from_polygons({poly}, 10, 20)), 11u);
  EXPECT_EQ(nn::rle_area(nn::rle_from_polygons(as_float, 10, 20)), 12u);
}

// The tool writes the layout and refuses bad arguments (nothing left behind).
TEST(Coco2017Synthetic, Tool) {
  test::TempDir dir("c17t");
  const std::string tool = std::string(BENCHHOST_BINARY_DIR) + "/bin/make_coco2017_synthetic";
  ASSERT_TRUE(fs::exists(tool)) << tool;
  const std::string out = dir / "t";
  ASSERT_EQ(std::system(fmt::format("{} --out {} --train 3 --val 2 --min-size 32 --max-size 40 --seed 4 >/dev/null", tool,
                                    out).c_str()),
            0);
  EXPECT_EQ(open_coco2017_split(out, "val2017").samples.size(), 2u);
  EXPECT_TRUE(fs::exists(fs::path(out) / "coco2017_synthetic.txt"));
  EXPECT_NE(std::system(fmt::format("{} --out {} >/dev/null 2>&1", tool, out).c_str()), 0);  // exists
  EXPECT_NE(std::system(fmt::format("{} --out {} --classes 9 >/dev/null 2>&1", tool, dir / "u").c_str()), 0);
  EXPECT_FALSE(fs::exists(dir / "u"));
  for (const auto& e : fs::directory_iterator(dir.path)) EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos);
}

// Every annotation of both splits against what the generator drew.
TEST(Coco2017Synthetic, RoundTripThroughTheReader) {
  const auto o = small();
  double worst_iou = 1, worst_exact_iou = 1, worst_box = 0, worst_pixels = 0;
  int objects = 0, crowds = 0;
  for (int split = 0; split < 2; ++split) {
    const Coco2017Split s = open_coco2017_split(generated_root(), split == 0 ? "train2017" : "val2017");
    const Coco2017Dataset ds(s);
    ASSERT_EQ(ds.size(), split == 0 ? o.train_images : o.val_images);
    for (std::int64_t i = 0; i < ds.size(); ++i) {
      const SyntheticInstanceImage r = render_coco2017_synthetic(o, split, static_cast<int>(i));
      const InstanceSample smp = ds.load(i);
      const std::int64_t h = r.pixels.size(0), w = r.pixels.size(1);
      ASSERT_EQ(smp.image.shape(), r.pixels.shape());
      EXPECT_EQ(smp.image_id, i + 1);
      worst_pixels = std::max(worst_pixels, block_difference(smp.image, r.pixels));
      const InstanceTarget& t = smp.target;
      std::size_t k = 0, c = 0;
      for (const auto& obj : r.objects) {
        if (obj.iscrowd) {
          ASSERT_LT(c, t.crowd_masks.size()) << "image " << i;
          const Tensor m = nn::rle_decode(t.crowd_masks[c]);
          EXPECT_TRUE(std::equal(m.data<std::uint8_t>(), m.data<std::uint8_t>() + m.numel(), obj.mask.data<std::uint8_t>()))
              << "crowd RLE of image " << i << " is not the group's pixels";
          EXPECT_EQ(s.category_of_label[static_cast<std::size_t>(t.crowd_labels[c])], obj.category_id);
          ++c, ++crowds;
          continue;
        }
        ASSERT_LT(k, t.masks.size()) << "image " << i;
        EXPECT_EQ(s.category_of_label[static_cast<std::size_t>(t.labels[k])], obj.category_id);
        // The box (xyxy, +1 convention) against the polygon's bounds.
        double x0 = 1e9, y0 = 1e9, x1 = -1e9, y1 = -1e9;
        for (const auto& p : t.masks[k])
          for (std::size_t v = 0; v + 1 < p.size(); v += 2)
            x0 = std::min(x0, p[v]), x1 = std::max(x1, p[v]), y0 = std::min(y0, p[v + 1]), y1 = std::max(y1, p[v + 1]);
        // The reader's x2 = x + w - 1 is the last pixel column; x + w is where the pixels end.
        const float* b = t.boxes.data() + 4 * k;
        for (const double d : {b[0] - x0, b[1] - y0, b[2] + 1 - x1, b[3] + 1 - y1})
          worst_box = std::max(worst_box, std::fabs(d));
        // The polygon rasterised by the SDK covers the drawn object.
        worst_iou = std::min(worst_iou, iou(raster(t.masks[k], h, w), obj.mask));
        // Against the exact geometry (no fifth-of-a-pixel grid; ties where an edge passes
        // through a pixel centre, as the 45-degree diamond edges do, broken by nudging the centre
        // left and down, which agrees best with the SDK's rule): only a boundary's worth of
        // pixels differ, which only small objects feel. Measured over objects of >= 100 pixels.
        if (obj.area >= 100)
          worst_exact_iou = std::min(worst_exact_iou, iou(point_in_polygon(t.masks[k], h, w), obj.mask));
        // area = the mask's pixels.
        const auto& ann = s.coco->annotations[static_cast<std::size_t>(
            std::find_if(s.coco->annotations.begin(), s.coco->annotations.end(),
                         [&](const CocoAnnotation& a) { return a.id == t.annotation_ids[k]; }) -
            s.coco->annotations.begin())];
        EXPECT_EQ(ann.area, static_cast<double>(nn::rle_area(nn::rle_from_polygons(t.masks[k], h, w))));
        ++k, ++objects;
      }
      EXPECT_EQ(k, t.masks.size()) << "image " << i;
      EXPECT_EQ(c, t.crowd_masks.size()) << "image " << i;
    }
  }
  EXPECT_LE(worst_box, 1.0);
  EXPECT_GE(worst_iou, 0.9);
  EXPECT_GE(worst_exact_iou, 0.9);
  EXPECT_LT(worst_pixels, 3.0);
  EXPECT_GT(crowds, 0);
  std::printf("[ round trip ] %d objects, %d crowd groups; worst box-to-polygon-bounds %.3f px, worst IoU %.6f "
              "(SDK rasteriser) %.4f (exact point-in-polygon, objects >= 100 px); JPEG block difference <= %.2f\n",
              objects, crowds, worst_box, worst_iou, worst_exact_iou, worst_pixels);
}

TEST(Coco2017Synthetic, CategoryMapping) {
  const Coco2017Split s = open_coco2017_split(generated_root(), "val");
  const std::map<std::int64_t, std::int64_t> want = {{1, 1}, {3, 2}, {7, 3}, {12, 4}, {18, 5}, {25, 6}};
  EXPECT_EQ(s.label_of_category, want);
  EXPECT_EQ(s.num_classes, 6);
  EXPECT_EQ(s.category_of_label, (std::vector<std::int64_t>{0, 1, 3, 7, 12, 18, 25}));
  // The training dataset: crowd regions never among the targets; its samples a subset.
  const auto train = make_coco2017_train(generated_root());
  EXPECT_GT(train->size(), 0);
  EXPECT_LE(train->size(), small().train_images);
  for (std::int64_t i = 0; i < train->size(); ++i) {
    const data::Sample smp = train->get(i);
    const Tensor labels = smp.at("labels");
    for (std::int64_t k = 0; k < labels.size(0); ++k) {
      EXPECT_GE(labels.data<std::int64_t>()[k], 1);
      EXPECT_LE(labels.data<std::int64_t>()[k], 6);
    }
  }
  EXPECT_EQ(coco2017_synthetic_categories(2).size(), 2u);
  EXPECT_EQ(coco2017_synthetic_categories(2)[0].name, "circle");  // id 3, then square 7
}

// get() carries the same targets as load(), polygons packed into tensors; many threads load the
// same samples as one.
TEST(Coco2017Synthetic, TensorsAndThreads) {
  const auto ds = make_coco2017_eval(generated_root());
  std::vector<data::Sample> one;
  for (std::int64_t i = 0; i < ds->size(); ++i) one.push_back(ds->get(i));
  std::vector<std::vector<data::Sample>> many(4, std::vector<data::Sample>(static_cast<std::size_t>(ds->size())));
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (std::int64_t j = 0; j < ds->size(); ++j) {
        const std::int64_t i = (j + 3 * k) % ds->size();
        many[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] = ds->get(i);
      }
    });
  for (auto& t : threads) t.join();
  for (std::int64_t i = 0; i < ds->size(); ++i) {
    const InstanceSample s = ds->load(i);
    const auto polys = polygons_of(one[static_cast<std::size_t>(i)]);
    ASSERT_EQ(polys.size(), s.target.masks.size());
    for (std::size_t k = 0; k < polys.size(); ++k) EXPECT_EQ(polys[k], s.target.masks[k]);
    for (int k = 0; k < 4; ++k)
      for (const auto& [name, tensor] : one[static_cast<std::size_t>(i)].fields()) {
        const Tensor other = many[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)].at(name);
        ASSERT_EQ(tensor.shape(), other.shape()) << name;
        EXPECT_EQ(0, std::memcmp(tensor.contiguous().raw_data(), other.contiguous().raw_data(),
                                 static_cast<std::size_t>(tensor.nbytes())))
            << name << " of sample " << i << " differs on thread " << k;
      }
  }
}

namespace {

// A hand-made split: val2017 with images 5 (40x30) and 9 (20x16); categories 90 and 2 (listed
// out of order); annotation 11 a polygon of category 90, 12 a crowd RLE, 13 a 1-pixel-wide box,
// 14 a box straddling the border. Replacements patch the JSON text before it is written.
struct HandSplit {
  test::TempDir dir{"c17h"};
  std::string root = dir / "root";
  std::string json_path() const { return (fs::path(root) / "annotations/instances_val2017.json").string(); }
  std::string json = R"({"images": [{"id": 9, "file_name": "b.jpg", "height": 16, "width": 20},
                                     {"id": 5, "file_name": "a.jpg", "height": 30, "width": 40}],
    "categories": [{"id": 90, "name": "ninety"}, {"id": 2, "name": "two"}],
    "annotations": [
      {"id": 11, "image_id": 5, "category_id": 90, "bbox": [2, 3, 10, 8], "area": 80, "iscrowd": 0,
       "segmentation": [[2, 3, 12, 3, 12, 11, 2, 11]]},
      {"id": 12, "image_id": 5, "category_id": 2, "bbox": [0, 0, 2, 1], "area": 2, "iscrowd": 1,
       "segmentation": {"size": [30, 40], "counts": [0, 1, 29, 1, 1169]}},
      {"id": 13, "image_id": 9, "category_id": 2, "bbox": [4, 4, 1, 5], "area": 5, "iscrowd": 0,
       "segmentation": [[4, 4, 5, 4, 5, 9, 4, 9]]},
      {"id": 14, "image_id": 9, "category_id": 90, "bbox": [15, 10, 10, 10], "area": 30, "iscrowd": 0,
       "segmentation": [[15, 10, 20, 10, 20, 16, 15, 16]]}]})";
  HandSplit() {
    fs::create_directories(fs::path(root) / "val2017");
    fs::create_directories(fs::path(root) / "annotations");
    for (const auto& [name, h, w] : {std::tuple{"a.jpg", 30, 40}, std::tuple{"b.jpg", 16, 20}}) {
      const Tensor px = Tensor::full({h, w, 3}, 100.0, DType::u8);
      const auto bytes = data::encode_jpeg(px, 90);
      test::write_text((fs::path(root) / "val2017" / name).string(), std::string(bytes.begin(), bytes.end()));
    }
  }
  void write(const std::string& from = "", const std::string& to = "") {
    std::string text = json;
    if (!from.empty()) {
      const auto at = text.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      text.replace(at, from.size(), to);
    }
    test::write_text(json_path(), text);
  }
};

// The DataError open_coco2017_split throws after one replacement ("" when none).
std::string error_of(HandSplit& h, const std::string& from, const std::string& to) {
  h.write(from, to);
  try {
    open_coco2017_split(h.root, "val2017");
  } catch (const DataError& e) {
    return e.message();
  }
  return "";
}

}  // namespace

TEST(Coco2017Reader, ReferenceTargets) {
  HandSplit h;
  h.write();
  const Coco2017Split s = open_coco2017_split(h.root, "val2017");
  // Sorted ids get 1..K: 2 -> 1, 90 -> 2.
  EXPECT_EQ(s.label_of_category, (std::map<std::int64_t, std::int64_t>{{2, 1}, {90, 2}}));
  ASSERT_EQ(s.samples.size(), 2u);  // by image id: 5 then 9
  EXPECT_EQ(s.coco->images[s.samples[0]].id, 5);
  const InstanceTarget a = coco2017_target(s, s.samples[0]);
  EXPECT_EQ(a.boxes, (std::vector<float>{2, 3, 11, 10}));  // x2 = x + w - 1
  EXPECT_EQ(a.labels, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(a.annotation_ids, (std::vector<std::int64_t>{11}));
  ASSERT_EQ(a.crowd_masks.size(), 1u);  // the crowd region kept apart
  EXPECT_EQ(a.crowd_annotation_ids, (std::vector<std::int64_t>{12}));
  EXPECT_EQ(a.crowd_labels, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(nn::rle_area(a.crowd_masks[0]), 2u);
  const InstanceTarget b = coco2017_target(s, s.samples[1]);
  // Box 13 (w = 1) is empty as x1 == x2 and dropped; box 14 is clipped to the image.
  EXPECT_EQ(b.annotation_ids, (std::vector<std::int64_t>{14}));
  EXPECT_EQ(b.boxes, (std::vector<float>{15, 10, 19, 15}));
  // Training: an image whose boxes are all at most 1 pixel wide or high is removed.
  h.write(R"("bbox": [15, 10, 10, 10])", R"("bbox": [15, 10, 10, 1])");
  Coco2017Options train;
  train.remove_images_without_annotations = true;
  EXPECT_EQ(open_coco2017_split(h.root, "val2017", train).samples.size(), 1u);
  EXPECT_EQ(open_coco2017_split(h.root, "val2017").samples.size(), 2u);
}

TEST(Coco2017Reader, CorruptInputsNameFileImageAndAnnotation) {
  HandSplit h;
  const std::string file = h.json_path();
  auto expect_error = [&](const std::string& from, const std::string& to, const std::string& ids,
                          const std::string& what) {
    const std::string msg = error_of(h, from, to);
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find(ids), std::string::npos) << "want '" << ids << "' in: " << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "want '" << what << "' in: " << msg;
  };
  EXPECT_EQ(error_of(h, "", ""), "");
  expect_error(R"("file_name": "b.jpg")", R"("file_name": "c.jpg")", "image id 9", "c.jpg does not exist");
  expect_error(R"("category_id": 90, "bbox": [2)", R"("category_id": 91, "bbox": [2)", "image id 5, annotation id 11",
               "no category has id 91");
  expect_error("[[2, 3, 12, 3, 12, 11, 2, 11]]", "[[2, 3, 12, 3, 12, 11, 2]]", "image id 5, annotation id 11",
               "even number >= 6");
  expect_error("[[2, 3, 12, 3, 12, 11, 2, 11]]", "[[2, 3, 12, 3]]", "image id 5, annotation id 11", "found 4");
  // JSON cannot hold a non-finite number (1e999 overflows and the parser refuses the file); a
  // file built in memory can.
  EXPECT_NE(error_of(h, "[[2, 3, 12, 3, 12, 11, 2, 11]]", "[[2, 3, 12, 3, 1e999, 11, 2, 11]]").find(file),
            std::string::npos);
  h.write();
  CocoFile f = read_coco_json(file);
  f.annotations[0].segmentation.polygons[0][3] = std::nan("");
  try {
    validate_coco2017(f, (fs::path(h.root) / "val2017").string(), true);
    ADD_FAILURE() << "a NaN polygon coordinate passed";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find(file + ": image id 5, annotation id 11: polygon 0 has a non-finite coordinate"),
              std::string::npos)
        << e.message();
  }
  f = read_coco_json(file);
  f.annotations[3].bbox[1] = INFINITY;
  EXPECT_THROW(validate_coco2017(f, (fs::path(h.root) / "val2017").string(), true), DataError);
  expect_error(R"("size": [30, 40], "counts": [0, 1, 29, 1, 1169])", R"("size": [40, 30], "counts": [0, 1, 29, 1, 1169])",
               "image id 5, annotation id 12", "RLE size [40, 30] differs from the image's [30, 40]");
  expect_error("[15, 10, 10, 10]", "[15, 10, -3, 10]", "image id 9, annotation id 14", "negative width");
  expect_error("[15, 10, 10, 10]", "[15, 10, 10, 0]", "image id 9, annotation id 14", "is empty");
  expect_error("[[15, 10, 20, 10, 20, 16, 15, 16]]", R"({"size": [16, 20], "counts": [320]})",
               "image id 9, annotation id 14", "expected polygons");
  // Without the directories or files.
  EXPECT_THROW(open_coco2017_split(h.dir / "nowhere", "val2017"), DataError);
  fs::remove(file);
  EXPECT_THROW(open_coco2017_split(h.root, "val2017"), DataError);
  EXPECT_THROW(open_coco2017_split(h.root, "test2017"), InvalidArgument);
}

// pycocotools' annToMask of every generated annotation against our rasterisation.
TEST(Coco2017Synthetic, PycocotoolsAnnToMask) {
  if (std::system("/usr/bin/python3 -c 'import pycocotools.coco' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 has no pycocotools: the annToMask reference check did not run";
  const Coco2017Split s = open_coco2017_split(generated_root(), "val2017");
  const std::string cmd = std::string("/usr/bin/python3 ") + BENCHHOST_SOURCE_DIR + "/tests/coco/pycocotools_masks.py " +
                          s.annotations_path;
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) text += buf;
  ASSERT_EQ(::pclose(p), 0) << text;
  std::istringstream in(text);
  std::int64_t id = 0, h = 0, w = 0;
  std::string counts;
  double worst = 1;
  std::size_t n = 0;
  while (in >> id >> h >> w >> counts) {
    const auto it = std::find_if(s.coco->annotations.begin(), s.coco->annotations.end(),
                                 [&](const CocoAnnotation& a) { return a.id == id; });
    ASSERT_NE(it, s.coco->annotations.end());
    const Tensor ref = nn::rle_decode(nn::rle_from_string(counts, h, w));
    Tensor ours;
    if (it->segmentation.kind == Segmentation::Kind::rle) {
      ours = nn::rle_decode(nn::Rle{it->segmentation.rle.height, it->segmentation.rle.width, it->segmentation.rle.counts});
    } else {
      ours = raster(it->segmentation.polygons, h, w);
    }
    worst = std::min(worst, iou(ref, ours));
    ++n;
  }
  EXPECT_EQ(n, s.coco->annotations.size());
  EXPECT_GE(worst, 0.99);
  std::printf("[ pycocotools ] %zu annotations, worst IoU %.6f\n", n, worst);
}

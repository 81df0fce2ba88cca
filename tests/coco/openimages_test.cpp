// The OpenImages-MLPerf dataset: the box transforms against hand computation, the image transform
// against an independent normalise-then-resize written here from PyTorch's formula, the flip,
// crowd and degenerate boxes, the padded collate, and every read problem as a DataError naming
// the file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "benchhost/data/file.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/error.hpp"
#include "common.hpp"
#include "openimages.hpp"

using namespace benchhost;
using namespace benchhost::coco;
namespace fs = std::filesystem;

namespace {

// One image 100 wide, 50 high with boxes of every kind (category ids used directly).
const char* kOneImage = R"({
  "categories": [{"id": 0, "name": "a", "supercategory": null}, {"id": 1, "name": "b", "supercategory": null}],
  "images": [{"id": 42, "file_name": "0123456789abcdef.jpg", "height": 50, "width": 100}],
  "annotations": [
    {"id": 1, "image_id": 42, "category_id": 1, "bbox": [10, 5, 20, 10], "area": 200, "iscrowd": 0},
    {"id": 2, "image_id": 42, "category_id": 0, "bbox": [90, 40, 20, 20], "area": 400, "iscrowd": 0},
    {"id": 3, "image_id": 42, "category_id": 0, "bbox": [30, 30, 0, 5], "area": 0, "iscrowd": 0},
    {"id": 4, "image_id": 42, "category_id": 1, "bbox": [120, 10, 5, 5], "area": 25, "iscrowd": 0},
    {"id": 5, "image_id": 42, "category_id": 1, "bbox": [-4, 20, 14, 10], "area": 140, "iscrowd": 1}
  ]
})";

// A smooth colour field with detail in both directions, so a flip and the resampling matter.
Tensor test_image(int h, int w) {
  Tensor t = Tensor::empty({h, w, 3}, DType::u8);
  auto* p = t.data<std::uint8_t>();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      p[(y * w + x) * 3 + 0] = static_cast<std::uint8_t>(20 + 2 * x);
      p[(y * w + x) * 3 + 1] = static_cast<std::uint8_t>(30 + 4 * y);
      p[(y * w + x) * 3 + 2] = static_cast<std::uint8_t>(128 + 60 * std::sin(0.2 * x + 0.1 * y));
    }
  return t;
}

void make_layout(const std::string& root, const std::string& split, const std::string& json, const Tensor& image,
                 const std::string& file = "0123456789abcdef.jpg") {
  fs::create_directories(fs::path(root) / split / "data");
  fs::create_directories(fs::path(root) / split / "labels");
  test::write_text((fs::path(root) / split / "labels" / "openimages-mlperf.json").string(), json);
  const auto jpeg = data::encode_jpeg(image, 95);
  test::write_text((fs::path(root) / split / "data" / file).string(), std::string(jpeg.begin(), jpeg.end()));
}

// PyTorch: ToTensor, Normalize, then F.interpolate(bilinear, align_corners=False), all in double.
std::vector<double> reference_image(const Tensor& hwc, int out_h, int out_w, bool flip) {
  const int h = static_cast<int>(hwc.size(0)), w = static_cast<int>(hwc.size(1));
  const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};
  auto src = [&](int c, int y, int x) {
    if (flip) x = w - 1 - x;
    return (hwc.data<std::uint8_t>()[(y * w + x) * 3 + c] / 255.0 - mean[c]) / stdv[c];
  };
  auto coord = [](int o, int in, int out, int& i0, int& i1, double& l) {
    double s = (o + 0.5) * static_cast<double>(in) / out - 0.5;
    if (s < 0) s = 0;
    i0 = static_cast<int>(s);
    i1 = i0 < in - 1 ? i0 + 1 : i0;
    l = s - i0;
  };
  std::vector<double> out(static_cast<std::size_t>(3) * out_h * out_w);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < out_h; ++y)
      for (int x = 0; x < out_w; ++x) {
        int y0, y1, x0, x1;
        double ly, lx;
        coord(y, h, out_h, y0, y1, ly);
        coord(x, w, out_w, x0, x1, lx);
        out[(static_cast<std::size_t>(c) * out_h + y) * out_w + x] =
            (1 - ly) * ((1 - lx) * src(c, y0, x0) + lx * src(c, y0, x1)) + ly * ((1 - lx) * src(c, y1, x0) + lx * src(c, y1, x1));
      }
  return out;
}

std::vector<float> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

}  // namespace

TEST(OpenImagesTransforms, TargetClampsDropsDegenerateKeepsCrowd) {
  const CocoFile f = parse_coco_json(std::string(kOneImage), "one.json");
  const DetectionTarget t = coco_target(f, 0);
  // Box 1 as is; box 2 clamped to the 100x50 image; box 3 (w = 0) and box 4 (outside: x1 = x2 =
  // 100 after clamping) dropped; box 5 (crowd) clamped and kept.
  EXPECT_EQ(t.boxes, (std::vector<float>{10, 5, 30, 15, 90, 40, 100, 50, 0, 20, 10, 30}));
  EXPECT_EQ(t.labels, (std::vector<std::int64_t>{1, 0, 1}));
  EXPECT_EQ(t.iscrowd, (std::vector<std::uint8_t>{0, 0, 1}));
}

TEST(OpenImagesTransforms, FlipAndResizeMoveBoxesExactly) {
  DetectionTarget t;
  t.boxes = {10, 5, 30, 15, 90, 40, 100, 50};
  t.labels = {1, 0};
  hflip_boxes(t, 100);
  EXPECT_EQ(t.boxes, (std::vector<float>{70, 5, 90, 15, 0, 40, 10, 50}));
  // 100 wide, 50 high -> 800 x 800: x times 8, y times 16.
  resize_boxes(t, 50, 100, 800, 800);
  EXPECT_EQ(t.boxes, (std::vector<float>{560, 80, 720, 240, 0, 640, 80, 800}));
  // Non-integral ratios as torchvision computes them: float(out) / float(in).
  DetectionTarget u;
  u.boxes = {3, 3, 7, 7};
  resize_boxes(u, 3, 7, 5, 11);
  EXPECT_EQ(u.boxes, (std::vector<float>{3 * (11.0f / 7.0f), 3 * (5.0f / 3.0f), 7 * (11.0f / 7.0f), 7 * (5.0f / 3.0f)}));
  EXPECT_THROW(resize_boxes(u, 0, 7, 5, 11), InvalidArgument);
}

TEST(OpenImagesDataset, TrainSampleMatchesTheReferenceTransform) {
  test::TempDir dir("train");
  const Tensor img = test_image(50, 100);
  make_layout(dir / "root", "train", kOneImage, img);
  // The reference sees the decoded JPEG, not `img`.
  const Tensor decoded = data::read_image(dir / "root/train/data/0123456789abcdef.jpg");
  for (const int size : {64, 160}) {
    DetectionTransform tr;
    tr.out_height = size;
    tr.out_width = size + 8;  // not square: the two axes must not be mixed up
    const OpenImagesDataset ds(open_openimages_split(dir / "root", "train"), tr);
    ASSERT_EQ(ds.size(), 1);
    EXPECT_EQ(ds.source(0), (fs::path(dir / "root") / "train/data/0123456789abcdef.jpg").string());
    int flips = 0;
    for (std::int64_t epoch = 0; epoch < 8; ++epoch) {
      const data::SampleContext ctx{0, epoch, 7};
      const data::Sample s = ds.get(ctx);
      Rng rng = ctx.rng();
      const bool flip = rng.uniform() < 0.5f;  // the one draw (Note [RetinaNet reference transforms])
      flips += flip;
      EXPECT_EQ(s.at("image").shape(), (Shape{3, size, size + 8}));
      const std::vector<double> ref = reference_image(decoded, size, size + 8, flip);
      const std::vector<float> got = values(s.at("image"));
      double worst = 0;
      for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(ref[i] - got[i]));
      EXPECT_LT(worst, 2e-5) << "size " << size << " flip " << flip;
      const float rx = static_cast<float>(size + 8) / 100.0f, ry = static_cast<float>(size) / 50.0f;
      const std::vector<float> want =
          flip ? std::vector<float>{70 * rx, 5 * ry, 90 * rx, 15 * ry, 0 * rx, 40 * ry, 10 * rx, 50 * ry, 90 * rx,
                                    20 * ry, 100 * rx, 30 * ry}
               : std::vector<float>{10 * rx, 5 * ry, 30 * rx, 15 * ry, 90 * rx, 40 * ry, 100 * rx, 50 * ry, 0 * rx,
                                    20 * ry, 10 * rx, 30 * ry};
      EXPECT_EQ(values(s.at("boxes")), want);
      EXPECT_EQ(s.at("boxes").shape(), (Shape{3, 4}));
      EXPECT_EQ(s.at("labels").dtype(), DType::i64);
      EXPECT_EQ(std::vector<std::int64_t>(s.at("labels").data<std::int64_t>(), s.at("labels").data<std::int64_t>() + 3),
                (std::vector<std::int64_t>{1, 0, 1}));
      EXPECT_EQ(s.at("image_id").data<std::int64_t>()[0], 42);
      EXPECT_EQ(s.at("orig_size").data<std::int64_t>()[0], 50);
      EXPECT_EQ(s.at("orig_size").data<std::int64_t>()[1], 100);
      // Same context, same sample.
      EXPECT_EQ(values(ds.get(ctx).at("image")), got);
    }
    EXPECT_GT(flips, 0);
    EXPECT_LT(flips, 8);
  }
}

TEST(OpenImagesDataset, EvalNeverFlipsAndHwcLayout) {
  test::TempDir dir("eval");
  const Tensor img = test_image(50, 100);
  make_layout(dir / "root", "validation", kOneImage, img);
  const Tensor decoded = data::read_image(dir / "root/validation/data/0123456789abcdef.jpg");
  const auto ds = make_openimages_eval(dir / "root", 96);
  const std::vector<double> ref = reference_image(decoded, 96, 96, false);
  for (std::int64_t epoch = 0; epoch < 4; ++epoch) {
    const data::Sample s = ds->get(data::SampleContext{0, epoch, 3});
    const std::vector<float> got = values(s.at("image"));
    for (std::size_t i = 0; i < ref.size(); i += 97) ASSERT_NEAR(got[i], ref[i], 2e-5);
    EXPECT_EQ(values(s.at("boxes"))[0], 10 * 0.96f);
  }
  DetectionTransform hwc;
  hwc.train = false;
  hwc.out_height = hwc.out_width = 96;
  hwc.layout = data::Layout::hwc;
  const OpenImagesDataset h(open_openimages_split(dir / "root", "validation"), hwc);
  const data::Sample s = h.get(0);
  ASSERT_EQ(s.at("image").shape(), (Shape{96, 96, 3}));
  for (int c = 0; c < 3; ++c)
    for (int p : {0, 1234, 96 * 96 - 1})
      EXPECT_NEAR(s.at("image").data<float>()[p * 3 + c], ref[static_cast<std::size_t>(c) * 96 * 96 + p], 2e-5);
}

TEST(OpenImagesDataset, NormalisationValues) {
  // A flat image: every output pixel is (v / 255 - mean) / std of the decoded value.
  test::TempDir dir("norm");
  Tensor flat = Tensor::empty({32, 48, 3}, DType::u8);
  for (std::int64_t i = 0; i < flat.numel(); ++i) flat.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i % 3 == 0 ? 200 : i % 3 == 1 ? 100 : 30);
  const std::string json = R"({"categories": [{"id": 0, "name": "a"}],
    "images": [{"id": 1, "file_name": "0123456789abcdef.jpg", "height": 32, "width": 48}], "annotations": []})";
  make_layout(dir / "root", "train", json, flat);
  const Tensor decoded = data::read_image(dir / "root/train/data/0123456789abcdef.jpg");
  const auto ds = make_openimages_train(dir / "root", 40);
  const data::Sample s = ds->get(0);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < 3; ++c) {
    const double v = decoded.data<std::uint8_t>()[c];
    const double want = (v / 255.0 - mean[c]) / stdv[c];
    for (int p = 0; p < 40 * 40; p += 37) EXPECT_NEAR(s.at("image").data<float>()[c * 1600 + p], want, 1e-5);
  }
  // No annotations: G = 0.
  EXPECT_EQ(s.at("boxes").shape(), (Shape{0, 4}));
  EXPECT_EQ(s.at("labels").shape(), (Shape{0}));
}

TEST(OpenImagesDataset, PaddedCollate) {
  data::Sample a{{"image", Tensor::full({3, 2, 2}, 1.0)},
                 {"boxes", Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4})},
                 {"labels", Tensor::from_vector_i64({3, 1}, {2})},
                 {"image_id", Tensor::from_vector_i64({9}, {})},
                 {"orig_size", Tensor::from_vector_i64({10, 20}, {2})}};
  data::Sample b{{"image", Tensor::full({3, 2, 2}, 2.0)},
                 {"boxes", Tensor::zeros({0, 4})},
                 {"labels", Tensor::from_vector_i64({}, {0})},
                 {"image_id", Tensor::from_vector_i64({11}, {})},
                 {"orig_size", Tensor::from_vector_i64({30, 40}, {2})}};
  const data::TensorDict batch = detection_collate({a, b});
  EXPECT_EQ(batch.names(), (std::vector<std::string>{"image", "boxes", "labels", "num_boxes", "image_id", "orig_size"}));
  EXPECT_EQ(batch.at("image").shape(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(batch.at("boxes").shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(values(batch.at("boxes")), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0}));
  const auto* l = batch.at("labels").data<std::int64_t>();
  EXPECT_EQ(std::vector<std::int64_t>(l, l + 4), (std::vector<std::int64_t>{3, 1, -1, -1}));
  const auto* n = batch.at("num_boxes").data<std::int64_t>();
  EXPECT_EQ(n[0], 2);
  EXPECT_EQ(n[1], 0);
  EXPECT_EQ(batch.at("image_id").data<std::int64_t>()[1], 11);
  EXPECT_EQ(batch.at("orig_size").shape(), (Shape{2, 2}));
  // Only empty images: G is 1, all padding.
  const data::TensorDict empty = detection_collate({b, b});
  EXPECT_EQ(empty.at("boxes").shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(empty.at("num_boxes").data<std::int64_t>()[0], 0);
  // Wrong field shapes are refused.
  data::Sample bad = a;
  bad.set("labels", Tensor::from_vector_i64({1}, {1}));
  EXPECT_THROW(detection_collate({bad}), DataError);
}

namespace {
void expect_data_error_naming(const std::function<void()>& f, const std::string& name) {
  try {
    f();
    ADD_FAILURE() << "no DataError; expected one naming " << name;
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find(name), std::string::npos) << e.message();
  }
}
}  // namespace

TEST(OpenImagesDataset, EveryReadProblemIsADataErrorNamingTheFile) {
  test::TempDir dir("errors");
  const std::string root = dir / "root";
  expect_data_error_naming([&] { open_openimages_split(root, "train"); }, root);
  fs::create_directories(root);
  expect_data_error_naming([&] { open_openimages_split(root, "train"); }, root + "/train");
  fs::create_directories(root + "/train");
  expect_data_error_naming([&] { open_openimages_split(root, "train"); }, root + "/train/data");
  fs::create_directories(root + "/train/data");
  expect_data_error_naming([&] { open_openimages_split(root, "train"); }, root + "/train/labels/openimages-mlperf.json");
  EXPECT_THROW(open_openimages_split(root, "val"), InvalidArgument);

  // The image named in the JSON is absent.
  make_layout(root, "train", kOneImage, test_image(50, 100), "other.jpg");
  const std::string image = (fs::path(root) / "train/data/0123456789abcdef.jpg").string();
  const auto ds = make_openimages_train(root, 32);
  expect_data_error_naming([&] { ds->get(0); }, image);
  // A file that does not decode.
  test::write_text(image, "\xff\xd8\xff\xe0 not really a jpeg");
  expect_data_error_naming([&] { ds->get(0); }, image);
  // A JPEG whose data ends early.
  const auto jpeg = data::encode_jpeg(test_image(50, 100), 90);
  test::write_text(image, std::string(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() / 2)));
  expect_data_error_naming([&] { ds->get(0); }, image);
  // A size differing from the JSON's.
  const auto wrong = data::encode_jpeg(test_image(50, 99), 90);
  test::write_text(image, std::string(wrong.begin(), wrong.end()));
  expect_data_error_naming([&] { ds->get(0); }, image);
  // The right file reads.
  test::write_text(image, std::string(jpeg.begin(), jpeg.end()));
  EXPECT_NO_THROW(ds->get(0));
  // Category ids that are not 0..K-1 cannot be class indices.
  std::string json = kOneImage;
  json.replace(json.find("\"id\": 1, \"name\": \"b\""), 7, "\"id\": 2");
  test::write_text(root + "/train/labels/openimages-mlperf.json", json);
  expect_data_error_naming([&] { open_openimages_split(root, "train"); }, root + "/train/labels/openimages-mlperf.json");
}

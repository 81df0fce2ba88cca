// The planted-shapes generator: same seed same bytes, the reader accepts what it writes, boxes lie
// inside their images and are exact, categories follow FiftyOne's convention, ensure across ranks.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "benchhost/data/file.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/data/pipeline.hpp"
#include "benchhost/data/sampler.hpp"
#include "benchhost/error.hpp"
#include "common.hpp"
#include "common/thread_comm.hpp"
#include "openimages.hpp"
#include "synthetic.hpp"

using namespace benchhost;
using namespace benchhost::coco;
namespace fs = std::filesystem;

namespace {

OpenImagesSyntheticOptions small() {
  OpenImagesSyntheticOptions o;
  o.train_images = 40;
  o.val_images = 6;
  o.min_size = 48;
  o.max_size = 72;
  o.seed = 5;
  return o;
}

// Every file under root (relative path -> bytes).
std::map<std::string, std::string> tree(const std::string& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[fs::relative(e.path(), root).string()] = test::bytes_of(e.path().string());
  return out;
}

}  // namespace

TEST(OpenImagesSynthetic, SameSeedSameBytes) {
  test::TempDir dir("det");
  const auto o = small();
  const auto r = generate_openimages_synthetic(dir / "a", o);
  EXPECT_TRUE(r.generated);
  EXPECT_EQ(r.train_images, 40);
  EXPECT_GT(r.train_boxes, 40);
  generate_openimages_synthetic(dir / "b", o);
  const auto a = tree(dir / "a"), b = tree(dir / "b");
  EXPECT_EQ(a.size(), 40u + 6u + 3u);
  EXPECT_TRUE(a == b);
  auto o2 = o;
  o2.seed = 6;
  generate_openimages_synthetic(dir / "c", o2);
  EXPECT_NE(tree(dir / "c").at("train/labels/openimages-mlperf.json"), a.at("train/labels/openimages-mlperf.json"));
  // No staging directory is left behind; an existing target is refused.
  for (const auto& e : fs::directory_iterator(dir.path)) EXPECT_NE(e.path().filename().string()[0], '.');
  EXPECT_THROW(generate_openimages_synthetic(dir / "a", o), InvalidArgument);
  o2.classes = 7;
  EXPECT_THROW(generate_openimages_synthetic(dir / "d", o2), InvalidArgument);
}

TEST(OpenImagesSynthetic, ReaderAcceptsItAndBoxesAreInside) {
  test::TempDir dir("read");
  const auto o = small();
  generate_openimages_synthetic(dir / "root", o);
  int crowds = 0;
  for (const char* split : {"train", "validation"}) {
    const OpenImagesSplit s = open_openimages_split(dir / "root", split);
    const CocoFile& f = *s.coco;
    EXPECT_EQ(s.num_classes, 4);
    ASSERT_EQ(f.categories.size(), 4u);
    const char* names[] = {"circle", "ring", "square", "triangle"};
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(f.categories[c].id, c);
      EXPECT_EQ(f.categories[c].name, names[c]);
      EXPECT_FALSE(f.categories[c].supercategory.has_value());
    }
    EXPECT_EQ(f.images.size(), std::string(split) == "train" ? 40u : 6u);
    std::set<std::string> files;
    for (std::size_t i = 0; i < f.images.size(); ++i) {
      const CocoImage& im = f.images[i];
      EXPECT_EQ(im.id, static_cast<std::int64_t>(i) + 1);
      EXPECT_GE(im.height, 48);
      EXPECT_LE(im.width, 72);
      EXPECT_EQ(im.file_name.size(), 16u + 4u);
      files.insert(im.file_name);
      const auto& anns = f.annotations_of(i);
      EXPECT_GE(anns.size(), 1u);
      EXPECT_LE(anns.size(), 6u);
      // The file's size is the JSON's.
      const data::ImageInfo info = data::read_image_info(
          data::read_file((fs::path(s.data_dir) / im.file_name).string()), im.file_name);
      EXPECT_EQ(info.height, im.height);
      EXPECT_EQ(info.width, im.width);
      for (const std::size_t k : anns) {
        const CocoAnnotation& a = f.annotations[k];
        EXPECT_GE(a.bbox[0], 0);
        EXPECT_GE(a.bbox[1], 0);
        EXPECT_GT(a.bbox[2], 0);
        EXPECT_GT(a.bbox[3], 0);
        EXPECT_LE(a.bbox[0] + a.bbox[2], im.width);
        EXPECT_LE(a.bbox[1] + a.bbox[3], im.height);
        EXPECT_EQ(a.area, static_cast<double>(a.bbox[2]) * a.bbox[3]);
        crowds += a.iscrowd;
        if (!a.iscrowd) {  // a single shape: 10-60% of the short side (rounded; at least 6 px)
          const double side = std::min(im.height, im.width);
          EXPECT_LE(std::max(a.bbox[2], a.bbox[3]), std::round(0.6 * side));
          EXPECT_GE(std::max(a.bbox[2], a.bbox[3]), std::min(6.0, 0.1 * side) - 1);
        }
      }
    }
    EXPECT_EQ(files.size(), f.images.size());
    // The dataset reads every image (sizes checked against the JSON).
    const OpenImagesDataset ds(s, DetectionTransform{});
    for (std::int64_t i = 0; i < ds.size(); i += 7) EXPECT_NO_THROW(ds.get(i));
  }
  EXPECT_GT(crowds, 0);
}

// The box is the tight box of the shape's pixels: with one object per image nothing covers it, so
// the pixels of the object's colour lie inside its box and touch all four edges. And the JPEG in
// the layout is that image (up to compression), the annotation that box.
TEST(OpenImagesSynthetic, BoxesAreTight) {
  test::TempDir dir("tight");
  auto o = small();
  o.max_objects = 1;
  generate_openimages_synthetic(dir / "root", o);
  const OpenImagesSplit s = open_openimages_split(dir / "root", "train");
  int checked = 0;
  for (int i = 0; i < o.train_images; ++i) {
    const SyntheticImage r = render_openimages_synthetic(o, 0, i);
    ASSERT_EQ(r.objects.size(), 1u);
    const auto& obj = r.objects[0];
    const CocoAnnotation& a = s.coco->annotations[s.coco->annotations_of(static_cast<std::size_t>(i)).at(0)];
    EXPECT_EQ(a.bbox, obj.bbox);
    EXPECT_EQ(a.category_id, obj.category_id);
    EXPECT_EQ(a.iscrowd, obj.iscrowd);
    const int h = static_cast<int>(r.pixels.size(0)), w = static_cast<int>(r.pixels.size(1));
    const auto* p = r.pixels.data<std::uint8_t>();
    const int x0 = static_cast<int>(obj.bbox[0]), y0 = static_cast<int>(obj.bbox[1]);
    const int x1 = x0 + static_cast<int>(obj.bbox[2]) - 1, y1 = y0 + static_cast<int>(obj.bbox[3]) - 1;
    bool left = false, right = false, top = false, bottom = false;
    int outside = 0;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const std::uint8_t* q = p + (y * w + x) * 3;
        if (q[0] != obj.colour[0] || q[1] != obj.colour[1] || q[2] != obj.colour[2]) continue;
        if (x < x0 || x > x1 || y < y0 || y > y1) ++outside;
        left |= x == x0, right |= x == x1, top |= y == y0, bottom |= y == y1;
      }
    EXPECT_EQ(outside, 0) << "image " << i;
    EXPECT_TRUE(left && right && top && bottom) << "image " << i;
    // The file holds this image.
    const Tensor file = data::read_image((fs::path(s.data_dir) / s.coco->images[static_cast<std::size_t>(i)].file_name).string());
    ASSERT_EQ(file.shape(), r.pixels.shape());
    // JPEG loses much of the pixel noise, so compare means of 4x4 blocks.
    double diff = 0;
    int blocks = 0;
    for (int by = 0; by + 4 <= h; by += 4)
      for (int bx = 0; bx + 4 <= w; bx += 4)
        for (int c = 0; c < 3; ++c) {
          double m = 0;
          for (int y = by; y < by + 4; ++y)
            for (int x = bx; x < bx + 4; ++x) m += file.data<std::uint8_t>()[(y * w + x) * 3 + c] - p[(y * w + x) * 3 + c];
          diff += std::fabs(m) / 16;
          ++blocks;
        }
    EXPECT_LT(diff / blocks, 3.0) << "image " << i;
    ++checked;
  }
  EXPECT_EQ(checked, o.train_images);
}

TEST(OpenImagesSynthetic, EnsureAcrossRanks) {
  test::TempDir dir("ens");
  auto o = small();
  o.train_images = 3;
  o.val_images = 2;
  test_support::Group group(2);
  std::vector<OpenImagesSyntheticReport> reports(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      test_support::ThreadComm comm(group, r);
      reports[static_cast<std::size_t>(r)] = ensure_openimages_synthetic(dir / "e", o, &comm);
    });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(reports[0].generated);
  EXPECT_FALSE(reports[1].generated);
  EXPECT_FALSE(ensure_openimages_synthetic(dir / "e", o).generated);
  o.seed = 2;
  EXPECT_THROW(ensure_openimages_synthetic(dir / "e", o), DataError);
  // A directory without the marker (real data) is left alone.
  fs::create_directories(dir / "real");
  EXPECT_FALSE(ensure_openimages_synthetic(dir / "real", o).generated);
}

// The generated data through the parallel loader with the padded collate: batches hold every
// sample's boxes (num_boxes), and 1 and 2 threads give identical batches (Note [Per-sample
// randomness]).
TEST(OpenImagesSynthetic, LoaderWithPaddedCollate) {
  test::TempDir dir("loader");
  auto o = small();
  o.train_images = 13;
  generate_openimages_synthetic(dir / "root", o);
  const auto ds = make_openimages_train(dir / "root", 64);
  auto run = [&](int threads) {
    data::LoaderOptions lo;
    lo.batch_size = 4;
    lo.num_threads = threads;
    lo.seed = 11;
    lo.collate = detection_collate;
    data::DataLoader loader(ds, data::Sampler({ds->size(), 0, 1, true, 3}), lo);
    loader.start_epoch(1);
    std::vector<data::Batch> out;
    while (auto b = loader.next()) out.push_back(*b);
    return out;
  };
  const auto one = run(1), two = run(2);
  ASSERT_EQ(one.size(), 4u);  // 4 + 4 + 4 + 1
  ASSERT_EQ(two.size(), one.size());
  std::int64_t boxes = 0;
  for (std::size_t k = 0; k < one.size(); ++k) {
    const data::Batch& b = one[k];
    EXPECT_EQ(b.indices, two[k].indices);
    EXPECT_EQ(b["image"].shape(), (Shape{b.size(), 3, 64, 64}));
    const std::int64_t g = b["boxes"].size(1);
    EXPECT_EQ(b["boxes"].shape(), (Shape{b.size(), g, 4}));
    for (std::int64_t i = 0; i < b.size(); ++i) {
      const std::int64_t n = b["num_boxes"].data<std::int64_t>()[i];
      const auto expect = static_cast<std::int64_t>(ds->get(data::SampleContext{b.indices[i], 1, 11}).at("labels").numel());
      EXPECT_EQ(n, expect);
      boxes += n;
    }
    for (const char* field : {"image", "boxes", "labels", "num_boxes", "image_id", "orig_size"}) {
      const Tensor x = b[field].contiguous(), y = two[k][field].contiguous();
      ASSERT_EQ(x.nbytes(), y.nbytes());
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << field;
    }
  }
  EXPECT_GT(boxes, 13);
}

// The KiTS19 reader: the split, the checks with their messages, the stored foreground boxes, and
// the training Dataset's crop and augmentation.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "benchhost/data/npy.hpp"
#include "benchhost/error.hpp"
#include "common.hpp"
#include "kits19.hpp"

using namespace benchhost;
using namespace benchhost::kits19;

namespace {

// A case whose label holds the given boxes of class 1 and 2 (later boxes overwrite).
struct Blob {
  std::uint8_t cls;
  Box box;
};

void write_case(const test::TempDir& dir, const std::string& id, const Shape& dhw, const std::vector<Blob>& blobs) {
  Tensor x = Tensor::empty({1, dhw[0], dhw[1], dhw[2]}, DType::f32);
  Tensor y = Tensor::zeros({1, dhw[0], dhw[1], dhw[2]}, DType::u8);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i);
  for (const Blob& b : blobs)
    for (std::int64_t d = b.box.lo[0]; d < b.box.hi[0]; ++d)
      for (std::int64_t h = b.box.lo[1]; h < b.box.hi[1]; ++h)
        for (std::int64_t w = b.box.lo[2]; w < b.box.hi[2]; ++w) y.data<std::uint8_t>()[(d * dhw[1] + h) * dhw[2] + w] = b.cls;
  data::write_npy(dir / ("case_" + id + "_x.npy"), x);
  data::write_npy(dir / ("case_" + id + "_y.npy"), y);
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string error_of(const std::string& dir, const Kits19IndexOptions& o = {{4, 4, 4}}) {
  try {
    Kits19Index index(dir, o);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Kits19Reader, SplitAndBoxes) {
  test::TempDir dir("split");
  write_case(dir, "00000", {10, 12, 14}, {{1, {{1, 1, 1}, {4, 5, 6}}}, {2, {{2, 2, 2}, {3, 3, 3}}}, {1, {{7, 7, 7}, {9, 9, 9}}}});
  write_case(dir, "00001", {10, 10, 10}, {{1, {{0, 0, 0}, {2, 2, 2}}}});
  write_case(dir, "00002", {10, 10, 10}, {{2, {{0, 0, 0}, {2, 2, 2}}}});
  write_text(dir / "evaluation_cases.txt", "00001\r\n\n");
  write_text(dir / "notes.txt", "ignored");
  const Kits19Index index(dir.path.string(), {{8, 8, 8}});
  ASSERT_EQ(index.train().size(), 2u);
  ASSERT_EQ(index.eval().size(), 1u);
  EXPECT_EQ(index.train()[0].id, "00000");
  EXPECT_EQ(index.train()[1].id, "00002");
  EXPECT_EQ(index.eval()[0].id, "00001");
  const Kits19Case& c = index.train()[0];
  EXPECT_TRUE(c.has_class[0] && c.has_class[1]);
  // Class 1: the first box minus the class-2 voxel is still one component with box [1,4)x[1,5)x[1,6)
  // (volume 60); the second [7,9)^3 (volume 8). Ascending order of volume.
  ASSERT_EQ(c.boxes[0].size(), 2u);
  EXPECT_EQ(c.boxes[0][0], (Box{{7, 7, 7}, {9, 9, 9}}));
  EXPECT_EQ(c.boxes[0][1], (Box{{1, 1, 1}, {4, 5, 6}}));
  ASSERT_EQ(c.boxes[1].size(), 1u);
  EXPECT_EQ(c.boxes[1][0], (Box{{2, 2, 2}, {3, 3, 3}}));
  EXPECT_FALSE(index.train()[1].has_class[0]);
  EXPECT_TRUE(index.train()[1].has_class[1]);
  const Kits19EvalCases eval(index);
  EXPECT_EQ(eval.size(), 1);
  EXPECT_EQ(eval.image(0).shape(), (Shape{1, 10, 10, 10}));
  EXPECT_EQ(eval.label(0).dtype(), DType::u8);
  EXPECT_THROW(eval.image(1), InvalidArgument);
}

TEST(Kits19Reader, Errors) {
  {
    EXPECT_NE(error_of("/nonexistent/kits").find("does not exist"), std::string::npos);
    test::TempDir dir("empty");
    EXPECT_NE(error_of(dir.path.string()).find("holds no case"), std::string::npos);
  }
  {
    test::TempDir dir("pair");
    write_case(dir, "00000", {8, 8, 8}, {});
    std::filesystem::remove(dir / "case_00000_y.npy");
    write_text(dir / "evaluation_cases.txt", "");
    const auto e = error_of(dir.path.string());
    EXPECT_NE(e.find("has no label"), std::string::npos) << e;
    EXPECT_NE(e.find("case_00000_y.npy"), std::string::npos) << e;
  }
  {
    test::TempDir dir("evalfile");
    write_case(dir, "00000", {8, 8, 8}, {});
    EXPECT_NE(error_of(dir.path.string()).find("evaluation_cases.txt is missing"), std::string::npos);
    write_text(dir / "evaluation_cases.txt", "00000\n123\n");
    auto e = error_of(dir.path.string());
    EXPECT_NE(e.find("line 2"), std::string::npos) << e;
    write_text(dir / "evaluation_cases.txt", "00007\n");
    e = error_of(dir.path.string());
    EXPECT_NE(e.find("lists case 00007"), std::string::npos) << e;
  }
  {
    test::TempDir dir("shape");
    write_case(dir, "00000", {8, 8, 8}, {});
    data::write_npy(dir / "case_00000_y.npy", Tensor::zeros({1, 8, 8, 9}, DType::u8));
    write_text(dir / "evaluation_cases.txt", "");
    auto e = error_of(dir.path.string());
    EXPECT_NE(e.find("has shape [1, 8, 8, 8] but"), std::string::npos) << e;
    data::write_npy(dir / "case_00000_y.npy", Tensor::zeros({1, 8, 8, 8}, DType::i32));
    e = error_of(dir.path.string());
    EXPECT_NE(e.find("case_00000_y.npy holds i32"), std::string::npos) << e;
    data::write_npy(dir / "case_00000_y.npy", Tensor::zeros({8, 8, 8}, DType::u8));
    e = error_of(dir.path.string());
    EXPECT_NE(e.find("expected [1, D, H, W]"), std::string::npos) << e;
    data::write_npy(dir / "case_00000_y.npy", Tensor::zeros({1, 8, 8, 8}, DType::u8));
    e = error_of(dir.path.string(), {{8, 9, 8}});
    EXPECT_NE(e.find("smaller than the training patch"), std::string::npos) << e;
    Tensor bad = Tensor::zeros({1, 8, 8, 8}, DType::u8);
    bad.data<std::uint8_t>()[(3 * 8 + 4) * 8 + 5] = 7;
    data::write_npy(dir / "case_00000_y.npy", bad);
    e = error_of(dir.path.string());
    EXPECT_NE(e.find("case_00000_y.npy holds the label value 7 at voxel [3, 4, 5]"), std::string::npos) << e;
  }
}

namespace {

struct SmallSet {
  test::TempDir dir{"ds"};
  std::unique_ptr<Kits19Index> index;
  SmallSet() {
    // Case 0: one small kidney box (class 1), one tumour box (class 2). Case 1: a kidney box larger
    // than the patch along d.
    write_case(dir, "00000", {20, 16, 18}, {{1, {{3, 4, 5}, {6, 8, 9}}}, {2, {{14, 10, 12}, {16, 12, 13}}}});
    write_case(dir, "00001", {20, 16, 18}, {{1, {{2, 3, 4}, {19, 6, 7}}}});
    write_text(dir / "evaluation_cases.txt", "");
    index = std::make_unique<Kits19Index>(dir.path.string(), Kits19IndexOptions{{8, 8, 8}});
  }
};

}  // namespace

TEST(Kits19Dataset, CropsFollowTheReference) {
  SmallSet s;
  Kits19TrainOptions o;
  o.patch = {8, 8, 8};
  const Kits19TrainDataset ds(*s.index, o);
  ASSERT_EQ(ds.size(), 2);
  std::array<std::set<std::int64_t>, 3> uniform_corners;
  int foreground = 0, draws = 0;
  for (int i = 0; i < 4000; ++i) {
    const Kits19Case& c = s.index->train()[static_cast<std::size_t>(i % 2)];
    Rng rng(99, static_cast<std::uint64_t>(i));
    Rng probe = rng;
    const bool fg = static_cast<double>(probe.uniform()) < o.oversampling;
    const auto corner = ds.draw_crop(c, rng);
    ++draws;
    for (int a = 0; a < 3; ++a) {
      ASSERT_GE(corner[a], 0);
      ASSERT_LE(corner[a] + o.patch[a], c.image.size(a + 1));
    }
    if (!fg) {
      for (int a = 0; a < 3; ++a) uniform_corners[static_cast<std::size_t>(a)].insert(corner[a]);
      continue;
    }
    ++foreground;
    // A foreground crop holds the whole box when the box fits, and lies inside it when not.
    bool any = false;
    for (int k = 0; k < 2; ++k)
      for (const Box& b : c.boxes[static_cast<std::size_t>(k)]) {
        bool ok = true;
        for (int a = 0; a < 3; ++a) {
          const std::int64_t lo = corner[a], hi = corner[a] + o.patch[a];
          const bool fits = b.hi[a] - b.lo[a] <= o.patch[a];
          ok = ok && (fits ? (lo <= b.lo[a] && b.hi[a] <= hi) : (b.lo[a] <= lo && hi <= b.hi[a]));
        }
        any = any || ok;
      }
    EXPECT_TRUE(any) << "case " << i % 2 << " corner " << corner[0] << "," << corner[1] << "," << corner[2];
  }
  EXPECT_NEAR(static_cast<double>(foreground) / draws, 0.4, 0.03);
  // Uniform crops: randrange(dim - p) never reaches dim - p (the reference's quirk).
  const std::array<std::int64_t, 3> dims{20, 16, 18};
  for (int a = 0; a < 3; ++a) {
    EXPECT_EQ(*uniform_corners[static_cast<std::size_t>(a)].begin(), 0);
    EXPECT_EQ(*uniform_corners[static_cast<std::size_t>(a)].rbegin(), dims[static_cast<std::size_t>(a)] - 8 - 1);
    EXPECT_EQ(static_cast<std::int64_t>(uniform_corners[static_cast<std::size_t>(a)].size()), dims[static_cast<std::size_t>(a)] - 8);
  }
}

TEST(Kits19Dataset, SampleIsTheFlippedCrop) {
  SmallSet s;
  Kits19TrainOptions o;
  o.patch = {8, 8, 8};
  o.brightness_probability = 0;
  o.noise_probability = 0;
  const Kits19TrainDataset ds(*s.index, o);
  int flipped[3] = {0, 0, 0};
  for (int i = 0; i < 300; ++i) {
    const data::SampleContext ctx{i % 2, i / 2, 17};
    const data::Sample sample = ds.get(ctx);
    ASSERT_EQ(sample["image"].shape(), (Shape{1, 8, 8, 8}));
    ASSERT_EQ(sample["label"].dtype(), DType::u8);
    // Replay the draws: crop, then one flip draw per axis.
    Rng rng = ctx.rng();
    const Kits19Case& c = s.index->train()[static_cast<std::size_t>(i % 2)];
    const auto corner = ds.draw_crop(c, rng);
    bool flip[3];
    for (int a = 0; a < 3; ++a) flip[a] = rng.uniform() < 1.0f / 3.0f, flipped[a] += flip[a];
    const std::int64_t H = 16, W = 18;
    for (std::int64_t d = 0; d < 8; ++d)
      for (std::int64_t h = 0; h < 8; ++h)
        for (std::int64_t w = 0; w < 8; ++w) {
          const std::int64_t sd = corner[0] + (flip[0] ? 7 - d : d), sh = corner[1] + (flip[1] ? 7 - h : h),
                             sw = corner[2] + (flip[2] ? 7 - w : w);
          const std::int64_t si = (sd * H + sh) * W + sw, oi = (d * 8 + h) * 8 + w;
          ASSERT_EQ(sample["image"].data<float>()[oi], c.image.data<float>()[si]);
          ASSERT_EQ(sample["label"].data<std::uint8_t>()[oi], c.label.data<std::uint8_t>()[si]);
        }
  }
  for (int a = 0; a < 3; ++a) EXPECT_NEAR(flipped[a] / 300.0, 1.0 / 3.0, 0.08);
}

TEST(Kits19Dataset, BrightnessAndNoise) {
  SmallSet s;
  Kits19TrainOptions o;
  o.patch = {8, 8, 8};
  o.flip_probability = 0;
  o.brightness_probability = 1;
  o.noise_probability = 0;
  const Kits19TrainDataset bright(*s.index, o);
  o.brightness_probability = 0;
  o.noise_probability = 0;
  const Kits19TrainDataset plain(*s.index, o);
  double lo = 10, hi = 0;
  for (int i = 0; i < 200; ++i) {
    const data::SampleContext ctx{0, i, 3};
    const Tensor a = bright.get(ctx)["image"], b = plain.get(ctx)["image"];
    // The same crop, scaled by 1 + U(0.7, 1.3), computed in double and rounded (numpy's f32 * f64).
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    std::int64_t k = 1;
    while (pb[k] == 0) ++k;
    const double scale = static_cast<double>(pa[k]) / static_cast<double>(pb[k]);
    lo = std::min(lo, scale), hi = std::max(hi, scale);
    for (std::int64_t j = 0; j < a.numel(); ++j)
      ASSERT_NEAR(pa[j], pb[j] * scale, 1e-6 * std::abs(pb[j]) + 1e-6);
  }
  EXPECT_GE(lo, 1.7 - 1e-4);
  EXPECT_LT(hi, 2.3 + 1e-4);
  EXPECT_LT(lo, 1.75);
  EXPECT_GT(hi, 2.25);
  // Noise: std of the difference is U(0, 0.1).
  o.noise_probability = 1;
  const Kits19TrainDataset noisy(*s.index, o);
  double max_std = 0;
  for (int i = 0; i < 50; ++i) {
    const data::SampleContext ctx{1, i, 3};
    const Tensor a = noisy.get(ctx)["image"], b = plain.get(ctx)["image"];
    double ss = 0;
    for (std::int64_t j = 0; j < a.numel(); ++j) ss += std::pow(a.data<float>()[j] - b.data<float>()[j], 2);
    max_std = std::max(max_std, std::sqrt(ss / static_cast<double>(a.numel())));
  }
  EXPECT_GT(max_std, 0.07);
  EXPECT_LT(max_std, 0.115);
  // Deterministic per (seed, epoch, index).
  const data::SampleContext ctx{1, 4, 9};
  EXPECT_EQ(std::memcmp(noisy.get(ctx)["image"].raw_data(), noisy.get(ctx)["image"].raw_data(), 8 * 8 * 8 * 4), 0);
}

TEST(Kits19Dataset, PatchLargerThanCaseIsAnError) {
  SmallSet s;
  Kits19TrainOptions o;
  o.patch = {8, 17, 8};
  EXPECT_THROW(Kits19TrainDataset(*s.index, o), DataError);
}

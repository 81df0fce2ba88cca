// The planted-kidney generator: determinism, both classes everywhere, the reader accepts it, and
// a per-voxel intensity threshold classifier stays far from what shape context can do.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "benchhost/data/npy.hpp"
#include "benchhost/error.hpp"
#include "benchhost/metrics/dice.hpp"
#include "common.hpp"
#include "common/thread_comm.hpp"
#include "kits19.hpp"
#include "synthetic.hpp"

using namespace benchhost;
using namespace benchhost::kits19;

namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Tensor threshold(const Tensor& image, float t1, float t2) {
  Tensor out = Tensor::empty(image.shape(), DType::u8);
  const float* p = image.data<float>();
  for (std::int64_t i = 0; i < image.numel(); ++i)
    out.data<std::uint8_t>()[i] = static_cast<std::uint8_t>((p[i] >= t1) + (p[i] >= t2));
  return out;
}

}  // namespace

TEST(Kits19Synthetic, DeterministicAndComplete) {
  test::TempDir dir("syn");
  Kits19SyntheticOptions o;
  o.train_cases = 6;
  o.eval_cases = 2;
  o.seed = 5;
  const auto r = generate_kits19_synthetic(dir / "a", o);
  EXPECT_TRUE(r.generated);
  generate_kits19_synthetic(dir / "b", o);
  o.seed = 6;
  generate_kits19_synthetic(dir / "c", o);
  bool differs = false;
  for (int id = 0; id < 8; ++id)
    for (const char* xy : {"x", "y"}) {
      const std::string name = fmt::format("case_{:05d}_{}.npy", id, xy);
      EXPECT_EQ(bytes_of(dir / ("a/" + name)), bytes_of(dir / ("b/" + name))) << name;
      differs = differs || bytes_of(dir / ("a/" + name)) != bytes_of(dir / ("c/" + name));
    }
  EXPECT_TRUE(differs);
  EXPECT_EQ(bytes_of(dir / "a/evaluation_cases.txt"), "00002\n00006\n");
  // No staging directory is left beside the output.
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  EXPECT_THROW(generate_kits19_synthetic(dir / "a", o), InvalidArgument);

  const Kits19Index index(dir / "a", {{48, 48, 48}});
  EXPECT_EQ(index.train().size(), 6u);
  EXPECT_EQ(index.eval().size(), 2u);
  for (const auto* set : {&index.train(), &index.eval()})
    for (const Kits19Case& c : *set) {
      bool present[3] = {false, false, false};
      for (std::int64_t i = 0; i < c.label.numel(); ++i) present[c.label.data<std::uint8_t>()[i]] = true;
      EXPECT_TRUE(present[1] && present[2]) << c.id;
      for (int a = 1; a <= 3; ++a) {
        EXPECT_GE(c.image.size(a), 48);
        EXPECT_LE(c.image.size(a), 64);
      }
    }
  for (const Kits19Case& c : index.train()) EXPECT_TRUE(c.has_class[0] && c.has_class[1]);
}

namespace {

// Mean over the 3x3x3 neighbourhood (clipped at the border) of a [1, D, H, W] volume.
Tensor box_mean(const Tensor& x) {
  const std::int64_t D = x.size(1), H = x.size(2), W = x.size(3);
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* p = x.data<float>();
  float* o = out.data<float>();
  for (std::int64_t d = 0; d < D; ++d)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t w = 0; w < W; ++w) {
        double sum = 0;
        int n = 0;
        for (std::int64_t a = std::max<std::int64_t>(d - 1, 0); a <= std::min(d + 1, D - 1); ++a)
          for (std::int64_t b = std::max<std::int64_t>(h - 1, 0); b <= std::min(h + 1, H - 1); ++b)
            for (std::int64_t c = std::max<std::int64_t>(w - 1, 0); c <= std::min(w + 1, W - 1); ++c, ++n)
              sum += p[(a * H + b) * W + c];
        o[(d * H + h) * W + w] = static_cast<float>(sum / n);
      }
  return out;
}

// The best thresholds (class = [x >= t1] + [x >= t2]) for `train`, searched on per-case
// histograms (bins of 0.1 from -3, thresholds on bin edges), then the mean Dice they score on
// `eval` (DiceScore on the thresholded volumes).
double threshold_dice(const std::vector<std::pair<Tensor, Tensor>>& train, const std::vector<std::pair<Tensor, Tensor>>& eval,
                      std::pair<float, float>* chosen = nullptr) {
  constexpr int kBins = 80;
  auto bin_of = [](float x) { return std::clamp(static_cast<int>(std::floor((x + 3.0f) / 0.1f)), 0, kBins - 1); };
  std::vector<std::array<std::array<std::int64_t, kBins>, 3>> hist;
  for (const auto& [image, label] : train) {
    auto& h = hist.emplace_back();
    for (auto& row : h) row.fill(0);
    for (std::int64_t i = 0; i < image.numel(); ++i) ++h[label.data<std::uint8_t>()[i]][bin_of(image.data<float>()[i])];
  }
  double best = -1;
  int e1 = 0, e2 = 0;
  for (int a = 1; a < kBins; ++a)
    for (int b = a + 1; b < kBins; ++b) {
      double total = 0;
      for (const auto& h : hist)
        for (int k = 1; k <= 2; ++k) {
          const int lo = k == 1 ? a : b, hi = k == 1 ? b : kBins;
          std::int64_t pred = 0, truth = 0, both = 0;
          for (int c = 0; c < 3; ++c)
            for (int e = lo; e < hi; ++e) pred += h[c][e];
          for (int e = 0; e < kBins; ++e) truth += h[k][e];
          for (int e = lo; e < hi; ++e) both += h[k][e];
          total += (2.0 * both + 1e-6) / (pred + truth + 1e-6);
        }
      if (total > best) best = total, e1 = a, e2 = b;
    }
  const float t1 = -3.0f + 0.1f * e1, t2 = -3.0f + 0.1f * e2;
  if (chosen) *chosen = {t1, t2};
  metrics::DiceScore dice;
  for (const auto& [image, label] : eval) dice.add(threshold(image, t1, t2), label);
  return dice.mean();
}

}  // namespace

TEST(Kits19Synthetic, ThresholdClassifierIsWeak) {
  test::TempDir dir("thr");
  Kits19SyntheticOptions o;  // the default 48 + 12 cases
  generate_kits19_synthetic(dir / "d", o);
  const Kits19Index index(dir / "d", {{48, 48, 48}});
  std::vector<std::pair<Tensor, Tensor>> train, eval, train_smooth, eval_smooth;
  for (const Kits19Case& c : index.train()) {
    train.emplace_back(c.image, c.label);
    train_smooth.emplace_back(box_mean(box_mean(c.image)), c.label);
  }
  metrics::DiceScore background;
  for (const Kits19Case& c : index.eval()) {
    eval.emplace_back(c.image, c.label);
    eval_smooth.emplace_back(box_mean(box_mean(c.image)), c.label);
    background.add(Tensor::zeros(c.label.shape(), DType::u8), c.label);
  }
  std::pair<float, float> t;
  const double per_voxel = threshold_dice(train, eval, &t);
  const double smoothed = threshold_dice(train_smooth, eval_smooth);
  std::printf("best per-voxel thresholds %.1f / %.1f: eval mean Dice %.3f; after two 3x3x3 means: %.3f\n", t.first,
              t.second, per_voxel, smoothed);
  EXPECT_LE(per_voxel, 0.65);
  EXPECT_GT(per_voxel, 0.05);  // the intensities do carry the classes
  // Neighbourhood context alone (no shape model at all) already does much better.
  EXPECT_GT(smoothed, per_voxel + 0.15);
  EXPECT_NEAR(background.mean(), 0.0, 1e-6);
}

// The tool writes the layout and refuses bad arguments.
TEST(Kits19Synthetic, Tool) {
  test::TempDir dir("tool");
  const std::string tool = std::string(BENCHHOST_BINARY_DIR) + "/bin/make_kits19_synthetic";
  ASSERT_TRUE(std::filesystem::exists(tool)) << tool;
  const std::string out = dir / "t";
  ASSERT_EQ(std::system(fmt::format("{} --out {} --train 2 --eval 1 --size-min 32 --size-max 33 --seed 4 >/dev/null", tool, out).c_str()), 0);
  const Kits19Index index(out, {{32, 32, 32}});
  EXPECT_EQ(index.train().size(), 2u);
  EXPECT_EQ(index.eval().size(), 1u);
  EXPECT_NE(std::system(fmt::format("{} --out {} >/dev/null 2>&1", tool, out).c_str()), 0);  // exists
  EXPECT_NE(std::system(fmt::format("{} --out {} --size-min 8 >/dev/null 2>&1", tool, dir / "u").c_str()), 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "u"));
}

TEST(Kits19Synthetic, EnsureAcrossRanks) {
  test::TempDir dir("ens");
  Kits19SyntheticOptions o;
  o.train_cases = 3;
  o.eval_cases = 1;
  test_support::Group group(2);
  std::vector<Kits19SyntheticReport> reports(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      test_support::ThreadComm comm(group, r);
      reports[static_cast<std::size_t>(r)] = ensure_kits19_synthetic(dir / "e", o, &comm);
    });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(reports[0].generated);
  EXPECT_FALSE(reports[1].generated);
  EXPECT_FALSE(ensure_kits19_synthetic(dir / "e", o).generated);
  o.seed = 2;
  EXPECT_THROW(ensure_kits19_synthetic(dir / "e", o), DataError);
}

// On generated cases: the index's stored boxes are scipy's (whole-volume labelling), and the
// training crop equals the reference's RandBalancedCrop driven by the same random stream.
TEST(Kits19Synthetic, BoxesAndCropsMatchTheReference) {
  if (!test::have_numpy_scipy()) GTEST_SKIP() << "/usr/bin/python3 with numpy and scipy is not installed";
  test::TempDir dir("ref");
  Kits19SyntheticOptions o;
  o.train_cases = 4;
  o.eval_cases = 1;
  o.seed = 21;
  generate_kits19_synthetic(dir / "s", o);
  const Kits19Index index(dir / "s", {{32, 32, 32}});
  Kits19TrainOptions t;
  t.patch = {32, 24, 40};
  t.oversampling = 0.6;  // both branches often
  const Kits19TrainDataset ds(index, t);
  for (const Kits19Case& c : index.train()) {
    for (int k = 0; k < 2; ++k) {
      const std::string cmd = fmt::format("/usr/bin/python3 {} {} {} {} {} {}", test::script("components_ref.py"),
                                          c.label_path, k + 1, dir / "l.npy", dir / "b.npy", dir / "t.npy");
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      const Tensor want = data::read_npy(dir / "t.npy");
      ASSERT_EQ(want.size(0), static_cast<std::int64_t>(c.boxes[static_cast<std::size_t>(k)].size())) << c.id;
      for (std::int64_t b = 0; b < want.size(0); ++b)
        for (int a = 0; a < 3; ++a) {
          EXPECT_EQ(want.data<std::int64_t>()[b * 6 + 2 * a], c.boxes[static_cast<std::size_t>(k)][static_cast<std::size_t>(b)].lo[a]);
          EXPECT_EQ(want.data<std::int64_t>()[b * 6 + 2 * a + 1], c.boxes[static_cast<std::size_t>(k)][static_cast<std::size_t>(b)].hi[a]);
        }
    }
    constexpr int kDraws = 200;
    const std::string cmd = fmt::format("/usr/bin/python3 {} {} {} {} {} {} 77 1000 {} {}", test::script("crop_ref.py"),
                                        c.label_path, t.patch[0], t.patch[1], t.patch[2], t.oversampling, kDraws,
                                        dir / "c.npy");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const Tensor want = data::read_npy(dir / "c.npy");
    ASSERT_EQ(want.shape(), (Shape{kDraws, 3}));
    for (int s = 0; s < kDraws; ++s) {
      Rng rng(77, static_cast<std::uint64_t>(1000 + s));
      const auto corner = ds.draw_crop(c, rng);
      for (int a = 0; a < 3; ++a)
        ASSERT_EQ(corner[static_cast<std::size_t>(a)], want.data<std::int64_t>()[s * 3 + a]) << c.id << " stream " << 1000 + s;
    }
  }
}

// The sliding-window inference against an independent numpy reference (sliding_window_ref.py)
// with a context-dependent model, so window placement, padding and weighting errors show.
#include <gtest/gtest.h>

#include <cmath>

#include "benchhost/data/npy.hpp"
#include "benchhost/random.hpp"
#include "common.hpp"
#include "sliding_window.hpp"

using namespace benchhost;
using namespace benchhost::kits19;

namespace {

// The model of sliding_window_ref.py: logits_c = a_c x + b_c mean(patch) + c_c pos.
Tensor context_model(const Tensor& patches, std::int64_t r, int* calls) {
  const float A[3] = {1.0f, -0.5f, 0.3f}, B[3] = {0.2f, 0.7f, -0.4f}, C[3] = {0.0f, 1.0f, -1.0f};
  const std::int64_t n = patches.size(0), v = r * r * r;
  Tensor out = Tensor::empty({n, 3, r, r, r}, DType::f32);
  const float* x = patches.data<float>();
  float* o = out.data<float>();
  for (std::int64_t b = 0; b < n; ++b) {
    double sum = 0;
    for (std::int64_t i = 0; i < v; ++i) sum += x[b * v + i];
    const auto mean = static_cast<float>(sum / static_cast<double>(v));
    for (int c = 0; c < 3; ++c)
      for (std::int64_t d = 0; d < r; ++d)
        for (std::int64_t h = 0; h < r; ++h)
          for (std::int64_t w = 0; w < r; ++w) {
            const std::int64_t i = (d * r + h) * r + w;
            const float pos = static_cast<float>(d + 2 * h + 3 * w) / static_cast<float>(6 * r);
            o[(b * 3 + c) * v + i] = A[c] * x[b * v + i] + B[c] * mean + C[c] * pos;
          }
  }
  ++*calls;
  return out;
}

void compare_with_reference(const Shape& vol, std::int64_t r, std::int64_t batch) {
  if (!test::have_numpy_scipy()) GTEST_SKIP() << "/usr/bin/python3 with numpy and scipy is not installed";
  test::TempDir dir("sw");
  Rng rng(7);
  Tensor image = Tensor::empty({1, vol[0], vol[1], vol[2]}, DType::f32);
  Tensor label = Tensor::empty({1, vol[0], vol[1], vol[2]}, DType::u8);
  for (std::int64_t i = 0; i < image.numel(); ++i) {
    image.data<float>()[i] = rng.normal();
    label.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(rng.below(3));
  }
  data::write_npy(dir / "x.npy", image.select(0, 0));
  data::write_npy(dir / "y.npy", label.select(0, 0));
  const std::string cmd = fmt::format("/usr/bin/python3 {} {} {} {} 0.5 -2.2 {} {}", test::script("sliding_window_ref.py"),
                                      dir / "x.npy", dir / "y.npy", r, dir / "out.npy", dir / "lab.npy");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Tensor want = data::read_npy(dir / "out.npy");
  const Tensor want_label = data::read_npy(dir / "lab.npy");

  SlidingWindowOptions o;
  o.roi = {r, r, r};
  o.batch = batch;
  int calls = 0;
  const auto got = sliding_window_inference(image, label, o, [&](const Tensor& p) { return context_model(p, r, &calls); });
  ASSERT_EQ(got.logits.shape(), want.shape());
  ASSERT_EQ(got.label.shape(), want_label.shape());
  const float* g = got.logits.data<float>();
  const float* w = want.data<float>();
  double worst = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(g[i] - w[i])));
  EXPECT_LE(worst, 1e-5);
  EXPECT_EQ(std::memcmp(got.label.data<std::uint8_t>(), want_label.data<std::uint8_t>(), want_label.nbytes()), 0);
  // The class map is the first-maximum argmax of the logits.
  const std::int64_t v = got.classes.numel();
  for (std::int64_t i = 0; i < v; ++i) {
    int best = 0;
    for (int c = 1; c < 3; ++c)
      if (g[c * v + i] > g[best * v + i]) best = c;
    ASSERT_EQ(got.classes.data<std::uint8_t>()[i], best) << i;
  }
  EXPECT_GT(calls, 0);
}

}  // namespace

// 21: cropped by 1 (21 % 4 = 1 < 2); 26: padded by 2 (1 + 1); 19: padded by 1 (0 + 1).
TEST(Kits19SlidingWindow, MatchesNumpyReference) { compare_with_reference({21, 26, 19}, 8, 1); }

// Batching windows changes nothing for a per-sample model.
TEST(Kits19SlidingWindow, MatchesNumpyReferenceBatched) { compare_with_reference({21, 26, 19}, 8, 5); }

// A dimension below the roi: 5 is cropped to 4, then padded to 8, and the final slice keeps 5
// (the reference slices with the uncropped size), one more than the cropped label.
TEST(Kits19SlidingWindow, MatchesNumpyReferenceSmallVolume) { compare_with_reference({5, 17, 12}, 8, 3); }

TEST(Kits19SlidingWindow, GaussianPatch) {
  // r = 4: g = exp(-x^2 / (2 * 0.5^2)) at x = -1.5, -0.5, 0.5, 1.5; cube root of the product over
  // 3 axes, normalised: w(i, j, k) = (g_i g_j g_k / g_c^3)^(1/3).
  const Tensor w = gaussian_weight_patch({4, 4, 4});
  auto g = [](double x) { return std::exp(-x * x / 0.5); };
  const double c = g(0.5);
  const double corner = std::cbrt(g(1.5) * g(1.5) * g(1.5) / (c * c * c));
  EXPECT_NEAR(w.data<float>()[0], corner, 1e-7);
  EXPECT_FLOAT_EQ(w.data<float>()[(1 * 4 + 2) * 4 + 1], 1.0f);
}

TEST(Kits19SlidingWindow, RejectsBadModelOutput) {
  Tensor image = Tensor::zeros({1, 8, 8, 8}, DType::f32);
  Tensor label = Tensor::zeros({1, 8, 8, 8}, DType::u8);
  SlidingWindowOptions o;
  o.roi = {8, 8, 8};
  EXPECT_THROW(sliding_window_inference(image, label, o, [](const Tensor&) { return Tensor::zeros({1, 2, 8, 8, 8}); }),
               InvalidArgument);
  EXPECT_THROW(sliding_window_inference(image, Tensor::zeros({1, 8, 8, 7}, DType::u8), o,
                                        [](const Tensor& p) { return Tensor::zeros({p.size(0), 3, 8, 8, 8}); }),
               InvalidArgument);
}

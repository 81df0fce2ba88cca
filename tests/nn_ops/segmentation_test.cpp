// Segmentation ops (nn/segmentation.hpp): instance norm over volumes and the DiceCE loss, checked
// against hand computations, finite differences, the other layout, numpy/PyTorch (when python3
// has them) and, on a machine with a GPU, the CUDA kernels against the CPU.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "benchhost/device.hpp"
#include "benchhost/error.hpp"
#include "benchhost/nn/segmentation.hpp"
#include "benchhost/precision.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::gradcheck;
using benchhost::testing::GradcheckOptions;
using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;
using V = std::vector<Tensor>;

const char* name_of(VolumeLayout l) { return volume_layout_name(l); }

// NCDHW <-> NDHWC copies.
Tensor to_ndhwc(const Tensor& t) { return t.permute({0, 2, 3, 4, 1}).contiguous(); }
Tensor to_ncdhw(const Tensor& t) { return t.permute({0, 4, 1, 2, 3}).contiguous(); }

Tensor labels_of(const std::vector<std::int32_t>& v, const Shape& shape, DType dtype) {
  Tensor t = Tensor::from_vector_i32(v, shape);
  return dtype == DType::i32 ? t : t.to(dtype);
}

Tensor random_labels(const Shape& shape, std::int64_t classes, std::uint64_t seed, DType dtype) {
  Rng r(seed, 3);
  std::int64_t count = 1;
  for (auto s : shape) count *= s;
  std::vector<std::int32_t> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = static_cast<std::int32_t>(r.below(static_cast<std::uint64_t>(classes)));
  return labels_of(v, shape, dtype);
}

// ============================================================================================
// Instance norm
// ============================================================================================

TEST(InstanceNorm3d, ForwardMatchesHandComputation) {
  // Two channels of four voxels; channel 0 = 1, 2, 3, 4 (mean 2.5, biased var 1.25),
  // channel 1 = 10, 10, 10, 14 (mean 11, var 3).
  const std::vector<float> xv = {1, 2, 3, 4, 10, 10, 10, 14};
  const Tensor x = Tensor::from_vector(xv, {1, 2, 1, 2, 2});
  const Tensor gamma = Tensor::from_vector({2.0f, -1.0f}, {2}), beta = Tensor::from_vector({0.5f, 1.0f}, {2});
  const double r0 = 1.0 / std::sqrt(1.25 + 1e-5), r1 = 1.0 / std::sqrt(3.0 + 1e-5);
  const double want[8] = {(1 - 2.5) * r0 * 2 + 0.5, (2 - 2.5) * r0 * 2 + 0.5, (3 - 2.5) * r0 * 2 + 0.5,
                          (4 - 2.5) * r0 * 2 + 0.5, (10 - 11.0) * r1 * -1 + 1, (10 - 11.0) * r1 * -1 + 1,
                          (10 - 11.0) * r1 * -1 + 1, (14 - 11.0) * r1 * -1 + 1};
  for (VolumeLayout layout : {VolumeLayout::ncdhw, VolumeLayout::ndhwc})
    for (bool relu : {false, true}) {
      SCOPED_TRACE(fmt::format("{} relu {}", name_of(layout), relu));
      InstanceNormSpec spec;
      spec.layout = layout;
      spec.fuse_relu = relu;
      InstanceNormSaved saved;
      const Tensor in = layout == VolumeLayout::ncdhw ? x : to_ndhwc(x);
      Tensor y = instance_norm3d_forward(in, gamma, beta, spec, saved);
      if (layout == VolumeLayout::ndhwc) y = to_ncdhw(y);
      for (int i = 0; i < 8; ++i) {
        const double w = relu ? std::max(0.0, want[i]) : want[i];
        EXPECT_NEAR(y.data<float>()[i], w, 2e-6) << "element " << i;
      }
      EXPECT_NEAR(saved.mean.data<float>()[0], 2.5, 1e-6);
      EXPECT_NEAR(saved.mean.data<float>()[1], 11.0, 1e-6);
      EXPECT_NEAR(saved.rstd.data<float>()[0], r0, 1e-6);
      EXPECT_NEAR(saved.rstd.data<float>()[1], r1, 1e-6);
      EXPECT_EQ(saved.output.defined(), relu);
    }
}

TEST(InstanceNorm3d, StatisticsStayAccurateOverALargeOffsetVolume) {
  // 64^3 voxels per plane around 1000: a one-pass f32 E[x^2] - E[x]^2 would lose the variance,
  // and one f32 accumulator over a 4096-voxel chunk (the NDHWC loop, or any loop not vectorised)
  // the mean's fourth decimal.
  const Tensor x = random_tensor({1, 2, 64, 64, 64}, 7, 999.0f, 1001.0f);
  const std::int64_t S = 64 * 64 * 64;
  for (VolumeLayout layout : {VolumeLayout::ncdhw, VolumeLayout::ndhwc}) {
    InstanceNormSaved saved;
    InstanceNormSpec spec;
    spec.layout = layout;
    instance_norm3d_forward(layout == VolumeLayout::ndhwc ? to_ndhwc(x) : x, Tensor::full({2}, 1.0),
                            Tensor::zeros({2}), spec, saved);
    for (std::int64_t c = 0; c < 2; ++c) {
      double m = 0, v = 0;
      for (std::int64_t s = 0; s < S; ++s) m += x.data<float>()[c * S + s];
      m /= S;
      for (std::int64_t s = 0; s < S; ++s) v += std::pow(x.data<float>()[c * S + s] - m, 2);
      v /= S;
      const bool cl = layout == VolumeLayout::ndhwc;
      EXPECT_NEAR(saved.mean.data<float>()[c], m, 1e-4) << "channels-last " << cl;
      EXPECT_NEAR(saved.rstd.data<float>()[c], 1.0 / std::sqrt(v + 1e-5), 1e-5 / std::sqrt(v)) << "channels-last " << cl;
    }
  }
}

class InstanceNormGrad : public ::testing::TestWithParam<std::tuple<VolumeLayout, bool>> {};

TEST_P(InstanceNormGrad, MatchesFiniteDifferences) {
  const auto [layout, relu] = GetParam();
  InstanceNormSpec spec;
  spec.layout = layout;
  spec.fuse_relu = relu;
  const Shape xs = layout == VolumeLayout::ncdhw ? Shape{2, 3, 2, 3, 4} : Shape{2, 2, 3, 4, 3};
  const V inputs = {random_tensor(xs, 11, -2.0f, 2.0f), random_tensor({3}, 12, 0.5f, 1.5f), random_tensor({3}, 13)};
  GradcheckOptions opt;
  opt.eps = 1e-3;
  opt.max_checks_per_input = 72;
  auto fwd = [&](const V& in) {
    InstanceNormSaved saved;
    return V{instance_norm3d_forward(in[0], in[1], in[2], spec, saved)};
  };
  auto bwd = [&](const V& in, const V& d) {
    InstanceNormSaved saved;
    instance_norm3d_forward(in[0], in[1], in[2], spec, saved);
    // The gradients accumulate: start from ones and subtract them to check the `+=`.
    Tensor dgamma = Tensor::full({3}, 1.0), dbeta = Tensor::full({3}, 1.0);
    Tensor dx = instance_norm3d_backward(d[0], in[0], in[1], saved, spec, dgamma, dbeta);
    for (int c = 0; c < 3; ++c) {
      dgamma.data<float>()[c] -= 1.0f;
      dbeta.data<float>()[c] -= 1.0f;
    }
    return V{dx, dgamma, dbeta};
  };
  const auto r = gradcheck(fwd, bwd, inputs, opt);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.checked, 72 + 3 + 3);
}

INSTANTIATE_TEST_SUITE_P(Layouts, InstanceNormGrad,
                         ::testing::Combine(::testing::Values(VolumeLayout::ncdhw, VolumeLayout::ndhwc),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(name_of(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_relu" : "_plain");
                         });

TEST(InstanceNorm3d, LayoutsAgreeAfterPermutation) {
  // 5 x 17 x 60 = 5100 voxels per plane: more than one chunk of the fast kernels.
  const Tensor x = random_tensor({2, 4, 5, 17, 60}, 21, -3.0f, 5.0f), dy = random_tensor({2, 4, 5, 17, 60}, 22);
  const Tensor gamma = random_tensor({4}, 23, 0.5f, 1.5f), beta = random_tensor({4}, 24);
  for (bool relu : {false, true}) {
    InstanceNormSpec a, b;
    a.fuse_relu = b.fuse_relu = relu;
    b.layout = VolumeLayout::ndhwc;
    InstanceNormSaved sa, sb;
    const Tensor ya = instance_norm3d_forward(x, gamma, beta, a, sa);
    const Tensor yb = instance_norm3d_forward(to_ndhwc(x), gamma, beta, b, sb);
    EXPECT_TRUE(tensors_close(to_ncdhw(yb), ya, 1e-5, 1e-5)) << "relu " << relu;
    EXPECT_TRUE(tensors_close(sb.mean, sa.mean, 1e-6, 1e-6));
    EXPECT_TRUE(tensors_close(sb.rstd, sa.rstd, 1e-6, 1e-6));
    Tensor dga = Tensor::zeros({4}), dba = Tensor::zeros({4}), dgb = Tensor::zeros({4}), dbb = Tensor::zeros({4});
    const Tensor dxa = instance_norm3d_backward(dy, x, gamma, sa, a, dga, dba);
    const Tensor dxb = instance_norm3d_backward(to_ndhwc(dy), to_ndhwc(x), gamma, sb, b, dgb, dbb);
    EXPECT_TRUE(tensors_close(to_ncdhw(dxb), dxa, 1e-5, 1e-4));
    EXPECT_TRUE(tensors_close(dgb, dga, 1e-3, 1e-4));
    EXPECT_TRUE(tensors_close(dbb, dba, 1e-3, 1e-4));
  }
}

TEST(InstanceNorm3d, RejectsBadArguments) {
  InstanceNormSaved saved;
  InstanceNormSpec spec;
  EXPECT_THROW(instance_norm3d_forward(random_tensor({2, 3, 4, 4}, 1), Tensor::zeros({3}), Tensor::zeros({3}), spec,
                                       saved),
               InvalidArgument);
  EXPECT_THROW(instance_norm3d_forward(random_tensor({2, 3, 2, 2, 2}, 1), Tensor::zeros({4}), Tensor::zeros({3}),
                                       spec, saved),
               InvalidArgument);
  spec.eps = 0;
  EXPECT_THROW(instance_norm3d_forward(random_tensor({2, 3, 2, 2, 2}, 1), Tensor::zeros({3}), Tensor::zeros({3}),
                                       spec, saved),
               InvalidArgument);
}

TEST(InstanceNorm3d, LayerParametersModesAndGradients) {
  InstanceNormSpec spec;
  spec.fuse_relu = true;
  spec.layout = VolumeLayout::ndhwc;
  InstanceNorm3d layer(3, spec);
  auto params = layer.parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "weight");
  EXPECT_EQ(params[1]->name, "bias");
  for (auto* p : params) EXPECT_FALSE(p->weight_decay) << p->name;
  EXPECT_EQ(layer.gamma().value.to_float_vector(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(layer.beta().value.to_float_vector(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(layer.buffers().size(), 0u);

  const Tensor x = random_tensor({2, 3, 4, 5, 3}, 31), dy = random_tensor({2, 3, 4, 5, 3}, 32);
  layer.gamma().value.copy_(random_tensor({3}, 33, 0.5f, 1.5f));
  layer.beta().value.copy_(random_tensor({3}, 34));
  InstanceNormSaved saved;
  const Tensor want = instance_norm3d_forward(x, layer.gamma().value, layer.beta().value, spec, saved);
  int ready = 0;
  for (auto* p : params) p->grad_ready_hook = [&](Parameter&) { ++ready; };
  layer.zero_grad();
  EXPECT_TRUE(tensors_close(layer.forward(x), want, 0, 0));
  Tensor dg = Tensor::zeros({3}), db = Tensor::zeros({3});
  const Tensor dx_want = instance_norm3d_backward(dy, x, layer.gamma().value, saved, spec, dg, db);
  EXPECT_TRUE(tensors_close(layer.backward(dy), dx_want, 0, 0));
  EXPECT_TRUE(tensors_close(layer.gamma().grad, dg, 0, 0));
  EXPECT_TRUE(tensors_close(layer.beta().grad, db, 0, 0));
  EXPECT_EQ(ready, 2);
  EXPECT_THROW(layer.backward(dy), InvalidArgument) << "a second backward without forward";

  // Evaluation mode: instance statistics as well (no running statistics), nothing kept.
  layer.train(false);
  EXPECT_TRUE(tensors_close(layer.forward(x), want, 0, 0));
  EXPECT_THROW(layer.backward(dy), InvalidArgument);

  // Under a bf16 policy the layer keeps its input's dtype (like BatchNorm2d), computed in f32:
  // an f32 input gives the f32 result, a bf16 input a bf16 one.
  layer.train();
  layer.set_precision(PrecisionPolicy::create("bf16", Device::cpu()));
  EXPECT_TRUE(tensors_close(layer.forward(x), want, 0, 0));
  EXPECT_EQ(layer.backward(dy).dtype(), DType::f32);
  const Tensor y16 = layer.forward(x.to(DType::bf16));
  EXPECT_EQ(y16.dtype(), DType::bf16);
  EXPECT_TRUE(tensors_close(y16.to(DType::f32), want, 0.05, 0.02));
  const Tensor dx16 = layer.backward(dy.to(DType::bf16));
  EXPECT_EQ(dx16.dtype(), DType::bf16);
}

// ============================================================================================
// DiceCE loss
// ============================================================================================

TEST(DiceCe, SmallCaseMatchesHandComputation) {
  // N = 1, C = 3, D = H = 1, W = 2: voxel 0 has logits (1, 2, 3) and label 2, voxel 1 has
  // logits (0, 0, 1) and label 1.
  const std::vector<float> z = {1, 0, 2, 0, 3, 1};  // NCDHW: class-major
  const double e0 = std::exp(1.0) + std::exp(2.0) + std::exp(3.0), e1 = 2.0 + std::exp(1.0);
  const double p0[3] = {std::exp(1.0) / e0, std::exp(2.0) / e0, std::exp(3.0) / e0};
  const double p1[3] = {1.0 / e1, 1.0 / e1, std::exp(1.0) / e1};
  const double s = 1e-6;
  // class 1: t = (0, 1); class 2: t = (1, 0)
  const double d1 = (2 * p1[1] + s) / (1 + p0[1] + p1[1] + s);
  const double d2 = (2 * p0[2] + s) / (1 + p0[2] + p1[2] + s);
  const double dice = ((1 - d1) + (1 - d2)) / 2;
  const double ce = (-std::log(p0[2]) - std::log(p1[1])) / 2;
  for (VolumeLayout layout : {VolumeLayout::ncdhw, VolumeLayout::ndhwc})
    for (DType ld : {DType::u8, DType::i32}) {
      SCOPED_TRACE(fmt::format("{} {}", name_of(layout), dtype_name(ld)));
      Tensor logits = Tensor::from_vector(z, {1, 3, 1, 1, 2});
      if (layout == VolumeLayout::ndhwc) logits = to_ndhwc(logits);
      const Tensor labels = labels_of({2, 1}, {1, 1, 1, 2}, ld);
      const DiceCeResult r = dice_ce_loss_forward(logits, labels, layout);
      EXPECT_NEAR(r.dice_loss, dice, 1e-6);
      EXPECT_NEAR(r.ce_loss, ce, 1e-6);
      EXPECT_NEAR(r.loss, (dice + ce) / 2, 1e-6);
      const Tensor probs = layout == VolumeLayout::ndhwc ? to_ncdhw(r.probs) : r.probs;
      for (int c = 0; c < 3; ++c) {
        EXPECT_NEAR(probs.data<float>()[2 * c], p0[c], 1e-6);
        EXPECT_NEAR(probs.data<float>()[2 * c + 1], p1[c], 1e-6);
      }
      ASSERT_EQ(r.dice_terms.shape(), Shape({1, 3, 3}));
      const float* t = r.dice_terms.data<float>();
      EXPECT_NEAR(t[3 * 1 + 0], p1[1], 1e-6);         // class 1: sum p t
      EXPECT_NEAR(t[3 * 1 + 1], 1.0, 0.0);            // sum t
      EXPECT_NEAR(t[3 * 1 + 2], p0[1] + p1[1], 1e-6);  // sum p
      EXPECT_NEAR(t[3 * 0 + 1], 0.0, 0.0);            // background: no voxel
      EXPECT_NEAR(t[3 * 0 + 2], p0[0] + p1[0], 1e-6);
    }
}

TEST(DiceCe, ConfidentCorrectLogitsGiveLossNearZero) {
  const Shape ls = {2, 3, 4, 5};
  const Tensor labels = random_labels(ls, 3, 41, DType::u8);
  Tensor logits = Tensor::full({2, 3, 3, 4, 5}, -20.0);
  const std::int64_t S = 60;
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t s = 0; s < S; ++s)
      logits.data<float>()[(n * 3 + labels.data<std::uint8_t>()[n * S + s]) * S + s] = 20.0f;
  const DiceCeResult r = dice_ce_loss_forward(logits, labels, VolumeLayout::ncdhw);
  EXPECT_LT(r.loss, 1e-6);
  EXPECT_GE(r.loss, 0.0f);
  // And a confidently wrong prediction is far from it.
  const DiceCeResult w = dice_ce_loss_forward(logits, random_labels(ls, 3, 42, DType::u8), VolumeLayout::ncdhw);
  EXPECT_GT(w.loss, 5.0f);
}

class DiceCeGrad : public ::testing::TestWithParam<std::tuple<VolumeLayout, DType>> {};

TEST_P(DiceCeGrad, MatchesFiniteDifferences) {
  const auto [layout, ldtype] = GetParam();
  const Shape xs = layout == VolumeLayout::ncdhw ? Shape{2, 3, 2, 3, 2} : Shape{2, 2, 3, 2, 3};
  const Tensor labels = random_labels({2, 2, 3, 2}, 3, 51, ldtype);
  GradcheckOptions opt;
  opt.eps = 1e-3;
  opt.atol = 2e-4;
  opt.rtol = 1e-2;
  opt.max_checks_per_input = 72;
  auto fwd = [&](const V& in) {
    return V{Tensor::from_vector({dice_ce_loss_forward(in[0], labels, layout).loss}, {1})};
  };
  auto bwd = [&](const V& in, const V& d) {
    const DiceCeResult r = dice_ce_loss_forward(in[0], labels, layout);
    return V{dice_ce_loss_backward(r, labels, layout, 1e-6, d[0].data<float>()[0])};
  };
  // f32 loss values: the finite differences are noisy at ~1e-7 / eps; use logits of moderate
  // size and compare against a loose absolute tolerance scaled to the gradient's size (~1e-2).
  const auto r = gradcheck(fwd, bwd, {random_tensor(xs, 52, -2.0f, 2.0f)}, opt);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.checked, 72);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DiceCeGrad,
                         ::testing::Combine(::testing::Values(VolumeLayout::ncdhw, VolumeLayout::ndhwc),
                                            ::testing::Values(DType::u8, DType::i32)),
                         [](const auto& info) {
                           return std::string(name_of(std::get<0>(info.param))) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

TEST(DiceCe, GradientMatchesDoublePrecisionDifferences) {
  // Finite differences of a double-precision copy of the loss formula (no f32 noise), at a
  // tight tolerance, over every logit of a small case.
  const Tensor logits = random_tensor({1, 3, 1, 2, 3}, 61, -2.0f, 2.0f);
  const Tensor labels = labels_of({0, 1, 2, 2, 1, 1}, {1, 1, 2, 3}, DType::i32);
  auto loss64 = [&](std::vector<double> z) {
    const int C = 3, S = 6;
    double I[3] = {}, T[3] = {}, P[3] = {}, ce = 0;
    for (int s = 0; s < S; ++s) {
      double m = -1e300, sum = 0;
      for (int c = 0; c < C; ++c) m = std::max(m, z[c * S + s]);
      for (int c = 0; c < C; ++c) sum += std::exp(z[c * S + s] - m);
      const int t = labels.data<std::int32_t>()[s];
      ce -= z[t * S + s] - m - std::log(sum);
      for (int c = 0; c < C; ++c) {
        const double p = std::exp(z[c * S + s] - m) / sum;
        I[c] += c == t ? p : 0;
        T[c] += c == t ? 1 : 0;
        P[c] += p;
      }
    }
    double dice = 0;
    for (int c = 1; c < C; ++c) dice += 1 - (2 * I[c] + 1e-6) / (T[c] + P[c] + 1e-6);
    return (dice / 2 + ce / S) / 2;
  };
  const DiceCeResult r = dice_ce_loss_forward(logits, labels, VolumeLayout::ncdhw);
  const Tensor g = dice_ce_loss_backward(r, labels, VolumeLayout::ncdhw, 1e-6, 2.0f);
  std::vector<double> z(18);
  for (int i = 0; i < 18; ++i) z[static_cast<std::size_t>(i)] = logits.data<float>()[i];
  EXPECT_NEAR(r.loss, loss64(z), 1e-6);
  for (int i = 0; i < 18; ++i) {
    auto zp = z, zm = z;
    zp[static_cast<std::size_t>(i)] += 1e-5;
    zm[static_cast<std::size_t>(i)] -= 1e-5;
    const double want = 2.0 * (loss64(zp) - loss64(zm)) / 2e-5;
    EXPECT_NEAR(g.data<float>()[i], want, 1e-6) << "logit " << i;
  }
}

TEST(DiceCe, LayoutsAgreeAfterPermutation) {
  // 2 x 40 x 40 = 3200 voxels per sample: two chunks of the fast kernels.
  const Tensor x = random_tensor({2, 3, 2, 40, 40}, 71, -3.0f, 3.0f);
  const Tensor labels = random_labels({2, 2, 40, 40}, 3, 72, DType::u8);
  const DiceCeResult a = dice_ce_loss_forward(x, labels, VolumeLayout::ncdhw);
  const DiceCeResult b = dice_ce_loss_forward(to_ndhwc(x), labels, VolumeLayout::ndhwc);
  EXPECT_NEAR(a.loss, b.loss, 1e-6);
  EXPECT_NEAR(a.dice_loss, b.dice_loss, 1e-6);
  EXPECT_NEAR(a.ce_loss, b.ce_loss, 1e-6);
  EXPECT_TRUE(tensors_close(to_ncdhw(b.probs), a.probs, 1e-7, 1e-6));
  EXPECT_TRUE(tensors_close(b.dice_terms, a.dice_terms, 1e-4, 1e-5));
  const Tensor ga = dice_ce_loss_backward(a, labels, VolumeLayout::ncdhw, 1e-6, 0.5f);
  const Tensor gb = dice_ce_loss_backward(b, labels, VolumeLayout::ndhwc, 1e-6, 0.5f);
  EXPECT_TRUE(tensors_close(to_ncdhw(gb), ga, 1e-9, 1e-5));
}

TEST(DiceCe, LabelOutOfRangeThrowsNamingIt) {
  const Tensor x = random_tensor({1, 3, 1, 2, 2}, 81);
  try {
    dice_ce_loss_forward(x, labels_of({0, 1, 3, 2}, {1, 1, 2, 2}, DType::u8), VolumeLayout::ncdhw);
    ADD_FAILURE() << "label 3 of 3 classes was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("label 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("voxel 2"), std::string::npos) << e.what();
  }
  try {
    dice_ce_loss_forward(to_ndhwc(x), labels_of({0, -1, 1, 2}, {1, 1, 2, 2}, DType::i32), VolumeLayout::ndhwc);
    ADD_FAILURE() << "label -1 was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("label -1"), std::string::npos) << e.what();
  }
  // Shape and dtype mismatches are argument errors.
  EXPECT_THROW(dice_ce_loss_forward(x, labels_of({0, 1, 2}, {1, 1, 1, 3}, DType::i32), VolumeLayout::ncdhw),
               InvalidArgument);
  EXPECT_THROW(dice_ce_loss_forward(x, Tensor::zeros({1, 1, 2, 2}, DType::i64), VolumeLayout::ncdhw),
               InvalidArgument);
  EXPECT_THROW(dice_ce_loss_forward(random_tensor({1, 1, 1, 2, 2}, 82), labels_of({0, 0, 0, 0}, {1, 1, 2, 2}, DType::u8),
                                    VolumeLayout::ncdhw),
               InvalidArgument);
}

TEST(DiceCe, HalfPrecisionLogitsGiveGradientsInTheirDtype) {
  const Tensor x = random_tensor({1, 3, 2, 3, 4}, 91, -2.0f, 2.0f);
  const Tensor labels = random_labels({1, 2, 3, 4}, 3, 92, DType::u8);
  const DiceCeResult a = dice_ce_loss_forward(x, labels, VolumeLayout::ncdhw);
  const DiceCeResult b = dice_ce_loss_forward(x.to(DType::bf16), labels, VolumeLayout::ncdhw);
  EXPECT_EQ(b.probs.dtype(), DType::f32);
  EXPECT_NEAR(a.loss, b.loss, 2e-2);
  const Tensor g = dice_ce_loss_backward(b, labels, VolumeLayout::ncdhw);
  EXPECT_EQ(g.dtype(), DType::bf16);
  EXPECT_TRUE(tensors_close(g.to(DType::f32), dice_ce_loss_backward(a, labels, VolumeLayout::ncdhw), 2e-3, 0.05));
}

// ============================================================================================
// argmax_channels
// ============================================================================================

TEST(ArgmaxChannels, FirstMaximumWinsInBothLayouts) {
  // Four voxels, three classes: (1, 5, 5) -> 1 (tie, first wins), (7, 7, 7) -> 0,
  // (0, -1, 2) -> 2, (-3, -2, -2) -> 1.
  const std::vector<float> z = {1, 7, 0, -3, 5, 7, -1, -2, 5, 7, 2, -2};  // NCDHW
  const Tensor x = Tensor::from_vector(z, {1, 3, 1, 2, 2});
  for (VolumeLayout layout : {VolumeLayout::ncdhw, VolumeLayout::ndhwc}) {
    const Tensor out = argmax_channels(layout == VolumeLayout::ncdhw ? x : to_ndhwc(x), layout);
    ASSERT_EQ(out.dtype(), DType::u8);
    ASSERT_EQ(out.shape(), Shape({1, 1, 2, 2}));
    EXPECT_EQ(out.to_float_vector(), std::vector<float>({1, 0, 2, 1})) << name_of(layout);
  }
  // Larger volumes: layouts agree.
  const Tensor big = random_tensor({2, 4, 3, 30, 30}, 95);
  EXPECT_TRUE(tensors_close(argmax_channels(to_ndhwc(big), VolumeLayout::ndhwc),
                            argmax_channels(big, VolumeLayout::ncdhw), 0, 0));
  EXPECT_THROW(argmax_channels(random_tensor({1, 3, 2, 2}, 1), VolumeLayout::ncdhw), InvalidArgument);
}

// ============================================================================================
// Cross-checks against numpy / PyTorch (python3)
// ============================================================================================

// The system interpreter (where apt installs numpy and torch) when there is one, else PATH's.
std::string python() {
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

bool python_has(const char* module) {
  return std::system(fmt::format("{} -c 'import {}' > /dev/null 2>&1", python(), module).c_str()) == 0;
}

void write_floats(const std::filesystem::path& p, const std::vector<float>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> read_floats(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  const auto bytes = static_cast<std::size_t>(f.tellg());
  std::vector<float> v(bytes / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  return v;
}

// The reference, written in the library's own terms: F.instance_norm and the MLPerf DiceCE
// formula in torch (autograd for the gradients), or numpy for the forward values only.
constexpr const char* kPythonReference = R"PY(
import sys, numpy as np
d, mode = sys.argv[1], sys.argv[2]
N, C, D, H, W = 2, 3, 3, 4, 5
x = np.fromfile(d + "/x.bin", dtype=np.float32).reshape(N, C, D, H, W)
g = np.fromfile(d + "/gamma.bin", dtype=np.float32)
b = np.fromfile(d + "/beta.bin", dtype=np.float32)
dy = np.fromfile(d + "/dy.bin", dtype=np.float32).reshape(N, C, D, H, W)
lab = np.fromfile(d + "/labels.bin", dtype=np.float32).astype(np.int64).reshape(N, D, H, W)
smooth = 1e-6
def out(name, a): np.asarray(a, dtype=np.float32).tofile(d + "/" + name)
if mode == "numpy":
    x64 = x.astype(np.float64)
    m = x64.mean(axis=(2, 3, 4), keepdims=True); v = x64.var(axis=(2, 3, 4), keepdims=True)
    out("y.bin", (x64 - m) / np.sqrt(v + 1e-5) * g.reshape(1, C, 1, 1, 1) + b.reshape(1, C, 1, 1, 1))
    z = x64 - x64.max(axis=1, keepdims=True); p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    t = np.stack([(lab == c) for c in range(C)], axis=1).astype(np.float64)
    inter = (p * t).sum(axis=(2, 3, 4)); ts = t.sum(axis=(2, 3, 4)); ps = p.sum(axis=(2, 3, 4))
    dice = ((2 * inter + smooth) / (ts + ps + smooth))[:, 1:]
    ce = -np.log(np.take_along_axis(p, lab[:, None], axis=1)).mean()
    out("loss.bin", [(np.mean(1 - dice) + ce) / 2])
else:
    import torch, torch.nn.functional as F
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    gt = torch.tensor(g, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    y = F.instance_norm(xt, weight=gt, bias=bt, eps=1e-5)
    y.backward(torch.tensor(dy, dtype=torch.float64))
    out("y.bin", y.detach().numpy()); out("dx.bin", xt.grad.numpy())
    out("dgamma.bin", gt.grad.numpy()); out("dbeta.bin", bt.grad.numpy())
    zt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    lt = torch.tensor(lab)
    p = torch.softmax(zt, dim=1)
    t = F.one_hot(lt, C).permute(0, 4, 1, 2, 3).to(torch.float64)
    p1, t1 = p[:, 1:], t[:, 1:]
    dims = [2, 3, 4]
    dice = (2 * torch.sum(t1 * p1, dim=dims) + smooth) / (torch.sum(t1, dim=dims) + torch.sum(p1, dim=dims) + smooth)
    loss = (torch.mean(1.0 - dice) + F.cross_entropy(zt, lt)) / 2
    loss.backward()
    out("loss.bin", [loss.item()]); out("dlogits.bin", zt.grad.numpy())
)PY";

struct PyCase {
  Tensor x, gamma, beta, dy, labels;
  std::filesystem::path dir;
};

PyCase write_python_case(const char* tag) {
  PyCase c;
  c.x = random_tensor({2, 3, 3, 4, 5}, 101, -2.0f, 3.0f);
  c.gamma = random_tensor({3}, 102, 0.5f, 1.5f);
  c.beta = random_tensor({3}, 103);
  c.dy = random_tensor({2, 3, 3, 4, 5}, 104);
  c.labels = random_labels({2, 3, 4, 5}, 3, 105, DType::u8);
  c.dir = std::filesystem::temp_directory_path() / fmt::format("bh_seg_{}_{}", tag, ::getpid());
  std::filesystem::create_directories(c.dir);
  write_floats(c.dir / "x.bin", c.x.to_float_vector());
  write_floats(c.dir / "gamma.bin", c.gamma.to_float_vector());
  write_floats(c.dir / "beta.bin", c.beta.to_float_vector());
  write_floats(c.dir / "dy.bin", c.dy.to_float_vector());
  write_floats(c.dir / "labels.bin", c.labels.to_float_vector());
  std::ofstream(c.dir / "ref.py") << kPythonReference;
  return c;
}

TEST(SegmentationPython, ForwardValuesMatchNumpy) {
  if (!python_has("numpy")) GTEST_SKIP() << python() << " has no numpy";
  PyCase c = write_python_case("np");
  ASSERT_EQ(std::system(fmt::format("{} '{}' '{}' numpy", python(), (c.dir / "ref.py").string(), c.dir.string()).c_str()), 0);
  InstanceNormSaved saved;
  const Tensor y = instance_norm3d_forward(c.x, c.gamma, c.beta, InstanceNormSpec{}, saved);
  EXPECT_TRUE(tensors_close(y, Tensor::from_vector(read_floats(c.dir / "y.bin"), y.shape()), 1e-5, 1e-5));
  const DiceCeResult r = dice_ce_loss_forward(c.x, c.labels, VolumeLayout::ncdhw);
  EXPECT_NEAR(r.loss, read_floats(c.dir / "loss.bin").at(0), 1e-6);
  std::filesystem::remove_all(c.dir);
}

TEST(SegmentationPython, MatchesPyTorchWithAutograd) {
  if (!python_has("torch")) GTEST_SKIP() << python() << " has no torch: the PyTorch cross-check did not run";
  PyCase c = write_python_case("torch");
  ASSERT_EQ(std::system(fmt::format("{} '{}' '{}' torch", python(), (c.dir / "ref.py").string(), c.dir.string()).c_str()), 0);
  InstanceNormSaved saved;
  const InstanceNormSpec spec;
  const Tensor y = instance_norm3d_forward(c.x, c.gamma, c.beta, spec, saved);
  Tensor dg = Tensor::zeros({3}), db = Tensor::zeros({3});
  const Tensor dx = instance_norm3d_backward(c.dy, c.x, c.gamma, saved, spec, dg, db);
  EXPECT_TRUE(tensors_close(y, Tensor::from_vector(read_floats(c.dir / "y.bin"), y.shape()), 1e-5, 1e-5));
  EXPECT_TRUE(tensors_close(dx, Tensor::from_vector(read_floats(c.dir / "dx.bin"), dx.shape()), 1e-5, 1e-4));
  EXPECT_TRUE(tensors_close(dg, Tensor::from_vector(read_floats(c.dir / "dgamma.bin"), {3}), 1e-4, 1e-5));
  EXPECT_TRUE(tensors_close(db, Tensor::from_vector(read_floats(c.dir / "dbeta.bin"), {3}), 1e-4, 1e-5));
  const DiceCeResult r = dice_ce_loss_forward(c.x, c.labels, VolumeLayout::ncdhw);
  EXPECT_NEAR(r.loss, read_floats(c.dir / "loss.bin").at(0), 1e-6);
  const Tensor g = dice_ce_loss_backward(r, c.labels, VolumeLayout::ncdhw);
  EXPECT_TRUE(tensors_close(g, Tensor::from_vector(read_floats(c.dir / "dlogits.bin"), g.shape()), 1e-7, 1e-4));
  std::filesystem::remove_all(c.dir);
}

// ============================================================================================
// CUDA against the CPU
// ============================================================================================

TEST(SegmentationCuda, KernelsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Device gpu = Device::cuda(0);
  for (VolumeLayout layout : {VolumeLayout::ncdhw, VolumeLayout::ndhwc})
    for (bool relu : {false, true}) {
      SCOPED_TRACE(fmt::format("{} relu {}", name_of(layout), relu));
      InstanceNormSpec spec;
      spec.layout = layout;
      spec.fuse_relu = relu;
      Tensor x = random_tensor({2, 4, 9, 20, 30}, 111, -2.0f, 3.0f), dy = random_tensor({2, 4, 9, 20, 30}, 112);
      if (layout == VolumeLayout::ndhwc) {
        x = to_ndhwc(x);
        dy = to_ndhwc(dy);
      }
      const Tensor gamma = random_tensor({4}, 113, 0.5f, 1.5f), beta = random_tensor({4}, 114);
      InstanceNormSaved sc, sg;
      const Tensor yc = instance_norm3d_forward(x, gamma, beta, spec, sc);
      const Tensor yg = instance_norm3d_forward(x.to(gpu), gamma.to(gpu), beta.to(gpu), spec, sg);
      EXPECT_TRUE(tensors_close(yg.to(Device::cpu()), yc, 1e-5, 1e-5));
      Tensor dgc = Tensor::zeros({4}), dbc = Tensor::zeros({4});
      Tensor dgg = Tensor::zeros({4}, DType::f32, gpu), dbg = Tensor::zeros({4}, DType::f32, gpu);
      const Tensor dxc = instance_norm3d_backward(dy, x, gamma, sc, spec, dgc, dbc);
      const Tensor dxg = instance_norm3d_backward(dy.to(gpu), x.to(gpu), gamma.to(gpu), sg, spec, dgg, dbg);
      EXPECT_TRUE(tensors_close(dxg.to(Device::cpu()), dxc, 1e-5, 1e-4));
      EXPECT_TRUE(tensors_close(dgg.to(Device::cpu()), dgc, 1e-3, 1e-4));
      EXPECT_TRUE(tensors_close(dbg.to(Device::cpu()), dbc, 1e-3, 1e-4));

      const Tensor labels = random_labels({2, 9, 20, 30}, 4, 115, relu ? DType::u8 : DType::i32);
      const DiceCeResult rc = dice_ce_loss_forward(x, labels, layout);
      const DiceCeResult rg = dice_ce_loss_forward(x.to(gpu), labels.to(gpu), layout);
      EXPECT_NEAR(rg.loss, rc.loss, 1e-5);
      EXPECT_NEAR(rg.dice_loss, rc.dice_loss, 1e-5);
      EXPECT_NEAR(rg.ce_loss, rc.ce_loss, 1e-5);
      const Tensor gc = dice_ce_loss_backward(rc, labels, layout);
      const Tensor gg = dice_ce_loss_backward(rg, labels.to(gpu), layout);
      EXPECT_TRUE(tensors_close(gg.to(Device::cpu()), gc, 1e-8, 1e-4));
      EXPECT_TRUE(tensors_close(argmax_channels(x.to(gpu), layout).to(Device::cpu()), argmax_channels(x, layout), 0, 0));
      Tensor bad = labels.to(Device::cpu()).clone();
      if (bad.dtype() == DType::u8) bad.data<std::uint8_t>()[17] = 9;
      else bad.data<std::int32_t>()[17] = 9;
      EXPECT_THROW(dice_ce_loss_forward(x.to(gpu), bad.to(gpu), layout), DataError);
    }
}

}  // namespace
}  // namespace benchhost::nn

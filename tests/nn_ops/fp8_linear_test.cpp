// Linear under the fp8 policy (nn/layers.hpp, Note [fp8 Linear]). The policy is the one a Hopper
// GPU gets (DeviceCaps::cuda(9, 0)); the tensors stay on the CPU, where fp8_cast_scaled and
// matmul_fp8 have their reference implementations, so the layer's recipe (which operand is cast
// to which fp8 type with which scale, which scale the product multiplies back by, how the amax
// history moves the scales, the TN transposes of backward) is checked exactly here; the same
// layer code drives cuBLASLt on a GPU.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <span>

#include "benchhost/nn/layers.hpp"
#include "benchhost/precision.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;
using benchhost::testing::relative_l2;

PrecisionPolicy fp8_policy() { return PrecisionPolicy::create(Precision::fp8, DeviceCaps::cuda(9, 0, "test H100")); }

// q(v * scale) / scale through the fp8 type, as the cast and the product's scale_inv do it.
std::vector<double> dequantized(const Tensor& t, float scale, DType type) {
  std::vector<double> out;
  for (float v : t.to_float_vector()) {
    const float s = v * scale;
    const float q = type == DType::f8e4m3 ? e4m3_to_float(float_to_e4m3(s)) : e5m2_to_float(float_to_e5m2(s));
    out.push_back(static_cast<double>(q) / scale);
  }
  return out;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (float v : t.to_float_vector()) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

// c[i][j] = sum_k a[i][k] * b[j][k] (the TN product), a [M, K], b [N, K] row-major.
std::vector<double> product_tn(const std::vector<double>& a, const std::vector<double>& b, std::int64_t M,
                               std::int64_t N, std::int64_t K) {
  std::vector<double> c(static_cast<std::size_t>(M * N), 0.0);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j)
      for (std::int64_t k = 0; k < K; ++k) c[i * N + j] += a[i * K + k] * b[j * K + k];
  return c;
}

std::vector<double> transposed(const std::vector<double>& a, std::int64_t rows, std::int64_t cols) {
  std::vector<double> t(a.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

// |got - want| within two bf16 roundings (2^-8 each) of values of magnitude |want| + offset: the
// product is rounded to bf16, then (forward) the bias add rounds again.
void expect_bf16_close(const Tensor& got, const std::vector<double>& want, const char* what, double offset = 0) {
  const std::vector<float> g = got.to_float_vector();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], 1e-6 + std::ldexp(std::fabs(want[i]) + offset, -7)) << what << " element " << i;
}

TEST(Fp8Linear, ForwardIsTheProductOfTheScaledFp8OperandsAndScalesFollowTheAmaxHistory) {
  const std::int64_t in = 32, out = 48, rows = 16;
  Linear lin(in, out, /*bias=*/true, Activation::none, 3);
  for (float& b : std::span<float>(lin.bias()->value.data<float>(), out)) b = 0.25f;
  lin.set_precision(fp8_policy());
  EXPECT_FALSE(lin.fp8_scales().has_value()) << "no fp8 state before the first forward";

  const Tensor w = lin.weight().value;
  const double fp8_max = 448.0;
  float x_scale = 1.0f, w_scale = 1.0f;
  double x_amax_history = 0;
  for (int step = 0; step < 3; ++step) {
    // Inputs of growing magnitude: step 0 runs at scale 1, later steps at 448 / max(history).
    const Tensor x = random_tensor({2, 8, in}, 100 + step, -0.5f * (1 + 10 * step), 0.5f * (1 + 10 * step));
    const Tensor y = lin.forward(x);
    ASSERT_EQ(y.shape(), (Shape{2, 8, out}));
    EXPECT_EQ(y.dtype(), DType::bf16) << "fp8 products are stored in the policy's bf16";
    std::vector<double> want = product_tn(dequantized(x, x_scale, DType::f8e4m3),
                                         dequantized(w, w_scale, DType::f8e4m3), rows, out, in);
    for (double& v : want) v += 0.25;
    expect_bf16_close(y, want, "forward", 0.25);

    x_amax_history = std::max(x_amax_history, max_abs(x));
    const auto s = lin.fp8_scales();
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(s->fp8_steps, step + 1);
    EXPECT_EQ(s->bf16_steps, 0);
    EXPECT_NEAR(s->input, fp8_max / x_amax_history, 1e-4 * s->input) << "step " << step;
    EXPECT_NEAR(s->weight, fp8_max / max_abs(w), 1e-4 * s->weight);
    x_scale = s->input;
    w_scale = s->weight;
    lin.backward(Tensor::full({2, 8, out}, 0.01, DType::f32));
  }
}

TEST(Fp8Linear, BackwardIsTheE5m2GradientTimesTheSavedFp8Operands) {
  const std::int64_t in = 16, out = 32, rows = 32;
  Linear lin(in, out, /*bias=*/true, Activation::none, 7);
  lin.set_precision(fp8_policy());
  const Tensor x = random_tensor({rows, in}, 21);
  const Tensor w = lin.weight().value.clone();
  lin.forward(x);
  const Tensor dy = random_tensor({rows, out}, 22, -0.01f, 0.01f);
  const Tensor dx = lin.backward(dy);
  EXPECT_EQ(dx.dtype(), DType::f32) << "dx comes back in the input's dtype";
  EXPECT_EQ(lin.weight().grad.dtype(), DType::f32) << "the master gradient stays fp32";

  // The first step casts everything at scale 1; dz = dy in the policy's bf16 (no activation).
  const std::vector<double> x8 = dequantized(x, 1.0f, DType::f8e4m3);
  const std::vector<double> w8 = dequantized(w, 1.0f, DType::f8e4m3);
  const Tensor dz = cast(dy, DType::bf16);
  const std::vector<double> dz8 = dequantized(cast(dz, DType::f32), 1.0f, DType::f8e5m2);

  // dx = dz8 @ w8 (TN with w8^T), dW = dz8^T @ x8 (TN with x8^T), dbias = sum of dz (f32).
  expect_bf16_close(dx, product_tn(dz8, transposed(w8, out, in), rows, in, out), "dx");
  const std::vector<double> dw = product_tn(transposed(dz8, rows, out), transposed(x8, rows, in), out, in, rows);
  const std::vector<float> got_dw = lin.weight().grad.to_float_vector();
  for (std::size_t i = 0; i < dw.size(); ++i) ASSERT_NEAR(got_dw[i], dw[i], 1e-6 + 1e-5 * std::fabs(dw[i])) << i;
  const std::vector<float> dzv = cast(dz, DType::f32).to_float_vector();
  const std::vector<float> got_db = lin.bias()->grad.to_float_vector();
  for (std::int64_t j = 0; j < out; ++j) {
    double s = 0;
    for (std::int64_t r = 0; r < rows; ++r) s += dzv[r * out + j];
    ASSERT_NEAR(got_db[j], s, 1e-6 + 1e-5 * std::fabs(s)) << j;
  }
  const auto s = lin.fp8_scales();
  ASSERT_TRUE(s.has_value());
  EXPECT_NEAR(s->grad, 57344.0 / max_abs(cast(dz, DType::f32)), 1e-4 * s->grad) << "e5m2's max is 57344";
}

TEST(Fp8Linear, TracksTheFp32LayerWithinFp8Accuracy) {
  // No activation: a relu's mask would flip where the fp8 pre-activation crosses zero, and the
  // comparison would measure those flips, not the quantisation.
  Linear ref(64, 32, true, Activation::none, 9), q(64, 32, true, Activation::none, 9);
  q.set_precision(fp8_policy());
  // Two steps so the second runs at scales set from the first's amax (full use of e4m3's range).
  for (int step = 0; step < 2; ++step) {
    const Tensor x = random_tensor({4, 16, 64}, 40 + step);
    const Tensor dy = random_tensor({4, 16, 32}, 50 + step);
    ref.zero_grad();
    q.zero_grad();
    const Tensor y_ref = ref.forward(x), y = q.forward(x);
    const Tensor dx_ref = ref.backward(dy), dx = q.backward(dy);
    // e4m3 keeps 3 mantissa bits (relative RMS rounding error ~2.7% per operand), e5m2 2 (~5%):
    // products land at ~4% (y) and ~6% (dx, dW) in L2 here; a wrong scale or operand is off by
    // far more. dbias is summed from the bf16 gradient, not an fp8 one: within bf16 rounding.
    EXPECT_LT(relative_l2({y.to_float_vector()}, {y_ref.to_float_vector()}), 0.06) << "y, step " << step;
    EXPECT_LT(relative_l2({dx.to_float_vector()}, {dx_ref.to_float_vector()}), 0.10) << "dx, step " << step;
    EXPECT_LT(relative_l2({q.weight().grad.to_float_vector()}, {ref.weight().grad.to_float_vector()}), 0.10)
        << "dW, step " << step;
    EXPECT_LT(relative_l2({q.bias()->grad.to_float_vector()}, {ref.bias()->grad.to_float_vector()}), 0.01)
        << "dbias, step " << step;
  }
}

TEST(Fp8Linear, DimsThatAreNotMultiplesOf16RunTheBf16PathAndAreCounted) {
  Linear bf(30, 48, true, Activation::none, 4), q(30, 48, true, Activation::none, 4);
  bf.set_precision(PrecisionPolicy::create(Precision::bf16, DeviceCaps::cuda(9, 0)));
  q.set_precision(fp8_policy());
  const Tensor x = random_tensor({16, 30}, 61);
  const Tensor y = q.forward(x);
  EXPECT_EQ(y.to_float_vector(), bf.forward(x).to_float_vector()) << "the fallback is the bf16 layer exactly";
  const Tensor dy = random_tensor({16, 48}, 62);
  EXPECT_EQ(q.backward(dy).to_float_vector(), bf.backward(dy).to_float_vector());
  EXPECT_EQ(q.weight().grad.to_float_vector(), bf.weight().grad.to_float_vector());
  const auto s = q.fp8_scales();
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->fp8_steps, 0);
  EXPECT_EQ(s->bf16_steps, 1);
}

// A two-layer network fitting a planted linear teacher: under fp8 it must learn as the fp32 one
// does (the loss falls by the same order of magnitude), which a wrong gradient scale would stop.
TEST(Fp8Linear, TrainsATwoLayerNetworkAsFp32Does) {
  auto train = [](bool fp8) {
    Linear a(32, 64, true, Activation::relu, 1), b(64, 16, true, Activation::none, 2);
    // He-like initial scales (the layers' default N(0, 0.02^2) would take thousands of steps).
    for (auto [p, k] : {std::pair(&a.weight(), 12.0f), std::pair(&b.weight(), 9.0f)})
      for (float& v : std::span<float>(p->value.data<float>(), p->value.numel())) v *= k;
    if (fp8) {
      a.set_precision(fp8_policy());
      b.set_precision(fp8_policy());
    }
    const Tensor teacher = random_tensor({32, 16}, 77);
    const float* t = teacher.data<float>();
    std::vector<double> losses;
    for (int step = 0; step < 400; ++step) {
      const Tensor x = random_tensor({64, 32}, 1000 + step);
      const float* xp = x.data<float>();
      const Tensor yb = cast(b.forward(a.forward(x)), DType::f32);
      const float* y = yb.data<float>();
      Tensor dy = Tensor::empty({64, 16});
      float* g = dy.data<float>();
      double loss = 0;
      for (int r = 0; r < 64; ++r)
        for (int j = 0; j < 16; ++j) {
          double target = 0;
          for (int k = 0; k < 32; ++k) target += xp[r * 32 + k] * t[k * 16 + j];
          const double e = y[r * 16 + j] - target;
          loss += e * e / (64 * 16);
          g[r * 16 + j] = static_cast<float>(2 * e / (64 * 16));
        }
      losses.push_back(loss);
      a.zero_grad();
      b.zero_grad();
      a.backward(b.backward(dy));
      for (Module* m : {static_cast<Module*>(&a), static_cast<Module*>(&b)})
        for (Parameter* p : m->parameters()) {
          float* v = p->value.data<float>();
          const float* d = p->grad.data<float>();
          for (std::int64_t i = 0; i < p->value.numel(); ++i) v[i] -= 0.05f * d[i];
        }
    }
    return std::pair(losses.front(), losses.back());
  };
  const auto [first32, last32] = train(false);
  const auto [first8, last8] = train(true);
  EXPECT_LT(last32, 0.2 * first32) << "the fp32 network learns (sanity of the setup)";
  EXPECT_LT(last8, 0.2 * first8) << "fp8: loss " << first8 << " -> " << last8;
  EXPECT_LT(last8, 2.0 * last32) << "fp8 ends near fp32 (" << last32 << ")";
  std::printf("fp32 loss %.4f -> %.4f, fp8 %.4f -> %.4f\n", first32, last32, first8, last8);
}

TEST(Fp8Linear, WorkloadsMayAskForFp8OnlyWhereTheDeviceHasIt) {
  const std::string why = PrecisionPolicy::layers_support("fp8", Device::cpu());
  EXPECT_NE(why.find("fp8"), std::string::npos) << why;
  EXPECT_FALSE(why.empty()) << "a CPU never runs fp8";
}

}  // namespace
}  // namespace benchhost::nn

// The Tensor-level fp8 functions (ops.hpp) on the CPU reference implementations: the cast's amax
// and saturation, and a scaled matmul against the f32 product of the dequantised operands.
#include <gtest/gtest.h>

#include <cmath>

#include "benchhost/nn/ops.hpp"
#include "benchhost/random.hpp"

namespace benchhost::nn {
namespace {

Tensor filled(const Shape& s, std::uint64_t seed, float scale) {
  Tensor t = Tensor::empty(s);
  Rng rng(seed, 3);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * rng.uniform(-1.0f, 1.0f);
  return t;
}

TEST(Fp8Wrappers, CastRecordsAmaxAndSaturates) {
  Tensor x = filled({4, 8}, 1, 3.0f);
  x.data<float>()[5] = -1000.0f;  // * scale 1 is beyond e4m3's 448: saturates
  Tensor amax;
  Tensor y = fp8_cast_scaled(x, Tensor::from_vector({1.0f}, {1}), DType::f8e4m3, &amax);
  ASSERT_EQ(y.dtype(), DType::f8e4m3);
  EXPECT_FLOAT_EQ(amax.item({0}), 1000.0f);
  const Tensor back = y.to(DType::f32);
  EXPECT_FLOAT_EQ(back.data<float>()[5], -448.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    if (i != 5) EXPECT_NEAR(back.data<float>()[i], x.data<float>()[i], 0.07f * std::fabs(x.data<float>()[i]) + 1e-2f);
  EXPECT_THROW(fp8_cast_scaled(x, Tensor::from_vector({1.0f}, {1}), DType::bf16), InvalidArgument);
}

TEST(Fp8Wrappers, ScaledMatmulMatchesDequantisedProduct) {
  const std::int64_t M = 16, N = 32, K = 48;
  Tensor a = filled({M, K}, 2, 0.05f), b = filled({N, K}, 3, 2.0f);
  // Scales that map each operand's amax near e4m3's top (448), as delayed scaling would.
  const float sa = 400.0f / 0.05f, sb = 400.0f / 2.0f;
  Tensor a8 = fp8_cast_scaled(a, Tensor::from_vector({sa}, {1}), DType::f8e4m3);
  Tensor b8 = fp8_cast_scaled(b, Tensor::from_vector({sb}, {1}), DType::f8e4m3);
  Tensor amax;
  Tensor d = matmul_fp8(a8, b8, Tensor::from_vector({1.0f / sa}, {1}), Tensor::from_vector({1.0f / sb}, {1}),
                        DType::f32, &amax);
  ASSERT_EQ(d.shape(), (Shape{M, N}));
  // The exact product of the dequantised fp8 values, and the f32 product of the originals.
  Tensor ad = a8.to(DType::f32), bd = b8.to(DType::f32);
  float max_abs = 0.0f;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double exact = 0.0, orig = 0.0, abs_sum = 0.0;
      for (std::int64_t k = 0; k < K; ++k) {
        exact += double(ad.data<float>()[i * K + k]) / sa * double(bd.data<float>()[j * K + k]) / sb;
        orig += double(a.data<float>()[i * K + k]) * double(b.data<float>()[j * K + k]);
        abs_sum += std::fabs(double(a.data<float>()[i * K + k]) * double(b.data<float>()[j * K + k]));
      }
      const float got = d.data<float>()[i * N + j];
      EXPECT_NEAR(got, exact, 1e-5 + 1e-5 * std::fabs(exact));
      // e4m3 rounds each operand within 2^-4 relatively: each product within (1 + 2^-4)^2 - 1.
      EXPECT_NEAR(got, orig, 0.1290 * abs_sum + 1e-6) << "beyond e4m3's rounding bound";
      max_abs = std::max(max_abs, std::fabs(got));
    }
  EXPECT_FLOAT_EQ(amax.item({0}), max_abs);
  EXPECT_THROW(matmul_fp8(a8, a8.view({K, M}), Tensor::from_vector({1.0f}, {1}), Tensor::from_vector({1.0f}, {1})),
               InvalidArgument);
}

}  // namespace
}  // namespace benchhost::nn

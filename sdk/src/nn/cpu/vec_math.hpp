#pragma once
// Vectorisable fp32 math for the CPU kernels (private to sdk/src/nn/cpu).
//
// Note [Vectorisable exp]
// glibc's expf/tanhf/erff are scalar calls unless the whole build uses -ffast-math, so a loop
// that calls them does not vectorise. These functions are plain arithmetic and bit casts, which
// GCC and Clang turn into AVX2/AVX-512 code inside simple loops:
// - exp: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), a degree-6 polynomial for
//   e^r, and 2^n built in the exponent bits. Relative error about 2e-7 over the fp32 range;
//   inputs are clamped to [-87.3, 88.7] (results underflow to ~1e-38 and never become inf).
// - tanh(u) = 1 - 2 / (e^{2u} + 1); sigmoid(x) = 1 / (1 + e^{-x}).
// - erf: Abramowitz & Stegun 7.1.26, absolute error below 1.5e-7, good for fp32.
// The reference implementations (cpu.ref) use the standard library; the parity test compares.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "benchhost/nn/ops.hpp"

namespace benchhost::nn::cpu {

// Inlined into every multiversioned kernel (Note [Kernel multiversioning]): a call would run the
// baseline (SSE2) version and stop the loop from vectorising.
#define BH_INLINE [[gnu::always_inline]] inline

BH_INLINE float bits_to_float(std::int32_t i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}

BH_INLINE float vexp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  // Round to nearest by adding 1.5 * 2^23 (no roundps needed on baseline SSE2).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t e = (static_cast<std::int32_t>(n) + 127) << 23;
  return p * bits_to_float(e);
}

BH_INLINE float vtanh(float u) { return 1.0f - 2.0f / (vexp(2.0f * u) + 1.0f); }
BH_INLINE float vsigmoid(float x) { return 1.0f / (1.0f + vexp(-x)); }

BH_INLINE float verf(float x) {
  const float ax = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * vexp(-ax * ax);
  return std::copysign(y, x);
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

/// Note [No denormal outputs]
/// Elementwise kernels flush results below FLT_MIN in magnitude to zero. A GELU gradient at
/// z = -13 is ~1e-37 and times an upstream gradient becomes subnormal; subnormal operands make
/// every FMA that touches them take a microcode assist on x86, which slowed the following GEMMs
/// (dx = dz W, dW = dz^T x) almost threefold in bench_nn_ops' LinearGeluBackward. The values
/// flushed are below 1.2e-38, far under anything fp32 training can resolve.
BH_INLINE float flush_tiny(float v) { return std::fabs(v) < 1.17549435e-38f ? 0.0f : v; }

/// y = act(x), vectorisable.
template <Activation A>
BH_INLINE float act_fwd(float x) {
  if constexpr (A == Activation::none) return x;
  if constexpr (A == Activation::relu) return x > 0.0f ? x : 0.0f;
  if constexpr (A == Activation::gelu_erf) return 0.5f * x * (1.0f + verf(x * kInvSqrt2));
  if constexpr (A == Activation::gelu_tanh)
    return 0.5f * x * (1.0f + vtanh(kSqrt2OverPi * (x + kGeluC * x * x * x)));
  if constexpr (A == Activation::sigmoid) return vsigmoid(x);
  if constexpr (A == Activation::tanh) return vtanh(x);
  return x;
}

/// d act(x) / dx, vectorisable.
template <Activation A>
BH_INLINE float act_grad(float x) {
  if constexpr (A == Activation::none) return 1.0f;
  if constexpr (A == Activation::relu) return x > 0.0f ? 1.0f : 0.0f;
  if constexpr (A == Activation::gelu_erf)
    return 0.5f * (1.0f + verf(x * kInvSqrt2)) + x * kInvSqrt2Pi * vexp(-0.5f * x * x);
  if constexpr (A == Activation::gelu_tanh) {
    const float t = vtanh(kSqrt2OverPi * (x + kGeluC * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluC * x * x);
  }
  if constexpr (A == Activation::sigmoid) {
    const float s = vsigmoid(x);
    return s * (1.0f - s);
  }
  if constexpr (A == Activation::tanh) {
    const float t = vtanh(x);
    return 1.0f - t * t;
  }
  return 1.0f;
}

/// Standard-library versions (double), for the reference implementations.
inline double act_fwd_ref(Activation a, double x) {
  switch (a) {
    case Activation::none: return x;
    case Activation::relu: return x > 0 ? x : 0;
    case Activation::gelu_erf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::gelu_tanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::sigmoid: return 1 / (1 + std::exp(-x));
    case Activation::tanh: return std::tanh(x);
  }
  return x;
}
inline double act_grad_ref(Activation a, double x) {
  switch (a) {
    case Activation::none: return 1;
    case Activation::relu: return x > 0 ? 1 : 0;
    case Activation::gelu_erf:
      return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    case Activation::gelu_tanh: {
      const double k = std::sqrt(2.0 / M_PI);
      const double t = std::tanh(k * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
    }
    case Activation::sigmoid: {
      const double s = 1 / (1 + std::exp(-x));
      return s * (1 - s);
    }
    case Activation::tanh: {
      const double t = std::tanh(x);
      return 1 - t * t;
    }
  }
  return 1;
}

}  // namespace benchhost::nn::cpu

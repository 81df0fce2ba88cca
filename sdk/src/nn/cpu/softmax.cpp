// softmax / log_softmax over the last dim, forward and backward.
//
// Rows [R, C]. Forward subtracts the row max (no overflow), exponentiates with the vectorisable
// exp (vec_math.hpp), sums in fp32 (SIMD partial sums). Backward from the OUTPUT y:
//   softmax:     dx = y (dy - sum(dy y))
//   log_softmax: dx = dy - exp(y) sum(dy)
// cpu.tbb parallelises over rows; cpu.ref loops in double with std::exp.

#include <limits>

#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/vec_math.hpp"

namespace benchhost::nn::cpu {
namespace {

BH_CPU_KERNEL void softmax_rows(const float* x, float* y, std::int64_t r0, std::int64_t r1,
                                std::int64_t C, bool log) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (std::int64_t j = 0; j < C; ++j) m = xr[j] > m ? xr[j] : m;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (std::int64_t j = 0; j < C; ++j) {
      const float e = vexp(xr[j] - m);
      yr[j] = e;
      s += e;
    }
    if (log) {
      const float lse = m + std::log(s);
      for (std::int64_t j = 0; j < C; ++j) yr[j] = xr[j] - lse;
    } else {
      const float inv = 1.0f / s;
      for (std::int64_t j = 0; j < C; ++j) yr[j] = flush_tiny(yr[j] * inv);  // Note [No denormal outputs]
    }
  }
}

BH_CPU_KERNEL void softmax_bwd_rows(const float* dy, const float* y, float* dx, std::int64_t r0,
                                    std::int64_t r1, std::int64_t C, bool log) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* dyr = dy + r * C;
    const float* yr = y + r * C;
    float* dxr = dx + r * C;
    float s = 0;
    if (log) {
#pragma omp simd reduction(+ : s)
      for (std::int64_t j = 0; j < C; ++j) s += dyr[j];
      for (std::int64_t j = 0; j < C; ++j) dxr[j] = dyr[j] - vexp(yr[j]) * s;
    } else {
#pragma omp simd reduction(+ : s)
      for (std::int64_t j = 0; j < C; ++j) s += dyr[j] * yr[j];
      for (std::int64_t j = 0; j < C; ++j) dxr[j] = yr[j] * (dyr[j] - s);
    }
  }
}

template <bool Log>
void fwd_tbb(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const std::int64_t C = x.size(-1), R = rows_of(x);
  const float* xp = x.data<float>();
  float* y = c.outputs[0].data<float>();
  parallel_range(R, row_grain(C), [&](std::int64_t r0, std::int64_t r1) { softmax_rows(xp, y, r0, r1, C, Log); });
}

template <bool Log>
void bwd_tbb(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  const std::int64_t C = dy.size(-1), R = rows_of(dy);
  const float* dyp = dy.data<float>();
  const float* y = c.inputs[1].data<float>();
  float* dx = c.outputs[0].data<float>();
  parallel_range(R, row_grain(C), [&](std::int64_t r0, std::int64_t r1) { softmax_bwd_rows(dyp, y, dx, r0, r1, C, Log); });
}

template <bool Log>
void fwd_ref(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const std::int64_t C = x.size(-1), R = rows_of(x);
  const float* xp = x.data<float>();
  float* y = c.outputs[0].data<float>();
  for (std::int64_t r = 0; r < R; ++r) {
    double m = -INFINITY, s = 0;
    for (std::int64_t j = 0; j < C; ++j) m = std::max(m, static_cast<double>(xp[r * C + j]));
    for (std::int64_t j = 0; j < C; ++j) s += std::exp(xp[r * C + j] - m);
    for (std::int64_t j = 0; j < C; ++j)
      y[r * C + j] = static_cast<float>(Log ? xp[r * C + j] - m - std::log(s) : std::exp(xp[r * C + j] - m) / s);
  }
}

template <bool Log>
void bwd_ref(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  const std::int64_t C = dy.size(-1), R = rows_of(dy);
  const float* dyp = dy.data<float>();
  const float* y = c.inputs[1].data<float>();
  float* dx = c.outputs[0].data<float>();
  for (std::int64_t r = 0; r < R; ++r) {
    double s = 0;
    for (std::int64_t j = 0; j < C; ++j) s += Log ? dyp[r * C + j] : static_cast<double>(dyp[r * C + j]) * y[r * C + j];
    for (std::int64_t j = 0; j < C; ++j)
      dx[r * C + j] = static_cast<float>(Log ? dyp[r * C + j] - std::exp(static_cast<double>(y[r * C + j])) * s
                                             : y[r * C + j] * (dyp[r * C + j] - s));
  }
}

template <bool Log>
std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  OpCall a, b;
  a.inputs = {case_tensor({4, 3, 50}, seed, -8.0f, 8.0f)};
  a.outputs = {Tensor::empty({4, 3, 50})};
  b.inputs = {case_tensor({2, 1000}, seed + 1, -30.0f, 30.0f)};
  b.outputs = {Tensor::empty({2, 1000})};
  return {a, b};
}

template <bool Log>
std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  OpCall a;
  Tensor y = case_tensor({6, 40}, seed, -4.0f, 4.0f);
  OpCall f;
  f.inputs = {y};
  f.outputs = {Tensor::empty({6, 40})};
  fwd_ref<Log>(f);
  a.inputs = {case_tensor({6, 40}, seed + 1), f.outputs[0]};
  a.outputs = {Tensor::empty({6, 40})};
  return {a};
}

const bool registered =
    register_op(OpDef{"softmax_forward", "inputs {x [.., C]}, outputs {y}", fwd_cases<false>, 1e-6, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, fwd_tbb<false>, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref<false>, true}}}) &&
    register_op(OpDef{"softmax_backward", "inputs {dy, y}, outputs {dx}", bwd_cases<false>, 1e-6, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, bwd_tbb<false>, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref<false>, true}}}) &&
    register_op(OpDef{"log_softmax_forward", "inputs {x [.., C]}, outputs {y}", fwd_cases<true>, 1e-5, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, fwd_tbb<true>, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref<true>, true}}}) &&
    register_op(OpDef{"log_softmax_backward", "inputs {dy, y}, outputs {dx}", bwd_cases<true>, 1e-6, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, bwd_tbb<true>, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref<true>, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu

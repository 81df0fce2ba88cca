#pragma once
// Chunked parallel loops over the elements of a tensor (oneTBB), shared by the initialisers
// (init.cpp), round_to_storage (precision.cpp), EMA and the CPU multi-tensor ops
// (nn/cpu/optim_multi.cpp). Private to the SDK.
//
// Note [Deterministic chunked reductions]
// Work over n elements is cut into fixed chunks of kChunk elements. Element-wise loops run the
// chunks in parallel in any order; reductions compute one double partial per chunk and add the
// partials in chunk order, so a norm is bitwise the same on 1 or 64 threads. kChunk is large
// enough (64 KiB of floats) that the per-chunk overhead is noise, small enough to balance.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "benchhost/nn/module.hpp"

namespace benchhost::nn::detail {

constexpr std::int64_t kChunk = 16384;

// Note [Vectorising optimizer loops]
// With the default -fmath-errno, GCC will not vectorise a loop that calls std::sqrt (the call
// may set errno), and Adam, LAMB and Adagrad need one per element. So those loops run in blocks
// of kBlock elements split in three: a vectorisable loop that writes the sqrt arguments to a
// stack buffer, sqrt_inplace() (SIMD intrinsics: sqrt of a non-negative value never sets errno),
// and a vectorisable loop that consumes the roots. Same operations, same rounding, as the plain
// loop: results are bitwise those of the scalar code.
constexpr std::int64_t kBlock = 256;

/// x[i] = sqrt(x[i]) for i < n (x[i] >= 0).
inline void sqrt_inplace(float* x, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#elif defined(__ARM_NEON) && defined(__aarch64__)
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vsqrtq_f32(vld1q_f32(x + i)));
#endif
  for (; i < n; ++i) x[i] = std::sqrt(x[i]);
}

/// sum(x[i]^2) over [0, n): 16 float lanes (vectorisable without -ffast-math) within blocks of
/// 256 elements, blocks added in double. Each lane sums at most 16 squares in float, so the
/// relative error stays ~1e-6 whatever n is.
inline double sum_squares(const float* x, std::int64_t n) {
  double s = 0;
  std::int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    float lane[16] = {};
    for (int k = 0; k < 256; k += 16)
      for (int j = 0; j < 16; ++j) lane[j] += x[i + k + j] * x[i + k + j];
    float t = 0;
    for (float l : lane) t += l;
    s += t;
  }
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

/// f(begin, end) over [0, n) in chunks of kChunk, in parallel.
template <class F>
void parallel_chunks(std::int64_t n, F&& f) {
  if (n <= 0) return;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks == 1) {
    f(std::int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, chunks, 1),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
                      for (std::int64_t c = r.begin(); c != r.end(); ++c)
                        f(c * kChunk, std::min(n, (c + 1) * kChunk));
                    });
}

/// Sum over chunks of f(begin, end) -> std::array<double, K>, in chunk order.
template <std::size_t K, class F>
std::array<double, K> chunked_sum(std::int64_t n, F&& f) {
  std::array<double, K> total{};
  if (n <= 0) return total;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<std::array<double, K>> partial(static_cast<std::size_t>(chunks));
  parallel_chunks(n, [&](std::int64_t b, std::int64_t e) { partial[b / kChunk] = f(b, e); });
  for (const auto& p : partial)
    for (std::size_t k = 0; k < K; ++k) total[k] += p[k];
  return total;
}

/// The element spans of `value` that carry meaningful gradients: the whole tensor when `rows` is
/// undefined, else one span per row index in `rows` (an i64 CPU tensor, validated by the
/// caller). f(begin, end) runs in parallel.
template <class F>
void for_each_span(const Tensor& value, const Tensor& rows, F&& f) {
  if (!rows.defined()) {
    parallel_chunks(value.numel(), f);
    return;
  }
  const std::int64_t n = rows.numel();
  if (n == 0) return;
  const std::int64_t row_len = value.numel() / value.size(0);
  const std::int64_t* idx = rows.data<std::int64_t>();
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, std::max<std::int64_t>(1, kChunk / std::max<std::int64_t>(row_len, 1))),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
                      for (std::int64_t i = r.begin(); i != r.end(); ++i)
                        f(idx[i] * row_len, (idx[i] + 1) * row_len);
                    });
}

/// Deterministic sum over the spans of for_each_span (sparse: in `rows` order).
template <std::size_t K, class F>
std::array<double, K> span_sum(const Tensor& value, const Tensor& rows, F&& f) {
  if (!rows.defined()) return chunked_sum<K>(value.numel(), f);
  const std::int64_t n = rows.numel();
  if (n == 0) return {};
  const std::int64_t row_len = value.numel() / value.size(0);
  const std::int64_t* idx = rows.data<std::int64_t>();
  std::vector<std::array<double, K>> partial(static_cast<std::size_t>(n));
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n), [&](const tbb::blocked_range<std::int64_t>& r) {
    for (std::int64_t i = r.begin(); i != r.end(); ++i)
      partial[i] = f(idx[i] * row_len, (idx[i] + 1) * row_len);
  });
  std::array<double, K> total{};
  for (const auto& q : partial)
    for (std::size_t k = 0; k < K; ++k) total[k] += q[k];
  return total;
}

/// for_each_span over a parameter's value and sparse_rows.
template <class F>
void for_each_grad_span(const nn::Parameter& p, F&& f) {
  for_each_span(p.value, p.sparse_rows, f);
}

/// span_sum over a parameter's value and sparse_rows.
template <std::size_t K, class F>
std::array<double, K> grad_span_sum(const nn::Parameter& p, F&& f) {
  return span_sum<K>(p.value, p.sparse_rows, f);
}

}  // namespace benchhost::nn::detail

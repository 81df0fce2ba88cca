// Initialisers: Note [Deterministic initialisation] in nn/init.hpp. Each fixed chunk of kChunk
// elements gets its own Rng(sub_seed, chunk index), so the values are independent of how oneTBB
// schedules the chunks.
#include "benchhost/nn/init.hpp"

#include <algorithm>
#include <cmath>

#include "benchhost/error.hpp"
#include "nn/parallel.hpp"

namespace benchhost::nn::init {

namespace {

using detail::kChunk;
using detail::parallel_chunks;

void check_target(const Tensor& t, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined() && t.dtype() == DType::f32 && t.device().is_cpu() &&
              t.is_contiguous(),
              "init::{}: expected a contiguous f32 CPU tensor (initialise on the CPU, then move "
              "it), got {}", what, t.defined() ? t.describe() : std::string("an undefined tensor"));
}

// f(Rng& chunk_rng, float* x, begin, end) per chunk.
template <class F>
void fill_chunks(Tensor& t, Rng& rng, F&& f) {
  const std::uint64_t sub_seed = rng.next_u64();
  float* x = t.data<float>();
  parallel_chunks(t.numel(), [&](std::int64_t b, std::int64_t e) {
    Rng local(sub_seed, static_cast<std::uint64_t>(b / kChunk));
    f(local, x, b, e);
  });
}

float fan_for(const Shape& shape, FanMode mode, const char* what) {
  const Fans f = compute_fans(shape);
  const std::int64_t fan = mode == FanMode::fan_in ? f.fan_in : f.fan_out;
  BH_CHECK_AS(InvalidArgument, fan > 0, "init::{}: {} of shape {} is 0", what,
              mode == FanMode::fan_in ? "fan_in" : "fan_out", shape_str(shape));
  return static_cast<float>(fan);
}

}  // namespace

Fans compute_fans(const Shape& shape) {
  BH_CHECK_AS(InvalidArgument, !shape.empty(),
              "init: fans are undefined for a 0-d tensor (shape {})", shape_str(shape));
  if (shape.size() == 1) return {shape[0], shape[0]};
  std::int64_t receptive = 1;
  for (std::size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

float gain(Nonlinearity nl, float negative_slope) {
  switch (nl) {
    case Nonlinearity::linear: case Nonlinearity::sigmoid: return 1.0f;
    case Nonlinearity::tanh: return 5.0f / 3.0f;
    case Nonlinearity::relu: return std::sqrt(2.0f);
    case Nonlinearity::leaky_relu:
      return std::sqrt(2.0f / (1.0f + negative_slope * negative_slope));
  }
  return 1.0f;
}

Rng rng_for(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return Rng(seed, h);
}

void normal_(Tensor& t, Rng& rng, float mean, float stddev) {
  check_target(t, "normal_");
  BH_CHECK_AS(InvalidArgument, stddev >= 0.0f, "init::normal_: stddev must be >= 0, got {}", stddev);
  fill_chunks(t, rng, [&](Rng& r, float* x, std::int64_t b, std::int64_t e) {
    for (std::int64_t k = b; k < e; ++k) x[k] = r.normal(mean, stddev);
  });
}

void trunc_normal_(Tensor& t, Rng& rng, float mean, float stddev, float lo_sigmas, float hi_sigmas) {
  check_target(t, "trunc_normal_");
  BH_CHECK_AS(InvalidArgument, stddev >= 0.0f && lo_sigmas < hi_sigmas && hi_sigmas > -6.0f &&
              lo_sigmas < 6.0f && (hi_sigmas - lo_sigmas) > 0.05f,
              "init::trunc_normal_: need stddev >= 0 ({}) and a sigma interval [{}, {}] that a "
              "normal sample hits with reasonable probability", stddev, lo_sigmas, hi_sigmas);
  fill_chunks(t, rng, [&](Rng& r, float* x, std::int64_t b, std::int64_t e) {
    for (std::int64_t k = b; k < e; ++k) {
      float z;
      do z = r.normal(); while (z < lo_sigmas || z > hi_sigmas);  // resample, as TF does
      x[k] = mean + stddev * z;
    }
  });
}

void uniform_(Tensor& t, Rng& rng, float lo, float hi) {
  check_target(t, "uniform_");
  BH_CHECK_AS(InvalidArgument, lo <= hi, "init::uniform_: need lo <= hi, got [{}, {})", lo, hi);
  fill_chunks(t, rng, [&](Rng& r, float* x, std::int64_t b, std::int64_t e) {
    for (std::int64_t k = b; k < e; ++k) x[k] = r.uniform(lo, hi);
  });
}

void uniform_slice_(Tensor& t, Rng& rng, float lo, float hi, std::int64_t offset) {
  check_target(t, "uniform_slice_");
  BH_CHECK_AS(InvalidArgument, lo <= hi && offset >= 0,
              "init::uniform_slice_: need lo <= hi and offset >= 0, got [{}, {}) at {}", lo, hi, offset);
  // The chunks of the whole tensor that overlap [offset, offset + n), each from its own stream as
  // in fill_chunks, skipping the draws before the slice in the first one.
  const std::uint64_t sub_seed = rng.next_u64();
  const std::int64_t n = t.numel();
  float* x = t.data<float>();
  const std::int64_t first = offset / kChunk, last = n == 0 ? first : (offset + n - 1) / kChunk;
  parallel_chunks((last - first + 1) * kChunk, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t c = first + b / kChunk; c < first + (e + kChunk - 1) / kChunk; ++c) {
      const std::int64_t begin = std::max(c * kChunk, offset), end = std::min((c + 1) * kChunk, offset + n);
      if (begin >= end) continue;
      Rng r(sub_seed, static_cast<std::uint64_t>(c));
      for (std::int64_t k = c * kChunk; k < begin; ++k) (void)r.uniform();
      for (std::int64_t k = begin; k < end; ++k) x[k - offset] = r.uniform(lo, hi);
    }
  });
}

void kaiming_normal_(Tensor& t, Rng& rng, FanMode mode, Nonlinearity nl, float negative_slope) {
  check_target(t, "kaiming_normal_");
  normal_(t, rng, 0.0f, gain(nl, negative_slope) / std::sqrt(fan_for(t.shape(), mode, "kaiming_normal_")));
}

void kaiming_uniform_(Tensor& t, Rng& rng, FanMode mode, Nonlinearity nl, float negative_slope) {
  check_target(t, "kaiming_uniform_");
  const float bound = gain(nl, negative_slope) * std::sqrt(3.0f / fan_for(t.shape(), mode, "kaiming_uniform_"));
  uniform_(t, rng, -bound, bound);
}

void xavier_uniform_(Tensor& t, Rng& rng, float g) {
  check_target(t, "xavier_uniform_");
  const Fans f = compute_fans(t.shape());
  BH_CHECK_AS(InvalidArgument, f.fan_in + f.fan_out > 0, "init::xavier_uniform_: empty shape {}",
              shape_str(t.shape()));
  const float bound = g * std::sqrt(6.0f / static_cast<float>(f.fan_in + f.fan_out));
  uniform_(t, rng, -bound, bound);
}

void xavier_normal_(Tensor& t, Rng& rng, float g) {
  check_target(t, "xavier_normal_");
  const Fans f = compute_fans(t.shape());
  BH_CHECK_AS(InvalidArgument, f.fan_in + f.fan_out > 0, "init::xavier_normal_: empty shape {}",
              shape_str(t.shape()));
  normal_(t, rng, 0.0f, g * std::sqrt(2.0f / static_cast<float>(f.fan_in + f.fan_out)));
}

void constant_(Tensor& t, float value) {
  check_target(t, "constant_");
  float* x = t.data<float>();
  parallel_chunks(t.numel(), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t k = b; k < e; ++k) x[k] = value;
  });
}

void zeros_(Tensor& t) { constant_(t, 0.0f); }
void ones_(Tensor& t) { constant_(t, 1.0f); }

}  // namespace benchhost::nn::init

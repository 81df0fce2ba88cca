#pragma once
/// @file nn/init.hpp  Weight initialisers, deterministic per seed.
///
/// Note [Deterministic initialisation]
/// Every initialiser takes an Rng and draws one 64-bit sub-seed from it; element i of the tensor
/// is then produced by the Philox stream (sub-seed, i / 16384), i.e. the tensor is filled in
/// fixed chunks of 16384 elements that oneTBB may process in any order on any number of threads.
/// The values depend on the Rng's state and the tensor's shape only. The usual pattern gives
/// each parameter its own stream from the run seed and the parameter's name, so adding a layer
/// does not change the initialisation of the others:
///     Rng rng = init::rng_for(seed, p->name);  init::kaiming_normal_(p->value, rng);
///
/// Tensors must be f32, contiguous and on the CPU (initialise, then move to the device);
/// InvalidArgument otherwise. Fans follow PyTorch: for a weight of shape [out, in, k...]
/// (linear [out, in]; conv [out, in/groups, kh, kw]) fan_in = in * prod(k), fan_out = out * prod(k);
/// a 1-d tensor has fan_in = fan_out = its length.

#include <cstdint>
#include <string_view>

#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn::init {

enum class FanMode : std::uint8_t { fan_in, fan_out };
enum class Nonlinearity : std::uint8_t { linear, sigmoid, tanh, relu, leaky_relu };

struct Fans {
  std::int64_t fan_in = 0;
  std::int64_t fan_out = 0;
};
/// Fans of a weight shape (see the file comment). InvalidArgument for a 0-d shape.
Fans compute_fans(const Shape& shape);
/// Recommended gain: linear/sigmoid 1, tanh 5/3, relu sqrt(2), leaky_relu sqrt(2/(1+slope^2)).
float gain(Nonlinearity nl, float negative_slope = 0.01f);

/// An Rng for one named parameter: Rng(seed, stream = FNV-1a hash of name).
Rng rng_for(std::uint64_t seed, std::string_view name);

void normal_(Tensor& t, Rng& rng, float mean = 0.0f, float stddev = 1.0f);
/// Normal(mean, stddev) resampled until inside [mean + lo_sigmas*stddev, mean + hi_sigmas*stddev]
/// (default +-2 sigma: BERT's and Megatron's truncated normal, sample std ~0.88*stddev).
void trunc_normal_(Tensor& t, Rng& rng, float mean = 0.0f, float stddev = 1.0f,
                   float lo_sigmas = -2.0f, float hi_sigmas = 2.0f);
/// Uniform in [lo, hi).
void uniform_(Tensor& t, Rng& rng, float lo = 0.0f, float hi = 1.0f);
/// Elements [offset, offset + t.numel()) of what uniform_(whole, rng, lo, hi) would write into a
/// larger tensor `whole` from the same rng state: a shard of a table (rows split over processes)
/// gets exactly the values the whole table would hold, in O(shard) time and memory.
void uniform_slice_(Tensor& t, Rng& rng, float lo, float hi, std::int64_t offset);
/// He et al.: normal with std = gain / sqrt(fan).
void kaiming_normal_(Tensor& t, Rng& rng, FanMode mode = FanMode::fan_in,
                     Nonlinearity nl = Nonlinearity::relu, float negative_slope = 0.01f);
/// He et al.: uniform in +-gain * sqrt(3 / fan).
void kaiming_uniform_(Tensor& t, Rng& rng, FanMode mode = FanMode::fan_in,
                      Nonlinearity nl = Nonlinearity::relu, float negative_slope = 0.01f);
/// Glorot & Bengio: uniform in +-gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(Tensor& t, Rng& rng, float gain = 1.0f);
/// Glorot & Bengio: normal with std = gain * sqrt(2 / (fan_in + fan_out)).
void xavier_normal_(Tensor& t, Rng& rng, float gain = 1.0f);
void zeros_(Tensor& t);
void ones_(Tensor& t);
void constant_(Tensor& t, float value);

}  // namespace benchhost::nn::init

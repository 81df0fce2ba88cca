#pragma once
/// @file random.hpp  Counter-based random numbers (Philox4x32-10).
///
/// Note [Deterministic randomness]
/// Every random decision in benchhost is a pure function of (seed, stream, counter): dropout
/// masks of (seed, step, layer), augmentation of (seed, epoch, sample index), initialisation of
/// (seed, parameter index). A counter-based generator makes that cheap and independent of thread
/// count and scheduling: any thread can produce element i of any stream without producing the
/// elements before it. Philox4x32-10 (Salmon et al., SC'11) is the generator cuRAND and PyTorch
/// use on GPUs, so a CUDA kernel can reproduce a CPU mask exactly.

#include <array>
#include <cmath>
#include <cstdint>

/// Functions usable from CUDA device code too (dropout kernels reproduce CPU masks bit for bit).
#ifndef BH_HOST_DEVICE
#if defined(__CUDACC__)
#define BH_HOST_DEVICE __host__ __device__
#else
#define BH_HOST_DEVICE
#endif
#endif

namespace benchhost {

/// Mix a 64-bit value (splitmix64 finaliser): derive sub-seeds, e.g. mix(seed ^ mix(epoch)).
BH_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Philox4x32-10 into out[0..3]: 4 x 32-bit outputs per (key, counter). Host and device.
BH_HOST_DEVICE inline void philox4x32_into(std::uint64_t key, std::uint64_t counter_hi,
                                           std::uint64_t counter_lo, std::uint32_t out[4]) noexcept {
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo), c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi), c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/// Philox4x32-10: 4 x 32-bit outputs per (key, counter).
inline std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_hi,
                                               std::uint64_t counter_lo) noexcept {
  std::array<std::uint32_t, 4> out;
  philox4x32_into(key, counter_hi, counter_lo, out.data());
  return out;
}

/// A stream of random numbers for one (seed, stream id). Cheap to construct; not thread-safe
/// itself, but any number of Rng objects may run in parallel, and `at(i)` style access through
/// uniform_at() needs no sequential state.
class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t stream = 0) noexcept : key_(mix64(seed)), stream_(stream) {}

  /// Next 32 random bits.
  std::uint32_t next_u32() noexcept {
    if (lane_ == 4) {
      block_ = philox4x32(key_, stream_, counter_++);
      lane_ = 0;
    }
    return block_[lane_++];
  }
  std::uint64_t next_u64() noexcept {
    return (static_cast<std::uint64_t>(next_u32()) << 32) | next_u32();
  }
  /// Uniform in [0, 1) with 24 random bits.
  float uniform() noexcept { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }
  /// Uniform in [lo, hi).
  float uniform(float lo, float hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n) (n > 0), unbiased (Lemire's method).
  std::uint64_t below(std::uint64_t n) noexcept {
    if (n <= 0xffffffffull) {
      std::uint64_t m = static_cast<std::uint64_t>(next_u32()) * n;
      auto l = static_cast<std::uint32_t>(m);
      if (l < n) {
        auto t = static_cast<std::uint32_t>((0x100000000ull - n) % n);
        while (l < t) {
          m = static_cast<std::uint64_t>(next_u32()) * n;
          l = static_cast<std::uint32_t>(m);
        }
      }
      return m >> 32;
    }
    // 64-bit range: rejection on the top bits.
    std::uint64_t mask = ~0ull >> __builtin_clzll((n - 1) | 1);
    for (;;) {
      std::uint64_t v = next_u64() & mask;
      if (v < n) return v;
    }
  }
  /// Standard normal (Box-Muller).
  float normal() noexcept {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    float u1 = (static_cast<float>(next_u32() >> 8) + 0.5f) * (1.0f / 16777216.0f);
    float u2 = uniform();
    float r = std::sqrt(-2.0f * std::log(u1));
    spare_ = r * std::sin(6.28318530717958647692f * u2);
    has_spare_ = true;
    return r * std::cos(6.28318530717958647692f * u2);
  }
  float normal(float mean, float stddev) noexcept { return mean + stddev * normal(); }

  /// Element i of this stream as a uniform float in [0, 1), without sequential state: the
  /// building block for parallel masks (each of the 4 lanes of block i/4).
  float uniform_at(std::uint64_t i) const noexcept {
    auto b = philox4x32(key_, stream_, i >> 2);
    return static_cast<float>(b[i & 3] >> 8) * (1.0f / 16777216.0f);
  }

 private:
  std::uint64_t key_;
  std::uint64_t stream_;
  std::uint64_t counter_ = 0;
  std::array<std::uint32_t, 4> block_{};
  int lane_ = 4;
  float spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace benchhost

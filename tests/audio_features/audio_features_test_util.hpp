#pragma once
// Test signals for the audio feature tests: sines and a deterministic speech-like signal.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "benchhost/random.hpp"

namespace benchhost::data::test {

/// amplitude * sin(2 pi hz t / rate), n samples.
inline std::vector<float> sine(double amplitude, double hz, double rate, std::int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t)
    x[static_cast<std::size_t>(t)] = static_cast<float>(amplitude * std::sin(2 * std::numbers::pi * hz * t / rate));
  return x;
}

/// round(seconds * rate) samples of voiced-speech-like audio: harmonics of a gliding 120..180 Hz
/// pitch under a 4 Hz syllable envelope, plus white noise at about -40 dB; amplitude < 0.5.
inline std::vector<float> speech_like(double seconds, double rate, std::uint64_t seed) {
  const auto n = static_cast<std::int64_t>(std::llround(seconds * rate));
  std::vector<float> x(static_cast<std::size_t>(n));
  Rng rng(seed, 77);
  double phase = 0;
  for (std::int64_t t = 0; t < n; ++t) {
    const double s = static_cast<double>(t) / rate;
    const double pitch = 150 + 30 * std::sin(2 * std::numbers::pi * 0.7 * s);
    phase += 2 * std::numbers::pi * pitch / rate;
    const double env = 0.3 + 0.7 * 0.5 * (1 - std::cos(2 * std::numbers::pi * 4 * s));
    double v = 0;
    for (int k = 1; k <= 12 && k * 180 < rate / 2; ++k) v += std::sin(k * phase + 0.3 * k) / k;
    x[static_cast<std::size_t>(t)] = static_cast<float>(0.12 * env * v + 0.004 * rng.normal());
  }
  return x;
}

}  // namespace benchhost::data::test

// RNN-T feature pipeline on one utterance (default 15 s at 16 kHz): the eval chain (trim, dither,
// pre-emphasis, spectrogram, mel, log, normalise, splice) and the train chain (speed perturbation
// by resampling to 1.1 x 16 kHz first, SpecAugment before the splice), one thread, median of 5
// after a warm-up; one JSON line per chain. The signal is the one tools/peers/audio_features_peer.py
// bench builds (silence, harmonics under a syllable envelope, noise), so the two compare.
//   bench_audio_features [SECONDS]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <string>
#include <vector>

#include "benchhost/data/audio_features.hpp"

using namespace benchhost;
using namespace benchhost::data;

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 15.0;
  const double rate = 16000;
  const auto n = static_cast<std::int64_t>(seconds * rate);
  std::vector<float> x(static_cast<std::size_t>(n), 0.0f);
  Rng noise(1);
  for (std::int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / rate;
    const double env = 0.5 * (1 - std::cos(2 * std::numbers::pi * 4 * t));
    double v = 0;
    for (int k = 1; k < 8; ++k) v += 0.1 / k * std::sin(2 * std::numbers::pi * 140 * k * t);
    x[static_cast<std::size_t>(i)] = static_cast<float>(v * env + 0.01 * noise.normal());
  }
  std::fill(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(rate / 2), 0.0f);
  std::fill(x.end() - static_cast<std::ptrdiff_t>(rate / 2), x.end(), 0.0f);

  RnntFeatureConfig train_cfg;
  train_cfg.speed_min = train_cfg.speed_max = 1.1;  // the peer's fixed factor (torchaudio needs integer rates)
  const RnntFeaturePipeline eval_pipe, train_pipe(train_cfg);
  for (const bool train : {false, true}) {
    const RnntFeaturePipeline& pipe = train ? train_pipe : eval_pipe;
    Rng rng(7);
    std::int64_t frames = pipe.compute(x.data(), n, rate, rng, train).frames;  // warm-up
    std::vector<double> ms;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      frames = pipe.compute(x.data(), n, rate, rng, train).frames;
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    std::string all;
    for (double v : ms) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.3f", all.empty() ? "" : ", ", v);
      all += buf;
    }
    std::printf("{\"bench\": \"rnnt_features\", \"impl\": \"benchhost\", \"chain\": \"%s\", \"seconds\": %g, "
                "\"threads\": 1, \"frames\": %lld, \"ms_median_of_5\": %.3f, \"ms_all\": [%s]}\n",
                train ? "train" : "eval", seconds, static_cast<long long>(frames), sorted[2], all.c_str());
  }
  return 0;
}

// The feature pipeline against torch 1.13 / torchaudio 0.13 (tools/peers/audio_features_peer.py):
// torchaudio's Slaney mel filterbank and sinc resampler, torch.stft, and the evaluation chain
// re-implemented in the peer from DALI's operator docs. Skips visibly without torch/torchaudio.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "audio_features_test_util.hpp"
#include "benchhost/data/audio_features.hpp"

namespace benchhost::data {
namespace {

namespace fs = std::filesystem;
using test::speech_like;

bool have_torchaudio() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import torch, torchaudio' > /dev/null 2>&1") == 0;
  return ok;
}

#define SKIP_WITHOUT_TORCHAUDIO() \
  if (!have_torchaudio()) GTEST_SKIP() << "/usr/bin/python3 has no torch/torchaudio: the peer cross-check did not run"

// A scratch folder with meta.json and raw float32 arrays for the peer.
struct PeerDir {
  fs::path dir;
  std::vector<std::string> shapes;
  std::string extra;  // more meta fields, JSON, each ending with ", "

  explicit PeerDir(const char* tag) {
    dir = fs::temp_directory_path() / fmt::format("bh_audiofeat_{}_{}", tag, ::getpid());
    fs::create_directories(dir);
  }
  ~PeerDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  void put(const std::string& name, const std::vector<float>& v) {
    std::ofstream(dir / (name + ".bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    shapes.push_back(fmt::format("\"{}\": [{}]", name, v.size()));
  }
  bool run(const char* mode) {
    std::ofstream(dir / "meta.json") << "{" << extra << "\"shapes\": {" << fmt::format("{}", fmt::join(shapes, ", "))
                                     << "}}";
    const fs::path peer = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "audio_features_peer.py";
    const std::string cmd = fmt::format("/usr/bin/python3 '{}' {} '{}' 2>&1", peer.string(), mode, dir.string());
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd;
    return rc == 0;
  }
  std::vector<float> get(const std::string& name) const {
    std::ifstream f(dir / (name + ".bin"), std::ios::binary | std::ios::ate);
    std::vector<float> v(static_cast<std::size_t>(f.tellg()) / sizeof(float));
    f.seekg(0);
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    return v;
  }
};

TEST(AudioFeaturesPeer, MelFilterbankEqualsTorchaudioSlaney) {
  SKIP_WITHOUT_TORCHAUDIO();
  PeerDir p("mel");
  ASSERT_TRUE(p.run("mel"));
  const auto want = p.get("fb");
  const auto got = MelFilterBank(80, 512, 16000, 0, 8000).dense();
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
  EXPECT_LE(worst, 1e-6);
  RecordProperty("max_abs_diff", fmt::format("{:.3g}", worst));
  std::printf("mel filterbank vs torchaudio melscale_fbanks(slaney, slaney): max |diff| %.3g\n", worst);
}

TEST(AudioFeaturesPeer, SpectrogramEqualsTorchStft) {
  SKIP_WITHOUT_TORCHAUDIO();
  // 1.2 s, and 539 samples (under four frames). torch's reflect pad needs n > 256, so shorter
  // signals are hand tests only.
  const std::vector<double> lengths{1.2, 0.0337};
  PeerDir p("stft");
  std::vector<std::vector<float>> signals;
  for (std::size_t c = 0; c < lengths.size(); ++c) {
    signals.push_back(speech_like(lengths[c], 16000, 21 + c));
    p.put(fmt::format("x{}", c), signals.back());
  }
  p.extra = fmt::format("\"count\": {}, ", lengths.size());
  ASSERT_TRUE(p.run("stft"));
  for (std::size_t c = 0; c < lengths.size(); ++c) {
    const auto& x = signals[c];
    const auto want = p.get(fmt::format("power{}", c));
    const auto n = static_cast<std::int64_t>(x.size());
    const std::int64_t frames = spectrogram_frames(n, 160);
    ASSERT_EQ(static_cast<std::int64_t>(want.size()), frames * 257);
    std::vector<float> got(want.size());
    PowerSpectrogram().compute(x.data(), n, got.data());
    // Relative to each bin, plus a floor of 1e-6 of the frame's largest bin (f32 FFT rounding
    // lands on every bin at about 1e-7 of the frame's energy; the peer runs in f64).
    double worst_rel = 0;
    for (std::int64_t f = 0; f < frames; ++f) {
      const float* w = want.data() + f * 257;
      const float* g = got.data() + f * 257;
      const float peak = *std::max_element(w, w + 257);
      for (int k = 0; k < 257; ++k) {
        const double err = std::abs(double(g[k]) - w[k]);
        ASSERT_LE(err, 1e-5 * w[k] + 1e-6 * peak) << "frame " << f << " bin " << k << ": " << g[k] << " vs " << w[k];
        if (w[k] > 1e-3 * peak) worst_rel = std::max(worst_rel, err / w[k]);
      }
    }
    std::printf("spectrogram (%lld frames) vs torch.stft f64: max relative diff %.3g on bins above -30 dB\n",
                static_cast<long long>(frames), worst_rel);
  }
}

TEST(AudioFeaturesPeer, LogMelNormalizeSpliceEqualsDaliDocsReimplementation) {
  SKIP_WITHOUT_TORCHAUDIO();
  PeerDir p("logmel");
  const auto x = speech_like(2.0, 16000, 33);
  p.put("x", x);
  ASSERT_TRUE(p.run("logmel"));
  const RnntFeaturePipeline pipe;
  std::int64_t frames = 0;
  const auto lm = pipe.log_mel(x.data(), static_cast<std::int64_t>(x.size()), &frames);
  const auto want = p.get("logmel");
  ASSERT_EQ(lm.size(), want.size());
  double worst = 0;
  for (std::size_t i = 0; i < lm.size(); ++i) worst = std::max(worst, double(std::abs(lm[i] - want[i])));
  // Normalised log-mel values are O(1); f32 power spectra carry ~1e-6 relative error, which the
  // log turns into ~1e-6 absolute and normalisation scales by 1 / std (std of ln-mel ~ 1..3).
  EXPECT_LE(worst, 1e-4);
  std::printf("log-mel + normalise (%lld frames) vs peer f64: max |diff| %.3g\n", static_cast<long long>(frames), worst);
  std::vector<float> spliced(static_cast<std::size_t>(spliced_frames(frames, 3) * 240));
  splice_frames(lm.data(), frames, 80, 3, 3, spliced.data());
  const auto want_spliced = p.get("spliced");
  ASSERT_EQ(spliced.size(), want_spliced.size());
  for (std::size_t i = 0; i < spliced.size(); ++i) ASSERT_NEAR(spliced[i], want_spliced[i], 1e-4) << i;
}

TEST(AudioFeaturesPeer, ResamplerEqualsTorchaudioSinc) {
  SKIP_WITHOUT_TORCHAUDIO();
  // torchaudio's sinc_interpolation with lowpass_filter_width 16 and rolloff 1 is the same
  // Hann-windowed sinc as ours (DALI's window at quality 50), evaluated exactly in f64; ours
  // interpolates a table (< 4e-7 of a tap) and accumulates ~35-40 taps in f32: on a signal of
  // amplitude < 0.5 that bounds the difference by ~1e-6 (measured: about 1e-7). torchaudio's
  // default width 6 / rolloff 0.99 would differ by design (a shorter, lower filter).
  struct Case { int in_rate, out_rate; };
  const std::vector<Case> cases{{16000, 13600}, {16000, 18400}, {16000, 17600}, {22050, 16000}};
  PeerDir p("resample");
  std::vector<std::vector<float>> signals;
  std::vector<std::string> pairs;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    signals.push_back(speech_like(0.5, cases[i].in_rate, 41 + i));
    p.put(fmt::format("x{}", i), signals.back());
    pairs.push_back(fmt::format("[{}, {}]", cases[i].in_rate, cases[i].out_rate));
  }
  p.extra = fmt::format("\"cases\": [{}], ", fmt::join(pairs, ", "));
  ASSERT_TRUE(p.run("resample"));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case c = cases[i];
    const auto& x = signals[i];
    const auto want = p.get(fmt::format("y{}", i));
    const auto got = Resampler().resample(x.data(), static_cast<std::int64_t>(x.size()), c.in_rate, c.out_rate);
    ASSERT_EQ(got.size(), want.size()) << c.in_rate << " -> " << c.out_rate;
    double worst = 0;
    for (std::size_t j = 0; j < got.size(); ++j) worst = std::max(worst, double(std::abs(got[j] - want[j])));
    EXPECT_LE(worst, 1e-6) << c.in_rate << " -> " << c.out_rate;
    std::printf("resample %d -> %d Hz vs torchaudio (width 16, rolloff 1): max |diff| %.3g\n", c.in_rate, c.out_rate,
                worst);
  }
}

}  // namespace
}  // namespace benchhost::data

// Hand cases for the RNN-T feature pipeline (data/audio_features.hpp): each step on inputs whose
// answer is known without a reference implementation. The torch/torchaudio comparisons are in
// peer_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <numbers>
#include <vector>

#include "audio_features_test_util.hpp"
#include "benchhost/data/audio_features.hpp"
#include "benchhost/error.hpp"

namespace benchhost::data {
namespace {

using test::sine;
using test::speech_like;

constexpr double kPi = std::numbers::pi;

// --------------------------------------------------------------------------------------------
// 1. Resampling
// --------------------------------------------------------------------------------------------

// Max |y[j] - a sin(2 pi f j / out_rate)| over output samples far enough from both ends that the
// kernel does not reach past the signal.
double max_sine_error(const std::vector<float>& y, double amplitude, double hz, double out_rate, std::int64_t margin) {
  double err = 0;
  for (std::int64_t j = margin; j + margin < static_cast<std::int64_t>(y.size()); ++j)
    err = std::max(err, std::abs(y[static_cast<std::size_t>(j)] - amplitude * std::sin(2 * kPi * hz * j / out_rate)));
  return err;
}

TEST(Resample, SineKeepsFrequencyAndAmplitude) {
  const Resampler r;
  struct Case { double in_rate, out_rate, hz; };
  // Speed perturbation's extremes and espeak-ng's 22050 Hz to 16 kHz.
  for (const Case c : {Case{16000, 13600, 440}, Case{16000, 18400, 440}, Case{16000, 17123.5, 3000},
                       Case{22050, 16000, 1000}, Case{16000, 16000 * 0.85, 5000}}) {
    const auto x = sine(0.5, c.hz, c.in_rate, 8000);
    const auto y = r.resample(x.data(), static_cast<std::int64_t>(x.size()), c.in_rate, c.out_rate);
    ASSERT_EQ(static_cast<std::int64_t>(y.size()), resampled_length(8000, c.in_rate, c.out_rate));
    // 16 lobes of a Hann-windowed sinc: passband ripple well under 1e-3 below ~0.85 of the cut-off.
    EXPECT_LT(max_sine_error(y, 0.5, c.hz, c.out_rate, 64), 2e-3)
        << c.in_rate << " -> " << c.out_rate << " Hz, " << c.hz << " Hz tone";
  }
}

TEST(Resample, DownsamplingRemovesToneAboveNewNyquist) {
  // 7500 Hz at 16 kHz resampled to 13.6 kHz (Nyquist 6800 Hz): band-limited, so almost nothing
  // is left (DALI's kernel, which keeps the input's cut-off, would alias it to 6100 Hz).
  const Resampler r;
  const auto x = sine(0.5, 7500, 16000, 16000);
  const auto y = r.resample(x.data(), 16000, 16000, 13600);
  double sq = 0;
  for (std::size_t j = 100; j + 100 < y.size(); ++j) sq += double(y[j]) * y[j];
  const double rms = std::sqrt(sq / double(y.size() - 200));
  EXPECT_LT(rms, 0.01 * 0.5 / std::sqrt(2.0));
}

TEST(Resample, IdentityRatioReturnsInput) {
  const Resampler r;
  const auto x = speech_like(0.3, 16000, 7);
  const auto y = r.resample(x.data(), static_cast<std::int64_t>(x.size()), 16000, 16000);
  EXPECT_EQ(y, x);
}

TEST(Resample, LengthAndErrors) {
  EXPECT_EQ(resampled_length(16000, 16000, 17600), 17600);
  EXPECT_EQ(resampled_length(10, 3, 2), 7);  // ceil(6.67)
  EXPECT_EQ(resampled_length(22050, 22050, 16000), 16000);
  const Resampler r;
  const float one = 1.0f;
  EXPECT_THROW(r.resample(&one, 0, 16000, 8000), InvalidArgument);
  EXPECT_THROW(r.resample(&one, 1, 0, 8000), InvalidArgument);
  EXPECT_THROW(Resampler(0), InvalidArgument);
}

// --------------------------------------------------------------------------------------------
// 2. Silence trim
// --------------------------------------------------------------------------------------------

TEST(NonsilentRegion, HandExampleSmallWindow) {
  // W = 4: the moving mean square is nonzero at 5..9 (0.25, 0.5, 0.5, 0.5, 0.25).
  std::vector<float> x(14, 0.0f);
  x[5] = x[6] = 1.0f;
  SampleRange r = nonsilent_region(x.data(), 14, -60.0f, 4);
  EXPECT_EQ(r.begin, 2);  // first = 5, moved back by W - 1 = 3
  EXPECT_EQ(r.length, 8);  // through last = 9
  // -3 dB of 0.5 = 0.2506: only 6..8 pass.
  r = nonsilent_region(x.data(), 14, -3.0f, 4);
  EXPECT_EQ(r.begin, 3);
  EXPECT_EQ(r.length, 6);
  // Loud from the first sample: not moved.
  x[0] = 1.0f;
  r = nonsilent_region(x.data(), 14, -60.0f, 4);
  EXPECT_EQ(r.begin, 0);
  EXPECT_EQ(r.length, 10);
}

TEST(NonsilentRegion, FindsPlantedSpeech) {
  // 0.4 s of silence, 1.2 s of signal, 0.6 s of silence: the kept range holds the planted one
  // and reaches at most one window (2048 samples) past it on each side.
  const std::int64_t s = 6400, e = s + 19200, n = e + 9600;
  std::vector<float> x(static_cast<std::size_t>(n), 0.0f);
  const auto speech = speech_like(1.2, 16000, 3);
  std::copy(speech.begin(), speech.end(), x.begin() + s);
  const SampleRange r = nonsilent_region(x.data(), n);
  EXPECT_LE(r.begin, s);
  EXPECT_GE(r.begin, s - 2047);
  EXPECT_GE(r.begin + r.length, e);
  EXPECT_LE(r.begin + r.length, e + 2047);
  // Quiet noise at -80 dB around it stays silence.
  for (std::int64_t i = 0; i < n; ++i)
    if (i < s || i >= e) x[static_cast<std::size_t>(i)] = (i % 2 ? 1e-5f : -1e-5f);
  const SampleRange q = nonsilent_region(x.data(), n);
  EXPECT_EQ(q.begin, r.begin);
  EXPECT_EQ(q.length, r.length);
}

TEST(NonsilentRegion, AllZeroIsKeptWhole) {
  std::vector<float> x(5000, 0.0f);
  const SampleRange r = nonsilent_region(x.data(), 5000);
  EXPECT_EQ(r.begin, 0);
  EXPECT_EQ(r.length, 5000);
}

// --------------------------------------------------------------------------------------------
// 3. Dither and pre-emphasis
// --------------------------------------------------------------------------------------------

TEST(Preemphasis, ByHand) {
  std::vector<float> x{1.0f, 2.0f, 3.0f, -1.0f};
  preemphasis(x.data(), 4, 0.97f);
  EXPECT_FLOAT_EQ(x[0], 1.0f - 0.97f);  // border 'clamp': x[-1] = x[0]
  EXPECT_FLOAT_EQ(x[1], 2.0f - 0.97f * 1.0f);
  EXPECT_FLOAT_EQ(x[2], 3.0f - 0.97f * 2.0f);
  EXPECT_FLOAT_EQ(x[3], -1.0f - 0.97f * 3.0f);
}

TEST(Dither, ScaleAndDeterminism) {
  std::vector<float> a(20000, 0.0f), b(20000, 0.0f);
  Rng ra(5, 1), rb(5, 1);
  add_dither(a.data(), 20000, 1e-5f, ra);
  add_dither(b.data(), 20000, 1e-5f, rb);
  EXPECT_EQ(a, b);
  double sq = 0, sum = 0;
  for (float v : a) sum += v, sq += double(v) * v;
  EXPECT_NEAR(sum / 20000, 0.0, 3e-7);
  EXPECT_NEAR(std::sqrt(sq / 20000), 1e-5, 3e-7);
}

// --------------------------------------------------------------------------------------------
// 4. FFT and spectrogram
// --------------------------------------------------------------------------------------------

TEST(RealFft, MatchesNaiveDft) {
  for (int size : {4, 8, 64, 512}) {
    const RealFft fft(size);
    const auto x = speech_like(size / 16000.0, 16000, size);
    ASSERT_EQ(static_cast<int>(x.size()), size);
    std::vector<std::complex<float>> got(static_cast<std::size_t>(size / 2 + 1));
    fft.forward(x.data(), got.data());
    double norm = 0;
    for (float v : x) norm += std::abs(v);
    for (int k = 0; k <= size / 2; ++k) {
      std::complex<double> want = 0;
      for (int t = 0; t < size; ++t) want += double(x[t]) * std::polar(1.0, -2 * kPi * k * t / size);
      EXPECT_NEAR(got[k].real(), want.real(), 1e-6 * norm) << "size " << size << " bin " << k;
      EXPECT_NEAR(got[k].imag(), want.imag(), 1e-6 * norm) << "size " << size << " bin " << k;
    }
    std::vector<float> power(static_cast<std::size_t>(size / 2 + 1));
    fft.power(x.data(), power.data());
    for (int k = 0; k <= size / 2; ++k) EXPECT_FLOAT_EQ(power[k], std::norm(got[k]));
  }
  EXPECT_THROW(RealFft(500), InvalidArgument);
}

TEST(Spectrogram, FrameCountAndShortSignals) {
  EXPECT_EQ(spectrogram_frames(16000, 160), 101);
  EXPECT_EQ(spectrogram_frames(159, 160), 1);
  EXPECT_EQ(spectrogram_frames(160, 160), 2);
  EXPECT_EQ(spectrogram_frames(0, 160), 1);
  const PowerSpectrogram spec;
  EXPECT_EQ(spec.bins(), 257);
  // Shorter than the window: reflect padding repeats the mirror; n = 1 is a constant frame.
  for (std::int64_t n : {1, 2, 100, 321}) {
    const auto x = speech_like(double(n) / 16000, 16000, 11);
    std::vector<float> out(static_cast<std::size_t>(spectrogram_frames(n, 160) * 257), -1.0f);
    spec.compute(x.data(), n, out.data());
    for (float v : out) EXPECT_GE(v, 0.0f);
  }
}

TEST(Spectrogram, DaliHannWindow) {
  const auto w = dali_hann_window(320);
  EXPECT_FLOAT_EQ(w[0], float(0.5 * (1 - std::cos(kPi / 320))));
  for (int t = 0; t < 320; ++t) EXPECT_FLOAT_EQ(w[t], w[319 - t]);  // symmetric about 159.5
  EXPECT_FLOAT_EQ(w[159], float(0.5 * (1 - std::cos(2 * kPi * 159.5 / 320))));
}

TEST(Spectrogram, SinePeaksAtItsBin) {
  // 1000 Hz is bin 32 exactly (31.25 Hz per bin); a centred Hann frame puts the energy there.
  const auto x = sine(0.5, 1000, 16000, 3200);
  const PowerSpectrogram spec;
  std::vector<float> out(static_cast<std::size_t>(spectrogram_frames(3200, 160) * 257));
  spec.compute(x.data(), 3200, out.data());
  for (int f = 2; f < 18; ++f) {
    const float* row = out.data() + f * 257;
    EXPECT_EQ(std::max_element(row, row + 257) - row, 32) << "frame " << f;
  }
}

// --------------------------------------------------------------------------------------------
// 5. Mel filterbank
// --------------------------------------------------------------------------------------------

TEST(MelFilterBank, SlaneyScale) {
  EXPECT_DOUBLE_EQ(hz_to_mel_slaney(0), 0);
  EXPECT_NEAR(hz_to_mel_slaney(1000), 15, 1e-12);
  EXPECT_NEAR(hz_to_mel_slaney(500), 7.5, 1e-12);
  EXPECT_NEAR(hz_to_mel_slaney(8000), 15 + 27 * std::log(8.0) / std::log(6.4), 1e-9);
  for (double hz : {0.0, 300.0, 999.0, 1000.0, 2500.0, 8000.0}) EXPECT_NEAR(mel_to_hz_slaney(hz_to_mel_slaney(hz)), hz, 1e-9);
}

TEST(MelFilterBank, TrianglesAndAreaNormalisation) {
  const MelFilterBank fb;
  ASSERT_EQ(fb.n_mels(), 80);
  ASSERT_EQ(fb.bins(), 257);
  const auto d = fb.dense();
  for (float v : d) EXPECT_GE(v, 0.0f);
  // Slaney normalisation makes each triangle's area 1 (height 2 / width in Hz); the sampled sum
  // times the bin width approaches it for the wide high filters.
  for (int m = 40; m < 80; ++m) {
    double area = 0;
    for (int k = 0; k < 257; ++k) area += d[static_cast<std::size_t>(m) * 257 + k] * 31.25;
    EXPECT_NEAR(area, 1.0, 0.03) << "filter " << m;
  }
  // Nothing at DC or exactly 8000 Hz (the outer edges).
  for (int m = 0; m < 80; ++m) {
    EXPECT_EQ(d[static_cast<std::size_t>(m) * 257], 0.0f);
    EXPECT_EQ(d[static_cast<std::size_t>(m) * 257 + 256], 0.0f);
  }
  // apply() equals the dense product.
  const auto p = speech_like(257 * 3 / 16000.0, 16000, 2);
  std::vector<float> power(p.size());
  std::transform(p.begin(), p.end(), power.begin(), [](float v) { return v * v; });
  std::vector<float> mel(3 * 80);
  fb.apply(power.data(), 3, mel.data());
  for (int t = 0; t < 3; ++t)
    for (int m = 0; m < 80; ++m) {
      double want = 0;
      for (int k = 0; k < 257; ++k) want += double(d[static_cast<std::size_t>(m) * 257 + k]) * power[t * 257 + k];
      EXPECT_NEAR(mel[t * 80 + m], want, 1e-6 * std::abs(want) + 1e-12);
    }
}

// --------------------------------------------------------------------------------------------
// 6. Log and normalisation
// --------------------------------------------------------------------------------------------

TEST(LogNormalize, ByHand) {
  std::vector<float> x{0.0f, 1.0f, std::exp(2.0f), 1e-30f};
  log_clamped(x.data(), 4);
  EXPECT_FLOAT_EQ(x[0], std::log(1e-20f));
  EXPECT_FLOAT_EQ(x[1], 0.0f);
  EXPECT_FLOAT_EQ(x[2], 2.0f);
  EXPECT_FLOAT_EQ(x[3], std::log(1e-20f));
  // [frames 4, channels 3]; channel 2 is constant.
  std::vector<float> y{1, 10, 5, 2, 20, 5, 3, 30, 5, 4, 40, 5};
  normalize_per_channel(y.data(), 4, 3);
  const float z = 1.0f / std::sqrt(1.25f);  // mean 2.5, population variance 1.25
  const std::vector<float> want{-1.5f * z, -1.5f * z, 0, -0.5f * z, -0.5f * z, 0, 0.5f * z, 0.5f * z, 0, 1.5f * z, 1.5f * z, 0};
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
  // ddof 1 and epsilon as options.
  std::vector<float> u{1, 2, 3, 4};
  normalize_per_channel(u.data(), 4, 1, 1, 0.0);
  EXPECT_NEAR(u[0], -1.5f / std::sqrt(5.0f / 3.0f), 1e-6);
  EXPECT_THROW(normalize_per_channel(u.data(), 1, 1, 1), InvalidArgument);
}

// --------------------------------------------------------------------------------------------
// 7. SpecAugment
// --------------------------------------------------------------------------------------------

TEST(SpecAugment, RoundHalfEven) {
  EXPECT_EQ(round_half_even(1.5), 2);
  EXPECT_EQ(round_half_even(4.5), 4);
  EXPECT_EQ(round_half_even(7.5), 8);
  EXPECT_EQ(round_half_even(7.49), 7);
  EXPECT_EQ(round_half_even(0.5), 0);
}

TEST(SpecAugment, MasksFollowTheReferenceDistribution) {
  const SpecAugmentConfig cfg;  // 2 freq masks U[0, 20], 10 time masks U[0, round(0.03 len)]
  Rng rng(42, 3);
  std::vector<int> freq_width_seen(21, 0), time_width_seen(31, 0);
  double freq_width_sum = 0, time_width_sum = 0;
  int freq_count = 0, time_count = 0;
  bool t0_reaches_end = false, f0_reaches_end = false;
  const std::int64_t frames = 1000;  // max_time = round(30.0) = 30
  for (int u = 0; u < 3000; ++u) {
    const auto m = draw_spec_augment(cfg, 80, frames, frames, rng);
    ASSERT_EQ(m.freq.size(), 2u);
    ASSERT_EQ(m.time.size(), 10u);
    for (auto [f0, f1] : m.freq) {
      const int w = f1 - f0;
      ASSERT_GE(w, 0);
      ASSERT_LE(w, 20);
      ASSERT_GE(f0, 0);
      ASSERT_LE(f0, 80 - w);  // randint(0, 80 - w + 1)
      f0_reaches_end |= f0 == 80 - w;
      ++freq_width_seen[static_cast<std::size_t>(w)];
      freq_width_sum += w;
      ++freq_count;
    }
    for (auto [t0, t1] : m.time) {
      const auto w = t1 - t0;
      ASSERT_GE(w, 0);
      ASSERT_LE(w, 30);
      ASSERT_GE(t0, 0);
      ASSERT_LE(t0, frames - w);
      t0_reaches_end |= t0 == frames - w;
      ++time_width_seen[static_cast<std::size_t>(w)];
      time_width_sum += static_cast<double>(w);
      ++time_count;
    }
  }
  for (int w = 0; w <= 20; ++w) EXPECT_GT(freq_width_seen[static_cast<std::size_t>(w)], 150) << "freq width " << w;
  for (int w = 0; w <= 30; ++w) EXPECT_GT(time_width_seen[static_cast<std::size_t>(w)], 700) << "time width " << w;
  EXPECT_NEAR(freq_width_sum / freq_count, 10.0, 0.3);   // uniform on 0..20
  EXPECT_NEAR(time_width_sum / time_count, 15.0, 0.25);  // uniform on 0..30
  EXPECT_TRUE(f0_reaches_end);
  EXPECT_TRUE(t0_reaches_end);
}

TEST(SpecAugment, AdaptiveWidthUsesLengthAndMaskStartUsesPaddedFrames) {
  SpecAugmentConfig cfg;
  cfg.freq_masks = 0;
  for (auto [len, max_w] : {std::pair<std::int64_t, std::int64_t>{50, 2}, {150, 4}, {250, 8}, {10, 0}}) {
    Rng rng(1, static_cast<std::uint64_t>(len));
    std::int64_t widest = 0;
    for (int u = 0; u < 300; ++u) {
      const auto m = draw_spec_augment(cfg, 80, 400, len, rng);
      for (auto [t0, t1] : m.time) {
        widest = std::max(widest, t1 - t0);
        EXPECT_LE(t0, 400 - (t1 - t0));  // the padded batch length bounds the start
      }
    }
    EXPECT_EQ(widest, max_w) << "length " << len;
  }
  // An adaptive count: time_masks in (0, 1) is round(len * time_masks).
  cfg.time_masks = 0.05;
  Rng rng(2);
  EXPECT_EQ(draw_spec_augment(cfg, 80, 90, 90, rng).time.size(), 4u);  // round(4.5) = 4
}

TEST(SpecAugment, ApplyZeroesExactlyTheMasks) {
  const std::int64_t frames = 12;
  const int channels = 6;
  std::vector<float> x(static_cast<std::size_t>(frames * channels));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + float(i);
  SpecAugmentMasks m;
  m.freq = {{1, 3}, {5, 9}};   // channels 1, 2, 5 (cut at 6)
  m.time = {{10, 15}, {4, 4}};  // frames 10, 11; an empty mask
  auto y = x;
  apply_spec_augment(y.data(), frames, channels, m);
  for (std::int64_t t = 0; t < frames; ++t)
    for (int c = 0; c < channels; ++c) {
      const bool masked = c == 1 || c == 2 || c == 5 || t >= 10;
      const auto i = static_cast<std::size_t>(t * channels + c);
      EXPECT_EQ(y[i], masked ? 0.0f : x[i]) << t << "," << c;
    }
}

// --------------------------------------------------------------------------------------------
// 8. Frame splicing
// --------------------------------------------------------------------------------------------

TEST(Splice, HandExample) {
  // frames 4, channels 2, stack 3, subsample 3 -> 2 frames of 6.
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(spliced_frames(4, 3), 2);
  std::vector<float> y(12, -1.0f);
  splice_frames(x.data(), 4, 2, 3, 3, y.data());
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0}));
  EXPECT_EQ(spliced_frames(3, 3), 1);
  EXPECT_EQ(spliced_frames(7, 3), 3);
  EXPECT_EQ(spliced_frames(1501, 3), 501);
  // stack 2, subsample 1 (StackTime-like without the subsample).
  std::vector<float> z(16);
  splice_frames(x.data(), 4, 2, 2, 1, z.data());
  EXPECT_EQ(z, (std::vector<float>{1, 2, 3, 4, 3, 4, 5, 6, 5, 6, 7, 8, 7, 8, 0, 0}));
}

// --------------------------------------------------------------------------------------------
// 9. The pipeline
// --------------------------------------------------------------------------------------------

std::vector<float> with_silence(double seconds, double rate, std::uint64_t seed) {
  auto x = speech_like(seconds, rate, seed);
  std::vector<float> out(static_cast<std::size_t>(0.3 * rate), 0.0f);
  out.insert(out.end(), x.begin(), x.end());
  out.resize(out.size() + static_cast<std::size_t>(0.4 * rate), 0.0f);
  return out;
}

TEST(RnntFeaturePipeline, EvalShapeTrimAndOrder) {
  const RnntFeaturePipeline p;
  EXPECT_EQ(p.feature_size(), 240);
  const auto x = with_silence(1.0, 16000, 5);
  const auto n = static_cast<std::int64_t>(x.size());
  Rng rng(9);
  const RnntFeatures f = p.compute(x.data(), n, 16000, rng, false);
  const SampleRange keep = nonsilent_region(x.data(), n);
  ASSERT_LT(keep.length, n);  // the planted silence is cut
  const std::int64_t frames = spectrogram_frames(keep.length, 160);
  EXPECT_EQ(f.frames, spliced_frames(frames, 3));
  ASSERT_EQ(f.features.shape(), (Shape{f.frames, 240}));
  // Without dither the eval features are log_mel of the trimmed audio, spliced.
  RnntFeatureConfig cfg;
  cfg.dither = 0;
  const RnntFeaturePipeline q(cfg);
  const RnntFeatures g = q.compute(x.data(), n, 16000, rng, false);
  std::int64_t t = 0;
  const auto lm = q.log_mel(x.data() + keep.begin, keep.length, &t);
  ASSERT_EQ(t, frames);
  std::vector<float> spliced(static_cast<std::size_t>(spliced_frames(t, 3) * 240));
  splice_frames(lm.data(), t, 80, 3, 3, spliced.data());
  const float* gd = g.features.data<float>();
  for (std::size_t i = 0; i < spliced.size(); ++i) ASSERT_EQ(gd[i], spliced[i]) << i;
  // Eval still dithers (the reference's val pipeline does): other draws, other features; the
  // same draws, the same features. (Dither is not small here: the trim keeps up to 2047 zero
  // samples at each end, whose log-mel is ln 1e-20 without dither.)
  const float* fd = f.features.data<float>();
  EXPECT_FALSE(std::equal(fd, fd + spliced.size(), gd));
  Rng again(9);
  const RnntFeatures h = p.compute(x.data(), n, 16000, again, false);
  EXPECT_TRUE(std::equal(fd, fd + spliced.size(), h.features.data<float>()));
}

TEST(RnntFeaturePipeline, TrainIsSeededAndAugmented) {
  const RnntFeaturePipeline p;
  const auto x = with_silence(1.0, 16000, 6);
  const auto n = static_cast<std::int64_t>(x.size());
  Rng a(3, 7), b(3, 7), c(4, 7);
  const RnntFeatures fa = p.compute(x.data(), n, 16000, a, true);
  const RnntFeatures fb = p.compute(x.data(), n, 16000, b, true);
  ASSERT_EQ(fa.frames, fb.frames);
  const float* da = fa.features.data<float>();
  const float* db = fb.features.data<float>();
  for (std::int64_t i = 0; i < fa.features.numel(); ++i) ASSERT_EQ(da[i], db[i]);
  // SpecAugment's masks are exact zeros; normalised log-mel values never are otherwise. Count
  // them outside the spliced tail (the last row holds zero padding).
  std::int64_t zeros = 0;
  for (std::int64_t i = 0; i < (fa.frames - 1) * 240; ++i) zeros += da[i] == 0.0f;
  EXPECT_GT(zeros, 0);
  RnntFeatureConfig no_aug;
  no_aug.spec_augment = false;
  Rng d(3, 7);
  const RnntFeatures fd = RnntFeaturePipeline(no_aug).compute(x.data(), n, 16000, d, true);
  ASSERT_EQ(fd.frames, fa.frames);  // the same speed factor and dither: only the masks differ
  const float* dd = fd.features.data<float>();
  for (std::int64_t i = 0; i < (fd.frames - 1) * 240; ++i) {
    ASSERT_NE(dd[i], 0.0f) << i;
    if (da[i] != 0.0f) {
      ASSERT_EQ(da[i], dd[i]) << i;
    }
  }
  // A different seed gives another speed factor: lengths (almost surely) differ.
  const RnntFeatures fc = p.compute(x.data(), n, 16000, c, true);
  EXPECT_GT(fc.frames, 0);
  // Speed perturbation bounds the length: 0.85..1.15 of the eval length, give or take the trim.
  Rng e(1);
  const RnntFeatures fe = p.compute(x.data(), n, 16000, e, false);
  for (const auto* f : {&fa, &fc}) {
    EXPECT_GE(f->frames, static_cast<std::int64_t>(0.85 * double(fe.frames)) - 15);
    EXPECT_LE(f->frames, static_cast<std::int64_t>(1.15 * double(fe.frames)) + 15);
  }
}

TEST(RnntFeaturePipeline, ResamplesOtherRatesInEval) {
  // espeak-ng writes 22050 Hz: eval resamples to 16 kHz; the frame count follows the 16 kHz length.
  RnntFeatureConfig cfg;
  cfg.trim_silence = false;
  const RnntFeaturePipeline p(cfg);
  const auto x = speech_like(1.0, 22050, 8);
  Rng rng(1);
  const RnntFeatures f = p.compute(x.data(), static_cast<std::int64_t>(x.size()), 22050, rng, false);
  EXPECT_EQ(f.frames, spliced_frames(spectrogram_frames(resampled_length(22050, 22050, 16000), 160), 3));
}

TEST(RnntFeaturePipeline, RejectsBadInput) {
  const RnntFeaturePipeline p;
  Rng rng(1);
  const float one = 1.0f;
  EXPECT_THROW(p.compute(&one, 0, 16000, rng, false), InvalidArgument);
  EXPECT_THROW(p.compute(&one, 1, -1, rng, false), InvalidArgument);
  RnntFeatureConfig bad;
  bad.speed_min = 1.2;
  EXPECT_THROW(RnntFeaturePipeline{bad}, InvalidArgument);
}

}  // namespace
}  // namespace benchhost::data

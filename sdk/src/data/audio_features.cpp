// RNN-T audio features (data/audio_features.hpp). Host code, one utterance at a time: the data
// pipeline already runs samples in parallel, so nothing here spawns threads.
#include "benchhost/data/audio_features.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "benchhost/error.hpp"

namespace benchhost::data {

namespace {

constexpr double kPi = std::numbers::pi;
// Resampling kernel table: points per zero crossing. Linear interpolation error is below
// h^2 / 8 * max|k''| ~ (1/1024)^2 / 8 * pi^2 / 3 ~ 4e-7 of a tap.
constexpr int kTableDensity = 1024;

void check_signal(const char* fn, const float* src, std::int64_t n) {
  BH_CHECK_AS(InvalidArgument, n > 0, "{}: empty signal (n = {})", fn, n);
  BH_CHECK_AS(InvalidArgument, src != nullptr, "{}: null samples for n = {}", fn, n);
}

// Mirror an index into [0, n) without repeating the edge sample (numpy/torch 'reflect'), as
// often as needed for signals shorter than the padding.
std::int64_t reflect_101(std::int64_t i, std::int64_t n) {
  if (n == 1) return 0;
  const std::int64_t period = 2 * (n - 1);
  std::int64_t m = i % period;
  if (m < 0) m += period;
  return m < n ? m : period - m;
}

}  // namespace

// ============================================================================================
// 1. Resampling
// ============================================================================================

std::int64_t resampled_length(std::int64_t n, double in_rate, double out_rate) {
  BH_CHECK_AS(InvalidArgument, in_rate > 0 && out_rate > 0,
              "resampled_length: sample rates must be positive (in {} Hz, out {} Hz)", in_rate, out_rate);
  return static_cast<std::int64_t>(std::ceil(static_cast<double>(n) * out_rate / in_rate));
}

Resampler::Resampler(int lobes, double rolloff) : lobes_(lobes), rolloff_(rolloff) {
  BH_CHECK_AS(InvalidArgument, lobes >= 1 && lobes <= 256, "Resampler: lobes must be in [1, 256], got {}", lobes);
  BH_CHECK_AS(InvalidArgument, rolloff > 0 && rolloff <= 1, "Resampler: rolloff must be in (0, 1], got {}", rolloff);
  // (value, slope to the next point) pairs, so a tap costs one pair load; zeros past the end
  // (one extra zero crossing) let the tap loop run without a range check.
  const int points = lobes * kTableDensity;
  std::vector<double> k(static_cast<std::size_t>(points + kTableDensity + 1), 0.0);
  for (int i = 0; i < points; ++i) {
    const double x = static_cast<double>(i) / kTableDensity;
    const double sinc = i == 0 ? 1.0 : std::sin(kPi * x) / (kPi * x);
    const double hann = 0.5 * (1.0 + std::cos(kPi * x / lobes));
    k[static_cast<std::size_t>(i)] = sinc * hann;
  }
  table_.resize(2 * (k.size() - 1));
  for (std::size_t i = 0; i + 1 < k.size(); ++i) {
    table_[2 * i] = static_cast<float>(k[i]);
    table_[2 * i + 1] = static_cast<float>(k[i + 1] - k[i]);
  }
}

std::vector<float> Resampler::resample(const float* src, std::int64_t n, double in_rate, double out_rate) const {
  check_signal("Resampler::resample", src, n);
  const std::int64_t out_n = resampled_length(n, in_rate, out_rate);
  if (in_rate == out_rate) return std::vector<float>(src, src + n);
  std::vector<float> dst(static_cast<std::size_t>(out_n));
  // Cut-off relative to the input's Nyquist frequency; in zero crossings of the scaled sinc, one
  // input sample is `cutoff` units, so the kernel reaches lobes / cutoff input samples each side.
  const double cutoff = std::min(1.0, out_rate / in_rate) * rolloff_;
  const double reach = lobes_ / cutoff;
  const double step = in_rate / out_rate;

  // Polyphase bank. Output j sits at input position pos = base + phase (base = floor(pos)); its
  // taps are src[base + m] for m in [1 - half, half], weighted by cutoff * K(cutoff * (m - phase)).
  // The weights are tabulated for kPhases + 1 phases on [0, 1] and interpolated linearly in the
  // phase (same error bound as the kernel table: ~4e-7 of a tap), so a tap costs two contiguous
  // loads and a multiply-add instead of a table gather per tap.
  constexpr int kPhases = 1024;
  const int half = static_cast<int>(std::ceil(reach)) + 1;
  const int taps = 2 * half;
  std::vector<float> bank(static_cast<std::size_t>(kPhases + 1) * taps), slope(static_cast<std::size_t>(kPhases) * taps);
  const double table_step = cutoff * kTableDensity;  // table points per input sample
  const double table_end = static_cast<double>(lobes_) * kTableDensity;
  for (int p = 0; p <= kPhases; ++p) {
    const double phase = static_cast<double>(p) / kPhases;
    float* w = bank.data() + static_cast<std::size_t>(p) * taps;
    for (int t = 0; t < taps; ++t) {
      const double u = std::abs((static_cast<double>(t + 1 - half) - phase) * table_step);
      if (u >= table_end) {
        w[t] = 0.0f;
        continue;
      }
      const auto idx = static_cast<std::size_t>(u);
      const double frac = u - static_cast<double>(idx);
      w[t] = static_cast<float>(cutoff * (table_[2 * idx] + frac * table_[2 * idx + 1]));
    }
  }
  for (std::size_t i = 0; i < slope.size(); ++i) slope[i] = bank[i + static_cast<std::size_t>(taps)] - bank[i];

  for (std::int64_t j = 0; j < out_n; ++j) {
    const double pos = static_cast<double>(j) * step;
    const auto base = static_cast<std::int64_t>(std::floor(pos));
    const double ph = (pos - static_cast<double>(base)) * kPhases;
    const int p = std::min(static_cast<int>(ph), kPhases - 1);
    const auto alpha = static_cast<float>(ph - p);
    const float* w = bank.data() + static_cast<std::size_t>(p) * taps;
    const float* d = slope.data() + static_cast<std::size_t>(p) * taps;
    const std::int64_t first = base + 1 - half;  // input index of tap 0
    float acc = 0.0f;
    if (first >= 0 && first + taps <= n) {
      const float* in = src + first;
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;  // independent sums: the loop pipelines
      int t = 0;
      for (; t + 4 <= taps; t += 4) {
        a0 += in[t] * (w[t] + alpha * d[t]);
        a1 += in[t + 1] * (w[t + 1] + alpha * d[t + 1]);
        a2 += in[t + 2] * (w[t + 2] + alpha * d[t + 2]);
        a3 += in[t + 3] * (w[t + 3] + alpha * d[t + 3]);
      }
      for (; t < taps; ++t) a0 += in[t] * (w[t] + alpha * d[t]);
      acc = (a0 + a1) + (a2 + a3);
    } else {  // near the ends: the input is zero outside [0, n)
      const int t0 = static_cast<int>(std::max<std::int64_t>(0, -first));
      const int t1 = static_cast<int>(std::min<std::int64_t>(taps, n - first));
      for (int t = t0; t < t1; ++t) acc += src[first + t] * (w[t] + alpha * d[t]);
    }
    dst[static_cast<std::size_t>(j)] = acc;
  }
  return dst;
}

// ============================================================================================
// 2. Silence trim
// ============================================================================================

SampleRange nonsilent_region(const float* src, std::int64_t n, float cutoff_db, int window_length) {
  check_signal("nonsilent_region", src, n);
  BH_CHECK_AS(InvalidArgument, window_length > 0, "nonsilent_region: window_length must be positive, got {}",
              window_length);
  // Moving mean square over the window ending at each sample (DALI's MovingMeanSquare), in f64
  // so that the running sum needs no periodic recomputation.
  std::vector<double> mms(static_cast<std::size_t>(n));
  double sum = 0.0, peak = 0.0;
  const double inv_w = 1.0 / window_length;
  for (std::int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(src[i]) * src[i];
    if (i >= window_length) sum -= static_cast<double>(src[i - window_length]) * src[i - window_length];
    sum = std::max(sum, 0.0);
    mms[static_cast<std::size_t>(i)] = sum * inv_w;
    peak = std::max(peak, sum * inv_w);
  }
  const double threshold = peak * std::pow(10.0, cutoff_db / 10.0);
  std::int64_t first = 0;
  while (first < n && mms[static_cast<std::size_t>(first)] < threshold) ++first;
  if (first == n) return {0, 0};
  std::int64_t last = n - 1;
  while (mms[static_cast<std::size_t>(last)] < threshold) --last;
  // A non-silent window ending at `first` may have started up to window_length - 1 earlier.
  const std::int64_t begin = first == 0 ? 0 : std::max<std::int64_t>(0, first - (window_length - 1));
  return {begin, last - begin + 1};
}

// ============================================================================================
// 3. Dither and pre-emphasis
// ============================================================================================

void add_dither(float* x, std::int64_t n, float scale, Rng& rng) {
  // Marsaglia's polar method on the Rng's 32-bit stream: one log and one square root per pair of
  // normals, where Rng::normal() (Box-Muller) also needs a sine and a cosine; dither touches every
  // sample, and this halves its cost.
  constexpr float kToUnit = 1.0f / 8388608.0f;  // 24 bits -> [-1, 1)
  std::int64_t i = 0;
  while (i < n) {
    const float u = static_cast<float>(static_cast<std::int32_t>(rng.next_u32() >> 8) - 8388608) * kToUnit;
    const float v = static_cast<float>(static_cast<std::int32_t>(rng.next_u32() >> 8) - 8388608) * kToUnit;
    const float s = u * u + v * v;
    if (s >= 1.0f || s == 0.0f) continue;
    const float f = scale * std::sqrt(-2.0f * std::log(s) / s);
    x[i++] += u * f;
    if (i < n) x[i++] += v * f;
  }
}

void preemphasis(float* x, std::int64_t n, float coeff) {
  if (n <= 0) return;
  for (std::int64_t t = n - 1; t > 0; --t) x[t] -= coeff * x[t - 1];
  x[0] -= coeff * x[0];
}

// ============================================================================================
// 4. Power spectrogram
// ============================================================================================

RealFft::RealFft(int size) : size_(size), half_(size / 2) {
  BH_CHECK_AS(InvalidArgument, size >= 4 && (size & (size - 1)) == 0,
              "RealFft: size must be a power of two >= 4, got {}", size);
  int bits = 0;
  while ((1 << bits) < half_) ++bits;
  bitrev_.resize(static_cast<std::size_t>(half_));
  for (int i = 0; i < half_; ++i) {
    int r = 0;
    for (int b = 0; b < bits; ++b)
      if (i & (1 << b)) r |= 1 << (bits - 1 - b);
    bitrev_[static_cast<std::size_t>(i)] = r;
  }
  twiddle_.resize(static_cast<std::size_t>(std::max(1, half_ / 2)));
  for (int k = 0; k < half_ / 2; ++k) {
    const double a = -2.0 * kPi * k / half_;
    twiddle_[static_cast<std::size_t>(k)] = {static_cast<float>(std::cos(a)), static_cast<float>(std::sin(a))};
  }
  split_.resize(static_cast<std::size_t>(half_) + 1);
  for (int k = 0; k <= half_; ++k) {
    const double a = -2.0 * kPi * k / size_;
    split_[static_cast<std::size_t>(k)] = {static_cast<float>(std::cos(a)), static_cast<float>(std::sin(a))};
  }
}

void RealFft::forward(const float* src, std::complex<float>* dst) const {
  // z[m] = x[2m] + i x[2m+1], a complex FFT of half_ points (iterative radix-2, in place in dst).
  // Butterflies are written on re/im parts: std::complex's operator* without -ffast-math calls
  // the NaN-checking __mulsc3, several times slower.
  using C = std::complex<float>;
  auto* z = reinterpret_cast<float*>(dst);  // interleaved re, im (std::complex layout guarantee)
  for (int m = 0; m < half_; ++m) {
    const int r = bitrev_[static_cast<std::size_t>(m)];
    z[2 * r] = src[2 * m];
    z[2 * r + 1] = src[2 * m + 1];
  }
  const auto* tw = reinterpret_cast<const float*>(twiddle_.data());
  for (int len = 2; len <= half_; len <<= 1) {
    const int stride = half_ / len;
    const int h = len / 2;
    for (int base = 0; base < half_; base += len) {
      float* a = z + 2 * base;
      float* b = z + 2 * (base + h);
      for (int j = 0; j < h; ++j) {
        const float wr = tw[2 * j * stride], wi = tw[2 * j * stride + 1];
        const float br = b[2 * j] * wr - b[2 * j + 1] * wi;
        const float bi = b[2 * j] * wi + b[2 * j + 1] * wr;
        const float ar = a[2 * j], ai = a[2 * j + 1];
        a[2 * j] = ar + br;
        a[2 * j + 1] = ai + bi;
        b[2 * j] = ar - br;
        b[2 * j + 1] = ai - bi;
      }
    }
  }
  // Split: X[k] = E[k] + W^k O[k] with E[k] = (Z[k] + conj Z[-k]) / 2, O[k] = (Z[k] - conj Z[-k]) / 2i,
  // W = exp(-2 pi i / size). Pairs (k, half_ - k) are done together: both read Z[k] and Z[half_ - k].
  const float z0r = z[0], z0i = z[1];
  dst[half_] = C(z0r - z0i, 0.0f);
  dst[0] = C(z0r + z0i, 0.0f);
  const auto* sp = reinterpret_cast<const float*>(split_.data());
  for (int k = 1; k <= half_ / 2; ++k) {
    const int nk = half_ - k;
    const float kr = z[2 * k], ki = z[2 * k + 1], nr = z[2 * nk], ni = z[2 * nk + 1];
    // E[k] = ((kr + nr) + i (ki - ni)) / 2;  O[k] = ((ki + ni) - i (kr - nr)) / 2
    const float ekr = 0.5f * (kr + nr), eki = 0.5f * (ki - ni);
    const float okr = 0.5f * (ki + ni), oki = -0.5f * (kr - nr);
    // E[nk] = conj E[k], O[nk] = conj O[k]
    const float wkr = sp[2 * k], wki = sp[2 * k + 1], wnr = sp[2 * nk], wni = sp[2 * nk + 1];
    const float xkr = ekr + (wkr * okr - wki * oki), xki = eki + (wkr * oki + wki * okr);
    const float xnr = ekr + (wnr * okr + wni * oki), xni = -eki + (wni * okr - wnr * oki);
    z[2 * k] = xkr;
    z[2 * k + 1] = xki;
    z[2 * nk] = xnr;
    z[2 * nk + 1] = xni;
  }
}

void RealFft::power(const float* src, float* dst) const {
  std::vector<std::complex<float>> spec(static_cast<std::size_t>(half_) + 1);
  forward(src, spec.data());
  for (int k = 0; k <= half_; ++k) dst[k] = std::norm(spec[static_cast<std::size_t>(k)]);
}

std::vector<float> dali_hann_window(int length) {
  BH_CHECK_AS(InvalidArgument, length > 0, "dali_hann_window: length must be positive, got {}", length);
  std::vector<float> w(static_cast<std::size_t>(length));
  for (int t = 0; t < length; ++t)
    w[static_cast<std::size_t>(t)] = static_cast<float>(0.5 * (1.0 - std::cos(2.0 * kPi * (t + 0.5) / length)));
  return w;
}

std::int64_t spectrogram_frames(std::int64_t n, int hop) {
  BH_CHECK_AS(InvalidArgument, hop > 0, "spectrogram_frames: hop must be positive, got {}", hop);
  BH_CHECK_AS(InvalidArgument, n >= 0, "spectrogram_frames: negative length {}", n);
  return n / hop + 1;
}

PowerSpectrogram::PowerSpectrogram(SpectrogramConfig config)
    : config_(config), fft_(config.nfft), window_(dali_hann_window(config.window_length)) {
  BH_CHECK_AS(InvalidArgument, config.window_length <= config.nfft,
              "PowerSpectrogram: window_length {} exceeds nfft {}", config.window_length, config.nfft);
  BH_CHECK_AS(InvalidArgument, config.hop > 0, "PowerSpectrogram: hop must be positive, got {}", config.hop);
}

void PowerSpectrogram::compute(const float* src, std::int64_t n, float* dst) const {
  check_signal("PowerSpectrogram::compute", src, n);
  const int nfft = config_.nfft, wl = config_.window_length, hop = config_.hop;
  const int offset = (nfft - wl) / 2;  // window centred in the FFT frame
  const int bins = this->bins();
  const std::int64_t frames = spectrogram_frames(n, hop);
  std::vector<float> frame(static_cast<std::size_t>(nfft), 0.0f);
  std::vector<std::complex<float>> spec(static_cast<std::size_t>(bins));
  for (std::int64_t f = 0; f < frames; ++f) {
    const std::int64_t start = f * hop - wl / 2;
    const bool inside = start >= 0 && start + wl <= n;
    for (int t = 0; t < wl; ++t) {
      const std::int64_t i = inside ? start + t : reflect_101(start + t, n);
      frame[static_cast<std::size_t>(offset + t)] = src[i] * window_[static_cast<std::size_t>(t)];
    }
    fft_.forward(frame.data(), spec.data());
    float* row = dst + f * bins;
    for (int k = 0; k < bins; ++k) row[k] = std::norm(spec[static_cast<std::size_t>(k)]);
  }
}

// ============================================================================================
// 5. Mel filterbank
// ============================================================================================

namespace {
constexpr double kSlaneyLinearStep = 200.0 / 3.0;  // Hz per mel below 1 kHz
constexpr double kSlaneyBreakHz = 1000.0;
const double kSlaneyBreakMel = kSlaneyBreakHz / kSlaneyLinearStep;  // 15
const double kSlaneyLogStep = std::log(6.4) / 27.0;                 // ln(Hz ratio) per mel above
}  // namespace

double hz_to_mel_slaney(double hz) {
  if (hz < kSlaneyBreakHz) return hz / kSlaneyLinearStep;
  return kSlaneyBreakMel + std::log(hz / kSlaneyBreakHz) / kSlaneyLogStep;
}

double mel_to_hz_slaney(double mel) {
  if (mel < kSlaneyBreakMel) return mel * kSlaneyLinearStep;
  return kSlaneyBreakHz * std::exp(kSlaneyLogStep * (mel - kSlaneyBreakMel));
}

MelFilterBank::MelFilterBank(int n_mels, int nfft, double sample_rate, double f_low, double f_high)
    : n_mels_(n_mels), bins_(nfft / 2 + 1) {
  BH_CHECK_AS(InvalidArgument, n_mels > 0 && nfft >= 2 && sample_rate > 0,
              "MelFilterBank: n_mels {} and nfft {} must be positive, sample_rate {} > 0", n_mels, nfft, sample_rate);
  if (f_high <= 0) f_high = sample_rate / 2;
  BH_CHECK_AS(InvalidArgument, f_low >= 0 && f_low < f_high && f_high <= sample_rate / 2,
              "MelFilterBank: need 0 <= f_low ({}) < f_high ({}) <= sample_rate / 2 ({})", f_low, f_high,
              sample_rate / 2);
  const double mel_low = hz_to_mel_slaney(f_low), mel_high = hz_to_mel_slaney(f_high);
  const double mel_step = (mel_high - mel_low) / (n_mels + 1);
  std::vector<double> edge(static_cast<std::size_t>(n_mels) + 2);
  for (int m = 0; m <= n_mels + 1; ++m) edge[static_cast<std::size_t>(m)] = mel_to_hz_slaney(mel_low + m * mel_step);
  edge.back() = f_high;
  const double hz_per_bin = sample_rate / nfft;
  first_bin_.resize(static_cast<std::size_t>(n_mels));
  weights_.resize(static_cast<std::size_t>(n_mels));
  for (int m = 0; m < n_mels; ++m) {
    const double left = edge[static_cast<std::size_t>(m)], centre = edge[static_cast<std::size_t>(m) + 1],
                 right = edge[static_cast<std::size_t>(m) + 2];
    const double norm = 2.0 / (right - left);
    int first = -1;
    std::vector<float> w;
    for (int k = 0; k < bins_; ++k) {
      const double f = k * hz_per_bin;
      const double up = (f - left) / (centre - left), down = (right - f) / (right - centre);
      const double v = std::max(0.0, std::min(up, down));
      if (v <= 0.0) {
        if (first >= 0) break;  // past the triangle
        continue;
      }
      if (first < 0) first = k;
      w.push_back(static_cast<float>(v * norm));
    }
    first_bin_[static_cast<std::size_t>(m)] = std::max(first, 0);
    weights_[static_cast<std::size_t>(m)] = std::move(w);
  }
}

std::vector<float> MelFilterBank::dense() const {
  std::vector<float> fb(static_cast<std::size_t>(n_mels_) * bins_, 0.0f);
  for (int m = 0; m < n_mels_; ++m) {
    const auto& w = weights_[static_cast<std::size_t>(m)];
    for (std::size_t j = 0; j < w.size(); ++j)
      fb[static_cast<std::size_t>(m) * bins_ + first_bin_[static_cast<std::size_t>(m)] + j] = w[j];
  }
  return fb;
}

void MelFilterBank::apply(const float* power, std::int64_t frames, float* mel) const {
  for (std::int64_t t = 0; t < frames; ++t) {
    const float* p = power + t * bins_;
    float* out = mel + t * n_mels_;
    for (int m = 0; m < n_mels_; ++m) {
      const auto& w = weights_[static_cast<std::size_t>(m)];
      const float* pm = p + first_bin_[static_cast<std::size_t>(m)];
      float acc = 0.0f;
      for (std::size_t j = 0; j < w.size(); ++j) acc += w[j] * pm[j];
      out[m] = acc;
    }
  }
}

// ============================================================================================
// 6. Log and normalisation
// ============================================================================================

void log_clamped(float* x, std::int64_t n, float floor) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = std::log(std::max(x[i], floor));
}

void normalize_per_channel(float* x, std::int64_t frames, int channels, int ddof, double epsilon) {
  BH_CHECK_AS(InvalidArgument, channels > 0 && frames > ddof && ddof >= 0,
              "normalize_per_channel: need frames ({}) > ddof ({}) >= 0 and channels ({}) > 0", frames, ddof, channels);
  const auto c = static_cast<std::size_t>(channels);
  std::vector<double> mean(c, 0.0), var(c, 0.0);
  for (std::int64_t t = 0; t < frames; ++t)
    for (std::size_t j = 0; j < c; ++j) mean[j] += x[t * channels + static_cast<std::int64_t>(j)];
  for (auto& m : mean) m /= static_cast<double>(frames);
  for (std::int64_t t = 0; t < frames; ++t)
    for (std::size_t j = 0; j < c; ++j) {
      const double d = x[t * channels + static_cast<std::int64_t>(j)] - mean[j];
      var[j] += d * d;
    }
  std::vector<double> inv(c);
  for (std::size_t j = 0; j < c; ++j) {
    const double v = var[j] / static_cast<double>(frames - ddof) + epsilon;
    inv[j] = v > 0 ? 1.0 / std::sqrt(v) : 0.0;
  }
  for (std::int64_t t = 0; t < frames; ++t)
    for (std::size_t j = 0; j < c; ++j) {
      float& v = x[t * channels + static_cast<std::int64_t>(j)];
      v = static_cast<float>((v - mean[j]) * inv[j]);
    }
}

// ============================================================================================
// 7. SpecAugment
// ============================================================================================

std::int64_t round_half_even(double x) { return static_cast<std::int64_t>(std::nearbyint(x)); }

SpecAugmentMasks draw_spec_augment(const SpecAugmentConfig& config, int channels, std::int64_t frames,
                                   std::int64_t length, Rng& rng) {
  BH_CHECK_AS(InvalidArgument, 0 <= config.min_freq && config.min_freq <= config.max_freq,
              "draw_spec_augment: need 0 <= min_freq ({}) <= max_freq ({})", config.min_freq, config.max_freq);
  BH_CHECK_AS(InvalidArgument, 0 <= config.min_time && config.max_time >= 0,
              "draw_spec_augment: need min_time ({}) >= 0 and max_time ({}) >= 0", config.min_time, config.max_time);
  BH_CHECK_AS(InvalidArgument, channels > 0 && frames >= length && length >= 0,
              "draw_spec_augment: need channels ({}) > 0 and frames ({}) >= length ({}) >= 0", channels, frames, length);
  // torch.randint(lo, hi) is uniform on [lo, hi).
  auto randint = [&rng](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(hi - lo)));
  };
  SpecAugmentMasks masks;
  for (int i = 0; i < config.freq_masks; ++i) {
    const auto w = static_cast<int>(randint(config.min_freq, config.max_freq + 1));
    const auto f0 = static_cast<int>(randint(0, std::max(1, channels - w + 1)));
    masks.freq.emplace_back(f0, f0 + w);
  }
  const auto len = static_cast<double>(length);
  std::int64_t time_masks = static_cast<std::int64_t>(config.time_masks);
  if (config.time_masks > 0 && config.time_masks < 1) time_masks = round_half_even(len * config.time_masks);
  std::int64_t max_time = static_cast<std::int64_t>(config.max_time);
  if (config.max_time > 0 && config.max_time < 1) max_time = round_half_even(len * config.max_time);
  max_time = std::max<std::int64_t>(max_time, config.min_time);  // the reference asserts min <= max
  for (std::int64_t i = 0; i < time_masks; ++i) {
    const std::int64_t w = randint(config.min_time, max_time + 1);
    const std::int64_t t0 = randint(0, std::max<std::int64_t>(1, frames - w + 1));
    masks.time.emplace_back(t0, t0 + w);
  }
  return masks;
}

void apply_spec_augment(float* x, std::int64_t frames, int channels, const SpecAugmentMasks& masks) {
  for (const auto& [f0, f1] : masks.freq) {
    const int lo = std::clamp(f0, 0, channels), hi = std::clamp(f1, 0, channels);
    for (std::int64_t t = 0; t < frames; ++t)
      for (int c = lo; c < hi; ++c) x[t * channels + c] = 0.0f;
  }
  for (const auto& [t0, t1] : masks.time) {
    const std::int64_t lo = std::clamp<std::int64_t>(t0, 0, frames), hi = std::clamp<std::int64_t>(t1, 0, frames);
    std::fill(x + lo * channels, x + hi * channels, 0.0f);
  }
}

// ============================================================================================
// 8. Frame splicing
// ============================================================================================

std::int64_t spliced_frames(std::int64_t frames, int subsample) {
  BH_CHECK_AS(InvalidArgument, subsample > 0 && frames >= 0, "spliced_frames: need subsample ({}) > 0, frames ({}) >= 0",
              subsample, frames);
  return (frames + subsample - 1) / subsample;
}

void splice_frames(const float* src, std::int64_t frames, int channels, int stack, int subsample, float* dst) {
  BH_CHECK_AS(InvalidArgument, stack > 0 && channels > 0, "splice_frames: need stack ({}) > 0, channels ({}) > 0", stack,
              channels);
  const std::int64_t out_frames = spliced_frames(frames, subsample);
  const std::int64_t width = static_cast<std::int64_t>(channels) * stack;
  for (std::int64_t t = 0; t < out_frames; ++t) {
    float* row = dst + t * width;
    for (int k = 0; k < stack; ++k) {
      const std::int64_t s = t * subsample + k;
      float* part = row + static_cast<std::int64_t>(k) * channels;
      if (s < frames)
        std::copy(src + s * channels, src + (s + 1) * channels, part);
      else
        std::fill(part, part + channels, 0.0f);
    }
  }
}

// ============================================================================================
// 9. The pipeline
// ============================================================================================

RnntFeaturePipeline::RnntFeaturePipeline(RnntFeatureConfig config)
    : config_(config),
      resampler_(config.resample_lobes),
      spectrogram_(config.spectrogram),
      mel_(config.n_mels, config.spectrogram.nfft, config.sample_rate, config.f_low,
           config.f_high > 0 ? config.f_high : config.sample_rate / 2) {
  BH_CHECK_AS(InvalidArgument, config.sample_rate > 0, "RnntFeaturePipeline: sample_rate must be positive, got {}",
              config.sample_rate);
  BH_CHECK_AS(InvalidArgument, config.speed_min > 0 && config.speed_min <= config.speed_max,
              "RnntFeaturePipeline: need 0 < speed_min ({}) <= speed_max ({})", config.speed_min, config.speed_max);
  BH_CHECK_AS(InvalidArgument, config.frame_stack > 0 && config.frame_subsample > 0,
              "RnntFeaturePipeline: frame_stack ({}) and frame_subsample ({}) must be positive", config.frame_stack,
              config.frame_subsample);
}

std::vector<float> RnntFeaturePipeline::log_mel(const float* samples, std::int64_t n, std::int64_t* frames) const {
  check_signal("RnntFeaturePipeline::log_mel", samples, n);
  std::vector<float> audio(samples, samples + n);
  preemphasis(audio.data(), n, config_.preemphasis);
  const std::int64_t t = spectrogram_frames(n, config_.spectrogram.hop);
  std::vector<float> power(static_cast<std::size_t>(t * spectrogram_.bins()));
  spectrogram_.compute(audio.data(), n, power.data());
  std::vector<float> mel(static_cast<std::size_t>(t * config_.n_mels));
  mel_.apply(power.data(), t, mel.data());
  log_clamped(mel.data(), static_cast<std::int64_t>(mel.size()), config_.log_floor);
  normalize_per_channel(mel.data(), t, config_.n_mels);
  if (frames) *frames = t;
  return mel;
}

RnntFeatures RnntFeaturePipeline::compute(const float* samples, std::int64_t n, double sample_rate, Rng& rng,
                                          bool train) const {
  check_signal("RnntFeaturePipeline::compute", samples, n);
  BH_CHECK_AS(InvalidArgument, sample_rate > 0, "RnntFeaturePipeline::compute: sample_rate must be positive, got {}",
              sample_rate);
  // Decode rate: r * rate in training (speed perturbation), the feature rate otherwise.
  double target_rate = config_.sample_rate;
  if (train && config_.speed_perturbation)
    target_rate *= config_.speed_min + (config_.speed_max - config_.speed_min) * static_cast<double>(rng.uniform());
  std::vector<float> audio = sample_rate == target_rate ? std::vector<float>(samples, samples + n)
                                                        : resampler_.resample(samples, n, sample_rate, target_rate);
  if (config_.trim_silence) {
    const SampleRange keep =
        nonsilent_region(audio.data(), static_cast<std::int64_t>(audio.size()), config_.silence_cutoff_db,
                         config_.silence_window);
    if (keep.length > 0 && keep.length < static_cast<std::int64_t>(audio.size())) {
      audio.erase(audio.begin() + keep.begin + keep.length, audio.end());
      audio.erase(audio.begin(), audio.begin() + keep.begin);
    }
  }
  const auto len = static_cast<std::int64_t>(audio.size());
  if (config_.dither != 0.0f) add_dither(audio.data(), len, config_.dither, rng);
  std::int64_t frames = 0;
  std::vector<float> mel = log_mel(audio.data(), len, &frames);
  if (train && config_.spec_augment) {
    const SpecAugmentMasks masks = draw_spec_augment(config_.spec_augment_config, config_.n_mels, frames, frames, rng);
    apply_spec_augment(mel.data(), frames, config_.n_mels, masks);
  }
  RnntFeatures out;
  out.frames = spliced_frames(frames, config_.frame_subsample);
  out.features = Tensor::empty({out.frames, static_cast<std::int64_t>(feature_size())});
  splice_frames(mel.data(), frames, config_.n_mels, config_.frame_stack, config_.frame_subsample,
                out.features.data<float>());
  return out;
}

}  // namespace benchhost::data

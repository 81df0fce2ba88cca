#pragma once
/// @file data/audio_features.hpp  RNN-T audio features as MLPerf's reference computes them: speed
/// perturbation by resampling, silence trim, dither, pre-emphasis, power spectrogram, 80-bin
/// Slaney mel filterbank, natural log, per-channel normalisation, SpecAugment and frame splicing.
///
/// Each step is a plain host function (f32 in, f32 out, shapes in the signatures) so that it can
/// be tested on its own; RnntFeaturePipeline runs them in the reference's order on one utterance.
///
/// Note [RNN-T feature semantics]
/// The reference (mlcommons/training rnn_speech_recognition, now retired_benchmarks/rnnt/pytorch)
/// computes features with NVIDIA DALI 0.28 (common/data/dali/pipeline.py: decode, NonsilentRegion,
/// dither, PreemphasisFilter, Spectrogram, MelFilterBank, ToDecibels, Normalize, Pad) and then
/// SpecAugment and FrameSplicing in PyTorch (common/data/features.py), with the parameters of
/// configs/baseline_v3-1023sp.yaml. Each semantic settled here, with its source:
/// - Decode / speed perturbation (pipeline.py define_graph; DALI `decoders.audio` docs and
///   dali/kernels/signal/resampling.h): training decodes at sample_rate = U(0.85, 1.15) * 16000,
///   i.e. the utterance is resampled to r * 16000 samples per second and then treated as 16 kHz
///   audio (r > 1: more samples, slower speech). Evaluation decodes at 16000 (resampling only
///   when the file has another rate, e.g. espeak-ng's 22050 Hz). DALI resamples with a Hann-
///   windowed sinc of 16 lobes (quality 50): sinc(x) * 0.5 (1 + cos(pi x / 16)); the output has
///   ceil(n * out_rate / in_rate) samples; the input is zero outside its range. Output sample j
///   sits at input position j * in_rate / out_rate (current DALI and torchaudio); the DALI of
///   the reference's time (resampling.h, 2019-2021) used (j + 0.5) * in_rate / out_rate - 0.5,
///   a shift of at most 0.08 samples for r in [0.85, 1.15]. Difference, on purpose: DALI's
///   kernel keeps the sinc cut-off at the input Nyquist frequency also when it downsamples
///   (r < 1, or 22050 -> 16000), so content between the new and the old Nyquist frequency
///   aliases; ours is band-limited (cut-off at min(in, out) / 2), as torchaudio's `resample`.
/// - Silence trim (DALI `nonsilent_region` docs and dali/operators/audio/nonsilence_op.h,
///   dali/kernels/signal/moving_mean_square.cc, current versions): cutoff_db = -60,
///   window_length = 2048, reference power = the maximum of the moving mean square. The moving
///   mean square at sample i is (1 / W) * sum of x[j]^2 for j in [i - W + 1, i] (samples before 0
///   count as 0, the divisor stays W). A sample is non-silent when its moving mean square is
///   >= reference * 10^(cutoff_db / 10). The kept range runs from the first non-silent index,
///   moved back by W - 1 (not below 0; not moved when it is 0), to the last non-silent index
///   inclusive. An all-zero signal is kept whole (threshold 0). DALI 0.28, which the reference
///   pinned, may place the start up to W samples differently (DALI's own test accepts +-W).
/// - Dither (pipeline.py): x + 1e-5 * N(0, 1), applied whenever dither != 0, i.e. in training
///   AND evaluation (the val pipeline has the same `dither: 0.00001`), after the trim.
/// - Pre-emphasis (DALI `preemphasis_filter` docs): y[t] = x[t] - 0.97 x[t - 1], border 'clamp'
///   (the default): y[0] = x[0] - 0.97 x[0].
/// - Spectrogram (DALI `spectrogram` docs, dali/kernels/signal/window/window_functions.h and
///   extract_windows_args.h): nfft 512, window_length 320 (0.02 s), window_step 160 (0.01 s),
///   power 2, center_windows = true, reflect_padding = true, window_fn default Hann defined as
///   w[t] = 0.5 (1 - cos(2 pi (t + 0.5) / N)) (not torch's periodic or symmetric Hann). Frame i
///   is centred at sample i * 160, covering [i * 160 - 160, i * 160 + 160), zero-padded to 512
///   with the window centred; samples outside the signal are mirrored without repeating the edge
///   sample (reflect-101, numpy/torch 'reflect'). Frames: n / 160 + 1 (integer division). The
///   window's place inside the 512-sample frame does not change the power spectrum.
/// - Mel filterbank (DALI `mel_filter_bank` docs and dali/kernels/audio/mel_scale/): 80 filters,
///   16 kHz, 0 .. 8000 Hz, mel_formula 'slaney' (linear 3 f / 200 below 1 kHz, logarithmic above:
///   15 + 27 ln(f / 1000) / ln 6.4), triangles interpolated in Hz between mel-spaced edges
///   (fft bin k at k * 16000 / 512 Hz), normalize = True: each filter times 2 / (f_right - f_left)
///   (Slaney area normalisation). This is librosa's and torchaudio's melscale_fbanks(norm='slaney',
///   mel_scale='slaney').
/// - Log (pipeline.py ToDecibels(multiplier = ln 10, reference = 1, cutoff_db = ln 1e-20) and its
///   docs): ln 10 * log10(max(x, 10^(cutoff_db / multiplier))) = ln(max(x, 1e-20)).
/// - Normalize (DALI `normalize` docs; pipeline.py axes=[1] on the "ft" mel spectrogram): per mel
///   channel over the utterance's frames, mean and variance with ddof = 0 and epsilon = 0
///   (defaults): out = (x - mean) / sqrt(var). A constant channel (var = 0) gives 0, as DALI's
///   CPU Normalize does (its reciprocal square root keeps 0, dali/operators/math/normalize). This is
///   DALI's Normalize, not features.py's normalize_batch (ddof 1, + 1e-5), which the DALI path
///   does not use. Padding to the batch's longest utterance happens after it (Pad, fill 0).
/// - SpecAugment (features.py SpecAugment.calculate_features; training only): for each of
///   freq_masks = 2 masks, w = randint(min_freq, max_freq + 1) (0..20), f0 = randint(0,
///   max(1, F - w + 1)), channels [f0, f0 + w) masked. max_time = 0.03 < 1 is adaptive:
///   int(round(len * 0.03)) with Python's round (half to even); time_masks = 10 is a count (it
///   would be adaptive too if in (0, 1)). For each time mask, w = randint(min_time, max_time + 1),
///   t0 = randint(0, max(1, T - w + 1)), frames [t0, t0 + w) masked, where T is the padded batch
///   length (one utterance: its own length). Masked values become 0 (noise_magnitude = 0).
///   Masks may overlap and may run past the end (cut there).
/// - Frame splicing (features.py stack_subsample_frames, stacking = subsampling = 3): output
///   frame t' is the concatenation, along features, of frames 3 t', 3 t' + 1, 3 t' + 2 (frames
///   past the end are zeros), so feature index k * 80 + m holds mel m of frame 3 t' + k. Output
///   length ceil(len / 3).
///
/// Layout. Everything here is time-major: a spectrogram is [frames, nfft / 2 + 1], mel features
/// [frames, 80], the spliced output [frames', 240] (the reference's DALI tensors are "ft",
/// [features, frames]; the values are the same, transposed). [frames', 240] rows are the encoder's
/// inputs in the reference's (T, B, 240) order.
///
/// Checked (tests/audio_features, peer tools/peers/audio_features_peer.py): the filterbank equals
/// torchaudio's melscale_fbanks(257, 0, 8000, 80, 16000, 'slaney', 'slaney') within 1e-6; the
/// spectrogram equals |torch.stft|^2 (f64, same window and padding) within 1e-5 relative; log-mel,
/// normalisation and splicing equal a re-implementation from DALI's docs within 1e-4; the
/// resampler equals torchaudio's resample(lowpass_filter_width=16, rolloff=1) within 1e-6.
///
/// Randomness comes from the caller's benchhost::Rng (random.hpp), drawn in this order: speed
/// factor (uniform), dither (normals, polar method), SpecAugment (integers, in the reference's
/// order). Same seed and stream, same features.
///
/// Ownership: functions write into caller-owned buffers of the documented sizes or return new
/// vectors/tensors; inputs are never modified unless the function says "in place".
/// Threading: free functions and const members may run on several threads at once (objects are
/// immutable after construction); an Rng must not be shared between threads.
/// Errors: an empty signal, a non-positive rate, or a size that does not fit throws
/// InvalidArgument naming the function and the value.

#include <complex>
#include <cstdint>
#include <utility>
#include <vector>

#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::data {

// ============================================================================================
// 1. Resampling (speed perturbation, 22050 -> 16000 Hz)
// ============================================================================================

/// Number of samples after resampling n samples from in_rate to out_rate: ceil(n * out / in).
std::int64_t resampled_length(std::int64_t n, double in_rate, double out_rate);

/// Band-limited resampler: a Hann-windowed sinc with `lobes` zero crossings on each side, its
/// cut-off at min(in_rate, out_rate) / 2 (times `rolloff`). Output sample j is the filtered input
/// at position j * in_rate / out_rate; the input is zero outside [0, n). Rates are arbitrary
/// positive reals (speed perturbation draws them); same rates return the input unchanged.
/// The kernel is tabulated once (1024 points per zero crossing); each call builds a polyphase bank
/// of 1025 phases for its cut-off and interpolates linearly between phases, so a tap is two
/// contiguous loads and a multiply-add; weights are within ~1e-6 of the exact kernel.
class Resampler {
 public:
  explicit Resampler(int lobes = 16, double rolloff = 1.0);
  /// Resample src[0, n) from in_rate to out_rate (Hz); returns resampled_length(n, in, out)
  /// samples.
  std::vector<float> resample(const float* src, std::int64_t n, double in_rate, double out_rate) const;
  int lobes() const { return lobes_; }

 private:
  int lobes_;
  double rolloff_;
  std::vector<float> table_;  // (kernel, slope) at x = i / 1024 zero crossings, zeros past lobes
};

// ============================================================================================
// 2. Silence trim
// ============================================================================================

/// A range of samples [begin, begin + length).
struct SampleRange {
  std::int64_t begin = 0;
  std::int64_t length = 0;
};

/// DALI NonsilentRegion (see the Note): the range to keep. cutoff_db < 0 (dB below the loudest
/// window), window_length > 0 samples.
SampleRange nonsilent_region(const float* src, std::int64_t n, float cutoff_db = -60.0f,
                             int window_length = 2048);

// ============================================================================================
// 3. Dither and pre-emphasis (in place)
// ============================================================================================

/// x[i] += scale * N(0, 1), normals drawn in order from `rng`'s 32-bit stream (Marsaglia's polar
/// method, two per accepted pair).
void add_dither(float* x, std::int64_t n, float scale, Rng& rng);

/// y[t] = x[t] - coeff * x[t - 1], y[0] = (1 - coeff) * x[0] (DALI border 'clamp'); in place.
void preemphasis(float* x, std::int64_t n, float coeff = 0.97f);

// ============================================================================================
// 4. Power spectrogram
// ============================================================================================

/// Radix-2 FFT of a real signal of `size` samples (a power of two, >= 4), computed as a complex
/// FFT of size / 2 points plus a split step; twiddles and bit reversal are precomputed.
class RealFft {
 public:
  explicit RealFft(int size);
  int size() const { return size_; }
  /// Bins 0 .. size / 2 of the DFT X[k] = sum_t x[t] exp(-2 pi i k t / size); `src` has `size`
  /// samples, `dst` size / 2 + 1 bins.
  void forward(const float* src, std::complex<float>* dst) const;
  /// |X[k]|^2 for k in 0 .. size / 2 into dst (size / 2 + 1 values).
  void power(const float* src, float* dst) const;

 private:
  int size_;
  int half_;
  std::vector<int> bitrev_;                    // half_ entries
  std::vector<std::complex<float>> twiddle_;   // exp(-2 pi i k / half_), k < half_ / 2
  std::vector<std::complex<float>> split_;     // exp(-2 pi i k / size_), k <= half_
};

/// DALI's Hann window: w[t] = 0.5 (1 - cos(2 pi (t + 0.5) / length)).
std::vector<float> dali_hann_window(int length);

struct SpectrogramConfig {
  int nfft = 512;           ///< FFT size (power of two)
  int window_length = 320;  ///< samples (0.02 s at 16 kHz), <= nfft
  int hop = 160;            ///< samples between frame centres (0.01 s)
};

/// Frames of a centred spectrogram of n samples: n / hop + 1.
std::int64_t spectrogram_frames(std::int64_t n, int hop);

/// Power spectrogram, centred frames with reflect padding (see the Note). dst is time-major
/// [spectrogram_frames(n, hop), nfft / 2 + 1].
class PowerSpectrogram {
 public:
  explicit PowerSpectrogram(SpectrogramConfig config = {});
  const SpectrogramConfig& config() const { return config_; }
  int bins() const { return config_.nfft / 2 + 1; }
  void compute(const float* src, std::int64_t n, float* dst) const;

 private:
  SpectrogramConfig config_;
  RealFft fft_;
  std::vector<float> window_;
};

// ============================================================================================
// 5. Mel filterbank
// ============================================================================================

/// Slaney mel scale (librosa's default, DALI's 'slaney').
double hz_to_mel_slaney(double hz);
double mel_to_hz_slaney(double mel);

/// Triangular mel filters with Slaney area normalisation, stored sparsely (each filter's band of
/// FFT bins and its weights).
class MelFilterBank {
 public:
  MelFilterBank(int n_mels = 80, int nfft = 512, double sample_rate = 16000, double f_low = 0,
                double f_high = 8000);
  int n_mels() const { return n_mels_; }
  int bins() const { return bins_; }
  /// The dense matrix [n_mels, nfft / 2 + 1] (for tests and peers).
  std::vector<float> dense() const;
  /// mel[t, m] = sum_k fb[m, k] * power[t, k]; power [frames, bins], mel [frames, n_mels].
  void apply(const float* power, std::int64_t frames, float* mel) const;

 private:
  int n_mels_;
  int bins_;
  std::vector<int> first_bin_;                // per filter
  std::vector<std::vector<float>> weights_;   // per filter, from first_bin_
};

// ============================================================================================
// 6. Log and per-channel normalisation (in place)
// ============================================================================================

/// x = ln(max(x, floor)); the reference's floor is 1e-20.
void log_clamped(float* x, std::int64_t n, float floor = 1e-20f);

/// Per channel c of a time-major [frames, channels] array: (x - mean) / sqrt(var + epsilon),
/// var = sum (x - mean)^2 / (frames - ddof); statistics in f64. A channel with var + epsilon = 0
/// becomes 0. frames > ddof.
void normalize_per_channel(float* x, std::int64_t frames, int channels, int ddof = 0,
                           double epsilon = 0.0);

// ============================================================================================
// 7. SpecAugment
// ============================================================================================

struct SpecAugmentConfig {
  int freq_masks = 2;
  int min_freq = 0;
  int max_freq = 20;
  double time_masks = 10;  ///< a count, or adaptive (round(len * time_masks)) when in (0, 1)
  int min_time = 0;
  double max_time = 0.03;  ///< frames, or adaptive (round(len * max_time)) when in (0, 1)
};

/// The masks of one utterance: [begin, end) ranges of channels and of frames (end may exceed the
/// size; apply cuts).
struct SpecAugmentMasks {
  std::vector<std::pair<int, int>> freq;
  std::vector<std::pair<std::int64_t, std::int64_t>> time;
};

/// Draw the masks as features.py does, for `channels` channels, `frames` frames in the (padded)
/// tensor and `length` valid frames (adaptive counts use `length`, mask starts use `frames`).
SpecAugmentMasks draw_spec_augment(const SpecAugmentConfig& config, int channels, std::int64_t frames,
                                   std::int64_t length, Rng& rng);

/// Python's round() for the adaptive widths: nearest integer, halves to even.
std::int64_t round_half_even(double x);

/// Set the masked entries of time-major x [frames, channels] to 0.
void apply_spec_augment(float* x, std::int64_t frames, int channels, const SpecAugmentMasks& masks);

// ============================================================================================
// 8. Frame splicing
// ============================================================================================

/// ceil(frames / subsample).
std::int64_t spliced_frames(std::int64_t frames, int subsample);

/// dst [spliced_frames(frames, subsample), channels * stack]: row t' is rows subsample * t' + k,
/// k < stack, of src [frames, channels] side by side (zeros past the end).
void splice_frames(const float* src, std::int64_t frames, int channels, int stack, int subsample,
                   float* dst);

// ============================================================================================
// 9. The pipeline
// ============================================================================================

/// Parameters; the defaults are the MLPerf reference's (baseline_v3-1023sp.yaml, pipeline.py).
struct RnntFeatureConfig {
  double sample_rate = 16000;         ///< Hz the features are computed at
  double speed_min = 0.85;            ///< training speed perturbation U(min, max)
  double speed_max = 1.15;
  bool speed_perturbation = true;     ///< in training
  bool trim_silence = true;
  float silence_cutoff_db = -60.0f;
  int silence_window = 2048;
  float dither = 1e-5f;               ///< applied in training and evaluation, as the reference
  float preemphasis = 0.97f;
  SpectrogramConfig spectrogram{};
  int n_mels = 80;
  double f_low = 0;
  double f_high = 0;                  ///< 0: sample_rate / 2
  float log_floor = 1e-20f;
  bool spec_augment = true;           ///< in training
  SpecAugmentConfig spec_augment_config{};
  int frame_stack = 3;
  int frame_subsample = 3;
  int resample_lobes = 16;
};

/// One utterance's features: [frames, n_mels * frame_stack] f32, time-major.
struct RnntFeatures {
  Tensor features;
  std::int64_t frames = 0;  ///< == features.size(0)
};

/// The whole feature pipeline for one utterance, in the reference's order:
/// train: speed perturbation (resample to r * sample_rate), trim, dither, pre-emphasis,
/// spectrogram, mel, log, normalise, SpecAugment, splice;
/// eval: resample to sample_rate if needed, trim, dither, pre-emphasis, spectrogram, mel, log,
/// normalise, splice.
/// Construction precomputes the window, FFT twiddles, filters and resampling kernel;
/// compute() is const and thread-safe (one Rng per thread).
class RnntFeaturePipeline {
 public:
  explicit RnntFeaturePipeline(RnntFeatureConfig config = {});
  const RnntFeatureConfig& config() const { return config_; }
  int feature_size() const { return config_.n_mels * config_.frame_stack; }

  /// samples: n mono f32 samples at sample_rate Hz (any positive rate).
  RnntFeatures compute(const float* samples, std::int64_t n, double sample_rate, Rng& rng, bool train) const;

  /// The log-mel, normalised, unspliced features [frames, n_mels] of audio already at
  /// config().sample_rate, without trim, dither or augmentation (pre-emphasis onward); for tests
  /// and peers.
  std::vector<float> log_mel(const float* samples, std::int64_t n, std::int64_t* frames) const;

 private:
  RnntFeatureConfig config_;
  Resampler resampler_;
  PowerSpectrogram spectrogram_;
  MelFilterBank mel_;
};

}  // namespace benchhost::data

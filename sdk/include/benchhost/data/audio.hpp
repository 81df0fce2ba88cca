#pragma once
/// @file data/audio.hpp  WAV and FLAC audio through libsndfile.

#include <cstdint>
#include <string>

#include "benchhost/tensor.hpp"

namespace benchhost::data {

/// Decoded audio: f32 samples in [-1, 1], shape [frames, channels] (interleaved, as in the file),
/// or [frames] when read with `mono` (channels averaged).
struct Audio {
  Tensor samples;
  int sample_rate = 0;  ///< Hz
  int channels = 0;     ///< channels in the file
  std::int64_t frames() const { return samples.defined() ? samples.size(0) : 0; }
  double seconds() const { return sample_rate > 0 ? static_cast<double>(frames()) / sample_rate : 0; }
};

/// Read a WAV or FLAC file (any format libsndfile reads). `mono` averages the channels.
/// A file whose data ends before its header says (truncated) is a DataError naming the file,
/// as is anything libsndfile refuses (with its message).
Audio read_audio(const std::string& path, bool mono = false);

enum class AudioFormat { wav_pcm16, wav_float, flac_pcm16 };
/// Write f32 samples ([frames] or [frames, channels]) as WAV or FLAC. For tests and tools.
void write_audio(const std::string& path, const Tensor& samples, int sample_rate,
                 AudioFormat format = AudioFormat::wav_pcm16);

}  // namespace benchhost::data

// WAV / FLAC audio through libsndfile.
#include "benchhost/data/audio.hpp"

#include <algorithm>
#include <cstring>

#include <sndfile.h>

#include "benchhost/data/file.hpp"

namespace benchhost::data {

namespace {

struct SndFile {
  SNDFILE* f = nullptr;
  ~SndFile() { if (f) sf_close(f); }
};

std::uint32_t le32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

// libsndfile quietly clamps a WAV data chunk that runs past the end of the file; a truncated
// recording must be an error, so the RIFF chunk list is checked here first.
void check_wav_chunks(const std::string& path) {
  const auto file = MappedFile::open(path);
  const std::uint8_t* p = file->data();
  const std::size_t n = file->size();
  if (n < 12 || std::memcmp(p, "RIFF", 4) != 0 || std::memcmp(p + 8, "WAVE", 4) != 0) return;  // not RIFF WAV
  std::size_t off = 12;
  // off can pass n by one: an odd-sized last chunk whose pad byte the file does not have.
  while (off <= n && n - off >= 8) {
    const std::uint32_t size = le32(p + off + 4);
    if (std::memcmp(p + off, "data", 4) == 0) {
      const std::size_t avail = n - off - 8;
      if (size != 0xffffffffu && size != 0 && size > avail)
        BH_THROW(DataError, "{}: truncated WAV file: data chunk declares {} bytes, {} present", path, size, avail);
      return;
    }
    if (size > n - off - 8) BH_THROW(DataError, "{}: truncated WAV file: chunk '{}' runs past the end", path,
                                     std::string(reinterpret_cast<const char*>(p + off), 4));
    off += 8 + size + (size & 1);
  }
  BH_THROW(DataError, "{}: WAV file without a data chunk (truncated?)", path);
}

}  // namespace

Audio read_audio(const std::string& path, bool mono) {
  (void)file_size(path);  // a clear error for a missing file
  check_wav_chunks(path);
  SF_INFO info{};
  SndFile snd;
  snd.f = sf_open(path.c_str(), SFM_READ, &info);
  if (!snd.f) BH_THROW(DataError, "{}: cannot read audio: {}", path, sf_strerror(nullptr));
  if (info.channels < 1 || info.channels > 256 || info.samplerate < 1)
    BH_THROW(DataError, "{}: bad audio header ({} channels at {} Hz)", path, info.channels, info.samplerate);
  // Read in blocks; the buffer grows only as frames actually decode, whatever the header says.
  const auto ch = static_cast<std::size_t>(info.channels);
  // Blocks start at 4096 samples and double up to 2^20 samples, so a short file with a header that
  // claims 256 channels costs kilobytes, not 256 x a full block.
  std::vector<float> data;
  const auto max_block = std::max<sf_count_t>(1, (sf_count_t{1} << 20) / static_cast<sf_count_t>(ch));
  sf_count_t block = std::max<sf_count_t>(1, 4096 / static_cast<sf_count_t>(ch));
  sf_count_t total = 0;
  for (;;) {
    data.resize((static_cast<std::size_t>(total) + static_cast<std::size_t>(block)) * ch);
    const sf_count_t got = sf_readf_float(snd.f, data.data() + static_cast<std::size_t>(total) * ch, block);
    if (got <= 0) break;
    total += got;
    block = std::min(block * 2, max_block);
  }
  data.resize(static_cast<std::size_t>(total) * ch);
  if (sf_error(snd.f) != SF_ERR_NO_ERROR)
    BH_THROW(DataError, "{}: corrupt audio data: {}", path, sf_strerror(snd.f));
  if (info.frames > 0 && info.frames != SF_COUNT_MAX && total < info.frames)
    BH_THROW(DataError, "{}: truncated audio: header says {} frames, {} decoded", path, info.frames, total);
  Audio a;
  a.sample_rate = info.samplerate;
  a.channels = info.channels;
  if (mono) {
    a.samples = Tensor::empty({total}, DType::f32);
    float* o = a.samples.data<float>();
    for (sf_count_t i = 0; i < total; ++i) {
      float acc = 0;
      for (std::size_t c = 0; c < ch; ++c) acc += data[static_cast<std::size_t>(i) * ch + c];
      o[i] = acc / static_cast<float>(ch);
    }
  } else {
    a.samples = Tensor::empty({total, info.channels}, DType::f32);
    if (!data.empty()) std::memcpy(a.samples.raw_data(), data.data(), data.size() * sizeof(float));
  }
  return a;
}

void write_audio(const std::string& path, const Tensor& samples, int sample_rate, AudioFormat format) {
  if (!samples.defined() || samples.dtype() != DType::f32 || samples.dim() < 1 || samples.dim() > 2)
    BH_THROW(InvalidArgument, "write_audio: need f32 [frames] or [frames, channels]");
  if (sample_rate < 1) BH_THROW(InvalidArgument, "write_audio: sample rate {} must be positive", sample_rate);
  const Tensor src = samples.to(Device::cpu()).contiguous();
  SF_INFO info{};
  info.samplerate = sample_rate;
  info.channels = src.dim() == 2 ? static_cast<int>(src.size(1)) : 1;
  switch (format) {
    case AudioFormat::wav_pcm16: info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16; break;
    case AudioFormat::wav_float: info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT; break;
    case AudioFormat::flac_pcm16: info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16; break;
  }
  SndFile snd;
  snd.f = sf_open(path.c_str(), SFM_WRITE, &info);
  if (!snd.f) BH_THROW(DataError, "{}: cannot write audio: {}", path, sf_strerror(nullptr));
  const sf_count_t frames = src.size(0);
  if (sf_writef_float(snd.f, src.data<float>(), frames) != frames)
    BH_THROW(DataError, "{}: audio write failed: {}", path, sf_strerror(snd.f));
}

}  // namespace benchhost::data

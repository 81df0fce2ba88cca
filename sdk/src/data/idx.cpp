// IDX (MNIST format) files through zlib's gz* API (format notes in idx.hpp).
#include "benchhost/data/idx.hpp"

#include <algorithm>
#include <cstring>

#include <zlib.h>

#include "data/internal.hpp"

namespace benchhost::data {

namespace {

struct GzFile {
  gzFile f = nullptr;
  ~GzFile() { if (f) gzclose(f); }
};

// Read exactly n bytes or report how many were there.
std::size_t gz_read(GzFile& gz, void* dst, std::size_t n, const std::string& path) {
  std::size_t done = 0;
  while (done < n) {
    const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
    const int got = gzread(gz.f, static_cast<std::uint8_t*>(dst) + done, chunk);
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(gz.f, &err);
      BH_THROW(DataError, "{}: corrupt gzip data: {}", path, msg ? msg : "unknown zlib error");
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  // zlib reports a gzip stream cut short (even inside its 8-byte trailer) as Z_BUF_ERROR with a
  // short read rather than a failed one.
  int err = Z_OK;
  const char* msg = gzerror(gz.f, &err);
  if (err != Z_OK)
    BH_THROW(DataError, "{}: truncated or corrupt gzip data: {}", path, msg ? msg : "unknown zlib error");
  return done;
}

std::uint32_t be32(const std::uint8_t* p) {
  return (static_cast<std::uint32_t>(p[0]) << 24) | (static_cast<std::uint32_t>(p[1]) << 16) |
         (static_cast<std::uint32_t>(p[2]) << 8) | p[3];
}

}  // namespace

Tensor read_idx(const std::string& path) {
  GzFile gz;
  gz.f = gzopen(path.c_str(), "rb");
  if (!gz.f) BH_THROW(DataError, "{}: cannot open: {}", path, errno_message(errno));
  gzbuffer(gz.f, 1 << 17);
  std::uint8_t magic[4];
  if (gz_read(gz, magic, 4, path) != 4) BH_THROW(DataError, "{}: truncated IDX file (no magic number)", path);
  if (magic[0] != 0 || magic[1] != 0)
    BH_THROW(DataError, "{}: not an IDX file (magic {:02x} {:02x} {:02x} {:02x}; expected 00 00 <type> <ndim>)",
             path, magic[0], magic[1], magic[2], magic[3]);
  const std::uint8_t type = magic[2];
  const int ndim = magic[3];
  std::size_t in_size = 0;
  DType out_type;
  switch (type) {
    case 0x08: in_size = 1; out_type = DType::u8; break;
    case 0x09: in_size = 1; out_type = DType::i32; break;
    case 0x0B: in_size = 2; out_type = DType::i32; break;
    case 0x0C: in_size = 4; out_type = DType::i32; break;
    case 0x0D: in_size = 4; out_type = DType::f32; break;
    case 0x0E: in_size = 8; out_type = DType::f64; break;
    default: BH_THROW(DataError, "{}: unknown IDX data type 0x{:02x}", path, type);
  }
  if (ndim < 1) BH_THROW(DataError, "{}: IDX file with {} dimensions", path, ndim);
  std::uint8_t dims_raw[4 * 255];
  if (gz_read(gz, dims_raw, 4 * static_cast<std::size_t>(ndim), path) != 4 * static_cast<std::size_t>(ndim))
    BH_THROW(DataError, "{}: truncated IDX header ({} dimensions declared)", path, ndim);
  Shape shape;
  std::uint64_t count = 1, bound = 1;
  for (int d = 0; d < ndim; ++d) {
    shape.push_back(be32(dims_raw + 4 * d));
    // Zero dimensions are skipped in the bound: [0, 2^31, 2^31, ...] holds no data but still
    // has to be a shape whose strides fit.
    if (__builtin_mul_overflow(bound, std::max<std::uint64_t>(shape.back(), 1), &bound) || bound > (1ull << 40))
      BH_THROW(DataError, "{}: absurd IDX shape (dimension {} = {})", path, d, shape.back());
    count *= static_cast<std::uint64_t>(shape.back());
  }
  const std::uint64_t want = count * in_size;
  // The buffer grows only as data actually arrives, doubling from 4 KiB up to
  // 16 MiB steps: a lying header costs at most the real data again, and never more than one step.
  std::vector<std::uint8_t> raw;
  constexpr std::size_t kFirst = std::size_t{4} << 10, kChunk = std::size_t{16} << 20;
  while (raw.size() < want) {
    const std::size_t before = raw.size();
    const std::size_t step = std::min<std::uint64_t>(std::clamp(before, kFirst, kChunk), want - before);
    raw.resize(before + step);
    const std::size_t got = gz_read(gz, raw.data() + before, step, path);
    if (got < step)
      BH_THROW(DataError, "{}: truncated IDX file: shape {} needs {} data bytes, found {}", path,
               shape_str(shape), want, before + got);
  }
  std::uint8_t extra;
  if (gz_read(gz, &extra, 1, path) != 0)
    BH_THROW(DataError, "{}: IDX file has bytes after the {} declared by its shape {}", path, want, shape_str(shape));
  Tensor t = Tensor::empty(shape, out_type);
  const auto n = static_cast<std::int64_t>(count);
  const std::uint8_t* p = raw.data();
  switch (type) {
    case 0x08: if (n) std::memcpy(t.raw_data(), p, static_cast<std::size_t>(n)); break;
    case 0x09: { auto* o = t.data<std::int32_t>(); for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<std::int8_t>(p[i]); break; }
    case 0x0B: { auto* o = t.data<std::int32_t>(); for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<std::int16_t>((p[2 * i] << 8) | p[2 * i + 1]); break; }
    case 0x0C: { auto* o = t.data<std::int32_t>(); for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<std::int32_t>(be32(p + 4 * i)); break; }
    case 0x0D: { auto* o = t.data<float>(); for (std::int64_t i = 0; i < n; ++i) { std::uint32_t v = be32(p + 4 * i); std::memcpy(o + i, &v, 4); } break; }
    case 0x0E: { auto* o = t.data<double>(); for (std::int64_t i = 0; i < n; ++i) { std::uint64_t v = (static_cast<std::uint64_t>(be32(p + 8 * i)) << 32) | be32(p + 8 * i + 4); std::memcpy(o + i, &v, 8); } break; }
  }
  return t;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  BH_CHECK_AS(InvalidArgument, t.defined() && t.dim() >= 1 && t.dim() <= 255, "write_idx: need a 1..255-d tensor");
  const Tensor src = t.to(Device::cpu()).contiguous();
  std::uint8_t type = 0;
  switch (src.dtype()) {
    case DType::u8: type = 0x08; break;
    case DType::i32: type = 0x0C; break;
    case DType::f32: type = 0x0D; break;
    case DType::f64: type = 0x0E; break;
    default: BH_THROW(InvalidArgument, "write_idx: dtype {} has no IDX type", dtype_name(src.dtype()));
  }
  std::vector<std::uint8_t> out{0, 0, type, static_cast<std::uint8_t>(src.dim())};
  auto put_be = [&](std::uint64_t v, int bytes) {
    for (int b = bytes - 1; b >= 0; --b) out.push_back(static_cast<std::uint8_t>(v >> (8 * b)));
  };
  for (auto d : src.shape()) put_be(static_cast<std::uint64_t>(d), 4);
  const auto* p = static_cast<const std::uint8_t*>(src.raw_data());
  const std::size_t es = src.element_size();
  for (std::int64_t i = 0; i < src.numel(); ++i) {
    std::uint64_t v = 0;
    std::memcpy(&v, p + i * es, es);
    put_be(v, static_cast<int>(es));
  }
  gzFile f = gzopen(path.c_str(), gzip ? "wb6" : "wbT");
  if (!f) BH_THROW(DataError, "{}: cannot open for writing: {}", path, errno_message(errno));
  const int wrote = out.empty() ? 0 : gzwrite(f, out.data(), static_cast<unsigned>(out.size()));
  const int rc = gzclose(f);
  if (wrote != static_cast<int>(out.size()) || rc != Z_OK) BH_THROW(DataError, "{}: write failed", path);
}

IdxClassificationDataset::IdxClassificationDataset(const std::string& images_path, const std::string& labels_path,
                                                   float mean, float std, bool raw_u8)
    : images_path_(images_path), mean_(mean), std_(std), raw_u8_(raw_u8) {
  images_ = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  if (images_.dtype() != DType::u8 || images_.dim() != 3)
    BH_THROW(DataError, "{}: expected u8 images [N, H, W], got {} {}", images_path, dtype_name(images_.dtype()),
             shape_str(images_.shape()));
  if (labels.dim() != 1)
    BH_THROW(DataError, "{}: expected labels [N], got {}", labels_path, shape_str(labels.shape()));
  // Class numbers are integers (u8 in Fashion-MNIST); found by fuzz_idx: an f64 label of 1.7e22.
  if (labels.dtype() != DType::u8 && labels.dtype() != DType::i32)
    BH_THROW(DataError, "{}: labels must be an integer IDX type (u8, i8, i16 or i32), not {}", labels_path,
             dtype_name(labels.dtype()));
  if (labels.size(0) != images_.size(0))
    BH_THROW(DataError, "{} has {} labels but {} has {} images", labels_path, labels.size(0), images_path,
             images_.size(0));
  if (!(std_ > 0)) BH_THROW(InvalidArgument, "IdxClassificationDataset: std {} must be positive", std_);
  labels_ = labels.to(DType::i64);
  size_ = images_.size(0);
}

Sample IdxClassificationDataset::get(const SampleContext& ctx) const {
  check_index(ctx.index, size_);
  const std::int64_t h = images_.size(1), w = images_.size(2);
  const std::uint8_t* src = images_.data<std::uint8_t>() + ctx.index * h * w;
  Sample s;
  if (raw_u8_) {
    Tensor img = Tensor::empty({1, h, w}, DType::u8);
    std::memcpy(img.raw_data(), src, static_cast<std::size_t>(h * w));
    s.set("image", std::move(img));
  } else {
    Tensor img = Tensor::empty({1, h, w}, DType::f32);
    float* dst = img.data<float>();
    const float scale = 1.0f / (255.0f * std_), shift = mean_ / std_;
    for (std::int64_t i = 0; i < h * w; ++i) dst[i] = static_cast<float>(src[i]) * scale - shift;
    s.set("image", std::move(img));
  }
  Tensor label = Tensor::empty({}, DType::i64);
  *label.data<std::int64_t>() = labels_.data<std::int64_t>()[ctx.index];
  s.set("label", std::move(label));
  return s;
}

std::string IdxClassificationDataset::source(std::int64_t index) const {
  return fmt::format("{}[{}]", images_path_, index);
}

}  // namespace benchhost::data

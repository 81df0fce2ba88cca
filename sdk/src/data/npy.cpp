// NumPy .npy / .npz reading, memory mapping and writing (format notes in npy.hpp).
#include "benchhost/data/npy.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>

#include <zlib.h>

#include "benchhost/data/file.hpp"
#include "data/internal.hpp"

namespace benchhost::data {

namespace {

constexpr std::uint8_t kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

std::uint16_t rd16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t rd32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
std::uint64_t rd64(const std::uint8_t* p) { return rd32(p) | (static_cast<std::uint64_t>(rd32(p + 4)) << 32); }

// A tiny reader for the Python dict literal of a .npy header:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  void parse(std::string& descr, bool& fortran, Shape& shape, bool& have_descr, bool& have_order, bool& have_shape) {
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') { ++i_; break; }
      const std::string key = parse_string();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"')
          fail("'descr' is not a simple dtype string (structured dtypes are not supported)");
        descr = parse_string();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = parse_bool();
        have_order = true;
      } else if (key == "shape") {
        shape = parse_tuple();
        have_shape = true;
      } else {
        fail(fmt::format("unexpected key '{}'", key));
      }
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      skip_ws();
      expect('}');
      break;
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    BH_THROW(DataError, "{}: bad .npy header at character {}: {} (header: {})", name_, i_, why, s_);
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() { while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_; }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++i_;
  }
  std::string parse_string() {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    ++i_;
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) ++i_;
    if (i_ >= s_.size()) fail("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool parse_bool() {
    if (s_.substr(i_, 4) == "True") { i_ += 4; return true; }
    if (s_.substr(i_, 5) == "False") { i_ += 5; return false; }
    fail("expected True or False");
  }
  Shape parse_tuple() {
    expect('(');
    Shape shape;
    for (;;) {
      skip_ws();
      if (peek() == ')') { ++i_; break; }
      if (peek() < '0' || peek() > '9') fail("expected a dimension");
      std::int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (std::int64_t{1} << 50)) fail("dimension too large");
        v = v * 10 + (peek() - '0');
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2 longs
      shape.push_back(v);
      if (shape.size() > 32) fail("more than 32 dimensions");
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      skip_ws();
      expect(')');
      break;
    }
    return shape;
  }

  std::string_view s_;
  const std::string& name_;
  std::size_t i_ = 0;
};

DType parse_descr(const std::string& descr, const std::string& name) {
  if (descr.size() == 3) {
    const char order = descr[0];
    const std::string_view code = std::string_view(descr).substr(1);
    const bool one_byte = code == "u1" || code == "b1";
    const bool little = order == '<' || order == '=' || (order == '|' && one_byte);
    if (order == '>' && !one_byte)
      BH_THROW(DataError, "{}: big-endian dtype '{}' is not supported; convert with "
               "array.astype(array.dtype.newbyteorder('<'))", name, descr);
    if (little || (one_byte && order == '>')) {
      if (code == "f4") return DType::f32;
      if (code == "f8") return DType::f64;
      if (code == "f2") return DType::f16;
      if (code == "i4") return DType::i32;
      if (code == "i8") return DType::i64;
      if (code == "u1") return DType::u8;
      if (code == "b1") return DType::boolean;
    }
  }
  BH_THROW(DataError, "{}: unsupported .npy dtype '{}' (supported: <f4 <f8 <f2 <i4 <i8 |u1 |b1)", name, descr);
}

const char* descr_of(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
    case DType::boolean: return "|b1";
    default: break;
  }
  BH_THROW(InvalidArgument, "cannot store dtype {} in .npy (no numpy equivalent)", dtype_name(t));
}

}  // namespace

NpyHeader parse_npy_header(std::span<const std::uint8_t> bytes, const std::string& name) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kNpyMagic, 6) != 0)
    BH_THROW(DataError, "{}: not a .npy file (bad magic; {} bytes)", name, bytes.size());
  NpyHeader h;
  h.major_version = bytes[6];
  std::size_t header_len = 0, prefix = 0;
  if (h.major_version == 1) {
    header_len = rd16(bytes.data() + 8);
    prefix = 10;
  } else if (h.major_version == 2 || h.major_version == 3) {
    if (bytes.size() < 12) BH_THROW(DataError, "{}: truncated .npy header ({} bytes)", name, bytes.size());
    header_len = rd32(bytes.data() + 8);
    prefix = 12;
  } else {
    BH_THROW(DataError, "{}: unsupported .npy format version {}.{}", name, h.major_version, bytes[7]);
  }
  if (header_len > bytes.size() - prefix)
    BH_THROW(DataError, "{}: truncated .npy file: header of {} bytes but only {} bytes after the prefix",
             name, header_len, bytes.size() - prefix);
  std::string descr;
  bool have_descr = false, have_order = false, have_shape = false;
  HeaderParser parser(std::string_view(reinterpret_cast<const char*>(bytes.data() + prefix), header_len), name);
  parser.parse(descr, h.fortran_order, h.shape, have_descr, have_order, have_shape);
  if (!have_descr || !have_order || !have_shape)
    BH_THROW(DataError, "{}: .npy header lacks {}", name,
             !have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'");
  h.dtype = parse_descr(descr, name);
  if (h.fortran_order)
    BH_THROW(DataError, "{}: Fortran-ordered arrays are not supported; save with "
             "numpy.ascontiguousarray(array)", name);
  h.data_offset = prefix + header_len;
  // The dimensions past a zero one count too: a tensor's strides multiply through them (found by
  // fuzz_datasets: shape (0, 5888088888808888, 8888, 1) overflowed contiguous_strides).
  std::uint64_t n = dtype_size(h.dtype), nonzero = 1;
  for (auto d : h.shape) {
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n) ||
        __builtin_mul_overflow(nonzero, std::max<std::uint64_t>(static_cast<std::uint64_t>(d), 1), &nonzero) ||
        nonzero > (std::uint64_t{1} << 56))
      BH_THROW(DataError, "{}: .npy shape {} overflows (more elements than any memory holds)", name,
               shape_str(h.shape));
  }
  h.data_bytes = n;
  const std::size_t available = bytes.size() - h.data_offset;
  if (h.data_bytes > available)
    BH_THROW(DataError, "{}: truncated .npy file: shape {} of {} needs {} data bytes, the file has {}",
             name, shape_str(h.shape), dtype_name(h.dtype), h.data_bytes, available);
  return h;
}

Tensor parse_npy(std::span<const std::uint8_t> bytes, const std::string& name) {
  const NpyHeader h = parse_npy_header(bytes, name);
  Tensor t = Tensor::empty(h.shape, h.dtype);
  if (h.data_bytes) std::memcpy(t.raw_data(), bytes.data() + h.data_offset, h.data_bytes);
  return t;
}

Tensor read_npy(const std::string& path) {
  const auto bytes = read_file(path);
  return parse_npy(bytes, path);
}

Tensor map_npy(const std::string& path) {
  auto file = MappedFile::open(path);
  const NpyHeader h = parse_npy_header(file->bytes(), path);
  if (h.data_offset % dtype_size(h.dtype) != 0)
    BH_THROW(DataError, "{}: .npy data at offset {} is not aligned to its {}-byte elements; read it "
             "with read_npy instead", path, h.data_offset, dtype_size(h.dtype));
  auto* base = const_cast<std::uint8_t*>(file->data()) + h.data_offset;
  auto storage = std::make_shared<Storage>(base, h.data_bytes, Device::cpu(), std::shared_ptr<void>(file));
  return Tensor(std::move(storage), 0, h.shape, contiguous_strides(h.shape), h.dtype);
}

std::vector<std::uint8_t> encode_npy(const Tensor& t) {
  BH_CHECK_AS(InvalidArgument, t.defined(), "encode_npy: undefined tensor");
  const Tensor src = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu());
  std::string shape = "(";
  for (std::size_t i = 0; i < src.shape().size(); ++i)
    shape += fmt::format("{}{}", src.shape()[i], src.shape().size() == 1 ? "," : (i + 1 < src.shape().size() ? ", " : ""));
  shape += ")";
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr_of(src.dtype()), shape);
  // Pad with spaces and a newline so the data starts on a 64-byte boundary (numpy does the same).
  const std::size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  if (dict.size() > 0xffff) BH_THROW(InvalidArgument, "encode_npy: header too long for format 1.0");
  std::vector<std::uint8_t> out(10 + dict.size() + src.nbytes());
  std::memcpy(out.data(), kNpyMagic, 6);
  out[6] = 1;
  out[7] = 0;
  out[8] = static_cast<std::uint8_t>(dict.size() & 0xff);
  out[9] = static_cast<std::uint8_t>(dict.size() >> 8);
  std::memcpy(out.data() + 10, dict.data(), dict.size());
  if (src.nbytes()) std::memcpy(out.data() + 10 + dict.size(), src.raw_data(), src.nbytes());
  return out;
}

namespace {
void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) BH_THROW(DataError, "{}: cannot open for writing: {}", path, errno_message(errno));
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) BH_THROW(DataError, "{}: write failed: {}", path, errno_message(errno));
}
}  // namespace

void write_npy(const std::string& path, const Tensor& t) { write_bytes(path, encode_npy(t)); }

// ---- .npz (zip) ----
//
// Note [Reading zip archives]
// The central directory at the end of the archive is the index: the end-of-central-directory
// record (EOCD, found by scanning back over at most 64 KiB of comment) gives its offset and entry
// count; zip64 archives put 64-bit values in a zip64 EOCD record found through a locator just
// before the EOCD, and per-entry 64-bit sizes/offsets in extra field 0x0001. Each entry's local
// header is then read only to skip its name and extra field. Every offset and length is checked
// against the archive size before use; a deflated member may not claim to expand more than
// deflate's maximum ratio (1032:1); the inflated size and CRC-32 must match the directory.

namespace {

constexpr std::uint32_t kEocdSig = 0x06054b50, kZip64EocdSig = 0x06064b50, kZip64LocSig = 0x07064b50;
constexpr std::uint32_t kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;

struct ZipEntry {
  std::string name;
  std::uint16_t method = 0, flags = 0;
  std::uint32_t crc = 0;
  std::uint64_t comp_size = 0, uncomp_size = 0, local_offset = 0;
};

std::vector<ZipEntry> read_central_directory(std::span<const std::uint8_t> z, const std::string& path) {
  const std::size_t n = z.size();
  if (n < 22) BH_THROW(DataError, "{}: not a zip/.npz archive ({} bytes, too short for the end record)", path, n);
  std::size_t eocd = std::string::npos;
  const std::size_t lowest = n >= 22 + 0xffff ? n - 22 - 0xffff : 0;
  for (std::size_t p = n - 22 + 1; p-- > lowest;) {
    if (rd32(z.data() + p) == kEocdSig && p + 22 + rd16(z.data() + p + 20) == n) {
      eocd = p;
      break;
    }
  }
  if (eocd == std::string::npos)
    BH_THROW(DataError, "{}: not a zip/.npz archive or truncated (no end-of-central-directory record)", path);
  std::uint64_t entries = rd16(z.data() + eocd + 10);
  std::uint64_t cd_size = rd32(z.data() + eocd + 12);
  std::uint64_t cd_offset = rd32(z.data() + eocd + 16);
  if (rd16(z.data() + eocd + 4) != 0 || rd16(z.data() + eocd + 6) != 0)
    BH_THROW(DataError, "{}: multi-disk zip archives are not supported", path);
  if (entries == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    if (eocd < 20 || rd32(z.data() + eocd - 20) != kZip64LocSig)
      BH_THROW(DataError, "{}: zip64 archive without a zip64 locator", path);
    const std::uint64_t z64 = rd64(z.data() + eocd - 20 + 8);
    if (z64 > n || n - z64 < 56 || rd32(z.data() + z64) != kZip64EocdSig)
      BH_THROW(DataError, "{}: bad zip64 end-of-central-directory record offset {}", path, z64);
    entries = rd64(z.data() + z64 + 32);
    cd_size = rd64(z.data() + z64 + 40);
    cd_offset = rd64(z.data() + z64 + 48);
  }
  if (cd_offset > n || cd_size > n - cd_offset)
    BH_THROW(DataError, "{}: central directory [{}, +{}) lies outside the {}-byte archive", path, cd_offset, cd_size, n);
  if (entries > cd_size / 46)
    BH_THROW(DataError, "{}: {} entries cannot fit in a {}-byte central directory", path, entries, cd_size);
  std::vector<ZipEntry> out;
  out.reserve(entries);
  std::size_t p = cd_offset;
  const std::size_t end = cd_offset + cd_size;
  for (std::uint64_t e = 0; e < entries; ++e) {
    if (end - p < 46 || rd32(z.data() + p) != kCentralSig)
      BH_THROW(DataError, "{}: central directory entry {} at offset {} is corrupt", path, e, p);
    ZipEntry ze;
    ze.flags = rd16(z.data() + p + 8);
    ze.method = rd16(z.data() + p + 10);
    ze.crc = rd32(z.data() + p + 16);
    ze.comp_size = rd32(z.data() + p + 20);
    ze.uncomp_size = rd32(z.data() + p + 24);
    const std::size_t name_len = rd16(z.data() + p + 28), extra_len = rd16(z.data() + p + 30),
                      comment_len = rd16(z.data() + p + 32);
    ze.local_offset = rd32(z.data() + p + 42);
    if (end - p - 46 < name_len + extra_len + comment_len)
      BH_THROW(DataError, "{}: central directory entry {} overruns the directory", path, e);
    ze.name.assign(reinterpret_cast<const char*>(z.data() + p + 46), name_len);
    // zip64 extended information: only the fields that are saturated in the fixed part.
    std::size_t x = p + 46 + name_len;
    const std::size_t x_end = x + extra_len;
    while (x_end - x >= 4) {
      const std::uint16_t id = rd16(z.data() + x), len = rd16(z.data() + x + 2);
      if (x_end - x - 4 < len) break;
      if (id == 0x0001) {
        std::size_t q = x + 4;
        const std::size_t q_end = q + len;
        auto take = [&](std::uint64_t& v) {
          if (q_end - q < 8) BH_THROW(DataError, "{}: entry '{}': short zip64 extra field", path, ze.name);
          v = rd64(z.data() + q);
          q += 8;
        };
        if (ze.uncomp_size == 0xffffffff) take(ze.uncomp_size);
        if (ze.comp_size == 0xffffffff) take(ze.comp_size);
        if (ze.local_offset == 0xffffffff) take(ze.local_offset);
      }
      x += 4 + len;
    }
    p += 46 + name_len + extra_len + comment_len;
    out.push_back(std::move(ze));
  }
  return out;
}

// Where an entry's bytes lie, checked against the archive. Every sum below is of values already
// bounded by the archive size, so none can overflow.
std::uint64_t entry_data_start(std::span<const std::uint8_t> z, const ZipEntry& e, const std::string& path) {
  const std::size_t n = z.size();
  if (e.flags & 1) BH_THROW(DataError, "{}: member '{}' is encrypted", path, e.name);
  if (e.local_offset > n || n - e.local_offset < 30 || rd32(z.data() + e.local_offset) != kLocalSig)
    BH_THROW(DataError, "{}: member '{}': bad local header offset {}", path, e.name, e.local_offset);
  const std::uint64_t data_start = e.local_offset + 30 + rd16(z.data() + e.local_offset + 26) +
                                   rd16(z.data() + e.local_offset + 28);
  if (data_start > n || e.comp_size > n - data_start)
    BH_THROW(DataError, "{}: member '{}': {} compressed bytes at offset {} run past the end of the {}-byte "
             "archive (truncated?)", path, e.name, e.comp_size, data_start, n);
  return data_start;
}

std::vector<std::uint8_t> extract(std::span<const std::uint8_t> z, const ZipEntry& e, const std::string& path) {
  const std::uint64_t data_start = entry_data_start(z, e, path);
  const std::uint8_t* src = z.data() + data_start;
  std::vector<std::uint8_t> out;
  if (e.method == 0) {
    if (e.comp_size != e.uncomp_size)
      BH_THROW(DataError, "{}: stored member '{}' has sizes {} and {}", path, e.name, e.comp_size, e.uncomp_size);
    out.assign(src, src + e.comp_size);
  } else if (e.method == 8) {
    if (e.uncomp_size > e.comp_size * 1032 + 1024)
      BH_THROW(DataError, "{}: member '{}' claims {} bytes from {} deflated bytes, more than deflate can "
               "expand", path, e.name, e.uncomp_size, e.comp_size);
    out.resize(e.uncomp_size);
    z_stream zs{};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) BH_THROW(DataError, "{}: zlib inflateInit failed", path);
    zs.next_in = const_cast<Bytef*>(src);
    zs.next_out = out.data();
    std::uint64_t in_left = e.comp_size, out_left = e.uncomp_size;
    int rc = Z_OK;
    while (rc == Z_OK) {
      const auto in_chunk = static_cast<uInt>(std::min<std::uint64_t>(in_left, 1u << 30));
      const auto out_chunk = static_cast<uInt>(std::min<std::uint64_t>(out_left, 1u << 30));
      zs.avail_in = in_chunk;
      zs.avail_out = out_chunk;
      rc = inflate(&zs, Z_NO_FLUSH);
      in_left -= in_chunk - zs.avail_in;
      out_left -= out_chunk - zs.avail_out;
      if (rc == Z_OK && zs.avail_out == out_chunk && zs.avail_in == in_chunk) break;  // no progress
      if (rc == Z_BUF_ERROR && (out_left == 0 || in_left == 0)) break;
    }
    const std::string msg = zs.msg ? zs.msg : "";
    inflateEnd(&zs);
    if (rc != Z_STREAM_END)
      BH_THROW(DataError, "{}: member '{}' does not inflate to its {} bytes ({}{})", path, e.name, e.uncomp_size,
               rc == Z_DATA_ERROR ? "corrupt deflate data" : "data ends early or is longer than declared",
               msg.empty() ? "" : ": " + msg);
    if (out_left != 0)
      BH_THROW(DataError, "{}: member '{}' inflates to {} bytes, the directory says {}", path, e.name,
               e.uncomp_size - out_left, e.uncomp_size);
  } else {
    BH_THROW(DataError, "{}: member '{}' uses compression method {} (only stored and deflate are supported)",
             path, e.name, e.method);
  }
  std::uint64_t crc = crc32(0L, Z_NULL, 0);
  for (std::size_t off = 0; off < out.size(); off += 1u << 30)
    crc = crc32(crc, out.data() + off, static_cast<uInt>(std::min<std::size_t>(out.size() - off, 1u << 30)));
  if (crc != e.crc)
    BH_THROW(DataError, "{}: member '{}' fails its CRC-32 check (corrupt archive)", path, e.name);
  return out;
}

void put16(std::vector<std::uint8_t>& v, std::uint32_t x) { v.push_back(x & 0xff); v.push_back((x >> 8) & 0xff); }
void put32(std::vector<std::uint8_t>& v, std::uint32_t x) { put16(v, x & 0xffff); put16(v, x >> 16); }

}  // namespace

std::vector<NpzMember> npz_members(std::span<const std::uint8_t> archive, const std::string& path) {
  std::vector<NpzMember> out;
  for (const ZipEntry& e : read_central_directory(archive, path)) {
    if (!e.name.empty() && e.name.back() == '/') continue;  // directory entry
    NpzMember m;
    m.name = e.name;
    m.method = e.method;
    m.crc = e.crc;
    m.data_offset = entry_data_start(archive, e, path);
    m.stored_bytes = e.comp_size;
    m.size = e.uncomp_size;
    if (m.method == 0 && m.size != m.stored_bytes)
      BH_THROW(DataError, "{}: stored member '{}' has sizes {} and {}", path, m.name, m.stored_bytes, m.size);
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path) { return parse_npz(read_file(path), path); }

std::vector<std::pair<std::string, Tensor>> parse_npz(std::span<const std::uint8_t> z, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ZipEntry& e : read_central_directory(z, path)) {
    if (!e.name.empty() && e.name.back() == '/') continue;  // directory entry
    const auto bytes = extract(z, e, path);
    std::string name = e.name;
    if (name.size() > 4 && name.ends_with(".npy")) name.resize(name.size() - 4);
    out.emplace_back(name, parse_npy(bytes, fmt::format("{}[{}]", path, e.name)));
  }
  return out;
}

void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays, bool compress) {
  std::vector<std::uint8_t> zip, central;
  for (const auto& [name, t] : arrays) {
    const std::string member = name + ".npy";
    const auto raw = encode_npy(t);
    std::vector<std::uint8_t> data;
    if (compress) {
      z_stream zs{};
      deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
      data.resize(deflateBound(&zs, raw.size()));
      zs.next_in = const_cast<Bytef*>(raw.data());
      zs.avail_in = static_cast<uInt>(raw.size());
      zs.next_out = data.data();
      zs.avail_out = static_cast<uInt>(data.size());
      const int rc = deflate(&zs, Z_FINISH);
      data.resize(zs.total_out);
      deflateEnd(&zs);
      if (rc != Z_STREAM_END) BH_THROW(DataError, "{}: deflate of '{}' failed", path, member);
    } else {
      data = raw;
    }
    if (raw.size() >= 0xffffffffu || zip.size() + data.size() >= 0xffffffffu)
      BH_THROW(InvalidArgument, "write_npz: archives over 4 GiB (zip64) are not written");
    const auto crc = static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), raw.data(), static_cast<uInt>(raw.size())));
    const auto offset = static_cast<std::uint32_t>(zip.size());
    const std::uint16_t method = compress ? 8 : 0;
    put32(zip, kLocalSig); put16(zip, 20); put16(zip, 0); put16(zip, method); put16(zip, 0); put16(zip, 0x21);
    put32(zip, crc); put32(zip, static_cast<std::uint32_t>(data.size())); put32(zip, static_cast<std::uint32_t>(raw.size()));
    put16(zip, static_cast<std::uint32_t>(member.size())); put16(zip, 0);
    zip.insert(zip.end(), member.begin(), member.end());
    zip.insert(zip.end(), data.begin(), data.end());
    put32(central, kCentralSig); put16(central, 20); put16(central, 20); put16(central, 0); put16(central, method);
    put16(central, 0); put16(central, 0x21); put32(central, crc); put32(central, static_cast<std::uint32_t>(data.size()));
    put32(central, static_cast<std::uint32_t>(raw.size())); put16(central, static_cast<std::uint32_t>(member.size()));
    put16(central, 0); put16(central, 0); put16(central, 0); put16(central, 0); put32(central, 0); put32(central, offset);
    central.insert(central.end(), member.begin(), member.end());
  }
  const auto cd_offset = static_cast<std::uint32_t>(zip.size());
  zip.insert(zip.end(), central.begin(), central.end());
  put32(zip, kEocdSig); put16(zip, 0); put16(zip, 0);
  put16(zip, static_cast<std::uint32_t>(arrays.size())); put16(zip, static_cast<std::uint32_t>(arrays.size()));
  put32(zip, static_cast<std::uint32_t>(central.size())); put32(zip, cd_offset); put16(zip, 0);
  write_bytes(path, zip);
}

// ---- NpyDataset ----

NpyDataset::NpyDataset(std::vector<std::pair<std::string, std::string>> name_and_path) {
  if (name_and_path.empty()) BH_THROW(InvalidArgument, "NpyDataset: no files");
  size_ = -1;
  for (auto& [name, path] : name_and_path) {
    Tensor t = map_npy(path);
    if (t.dim() < 1) BH_THROW(DataError, "{}: a 0-d array cannot be a dataset field ('{}')", path, name);
    if (size_ < 0) size_ = t.size(0);
    if (t.size(0) != size_)
      BH_THROW(DataError, "{}: field '{}' has {} rows but {} has {}", path, name, t.size(0), paths_.front(), size_);
    arrays_.emplace_back(name, std::move(t));
    paths_.push_back(path);
  }
}

Sample NpyDataset::get(const SampleContext& ctx) const {
  check_index(ctx.index, size_);
  Sample s;
  for (const auto& [name, t] : arrays_) s.set(name, t.select(0, ctx.index).clone());
  return s;
}

std::string NpyDataset::source(std::int64_t index) const {
  return fmt::format("{}[{}]", paths_.front(), index);
}

}  // namespace benchhost::data

// Weight files: the layout is specified in docs/weights-format.md; tools/peers/weights.py is the
// Python side of the same format. Keep the three in step.
#include "benchhost/nn/serialize.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "benchhost/error.hpp"

namespace benchhost::nn {

static_assert(std::endian::native == std::endian::little,
              "weight files are little-endian and written with plain memcpy");

namespace {

constexpr char kMagic[8] = {'B', 'H', 'W', 'E', 'I', 'G', 'H', 'T'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxNameBytes = 4096;
constexpr std::uint32_t kMaxDims = 8;
constexpr std::uint64_t kAlign = 64;
constexpr std::uint64_t kHeaderBytes = 8 + 4 + 4 + 8;
// name_len + dtype + ndim + reserved + nbytes + crc, with an empty name and no dims or data:
// the least a record can take, which bounds the tensor count a file of a given size can claim.
constexpr std::uint64_t kMinRecordBytes = 4 + 1 + 1 + 2 + 8 + 4;

// Stable on-disk dtype codes (never reuse a number; the DType enum may be reordered).
struct DtypeCode { DType type; std::uint8_t code; };
constexpr DtypeCode kCodes[] = {
    {DType::f32, 1}, {DType::f64, 2},    {DType::f16, 3}, {DType::bf16, 4}, {DType::f8e4m3, 5},
    {DType::f8e5m2, 6}, {DType::i32, 7}, {DType::i64, 8}, {DType::u8, 9},   {DType::boolean, 10}};

std::uint8_t code_of(DType t) {
  for (const auto& c : kCodes)
    if (c.type == t) return c.code;
  BH_THROW(InvalidArgument, "weight file: dtype {} has no file code", dtype_name(t));
}

bool dtype_of_code(std::uint8_t code, DType* out) {
  for (const auto& c : kCodes)
    if (c.code == code) {
      *out = c.type;
      return true;
    }
  return false;
}

// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), the one zlib and Python's zlib.crc32
// compute, so weights.py can verify files without extra packages.
struct Crc32Table {
  std::array<std::uint32_t, 256> t{};
  constexpr Crc32Table() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
  }
};
constexpr Crc32Table kCrcTable;

std::uint32_t crc32_update(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = kCrcTable.t[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

std::uint64_t padding_for(std::uint64_t offset) { return (kAlign - offset % kAlign) % kAlign; }

// ---- writing ----

class Writer {
 public:
  explicit Writer(const std::string& path) : path_(path), f_(path, std::ios::binary | std::ios::trunc) {
    if (!f_) BH_THROW(DataError, "cannot open '{}' for writing: {}", path, std::strerror(errno));
  }
  template <class T> void pod(const T& v) { bytes(&v, sizeof(T)); }
  void bytes(const void* p, std::size_t n) {
    f_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    if (!f_) BH_THROW(DataError, "writing '{}' failed at byte {} (disk full?)", path_, offset_);
    offset_ += n;
  }
  void pad() {
    static constexpr char zeros[kAlign] = {};
    bytes(zeros, padding_for(offset_));
  }
  void close() {
    f_.close();
    if (!f_) BH_THROW(DataError, "closing '{}' failed (disk full?)", path_);
  }

 private:
  std::string path_;
  std::ofstream f_;
  std::uint64_t offset_ = 0;
};

// ---- reading ----

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      BH_THROW(DataError, "weight file '{}' does not exist or is not a regular file", path);
    size_ = std::filesystem::file_size(path, ec);
    if (ec) BH_THROW(DataError, "cannot stat weight file '{}': {}", path, ec.message());
    f_.open(path, std::ios::binary);
    if (!f_) BH_THROW(DataError, "cannot open weight file '{}': {}", path, std::strerror(errno));
  }
  std::uint64_t offset() const { return offset_; }
  std::uint64_t remaining() const { return size_ - offset_; }
  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Every read is checked against the file size first: a size field can never make us read
  // (or allocate) past the end of the file.
  void bytes(void* p, std::uint64_t n, const std::string& what) {
    if (n > remaining())
      BH_THROW(DataError, "weight file '{}' is truncated: {} needs {} bytes at offset {}, but the "
               "file has only {} bytes", path_, what, n, offset_, size_);
    f_.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
    if (!f_) BH_THROW(DataError, "reading weight file '{}' failed at offset {} ({})", path_, offset_, what);
    offset_ += n;
  }
  template <class T> T pod(const std::string& what) {
    T v;
    bytes(&v, sizeof(T), what);
    return v;
  }

 private:
  std::string path_;
  std::ifstream f_;
  std::uint64_t size_ = 0;
  std::uint64_t offset_ = 0;
};

std::string join_names(const std::vector<std::string>& names, std::size_t max = 10) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < max; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > max) s += fmt::format(", ... ({} in all)", names.size());
  return s;
}

}  // namespace

void save_tensors(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::set<std::string> seen;
  for (const auto& nt : tensors) {
    BH_CHECK_AS(InvalidArgument, !nt.name.empty() && nt.name.size() <= kMaxNameBytes,
                "save_tensors('{}'): tensor names must be 1..{} bytes, got '{}'", path,
                kMaxNameBytes, nt.name);
    BH_CHECK_AS(InvalidArgument, seen.insert(nt.name).second,
                "save_tensors('{}'): duplicate tensor name '{}'", path, nt.name);
    BH_CHECK_AS(InvalidArgument, nt.tensor.defined(), "save_tensors('{}'): tensor '{}' is undefined",
                path, nt.name);
    BH_CHECK_AS(InvalidArgument, nt.tensor.dim() <= static_cast<std::int64_t>(kMaxDims),
                "save_tensors('{}'): tensor '{}' has {} dimensions; the format allows {}", path,
                nt.name, nt.tensor.dim(), kMaxDims);
  }
  const std::string tmp = path + ".tmp";
  {
    Writer w(tmp);
    w.bytes(kMagic, sizeof kMagic);
    w.pod(kVersion);
    w.pod(std::uint32_t{0});
    w.pod(static_cast<std::uint64_t>(tensors.size()));
    for (const auto& nt : tensors) {
      Tensor t = nt.tensor.to(Device::cpu()).contiguous();
      const auto* data = static_cast<const unsigned char*>(t.numel() ? t.raw_data() : nullptr);
      const std::uint64_t nbytes = t.nbytes();
      w.pod(static_cast<std::uint32_t>(nt.name.size()));
      w.bytes(nt.name.data(), nt.name.size());
      w.pod(code_of(t.dtype()));
      w.pod(static_cast<std::uint8_t>(t.dim()));
      w.pod(std::uint16_t{0});
      for (std::int64_t d : t.shape()) w.pod(d);
      w.pod(nbytes);
      w.pod(data ? crc32_update(0, data, nbytes) : std::uint32_t{0});
      w.pad();
      if (nbytes) w.bytes(data, nbytes);
    }
    w.close();
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) BH_THROW(DataError, "cannot move '{}' to '{}': {}", tmp, path, ec.message());
}

std::vector<NamedTensor> load_tensors(const std::string& path) {
  Reader r(path);
  char magic[8];
  r.bytes(magic, sizeof magic, "the magic number");
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    BH_THROW(DataError, "'{}' is not a benchhost weight file (bad magic; expected \"BHWEIGHT\")", path);
  const auto version = r.pod<std::uint32_t>("the version");
  if (version != kVersion)
    BH_THROW(DataError, "weight file '{}' has format version {}; this build reads version {}",
             path, version, kVersion);
  const auto flags = r.pod<std::uint32_t>("the flags");
  if (flags != 0)
    BH_THROW(DataError, "weight file '{}' has unknown flags 0x{:x} (written by a newer version?)",
             path, flags);
  const auto count = r.pod<std::uint64_t>("the tensor count");
  if (count > r.remaining() / kMinRecordBytes)
    BH_THROW(DataError, "weight file '{}' claims {} tensors, more than its {} bytes can hold "
             "(corrupt or truncated)", path, count, r.size());

  std::vector<NamedTensor> out;
  out.reserve(count);
  std::set<std::string> seen;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string rec = fmt::format("tensor #{}", i);
    const auto name_len = r.pod<std::uint32_t>(rec + " name length");
    if (name_len == 0 || name_len > kMaxNameBytes)
      BH_THROW(DataError, "weight file '{}': {} has a name length of {} at offset {} (allowed "
               "1..{}); the file is corrupt", path, rec, name_len, r.offset() - 4, kMaxNameBytes);
    std::string name(name_len, '\0');
    r.bytes(name.data(), name_len, rec + " name");
    const std::string what = fmt::format("tensor #{} '{}'", i, name);
    if (!seen.insert(name).second)
      BH_THROW(DataError, "weight file '{}': {} appears twice", path, what);
    const auto code = r.pod<std::uint8_t>(what + " dtype");
    DType dtype;
    if (!dtype_of_code(code, &dtype))
      BH_THROW(DataError, "weight file '{}': {} has unknown dtype code {}", path, what, code);
    const auto ndim = r.pod<std::uint8_t>(what + " rank");
    if (ndim > kMaxDims)
      BH_THROW(DataError, "weight file '{}': {} has {} dimensions (at most {})", path, what, ndim, kMaxDims);
    if (r.pod<std::uint16_t>(what + " reserved field") != 0)
      BH_THROW(DataError, "weight file '{}': {} has a non-zero reserved field (corrupt)", path, what);
    Shape shape(ndim);
    std::uint64_t numel = 1;
    bool overflow = false;
    for (auto& d : shape) {
      d = r.pod<std::int64_t>(what + " shape");
      if (d < 0) BH_THROW(DataError, "weight file '{}': {} has a negative dimension {}", path, what, d);
      if (d != 0 && numel > UINT64_MAX / static_cast<std::uint64_t>(d)) overflow = true;
      numel *= static_cast<std::uint64_t>(d);
    }
    const auto nbytes = r.pod<std::uint64_t>(what + " byte length");
    const auto crc = r.pod<std::uint32_t>(what + " checksum");
    const std::uint64_t esize = dtype_size(dtype);
    if (overflow || numel > UINT64_MAX / esize || numel * esize != nbytes)
      BH_THROW(DataError, "weight file '{}': {} of shape {} and dtype {} should have {} bytes, the "
               "file says {} (corrupt)", path, what, shape_str(shape), dtype_name(dtype),
               overflow ? std::string("too many") : std::to_string(numel * esize), nbytes);
    const std::uint64_t pad = padding_for(r.offset());
    if (nbytes + pad > r.remaining())
      BH_THROW(DataError, "weight file '{}' is truncated: {} needs {} bytes at offset {}, only {} "
               "remain", path, what, nbytes + pad, r.offset(), r.remaining());
    char zeros[kAlign];
    r.bytes(zeros, pad, what + " padding");
    Tensor t = Tensor::empty(shape, dtype, Device::cpu());  // nbytes already fits in the file
    if (nbytes) {
      r.bytes(t.raw_data(), nbytes, what + " data");
      const std::uint32_t got = crc32_update(0, static_cast<const unsigned char*>(t.raw_data()), nbytes);
      if (got != crc)
        BH_THROW(DataError, "weight file '{}': {} fails its checksum (stored 0x{:08x}, computed "
                 "0x{:08x}); the file is corrupt", path, what, crc, got);
    }
    out.push_back({std::move(name), std::move(t)});
  }
  if (r.remaining() != 0)
    BH_THROW(DataError, "weight file '{}' has {} unexpected bytes after its {} tensors (corrupt, or "
             "the tensor count is wrong)", path, r.remaining(), count);
  return out;
}

namespace {

// Module state by full name: parameter values, then buffers.
std::vector<std::pair<std::string, Tensor*>> module_state(Module& m) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto* p : m.parameters()) out.emplace_back(p->name, &p->value);
  for (auto& b : m.buffers()) out.push_back(b);
  std::set<std::string> seen;
  for (auto& [n, t] : out)
    BH_CHECK_AS(InvalidArgument, seen.insert(n).second,
                "module '{}' has two parameters/buffers named '{}'; names must be unique to be "
                "saved", m.name(), n);
  return out;
}

}  // namespace

void save_weights(Module& module, const std::string& path) {
  std::vector<NamedTensor> ts;
  for (auto& [n, t] : module_state(module)) ts.push_back({n, *t});
  save_tensors(path, ts);
}

LoadWeightsResult load_weights(Module& module, const std::string& path, bool strict) {
  auto targets = module_state(module);
  std::vector<NamedTensor> file = load_tensors(path);
  std::map<std::string, const Tensor*> by_name;
  for (const auto& nt : file) by_name[nt.name] = &nt.tensor;

  LoadWeightsResult res;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  std::set<std::string> used;
  for (auto& [n, t] : targets) {
    auto it = by_name.find(n);
    if (it == by_name.end()) {
      res.missing.push_back(n);
      continue;
    }
    const Tensor& src = *it->second;
    BH_CHECK_AS(InvalidArgument, src.shape() == t->shape(),
                "load_weights('{}'): '{}' has shape {} in the file but {} in the model", path, n,
                shape_str(src.shape()), shape_str(t->shape()));
    BH_CHECK_AS(InvalidArgument, src.dtype() == t->dtype(),
                "load_weights('{}'): '{}' is {} in the file but {} in the model", path, n,
                dtype_name(src.dtype()), dtype_name(t->dtype()));
    copies.emplace_back(t, &src);
    used.insert(n);
    res.loaded.push_back(n);
  }
  for (const auto& nt : file)
    if (!used.count(nt.name)) res.unexpected.push_back(nt.name);
  if (strict && (!res.missing.empty() || !res.unexpected.empty())) {
    std::string msg = fmt::format("load_weights('{}') into module '{}' (strict):", path, module.name());
    if (!res.missing.empty())
      msg += fmt::format(" {} missing from the file: {};", res.missing.size(), join_names(res.missing));
    if (!res.unexpected.empty())
      msg += fmt::format(" {} in the file but not in the model: {};", res.unexpected.size(),
                         join_names(res.unexpected));
    msg += " pass strict=false to load the matching subset";
    throw InvalidArgument(msg, __FILE__, __LINE__);
  }
  for (auto& [dst, src] : copies) dst->copy_(*src);
  return res;
}

std::size_t load_pretrained_part(Module& module, const std::string& path, const std::string& prefix,
                                 const std::string& what) {
  const std::vector<NamedTensor> file = load_tensors(path);
  std::map<std::string, const Tensor*> by_name;
  for (const NamedTensor& t : file) by_name[t.name] = &t.tensor;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  for (auto& [full, dst] : module_state(module)) {
    if (full.rfind(prefix, 0) != 0) continue;
    const std::string name = full.substr(prefix.size());
    const auto it = by_name.find(name);
    if (it == by_name.end())
      BH_THROW(DataError, "{}: '{}' has no tensor '{}' (needed for '{}')", what, path, name, full);
    if (it->second->shape() != dst->shape())
      BH_THROW(DataError, "{}: '{}': tensor '{}' has shape {}, the model needs {}", what, path, name,
               shape_str(it->second->shape()), shape_str(dst->shape()));
    if (!is_floating(it->second->dtype()))
      BH_THROW(DataError, "{}: '{}': tensor '{}' has dtype {}, expected a floating type", what, path, name,
               dtype_name(it->second->dtype()));
    copies.emplace_back(dst, it->second);
  }
  for (auto& [dst, src] : copies) dst->copy_(*src);  // validated first: all or nothing
  return copies.size();
}

// ---- parameter counting -------------------------------------------------------------------------

ParameterCounts count_parameters(Module& module) {
  ParameterCounts c;
  for (auto* p : module.parameters()) {
    const std::int64_t n = p->value.numel();
    ++c.tensors;
    c.total += n;
    (p->weight_decay ? c.with_decay : c.without_decay) += n;
    c.bytes += static_cast<std::int64_t>(p->value.nbytes());
  }
  for (auto& [n, t] : module.buffers()) c.buffer_elements += t->numel();
  return c;
}

namespace {

std::string with_commas(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

// The first `depth` components of the module path of a parameter name ("a.b.c.weight" at depth
// 2 is "a.b"); a parameter of the root module is grouped under "(root)".
std::string group_of(const std::string& name, int depth) {
  const auto last = name.rfind('.');
  if (last == std::string::npos) return "(root)";
  const std::string path = name.substr(0, last);
  std::size_t pos = 0;
  for (int d = 0; d < depth; ++d) {
    pos = path.find('.', pos);
    if (pos == std::string::npos) return path;
    if (d + 1 < depth) ++pos;
  }
  return path.substr(0, pos);
}

}  // namespace

std::string parameter_summary(Module& module, int depth) {
  const auto params = module.parameters();
  const ParameterCounts c = count_parameters(module);
  const double total = c.total > 0 ? static_cast<double>(c.total) : 1.0;
  std::string s;
  if (depth <= 0) {
    std::size_t w = 9;
    for (auto* p : params) w = std::max(w, p->name.size());
    s += fmt::format("{:<{}}  {:<20} {:>14} {:>6}  {}\n", "parameter", w, "shape", "params", "%", "decay");
    for (auto* p : params)
      s += fmt::format("{:<{}}  {:<20} {:>14} {:>6.2f}  {}\n", p->name, w, shape_str(p->value.shape()),
                       with_commas(p->value.numel()), 100.0 * p->value.numel() / total,
                       p->weight_decay ? "yes" : "no");
  } else {
    struct Group { std::int64_t params = 0, tensors = 0; };
    std::vector<std::pair<std::string, Group>> groups;  // first-seen order
    for (auto* p : params) {
      const std::string g = group_of(p->name, depth);
      auto it = std::find_if(groups.begin(), groups.end(), [&](auto& e) { return e.first == g; });
      if (it == groups.end()) {
        groups.emplace_back(g, Group{});
        it = groups.end() - 1;
      }
      it->second.params += p->value.numel();
      ++it->second.tensors;
    }
    std::size_t w = 6;
    for (auto& [g, _] : groups) w = std::max(w, g.size());
    s += fmt::format("{:<{}}  {:>14} {:>6}  {:>7}\n", "module", w, "params", "%", "tensors");
    for (auto& [g, v] : groups)
      s += fmt::format("{:<{}}  {:>14} {:>6.2f}  {:>7}\n", g, w, with_commas(v.params),
                       100.0 * v.params / total, v.tensors);
  }
  s += fmt::format("total: {} parameters in {} tensors ({} with weight decay, {} without), {} "
                   "bytes; {} buffer elements\n", with_commas(c.total), c.tensors,
                   with_commas(c.with_decay), with_commas(c.without_decay), with_commas(c.bytes),
                   with_commas(c.buffer_elements));
  return s;
}

}  // namespace benchhost::nn

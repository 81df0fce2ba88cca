#include "indexed_dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "benchhost/error.hpp"

namespace benchhost::text {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr std::size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

std::size_t item_size_of(std::uint8_t code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    case 5: case 6: return 8;
    default: return 0;
  }
}

template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // little-endian host assumed (x86-64, aarch64)
  return v;
}

void write_all(const std::string& path, const void* data, std::size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) BH_THROW(DataError, "cannot create '{}'", path);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!out) BH_THROW(DataError, "error writing '{}' (disk full?)", path);
}

}  // namespace

struct IndexedDataset::Map {
  void* base = nullptr;
  std::size_t bytes = 0;
  Map(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) BH_THROW(DataError, "cannot open '{}': {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      BH_THROW(DataError, "cannot stat '{}'", path);
    }
    bytes = static_cast<std::size_t>(st.st_size);
    if (bytes > 0) {
      base = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
      if (base == MAP_FAILED) {
        ::close(fd);
        BH_THROW(DataError, "cannot memory-map '{}': {}", path, std::strerror(errno));
      }
    }
    ::close(fd);
  }
  ~Map() {
    if (base && base != MAP_FAILED) ::munmap(base, bytes);
  }
  const std::uint8_t* data() const { return static_cast<const std::uint8_t*>(base); }
};

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, std::int64_t vocab_size)
    : prefix_(std::move(prefix)), dtype_code_(vocab_size <= 65535 ? 8 : 4) {
  BH_CHECK_AS(InvalidArgument, vocab_size > 0, "indexed dataset: vocab_size {} must be positive", vocab_size);
}

void IndexedDatasetWriter::add_sequence(std::span<const std::int32_t> tokens) {
  for (std::int32_t t : tokens) {
    if (dtype_code_ == 8) {
      BH_CHECK_AS(InvalidArgument, t >= 0 && t <= 65535, "token {} does not fit uint16", t);
      const auto v = static_cast<std::uint16_t>(t);
      bin_.insert(bin_.end(), reinterpret_cast<const std::uint8_t*>(&v), reinterpret_cast<const std::uint8_t*>(&v) + 2);
    } else {
      bin_.insert(bin_.end(), reinterpret_cast<const std::uint8_t*>(&t), reinterpret_cast<const std::uint8_t*>(&t) + 4);
    }
  }
  lengths_.push_back(static_cast<std::int32_t>(tokens.size()));
}

void IndexedDatasetWriter::end_document() {
  if (doc_index_.back() != static_cast<std::int64_t>(lengths_.size()))
    doc_index_.push_back(static_cast<std::int64_t>(lengths_.size()));
}

void IndexedDatasetWriter::finish() {
  end_document();
  write_all(prefix_ + ".bin", bin_.data(), bin_.size());
  std::vector<std::uint8_t> idx(kMagic, kMagic + 9);
  auto put = [&](const auto& v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    idx.insert(idx.end(), p, p + sizeof(v));
  };
  put(std::uint64_t{1});
  put(dtype_code_);
  put(static_cast<std::uint64_t>(lengths_.size()));
  put(static_cast<std::uint64_t>(doc_index_.size()));
  for (auto l : lengths_) put(l);
  std::int64_t ptr = 0;
  const std::int64_t item = static_cast<std::int64_t>(item_size_of(dtype_code_));
  for (auto l : lengths_) {
    put(ptr);
    ptr += l * item;
  }
  for (auto d : doc_index_) put(d);
  write_all(prefix_ + ".idx", idx.data(), idx.size());
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  idx_ = std::make_unique<Map>(idx_path);
  const std::uint8_t* p = idx_->data();
  const std::size_t n = idx_->bytes;
  BH_CHECK_AS(DataError, n >= kHeaderBytes && std::memcmp(p, kMagic, 9) == 0,
              "'{}' is not a Megatron MMIDIDX index (bad magic or shorter than its {}-byte header)", idx_path,
              kHeaderBytes);
  const auto version = load<std::uint64_t>(p + 9);
  BH_CHECK_AS(DataError, version == 1, "'{}': index version {} is not supported (only 1)", idx_path, version);
  dtype_code_ = p[17];
  item_size_ = item_size_of(dtype_code_);
  BH_CHECK_AS(DataError, item_size_ != 0 && dtype_code_ != 6 && dtype_code_ != 7,
              "'{}': dtype code {} is not an integer token type", idx_path, dtype_code_);
  const auto seqs = load<std::uint64_t>(p + 18), docs = load<std::uint64_t>(p + 26);
  // Bound the counts by the file size before any allocation.
  BH_CHECK_AS(DataError, seqs <= n && docs <= n && docs >= 1 &&
                             kHeaderBytes + seqs * 12 + docs * 8 <= n,
              "'{}' is truncated or corrupt: header says {} sequences and {} document indices, which need "
              "{} bytes, but the file has {}", idx_path, seqs, docs, kHeaderBytes + seqs * 12 + docs * 8, n);
  lengths_.resize(seqs);
  pointers_.resize(seqs);
  doc_index_.resize(docs);
  if (seqs > 0) {  // an empty index is valid; memcpy must not see the empty vectors' null data()
    std::memcpy(lengths_.data(), p + kHeaderBytes, seqs * 4);
    std::memcpy(pointers_.data(), p + kHeaderBytes + seqs * 4, seqs * 8);
  }
  std::memcpy(doc_index_.data(), p + kHeaderBytes + seqs * 12, docs * 8);

  bin_ = std::make_unique<Map>(bin_path);
  // Megatron writes the sequences back to back: each starts where the previous one ends and the
  // data file ends with the last. Checked in that form (no sum that can overflow), a pointer near
  // 2^63 is refused, and so is an index whose dtype code was changed (its byte counts no longer
  // add up to the data file).
  const auto bin_bytes = static_cast<std::int64_t>(bin_->bytes);
  const auto item = static_cast<std::int64_t>(item_size_);
  std::int64_t expected_ptr = 0;
  for (std::size_t i = 0; i < seqs; ++i) {
    const std::int64_t len = lengths_[i], ptr = pointers_[i];
    BH_CHECK_AS(DataError, len >= 0 && ptr >= 0 && ptr <= bin_bytes && len <= (bin_bytes - ptr) / item,
                "'{}' is truncated or '{}' is corrupt: sequence {} ({} tokens of {} bytes at byte {}) ends past the "
                "{}-byte data file", bin_path, idx_path, i, len, item, ptr, bin_bytes);
    BH_CHECK_AS(DataError, ptr == expected_ptr,
                "'{}' is corrupt: sequence {} starts at byte {}, not where sequence {} ends ({}); the index does "
                "not describe '{}' (is its dtype code {} right?)", idx_path, i, ptr, i - 1, expected_ptr, bin_path,
                dtype_code_);
    expected_ptr = ptr + len * item;
    total_tokens_ += len;
  }
  BH_CHECK_AS(DataError, expected_ptr == bin_bytes,
              "'{}' has {} bytes but '{}' describes {} bytes of {}-byte tokens: the index and data file do not "
              "belong together (or the index's dtype code {} is wrong)", bin_path, bin_bytes, idx_path, expected_ptr,
              item, dtype_code_);
  BH_CHECK_AS(DataError, doc_index_.front() == 0 && doc_index_.back() == static_cast<std::int64_t>(seqs),
              "'{}' is corrupt: document indices must run from 0 to the sequence count {}", idx_path, seqs);
  for (std::size_t d = 1; d < docs; ++d)
    BH_CHECK_AS(DataError, doc_index_[d] >= doc_index_[d - 1], "'{}' is corrupt: document index {} decreases", idx_path, d);
}

IndexedDataset::~IndexedDataset() = default;

void IndexedDataset::read(std::int64_t i, std::int64_t offset, std::int64_t count, std::vector<std::int32_t>& out) const {
  BH_CHECK_AS(InvalidArgument, i >= 0 && i < num_sequences() && offset >= 0 && count >= 0 &&
                                   offset + count <= lengths_[static_cast<std::size_t>(i)],
              "'{}': read of tokens [{}, {}) of sequence {} is out of range", prefix_, offset, offset + count, i);
  const std::uint8_t* p = bin_->data() + pointers_[static_cast<std::size_t>(i)] + offset * static_cast<std::int64_t>(item_size_);
  for (std::int64_t k = 0; k < count; ++k, p += item_size_) {
    switch (dtype_code_) {
      case 1: out.push_back(*p); break;
      case 2: out.push_back(static_cast<std::int8_t>(*p)); break;
      case 3: out.push_back(load<std::int16_t>(p)); break;
      case 8: out.push_back(load<std::uint16_t>(p)); break;
      case 4: out.push_back(load<std::int32_t>(p)); break;
      default: out.push_back(static_cast<std::int32_t>(load<std::int64_t>(p))); break;
    }
  }
}

std::vector<std::int32_t> IndexedDataset::all_tokens() const {
  std::vector<std::int32_t> out;
  out.reserve(static_cast<std::size_t>(total_tokens_));
  for (std::int64_t i = 0; i < num_sequences(); ++i) read(i, 0, sequence_length(i), out);
  return out;
}

}  // namespace benchhost::text

#pragma once
/// @file datasets/text/indexed_dataset.hpp  Megatron-LM's indexed token dataset (.bin + .idx).
///
/// Note [Megatron MMIDIDX format]
/// The tokens of every sequence (document) lie back to back in `<prefix>.bin` in one integer
/// dtype. `<prefix>.idx`, all little-endian:
///   9 bytes  "MMIDIDX\0\0"
///   u64      version = 1
///   u8       dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)
///   u64      sequence_count S
///   u64      document_count D (= documents + 1)
///   i32[S]   sequence lengths (tokens)
///   i64[S]   sequence pointers (byte offsets into .bin)
///   i64[D]   document indices (sequence index where each document starts; first 0, last S)
/// This is what Megatron's preprocess_data.py and MLPerf's C4 preparation leave. The reader
/// memory-maps both files and checks, before handing out a single token, that the index is
/// complete, that pointers are in order and inside .bin, and that document indices are
/// monotonic, so a truncated or corrupt pair is a DataError naming the file, never a crash.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace benchhost::text {

/// Writes <prefix>.bin and <prefix>.idx. Token dtype: uint16 when vocab_size <= 65535, else int32.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, std::int64_t vocab_size);
  /// Append one sequence; end_document() closes the current document.
  void add_sequence(std::span<const std::int32_t> tokens);
  void end_document();
  /// Write both files (throws DataError naming the file on I/O failure).
  void finish();

 private:
  std::string prefix_;
  std::uint8_t dtype_code_;
  std::vector<std::uint8_t> bin_;
  std::vector<std::int32_t> lengths_;
  std::vector<std::int64_t> doc_index_{0};
};

/// Read-only memory-mapped view of a .bin/.idx pair. Thread-safe (immutable after open).
class IndexedDataset {
 public:
  /// Open `<prefix>.idx` and `<prefix>.bin`; throws DataError naming the bad file.
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  std::int64_t num_sequences() const { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t num_documents() const { return static_cast<std::int64_t>(doc_index_.size()) - 1; }
  std::int64_t num_tokens() const { return total_tokens_; }
  std::int64_t sequence_length(std::int64_t i) const { return lengths_[static_cast<std::size_t>(i)]; }
  std::uint8_t dtype_code() const { return dtype_code_; }
  const std::vector<std::int64_t>& document_indices() const { return doc_index_; }
  /// Tokens [offset, offset + count) of sequence i, converted to int32, appended to `out`.
  void read(std::int64_t i, std::int64_t offset, std::int64_t count, std::vector<std::int32_t>& out) const;
  /// All tokens of all sequences in order (convenient for small datasets).
  std::vector<std::int32_t> all_tokens() const;

 private:
  struct Map;
  std::unique_ptr<Map> idx_, bin_;
  std::string prefix_;
  std::uint8_t dtype_code_ = 0;
  std::size_t item_size_ = 0;
  std::vector<std::int32_t> lengths_;
  std::vector<std::int64_t> pointers_;
  std::vector<std::int64_t> doc_index_;
  std::int64_t total_tokens_ = 0;
};

}  // namespace benchhost::text

#pragma once
/// @file data/file.hpp  Whole-file reads and read-only memory maps, with DataError on failure.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace benchhost::data {

/// Read a whole file. Throws DataError naming the file (and the OS error) when it cannot be
/// opened or read, or when it is larger than `max_bytes`.
std::vector<std::uint8_t> read_file(const std::string& path,
                                    std::size_t max_bytes = std::size_t{1} << 34);

/// A data directory option as a path: "cache:NAME" -> ${XDG_CACHE_HOME:-$HOME/.cache}/benchhost/NAME
/// (where mini configs keep the data their generators build on first use); a relative path is
/// taken from the working directory; "" stays "".
std::string resolve_data_dir(const std::string& dir);

/// Size of a file in bytes; throws DataError naming the file when it cannot be stat'ed.
std::size_t file_size(const std::string& path);

/// A private (copy-on-write) memory map of a whole file (mmap); the file is never written. Hold it by shared_ptr: tensors over the
/// mapping keep it alive through Storage's keep_alive (see npy.hpp's map_npy). Thread-safe to
/// read. An empty file maps to data() == nullptr, size() == 0.
class MappedFile {
 public:
  /// Throws DataError naming the file and the OS error.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

}  // namespace benchhost::data

#pragma once
/// @file data/npy.hpp  NumPy .npy and .npz files: read, memory-map, write.
///
/// Supported: format versions 1.0, 2.0 and 3.0; dtypes '<f4' '<f8' '<f2' '<i4' '<i8' '|u1' '|b1'
/// ('<' or '=' byte order; '|' for one-byte types). Other dtypes are refused with a DataError naming
/// the dtype string. C order only.
/// Fortran-ordered arrays are refused with a DataError that says so. Big-endian data ('>f4') is
/// refused. Every size in a header is checked against the bytes actually present, so a corrupt
/// shape can not trigger a huge allocation.
///
/// .npz: a zip archive of .npy members, stored or deflated (zlib), found through the central
/// directory (zip64 sizes and offsets are understood). Each member's CRC-32 is checked.
/// Member names are returned without their ".npy" suffix, like numpy.load().

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::data {

/// A parsed .npy header.
struct NpyHeader {
  int major_version = 1;
  DType dtype = DType::f32;
  Shape shape;
  bool fortran_order = false;
  std::size_t data_offset = 0;  ///< bytes from the start of the file to the array data
  std::size_t data_bytes = 0;   ///< numel * element size
};

/// Parse the header of a .npy image in memory (`name` is used in errors). Checks that
/// data_offset + data_bytes <= bytes.size(). Throws DataError.
NpyHeader parse_npy_header(std::span<const std::uint8_t> bytes, const std::string& name);

/// Read a .npy file into a new CPU tensor. Throws DataError naming the file.
Tensor read_npy(const std::string& path);
/// Parse a .npy image held in memory into a new CPU tensor (copies the data).
Tensor parse_npy(std::span<const std::uint8_t> bytes, const std::string& name);
/// Memory-map a .npy file: the tensor's storage is the mapping (private copy-on-write pages: a
/// write through the tensor never reaches the file). The mapping lives as long as any tensor over
/// it. The data must be aligned to its
/// element size (numpy guarantees 64-byte aligned headers). Throws DataError.
Tensor map_npy(const std::string& path);
/// Serialise a CPU tensor (any of the supported dtypes) as a version 1.0 .npy image.
std::vector<std::uint8_t> encode_npy(const Tensor& t);
/// Write a .npy file. Throws DataError naming the file when it cannot be written.
void write_npy(const std::string& path, const Tensor& t);

/// A member of a .npz (zip) image, located in place.
struct NpzMember {
  std::string name;                ///< as stored (with its ".npy" suffix)
  std::uint16_t method = 0;        ///< 0 stored, 8 deflated
  std::uint32_t crc = 0;           ///< CRC-32 of the uncompressed bytes
  std::uint64_t data_offset = 0;   ///< of the member's (possibly compressed) bytes in the archive
  std::uint64_t stored_bytes = 0;  ///< bytes in the archive from data_offset
  std::uint64_t size = 0;          ///< uncompressed bytes (== stored_bytes for a stored member)
};

/// The members of a .npz image in memory, in central-directory order (Note [Reading zip
/// archives], npy.cpp): zip64 understood, every offset and size checked against the image without
/// overflow, so [data_offset, data_offset + stored_bytes) always lies inside `archive`. Encrypted
/// and multi-disk archives are refused. For a stored member the bytes there are its .npy image,
/// which a reader can memory-map. Throws DataError naming `path`.
std::vector<NpzMember> npz_members(std::span<const std::uint8_t> archive, const std::string& path);

/// Read every member of a .npz archive, in central-directory order.
/// Throws DataError naming the archive and member.
std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path);
/// The same for a .npz image held in memory (`name` is used in errors).
std::vector<std::pair<std::string, Tensor>> parse_npz(std::span<const std::uint8_t> archive, const std::string& name);
/// Write a .npz archive; `compress` = deflate members (numpy.savez_compressed), else stored.
void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays,
               bool compress = false);

/// A dataset over a set of .npy files with equal leading dimensions: sample i is
/// {name: array[i]} for each (name, file). Files are memory-mapped; samples are copies.
class NpyDataset final : public Dataset {
 public:
  NpyDataset(std::vector<std::pair<std::string, std::string>> name_and_path);
  std::int64_t size() const override { return size_; }
  Sample get(const SampleContext& ctx) const override;
  using Dataset::get;
  std::string source(std::int64_t index) const override;

 private:
  std::vector<std::pair<std::string, Tensor>> arrays_;
  std::vector<std::string> paths_;
  std::int64_t size_ = 0;
};

}  // namespace benchhost::data

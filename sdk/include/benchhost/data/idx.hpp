#pragma once
/// @file data/idx.hpp  IDX files (the MNIST / Fashion-MNIST format), gzipped or not.
///
/// Format: magic 0x00 0x00 <type> <ndim>, then ndim big-endian uint32 dimensions, then the data
/// big-endian. Types: 0x08 u8, 0x09 i8 (read as i32), 0x0B i16 (read as i32), 0x0C i32, 0x0D f32,
/// 0x0E f64. Files are read through zlib's gz* API, which reads plain files unchanged. The
/// declared size is checked against the data actually present (the buffer grows only as data
/// arrives), so a corrupt dimension cannot cause a huge allocation; trailing bytes are an error.

#include <cstdint>
#include <string>

#include "benchhost/data/dataset.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::data {

/// Read an IDX file (optionally .gz) into a CPU tensor. Throws DataError naming the file.
Tensor read_idx(const std::string& path);
/// Write a u8, i32, f32 or f64 CPU tensor as an IDX file, gzipped when `gzip`.
void write_idx(const std::string& path, const Tensor& t, bool gzip = false);

/// Image classification from an IDX image file [N, H, W] (u8) and a label file [N] (u8).
/// Sample: "image" f32 [1, H, W] = (pixel / 255 - mean) / std, "label" i64 []. With `raw_u8`
/// the image stays u8 [1, H, W] (no normalisation).
class IdxClassificationDataset final : public Dataset {
 public:
  IdxClassificationDataset(const std::string& images_path, const std::string& labels_path,
                           float mean = 0.f, float std = 1.f, bool raw_u8 = false);
  std::int64_t size() const override { return size_; }
  Sample get(const SampleContext& ctx) const override;
  using Dataset::get;
  std::string source(std::int64_t index) const override;
  const Tensor& images() const { return images_; }  ///< u8 [N, H, W]
  const Tensor& labels() const { return labels_; }  ///< i64 [N]

 private:
  Tensor images_;
  Tensor labels_;
  std::string images_path_;
  std::int64_t size_ = 0;
  float mean_, std_;
  bool raw_u8_;
};

}  // namespace benchhost::data

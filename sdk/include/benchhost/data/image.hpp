#pragma once
/// @file data/image.hpp  JPEG/PNG decoding and the standard image augmentations.
///
/// Images are CPU tensors in HWC layout, u8, 1 or 3 channels (RGB). Decoders throw DataError
/// naming the image (the `name` argument: usually the file path) for truncated or corrupt data;
/// a JPEG whose data ends early is an error, not a grey-filled image.
///
/// Note [Fused crop-resize-normalise]
/// Training-time ImageNet preprocessing (torchvision's RandomResizedCrop + RandomHorizontalFlip +
/// ToTensor + Normalize) is done here as one pass: bilinear samples are taken straight from the
/// crop window of the decoded image, flipped by index arithmetic, normalised and written as f32
/// (CHW or HWC) into the output, without intermediate images. The JPEG decoder first shrinks the
/// image by DCT scaling (1/2, 1/4, 1/8) as far as the crop still covers the output size, and
/// decodes only the rows and columns of the crop window (libjpeg-turbo's skip/crop scanline API).
/// Bilinear here is plain 2x2 interpolation (align_corners = false, no antialiasing filter); PIL's
/// resize antialiases when shrinking, so values differ slightly from torchvision's PIL path.

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::data {

/// Image size and channels from a JPEG or PNG header, without decoding.
struct ImageInfo {
  int height = 0;
  int width = 0;
  int channels = 0;  ///< channels in the file (1 grey, 3 colour; PNG alpha counted)
};

/// What kind of image the bytes hold (by magic number): "jpeg", "png" or "" (unknown).
std::string sniff_image_format(std::span<const std::uint8_t> bytes);
ImageInfo read_image_info(std::span<const std::uint8_t> bytes, const std::string& name);

/// A crop window in pixel coordinates of the full image: rows [top, top+height), cols
/// [left, left+width).
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
  friend bool operator==(const CropBox&, const CropBox&) = default;
};

/// JPEG decode options. `scale_denom` in {1, 2, 4, 8} shrinks by DCT scaling; `crop` (if width > 0)
/// decodes only that window (coordinates in the *unscaled* image; the result covers at least the
/// scaled window - see decode_jpeg_region). `channels` 3 = RGB, 1 = greyscale.
struct JpegDecodeOptions {
  int scale_denom = 1;
  int channels = 3;
};

/// Decode a JPEG to u8 HWC. Throws DataError naming `name`.
Tensor decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name,
                   JpegDecodeOptions options = {});

/// Result of a region decode: the image holds the scaled crop window plus a little border (MCU
/// alignment); `box` is the crop window in the coordinates of `image`.
struct DecodedRegion {
  Tensor image;  ///< u8 HWC
  CropBox box;   ///< the requested crop, scaled, relative to image
};
/// Decode only (about) the window `crop` of a JPEG, shrunk by DCT scaling by the largest factor
/// in {1, 2, 4, 8} that keeps the scaled window at least min_height x min_width (both > 0; 0 =
/// no scaling). Throws DataError naming `name`.
DecodedRegion decode_jpeg_region(std::span<const std::uint8_t> bytes, const std::string& name,
                                 CropBox crop, int min_height, int min_width, int channels = 3);

/// Decode a PNG to u8 HWC with `channels` 3 (RGB; grey expanded, alpha dropped) or 1 (grey;
/// colour converted). 16-bit PNGs are reduced to 8 bits. Throws DataError naming `name`.
Tensor decode_png(std::span<const std::uint8_t> bytes, const std::string& name, int channels = 3);
/// Decode a JPEG or PNG (by magic) to u8 HWC.
Tensor decode_image(std::span<const std::uint8_t> bytes, const std::string& name, int channels = 3);
/// Read and decode an image file.
Tensor read_image(const std::string& path, int channels = 3);

/// Encode u8 HWC (1 or 3 channels) as baseline JPEG (quality 1..100) / PNG. For tests and tools.
std::vector<std::uint8_t> encode_jpeg(const Tensor& hwc, int quality = 90);
std::vector<std::uint8_t> encode_png(const Tensor& hwc);

/// torchvision's RandomResizedCrop window: up to 10 tries of area fraction uniform in `scale`
/// and log-uniform aspect ratio in `ratio`; then a centre crop with the ratio clamped to `ratio`.
CropBox random_resized_crop_box(int height, int width, Rng& rng,
                                std::array<float, 2> scale = {0.08f, 1.0f},
                                std::array<float, 2> ratio = {3.0f / 4.0f, 4.0f / 3.0f});
/// Centre crop of out_h x out_w (clamped to the image).
CropBox center_crop_box(int height, int width, int out_h, int out_w);
/// The torchvision evaluation transform's window: resize the short side to `resize_short`, then a
/// centre crop of out_h x out_w - as a window in the original image.
CropBox resize_center_crop_box(int height, int width, int resize_short, int out_h, int out_w);

/// u8 HWC views and copies.
Tensor crop(const Tensor& hwc, CropBox box);           ///< copy of the window
Tensor hflip(const Tensor& hwc);                        ///< mirrored copy
Tensor resize_bilinear(const Tensor& hwc, int out_h, int out_w);  ///< u8 HWC -> u8 HWC

enum class Layout { chw, hwc };

/// Mean/std per channel for (x / 255 - mean) / std. ImageNet's are the defaults.
struct Normalization {
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
};

/// Normalise u8 HWC to f32 in `layout`.
Tensor normalize(const Tensor& hwc, const Normalization& norm = {}, Layout layout = Layout::chw);

/// Note [Fused crop-resize-normalise]: sample the window `box` of u8 HWC `src` bilinearly to
/// out_h x out_w, mirror if `flip`, normalise, and write f32 to `dst` (contiguous, CHW
/// [C, out_h, out_w] or HWC [out_h, out_w, C]).
void resized_crop_normalize(const Tensor& src, CropBox box, int out_h, int out_w, bool flip,
                            const Normalization& norm, Layout layout, float* dst);

/// Options of the standard ImageNet training / evaluation transforms.
struct ImageTransform {
  int out_height = 224;
  int out_width = 224;
  bool train = true;          ///< train: random-resized-crop + flip; eval: resize + centre crop
  int resize_short = 256;     ///< eval only
  std::array<float, 2> scale = {0.08f, 1.0f};
  std::array<float, 2> ratio = {3.0f / 4.0f, 4.0f / 3.0f};
  float flip_probability = 0.5f;
  Normalization norm;
  Layout layout = Layout::chw;
  bool dct_scaling = true;    ///< let the JPEG decoder shrink (and crop) before resampling
};

/// Decode a JPEG/PNG and apply the transform, drawing randomness from `rng` (crop window first,
/// then the flip). Returns f32 [3, H, W] (chw) or [H, W, 3] (hwc).
Tensor load_transformed_image(std::span<const std::uint8_t> bytes, const std::string& name,
                              const ImageTransform& transform, Rng& rng);

/// A labelled set of image files (JPEG or PNG): sample i is "image" (the transformed image, f32)
/// and "label" (i64 []). Files are read in get(), from the worker threads.
class ImageFileDataset final : public Dataset {
 public:
  ImageFileDataset(std::vector<std::string> paths, std::vector<std::int64_t> labels,
                   ImageTransform transform);
  /// ImageNet layout: root/<class>/<file>.{jpg,jpeg,JPEG,png}; classes sorted by name get labels
  /// 0, 1, ...; files sorted within a class. Throws DataError when root has no images.
  static std::shared_ptr<ImageFileDataset> from_folder(const std::string& root,
                                                       ImageTransform transform);
  std::int64_t size() const override { return static_cast<std::int64_t>(paths_.size()); }
  Sample get(const SampleContext& ctx) const override;
  using Dataset::get;
  std::string source(std::int64_t index) const override;
  const std::vector<std::string>& class_names() const { return class_names_; }

 private:
  std::vector<std::string> paths_;
  std::vector<std::int64_t> labels_;
  ImageTransform transform_;
  std::vector<std::string> class_names_;
};

}  // namespace benchhost::data

// JPEG (libjpeg-turbo) and PNG (libpng) decoding and encoding.
//
// Note [libjpeg errors without exceptions]
// libjpeg reports fatal errors through error_exit, which must not return. Throwing a C++
// exception through libjpeg's C frames is not safe, so error_exit longjmps back to a setjmp in a
// small step function (jpeg_step_*) whose frame holds only trivially destructible locals; the
// step returns false and the C++ caller throws DataError with libjpeg's message. Each step sets
// its own jump point before calling into libjpeg. The "premature end of data" warning is treated
// as fatal too: a truncated file must not decode into a grey-padded image.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "benchhost/data/file.hpp"
#include "benchhost/data/image.hpp"

namespace benchhost::data {

namespace {

// Largest decoded image accepted (pixels), whatever a header claims: 256 Mpixel.
constexpr std::uint64_t kMaxPixels = std::uint64_t{1} << 28;

struct JpegError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void bh_jpeg_error_exit(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings that mean pixels are missing are errors: the file ends early (JWRN_JPEG_EOF), or a
// marker comes before the entropy-coded data covers the image (JWRN_HIT_MARKER: a header that
// claims 16000x16000 over 64x64 worth of data). libjpeg would fill the rest in and carry on.
// Other warnings (extraneous bytes between markers, as some real ImageNet files have) are counted.
extern "C" void bh_jpeg_emit_message(j_common_ptr c, int level) {
  if (level < 0 && (c->err->msg_code == JWRN_JPEG_EOF || c->err->msg_code == JWRN_HIT_MARKER)) {
    auto* e = reinterpret_cast<JpegError*>(c->err);
    (*c->err->format_message)(c, e->message);
    std::longjmp(e->jump, 1);
  }
  if (level < 0) c->err->num_warnings++;
}

struct JpegDecoder {
  jpeg_decompress_struct cinfo;
  JpegError err;
  bool created = false;
  bool cmyk = false;
  JpegDecoder() {
    std::memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = bh_jpeg_error_exit;
    err.pub.emit_message = bh_jpeg_emit_message;
    err.message[0] = '\0';
  }
  ~JpegDecoder() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

// Steps (Note [libjpeg errors without exceptions]): only trivially destructible locals.
bool jpeg_step_header(JpegDecoder* d, const std::uint8_t* data, std::size_t size) {
  if (setjmp(d->err.jump)) return false;
  jpeg_create_decompress(&d->cinfo);
  d->created = true;
  jpeg_mem_src(&d->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d->cinfo, TRUE);
  return true;
}

bool jpeg_step_start(JpegDecoder* d, int scale_denom, int channels) {
  if (setjmp(d->err.jump)) return false;
  jpeg_decompress_struct& c = d->cinfo;
  c.scale_num = 1;
  c.scale_denom = static_cast<unsigned>(scale_denom);
  d->cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  c.out_color_space = d->cmyk ? JCS_CMYK : channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&c);
  return true;
}

bool jpeg_step_crop(JpegDecoder* d, JDIMENSION* xoff, JDIMENSION* width, JDIMENSION skip_rows) {
  if (setjmp(d->err.jump)) return false;
  if (*xoff != 0 || *width != d->cinfo.output_width) jpeg_crop_scanline(&d->cinfo, xoff, width);
  if (skip_rows) jpeg_skip_scanlines(&d->cinfo, skip_rows);
  return true;
}

// Read `rows` scanlines into dst (row pitch `pitch` bytes); with CMYK, rows go through `tmp`
// (one row of 4 * output_width bytes) and are converted to RGB/grey. `finish`: read to the end
// (checks the whole file), else abort after the rows.
bool jpeg_step_read(JpegDecoder* d, std::uint8_t* dst, std::size_t pitch, JDIMENSION rows, int channels,
                    std::uint8_t* tmp, bool finish) {
  if (setjmp(d->err.jump)) return false;
  jpeg_decompress_struct& c = d->cinfo;
  for (JDIMENSION r = 0; r < rows; ++r) {
    std::uint8_t* out = dst + r * pitch;
    JSAMPROW row = d->cmyk ? tmp : out;
    if (jpeg_read_scanlines(&c, &row, 1) != 1) {
      std::snprintf(d->err.message, sizeof d->err.message, "decoder produced no data at row %u", r);
      return false;
    }
    if (d->cmyk) {
      // Adobe writes inverted CMYK: a byte is 255 - ink, so R = C' * K' / 255.
      const bool inverted = c.saw_Adobe_marker;
      for (JDIMENSION x = 0; x < c.output_width; ++x) {
        int cc = tmp[4 * x], m = tmp[4 * x + 1], y = tmp[4 * x + 2], k = tmp[4 * x + 3];
        if (!inverted) { cc = 255 - cc; m = 255 - m; y = 255 - y; k = 255 - k; }
        const int r8 = cc * k / 255, g8 = m * k / 255, b8 = y * k / 255;
        if (channels == 1) {
          out[x] = static_cast<std::uint8_t>((299 * r8 + 587 * g8 + 114 * b8 + 500) / 1000);
        } else {
          out[3 * x] = static_cast<std::uint8_t>(r8);
          out[3 * x + 1] = static_cast<std::uint8_t>(g8);
          out[3 * x + 2] = static_cast<std::uint8_t>(b8);
        }
      }
    }
  }
  if (finish) {
    if (c.output_scanline < c.output_height) {
      std::snprintf(d->err.message, sizeof d->err.message, "internal: rows left");
      return false;
    }
    jpeg_finish_decompress(&c);
  } else {
    jpeg_abort_decompress(&c);
  }
  return true;
}

[[noreturn]] void jpeg_fail(const JpegDecoder& d, const std::string& name) {
  BH_THROW(DataError, "{}: corrupt or truncated JPEG: {}", name, d.err.message[0] ? d.err.message : "unknown error");
}

void check_channels(int channels, const char* what) {
  if (channels != 1 && channels != 3) BH_THROW(InvalidArgument, "{}: channels must be 1 or 3, got {}", what, channels);
}

void check_pixels(std::uint64_t h, std::uint64_t w, const std::string& name) {
  if (h == 0 || w == 0 || h * w > kMaxPixels)
    BH_THROW(DataError, "{}: image size {}x{} is empty or larger than the {}-pixel limit (corrupt header?)",
             name, w, h, kMaxPixels);
}

// Note [JPEG pixels against the bytes stored]
// A Huffman-coded JPEG spends at least one bit on every 8x8 block of every component: the DC
// coefficient's size category is a Huffman code (at least one bit long), coded for each block in
// the sequential scan or in the progressive DC scan, and end-of-band runs cover only AC
// coefficients. So a file of N bytes holds at most 8N blocks of any one component, and a header
// that claims more is corrupt. Checked after the header and before anything is allocated for the
// pixels (a progressive file's coefficient buffers at the start of decompression, then the
// image): a 600-byte file claiming 16000x16000 was refused only after its 768 MB image had been
// allocated, when libjpeg met the end of the data (JWRN_HIT_MARKER). Arithmetic coding can spend
// less than a bit on a block, so arithmetic-coded files are not bounded this way.
void check_blocks_against_bytes(const jpeg_decompress_struct& c, std::size_t bytes, const std::string& name) {
  if (c.arith_code) return;
  for (int i = 0; i < c.num_components; ++i) {
    const auto blocks = static_cast<std::uint64_t>(c.comp_info[i].width_in_blocks) * c.comp_info[i].height_in_blocks;
    if (blocks > 8 * static_cast<std::uint64_t>(bytes))
      BH_THROW(DataError,
               "{}: JPEG header claims {}x{} pixels ({} blocks in component {}), more than its {} bytes can hold "
               "(corrupt header or truncated file)",
               name, c.image_width, c.image_height, blocks, i, bytes);
  }
}

// Decode the window [y0, y0+rows) x [x0, x0+cols) of the image at 1/scale_denom (x0/cols may be
// widened to iMCU boundaries; the actual x offset is returned through x0).
Tensor jpeg_decode(std::span<const std::uint8_t> bytes, const std::string& name, int scale_denom, int channels,
                   JDIMENSION* x0, JDIMENSION cols, JDIMENSION y0, JDIMENSION rows, bool whole) {
  JpegDecoder d;
  if (!jpeg_step_header(&d, bytes.data(), bytes.size())) jpeg_fail(d, name);
  check_pixels(d.cinfo.image_height, d.cinfo.image_width, name);
  check_blocks_against_bytes(d.cinfo, bytes.size(), name);
  if (!jpeg_step_start(&d, scale_denom, channels)) jpeg_fail(d, name);
  const JDIMENSION ow = d.cinfo.output_width, oh = d.cinfo.output_height;
  if (whole) {
    *x0 = 0;
    cols = ow;
    y0 = 0;
    rows = oh;
  } else {
    *x0 = std::min(*x0, ow - 1);
    cols = std::max<JDIMENSION>(1, std::min(cols, ow - *x0));
    y0 = std::min(y0, oh - 1);
    rows = std::max<JDIMENSION>(1, std::min(rows, oh - y0));
  }
  JDIMENSION width = cols;
  if (!jpeg_step_crop(&d, x0, &width, y0)) jpeg_fail(d, name);
  Tensor out = Tensor::empty({static_cast<std::int64_t>(rows), static_cast<std::int64_t>(width), channels}, DType::u8);
  std::vector<std::uint8_t> tmp(d.cmyk ? 4 * static_cast<std::size_t>(d.cinfo.output_width) : 0);
  if (!jpeg_step_read(&d, out.data<std::uint8_t>(), static_cast<std::size_t>(width) * channels, rows, channels,
                      tmp.data(), whole))
    jpeg_fail(d, name);
  return out;
}

}  // namespace

std::string sniff_image_format(std::span<const std::uint8_t> b) {
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return "jpeg";
  static const std::uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (b.size() >= 8 && std::memcmp(b.data(), png_sig, 8) == 0) return "png";
  return "";
}

ImageInfo read_image_info(std::span<const std::uint8_t> bytes, const std::string& name) {
  const std::string fmt_name = sniff_image_format(bytes);
  ImageInfo info;
  if (fmt_name == "jpeg") {
    JpegDecoder d;
    if (!jpeg_step_header(&d, bytes.data(), bytes.size())) jpeg_fail(d, name);
    info.height = static_cast<int>(d.cinfo.image_height);
    info.width = static_cast<int>(d.cinfo.image_width);
    info.channels = d.cinfo.num_components;
  } else if (fmt_name == "png") {
    png_image img{};
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, bytes.data(), bytes.size()))
      BH_THROW(DataError, "{}: corrupt PNG: {}", name, img.message);
    info.height = static_cast<int>(img.height);
    info.width = static_cast<int>(img.width);
    info.channels = static_cast<int>(PNG_IMAGE_SAMPLE_CHANNELS(img.format));
    png_image_free(&img);
  } else {
    BH_THROW(DataError, "{}: not a JPEG or PNG image ({} bytes, unknown magic)", name, bytes.size());
  }
  return info;
}

Tensor decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name, JpegDecodeOptions options) {
  check_channels(options.channels, "decode_jpeg");
  const int s = options.scale_denom;
  if (s != 1 && s != 2 && s != 4 && s != 8)
    BH_THROW(InvalidArgument, "decode_jpeg: scale_denom must be 1, 2, 4 or 8, got {}", s);
  JDIMENSION x0 = 0;
  return jpeg_decode(bytes, name, s, options.channels, &x0, 0, 0, 0, true);
}

DecodedRegion decode_jpeg_region(std::span<const std::uint8_t> bytes, const std::string& name, CropBox crop,
                                 int min_height, int min_width, int channels) {
  check_channels(channels, "decode_jpeg_region");
  if (crop.width <= 0 || crop.height <= 0 || crop.top < 0 || crop.left < 0)
    BH_THROW(InvalidArgument, "decode_jpeg_region: bad crop box {}x{} at ({}, {})", crop.width, crop.height,
             crop.left, crop.top);
  int s = 1;
  if (min_height > 0 && min_width > 0)
    while (s < 8 && crop.height / (2 * s) >= min_height && crop.width / (2 * s) >= min_width) s *= 2;
  // Scaled window, widened outward to whole pixels.
  const auto sx0 = static_cast<JDIMENSION>(crop.left / s), sy0 = static_cast<JDIMENSION>(crop.top / s);
  const auto sx1 = static_cast<JDIMENSION>((crop.left + crop.width + s - 1) / s);
  const auto sy1 = static_cast<JDIMENSION>((crop.top + crop.height + s - 1) / s);
  JDIMENSION x0 = sx0;
  DecodedRegion r;
  r.image = jpeg_decode(bytes, name, s, channels, &x0, sx1 - sx0, sy0, sy1 - sy0, false);
  const int ih = static_cast<int>(r.image.size(0)), iw = static_cast<int>(r.image.size(1));
  r.box.top = std::clamp(static_cast<int>(crop.top / s) - static_cast<int>(sy0), 0, ih - 1);
  r.box.left = std::clamp(static_cast<int>(crop.left / s) - static_cast<int>(x0), 0, iw - 1);
  r.box.height = std::clamp(crop.height / s, 1, ih - r.box.top);
  r.box.width = std::clamp(crop.width / s, 1, iw - r.box.left);
  return r;
}

Tensor decode_png(std::span<const std::uint8_t> bytes, const std::string& name, int channels) {
  check_channels(channels, "decode_png");
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, bytes.data(), bytes.size()))
    BH_THROW(DataError, "{}: corrupt PNG: {}", name, img.message);
  struct Guard {
    png_image* i;
    ~Guard() { png_image_free(i); }
  } guard{&img};
  check_pixels(img.height, img.width, name);
  // Deflate expands at most ~1032:1: a header claiming more pixels than the file can hold is
  // corrupt, and is refused before allocating.
  const std::uint64_t raw_bytes = static_cast<std::uint64_t>(img.height) *
                                  (static_cast<std::uint64_t>(img.width) * PNG_IMAGE_PIXEL_SIZE(img.format) + 1);
  if (raw_bytes > 1032ull * bytes.size() + 4096)
    BH_THROW(DataError, "{}: PNG header claims {}x{} pixels, more than its {} bytes can hold (corrupt header)",
             name, img.width, img.height, bytes.size());
  // An alpha channel is dropped, not composited (what PIL's convert("RGB") does): decode with
  // alpha, then keep the colour channels.
  const bool alpha = (img.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  img.format = channels == 1 ? (alpha ? PNG_FORMAT_GA : PNG_FORMAT_GRAY) : (alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB);
  const int decoded_channels = channels + (alpha ? 1 : 0);
  Tensor out = Tensor::empty({img.height, img.width, decoded_channels}, DType::u8);
  if (!png_image_finish_read(&img, nullptr, out.raw_data(), 0, nullptr))
    BH_THROW(DataError, "{}: corrupt or truncated PNG: {}", name, img.message);
  if (PNG_IMAGE_FAILED(img)) BH_THROW(DataError, "{}: corrupt or truncated PNG: {}", name, img.message);
  if (!alpha) return out;
  Tensor colour = Tensor::empty({img.height, img.width, channels}, DType::u8);
  const auto* src = out.data<std::uint8_t>();
  auto* dst = colour.data<std::uint8_t>();
  const std::size_t pixels = static_cast<std::size_t>(img.height) * img.width;
  for (std::size_t i = 0; i < pixels; ++i)
    for (int k = 0; k < channels; ++k) dst[i * channels + k] = src[i * decoded_channels + k];
  return colour;
}

Tensor decode_image(std::span<const std::uint8_t> bytes, const std::string& name, int channels) {
  const std::string kind = sniff_image_format(bytes);
  if (kind == "jpeg") return decode_jpeg(bytes, name, {1, channels});
  if (kind == "png") return decode_png(bytes, name, channels);
  BH_THROW(DataError, "{}: not a JPEG or PNG image ({} bytes, unknown magic)", name, bytes.size());
}

Tensor read_image(const std::string& path, int channels) { return decode_image(read_file(path), path, channels); }

namespace {

struct JpegEncoder {
  jpeg_compress_struct cinfo;
  JpegError err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  bool created = false;
  JpegEncoder() {
    std::memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = bh_jpeg_error_exit;
    err.message[0] = '\0';
  }
  ~JpegEncoder() {
    if (created) jpeg_destroy_compress(&cinfo);
    std::free(buffer);
  }
};

bool jpeg_step_encode(JpegEncoder* e, const std::uint8_t* src, int h, int w, int channels, int quality) {
  if (setjmp(e->err.jump)) return false;
  jpeg_create_compress(&e->cinfo);
  e->created = true;
  jpeg_mem_dest(&e->cinfo, &e->buffer, &e->size);
  e->cinfo.image_width = static_cast<JDIMENSION>(w);
  e->cinfo.image_height = static_cast<JDIMENSION>(h);
  e->cinfo.input_components = channels;
  e->cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&e->cinfo);
  jpeg_set_quality(&e->cinfo, quality, TRUE);
  jpeg_start_compress(&e->cinfo, TRUE);
  while (e->cinfo.next_scanline < e->cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(src + static_cast<std::size_t>(e->cinfo.next_scanline) * w * channels);
    jpeg_write_scanlines(&e->cinfo, &row, 1);
  }
  jpeg_finish_compress(&e->cinfo);
  return true;
}

Tensor check_hwc_u8(const Tensor& hwc, const char* what) {
  if (!hwc.defined() || hwc.dtype() != DType::u8 || hwc.dim() != 3 || (hwc.size(2) != 1 && hwc.size(2) != 3))
    BH_THROW(InvalidArgument, "{}: need u8 HWC with 1 or 3 channels, got {}", what,
             hwc.defined() ? hwc.describe() : "an undefined tensor");
  return hwc.to(Device::cpu()).contiguous();
}

}  // namespace

std::vector<std::uint8_t> encode_jpeg(const Tensor& hwc, int quality) {
  const Tensor src = check_hwc_u8(hwc, "encode_jpeg");
  JpegEncoder e;
  if (!jpeg_step_encode(&e, src.data<std::uint8_t>(), static_cast<int>(src.size(0)), static_cast<int>(src.size(1)),
                        static_cast<int>(src.size(2)), std::clamp(quality, 1, 100)))
    BH_THROW(DataError, "encode_jpeg: {}", e.err.message);
  return std::vector<std::uint8_t>(e.buffer, e.buffer + e.size);
}

std::vector<std::uint8_t> encode_png(const Tensor& hwc) {
  const Tensor src = check_hwc_u8(hwc, "encode_png");
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(src.size(1));
  img.height = static_cast<png_uint_32>(src.size(0));
  img.format = src.size(2) == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&img, nullptr, &size, 0, src.raw_data(), 0, nullptr))
    BH_THROW(DataError, "encode_png: {}", img.message);
  std::vector<std::uint8_t> out(size);
  if (!png_image_write_to_memory(&img, out.data(), &size, 0, src.raw_data(), 0, nullptr))
    BH_THROW(DataError, "encode_png: {}", img.message);
  out.resize(size);
  return out;
}

}  // namespace benchhost::data

// JPEG and PNG images (sdk/src/data/image_codec.cpp): the header sniff, whole decodes in RGB and
// grey, and the region decode the training transform uses.
#include "benchhost/data/image.hpp"
#include "fuzz.hpp"

namespace bh_fuzz {
std::vector<Bytes> seeds() {
  using namespace benchhost;
  std::vector<Bytes> out;
  for (auto [h, w, c] : {std::tuple{16, 24, 3}, std::tuple{9, 7, 3}, std::tuple{8, 8, 1}}) {
    Tensor img = Tensor::empty({h, w, c}, DType::u8);
    for (std::int64_t k = 0; k < img.numel(); ++k) img.data<std::uint8_t>()[k] = static_cast<std::uint8_t>(k * 37 + 11);
    if (c == 3) out.push_back(data::encode_jpeg(img, 85));
    out.push_back(data::encode_png(img));
  }
  return out;
}
}  // namespace bh_fuzz

// Arithmetic-coded JPEGs are decoded whole only up to this many pixels (256 x 256). Arithmetic
// coding can spend almost no bits on a flat block, so a 600-byte input may validly claim 50 Mpixel
// (Note [JPEG pixels against the bytes stored] bounds Huffman-coded files only); whole decodes of
// such claims took up to seconds under ASan and drew the fuzzer into spending its time there (a
// run fell from thousands of executions a second to tens). The decoders' loops are the same at
// any size; above the limit the header checks and a top-left region decode still run.
constexpr std::int64_t kArithmeticWholeDecodePixels = std::int64_t{1} << 16;
// Any image: 512 x 512. A Huffman-coded JPEG of N bytes may claim up to 512 N pixels, a PNG about
// a thousand bytes of pixels per byte; the fuzzer's mutations of a few-kilobyte input into
// megapixel claims made whole decodes most of its time.
constexpr std::int64_t kWholeDecodePixels = std::int64_t{1} << 18;

// Whether the first frame header (SOF marker) says arithmetic coding: SOF9-11 and SOF13-15.
bool arithmetic_jpeg(std::span<const std::uint8_t> in) {
  for (std::size_t i = 2; i + 1 < in.size(); ++i) {
    if (in[i] != 0xFF) continue;
    const std::uint8_t m = in[i + 1];
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) return m >= 0xC9;
  }
  return false;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace benchhost::data;
  const std::span<const std::uint8_t> in(data, size);
  std::int64_t pixels = 0;
  bh_fuzz::refused_or_read([&] {
    const ImageInfo info = read_image_info(in, "fuzz.img");
    pixels = static_cast<std::int64_t>(info.height) * info.width;
  });
  if (pixels > kWholeDecodePixels || (pixels > kArithmeticWholeDecodePixels && arithmetic_jpeg(in))) {
    if (sniff_image_format(in) == "jpeg")
      bh_fuzz::refused_or_read([&] { decode_jpeg_region(in, "fuzz.jpg", CropBox{0, 0, 16, 16}, 0, 0); });
    return 0;
  }
  for (int channels : {3, 1}) bh_fuzz::refused_or_read([&] { decode_image(in, "fuzz.img", channels); });
  bh_fuzz::refused_or_read([&] {
    const ImageInfo info = read_image_info(in, "fuzz.img");
    if (sniff_image_format(in) == "jpeg" && info.height > 2 && info.width > 2)
      decode_jpeg_region(in, "fuzz.jpg", CropBox{1, 1, info.height / 2, info.width / 2}, 4, 4);
  });
  return 0;
}

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

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace benchhost::data;
  const std::span<const std::uint8_t> in(data, size);
  bh_fuzz::refused_or_read([&] { read_image_info(in, "fuzz.img"); });
  for (int channels : {3, 1}) bh_fuzz::refused_or_read([&] { decode_image(in, "fuzz.img", channels); });
  bh_fuzz::refused_or_read([&] {
    const ImageInfo info = read_image_info(in, "fuzz.img");
    if (sniff_image_format(in) == "jpeg" && info.height > 2 && info.width > 2)
      decode_jpeg_region(in, "fuzz.jpg", CropBox{1, 1, info.height / 2, info.width / 2}, 4, 4);
  });
  return 0;
}

// IDX files (MNIST format, plain or gzip; sdk/src/data/idx.cpp) and the classification dataset
// over an image file and a label file.
#include "benchhost/data/idx.hpp"
#include "fuzz.hpp"

namespace bh_fuzz {
std::vector<Bytes> seeds() {
  using namespace benchhost;
  std::vector<Bytes> out;
  Tensor images = Tensor::zeros({3, 4, 4}, DType::u8);
  for (int k = 0; k < 48; ++k) images.data<std::uint8_t>()[k] = static_cast<std::uint8_t>(k * 5);
  const Tensor labels = Tensor::from_vector_i32({0, 1, 2}, {3}).to(DType::u8);
  for (bool gz : {false, true}) {
    const std::string pi = write_scratch("seed_images", {}), pl = write_scratch("seed_labels", {});
    data::write_idx(pi, images, gz);
    data::write_idx(pl, labels, gz);
    out.push_back(join_parts({read_bytes(pi), read_bytes(pl)}));
  }
  return out;
}
}  // namespace bh_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace benchhost::data;
  const auto parts = bh_fuzz::split_parts({data, size}, 2);
  const std::string images = bh_fuzz::write_scratch("images.idx", parts[0]);
  const std::string labels = bh_fuzz::write_scratch("labels.idx", parts[1]);
  bh_fuzz::refused_or_read([&] { read_idx(images); });
  bh_fuzz::refused_or_read([&] {
    IdxClassificationDataset ds(images, labels, 0.5f, 0.25f);
    if (ds.size() > 0) ds.get(ds.size() - 1);
  });
  return 0;
}

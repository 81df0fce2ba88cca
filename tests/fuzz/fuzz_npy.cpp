// .npy and .npz images (sdk/src/data/npy.cpp): parse_npy_header, parse_npy, map_npy, npz_members,
// parse_npz.
#include "benchhost/data/npy.hpp"
#include "fuzz.hpp"

namespace bh_fuzz {
std::vector<Bytes> seeds() {
  using namespace benchhost;
  std::vector<Bytes> out;
  const Tensor f = Tensor::from_vector({1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f}, {2, 3});
  const Tensor i = Tensor::from_vector_i32({1, 2, 3, 4}, {4});
  out.push_back(data::encode_npy(f));
  out.push_back(data::encode_npy(i));
  out.push_back(data::encode_npy(Tensor::zeros({0, 5}, DType::i64)));
  for (bool compress : {false, true}) {
    const std::string path = write_scratch(compress ? "seed_c.npz" : "seed_s.npz", {});
    data::write_npz(path, {{"a", f}, {"b", i}}, compress);
    out.push_back(read_bytes(path));
  }
  return out;
}
}  // namespace bh_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace benchhost::data;
  const std::span<const std::uint8_t> in(data, size);
  bh_fuzz::refused_or_read([&] { parse_npy(in, "fuzz.npy"); });
  // The mapped path (KiTS19 volumes, DLRM arrays): the tensor wraps the file's bytes, so every byte
  // its shape covers is read back (past the mapping would be a SIGSEGV).
  bh_fuzz::refused_or_read([&] {
    const benchhost::Tensor t = map_npy(bh_fuzz::write_scratch("fuzz.npy", in));
    const auto* p = static_cast<const std::uint8_t*>(t.raw_data());
    std::uint8_t sum = 0;
    for (std::size_t i = 0; i < t.nbytes(); ++i) sum = static_cast<std::uint8_t>(sum + p[i]);
    static volatile std::uint8_t sink;
    sink = sum;
  });
  bh_fuzz::refused_or_read([&] {
    for (const NpzMember& m : npz_members(in, "fuzz.npz"))
      if (m.method == 0) parse_npy_header(in.subspan(m.data_offset, m.stored_bytes), m.name);
  });
  bh_fuzz::refused_or_read([&] { parse_npz(in, "fuzz.npz"); });
  return 0;
}

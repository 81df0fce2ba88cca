// The workloads' dataset layouts built on the SDK readers: a Criteo multi-hot day (dense .npy,
// labels .npy, sparse .npz, memory-mapped; datasets/criteo), the ImageNet validation labels file
// val_map.txt (datasets/imagenet) and a KiTS19 case pair with evaluation_cases.txt
// (datasets/kits19: index, components, an augmented crop). BERT's HDF5 shards have their own
// harness (fuzz_hdf5.cpp): each of their reads forks, which would slow these readers' fuzzing
// several times over.
#include <filesystem>
#include <fstream>

#include "benchhost/data/npy.hpp"
#include "criteo.hpp"
#include "fuzz.hpp"
#include "imagenet_folder.hpp"
#include "kits19.hpp"

namespace bh_fuzz {

enum Kind : std::uint8_t { kCriteoDay, kValMap, kKits19, kKinds };

namespace {
namespace fs = std::filesystem;

// A criteo day of `rows` rows, every feature one-hot but feature 3 (3-hot).
std::vector<Bytes> criteo_day(std::int64_t rows) {
  using namespace benchhost;
  Tensor dense = Tensor::zeros({rows, criteo::kNumDense});
  Tensor labels = Tensor::zeros({rows, 1}, DType::i32);
  for (std::int64_t i = 0; i < rows; ++i) labels.data<std::int32_t>()[i] = i % 2;
  std::vector<std::pair<std::string, Tensor>> sparse;
  for (int k = 0; k < criteo::kNumSparse; ++k) {
    Tensor t = Tensor::zeros({rows, k == 3 ? 3 : 1}, DType::i32);
    for (std::int64_t j = 0; j < t.numel(); ++j) t.data<std::int32_t>()[j] = static_cast<std::int32_t>(j * 7 + k);
    sparse.emplace_back(std::to_string(k), t);
  }
  const fs::path dir = scratch_dir() / "seed_criteo";
  fs::create_directories(dir);
  const criteo::DayFiles f = criteo::day_files(dir.string(), 0);
  data::write_npy(f.dense, dense);
  data::write_npy(f.labels, labels);
  data::write_npz(f.sparse, sparse, false);
  return {read_bytes(f.dense), read_bytes(f.labels), read_bytes(f.sparse)};
}

// A KiTS19 case: image f32 (1, 6, 5, 7) and label u8 with both foreground classes.
std::vector<Bytes> kits19_case() {
  using namespace benchhost;
  Tensor x = Tensor::zeros({1, 6, 5, 7});
  Tensor y = Tensor::zeros({1, 6, 5, 7}, DType::u8);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    x.data<float>()[i] = static_cast<float>(i % 11) * 0.1f;
    y.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i % 13 == 0 ? 2 : (i % 5 == 0 ? 1 : 0));
  }
  const std::string xp = write_scratch("seed_x.npy", {}), yp = write_scratch("seed_y.npy", {});
  data::write_npy(xp, x);
  data::write_npy(yp, y);
  return {read_bytes(xp), read_bytes(yp), to_bytes("00001\n")};
}

}  // namespace

std::vector<Bytes> seeds() {
  std::vector<Bytes> out;
  auto with = [&](Kind k, Bytes b) {
    b.insert(b.begin(), k);
    out.push_back(std::move(b));
  };
  with(kCriteoDay, join_parts(criteo_day(6)));
  with(kValMap, to_bytes("ILSVRC2012_val_00000001.JPEG 1\nILSVRC2012_val_00000002.JPEG n00000000\n"));
  with(kKits19, join_parts(kits19_case()));
  return out;
}

}  // namespace bh_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  using namespace benchhost;
  if (size == 0) return 0;
  const std::span<const std::uint8_t> in(data + 1, size - 1);
  switch (data[0] % bh_fuzz::kKinds) {
    case bh_fuzz::kCriteoDay: {
      const fs::path dir = bh_fuzz::scratch_dir() / "criteo";
      fs::create_directories(dir);
      const criteo::DayFiles f = criteo::day_files(dir.string(), 0);
      const auto parts = bh_fuzz::split_parts(in, 3);
      bh_fuzz::write_scratch("criteo/" + fs::path(f.dense).filename().string(), parts[0]);
      bh_fuzz::write_scratch("criteo/" + fs::path(f.labels).filename().string(), parts[1]);
      bh_fuzz::write_scratch("criteo/" + fs::path(f.sparse).filename().string(), parts[2]);
      bh_fuzz::refused_or_read([&] {
        criteo::MultiHotDay day(dir.string(), 0);
        if (day.rows() > 0) {
          const std::int64_t n = std::min<std::int64_t>(day.rows(), 4);
          criteo::Batch b = criteo::make_batch(n, day.hotness());
          day.copy_rows(0, n, b, 0, std::vector<std::int64_t>(criteo::kNumSparse, 1000));
        }
      });
      break;
    }
    case bh_fuzz::kValMap: {
      const fs::path root = bh_fuzz::scratch_dir() / "imagenet";
      fs::create_directories(root / "val");
      std::ofstream(root / "val" / "ILSVRC2012_val_00000001.JPEG") << "x";
      std::ofstream(root / "val" / "ILSVRC2012_val_00000002.JPEG") << "x";
      bh_fuzz::write_scratch("imagenet/val_map.txt", in);
      bh_fuzz::refused_or_read([&] { imagenet::scan_val(root.string(), {"n00000000", "n00000001"}); });
      break;
    }
    default: {  // kKits19
      // Case 00000 (training) from the input, case 00001 (evaluation) a fixed valid pair.
      const fs::path dir = bh_fuzz::scratch_dir() / "kits19";
      fs::create_directories(dir);
      const auto parts = bh_fuzz::split_parts(in, 3);
      bh_fuzz::write_scratch("kits19/case_00000_x.npy", parts[0]);
      bh_fuzz::write_scratch("kits19/case_00000_y.npy", parts[1]);
      bh_fuzz::write_scratch("kits19/evaluation_cases.txt", parts[2]);
      if (!fs::exists(dir / "case_00001_y.npy")) {
        data::write_npy((dir / "case_00001_x.npy").string(), Tensor::zeros({1, 4, 4, 4}));
        data::write_npy((dir / "case_00001_y.npy").string(), Tensor::zeros({1, 4, 4, 4}, DType::u8));
      }
      bh_fuzz::refused_or_read([&] {
        kits19::Kits19IndexOptions io;
        io.min_train_shape = {4, 4, 4};
        kits19::Kits19Index index(dir.string(), io);
        if (!index.train().empty()) {
          kits19::Kits19TrainOptions to;
          to.patch = {4, 4, 4};
          to.oversampling = 0.5;
          kits19::Kits19TrainDataset ds(index, to);
          for (std::int64_t s = 0; s < 4; ++s) ds.get(data::SampleContext{0, s, 7});
        }
      });
      break;
    }
  }
  return 0;
}

// bench_data_pipeline: throughput of the data loader alone, no training step.
//
//   bench_data_pipeline [--dir DIR] [--images N] [--threads 1,2] [--epochs E]
//                       [--idx-images PATH --idx-labels PATH] [--only idx|jpeg|synthetic]
//
// Pipelines (each with every thread count):
//   idx   : Fashion-MNIST train split from IDX (.gz) files -> f32 [1, 28, 28] normalised + label,
//           batches of 256, shuffled.
//   jpeg  : DIR/jpeg/<class>/<i>.jpg (generated here on first use from a deterministic pattern
//           plus noise, sizes around ImageNet's) -> decode + random-resized-crop 224 + flip +
//           normalise to f32 CHW, batches of 32, shuffled.
//   synthetic : SyntheticSource batches of [256, 3, 224, 224] f32 (memory speed, for reference).
// Each measurement is a full epoch (start_epoch to the last batch), best of --epochs.
// Output: a table, and one line per measurement "RESULT <pipeline> <threads> <samples/s>" that
// tools/bench_data_pipeline.sh joins with the PyTorch peer's lines.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "benchhost/data/idx.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/data/pipeline.hpp"
#include "benchhost/data/synthetic.hpp"
#include "benchhost/random.hpp"

using namespace benchhost;
using namespace benchhost::data;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string dir = (fs::temp_directory_path() / "benchhost_data_bench").string();
  int images = 512;
  std::vector<int> threads = {1, 2};
  int epochs = 2;
  std::string idx_images = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  std::string idx_labels = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
  std::string only;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "bench_data_pipeline: %s\nusage: bench_data_pipeline [--dir DIR] [--images N] "
               "[--threads 1,2] [--epochs E] [--idx-images P --idx-labels P] [--only idx|jpeg|synthetic]\n", why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + k).c_str());
      return argv[++i];
    };
    if (k == "--dir") a.dir = val();
    else if (k == "--images") a.images = std::stoi(val());
    else if (k == "--epochs") a.epochs = std::stoi(val());
    else if (k == "--idx-images") a.idx_images = val();
    else if (k == "--idx-labels") a.idx_labels = val();
    else if (k == "--only") a.only = val();
    else if (k == "--threads") {
      a.threads.clear();
      std::string s = val();
      for (std::size_t p = 0; p < s.size();) {
        std::size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        a.threads.push_back(std::stoi(s.substr(p, q - p)));
        p = q + 1;
      }
    } else usage(("unknown option " + k).c_str());
  }
  if (a.images < 1 || a.epochs < 1 || a.threads.empty()) usage("bad values");
  return a;
}

// A deterministic photo-like image: smooth colour fields plus per-pixel noise, so that the
// compressed size and decode cost are in the range of real photographs (~0.5-1.5 bits/pixel).
Tensor make_image(int h, int w, std::uint64_t seed) {
  Tensor t = Tensor::empty({h, w, 3}, DType::u8);
  auto* p = t.data<std::uint8_t>();
  Rng rng(seed, 7);
  const float fx = 0.005f + 0.03f * rng.uniform(), fy = 0.005f + 0.03f * rng.uniform(), ph = 6.28f * rng.uniform();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        const float base = 128.f + 90.f * std::sin(fx * x * (1 + 0.3f * c) + ph) * std::cos(fy * y + 0.5f * c) +
                           25.f * std::sin(0.2f * (x + 2 * y) + c);
        const float v = base + 18.f * (rng.uniform() - 0.5f);
        p[(static_cast<std::size_t>(y) * w + x) * 3 + c] = static_cast<std::uint8_t>(std::clamp(v, 0.f, 255.f));
      }
  return t;
}

std::string ensure_jpegs(const Args& a) {
  const fs::path root = fs::path(a.dir) / "jpeg";
  const fs::path stamp = root / (".complete_" + std::to_string(a.images));
  if (fs::exists(stamp)) return root.string();
  fs::remove_all(root);
  const int classes = 4;
  for (int k = 0; k < classes; ++k) fs::create_directories(root / ("class" + std::to_string(k)));
  std::size_t bytes = 0;
  for (int i = 0; i < a.images; ++i) {
    Rng rng(1234, static_cast<std::uint64_t>(i));
    // ImageNet-like sizes: 300..500 x 250..500.
    const int w = 300 + static_cast<int>(rng.below(201)), h = 250 + static_cast<int>(rng.below(251));
    const auto jpg = encode_jpeg(make_image(h, w, static_cast<std::uint64_t>(i)), 90);
    bytes += jpg.size();
    std::ofstream f(root / ("class" + std::to_string(i % classes)) / (std::to_string(i) + ".jpg"), std::ios::binary);
    f.write(reinterpret_cast<const char*>(jpg.data()), static_cast<std::streamsize>(jpg.size()));
  }
  std::ofstream(stamp) << a.images << "\n";
  std::printf("generated %d JPEGs in %s (mean %.1f KiB)\n", a.images, root.c_str(), bytes / 1024.0 / a.images);
  return root.string();
}

struct Measure {
  double samples_per_second = 0;
  std::int64_t samples = 0;
  double seconds = 0;
  double wait_fraction = 0;
};

Measure time_epochs(BatchSource& src, int epochs) {
  Measure best;
  for (int e = 0; e < epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    src.start_epoch(e);
    std::int64_t n = 0;
    while (auto b = src.next()) n += b->size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (n / s > best.samples_per_second) best = {n / s, n, s, 0};
  }
  return best;
}

void report(const char* pipeline, int threads, const Measure& m) {
  std::printf("%-10s %7d %9lld %9.3f %14.1f\n", pipeline, threads, static_cast<long long>(m.samples), m.seconds,
              m.samples_per_second);
  std::printf("RESULT %s %d %.1f\n", pipeline, threads, m.samples_per_second);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    std::printf("%-10s %7s %9s %9s %14s\n", "pipeline", "threads", "samples", "seconds", "samples/s");
    if (a.only.empty() || a.only == "idx") {
      if (!fs::exists(a.idx_images)) {
        std::printf("idx: skipped (%s not found; apt-get install dataset-fashion-mnist)\n", a.idx_images.c_str());
      } else {
        auto ds = std::make_shared<IdxClassificationDataset>(a.idx_images, a.idx_labels, 0.2860f, 0.3530f);
        for (int t : a.threads) {
          DataLoader loader(ds, Sampler({ds->size(), 0, 1, true, 1}), {256, t, 4});
          report("idx", t, time_epochs(loader, a.epochs));
        }
      }
    }
    if (a.only.empty() || a.only == "jpeg") {
      const std::string root = ensure_jpegs(a);
      ImageTransform tr;  // train: RandomResizedCrop(224) + flip + ImageNet normalisation, CHW
      auto ds = ImageFileDataset::from_folder(root, tr);
      for (int t : a.threads) {
        DataLoader loader(ds, Sampler({ds->size(), 0, 1, true, 1}), {32, t, 4});
        report("jpeg", t, time_epochs(loader, a.epochs));
      }
    }
    if (a.only.empty() || a.only == "synthetic") {
      SyntheticSource src({{"image", {3, 224, 224}}, {"label", {}, DType::i64, 0, 1000}}, 256, 200);
      report("synthetic", 1, time_epochs(src, a.epochs));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_data_pipeline: %s\n", e.what());
    return 1;
  }
  return 0;
}

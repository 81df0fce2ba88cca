// The transducer loss (nn/transducer.hpp) forward + backward, reduction mean, timed on the CPU.
//   bench_transducer_loss --dir DIR [--write-inputs] [--threads 2] [--warmup 1] [--iters 1]
//                         [--batch 16 --frames 150 --labels 40 --classes 1024]
// --write-inputs generates a seeded batch (unequal lengths, the longest exactly T frames and U
// labels, as torchaudio requires) and writes it to DIR in the layout tools/peers/rnnt_peer.py
// reads (meta.json and raw arrays), so both sides time the same inputs; otherwise the batch is
// read from DIR. Prints one JSON line: {"impl": "benchhost", "ms": [...], "median_ms": m, ...}.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "benchhost/nn/transducer.hpp"
#include "benchhost/random.hpp"
#include "benchhost/threading.hpp"

namespace fs = std::filesystem;
using namespace benchhost;

namespace {

struct Options {
  fs::path dir;
  bool write_inputs = false;
  int threads = 2, warmup = 1, iters = 1;
  std::int64_t B = 16, T = 150, U = 40, V = 1024;
};

void write_raw(const fs::path& path, const Tensor& t) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(t.raw_data()), static_cast<std::streamsize>(t.numel() * dtype_size(t.dtype())));
}

void read_raw(const fs::path& path, Tensor& t) {
  std::ifstream f(path, std::ios::binary);
  f.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.numel() * dtype_size(t.dtype())));
  if (!f)
    throw std::runtime_error(
        fmt::format("cannot read {} bytes from {}", t.numel() * dtype_size(t.dtype()), path.string()));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--dir")
      o.dir = next();
    else if (a == "--write-inputs")
      o.write_inputs = true;
    else if (a == "--threads")
      o.threads = std::stoi(next());
    else if (a == "--warmup")
      o.warmup = std::stoi(next());
    else if (a == "--iters")
      o.iters = std::stoi(next());
    else if (a == "--batch")
      o.B = std::stoll(next());
    else if (a == "--frames")
      o.T = std::stoll(next());
    else if (a == "--labels")
      o.U = std::stoll(next());
    else if (a == "--classes")
      o.V = std::stoll(next());
    else {
      std::fprintf(stderr, "bench_transducer_loss: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.dir.empty()) {
    std::fprintf(stderr, "bench_transducer_loss: --dir DIR is required\n");
    return 2;
  }
  set_num_threads(o.threads);
  const std::int64_t B = o.B, T = o.T, U = o.U, V = o.V, blank = V - 1;
  Tensor logits = Tensor::empty({B, T, U + 1, V});
  Tensor labels = Tensor::zeros({B, U}, DType::i32);
  Tensor frames = Tensor::empty({B}, DType::i32), label_counts = Tensor::empty({B}, DType::i32);
  if (o.write_inputs) {
    fs::create_directories(o.dir);
    Rng r(20261126, 1);
    float* z = logits.data<float>();
    for (std::int64_t i = 0; i < logits.numel(); ++i) z[i] = r.uniform(-4.0f, 4.0f);
    for (std::int64_t b = 0; b < B; ++b) {
      const auto tb =
          b == 0 ? T : T / 2 + static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(T - T / 2 + 1)));
      const auto ub =
          b == 1 ? U : U / 2 + static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(U - U / 2 + 1)));
      frames.data<std::int32_t>()[b] = static_cast<std::int32_t>(tb);
      label_counts.data<std::int32_t>()[b] = static_cast<std::int32_t>(ub);
      for (std::int64_t u = 0; u < ub; ++u)
        labels.data<std::int32_t>()[b * U + u] = static_cast<std::int32_t>(r.below(static_cast<std::uint64_t>(V - 1)));
    }
    write_raw(o.dir / "logits.bin", logits);
    write_raw(o.dir / "labels.bin", labels);
    write_raw(o.dir / "logit_lengths.bin", frames);
    write_raw(o.dir / "label_lengths.bin", label_counts);
    std::ofstream(o.dir / "meta.json") << fmt::format(
        "{{\"blank\": {}, \"shapes\": {{\"logits\": [{}, {}, {}, {}], \"labels\": [{}, {}], \"logit_lengths\": [{}], "
        "\"label_lengths\": [{}]}}}}",
        blank, B, T, U + 1, V, B, U, B, B);
  } else {
    read_raw(o.dir / "logits.bin", logits);
    read_raw(o.dir / "labels.bin", labels);
    read_raw(o.dir / "logit_lengths.bin", frames);
    read_raw(o.dir / "label_lengths.bin", label_counts);
  }
  std::vector<double> ms;
  float loss = 0.0f;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    nn::TransducerLossSaved saved;
    const Tensor l = nn::transducer_loss_forward(logits, labels, frames, label_counts,
                                                 {blank, nn::TransducerReduction::mean}, &saved);
    const Tensor grad = nn::transducer_loss_backward(saved, 1.0f);
    const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    loss = l.data<float>()[0];
    if (i >= o.warmup) ms.push_back(elapsed);
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
  std::vector<std::string> ms_text;
  for (double m : ms) ms_text.push_back(fmt::format("{:.2f}", m));
  std::printf("{\"impl\": \"benchhost\", \"threads\": %d, \"ms\": [%s], \"median_ms\": %.2f, \"loss\": %.6f}\n",
              o.threads, fmt::format("{}", fmt::join(ms_text, ", ")).c_str(), median, static_cast<double>(loss));
  return 0;
}

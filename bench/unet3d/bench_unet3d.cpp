// bench_unet3d: timings of the unet3d workload's training step on the CPU, printed as one JSON
// object per line, for tools/bench_unet3d.sh (which runs the PyTorch peer on the same shapes and
// thread count and prints ratios):
//   mini : one training step of configs/unet3d/mini.conf's model (filters 8,16,32,64, 32^3
//          patches, batch 2): forward + DiceCE loss + backward + SGD (Nesterov)
//   full : the same for the MLPerf model (filters 32..320) on --full-patch^3 patches (default 64;
//          the reference's 128^3 step takes minutes on two cores), batch 2
// Usage: bench_unet3d [--threads N] [--iters N] [--warmup N] [--layout ndhwc|ncdhw]
//                     [--only mini|full] [--full-patch N]
// Each figure is the median over --iters timed repetitions after --warmup untimed ones.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "benchhost/nn/segmentation.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/random.hpp"
#include "benchhost/threading.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::unet3d;

template <class F>
double median_ms(F&& f, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double train_step_ms(const UNet3dConfig& c, std::int64_t batch, std::int64_t side, int warmup, int iters) {
  UNet3d model(c);
  model.initialize(1);
  optim::SgdOptions so;
  so.momentum = 0.9f;
  so.nesterov = true;
  optim::Sgd sgd(model.parameters(), so);
  const Shape shape = c.layout == nn::VolumeLayout::ndhwc ? Shape{batch, side, side, side, 1} : Shape{batch, 1, side, side, side};
  Tensor x = Tensor::empty(shape);
  Tensor labels = Tensor::empty({batch, side, side, side}, DType::u8);
  Rng rng(2);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(-2.0f, 2.0f);
  for (std::int64_t i = 0; i < labels.numel(); ++i) labels.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(rng.below(3));
  return median_ms(
      [&] {
        const nn::DiceCeResult l = nn::dice_ce_loss_forward(model.forward(x), labels, c.layout);
        model.backward(nn::dice_ce_loss_backward(l, labels, c.layout));
        sgd.step(0.1f);
        sgd.zero_grad();
      },
      warmup, iters);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, iters = 5, warmup = 2;
  std::int64_t full_patch = 64;
  std::string layout_name = "ndhwc", only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") threads = std::stoi(v);
    else if (k == "--iters") iters = std::stoi(v);
    else if (k == "--warmup") warmup = std::stoi(v);
    else if (k == "--layout") layout_name = v;
    else if (k == "--only") only = v;
    else if (k == "--full-patch") full_patch = std::stoll(v);
    else {
      std::fprintf(stderr, "bench_unet3d: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    set_num_threads(threads);
    const nn::VolumeLayout layout = nn::parse_volume_layout(layout_name);
    auto report = [&](const char* name, const UNet3dConfig& c, std::int64_t side) {
      const double ms = train_step_ms(c, 2, side, warmup, iters);
      std::printf("{\"bench\": \"%s\", \"layout\": \"%s\", \"threads\": %d, \"batch_size\": 2, \"patch\": %lld, "
                  "\"ms_per_step\": %.3f, \"samples_per_second\": %.3f}\n",
                  name, layout_name.c_str(), threads, static_cast<long long>(side), ms, 2e3 / ms);
      std::fflush(stdout);
    };
    if (only.empty() || only == "mini") {
      UNet3dConfig c;
      c.filters = {8, 16, 32, 64};
      c.layout = layout;
      report("mini", c, 32);
    }
    if (only.empty() || only == "full") {
      UNet3dConfig c;
      c.layout = layout;
      report("full", c, full_patch);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_unet3d: %s\n", e.what());
    return 1;
  }
  return 0;
}

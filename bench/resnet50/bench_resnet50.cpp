// bench_resnet50: timings of the resnet50 workload's building blocks on the CPU, printed as one
// JSON object per line, for tools/bench_resnet50.sh (which runs the PyTorch peer on the same
// shapes and thread count and prints ratios):
//   mini  : one training step of the mini config (narrow ResNet, 28x28x1, batch 128, SGD)
//   full  : one training step of ResNet-50 v1.5 (224x224x3, batch 8, SGD): forward + backward +
//           update
//   block : one ResNet bottleneck block (256 -> 64 -> 256 channels, 56x56, batch 8) forward +
//           backward, the SDK's block comparison of issue 3
// Usage: bench_resnet50 [--threads N] [--iters N] [--warmup N] [--layout nhwc|nchw] [--only X]
// Each figure is the median over --iters timed repetitions after --warmup untimed ones.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "benchhost/nn/ops.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/random.hpp"
#include "benchhost/threading.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::resnet;

Tensor random_images(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Rng rng(seed);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(-2.0f, 2.0f);
  return t;
}

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

double train_step_ms(const ResNetConfig& c, std::int64_t batch, std::int64_t hw, int warmup,
                     int iters) {
  ResNet model(c);
  model.initialize(1);
  optim::SgdOptions so;
  so.momentum = 0.9f;
  so.weight_decay = 5e-5f;
  optim::Sgd sgd(model.parameters(), so);
  const Shape shape = c.layout == nn::ImageLayout::nhwc ? Shape{batch, hw, hw, c.in_channels}
                                                        : Shape{batch, c.in_channels, hw, hw};
  const Tensor x = random_images(shape, 2);
  std::vector<std::int64_t> l(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i < batch; ++i) l[static_cast<std::size_t>(i)] = (i * 7) % c.num_classes;
  const Tensor labels = Tensor::from_vector_i64(l, {batch});
  return median_ms(
      [&] {
        const auto ce = nn::softmax_cross_entropy_forward(model.forward(x), labels, 0.1f);
        model.backward(nn::softmax_cross_entropy_backward(ce, labels, 0.1f));
        sgd.step(0.1f);
        sgd.zero_grad();
      },
      warmup, iters);
}

double block_ms(nn::ImageLayout layout, std::int64_t batch, int warmup, int iters) {
  ResNetConfig c;
  c.layout = layout;
  Bottleneck block(256, 64, 1, c);
  for (nn::Parameter* p : block.parameters())
    if (p->value.dim() == 4) p->value.copy_(random_images(p->value.shape(), 3));
  const Shape shape = layout == nn::ImageLayout::nhwc ? Shape{batch, 56, 56, 256} : Shape{batch, 256, 56, 56};
  const Tensor x = random_images(shape, 4), dy = random_images(shape, 5);
  return median_ms(
      [&] {
        block.zero_grad();
        block.forward(x);
        block.backward(dy);
      },
      warmup, iters);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, iters = 5, warmup = 2;
  std::string layout_name = "nhwc", only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") threads = std::stoi(v);
    else if (k == "--iters") iters = std::stoi(v);
    else if (k == "--warmup") warmup = std::stoi(v);
    else if (k == "--layout") layout_name = v;
    else if (k == "--only") only = v;
    else {
      std::fprintf(stderr, "bench_resnet50: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    set_num_threads(threads);
    const nn::ImageLayout layout = nn::parse_image_layout(layout_name);
    if (only.empty() || only == "mini") {
      ResNetConfig c;  // configs/resnet50/mini.conf's model
      c.blocks = {1, 1, 1, 1};
      c.base_width = 8;
      c.num_classes = 10;
      c.in_channels = 1;
      c.small_stem = true;
      c.layout = layout;
      const double ms = train_step_ms(c, 128, 28, warmup, iters);
      std::printf("{\"bench\": \"mini\", \"layout\": \"%s\", \"threads\": %d, \"batch_size\": 128, "
                  "\"ms_per_step\": %.3f, \"images_per_second\": %.1f}\n",
                  layout_name.c_str(), threads, ms, 128e3 / ms);
      std::fflush(stdout);
    }
    if (only.empty() || only == "full") {
      ResNetConfig c = ResNetConfig::resnet50(1000);
      c.layout = layout;
      const double ms = train_step_ms(c, 8, 224, warmup, iters);
      std::printf("{\"bench\": \"full\", \"layout\": \"%s\", \"threads\": %d, \"batch_size\": 8, "
                  "\"ms_per_step\": %.3f, \"images_per_second\": %.2f}\n",
                  layout_name.c_str(), threads, ms, 8e3 / ms);
      std::fflush(stdout);
    }
    if (only.empty() || only == "block") {
      const double ms = block_ms(layout, 8, warmup, iters);
      std::printf("{\"bench\": \"block\", \"layout\": \"%s\", \"threads\": %d, \"batch_size\": 8, "
                  "\"ms_per_step\": %.3f}\n",
                  layout_name.c_str(), threads, ms);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_resnet50: %s\n", e.what());
    return 1;
  }
  return 0;
}

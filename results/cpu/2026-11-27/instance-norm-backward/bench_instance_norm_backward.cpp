// Instance-norm 3-d backward on the CPU: median ms over repetitions, one line per layout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include "benchhost/nn/segmentation.hpp"
#include "benchhost/tensor.hpp"
using namespace benchhost;
using namespace benchhost::nn;
int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 15;
  for (VolumeLayout layout : {VolumeLayout::ncdhw, VolumeLayout::ndhwc}) {
    const bool cl = layout == VolumeLayout::ndhwc;
    const Shape s = cl ? Shape{2, 64, 64, 64, 32} : Shape{2, 32, 64, 64, 64};
    Tensor x = Tensor::empty(s), dy = Tensor::empty(s);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      x.data<float>()[i] = static_cast<float>((i * 7919) % 1000) / 500.0f - 1.0f;
      dy.data<float>()[i] = static_cast<float>((i * 104729) % 997) / 997.0f - 0.5f;
    }
    InstanceNormSpec spec;
    spec.layout = layout;
    InstanceNormSaved saved;
    const Tensor gamma = Tensor::full({32}, 1.0), beta = Tensor::zeros({32});
    instance_norm3d_forward(x, gamma, beta, spec, saved);
    Tensor dg = Tensor::zeros({32}), db = Tensor::zeros({32});
    std::vector<double> ms;
    for (int i = 0; i < iters + 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Tensor dx = instance_norm3d_backward(dy, x, gamma, saved, spec, dg, db);
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%s backward [2,32,64^3] median %.2f ms\n", cl ? "ndhwc" : "ncdhw", ms[ms.size() / 2]);
  }
}

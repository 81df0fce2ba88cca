#include <chrono>
#include <cstdio>
#include <algorithm>
#include <vector>
#include "benchhost/nn/segmentation.hpp"
using namespace benchhost; using namespace benchhost::nn;
int main(int argc, char** argv) {
  bool cl = argc > 1;
  std::vector<std::int64_t> sh = cl ? std::vector<std::int64_t>{2, 64, 64, 64, 32} : std::vector<std::int64_t>{2, 32, 64, 64, 64};
  Tensor x = Tensor::full(sh, 1.5);
  Tensor g = Tensor::full({32}, 1.0), b = Tensor::zeros({32});
  InstanceNormSpec spec; if (cl) spec.layout = VolumeLayout::ndhwc;
  InstanceNormSaved saved;
  std::vector<double> t;
  for (int i = 0; i < 15; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor y = instance_norm3d_forward(x, g, b, spec, saved);
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  std::printf("%s median %.2f ms\n", cl ? "ndhwc" : "ncdhw", t[t.size() / 2]);
}

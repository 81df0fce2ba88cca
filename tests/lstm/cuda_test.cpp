// The LSTM on CUDA (cuDNN sequence ops, cuBLASLt + kernel cell) against the CPU: the same
// weights and inputs, forward, backward (every gradient) and the decoding step, at an RNN-T
// prediction-network size and a small odd size; the multi-layer module's training step too.
// Skipped visibly without a GPU.

#include <gtest/gtest.h>

#include <cmath>

#include "benchhost/device.hpp"
#include "benchhost/nn/lstm.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;

Tensor on(const Tensor& t, const Device& d) { return t.defined() ? t.to(d) : t; }
Tensor back(const Tensor& t) { return t.defined() ? t.to(Device::cpu()) : t; }

struct Case {
  std::int64_t T, B, I, H;
  bool initial;
};

TEST(LstmCuda, OpsMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Device gpu = Device::cuda(0);
  for (const Case c : {Case{3, 2, 5, 3, true}, Case{16, 4, 512, 512, true}, Case{7, 3, 240, 128, false}}) {
    SCOPED_TRACE(fmt::format("T {} B {} I {} H {} initial {}", c.T, c.B, c.I, c.H, c.initial));
    const float s = 1.0f / std::sqrt(static_cast<float>(c.H)) + 0.1f;
    const LstmWeights w{random_tensor({4 * c.H, c.I}, 1, -s, s), random_tensor({4 * c.H, c.H}, 2, -s, s),
                        random_tensor({4 * c.H}, 3, -s, s), random_tensor({4 * c.H}, 4, -s, s)};
    const LstmWeights wg{w.w_ih.to(gpu), w.w_hh.to(gpu), w.b_ih.to(gpu), w.b_hh.to(gpu)};
    const Tensor x = random_tensor({c.T, c.B, c.I}, 5), dy = random_tensor({c.T, c.B, c.H}, 6);
    const LstmState init =
        c.initial ? LstmState{random_tensor({c.B, c.H}, 7), random_tensor({c.B, c.H}, 8)} : LstmState{};
    const LstmState init_g{on(init.h, gpu), on(init.c, gpu)};
    const LstmState dfin{random_tensor({c.B, c.H}, 9), random_tensor({c.B, c.H}, 10)};

    LstmState fc, fg;
    const Tensor yc = lstm_forward(x, w, init, &fc);
    const Tensor yg = lstm_forward(x.to(gpu), wg, init_g, &fg);
    EXPECT_TRUE(tensors_close(back(yg), yc, 1e-5, 1e-4));
    EXPECT_TRUE(tensors_close(back(fg.h), fc.h, 1e-5, 1e-4));
    EXPECT_TRUE(tensors_close(back(fg.c), fc.c, 1e-5, 1e-4));

    LstmWeightGrads gc{Tensor::zeros(w.w_ih.shape()), Tensor::zeros(w.w_hh.shape()), Tensor::zeros(w.b_ih.shape()),
                       Tensor::zeros(w.b_hh.shape())};
    LstmWeightGrads gg{gc.w_ih.to(gpu), gc.w_hh.to(gpu), gc.b_ih.to(gpu), gc.b_hh.to(gpu)};
    const LstmInputGrads rc = lstm_backward(dy, x, w, init, dfin, gc);
    const LstmInputGrads rg = lstm_backward(dy.to(gpu), x.to(gpu), wg, init_g, {dfin.h.to(gpu), dfin.c.to(gpu)}, gg);
    EXPECT_TRUE(tensors_close(back(rg.dx), rc.dx, 1e-5, 1e-4));
    if (c.initial) {
      EXPECT_TRUE(tensors_close(back(rg.dinitial.h), rc.dinitial.h, 1e-5, 1e-4));
      EXPECT_TRUE(tensors_close(back(rg.dinitial.c), rc.dinitial.c, 1e-5, 1e-4));
    }
    EXPECT_TRUE(tensors_close(back(gg.w_ih), gc.w_ih, 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(back(gg.w_hh), gc.w_hh, 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(back(gg.b_ih), gc.b_ih, 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(back(gg.b_hh), gc.b_hh, 1e-4, 1e-4));

    const Tensor x0 = x.select(0, 0).contiguous();
    const LstmState cc = lstm_cell_forward(x0, init, w);
    const LstmState cg = lstm_cell_forward(x0.to(gpu), init_g, wg);
    EXPECT_TRUE(tensors_close(back(cg.h), cc.h, 1e-5, 1e-4));
    EXPECT_TRUE(tensors_close(back(cg.c), cc.c, 1e-5, 1e-4));
  }
}

TEST(LstmCuda, ModuleTrainingStepAndDecodingMatchTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Device gpu = Device::cuda(0);
  DropoutRng rng{5, 1};
  auto run = [&](const Device& device) {
    LSTM m({64, 96, 2, 0.2f, true}, &rng, 0, 3);
    m.to(device);
    const Tensor x = random_tensor({12, 4, 64}, 1).to(device), dy = random_tensor({12, 4, 96}, 2).to(device);
    std::vector<std::vector<float>> out;
    out.push_back(m.forward(x).to_float_vector());
    out.push_back(m.backward(dy).to_float_vector());
    for (auto* p : m.parameters()) out.push_back(p->grad.to_float_vector());
    m.train(false);
    std::vector<LstmState> state;
    for (int t = 0; t < 5; ++t) out.push_back(m.step(x.select(0, t).contiguous(), state).to_float_vector());
    return out;
  };
  const auto c = run(Device::cpu());
  const auto g = run(gpu);
  ASSERT_EQ(c.size(), g.size());
  for (std::size_t i = 0; i < c.size(); ++i)
    EXPECT_LE(benchhost::testing::relative_l2({g[i]}, {c[i]}), 1e-5) << "tensor " << i;
}

}  // namespace
}  // namespace benchhost::nn

// The multi-tensor optimizer ops on the CPU: one call over many tensors equals one call per
// tensor bit for bit (grouping never changes numerics), the ops match plain double arithmetic
// worked out here, and the fp8 references and the policy's math scope behave as documented.
#include <cmath>

#include <gtest/gtest.h>

#include "benchhost/nn/math_mode.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/optim/clip.hpp"
#include "benchhost/optim/ema.hpp"
#include "benchhost/precision.hpp"
#include "nn_optim/optim_cases.hpp"

using namespace benchhost;
using namespace benchhost::optim;
using namespace nn_optim_test;

namespace {

std::vector<float> floats(const Tensor& t) { return t.to(Device::cpu()).to_float_vector(); }

class MultiTensorOptimizer : public ::testing::TestWithParam<OptimizerCase> {};

// All parameters in one optimizer (one multi-tensor call per step) vs one optimizer per
// parameter (calls of one tensor): identical bits for values, state and trust ratios.
TEST_P(MultiTensorOptimizer, OneCallOverAllTensorsEqualsOneCallPerTensor) {
  const OptimizerCase& oc = GetParam();
  ParamSet together = make_params(11), alone = make_params(11);
  auto opt = oc.make(pointers(together));
  std::vector<std::unique_ptr<Optimizer>> singles;
  for (auto& p : alone) singles.push_back(oc.make({p.get()}));
  for (int step = 0; step < 3; ++step) {
    fill_grads(together, 5, step, oc.sparse);
    copy_grads(together, alone);
    opt->step(0.05f);
    for (auto& s : singles) s->step(0.05f);
  }
  auto state = opt->state();
  for (std::size_t i = 0; i < together.size(); ++i) {
    EXPECT_EQ(floats(together[i]->value), floats(alone[i]->value)) << oc.name << " " << together[i]->name;
    auto single_state = singles[i]->state();
    for (const auto& st : single_state) {
      if (st.name == "step") continue;
      bool found = false;
      for (const auto& s : state)
        if (s.name == st.name) {
          found = true;
          EXPECT_EQ(floats(s.tensor), floats(st.tensor)) << oc.name << " " << st.name;
        }
      EXPECT_TRUE(found) << st.name;
    }
    if (auto* lars = dynamic_cast<Lars*>(opt.get()))
      EXPECT_EQ(lars->last_trust_ratio(i), dynamic_cast<Lars*>(singles[i].get())->last_trust_ratio(0));
    if (auto* lamb = dynamic_cast<Lamb*>(opt.get()))
      EXPECT_EQ(lamb->last_trust_ratio(i), dynamic_cast<Lamb*>(singles[i].get())->last_trust_ratio(0));
  }
  // Rows not listed were left alone: row 1 of the sparse parameter never had a listed gradient.
  if (oc.sparse) {
    const ParamSet fresh = make_params(11);
    const auto before = floats(fresh[0]->value), after = floats(together[0]->value);
    for (int k = 5; k < 10; ++k) EXPECT_EQ(before[k], after[k]) << oc.name << " touched unlisted row 1";
  }
}

INSTANTIATE_TEST_SUITE_P(All, MultiTensorOptimizer, ::testing::ValuesIn(optimizer_cases()),
                         [](const auto& info) { return info.param.name; });

// optim_adam_multi called directly, against the Adam formulas in double.
TEST(MultiTensorOps, AdamMatchesFormulaInDouble) {
  nn::OpCall c;
  Tensor g0 = random_tensor({3, 4}, 1, -1, 1), g1 = random_tensor({7}, 2, -1, 1);
  Tensor w0 = random_tensor({3, 4}, 3, -1, 1), w1 = random_tensor({7}, 4, -1, 1);
  Tensor m0 = random_tensor({3, 4}, 5, -0.1f, 0.1f), m1 = random_tensor({7}, 6, -0.1f, 0.1f);
  Tensor v0 = random_tensor({3, 4}, 7, 0, 0.01f), v1 = random_tensor({7}, 8, 0, 0.01f);
  const auto W0 = floats(w0), W1 = floats(w1), G0 = floats(g0), G1 = floats(g1);
  const auto M0 = floats(m0), M1 = floats(m1), V0 = floats(v0), V1 = floats(v1);
  c.inputs = {g0, g1, Tensor::from_vector_i64({2, 0}, {2}), Tensor()};
  c.outputs = {w0, w1, m0, m1, v0, v1};
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, t = 4;
  c.attrs.set("lr", lr).set("beta1", b1).set("beta2", b2).set("epsilon", eps).set("weight_decay", wd)
      .set("step", t).set("decoupled", 1).set_ints("decay", {0, 1});
  nn::dispatch("optim_adam_multi", c);
  auto expect = [&](const std::vector<float>& W, const std::vector<float>& G, const std::vector<float>& M,
                    const std::vector<float>& V, double decay, std::size_t k, float got) {
    const double m = b1 * M[k] + (1 - b1) * G[k], v = b2 * V[k] + (1 - b2) * G[k] * G[k];
    const double want = W[k] - lr * ((m / (1 - std::pow(b1, t))) / (std::sqrt(v / (1 - std::pow(b2, t))) + eps) + decay * W[k]);
    EXPECT_NEAR(got, want, 1e-6) << k;
  };
  const auto out0 = floats(w0), out1 = floats(w1);
  for (std::size_t k = 0; k < 12; ++k) {
    const bool listed = k < 4 || k >= 8;  // rows 0 and 2 of a [3, 4] tensor
    if (listed) expect(W0, G0, M0, V0, 0.0, k, out0[k]);
    else EXPECT_EQ(out0[k], W0[k]) << "row 1 is not listed";
  }
  for (std::size_t k = 0; k < 7; ++k) expect(W1, G1, M1, V1, wd, k, out1[k]);
}

// optim_lars_multi: trust ratio and update in double; the skip-list tensor gets ratio 1.
TEST(MultiTensorOps, LarsTrustRatioAndSkipList) {
  Tensor w0 = random_tensor({50}, 1, -1, 1), w1 = random_tensor({9}, 2, -1, 1);
  Tensor g0 = random_tensor({50}, 3, -1, 1), g1 = random_tensor({9}, 4, -1, 1);
  const auto W0 = floats(w0), G0 = floats(g0), W1 = floats(w1), G1 = floats(g1);
  nn::OpCall c;
  c.inputs = {g0, g1};
  c.outputs = {w0, w1, Tensor::zeros({50}), Tensor::zeros({9}), Tensor::zeros({2})};
  const double lr = 0.5, eta = 0.001, wd = 5e-4;
  c.attrs.set("lr", lr).set("momentum", 0.9).set("weight_decay", wd).set("eta", eta).set("epsilon", 0.0)
      .set_ints("decay", {1, 0});
  nn::dispatch("optim_lars_multi", c);
  double ww = 0, gg = 0;
  for (int k = 0; k < 50; ++k) ww += double(W0[k]) * W0[k], gg += double(G0[k]) * G0[k];
  const double ratio = eta * std::sqrt(ww) / (std::sqrt(gg) + wd * std::sqrt(ww));
  const auto trust = floats(c.outputs[4]);
  EXPECT_NEAR(trust[0], ratio, 1e-6 * ratio);
  EXPECT_EQ(trust[1], 1.0f);
  const auto out0 = floats(w0), out1 = floats(w1);
  for (int k = 0; k < 50; ++k) EXPECT_NEAR(out0[k], W0[k] - lr * ratio * (G0[k] + wd * W0[k]), 1e-6);
  for (int k = 0; k < 9; ++k) EXPECT_NEAR(out1[k], W1[k] - lr * G1[k], 1e-6);
}

TEST(MultiTensorOps, SumSquaresScaleCheckAndLerp) {
  Tensor x0 = random_tensor({4, 3}, 1, -2, 2), x1 = random_tensor({20000}, 2, -2, 2);
  const auto X0 = floats(x0), X1 = floats(x1);
  nn::OpCall s;
  s.inputs = {x0, x1, Tensor::from_vector_i64({3, 1}, {2}), Tensor()};
  s.outputs = {Tensor::zeros({2}, DType::f64)};
  nn::dispatch("multi_tensor_sumsq", s);
  double want0 = 0, want1 = 0;
  for (int k : {9, 10, 11, 3, 4, 5}) want0 += double(X0[k]) * X0[k];
  for (float v : X1) want1 += double(v) * v;
  EXPECT_NEAR(s.outputs[0].item({0}), want0, 1e-6 * want0);
  EXPECT_NEAR(s.outputs[0].item({1}), want1, 1e-6 * want1);

  nn::OpCall u;
  u.inputs = {Tensor::full({1}, 0.25), Tensor(), Tensor()};
  u.outputs = {x0, x1, Tensor::full({1}, 7.0)};
  nn::dispatch("multi_tensor_scale_check", u);
  EXPECT_EQ(u.outputs[2].item({0}), 0.0) << "found_inf is overwritten, not accumulated";
  EXPECT_EQ(floats(x1)[123], X1[123] * 0.25f);
  x1.data<float>()[19999] = NAN;
  nn::dispatch("multi_tensor_scale_check", u);
  EXPECT_EQ(u.outputs[2].item({0}), 1.0);

  Tensor w = random_tensor({100}, 3, -1, 1), shadow = random_tensor({100}, 4, -1, 1);
  const auto Wv = floats(w), Sv = floats(shadow);
  nn::OpCall l;
  l.inputs = {w};
  l.outputs = {shadow};
  l.attrs.set("decay", 0.9);
  nn::dispatch("multi_tensor_lerp", l);
  for (int k = 0; k < 100; ++k) EXPECT_NEAR(floats(shadow)[k], 0.9 * Sv[k] + 0.1 * Wv[k], 1e-6);
}

TEST(MultiTensorOps, BadCallsAreRefusedWithReasons) {
  nn::OpCall c;
  c.inputs = {Tensor::zeros({3}), Tensor()};
  c.outputs = {Tensor::zeros({4}), Tensor()};
  c.attrs.set("lr", 0.1).set("momentum", 0.0).set("weight_decay", 0.0).set_ints("decay", {1});
  EXPECT_THROW(nn::dispatch("optim_sgd_multi", c), InvalidArgument);  // grad shape
  c.inputs = {Tensor::zeros({4, 2}), Tensor::from_vector_i64({4}, {1})};
  c.outputs = {Tensor::zeros({4, 2}), Tensor()};
  EXPECT_THROW(nn::dispatch("optim_sgd_multi", c), InvalidArgument);  // row out of range
  c.inputs[1] = Tensor();
  c.attrs.set_ints("decay", {});
  EXPECT_THROW(nn::dispatch("optim_sgd_multi", c), InvalidArgument);  // decay flags missing
}

TEST(MultiTensorOps, EveryOpHasACpuReferenceAndCases) {
  for (const char* name : {"optim_sgd_multi", "optim_lars_multi", "optim_lamb_multi", "optim_adam_multi",
                           "optim_adagrad_multi", "multi_tensor_sumsq", "multi_tensor_scale_check",
                           "multi_tensor_lerp", "multi_tensor_fill", "fp8_cast_scaled", "matmul_fp8"}) {
    const nn::OpDef* def = nn::OpRegistry::instance().find(name);
    ASSERT_NE(def, nullptr) << name;
    EXPECT_TRUE(static_cast<bool>(def->make_cases)) << name;
    bool ref = false;
    for (const auto& impl : def->impls) ref |= impl.is_reference && impl.device == DeviceType::cpu;
    EXPECT_TRUE(ref) << name;
  }
}

// Clipping and EMA go through the ops: spot checks against plain arithmetic.
TEST(MultiTensorOps, ClipAndEmaThroughTheOps) {
  ParamSet ps = make_params(3);
  fill_grads(ps, 4, 0, /*sparse=*/true);
  double total = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto g = floats(ps[i]->grad);
    for (std::size_t k = 0; k < g.size(); ++k) {
      if (i == 0 && !(k / 5 == 3 || k / 5 == 0 || k / 5 == 30 || k / 5 == 11)) continue;
      total += double(g[k]) * g[k];
    }
  }
  const float norm = global_grad_norm(pointers(ps));
  EXPECT_NEAR(norm, std::sqrt(total), 1e-6 * std::sqrt(total));
  const float g3 = floats(ps[3]->grad)[77];
  EXPECT_EQ(clip_grad_norm(pointers(ps), 1.0f), norm);
  EXPECT_NEAR(floats(ps[3]->grad)[77], g3 * (1.0 / (norm + 1e-6)), 1e-6);
}

TEST(Fp8Reference, CastRecordsAmaxAndSaturates) {
  nn::OpCall c;
  c.inputs = {Tensor::from_vector({0.5f, -3.0f, 1.0f, 0.0f}, {4}), Tensor::full({1}, 200.0)};
  c.outputs = {Tensor::zeros({4}, DType::f8e4m3), Tensor::zeros({1})};
  nn::dispatch("fp8_cast_scaled", c);
  EXPECT_EQ(c.outputs[1].item({0}), 3.0);  // amax of the unscaled input
  const auto y = floats(c.outputs[0]);
  EXPECT_EQ(y[0], 96.0f);    // 100 rounds to 96 in e4m3 (3 mantissa bits)
  EXPECT_EQ(y[1], -448.0f);  // -600 saturates
  EXPECT_EQ(y[2], 192.0f);   // 200 -> 192
  EXPECT_EQ(y[3], 0.0f);
}

TEST(Fp8Reference, MatmulIsTheDequantisedProduct) {
  auto q = [](std::vector<float> v, Shape s) { return Tensor::from_vector(v, s).to(DType::f8e4m3); };
  nn::OpCall c;
  // a [2, 2] = {{2, 4}, {1, 0.5}} * (scale_inv 0.5); b [2, 2] = {{1, 2}, {3, 8}} * 0.25
  c.inputs = {q({2, 4, 1, 0.5f}, {2, 2}), q({1, 2, 3, 8}, {2, 2}), Tensor::full({1}, 0.5), Tensor::full({1}, 0.25)};
  c.outputs = {Tensor::zeros({2, 2}), Tensor::zeros({1})};
  nn::dispatch("matmul_fp8", c);
  // d[m][n] = 0.125 * sum_k a[m][k] b[n][k]
  EXPECT_EQ(floats(c.outputs[0]), (std::vector<float>{0.125f * 10, 0.125f * 38, 0.125f * 2, 0.125f * 7}));
  EXPECT_EQ(c.outputs[1].item({0}), 0.125 * 38);

  // fp8 output: scaled by d_scale and saturated; amax of the unscaled result.
  c.inputs.push_back(Tensor::full({1}, 2.0));
  c.outputs = {Tensor::zeros({2, 2}, DType::f8e4m3), Tensor::zeros({1})};
  nn::dispatch("matmul_fp8", c);
  EXPECT_EQ(floats(c.outputs[0]), (std::vector<float>{2.5f, 10.0f, 0.5f, 1.75f}));  // 9.5 ties to 10
  EXPECT_EQ(c.outputs[1].item({0}), 0.125 * 38);
  c.inputs.pop_back();
  EXPECT_THROW(nn::dispatch("matmul_fp8", c), InvalidArgument) << "an fp8 d needs d_scale";
}

TEST(PrecisionMathScope, Tf32OnlyForTheTf32Policy) {
  const auto h100 = DeviceCaps::cuda(9, 0, "H100");
  ASSERT_FALSE(nn::tf32_enabled());
  {
    auto math = PrecisionPolicy::create(Precision::tf32, h100).math_scope();
    EXPECT_TRUE(nn::tf32_enabled());
    {
      auto inner = PrecisionPolicy::create(Precision::fp32, h100).math_scope();
      EXPECT_FALSE(nn::tf32_enabled()) << "an fp32 policy inside a tf32 caller is true fp32";
    }
    EXPECT_TRUE(nn::tf32_enabled());
  }
  EXPECT_FALSE(nn::tf32_enabled());
  for (Precision p : {Precision::fp16, Precision::bf16, Precision::fp8}) {
    auto math = PrecisionPolicy::create(p, h100).math_scope();
    EXPECT_FALSE(nn::tf32_enabled()) << precision_name(p);
  }
}

}  // namespace

// The LSTM ops and module (nn/lstm.hpp) on the CPU: oneDNN against the plain reference on random
// shapes, finite differences for every input and parameter (op and module, dropout included),
// gradient accumulation, the single-step cell against the sequence op at T = 1, step() chained
// over a sequence against forward(), parameter names and initialisation, and bad arguments.

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "benchhost/error.hpp"
#include "benchhost/nn/lstm.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/random.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;
using V = std::vector<Tensor>;

LstmWeights random_weights(std::int64_t I, std::int64_t H, std::uint64_t seed, float scale = 0.7f) {
  return {random_tensor({4 * H, I}, seed, -scale, scale), random_tensor({4 * H, H}, seed + 1, -scale, scale),
          random_tensor({4 * H}, seed + 2, -0.5f, 0.5f), random_tensor({4 * H}, seed + 3, -0.5f, 0.5f)};
}

const OpImpl& impl_named(const char* op, const char* name) {
  for (const OpImpl& impl : OpRegistry::instance().get(op).impls)
    if (impl.name == name) return impl;
  throw std::runtime_error(std::string(op) + " has no implementation " + name);
}

// Run implementation `impl` of `op` on a copy of `call` (outputs cloned).
OpCall run_impl(const char* op, const char* impl, const OpCall& call) {
  OpCall c{call.inputs, {}, call.attrs};
  for (const Tensor& t : call.outputs) c.outputs.push_back(t.defined() ? t.clone() : t);
  impl_named(op, impl).run(c);
  return c;
}

TEST(LstmOps, OnednnMatchesReferenceOnRandomShapes) {
  Rng r(7, 1);
  for (int n = 0; n < 6; ++n) {
    const std::int64_t T = 1 + static_cast<std::int64_t>(r.below(8)), B = 1 + static_cast<std::int64_t>(r.below(6));
    const std::int64_t I = 1 + static_cast<std::int64_t>(r.below(40)), H = 1 + static_cast<std::int64_t>(r.below(40));
    const bool initial = n % 2 == 1;
    SCOPED_TRACE(fmt::format("T {} B {} I {} H {} initial {}", T, B, I, H, initial));
    const LstmWeights w = random_weights(I, H, 100 + n, 1.0f / std::sqrt(static_cast<float>(H)) + 0.2f);
    const Tensor x = random_tensor({T, B, I}, 200 + n);
    const Tensor h0 = initial ? random_tensor({B, H}, 300 + n) : Tensor();
    const Tensor c0 = initial ? random_tensor({B, H}, 400 + n, -2.0f, 2.0f) : Tensor();
    OpCall f{{x, h0, c0, w.w_ih, w.w_hh, w.b_ih, w.b_hh},
             {Tensor::empty({T, B, H}), Tensor::empty({B, H}), Tensor::empty({B, H})},
             {}};
    const OpCall fo = run_impl("lstm_forward", "cpu.onednn", f), fr = run_impl("lstm_forward", "cpu.ref", f);
    for (int o = 0; o < 3; ++o) EXPECT_TRUE(tensors_close(fo.outputs[o], fr.outputs[o], 1e-5, 1e-4)) << "output " << o;

    OpCall b{{x, h0, c0, w.w_ih, w.w_hh, w.b_ih, w.b_hh, random_tensor({T, B, H}, 500 + n),
              initial ? random_tensor({B, H}, 600 + n) : Tensor(), initial ? random_tensor({B, H}, 700 + n) : Tensor()},
             {Tensor::empty({T, B, I}), initial ? Tensor::empty({B, H}) : Tensor(),
              initial ? Tensor::empty({B, H}) : Tensor(), Tensor::zeros({4 * H, I}), Tensor::zeros({4 * H, H}),
              Tensor::zeros({4 * H}), Tensor::zeros({4 * H})},
             {}};
    const OpCall bo = run_impl("lstm_backward", "cpu.onednn", b), br = run_impl("lstm_backward", "cpu.ref", b);
    for (int o = 0; o < 7; ++o) {
      if (!br.outputs[o].defined()) continue;
      EXPECT_TRUE(tensors_close(bo.outputs[o], br.outputs[o], 2e-5, 2e-4)) << "gradient output " << o;
    }
  }
}

// Finite differences through the public functions: every input, both states and parameters.
TEST(LstmOps, GradientsMatchFiniteDifferencesWithInitialState) {
  const std::int64_t T = 4, B = 2, I = 3, H = 5;
  const LstmWeights w = random_weights(I, H, 11);
  const V inputs = {random_tensor({T, B, I}, 1), random_tensor({B, H}, 2), random_tensor({B, H}, 3, -2.0f, 2.0f),
                    w.w_ih, w.w_hh, w.b_ih, w.b_hh};
  auto weights = [](const V& in) { return LstmWeights{in[3], in[4], in[5], in[6]}; };
  EXPECT_GRADCHECK(
      [&](const V& in) {
        LstmState fin;
        Tensor y = lstm_forward(in[0], weights(in), {in[1], in[2]}, &fin);
        return V{y, fin.h, fin.c};
      },
      [&](const V& in, const V& d) {
        LstmWeightGrads g{Tensor::zeros(in[3].shape()), Tensor::zeros(in[4].shape()), Tensor::zeros(in[5].shape()),
                          Tensor::zeros(in[6].shape())};
        const LstmInputGrads r = lstm_backward(d[0], in[0], weights(in), {in[1], in[2]}, {d[1], d[2]}, g);
        return V{r.dx, r.dinitial.h, r.dinitial.c, g.w_ih, g.w_hh, g.b_ih, g.b_hh};
      },
      inputs);
}

TEST(LstmOps, GradientsMatchFiniteDifferencesFromZeroState) {
  const std::int64_t T = 3, B = 3, I = 4, H = 3;
  const LstmWeights w = random_weights(I, H, 21);
  const V inputs = {random_tensor({T, B, I}, 4), w.w_ih, w.w_hh, w.b_ih, w.b_hh};
  auto weights = [](const V& in) { return LstmWeights{in[1], in[2], in[3], in[4]}; };
  EXPECT_GRADCHECK([&](const V& in) { return V{lstm_forward(in[0], weights(in))}; },
                   [&](const V& in, const V& d) {
                     LstmWeightGrads g{Tensor::zeros(in[1].shape()), Tensor::zeros(in[2].shape()),
                                       Tensor::zeros(in[3].shape()), Tensor::zeros(in[4].shape())};
                     const LstmInputGrads r = lstm_backward(d[0], in[0], weights(in), {}, {}, g);
                     EXPECT_FALSE(r.dinitial.defined()) << "no initial state given, none returned";
                     return V{r.dx, g.w_ih, g.w_hh, g.b_ih, g.b_hh};
                   },
                   inputs);
}

TEST(LstmOps, WeightGradientsAccumulateAndBothBiasesGetTheSame) {
  const std::int64_t T = 5, B = 2, I = 6, H = 4;
  const LstmWeights w = random_weights(I, H, 31);
  const Tensor x = random_tensor({T, B, I}, 5), dy = random_tensor({T, B, H}, 6);
  LstmWeightGrads fresh{Tensor::zeros({4 * H, I}), Tensor::zeros({4 * H, H}), Tensor::zeros({4 * H}),
                        Tensor::zeros({4 * H})};
  lstm_backward(dy, x, w, {}, {}, fresh);
  EXPECT_TRUE(tensors_close(fresh.b_ih, fresh.b_hh, 0.0, 0.0));
  LstmWeightGrads acc{random_tensor({4 * H, I}, 7), random_tensor({4 * H, H}, 8), random_tensor({4 * H}, 9),
                      random_tensor({4 * H}, 10)};
  const LstmWeightGrads start{acc.w_ih.clone(), acc.w_hh.clone(), acc.b_ih.clone(), acc.b_hh.clone()};
  lstm_backward(dy, x, w, {}, {}, acc);
  auto sum = [](const Tensor& a, const Tensor& b) {
    Tensor s = a.clone();
    for (std::int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] += b.data<float>()[i];
    return s;
  };
  EXPECT_TRUE(tensors_close(acc.w_ih, sum(start.w_ih, fresh.w_ih), 1e-6, 1e-6));
  EXPECT_TRUE(tensors_close(acc.w_hh, sum(start.w_hh, fresh.w_hh), 1e-6, 1e-6));
  EXPECT_TRUE(tensors_close(acc.b_ih, sum(start.b_ih, fresh.b_ih), 1e-6, 1e-6));
  EXPECT_TRUE(tensors_close(acc.b_hh, sum(start.b_hh, fresh.b_hh), 1e-6, 1e-6));
  // Skipped gradients are allowed.
  LstmWeightGrads only_bias{Tensor(), Tensor(), Tensor::zeros({4 * H}), Tensor()};
  lstm_backward(dy, x, w, {}, {}, only_bias);
  EXPECT_TRUE(tensors_close(only_bias.b_ih, fresh.b_ih, 0.0, 0.0));
}

// The cell equals the sequence op at T = 1 to f32 rounding (different kernels: a oneDNN matmul
// plus our pointwise pass against oneDNN's LSTM).
TEST(LstmCell, EqualsSequenceAtOneStep) {
  struct Shape4 {
    std::int64_t B, I, H;
  };
  for (const Shape4 s : {Shape4{1, 2, 2}, Shape4{3, 7, 16}, Shape4{4, 240, 64}, Shape4{2, 512, 512}})
    for (bool with_state : {false, true}) {
      SCOPED_TRACE(fmt::format("B {} I {} H {} state {}", s.B, s.I, s.H, with_state));
      const LstmWeights w = random_weights(s.I, s.H, 41, 1.0f / std::sqrt(static_cast<float>(s.H)));
      const Tensor x = random_tensor({s.B, s.I}, 42);
      const LstmState st = with_state ? LstmState{random_tensor({s.B, s.H}, 43), random_tensor({s.B, s.H}, 44)}
                                      : LstmState{};
      const LstmState cell = lstm_cell_forward(x, st, w);
      LstmState fin;
      const Tensor y = lstm_forward(x.unsqueeze(0), w, st, &fin);
      EXPECT_TRUE(tensors_close(cell.h, y.select(0, 0).contiguous(), 2e-6, 1e-5));
      EXPECT_TRUE(tensors_close(cell.h, fin.h, 2e-6, 1e-5));
      EXPECT_TRUE(tensors_close(cell.c, fin.c, 2e-6, 1e-5));
    }
}

// ---------------------------------------------------------------------------------------------
// nn::LSTM
// ---------------------------------------------------------------------------------------------

TEST(LstmModule, ParameterNamesShapesAndPyTorchInit) {
  LSTM m({240, 32, 3});
  const auto params = m.parameters();
  ASSERT_EQ(params.size(), 12u);
  const float bound = 1.0f / std::sqrt(32.0f);
  for (int k = 0; k < 3; ++k) {
    const auto* wih = params[static_cast<std::size_t>(4 * k)];
    EXPECT_EQ(wih->name, fmt::format("weight_ih_l{}", k));
    EXPECT_EQ(params[static_cast<std::size_t>(4 * k + 1)]->name, fmt::format("weight_hh_l{}", k));
    EXPECT_EQ(params[static_cast<std::size_t>(4 * k + 2)]->name, fmt::format("bias_ih_l{}", k));
    EXPECT_EQ(params[static_cast<std::size_t>(4 * k + 3)]->name, fmt::format("bias_hh_l{}", k));
    EXPECT_EQ(wih->value.shape(), Shape({128, k == 0 ? 240 : 32}));
    EXPECT_EQ(params[static_cast<std::size_t>(4 * k + 1)]->value.shape(), Shape({128, 32}));
    EXPECT_FALSE(params[static_cast<std::size_t>(4 * k + 2)]->weight_decay);
  }
  EXPECT_EQ(m.num_parameters(), 4 * 32 * (240 + 32) + 2 * 4 * 32 * (32 + 32) + 3 * 2 * 4 * 32);
  double lo = 1, hi = -1;
  for (auto* p : params)
    for (float v : p->value.to_float_vector()) {
      lo = std::min<double>(lo, v);
      hi = std::max<double>(hi, v);
    }
  EXPECT_GE(lo, -bound);
  EXPECT_LT(hi, bound);
  EXPECT_LT(lo, -0.9 * bound) << "U(-1/sqrt(H), 1/sqrt(H)) should reach near its ends";
  EXPECT_GT(hi, 0.9 * bound);
}

TEST(LstmModule, StepChainedOverTheSequenceEqualsForward) {
  LSTM m({6, 8, 3}, nullptr, 0, 5);
  m.train(false);
  const std::int64_t T = 7, B = 3;
  const Tensor x = random_tensor({T, B, 6}, 51);
  std::vector<LstmState> initial;
  for (int k = 0; k < 3; ++k) initial.push_back({random_tensor({B, 8}, 60 + k), random_tensor({B, 8}, 70 + k)});
  for (bool from_zero : {true, false}) {
    SCOPED_TRACE(from_zero ? "zero initial state" : "given initial state");
    std::vector<LstmState> fin;
    const Tensor y = m.forward(x, from_zero ? std::vector<LstmState>{} : initial, &fin);
    std::vector<LstmState> state = from_zero ? std::vector<LstmState>{} : initial;
    for (std::int64_t t = 0; t < T; ++t) {
      const Tensor out = m.step(x.select(0, t).contiguous(), state);
      EXPECT_TRUE(tensors_close(out, y.select(0, t).contiguous(), 1e-5, 1e-4)) << "step " << t;
    }
    ASSERT_EQ(state.size(), 3u);
    for (std::size_t k = 0; k < 3; ++k) {
      EXPECT_TRUE(tensors_close(state[k].h, fin[k].h, 1e-5, 1e-4)) << "layer " << k;
      EXPECT_TRUE(tensors_close(state[k].c, fin[k].c, 1e-5, 1e-4)) << "layer " << k;
    }
  }
}

TEST(LstmModule, DropoutBetweenLayersAndOptionallyAfterTheLast) {
  DropoutRng rng{123, 4};
  const Tensor x = random_tensor({5, 4, 6}, 81);
  auto zero_fraction = [](const Tensor& t) {
    std::int64_t z = 0;
    for (float v : t.to_float_vector()) z += v == 0.0f;
    return static_cast<double>(z) / static_cast<double>(t.numel());
  };
  LSTM plain({6, 16, 2, 0.5f, false}, &rng, 0, 1);
  LSTM after({6, 16, 2, 0.5f, true}, &rng, 0, 1);
  EXPECT_EQ(zero_fraction(plain.forward(x)), 0.0) << "the last layer's output is not dropped by default";
  const double f = zero_fraction(after.forward(x));
  EXPECT_GT(f, 0.35);
  EXPECT_LT(f, 0.65);
  after.train(false);
  EXPECT_EQ(zero_fraction(after.forward(x)), 0.0) << "no dropout in eval mode";
}

// The module's backward (two layers, dropout between and after) against finite differences of
// its forward, for the input and every parameter.
TEST(LstmModule, BackwardMatchesFiniteDifferences) {
  DropoutRng rng{99, 2};
  LSTM m({3, 4, 2, 0.3f, true}, &rng, 10, 3);
  const auto params = m.parameters();
  V inputs = {random_tensor({3, 2, 3}, 91)};
  for (auto* p : params) inputs.push_back(p->value.clone());
  auto load = [&](const V& in) {
    for (std::size_t j = 0; j < params.size(); ++j) params[j]->value.copy_(in[j + 1]);
  };
  EXPECT_GRADCHECK(
      [&](const V& in) {
        load(in);
        return V{m.forward(in[0])};
      },
      [&](const V& in, const V& d) {
        load(in);
        m.zero_grad();
        m.forward(in[0]);
        V out = {m.backward(d[0])};
        for (auto* p : params) out.push_back(p->grad.clone());
        return out;
      },
      inputs);
}

TEST(LstmModule, BackwardWithoutForwardIsRefused) {
  LSTM m({3, 4, 1});
  EXPECT_THROW(m.backward(Tensor::zeros({2, 1, 4})), InvalidArgument);
  m.train(false);
  m.forward(random_tensor({2, 1, 3}, 1));
  EXPECT_THROW(m.backward(Tensor::zeros({2, 1, 4})), InvalidArgument) << "an eval-mode forward keeps nothing";
}

TEST(LstmOps, BadArgumentsNameWhatIsWrong) {
  const LstmWeights w = random_weights(3, 4, 1);
  auto message_of = [](auto&& f) {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no InvalidArgument");
  };
  EXPECT_NE(message_of([&] { lstm_forward(random_tensor({2, 1, 5}, 1), w); }).find("input must be [T, B, I]"),
            std::string::npos);
  EXPECT_NE(message_of([&] { lstm_forward(random_tensor({2, 3}, 1), w); }).find("lstm_forward"), std::string::npos);
  LstmWeights bad = w;
  bad.b_hh = Tensor::zeros({15});
  EXPECT_NE(message_of([&] { lstm_forward(random_tensor({2, 1, 3}, 1), bad); }).find("bias_hh"), std::string::npos);
  EXPECT_NE(message_of([&] { lstm_forward(random_tensor({2, 1, 3}, 1), w, {Tensor::zeros({1, 4}), Tensor()}); })
                .find("both h and c"),
            std::string::npos);
  EXPECT_NE(message_of([&] { lstm_cell_forward(random_tensor({2, 3}, 1), {Tensor::zeros({1, 4}), Tensor::zeros({1, 4})}, w); })
                .find("state.h"),
            std::string::npos);
  EXPECT_THROW(LSTM({3, 4, 2, 0.2f}), InvalidArgument) << "dropout without a DropoutRng";
}

TEST(LstmOps, RegisteredForTheWalks) {
  for (const char* op : {"lstm_forward", "lstm_backward", "lstm_cell_forward"}) {
    const OpDef* def = OpRegistry::instance().find(op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_TRUE(static_cast<bool>(def->make_cases)) << op;
    std::set<std::string> names;
    for (const OpImpl& impl : def->impls) names.insert(impl.name);
    EXPECT_TRUE(names.count("cpu.ref")) << op;
    EXPECT_EQ(def->impls.back().name, "cpu.ref") << op << ": the reference comes last";
  }
}

}  // namespace
}  // namespace benchhost::nn

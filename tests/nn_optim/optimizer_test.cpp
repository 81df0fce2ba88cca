// Optimizer updates against steps worked out by hand (plain double arithmetic in the test).
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include "benchhost/nn/serialize.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/random.hpp"
#include "nn_optim/test_util.hpp"

using namespace benchhost;
using namespace benchhost::optim;
using nn_optim_test::make_param;
using nn_optim_test::set_grad;
using nn_optim_test::values;

namespace {
constexpr double kTol = 1e-6;
}

TEST(Sgd, PlainStepWithWeightDecayOnlyOnDecayParams) {
  auto w = make_param("w", {1.0f, -2.0f}, {2});
  auto b = make_param("b", {0.5f}, {1}, /*weight_decay=*/false);
  Sgd opt({w.get(), b.get()}, {.weight_decay = 0.1f});
  set_grad(*w, {0.5f, 0.25f});
  set_grad(*b, {1.0f});
  opt.step(0.1f);
  // w -= lr * (g + wd*w);  b -= lr * g (no decay)
  EXPECT_NEAR(values(*w)[0], 1.0 - 0.1 * (0.5 + 0.1 * 1.0), kTol);
  EXPECT_NEAR(values(*w)[1], -2.0 - 0.1 * (0.25 + 0.1 * -2.0), kTol);
  EXPECT_NEAR(values(*b)[0], 0.5 - 0.1 * 1.0, kTol);
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(Sgd, MomentumThreeSteps) {
  auto w = make_param("w", {1.0f}, {1});
  Sgd opt({w.get()}, {.momentum = 0.9f});
  const float grads[3] = {0.5f, 0.5f, -1.0f};
  // buf1 = 0.5            w1 = 1 - 0.1*0.5 = 0.95
  // buf2 = 0.45+0.5=0.95  w2 = 0.95 - 0.095 = 0.855
  // buf3 = 0.855-1=-0.145 w3 = 0.855 + 0.0145 = 0.8695
  const double expected[3] = {0.95, 0.855, 0.8695};
  for (int s = 0; s < 3; ++s) {
    set_grad(*w, {grads[s]});
    opt.step(0.1f);
    EXPECT_NEAR(values(*w)[0], expected[s], kTol) << "step " << s + 1;
  }
}

TEST(Sgd, NesterovTwoSteps) {
  auto w = make_param("w", {1.0f}, {1});
  Sgd opt({w.get()}, {.momentum = 0.9f, .nesterov = true});
  set_grad(*w, {0.5f});
  opt.step(0.1f);
  // buf = 0.5; d = 0.5 + 0.9*0.5 = 0.95; w = 1 - 0.095
  EXPECT_NEAR(values(*w)[0], 0.905, kTol);
  opt.step(0.1f);
  // buf = 0.45 + 0.5 = 0.95; d = 0.5 + 0.855 = 1.355; w = 0.905 - 0.1355
  EXPECT_NEAR(values(*w)[0], 0.7695, kTol);
  EXPECT_THROW(Sgd({w.get()}, {.momentum = 0.0f, .nesterov = true}), InvalidArgument);
}

TEST(Adam, TwoStepsMatchHandComputation) {
  auto w = make_param("w", {1.0f}, {1});
  Adam opt({w.get()});
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8, lr = 0.1;
  double m = 0, v = 0, x = 1.0;
  const float grads[3] = {0.5f, -1.0f, 0.25f};
  for (int t = 1; t <= 3; ++t) {
    const double g = grads[t - 1];
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    x -= lr * (m / (1 - std::pow(b1, t))) / (std::sqrt(v / (1 - std::pow(b2, t))) + eps);
    set_grad(*w, {grads[t - 1]});
    opt.step(static_cast<float>(lr));
    EXPECT_NEAR(values(*w)[0], x, 1e-5) << "step " << t;
  }
  // Step 1 of Adam moves every weight by lr (m^/sqrt(v^) = sign(g)): 1 - 0.1.
  auto w2 = make_param("w2", {1.0f}, {1});
  Adam once({w2.get()});
  set_grad(*w2, {0.5f});
  once.step(0.1f);
  EXPECT_NEAR(values(*w2)[0], 0.9, 1e-6);
}

TEST(Adam, L2DecayGoesIntoTheGradientAdamWDecouplesIt) {
  auto a = make_param("a", {2.0f}, {1});
  auto b = make_param("b", {2.0f}, {1});
  Adam adam({a.get()}, {.weight_decay = 0.5f});
  AdamW adamw({b.get()}, {.weight_decay = 0.5f});
  set_grad(*a, {0.5f});
  set_grad(*b, {0.5f});
  adam.step(0.1f);
  adamw.step(0.1f);
  // Adam: g' = 0.5 + 0.5*2 = 1.5; first step moves by lr*sign(g') = 0.1.
  EXPECT_NEAR(values(*a)[0], 1.9, 1e-6);
  // AdamW: w -= lr*(sign(g) + wd*w) = 2 - 0.1*(1 + 1) = 1.8.
  EXPECT_NEAR(values(*b)[0], 1.8, 1e-6);
  EXPECT_STREQ(adamw.name(), "adamw");
  // A skip-list parameter gets no decoupled decay.
  auto c = make_param("c", {2.0f}, {1}, /*weight_decay=*/false);
  AdamW nodecay({c.get()}, {.weight_decay = 0.5f});
  set_grad(*c, {0.5f});
  nodecay.step(0.1f);
  EXPECT_NEAR(values(*c)[0], 1.9, 1e-6);
}

TEST(Adagrad, TwoStepsMatchHandComputation) {
  auto w = make_param("w", {1.0f}, {1});
  Adagrad opt({w.get()});
  set_grad(*w, {0.5f});
  opt.step(0.1f);
  // acc = 0.25; w = 1 - 0.1*0.5/0.5 = 0.9
  EXPECT_NEAR(values(*w)[0], 0.9, kTol);
  set_grad(*w, {-1.0f});
  opt.step(0.1f);
  // acc = 1.25; w = 0.9 + 0.1/sqrt(1.25)
  EXPECT_NEAR(values(*w)[0], 0.9 + 0.1 / std::sqrt(1.25), kTol);
}

TEST(Adagrad, LrDecayAndInitialAccumulator) {
  auto w = make_param("w", {0.0f}, {1});
  Adagrad opt({w.get()}, {.initial_accumulator = 1.0f, .lr_decay = 1.0f});
  set_grad(*w, {1.0f});
  opt.step(1.0f);  // clr = 1/(1+0) ; acc = 2 ; w = -1/sqrt(2)
  EXPECT_NEAR(values(*w)[0], -1.0 / std::sqrt(2.0), kTol);
  opt.step(1.0f);  // clr = 1/(1+1) ; acc = 3 ; w -= 0.5/sqrt(3)
  EXPECT_NEAR(values(*w)[0], -1.0 / std::sqrt(2.0) - 0.5 / std::sqrt(3.0), kTol);
}

TEST(Lars, TrustRatioMomentumAndSkipList) {
  auto w = make_param("w", {3.0f, 4.0f}, {2});            // ||w|| = 5
  auto bias = make_param("bias", {1.0f}, {1}, false);      // skip list
  const double eta = 0.001, wd = 0.1, mom = 0.9, lr = 2.0;
  Lars opt({w.get(), bias.get()}, {.momentum = 0.9f, .weight_decay = 0.1f, .eta = 0.001f});
  double x0 = 3, x1 = 4, v0 = 0, v1 = 0, bx = 1, bv = 0;
  for (int s = 0; s < 3; ++s) {
    set_grad(*w, {0.6f, 0.8f});  // ||g|| = 1
    set_grad(*bias, {0.5f});
    const double wn = std::sqrt(x0 * x0 + x1 * x1), gn = 1.0;
    const double ratio = eta * wn / (gn + wd * wn);
    v0 = mom * v0 + lr * ratio * (0.6 + wd * x0);
    v1 = mom * v1 + lr * ratio * (0.8 + wd * x1);
    x0 -= v0;
    x1 -= v1;
    bv = mom * bv + lr * 0.5;  // plain momentum SGD, no decay, no trust ratio
    bx -= bv;
    opt.step(static_cast<float>(lr));
    EXPECT_NEAR(values(*w)[0], x0, 1e-6) << "step " << s + 1;
    EXPECT_NEAR(values(*w)[1], x1, 1e-6) << "step " << s + 1;
    EXPECT_NEAR(values(*bias)[0], bx, 1e-6) << "step " << s + 1;
    EXPECT_NEAR(opt.last_trust_ratio(0), ratio, 1e-7);
    EXPECT_EQ(opt.last_trust_ratio(1), 1.0f);
  }
  // First step by hand: ratio = 0.001*5/(1+0.5) = 1/300; v = 2/300*(0.9, 1.2) = (0.006, 0.008).
  auto w2 = make_param("w", {3.0f, 4.0f}, {2});
  Lars once({w2.get()}, {.momentum = 0.9f, .weight_decay = 0.1f, .eta = 0.001f});
  set_grad(*w2, {0.6f, 0.8f});
  once.step(2.0f);
  EXPECT_NEAR(values(*w2)[0], 2.994, 1e-6);
  EXPECT_NEAR(values(*w2)[1], 3.992, 1e-6);
}

TEST(Lars, ZeroGradientOrWeightsUseRatioOne) {
  auto w = make_param("w", {0.0f, 0.0f}, {2});
  Lars opt({w.get()}, {.momentum = 0.0f, .weight_decay = 0.0f});
  set_grad(*w, {1.0f, -1.0f});
  opt.step(0.5f);
  EXPECT_EQ(opt.last_trust_ratio(0), 1.0f);
  EXPECT_NEAR(values(*w)[0], -0.5, kTol);
  EXPECT_NEAR(values(*w)[1], 0.5, kTol);
}

TEST(Lamb, TwoStepsWithTrustRatioAndSkipList) {
  auto w = make_param("w", {3.0f, 4.0f}, {2});
  auto ln = make_param("ln", {1.0f, -1.0f}, {2}, /*weight_decay=*/false);
  const double b1 = 0.9, b2 = 0.999, eps = 1e-6, wd = 0.01, lr = 0.01;
  Lamb opt({w.get(), ln.get()}, {.weight_decay = 0.01f});
  double x[2] = {3, 4}, m[2] = {0, 0}, v[2] = {0, 0};
  double y[2] = {1, -1}, my[2] = {0, 0}, vy[2] = {0, 0};
  const float grads[2][2] = {{0.3f, -0.4f}, {-0.1f, 0.2f}};
  for (int t = 1; t <= 2; ++t) {
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    double u[2], wn = 0, un = 0;
    for (int i = 0; i < 2; ++i) {
      const double g = grads[t - 1][i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      u[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps) + wd * x[i];
      wn += x[i] * x[i];
      un += u[i] * u[i];
    }
    const double ratio = std::sqrt(wn) / std::sqrt(un);
    for (int i = 0; i < 2; ++i) x[i] -= lr * ratio * u[i];
    // skip-list parameter: plain Adam direction, no decay, ratio 1
    for (int i = 0; i < 2; ++i) {
      const double g = grads[t - 1][i] * 2.0;
      my[i] = b1 * my[i] + (1 - b1) * g;
      vy[i] = b2 * vy[i] + (1 - b2) * g * g;
      y[i] -= lr * (my[i] / bc1) / (std::sqrt(vy[i] / bc2) + eps);
    }
    set_grad(*w, {grads[t - 1][0], grads[t - 1][1]});
    set_grad(*ln, {grads[t - 1][0] * 2.0f, grads[t - 1][1] * 2.0f});
    opt.step(static_cast<float>(lr));
    EXPECT_NEAR(values(*w)[0], x[0], 1e-6) << "step " << t;
    EXPECT_NEAR(values(*w)[1], x[1], 1e-6) << "step " << t;
    EXPECT_NEAR(values(*ln)[0], y[0], 1e-6) << "step " << t;
    EXPECT_NEAR(values(*ln)[1], y[1], 1e-6) << "step " << t;
    EXPECT_NEAR(opt.last_trust_ratio(0), ratio, 1e-5);
    EXPECT_EQ(opt.last_trust_ratio(1), 1.0f);
  }
  // Step 1 in closed form: u = sign(g) + wd*w = (1.03, -0.96) (eps negligible), ratio = 5/|u|.
  const double un = std::sqrt(1.03 * 1.03 + 0.96 * 0.96);
  auto w1 = make_param("w", {3.0f, 4.0f}, {2});
  Lamb once({w1.get()}, {.weight_decay = 0.01f});
  set_grad(*w1, {0.3f, -0.4f});
  once.step(0.01f);
  EXPECT_NEAR(values(*w1)[0], 3.0 - 0.01 * (5.0 / un) * 1.03, 1e-5);
  EXPECT_NEAR(values(*w1)[1], 4.0 + 0.01 * (5.0 / un) * 0.96, 1e-5);
}

// ---- sparse rows ----

TEST(Adagrad, SparseRowsEqualDenseOnTouchedRowsAndLeaveOthersAlone) {
  const std::int64_t rows = 6, cols = 3;
  Rng rng(7);
  std::vector<float> init(rows * cols);
  for (auto& x : init) x = rng.uniform(-1, 1);
  auto dense = make_param("dense", init, {rows, cols});
  auto sparse = make_param("sparse", init, {rows, cols});
  Adagrad dense_opt({dense.get()}, {.epsilon = 1e-10f, .initial_accumulator = 0.1f});
  Adagrad sparse_opt({sparse.get()}, {.epsilon = 1e-10f, .initial_accumulator = 0.1f});
  const std::vector<std::vector<std::int64_t>> touched = {{4, 1, 3}, {1}, {3, 4}};
  for (const auto& step_rows : touched) {
    std::vector<float> g(rows * cols, 0.0f);
    // The sparse gradient holds garbage outside its rows: only sparse_rows may be read.
    std::vector<float> gs(rows * cols, 1e6f);
    for (auto r : step_rows)
      for (std::int64_t c = 0; c < cols; ++c) g[r * cols + c] = gs[r * cols + c] = rng.uniform(-1, 1);
    set_grad(*dense, g);
    set_grad(*sparse, gs);
    sparse->sparse_rows = Tensor::from_vector_i64(step_rows, {static_cast<std::int64_t>(step_rows.size())});
    dense_opt.step(0.05f);
    sparse_opt.step(0.05f);
  }
  const auto d = values(*dense), s = values(*sparse);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto k = r * cols + c;
      EXPECT_FLOAT_EQ(s[k], d[k]) << "row " << r;
      if (r == 0 || r == 2 || r == 5) EXPECT_EQ(s[k], init[k]) << "untouched row " << r << " moved";
      else EXPECT_NE(s[k], init[k]) << "touched row " << r << " did not move";
    }
  // The accumulators of untouched rows stay at their initial value.
  for (const auto& st : sparse_opt.state())
    if (st.name == "sum.sparse") {
      EXPECT_FLOAT_EQ(static_cast<float>(st.tensor.item({0, 0})), 0.1f);
      EXPECT_GT(st.tensor.item({4, 0}), 0.1);
    }
}

TEST(Optimizers, SparseRowsAreValidated) {
  auto e = make_param("emb", std::vector<float>(8, 1.0f), {4, 2});
  Adagrad ada({e.get()});
  e->sparse_rows = Tensor::from_vector_i64({1, 1}, {2});
  EXPECT_THROW(ada.step(0.1f), InvalidArgument);  // duplicate row
  e->sparse_rows = Tensor::from_vector_i64({4}, {1});
  EXPECT_THROW(ada.step(0.1f), InvalidArgument);  // out of range
  EXPECT_EQ(ada.step_count(), 0) << "refused steps must not count";
  e->sparse_rows = Tensor::from_vector_i64({2}, {1});
  Lamb lamb({e.get()});
  EXPECT_THROW(lamb.step(0.1f), InvalidArgument);  // needs the whole tensor
  Adagrad decay({e.get()}, {.weight_decay = 0.1f});
  EXPECT_THROW(decay.step(0.1f), InvalidArgument);  // decay would touch every row
  // SGD without momentum on sparse rows: only row 2 moves.
  Sgd sgd({e.get()});
  set_grad(*e, {9, 9, 9, 9, 0.5f, 0.5f, 9, 9});
  sgd.step(1.0f);
  EXPECT_EQ(values(*e), (std::vector<float>{1, 1, 1, 1, 0.5f, 0.5f, 1, 1}));
}

TEST(Optimizers, RejectBadInputs) {
  auto w = make_param("w", {1.0f}, {1});
  EXPECT_THROW(Sgd({w.get(), w.get()}), InvalidArgument);
  Sgd sgd({w.get()});
  EXPECT_THROW(sgd.step(-1.0f), InvalidArgument);
  EXPECT_THROW(sgd.step(std::nanf("")), InvalidArgument);
  w->grad = Tensor::zeros({2});
  EXPECT_THROW(sgd.step(0.1f), InvalidArgument);
  w->grad = Tensor::zeros({1}, DType::f16);
  EXPECT_THROW(sgd.step(0.1f), InvalidArgument);
  EXPECT_THROW(Lamb({w.get()}, {.beta1 = 1.0f}), InvalidArgument);
  EXPECT_THROW(Adagrad({w.get()}, {.epsilon = 0.0f}), InvalidArgument);
}

TEST(Optimizers, StepWithScheduleUsesStepIndex) {
  auto w = make_param("w", {0.0f}, {1});
  Sgd opt({w.get()});
  WarmupPolySchedule sched({.base_lr = 1.0f, .warmup_steps = 4, .total_steps = 10});
  set_grad(*w, {1.0f});
  opt.step(sched);  // lr(0) = 0.25
  EXPECT_FLOAT_EQ(opt.last_lr(), 0.25f);
  opt.step(sched);  // lr(1) = 0.5
  EXPECT_FLOAT_EQ(opt.last_lr(), 0.5f);
  EXPECT_NEAR(values(*w)[0], -0.75, kTol);
}

TEST(Optimizers, ResultDoesNotDependOnThreadCount) {
  const std::int64_t n = 200000;  // several chunks
  Rng rng(3);
  std::vector<float> w0(n), g(n);
  for (auto& x : w0) x = rng.normal();
  for (auto& x : g) x = rng.normal() * 0.01f;
  auto run = [&](int threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    auto w = make_param("w", w0, {n});
    set_grad(*w, g);
    Lamb opt({w.get()});
    for (int s = 0; s < 3; ++s) opt.step(0.01f);
    return std::make_pair(values(*w), opt.last_trust_ratio(0));
  };
  auto one = run(1), many = run(4);
  EXPECT_EQ(one.second, many.second);
  EXPECT_TRUE(one.first == many.first) << "LAMB differs between 1 and 4 threads";
}

TEST(Optimizers, StateSaveAndLoadContinuesExactly) {
  const auto path = (std::filesystem::temp_directory_path() / "nn_optim_adam_state.bhw").string();
  auto a = make_param("layer.weight", {1.0f, 2.0f, 3.0f}, {3});
  auto b = make_param("layer.weight", {1.0f, 2.0f, 3.0f}, {3});
  Adam opt_a({a.get()});
  for (float g : {0.1f, -0.3f}) {
    set_grad(*a, {g, g * 2, g * 3});
    opt_a.step(0.01f);
  }
  std::vector<nn::NamedTensor> saved;
  for (auto& s : opt_a.state()) saved.push_back({s.name, s.tensor});
  nn::save_tensors(path, saved);
  b->value.copy_(a->value);
  Adam opt_b({b.get()});
  std::vector<StateTensor> loaded;
  for (auto& t : nn::load_tensors(path)) loaded.push_back({t.name, t.tensor});
  opt_b.load_state(loaded);
  EXPECT_EQ(opt_b.step_count(), 2);
  set_grad(*a, {0.2f, 0.2f, 0.2f});
  set_grad(*b, {0.2f, 0.2f, 0.2f});
  opt_a.step(0.01f);
  opt_b.step(0.01f);
  EXPECT_EQ(values(*a), values(*b));
  // A state of another shape is refused with the name.
  auto c = make_param("layer.weight", {1.0f}, {1});
  Adam opt_c({c.get()});
  EXPECT_THROW(opt_c.load_state(loaded), InvalidArgument);
  std::filesystem::remove(path);
}

// Every optimizer actually minimises something: least squares 0.5*|X w - y|^2 / m with a planted
// solution, gradients computed here by hand. The skip-list bias must converge too.
TEST(Optimizers, AllMinimiseALeastSquaresProblem) {
  const int m = 64, d = 8;
  Rng rng(9);
  std::vector<float> X(m * d), w_true(d), y(m);
  for (auto& x : X) x = rng.normal();
  for (auto& x : w_true) x = rng.normal();
  const float b_true = 0.7f;
  for (int i = 0; i < m; ++i) {
    float s = b_true;
    for (int j = 0; j < d; ++j) s += X[i * d + j] * w_true[j];
    y[i] = s;
  }
  auto loss_and_grad = [&](nn::Parameter& w, nn::Parameter& b) {
    const float* wv = w.value.data<float>();
    const float bv = b.value.data<float>()[0];
    std::vector<float> gw(d, 0.0f);
    float gb = 0.0f;
    double loss = 0;
    for (int i = 0; i < m; ++i) {
      float r = bv - y[i];
      for (int j = 0; j < d; ++j) r += X[i * d + j] * wv[j];
      loss += 0.5 * r * r / m;
      for (int j = 0; j < d; ++j) gw[j] += r * X[i * d + j] / m;
      gb += r / m;
    }
    set_grad(w, gw);
    set_grad(b, {gb});
    return loss;
  };
  struct Case {
    const char* name;
    float lr;
    std::function<std::unique_ptr<Optimizer>(std::vector<nn::Parameter*>)> make;
  };
  const std::vector<Case> cases = {
      {"sgd", 0.05f, [](auto p) { return std::make_unique<Sgd>(p, SgdOptions{.momentum = 0.9f}); }},
      {"nesterov", 0.05f, [](auto p) { return std::make_unique<Sgd>(p, SgdOptions{.momentum = 0.9f, .nesterov = true}); }},
      {"lars", 0.05f, [](auto p) { return std::make_unique<Lars>(p, LarsOptions{.momentum = 0.9f, .eta = 0.05f}); }},
      {"lamb", 0.02f, [](auto p) { return std::make_unique<Lamb>(p, LambOptions{.weight_decay = 0.0f}); }},
      {"adam", 0.05f, [](auto p) { return std::make_unique<Adam>(p); }},
      {"adamw", 0.05f, [](auto p) { return std::make_unique<AdamW>(p, AdamOptions{.weight_decay = 0.0f}); }},
      {"adagrad", 0.5f, [](auto p) { return std::make_unique<Adagrad>(p); }},
  };
  for (const auto& c : cases) {
    std::vector<float> w0(d);
    Rng init(1);
    for (auto& x : w0) x = init.normal() * 0.1f;  // LARS needs ||w|| > 0 for its trust ratio
    auto w = make_param("w", w0, {d});
    auto b = make_param("b", {0.0f}, {1}, /*weight_decay=*/false);
    auto opt = c.make({w.get(), b.get()});
    const double initial = loss_and_grad(*w, *b);
    double loss = initial;
    for (int s = 0; s < 400; ++s) {
      opt->step(c.lr);
      loss = loss_and_grad(*w, *b);
    }
    EXPECT_LT(loss, initial * 1e-3) << c.name << ": loss " << initial << " -> " << loss;
    EXPECT_NEAR(values(*b)[0], b_true, 0.05) << c.name;
  }
}

TEST(Adam, SparseRowsAreLazyAndTouchOnlyTheirRows) {
  auto dense = make_param("d", {1, 1, 1, 1, 1, 1}, {3, 2});
  auto sparse = make_param("s", {1, 1, 1, 1, 1, 1}, {3, 2});
  Adam a({dense.get()}), b({sparse.get()});
  set_grad(*dense, {0, 0, 0.5f, -0.5f, 0, 0});
  set_grad(*sparse, {7, 7, 0.5f, -0.5f, 7, 7});
  sparse->sparse_rows = Tensor::from_vector_i64({1}, {1});
  a.step(0.1f);
  b.step(0.1f);
  // First step: touched row moves by lr*sign(g); other rows unchanged in both.
  EXPECT_EQ(values(*sparse), values(*dense));
  EXPECT_NEAR(values(*sparse)[2], 0.9, 1e-6);
  EXPECT_NEAR(values(*sparse)[3], 1.1, 1e-6);
  EXPECT_EQ(values(*sparse)[0], 1.0f);
}

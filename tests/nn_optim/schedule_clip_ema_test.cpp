#include <cmath>
#include <limits>
#include <numbers>

#include <gtest/gtest.h>

#include "benchhost/optim/clip.hpp"
#include "benchhost/optim/ema.hpp"
#include "benchhost/optim/schedule.hpp"
#include "nn_optim/test_util.hpp"

using namespace benchhost;
using namespace benchhost::optim;
using nn_optim_test::make_param;
using nn_optim_test::set_grad;
using nn_optim_test::values;

TEST(Schedule, WarmupThenPolynomialPower2) {
  // MLPerf ResNet-50 shape: warm-up then poly power 2 down to end_lr.
  WarmupPolySchedule s({.base_lr = 1.0f, .warmup_steps = 4, .total_steps = 10, .power = 2.0f,
                        .end_lr = 0.01f});
  EXPECT_FLOAT_EQ(s.lr(0), 0.25f);
  EXPECT_FLOAT_EQ(s.lr(1), 0.5f);
  EXPECT_FLOAT_EQ(s.lr(3), 1.0f);  // last warm-up step reaches the peak
  EXPECT_FLOAT_EQ(s.lr(4), 1.0f);  // decay starts at progress 0
  // step 7: progress 3/6 = 0.5 -> 0.01 + 0.99 * 0.25
  EXPECT_FLOAT_EQ(s.lr(7), 0.2575f);
  // step 9: progress 5/6 -> 0.01 + 0.99 / 36
  EXPECT_FLOAT_EQ(s.lr(9), static_cast<float>(0.01 + 0.99 / 36.0));
  EXPECT_FLOAT_EQ(s.lr(10), 0.01f);  // end of decay
  EXPECT_FLOAT_EQ(s.lr(1000), 0.01f);
  EXPECT_THROW(s.lr(-1), InvalidArgument);
}

TEST(Schedule, LinearPolyWithoutWarmup) {
  // BERT LAMB shape: power 1 from the first step.
  WarmupPolySchedule s({.base_lr = 4e-3f, .warmup_steps = 0, .total_steps = 100});
  EXPECT_FLOAT_EQ(s.lr(0), 4e-3f);
  EXPECT_FLOAT_EQ(s.lr(50), 2e-3f);
  EXPECT_FLOAT_EQ(s.lr(100), 0.0f);
}

TEST(Schedule, WarmupCosine) {
  WarmupCosineSchedule s({.base_lr = 1.0f, .warmup_steps = 2, .total_steps = 6, .min_lr = 0.1f});
  EXPECT_FLOAT_EQ(s.lr(0), 0.5f);
  EXPECT_FLOAT_EQ(s.lr(1), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(2), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(3), static_cast<float>(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4))));
  EXPECT_FLOAT_EQ(s.lr(4), 0.55f);  // half way: (base + min) / 2
  EXPECT_FLOAT_EQ(s.lr(6), 0.1f);
  EXPECT_FLOAT_EQ(s.lr(7), 0.1f);
}

TEST(Schedule, WarmupStepDecay) {
  WarmupStepSchedule s({.base_lr = 1.0f, .warmup_steps = 2, .milestones = {5, 8}, .gamma = 0.1f});
  EXPECT_FLOAT_EQ(s.lr(0), 0.5f);
  EXPECT_FLOAT_EQ(s.lr(2), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(4), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(5), 0.1f);
  EXPECT_FLOAT_EQ(s.lr(7), 0.1f);
  EXPECT_FLOAT_EQ(s.lr(8), 0.01f);
  EXPECT_FLOAT_EQ(ConstantSchedule(0.3f).lr(12345), 0.3f);
}

TEST(Schedule, RejectsBadOptions) {
  EXPECT_THROW(WarmupPolySchedule({.base_lr = 1, .warmup_steps = 10, .total_steps = 10}), InvalidArgument);
  EXPECT_THROW(WarmupPolySchedule({.base_lr = 1, .warmup_steps = 0, .total_steps = 10, .power = 0}), InvalidArgument);
  EXPECT_THROW(WarmupCosineSchedule({.base_lr = -1, .warmup_steps = 0, .total_steps = 10}), InvalidArgument);
  EXPECT_THROW(WarmupStepSchedule({.base_lr = 1, .milestones = {5, 3}}), InvalidArgument);
  EXPECT_EQ(steps_for_epochs(2, 1251), 2502);
  EXPECT_EQ(steps_for_epochs(0.5, 3), 2);
  EXPECT_THROW(steps_for_epochs(-1, 3), InvalidArgument);
}

TEST(Clip, GlobalNormAndScaling) {
  auto a = make_param("a", {0, 0}, {2});
  auto b = make_param("b", {0}, {1});
  set_grad(*a, {3.0f, 4.0f});
  set_grad(*b, {12.0f});
  EXPECT_FLOAT_EQ(global_grad_norm({a.get(), b.get()}), 13.0f);
  // Below the threshold nothing changes.
  EXPECT_FLOAT_EQ(clip_grad_norm({a.get(), b.get()}, 20.0f), 13.0f);
  EXPECT_EQ(a->grad.to_float_vector(), (std::vector<float>{3.0f, 4.0f}));
  // Above it every gradient is scaled by max/norm.
  EXPECT_FLOAT_EQ(clip_grad_norm({a.get(), b.get()}, 6.5f), 13.0f);
  EXPECT_NEAR(a->grad.to_float_vector()[0], 1.5, 1e-5);
  EXPECT_NEAR(a->grad.to_float_vector()[1], 2.0, 1e-5);
  EXPECT_NEAR(b->grad.to_float_vector()[0], 6.0, 1e-5);
  EXPECT_NEAR(global_grad_norm({a.get(), b.get()}), 6.5, 1e-5);
  EXPECT_THROW(clip_grad_norm({a.get()}, 0.0f), InvalidArgument);
}

TEST(Clip, NonFiniteNormLeavesGradientsAlone) {
  auto a = make_param("a", {0, 0}, {2});
  set_grad(*a, {std::numeric_limits<float>::infinity(), 1.0f});
  EXPECT_TRUE(std::isinf(clip_grad_norm({a.get()}, 1.0f)));
  EXPECT_EQ(a->grad.to_float_vector()[1], 1.0f);
}

TEST(Clip, SparseRowsCountOnlyTheirRows) {
  auto e = make_param("emb", {0, 0, 0, 0, 0, 0}, {3, 2});
  set_grad(*e, {100, 100, 3, 4, 100, 100});
  e->sparse_rows = Tensor::from_vector_i64({1}, {1});
  EXPECT_FLOAT_EQ(global_grad_norm({e.get()}), 5.0f);
}

TEST(Ema, UpdateSwapAndRestore) {
  auto w = make_param("w", {1.0f, 10.0f}, {2});
  Ema ema({w.get()}, 0.9f);
  w->value.copy_(Tensor::from_vector({2.0f, 20.0f}, {2}));
  ema.update();  // 0.9*1 + 0.1*2 = 1.1 ; 0.9*10 + 0.1*20 = 11
  w->value.copy_(Tensor::from_vector({3.0f, 30.0f}, {2}));
  ema.update();  // 0.99 + 0.3 = 1.29 ; 9.9 + 3 = 12.9
  EXPECT_NEAR(ema.shadow(0).to_float_vector()[0], 1.29, 1e-6);
  EXPECT_NEAR(ema.shadow(0).to_float_vector()[1], 12.9, 1e-5);
  {
    EmaSwapGuard eval(ema);
    EXPECT_TRUE(ema.swapped());
    EXPECT_NEAR(values(*w)[0], 1.29, 1e-6);
    EXPECT_THROW(ema.update(), InvalidArgument);
  }
  EXPECT_FALSE(ema.swapped());
  EXPECT_EQ(values(*w), (std::vector<float>{3.0f, 30.0f}));
  EXPECT_EQ(ema.num_updates(), 2);
}

TEST(Ema, WarmupDecay) {
  auto w = make_param("w", {0.0f}, {1});
  Ema ema({w.get()}, 0.999f, /*warmup=*/true);
  w->value.fill_(1.0);
  ema.update();  // decay = min(0.999, 2/11)
  EXPECT_FLOAT_EQ(ema.last_decay(), 2.0f / 11.0f);
  EXPECT_NEAR(ema.shadow(0).to_float_vector()[0], 1.0 - 2.0 / 11.0, 1e-6);
  EXPECT_THROW(Ema({w.get()}, 1.0f), InvalidArgument);
}

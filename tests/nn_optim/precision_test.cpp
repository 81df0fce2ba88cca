#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "benchhost/precision.hpp"
#include "nn_optim/test_util.hpp"

using namespace benchhost;
using nn_optim_test::make_param;
using nn_optim_test::set_grad;

namespace {

std::string unsupported_message(Precision p, const DeviceCaps& caps) {
  try {
    PrecisionPolicy::create(p, caps);
  } catch (const Unsupported& e) {
    return e.message();
  }
  return "";
}

}  // namespace

TEST(Precision, NamesParse) {
  EXPECT_EQ(parse_precision("fp32"), Precision::fp32);
  EXPECT_EQ(parse_precision("BF16"), Precision::bf16);
  EXPECT_EQ(parse_precision("half"), Precision::fp16);
  EXPECT_EQ(parse_precision("fp8"), Precision::fp8);
  EXPECT_THROW(parse_precision("fp12"), InvalidArgument);
  EXPECT_STREQ(precision_name(Precision::tf32), "tf32");
  EXPECT_STREQ(op_class_name(OpClass::embedding), "embedding");
}

TEST(Precision, CpuFp32IsFp32Everywhere) {
  auto p = PrecisionPolicy::create("fp32", Device::cpu());
  for (int i = 0; i < kNumOpClasses; ++i) {
    const auto& o = p.op(static_cast<OpClass>(i));
    EXPECT_EQ(o.storage, DType::f32);
    EXPECT_EQ(o.compute, DType::f32);
    EXPECT_FALSE(o.tf32);
  }
  EXPECT_FALSE(p.uses_loss_scaling());
  EXPECT_FALSE(p.emulated());
}

TEST(Precision, CpuRefusesTf32AndFp8WithReasons) {
  const DeviceCaps cpu = DeviceCaps::query(Device::cpu());
  const std::string tf32 = unsupported_message(Precision::tf32, cpu);
  EXPECT_NE(tf32.find("CUDA math mode"), std::string::npos) << tf32;
  EXPECT_NE(tf32.find("run fp32"), std::string::npos) << tf32;
  const std::string fp8 = unsupported_message(Precision::fp8, cpu);
  EXPECT_NE(fp8.find("Hopper"), std::string::npos) << fp8;
  EXPECT_THROW(PrecisionPolicy::create("tf32", Device::cpu()), Unsupported);
  std::string why;
  EXPECT_FALSE(PrecisionPolicy::supported(Precision::fp8, cpu, &why));
  EXPECT_EQ(why, fp8);
}

TEST(Precision, CpuHalfTypesAreEmulatedAndSayTheirTypes) {
  auto fp16 = PrecisionPolicy::create("fp16", Device::cpu());
  EXPECT_TRUE(fp16.emulated());
  EXPECT_TRUE(fp16.uses_loss_scaling());
  EXPECT_EQ(fp16.storage_dtype(OpClass::matmul), DType::f16);
  EXPECT_NE(fp16.describe().find("emulated"), std::string::npos);
  auto bf16 = PrecisionPolicy::create("bf16", Device::cpu());
  EXPECT_TRUE(bf16.emulated());
  EXPECT_FALSE(bf16.uses_loss_scaling());
  EXPECT_EQ(bf16.storage_dtype(OpClass::conv), DType::bf16);
}

TEST(Precision, MixedPrecisionOpDecisions) {
  auto p = PrecisionPolicy::create(Precision::fp16, DeviceCaps::cuda(8, 0, "A100"));
  EXPECT_FALSE(p.emulated());
  // tensor-core ops: half in, half out, fp32 accumulation
  for (OpClass c : {OpClass::matmul, OpClass::conv, OpClass::attention}) {
    EXPECT_EQ(p.op(c).storage, DType::f16) << op_class_name(c);
    EXPECT_EQ(p.op(c).compute, DType::f16) << op_class_name(c);
    EXPECT_EQ(p.op(c).accumulate, DType::f32) << op_class_name(c);
  }
  // norms and element-wise: half storage, fp32 math
  EXPECT_EQ(p.storage_dtype(OpClass::norm), DType::f16);
  EXPECT_EQ(p.compute_dtype(OpClass::norm), DType::f32);
  EXPECT_EQ(p.compute_dtype(OpClass::elementwise), DType::f32);
  // softmax, loss and the optimizer stay fp32
  for (OpClass c : {OpClass::softmax, OpClass::loss, OpClass::optimizer}) {
    EXPECT_EQ(p.storage_dtype(c), DType::f32) << op_class_name(c);
    EXPECT_EQ(p.compute_dtype(c), DType::f32) << op_class_name(c);
  }
  EXPECT_EQ(p.master_weight_dtype(), DType::f32);
  EXPECT_NE(p.table().find("attention"), std::string::npos);
}

TEST(Precision, CudaCapabilityGates) {
  const auto v100 = DeviceCaps::cuda(7, 0, "V100");
  const auto a100 = DeviceCaps::cuda(8, 0, "A100");
  const auto h100 = DeviceCaps::cuda(9, 0, "H100");
  EXPECT_TRUE(PrecisionPolicy::supported(Precision::fp16, v100));
  EXPECT_NE(unsupported_message(Precision::bf16, v100).find("Ampere"), std::string::npos);
  EXPECT_NE(unsupported_message(Precision::tf32, v100).find("Ampere"), std::string::npos);
  auto tf32 = PrecisionPolicy::create(Precision::tf32, a100);
  EXPECT_TRUE(tf32.op(OpClass::matmul).tf32);
  EXPECT_TRUE(tf32.op(OpClass::conv).tf32);
  EXPECT_FALSE(tf32.op(OpClass::norm).tf32);
  EXPECT_EQ(tf32.storage_dtype(OpClass::matmul), DType::f32);
  const std::string fp8_on_a100 = unsupported_message(Precision::fp8, a100);
  EXPECT_NE(fp8_on_a100.find("Hopper"), std::string::npos) << fp8_on_a100;
  EXPECT_NE(fp8_on_a100.find("sm_80"), std::string::npos) << fp8_on_a100;
  auto fp8 = PrecisionPolicy::create(Precision::fp8, h100);
  const auto& mm = fp8.op(OpClass::matmul);
  EXPECT_TRUE(mm.fp8_scaled);
  EXPECT_EQ(mm.compute, DType::f8e4m3);
  EXPECT_EQ(mm.fp8_grad, DType::f8e5m2);
  EXPECT_EQ(mm.storage, DType::bf16);
  EXPECT_FALSE(fp8.op(OpClass::attention).fp8_scaled);
  EXPECT_EQ(fp8.fp8_options().amax_history_len, 1024);
  fp8.set_fp8_options({.forward = DType::f8e4m3, .backward = DType::f8e4m3, .amax_history_len = 16});
  EXPECT_EQ(fp8.op(OpClass::matmul).fp8_grad, DType::f8e4m3);
  EXPECT_THROW(fp8.set_fp8_options({.forward = DType::bf16}), InvalidArgument);
  // An unknown capability allows fp32 only.
  const auto unknown = DeviceCaps::cuda(0, 0, "mystery");
  EXPECT_TRUE(PrecisionPolicy::supported(Precision::fp32, unknown));
  EXPECT_FALSE(PrecisionPolicy::supported(Precision::bf16, unknown));
}

TEST(Precision, CudaWithoutAGpuIsUnsupportedNotACrash) {
  std::string why;
  if (device_available(Device::cuda(0), &why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(PrecisionPolicy::create("fp16", Device::cuda(0)), Unsupported);
}

TEST(Precision, RoundToStorageEmulatesTheTypes) {
  Tensor t = Tensor::from_vector({1.0001f, 70000.0f, 1e-8f, 1.001f}, {4});
  Tensor h = t.clone();
  round_to_storage(h, DType::f16);
  auto hv = h.to_float_vector();
  EXPECT_EQ(hv[0], 1.0f);
  EXPECT_TRUE(std::isinf(hv[1])) << "fp16 overflow must become Inf, as on a GPU";
  EXPECT_EQ(hv[2], 0.0f) << "1e-8 underflows fp16";
  Tensor b = t.clone();
  round_to_storage(b, DType::bf16);
  auto bv = b.to_float_vector();
  EXPECT_EQ(bv[3], 1.0f);
  EXPECT_FALSE(std::isinf(bv[1]));
  Tensor i = Tensor::zeros({2}, DType::i32);
  EXPECT_THROW(round_to_storage(i, DType::f16), InvalidArgument);
  EXPECT_THROW(round_to_storage(h, DType::i64), InvalidArgument);
}

TEST(LossScaler, BacksOffSkipsAndGrows) {
  DynamicLossScaler s({.init_scale = 1024.0f, .growth_interval = 3});
  auto w = make_param("w", {0, 0}, {2});
  // A clean step: gradients are unscaled, the step is applied.
  set_grad(*w, {2048.0f, -512.0f});
  EXPECT_TRUE(s.unscale_and_update({w.get()}));
  EXPECT_EQ(w->grad.to_float_vector(), (std::vector<float>{2.0f, -0.5f}));
  EXPECT_EQ(s.scale(), 1024.0f);
  // Injected overflow: step skipped and counted, scale halves.
  set_grad(*w, {std::numeric_limits<float>::infinity(), 1.0f});
  EXPECT_FALSE(s.unscale_and_update({w.get()}));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.skipped_steps(), 1);
  set_grad(*w, {1.0f, std::nanf("")});
  EXPECT_FALSE(s.unscale_and_update({w.get()}));
  EXPECT_EQ(s.scale(), 256.0f);
  EXPECT_EQ(s.skipped_steps(), 2);
  EXPECT_EQ(s.backoff_count(), 2);
  // growth_interval clean steps in a row double the scale.
  for (int i = 0; i < 2; ++i) {
    set_grad(*w, {1.0f, 1.0f});
    EXPECT_TRUE(s.unscale_and_update({w.get()}));
    EXPECT_EQ(s.scale(), 256.0f);
  }
  set_grad(*w, {1.0f, 1.0f});
  EXPECT_TRUE(s.unscale_and_update({w.get()}));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.growth_count(), 1);
  EXPECT_EQ(s.steps(), 6);
  EXPECT_NE(s.report().find("2 of 6 steps skipped"), std::string::npos) << s.report();
  EXPECT_EQ(s.scale_loss(0.5f), 256.0f);
}

TEST(LossScaler, RespectsBounds) {
  DynamicLossScaler s({.init_scale = 4.0f, .growth_interval = 1, .min_scale = 2.0f, .max_scale = 8.0f});
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 2.0f);
  s.update(false);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 8.0f);
  EXPECT_THROW(DynamicLossScaler({.growth_factor = 1.0f}), InvalidArgument);
  EXPECT_THROW(DynamicLossScaler({.init_scale = 0.5f, .min_scale = 1.0f}), InvalidArgument);
}

TEST(LossScaler, Fp16EmulationUnderflowAndOverflow) {
  // A gradient of 1e-8 vanishes in fp16, but survives when the loss (hence the gradient) is
  // scaled by 65536 before the fp16 rounding and unscaled in fp32 afterwards.
  DynamicLossScaler s;
  auto w = make_param("w", {0}, {1});
  const float true_grad = 1e-8f;
  Tensor unscaled = Tensor::from_vector({true_grad}, {1});
  round_to_storage(unscaled, DType::f16);
  EXPECT_EQ(unscaled.to_float_vector()[0], 0.0f);
  w->grad = Tensor::from_vector({true_grad * s.scale()}, {1});
  round_to_storage(w->grad, DType::f16);
  EXPECT_TRUE(s.unscale_and_update({w.get()}));
  EXPECT_NEAR(w->grad.to_float_vector()[0], true_grad, 1e-10);
  // A large gradient overflows fp16 once scaled: detected, skipped, scale backs off.
  w->grad = Tensor::from_vector({2.0f * s.scale()}, {1});
  round_to_storage(w->grad, DType::f16);
  EXPECT_FALSE(s.unscale_and_update({w.get()}));
  EXPECT_EQ(s.scale(), 32768.0f);
}

TEST(LossScaler, GradsFiniteLooksOnlyAtSparseRows) {
  auto e = make_param("emb", {0, 0, 0, 0}, {2, 2});
  set_grad(*e, {std::nanf(""), 1.0f, 2.0f, 3.0f});
  EXPECT_FALSE(grads_finite({e.get()}));
  e->sparse_rows = Tensor::from_vector_i64({1}, {1});
  EXPECT_TRUE(grads_finite({e.get()}));
}

TEST(Fp8Scaling, DelayedScalingFromAmaxHistory) {
  Fp8DelayedScaling s(DType::f8e4m3, {.amax_history_len = 3});
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.fp8_max(), 448.0f);
  s.record_amax(2.0f);
  EXPECT_FLOAT_EQ(s.scale(), 224.0f);  // 448 / 2
  s.record_amax(8.0f);
  EXPECT_FLOAT_EQ(s.scale(), 56.0f);   // max of {2, 8}
  s.record_amax(1.0f);
  EXPECT_FLOAT_EQ(s.scale(), 56.0f);   // 8 still in the window
  s.record_amax(1.0f);                 // window {8, 1, 1} -> still 8
  EXPECT_FLOAT_EQ(s.scale(), 56.0f);
  s.record_amax(1.0f);                 // window {1, 1, 1}: 8 has left
  EXPECT_FLOAT_EQ(s.scale(), 448.0f);
  EXPECT_EQ(s.history(), (std::vector<float>{1.0f, 1.0f, 1.0f}));
  s.record_amax(std::numeric_limits<float>::infinity());  // ignored
  s.record_amax(0.0f);                                    // keeps the scale
  EXPECT_FLOAT_EQ(s.scale(), 448.0f);
  // A value at amax lands exactly on the format's largest finite value.
  EXPECT_EQ(e4m3_to_float(float_to_e4m3(1.0f * s.scale())), 448.0f);

  Fp8DelayedScaling recent(DType::f8e5m2, {.amax_history_len = 4, .amax_use_max = false, .margin = 1});
  recent.record_amax(4.0f);
  recent.record_amax(2.0f);
  EXPECT_FLOAT_EQ(recent.scale(), 57344.0f / 2.0f / 2.0f);  // most recent, margin 1
  EXPECT_THROW(Fp8DelayedScaling(DType::bf16), InvalidArgument);
}

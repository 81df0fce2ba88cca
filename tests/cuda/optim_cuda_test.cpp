// The fused CUDA optimizer updates, clipping, EMA, loss scaling and fp8 ops against their CPU
// counterparts on the same data. Every test skips, saying why, without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "benchhost/nn/registry.hpp"
#include "benchhost/optim/clip.hpp"
#include "benchhost/optim/ema.hpp"
#include "benchhost/precision.hpp"
#include "nn_optim/optim_cases.hpp"

using namespace benchhost;
using namespace benchhost::optim;
using namespace nn_optim_test;

namespace {

const Device kGpu = Device::cuda(0);

#define REQUIRE_GPU()                                                               \
  do {                                                                              \
    std::string why_;                                                               \
    if (!device_available(kGpu, &why_)) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_float_vector(); }

// |got - want| <= atol + rtol |want| everywhere; reports the first few misses.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double atol,
                                 double rtol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  int bad = 0;
  std::string msg;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (std::fabs(double(got[i]) - want[i]) <= atol + rtol * std::fabs(double(want[i]))) continue;
    if (bad++ < 4) msg += fmt::format(" [{}] {} vs {};", i, got[i], want[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " differ:" << msg;
}

class CudaOptimizer : public ::testing::TestWithParam<OptimizerCase> {};

// Three steps of the same optimizer on CPU and on CUDA copies of the same parameters and
// gradients (skip-list parameters, sparse rows on the device where the case has them).
TEST_P(CudaOptimizer, StepsMatchTheCpu) {
  REQUIRE_GPU();
  const OptimizerCase& oc = GetParam();
  ParamSet cpu = make_params(21);
  ParamSet gpu = copy_to(cpu, kGpu);
  auto cpu_opt = oc.make(pointers(cpu));
  auto gpu_opt = oc.make(pointers(gpu));
  for (auto& st : gpu_opt->state())
    if (st.name != "step") EXPECT_TRUE(st.tensor.device() == kGpu) << st.name << " is not on the parameter's device";
  for (int step = 0; step < 3; ++step) {
    fill_grads(cpu, 8, step, oc.sparse);
    copy_grads(cpu, gpu);
    cpu_opt->step(0.05f);
    gpu_opt->step(0.05f);
  }
  for (std::size_t i = 0; i < cpu.size(); ++i)
    EXPECT_TRUE(close(host(gpu[i]->value), host(cpu[i]->value), 1e-6, 1e-5)) << oc.name << " " << cpu[i]->name;
  auto cs = cpu_opt->state(), gs = gpu_opt->state();
  ASSERT_EQ(cs.size(), gs.size());
  for (std::size_t k = 0; k + 1 < cs.size(); ++k)
    EXPECT_TRUE(close(host(gs[k].tensor), host(cs[k].tensor), 1e-6, 1e-5)) << oc.name << " " << cs[k].name;
  if (oc.sparse) {  // rows never listed are untouched on the GPU too
    const auto before = host(make_params(21)[0]->value), after = host(gpu[0]->value);
    for (int k = 5; k < 10; ++k) EXPECT_EQ(after[k], before[k]) << "row 1 was not listed";
  }
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    if (auto* l = dynamic_cast<Lars*>(cpu_opt.get()))
      EXPECT_NEAR(dynamic_cast<Lars*>(gpu_opt.get())->last_trust_ratio(i), l->last_trust_ratio(i), 1e-5 * l->last_trust_ratio(i));
    if (auto* l = dynamic_cast<Lamb*>(cpu_opt.get()))
      EXPECT_NEAR(dynamic_cast<Lamb*>(gpu_opt.get())->last_trust_ratio(i), l->last_trust_ratio(i), 1e-5 * l->last_trust_ratio(i));
  }
}

INSTANTIATE_TEST_SUITE_P(All, CudaOptimizer, ::testing::ValuesIn(optimizer_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CudaMultiTensor, ZeroGradClearsDeviceGradientsEvenNaN) {
  REQUIRE_GPU();
  ParamSet cpu = make_params(61);
  fill_grads(cpu, 1, 0, /*sparse=*/true);
  cpu[3]->grad.data<float>()[100] = NAN;
  ParamSet gpu = copy_to(cpu, kGpu);
  Sgd opt(pointers(gpu));
  opt.zero_grad();
  for (const auto& p : gpu) {
    EXPECT_FALSE(p->sparse_rows.defined());
    for (float v : host(p->grad)) ASSERT_EQ(v, 0.0f) << p->name;
  }
}

// Many tensors: more than one table of tensors and of blocks per launch (Note [Multi-tensor
// apply]), including empty tensors and a tensor straddling two launches.
TEST(CudaMultiTensor, ManyTensorsAcrossLaunchesMatchTheCpu) {
  REQUIRE_GPU();
  ParamSet cpu;
  for (int i = 0; i < 60; ++i) {
    auto p = std::make_unique<nn::Parameter>();
    p->name = "t" + std::to_string(i);
    // One empty tensor, one of 6M elements (367 chunks: more blocks than one launch holds).
    const std::int64_t n = i == 7 ? 0 : i == 30 ? 6000000 : (i % 5 == 0 ? 100000 + i : 1 + 37 * i);
    p->value = random_tensor({n}, 100 + i, -1, 1);
    p->grad = random_tensor({n}, 200 + i, -0.5f, 0.5f);
    p->weight_decay = i % 3 != 0;
    cpu.push_back(std::move(p));
  }
  ParamSet gpu = copy_to(cpu, kGpu);
  Lamb a(pointers(cpu)), b(pointers(gpu));
  a.step(0.01f);
  b.step(0.01f);
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_TRUE(close(host(gpu[i]->value), host(cpu[i]->value), 1e-6, 1e-5)) << cpu[i]->name;
    EXPECT_NEAR(b.last_trust_ratio(i), a.last_trust_ratio(i), 1e-5 * a.last_trust_ratio(i)) << cpu[i]->name;
  }
  EXPECT_NEAR(global_grad_norm(pointers(gpu)), global_grad_norm(pointers(cpu)), 1e-6 * global_grad_norm(pointers(cpu)));
}

TEST(CudaMultiTensor, NormsAreDeterministic) {
  REQUIRE_GPU();
  ParamSet gpu = copy_to(make_params(5), kGpu);
  ParamSet cpu = make_params(5);
  fill_grads(cpu, 3, 0, true);
  copy_grads(cpu, gpu);
  const float first = global_grad_norm(pointers(gpu));
  for (int r = 0; r < 5; ++r) EXPECT_EQ(global_grad_norm(pointers(gpu)), first);
  EXPECT_NEAR(first, global_grad_norm(pointers(cpu)), 1e-6 * first);
}

TEST(CudaClip, ClipGradNormMatchesTheCpu) {
  REQUIRE_GPU();
  ParamSet cpu = make_params(31);
  fill_grads(cpu, 9, 0, /*sparse=*/true);
  ParamSet gpu = copy_to(cpu, kGpu);
  const float nc = clip_grad_norm(pointers(cpu), 0.5f);
  const float ng = clip_grad_norm(pointers(gpu), 0.5f);
  EXPECT_NEAR(ng, nc, 1e-6 * nc);
  for (std::size_t i = 0; i < cpu.size(); ++i)
    EXPECT_TRUE(close(host(gpu[i]->grad), host(cpu[i]->grad), 1e-7, 1e-5)) << cpu[i]->name;
}

TEST(CudaEma, UpdatesAndSwapsMatchTheCpu) {
  REQUIRE_GPU();
  ParamSet cpu = make_params(41);
  ParamSet gpu = copy_to(cpu, kGpu);
  Ema ec(pointers(cpu), 0.99f, /*warmup=*/true), eg(pointers(gpu), 0.99f, true);
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      cpu[i]->value = random_tensor(cpu[i]->value.shape(), 500 + step * 10 + i, -1, 1);
      gpu[i]->value.copy_(cpu[i]->value);
    }
    ec.update();
    eg.update();
  }
  for (std::size_t i = 0; i < cpu.size(); ++i)
    EXPECT_TRUE(close(host(eg.shadow(i)), host(ec.shadow(i)), 1e-7, 1e-6)) << cpu[i]->name;
  const auto live = host(gpu[2]->value);
  {
    EmaSwapGuard guard(eg);
    EXPECT_TRUE(close(host(gpu[2]->value), host(ec.shadow(2)), 1e-7, 1e-6));
  }
  EXPECT_EQ(host(gpu[2]->value), live);
}

TEST(CudaLossScaler, InjectedInfSkipsTheStepAndBacksOff) {
  REQUIRE_GPU();
  ParamSet cpu = make_params(51);
  fill_grads(cpu, 2, 0, /*sparse=*/true);
  ParamSet gpu = copy_to(cpu, kGpu);
  DynamicLossScaler scaler({.init_scale = 1024.0f, .growth_interval = 2});
  EXPECT_TRUE(scaler.unscale_and_update(pointers(gpu)));
  const auto want = host(cpu[3]->grad);
  const auto got = host(gpu[3]->grad);
  for (std::size_t k = 0; k < want.size(); k += 997) EXPECT_EQ(got[k], want[k] * (1.0f / 1024.0f));
  EXPECT_EQ(scaler.skipped_steps(), 0);

  // An Inf in an unlisted row of the sparse parameter is not meaningful and must be ignored;
  // one in a dense gradient must skip the step.
  Tensor g0 = cpu[0]->grad.clone();
  g0.data<float>()[1 * 5 + 2] = INFINITY;  // row 1: not in {3, 0, 30, 11}
  gpu[0]->grad = g0.to(kGpu);
  EXPECT_TRUE(scaler.unscale_and_update(pointers(gpu)));
  Tensor g4 = cpu[4]->grad.clone();
  g4.data<float>()[5] = INFINITY;
  gpu[4]->grad = g4.to(kGpu);
  const float before = scaler.scale();
  EXPECT_FALSE(scaler.unscale_and_update(pointers(gpu)));
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.scale(), before * 0.5f);
  EXPECT_FALSE(grads_finite(pointers(gpu)));
}

// ---- fp8 ----------------------------------------------------------------------------------------

bool have_hopper(std::string* why) {
  const DeviceCaps caps = DeviceCaps::query(kGpu);
  if (caps.sm_major >= 9) return true;
  *why = fmt::format("{} is sm_{}{}; fp8 needs sm_90", caps.name, caps.sm_major, caps.sm_minor);
  return false;
}

#define REQUIRE_HOPPER()                                  \
  do {                                                    \
    REQUIRE_GPU();                                        \
    std::string why_;                                     \
    if (!have_hopper(&why_)) GTEST_SKIP() << why_;        \
  } while (0)

// Cast with a scale on the GPU: amax of the input recorded, values equal the CPU reference.
TEST(CudaFp8, CastRecordsAmaxLikeTheReference) {
  REQUIRE_GPU();
  Tensor x = random_tensor({128, 96}, 3, -5, 5);
  x.data<float>()[777] = -9.5f;
  nn::OpCall c;
  c.inputs = {x.to(kGpu), Tensor::full({1}, 40.0, DType::f32, kGpu)};
  c.outputs = {Tensor::zeros({128, 96}, DType::f8e4m3, kGpu), Tensor::zeros({1}, DType::f32, kGpu)};
  nn::dispatch("fp8_cast_scaled", c);
  EXPECT_EQ(host(c.outputs[1])[0], 9.5f);
  const auto y = host(c.outputs[0]);
  for (std::size_t k = 0; k < y.size(); k += 101) EXPECT_EQ(y[k], e4m3_to_float(float_to_e4m3(x.data<float>()[k] * 40.0f))) << k;
}

// The fp8 matmul against the f32 product of the unquantised inputs (fp8 tolerance), the amax
// of the output recorded and fed to the delayed-scaling history.
TEST(CudaFp8, ScaledMatmulMatchesF32WithinFp8Tolerance) {
  REQUIRE_HOPPER();
  const std::int64_t M = 64, N = 48, K = 128;
  Tensor a = random_tensor({M, K}, 1, -1, 1), b = random_tensor({N, K}, 2, -0.2f, 0.2f);
  Fp8DelayedScaling sa(DType::f8e4m3), sb(DType::f8e4m3), sd(DType::f8e4m3);
  // Scales from the amax the cast kernel reports (one warm-up step of delayed scaling).
  auto cast = [&](const Tensor& x, Fp8DelayedScaling& s) {
    nn::OpCall c;
    c.inputs = {x.to(kGpu), Tensor::full({1}, s.scale(), DType::f32, kGpu)};
    c.outputs = {Tensor::zeros(x.shape(), DType::f8e4m3, kGpu), Tensor::zeros({1}, DType::f32, kGpu)};
    nn::dispatch("fp8_cast_scaled", c);
    s.record_amax(host(c.outputs[1])[0]);
    c.inputs[1] = Tensor::full({1}, s.scale(), DType::f32, kGpu);
    nn::dispatch("fp8_cast_scaled", c);
    return c.outputs[0];
  };
  Tensor qa = cast(a, sa), qb = cast(b, sb);
  EXPECT_FLOAT_EQ(sa.scale(), 448.0f / sa.history().back());
  nn::OpCall mm;
  mm.inputs = {qa, qb, Tensor::full({1}, sa.scale_inv(), DType::f32, kGpu), Tensor::full({1}, sb.scale_inv(), DType::f32, kGpu)};
  mm.outputs = {Tensor::zeros({M, N}, DType::bf16, kGpu), Tensor::zeros({1}, DType::f32, kGpu)};
  nn::dispatch("matmul_fp8", mm);
  std::vector<float> ref(static_cast<std::size_t>(M * N));
  float ref_amax = 0;
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (std::int64_t k = 0; k < K; ++k) acc += double(a.data<float>()[m * K + k]) * b.data<float>()[n * K + k];
      ref[m * N + n] = static_cast<float>(acc);
      ref_amax = std::max(ref_amax, std::fabs(ref[m * N + n]));
    }
  // e4m3 keeps 3 mantissa bits: each product is off by up to ~2 * 2^-4 relative; over K terms
  // of random sign the error grows like sqrt(K). Scale-relative tolerance.
  const auto got = host(mm.outputs[0]);
  EXPECT_TRUE(close(got, ref, 0.05 * ref_amax, 0.05));
  const float amax = host(mm.outputs[1])[0];
  float got_amax = 0;
  for (float v : got) got_amax = std::max(got_amax, std::fabs(v));
  EXPECT_EQ(amax, got_amax);
  sd.record_amax(amax);
  ASSERT_EQ(sd.history().size(), 1u);
  EXPECT_EQ(sd.history()[0], amax);
}

// An e4m3 output (the next layer's input) with d_scale: cuBLASLt's own amax of the result, and
// values within one e4m3 step of the CPU reference on the same fp8 inputs.
TEST(CudaFp8, Fp8OutputWithScaleAndCublasAmax) {
  REQUIRE_HOPPER();
  const std::int64_t M = 32, N = 64, K = 64;
  Tensor a = Tensor::empty({M, K}, DType::f8e4m3), b = Tensor::empty({N, K}, DType::f8e4m3);
  const Tensor fa = random_tensor({M, K}, 5, -200, 200), fb = random_tensor({N, K}, 6, -200, 200);
  auto* pa = static_cast<std::uint8_t*>(a.raw_data());  // fp8 storage is raw bytes (data<T> checks the dtype)
  auto* pb = static_cast<std::uint8_t*>(b.raw_data());
  for (std::int64_t i = 0; i < M * K; ++i) pa[i] = float_to_e4m3(fa.data<float>()[i]);
  for (std::int64_t i = 0; i < N * K; ++i) pb[i] = float_to_e4m3(fb.data<float>()[i]);
  nn::OpCall cpu;
  cpu.inputs = {a, b, Tensor::full({1}, 1.0 / 200), Tensor::full({1}, 1.0 / 200), Tensor::full({1}, 16.0)};
  cpu.outputs = {Tensor::zeros({M, N}, DType::f8e4m3), Tensor::zeros({1})};
  nn::OpCall gpu;
  for (const Tensor& t : cpu.inputs) gpu.inputs.push_back(t.to(kGpu));
  gpu.outputs = {Tensor::zeros({M, N}, DType::f8e4m3, kGpu), Tensor::zeros({1}, DType::f32, kGpu)};
  nn::dispatch("matmul_fp8", cpu);
  nn::dispatch("matmul_fp8", gpu);
  EXPECT_TRUE(close(host(gpu.outputs[0]), host(cpu.outputs[0]), 0.02, 0.13));  // e4m3 step: 1/8 relative
  // The amax is of the f32 result before the e4m3 rounding. Hopper's fp8 tensor cores add
  // products with fewer bits than f32 (an H100 came 7.8e-5 relative from the CPU's f32 sum of 64
  // products, an H200 within 1e-5), so 5e-4: still far below one e4m3 step (1/8).
  const float want = host(cpu.outputs[1])[0], got = host(gpu.outputs[1])[0];
  EXPECT_NEAR(got, want, 5e-4 * want);
}

TEST(CudaFp8, UnsupportedShapesAreRefusedWithAReason) {
  REQUIRE_HOPPER();
  nn::OpCall mm;
  mm.inputs = {Tensor::zeros({20, 32}, DType::f8e4m3, kGpu), Tensor::zeros({16, 32}, DType::f8e4m3, kGpu),
               Tensor::full({1}, 1.0, DType::f32, kGpu), Tensor::full({1}, 1.0, DType::f32, kGpu)};
  mm.outputs = {Tensor::zeros({20, 16}, DType::bf16, kGpu)};
  try {
    nn::dispatch("matmul_fp8", mm);
    FAIL() << "M = 20 was accepted";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("multiples of 16"), std::string::npos) << e.what();
  }
  mm.inputs[0] = Tensor::zeros({16, 32}, DType::f8e5m2, kGpu);
  mm.inputs[1] = Tensor::zeros({16, 32}, DType::f8e5m2, kGpu);
  mm.outputs = {Tensor::zeros({16, 16}, DType::bf16, kGpu)};
  EXPECT_THROW(nn::dispatch("matmul_fp8", mm), Unsupported);
}

}  // namespace

// CUDA convolution-net ops, attention and embedding bags end to end against the CPU: a ResNet
// bottleneck block (NHWC) forward and backward, attention with every mask kind at T=S=128,
// D=64 (forward and backward, with and without dropout), an embedding bag with repeated rows.
// The per-op parity walk (tests/nn_ops/parity_test.cpp) covers the small example cases; these
// check that the ops compose at realistic sizes. They skip without a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <vector>

#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/embedding_bag.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/tensor.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;

#define REQUIRE_GPU()                                                                 \
  do {                                                                                \
    std::string why_;                                                                 \
    if (!device_available(Device::cuda(0), &why_)) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)

Tensor on(const Tensor& t, Device d) { return t.defined() ? t.to(d) : t; }
Tensor host(const Tensor& t) { return t.to(Device::cpu()); }

// ---- ResNet bottleneck: relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x)))))))) + x), NHWC ----

struct Bottleneck {
  static constexpr std::int64_t kIn = 32, kMid = 16;
  static Shape image() { return {4, 14, 14, kIn}; }  // NHWC
  Tensor w1, w2, w3;                      // [O, I, KH, KW]
  Tensor gamma[3], beta[3];
  Tensor running_mean[3], running_var[3];
};

struct BottleneckResult {
  Tensor y, dx, dw[3], dgamma[3], dbeta[3], running_mean[3], running_var[3];
};

// `act`: the activations' dtype. A half type runs the block as a mixed-precision step does: half
// images and weights (the master weights cast), f32 BN parameters and statistics, f32 weight
// gradients.
Bottleneck seeded_bottleneck() {
  const std::int64_t in = Bottleneck::kIn, mid = Bottleneck::kMid;
  Bottleneck p;
  p.w1 = random_tensor({mid, in, 1, 1}, 1, -0.3f, 0.3f);
  p.w2 = random_tensor({mid, mid, 3, 3}, 2, -0.15f, 0.15f);
  p.w3 = random_tensor({in, mid, 1, 1}, 3, -0.3f, 0.3f);
  for (int i = 0; i < 3; ++i) {
    const std::int64_t c = i == 2 ? in : mid;
    p.gamma[i] = random_tensor({c}, 10 + i, 0.5f, 1.5f);
    p.beta[i] = random_tensor({c}, 20 + i, -0.2f, 0.2f);
    p.running_mean[i] = random_tensor({c}, 30 + i, -0.1f, 0.1f);
    p.running_var[i] = random_tensor({c}, 40 + i, 0.8f, 1.2f);
  }
  return p;
}

// The forward pass's tensors, kept for the backward (on one device, in one activation type).
struct BottleneckTape {
  Tensor x, w[3], gamma[3], conv_in[3], conv_out[3], pre;
  BatchNormSaved saved[3];
};

const Conv2dSpec& conv_spec(int i) {
  static const std::array<Conv2dSpec, 3> specs = [] {
    Conv2dSpec c1, c2, c3;
    c1.layout = c2.layout = c3.layout = ImageLayout::nhwc;
    c2.pad_h = c2.pad_w = 1;
    return std::array<Conv2dSpec, 3>{c1, c2, c3};
  }();
  return specs[i];
}

BatchNormSpec bn_spec(int i) {
  BatchNormSpec s;
  s.layout = ImageLayout::nhwc;
  s.fuse_relu = i < 2;  // bn3 feeds the residual add, unfused
  return s;
}

// Forward on `dev` with activations of type `act`: fills r.y and r.running_* (copies of the
// seeded statistics: a CPU run must not update the Bottleneck's own tensors, which a later run
// starts from).
BottleneckTape bottleneck_forward(const Bottleneck& p, const Tensor& x_host, Device dev, DType act,
                                  BottleneckResult& r) {
  BottleneckTape t;
  const Tensor w_host[3] = {p.w1, p.w2, p.w3};
  for (int i = 0; i < 3; ++i) {
    t.w[i] = on(w_host[i].to(act), dev);
    t.gamma[i] = on(p.gamma[i], dev);
    r.running_mean[i] = on(p.running_mean[i].clone(), dev);
    r.running_var[i] = on(p.running_var[i].clone(), dev);
  }
  Tensor beta[3];
  for (int i = 0; i < 3; ++i) beta[i] = on(p.beta[i], dev);
  t.x = on(x_host.to(act), dev);
  Tensor h = t.x;
  for (int i = 0; i < 3; ++i) {
    t.conv_in[i] = h;
    t.conv_out[i] = conv2d_forward(h, t.w[i], Tensor(), conv_spec(i));
    h = batch_norm_forward_train(t.conv_out[i], t.gamma[i], beta[i], r.running_mean[i],
                                 r.running_var[i], bn_spec(i), t.saved[i]);
  }
  t.pre = add(h, t.x);
  r.y = relu(t.pre);
  return t;
}

// Backward from `dy` (on the tape's device, in its activation type): fills r.dx, dw, dgamma, dbeta
// (f32 master gradients).
void bottleneck_backward(const BottleneckTape& t, const Tensor& dy, BottleneckResult& r) {
  const Device dev = t.x.device();
  const Tensor dpre = activation_backward(dy, t.pre, Activation::relu);
  Tensor g = dpre;
  for (int i = 2; i >= 0; --i) {
    const std::int64_t out_c = t.gamma[i].numel();
    r.dgamma[i] = Tensor::zeros({out_c}, DType::f32, dev);
    r.dbeta[i] = Tensor::zeros({out_c}, DType::f32, dev);
    const Tensor dconv = batch_norm_backward(g, t.conv_out[i], t.gamma[i], t.saved[i], bn_spec(i),
                                             r.dgamma[i], r.dbeta[i]);
    r.dw[i] = Tensor::zeros(t.w[i].shape(), DType::f32, dev);
    Tensor no_bias;
    conv2d_backward_weights(dconv, t.conv_in[i], r.dw[i], no_bias, conv_spec(i));
    g = conv2d_backward_data(dconv, t.w[i], t.conv_in[i].shape(), conv_spec(i));
  }
  r.dx = add(g, dpre);  // the residual branch's gradient joins the block input's
}

// `t` on the CPU in f32: the same forward values, ReLU masks included.
Tensor host_f32(const Tensor& t) {
  if (!t.defined()) return t;
  const Tensor h = host(t);
  return h.dtype() == DType::f32 ? h : h.to(DType::f32);
}
// `t` on the CPU, in f32 (`f32`) or in the types it has (the half activations kept).
BottleneckTape tape_on_cpu(const BottleneckTape& t, bool f32) {
  auto h = [f32](const Tensor& v) { return f32 ? host_f32(v) : (v.defined() ? host(v) : v); };
  BottleneckTape c;
  c.x = h(t.x);
  c.pre = h(t.pre);
  for (int i = 0; i < 3; ++i) {
    c.w[i] = h(t.w[i]);
    c.gamma[i] = h(t.gamma[i]);
    c.conv_in[i] = h(t.conv_in[i]);
    c.conv_out[i] = h(t.conv_out[i]);
    c.saved[i] = BatchNormSaved{h(t.saved[i].mean), h(t.saved[i].variance), h(t.saved[i].output),
                                t.saved[i].training};
  }
  return c;
}
BottleneckTape tape_on_cpu_f32(const BottleneckTape& t) { return tape_on_cpu(t, true); }

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = host_f32(a).to_float_vector(), y = host_f32(b).to_float_vector();
  double m = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(double(x[i]) - double(y[i])));
  return m;
}
double max_abs(const Tensor& a) {
  double m = 0.0;
  for (float v : host_f32(a).to_float_vector()) m = std::max(m, std::fabs(double(v)));
  return m;
}

BottleneckResult run_bottleneck(const Bottleneck& p, const Tensor& x_host, const Tensor& dy_host,
                                Device dev, DType act = DType::f32) {
  BottleneckResult r;
  const BottleneckTape t = bottleneck_forward(p, x_host, dev, act, r);
  bottleneck_backward(t, on(dy_host.to(act), dev), r);
  return r;
}

TEST(CudaConvNet, BottleneckBlockNhwcMatchesCpu) {
  REQUIRE_GPU();
  const Bottleneck p = seeded_bottleneck();
  const Tensor x = random_tensor(Bottleneck::image(), 50);
  const Tensor dy = random_tensor(Bottleneck::image(), 51);
  const BottleneckResult cpu = run_bottleneck(p, x, dy, Device::cpu());
  const BottleneckResult gpu = run_bottleneck(p, x, dy, Device::cuda(0));
  const double atol = 2e-4, rtol = 2e-3;
  EXPECT_TRUE(tensors_close(host(gpu.y), cpu.y, atol, rtol)) << "output";
  EXPECT_TRUE(tensors_close(host(gpu.dx), cpu.dx, atol, rtol)) << "input gradient";
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(tensors_close(host(gpu.dw[i]), cpu.dw[i], atol, rtol)) << "conv" << i + 1 << " weight gradient";
    EXPECT_TRUE(tensors_close(host(gpu.dgamma[i]), cpu.dgamma[i], atol, rtol)) << "bn" << i + 1 << " gamma gradient";
    EXPECT_TRUE(tensors_close(host(gpu.dbeta[i]), cpu.dbeta[i], atol, rtol)) << "bn" << i + 1 << " beta gradient";
    EXPECT_TRUE(tensors_close(host(gpu.running_mean[i]), cpu.running_mean[i], 1e-6, 1e-5)) << "bn" << i + 1 << " running mean";
    EXPECT_TRUE(tensors_close(host(gpu.running_var[i]), cpu.running_var[i], 1e-6, 1e-5)) << "bn" << i + 1 << " running var";
  }
}

std::uint64_t total_promotions() {
  std::uint64_t n = 0;
  for (const auto& entry : OpRegistry::instance().promotion_counts()) n += entry.second;
  return n;
}

// The same block in bf16 and f16 on CUDA: every op of it runs natively in the half type (cuDNN
// tensor-op convolutions, our batch norm, add and ReLU kernels), none is promoted to f32
// (Note [Half-precision promotion]), and the results stay within half-precision distance of the
// f32 CPU block.
// The rounding baseline the GPU half-precision test measures against, on the CPU alone: the
// block's backward with its gradients rounded to the half type stays near the f32 backward (its
// error is a few roundings of the largest gradient, not more), and rounding more finely (f16)
// errs less.
TEST(CudaConvNet, BottleneckHalfRoundingBaselineOnCpu) {
  const Bottleneck p = seeded_bottleneck();
  const Tensor x = random_tensor(Bottleneck::image(), 50);
  const Tensor dy = random_tensor(Bottleneck::image(), 51);
  double worst[2] = {0.0, 0.0};
  for (int k = 0; k < 2; ++k) {
    const DType half = k == 0 ? DType::bf16 : DType::f16;
    BottleneckResult fwd;
    const BottleneckTape tape = bottleneck_forward(p, x, Device::cpu(), half, fwd);
    BottleneckResult ref, rounded;
    bottleneck_backward(tape_on_cpu_f32(tape), dy.to(half).to(DType::f32), ref);
    bottleneck_backward(tape, dy.to(half), rounded);
    for (int i = 0; i < 3; ++i) {
      const double rel = max_abs_diff(rounded.dw[i], ref.dw[i]) / max_abs(ref.dw[i]);
      std::printf("%s conv%d weight gradient: rounding error %.4g of its largest element %.4g\n",
                  dtype_name(half), i + 1, rel, max_abs(ref.dw[i]));
      worst[k] = std::max(worst[k], rel);
    }
  }
  EXPECT_LT(worst[0], 0.02) << "bf16: five roundings of the largest gradient";
  EXPECT_LT(worst[1], worst[0]) << "f16 rounds 8 times more finely than bf16";
}

TEST(CudaConvNet, BottleneckBlockInHalfPrecisionRunsNativelyAndMatchesCpu) {
  REQUIRE_GPU();
  const Bottleneck p = seeded_bottleneck();
  const Tensor x = random_tensor(Bottleneck::image(), 50);
  const Tensor dy = random_tensor(Bottleneck::image(), 51);
  BottleneckResult cpu;
  bottleneck_forward(p, x, Device::cpu(), DType::f32, cpu);
  for (DType half : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(half));
    // A few roundings of the half type (2^-8 bf16, 2^-11 f16) through three layers each way.
    const double tol = half == DType::bf16 ? 5e-2 : 1e-2;
    const std::uint64_t promoted_before = total_promotions();
    BottleneckResult gpu;
    const BottleneckTape tape = bottleneck_forward(p, x, Device::cuda(0), half, gpu);
    const Tensor dy_half = dy.to(half);
    bottleneck_backward(tape, dy_half.to(Device::cuda(0)), gpu);
    EXPECT_EQ(total_promotions(), promoted_before) << "an op of the block was promoted to f32";
    // Forward: against the f32 block on the CPU.
    EXPECT_EQ(gpu.y.dtype(), half);
    EXPECT_TRUE(tensors_close(host(gpu.y), cpu.y, tol, tol)) << "output";
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(tensors_close(host(gpu.running_mean[i]), cpu.running_mean[i], tol, tol)) << "bn" << i + 1 << " running mean";
      EXPECT_TRUE(tensors_close(host(gpu.running_var[i]), cpu.running_var[i], tol, tol)) << "bn" << i + 1 << " running var";
    }
    // Backward: against the f32 backward on the CPU of this run's own forward values. The ReLU
    // masks are then the same on both sides; from an f32 forward, activations within a rounding
    // of zero flip their mask, and a flipped element moves a sum such as bn3's beta gradient (a
    // sum of +-dy over 784 positions) by a whole dy, far more than any rounding.
    BottleneckResult ref;
    bottleneck_backward(tape_on_cpu_f32(tape), dy_half.to(DType::f32), ref);
    // The gradients between layers are rounded to the half type, as in any mixed-precision step,
    // and a weight gradient sums 784 products with non-negative ReLU inputs, so those roundings
    // move it by several times a rounding of its own (bf16 on an H100: 0.1 of a 1.7 gradient,
    // results/gpu/2026-11-26/run5). The bound is therefore measured, not guessed: the same
    // backward with the same half roundings on the CPU (the registry's f32 promotion, each
    // output rounded to the half type) gives each gradient's rounding error; the GPU may differ
    // from f32 by at most twice that plus one half step of the gradient's largest element.
    BottleneckResult cpu_half;
    bottleneck_backward(tape_on_cpu(tape, false), dy_half, cpu_half);
    auto within_rounding = [&](const Tensor& got, const Tensor& want, const Tensor& baseline,
                               const char* what) {
      const double err = max_abs_diff(got, want), rounding = max_abs_diff(baseline, want);
      const double bound = 2.0 * rounding + (half == DType::bf16 ? 1.0 / 256 : 1.0 / 2048) * max_abs(want);
      EXPECT_LE(err, bound) << what << ": the GPU is " << err << " from f32, the CPU's same roundings "
                            << rounding << " (largest element " << max_abs(want) << ")";
    };
    within_rounding(gpu.dx, ref.dx, cpu_half.dx, "input gradient");
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE(i + 1);
      EXPECT_EQ(gpu.dw[i].dtype(), DType::f32) << "the master weight gradient stays f32";
      within_rounding(gpu.dw[i], ref.dw[i], cpu_half.dw[i], "conv weight gradient");
      within_rounding(gpu.dgamma[i], ref.dgamma[i], cpu_half.dgamma[i], "bn gamma gradient");
      within_rounding(gpu.dbeta[i], ref.dbeta[i], cpu_half.dbeta[i], "bn beta gradient");
    }
  }
}

TEST(CudaConvNet, PoolingHeadMatchesCpu) {
  REQUIRE_GPU();
  // The ResNet stem pool and head: 3x3/2 max pool, then global average pool, NHWC and NCHW, in
  // f32 and in the half types (native on CUDA, no promotion; the CPU promotes). A max is exact in
  // any type; an average may differ by the rounding of its output.
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (ImageLayout layout : {ImageLayout::nhwc, ImageLayout::nchw}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + image_layout_name(layout));
      const double avg_rtol = dtype == DType::f32 ? 1e-5 : (dtype == DType::bf16 ? 1.0 / 256 : 1.0 / 2048);
      Pool2dSpec s;
      s.kernel_h = s.kernel_w = 3;
      s.stride_h = s.stride_w = 2;
      s.pad_h = s.pad_w = 1;
      s.layout = layout;
      const Tensor x = random_tensor(image_shape({2, 8, 15, 15}, layout), 60).to(dtype);
      const Tensor xd = x.to(Device::cuda(0));
      const Tensor y = max_pool2d_forward(x, s);
      const Tensor g = global_avg_pool_forward(y, layout);
      const Tensor dg = random_tensor(g.shape(), 61).to(dtype);
      const Tensor dy = global_avg_pool_backward(dg, y.shape(), layout);
      const Tensor dx = max_pool2d_backward(dy, x, y, s);
      const std::uint64_t promoted_before = total_promotions();
      const Tensor yd = max_pool2d_forward(xd, s);
      const Tensor gd = global_avg_pool_forward(yd, layout);
      const Tensor dyd = global_avg_pool_backward(dg.to(Device::cuda(0)), y.shape(), layout);
      const Tensor dxd = max_pool2d_backward(dyd, xd, yd, s);
      EXPECT_EQ(total_promotions(), promoted_before) << "a pooling op was promoted to f32 on CUDA";
      EXPECT_TRUE(tensors_close(host(yd), y, 0, 0));
      EXPECT_TRUE(tensors_close(host(gd), g, 1e-6, avg_rtol));
      EXPECT_TRUE(tensors_close(host(dyd), dy, 1e-7, avg_rtol));
      EXPECT_TRUE(tensors_close(host(dxd), dx, 1e-7, avg_rtol));
    }
}

// ---- attention ----

struct MaskCase {
  const char* name;
  AttentionMask mask;
  float dropout;
};

TEST(CudaAttention, EveryMaskKindMatchesCpuAtT128D64) {
  REQUIRE_GPU();
  const std::int64_t B = 2, H = 2, T = 128, S = 128, D = 64;
  const Tensor q = random_tensor({B, H, T, D}, 70), k = random_tensor({B, H, S, D}, 71),
               v = random_tensor({B, H, S, D}, 72), dout = random_tensor({B, H, T, D}, 73);
  Tensor keep_bs = Tensor::zeros({B, S}, DType::u8);
  Tensor keep_bts = Tensor::zeros({B, T, S}, DType::u8);
  Tensor add_bts = random_tensor({B, T, S}, 74, -2.0f, 0.5f);
  Tensor add_bhts = random_tensor({B, H, T, S}, 75, -2.0f, 0.5f);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < S; ++j) keep_bs.data<std::uint8_t>()[b * S + j] = j < 100 - 30 * b;
  for (std::int64_t b = 0; b < B; ++b)  // packed sequences: blocks [0, 50) and [50, 128)
    for (std::int64_t i = 0; i < T; ++i)
      for (std::int64_t j = 0; j < S; ++j) {
        keep_bts.data<std::uint8_t>()[(b * T + i) * S + j] = (i < 50) == (j < 50);
        if ((i * 7 + j * 3 + b) % 5 == 0) add_bts.data<float>()[(b * T + i) * S + j] = -INFINITY;
      }
  for (std::int64_t j = 0; j < S; ++j) add_bts.data<float>()[(1 * T + 3) * S + j] = -INFINITY;  // a fully masked row

  std::vector<MaskCase> cases;
  cases.push_back({"none", {}, 0.0f});
  AttentionMask causal;
  causal.causal = true;
  cases.push_back({"causal", causal, 0.0f});
  AttentionMask lengths;
  lengths.key_padding = Tensor::from_vector_i64({77, 0}, {B});  // batch 1 fully padded
  cases.push_back({"lengths", lengths, 0.0f});
  AttentionMask flags;
  flags.key_padding = keep_bs;
  flags.causal = true;
  cases.push_back({"keep_flags_causal", flags, 0.0f});
  AttentionMask packed;
  packed.mask = keep_bts;
  cases.push_back({"packed_u8", packed, 0.0f});
  AttentionMask additive;
  additive.mask = add_bts;
  cases.push_back({"additive_bts", additive, 0.0f});
  AttentionMask additive_heads;
  additive_heads.mask = add_bhts;
  additive_heads.key_padding = Tensor::from_vector_i32({128, 90}, {B});
  cases.push_back({"additive_bhts_lengths", additive_heads, 0.0f});
  cases.push_back({"causal_dropout", causal, 0.1f});
  cases.push_back({"packed_dropout", packed, 0.2f});

  const Device gpu = Device::cuda(0);
  for (const MaskCase& mc : cases) {
    SCOPED_TRACE(mc.name);
    AttentionSaved cpu_saved, gpu_saved;
    const Tensor out = sdpa_forward(q, k, v, mc.mask, 0.0f, &cpu_saved, mc.dropout, 1234, 5, 6);
    AttentionMask dm;
    dm.causal = mc.mask.causal;
    dm.key_padding = on(mc.mask.key_padding, gpu);
    dm.mask = on(mc.mask.mask, gpu);
    const Tensor out_d = sdpa_forward(q.to(gpu), k.to(gpu), v.to(gpu), dm, 0.0f, &gpu_saved,
                                      mc.dropout, 1234, 5, 6);
    EXPECT_TRUE(tensors_close(host(out_d), out, 2e-5, 1e-4)) << "out";
    EXPECT_TRUE(tensors_close(host(gpu_saved.probs), cpu_saved.probs, 2e-6, 1e-4)) << "probs";
    if (mc.dropout > 0) {
      ASSERT_TRUE(gpu_saved.dropout.mask.defined());
      EXPECT_TRUE(tensors_close(host(gpu_saved.dropout.mask), cpu_saved.dropout.mask, 0, 0))
          << "dropout keep flags must be bit-identical";
    }
    const AttentionGrads g = sdpa_backward(dout, q, k, v, cpu_saved, 0.0f);
    const AttentionGrads gd = sdpa_backward(dout.to(gpu), q.to(gpu), k.to(gpu), v.to(gpu),
                                            gpu_saved, 0.0f);
    EXPECT_TRUE(tensors_close(host(gd.dq), g.dq, 5e-5, 1e-3)) << "dq";
    EXPECT_TRUE(tensors_close(host(gd.dk), g.dk, 5e-5, 1e-3)) << "dk";
    EXPECT_TRUE(tensors_close(host(gd.dv), g.dv, 5e-5, 1e-3)) << "dv";
  }
}

// ---- embedding bag ----

TEST(CudaEmbeddingBag, RepeatedRowsMatchCpu) {
  REQUIRE_GPU();
  const std::int64_t rows = 50, dim = 40;
  const Tensor weight = random_tensor({rows, dim}, 80);
  // Ragged bags with rows repeated inside a bag and across bags, and an empty bag.
  const Tensor idx = Tensor::from_vector_i64({7, 7, 3, 49, 7, 0, 3, 3, 3, 12, 49, 7, 25}, {13});
  const Tensor off = Tensor::from_vector_i64({0, 3, 3, 6, 9, 13}, {6});
  const Device gpu = Device::cuda(0);
  for (BagPooling pooling : {BagPooling::sum, BagPooling::mean}) {
    SCOPED_TRACE(bag_pooling_name(pooling));
    Tensor out = Tensor::empty({5, dim});
    Tensor out_d = Tensor::empty({5, dim}, DType::f32, gpu);
    embedding_bag_forward(out, weight, idx, off, pooling);
    embedding_bag_forward(out_d, weight.to(gpu), idx.to(gpu), off.to(gpu), pooling);
    EXPECT_TRUE(tensors_close(host(out_d), out, 1e-6, 1e-6));

    const Tensor dout = random_tensor({5, dim}, 81);
    Tensor grad = random_tensor({rows, dim}, 82);  // accumulates onto existing values
    Tensor grad_d = grad.to(gpu);
    const Tensor touched = embedding_bag_backward(dout, idx, off, pooling, grad);
    const Tensor touched_d = embedding_bag_backward(dout.to(gpu), idx.to(gpu), off.to(gpu), pooling, grad_d);
    EXPECT_TRUE(tensors_close(host(grad_d), grad, 1e-6, 1e-6));
    EXPECT_EQ(host(touched_d).to_float_vector(), touched.to_float_vector());
    EXPECT_EQ(touched.to_float_vector(), (std::vector<float>{0, 3, 7, 12, 25, 49}));
  }
  // Fixed hotness, i32 ids.
  const Tensor idx2 = Tensor::from_vector_i32({1, 1, 1, 4, 0, 4, 9, 9, 2}, {3, 3});
  Tensor out = Tensor::empty({3, dim});
  Tensor out_d = Tensor::empty({3, dim}, DType::f32, gpu);
  embedding_bag_forward(out, weight, idx2, Tensor(), BagPooling::sum);
  embedding_bag_forward(out_d, weight.to(gpu), idx2.to(gpu), Tensor(), BagPooling::sum);
  EXPECT_TRUE(tensors_close(host(out_d), out, 1e-6, 1e-6));
  // A bad row id is an InvalidArgument on the device as on the CPU.
  const Tensor bad = Tensor::from_vector_i64({1, 50}, {1, 2});
  Tensor out_bad = Tensor::empty({1, dim}, DType::f32, gpu);
  EXPECT_THROW(embedding_bag_forward(out_bad, weight.to(gpu), bad.to(gpu), Tensor(), BagPooling::sum),
               InvalidArgument);
}

}  // namespace
}  // namespace benchhost::nn

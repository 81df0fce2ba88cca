// CUDA dense nn ops beyond the registry parity walk (tests/nn_ops/parity_test.cpp): a small MLP
// trained one step on both devices with the same weights, dropout masks across devices, TF32,
// rows long enough for the block-per-row kernels, strided device inputs and device-side errors.
// Every test needs a GPU and skips, saying why, without one.

#include <gtest/gtest.h>

#include <bit>

#include "benchhost/nn/math_mode.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"
#include "common/gradcheck.hpp"

using namespace benchhost;
using benchhost::testing::tensors_close;

namespace {

#define REQUIRE_GPU()                                                    \
  do {                                                                   \
    std::string why_;                                                    \
    if (!device_available(Device::cuda(0), &why_)) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)

const Device kGpu = Device::cuda(0);

Tensor uniform(const Shape& shape, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Rng rng(seed, 7);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(lo, hi);
  return t;
}

Tensor on_cpu(const Tensor& t) { return t.to(Device::cpu()); }

// Both devices' parameters and gradients of: logits = linear2(layernorm(gelu(linear1(x)))).
struct Mlp {
  Tensor w1, b1, gamma, beta, w2, b2;
  Tensor dw1, db1, dgamma, dbeta, dw2, db2, dx;
  float loss = 0;

  static Mlp make(Device d) {
    Mlp m;
    m.w1 = uniform({48, 32}, 1, -0.2f, 0.2f).to(d);
    m.b1 = uniform({48}, 2, -0.1f, 0.1f).to(d);
    m.gamma = uniform({48}, 3, 0.8f, 1.2f).to(d);
    m.beta = uniform({48}, 4, -0.1f, 0.1f).to(d);
    m.w2 = uniform({10, 48}, 5, -0.2f, 0.2f).to(d);
    m.b2 = uniform({10}, 6, -0.1f, 0.1f).to(d);
    m.dw1 = Tensor::zeros(m.w1.shape(), DType::f32, d);
    m.db1 = Tensor::zeros(m.b1.shape(), DType::f32, d);
    m.dgamma = Tensor::zeros(m.gamma.shape(), DType::f32, d);
    m.dbeta = Tensor::zeros(m.beta.shape(), DType::f32, d);
    m.dw2 = Tensor::zeros(m.w2.shape(), DType::f32, d);
    m.db2 = Tensor::zeros(m.b2.shape(), DType::f32, d);
    return m;
  }

  void step(const Tensor& x, const Tensor& targets) {
    Tensor z1;
    Tensor h = nn::linear_forward(x, w1, b1, nn::Activation::gelu_erf, &z1);
    nn::LayerNormSaved ln;
    Tensor hn = nn::layernorm_forward(h, gamma, beta, 1e-5f, &ln);
    Tensor logits = nn::linear_forward(hn, w2, b2);
    nn::CrossEntropyResult ce = nn::softmax_cross_entropy_forward(logits, targets, 0.1f);
    loss = ce.loss;
    Tensor dlogits = nn::softmax_cross_entropy_backward(ce, targets, 0.1f);
    Tensor none;
    Tensor dhn = nn::linear_backward(dlogits, hn, w2, none, nn::Activation::none, dw2, db2);
    Tensor dh = nn::layernorm_backward(dhn, h, gamma, ln, dgamma, dbeta);
    dx = nn::linear_backward(dh, x, w1, z1, nn::Activation::gelu_erf, dw1, db1);
  }
};

TEST(CudaDenseOps, MlpForwardBackwardMatchesCpu) {
  REQUIRE_GPU();
  nn::Tf32Scope exact(false);
  const Tensor x = uniform({24, 32}, 11);
  std::vector<std::int64_t> t(24);
  Rng r(12);
  for (auto& v : t) v = static_cast<std::int64_t>(r.below(10));
  t[3] = -100;  // one ignored row
  const Tensor targets = Tensor::from_vector_i64(t, {24});

  Mlp cpu = Mlp::make(Device::cpu());
  cpu.step(x, targets);
  Mlp gpu = Mlp::make(kGpu);
  gpu.step(x.to(kGpu), targets.to(kGpu));

  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 + 1e-5 * std::fabs(cpu.loss));
  const std::pair<const char*, std::pair<Tensor*, Tensor*>> grads[] = {
      {"dx", {&gpu.dx, &cpu.dx}},         {"dw1", {&gpu.dw1, &cpu.dw1}}, {"db1", {&gpu.db1, &cpu.db1}},
      {"dgamma", {&gpu.dgamma, &cpu.dgamma}}, {"dbeta", {&gpu.dbeta, &cpu.dbeta}},
      {"dw2", {&gpu.dw2, &cpu.dw2}},      {"db2", {&gpu.db2, &cpu.db2}}};
  for (const auto& [name, pair] : grads) {
    ASSERT_TRUE(pair.first->device().is_cuda()) << name;
    EXPECT_TRUE(tensors_close(on_cpu(*pair.first), *pair.second, 1e-6, 1e-4)) << name;
  }
}

TEST(CudaDenseOps, DropoutMaskIsIdenticalOnBothDevices) {
  REQUIRE_GPU();
  const Tensor x = uniform({5, 1001}, 21);  // not a multiple of 4: a ragged last Philox block
  for (float p : {0.1f, 0.5f}) {
    nn::DropoutSaved cs, gs;
    Tensor yc = nn::dropout_forward(x, p, 1234, 77, 5, &cs);
    Tensor yg = nn::dropout_forward(x.to(kGpu), p, 1234, 77, 5, &gs);
    const Tensor mg = on_cpu(gs.mask);
    ASSERT_EQ(mg.numel(), cs.mask.numel());
    std::int64_t differ = 0, kept = 0;
    for (std::int64_t i = 0; i < mg.numel(); ++i) {
      differ += mg.data<std::uint8_t>()[i] != cs.mask.data<std::uint8_t>()[i];
      kept += cs.mask.data<std::uint8_t>()[i];
    }
    EXPECT_EQ(differ, 0) << "p=" << p;
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, mg.numel());
    EXPECT_TRUE(tensors_close(on_cpu(yg), yc, 1e-6, 1e-6));
    const Tensor dy = uniform({5, 1001}, 22);
    EXPECT_TRUE(tensors_close(on_cpu(nn::dropout_backward(dy.to(kGpu), gs)), nn::dropout_backward(dy, cs), 1e-6, 1e-6));
  }
}

TEST(CudaDenseOps, MatmulWithAndWithoutTf32) {
  REQUIRE_GPU();
  const Tensor a = uniform({96, 512}, 31), b = uniform({512, 80}, 32);
  Tensor ref;
  {
    nn::Tf32Scope exact(false);
    ref = nn::matmul(a, b);
    EXPECT_TRUE(tensors_close(on_cpu(nn::matmul(a.to(kGpu), b.to(kGpu))), ref, 1e-4, 1e-4));
  }
  {
    nn::Tf32Scope fast(true);
    EXPECT_TRUE(tensors_close(on_cpu(nn::matmul(a.to(kGpu), b.to(kGpu))), ref, 1e-2, 1e-2));
  }
}

TEST(CudaDenseOps, BatchedMatmulWithTransposedAAndBroadcastB) {
  REQUIRE_GPU();
  nn::Tf32Scope exact(false);
  // a is a transpose view (no fold of the batch into M): b is broadcast with batch stride 0.
  const Tensor a = uniform({3, 6, 5}, 35), b = uniform({6, 4}, 36);
  const Tensor ref = nn::matmul(a, b, true, false, 0.5f);
  const Tensor got = nn::matmul(a.to(kGpu), b.to(kGpu), true, false, 0.5f);
  EXPECT_TRUE(tensors_close(on_cpu(got), ref, 1e-5, 1e-5));
  // accumulate: c += a^T b
  Tensor cc = uniform({3, 5, 4}, 37), cg = cc.to(kGpu);
  nn::matmul_into(cc, a, b, true, false, 1.0f, true);
  nn::matmul_into(cg, a.to(kGpu), b.to(kGpu), true, false, 1.0f, true);
  EXPECT_TRUE(tensors_close(on_cpu(cg), cc, 1e-5, 1e-5));
}

TEST(CudaDenseOps, MatmulOnAViewThatIsOnlyFourByteAligned) {
  REQUIRE_GPU();
  nn::Tf32Scope exact(false);
  const Tensor big = uniform({32, 65}, 38), b = uniform({64, 16}, 39);
  const Tensor ref = nn::matmul(big.slice(1, 1, 65), b);  // starts 4 bytes into the storage, row stride 65
  const Tensor got = nn::matmul(big.to(kGpu).slice(1, 1, 65), b.to(kGpu));
  EXPECT_TRUE(tensors_close(on_cpu(got), ref, 1e-5, 1e-5));
}

TEST(CudaDenseOps, DeviceFillAndZero) {
  REQUIRE_GPU();
  Tensor t = Tensor::full({3, 12345}, 2.5, DType::f32, kGpu);  // more than one host chunk, not a power of 2
  for (float v : t.to_float_vector()) ASSERT_EQ(v, 2.5f);
  t.zero_();
  for (float v : t.to_float_vector()) ASSERT_EQ(v, 0.0f);
  Tensor h = Tensor::full({7}, -3.0, DType::bf16, kGpu);
  for (float v : h.to_float_vector()) ASSERT_EQ(v, -3.0f);
}

TEST(CudaDenseOps, CastIsBitIdenticalToTheCpuOnSpecialValues) {
  REQUIRE_GPU();
  const std::vector<std::uint32_t> bits = {
      0x7fc00001u, 0xffc12345u, 0x7f800000u, 0xff800000u,  // NaNs with payloads, +-inf
      0x477fefffu, 0x477ff000u, 0x7f7fffffu,               // just below / at f16 overflow, FLT_MAX
      0x33000000u, 0x33c00000u, 0x32ffffffu, 0x00000001u,  // 2^-25 and 3 * 2^-25 (ties), f32 subnormal
      0x3f808000u, 0x3f818000u, 0x80000000u, 0x3f800001u}; // bf16 ties to even, -0, 1 + ulp
  std::vector<float> values;
  for (std::uint32_t b : bits) values.push_back(std::bit_cast<float>(b));
  const Tensor x = Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())});
  for (DType t : {DType::f16, DType::bf16}) {
    const Tensor c = nn::cast(x, t);
    const Tensor g = on_cpu(nn::cast(x.to(kGpu), t));
    for (std::int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(static_cast<const std::uint16_t*>(g.raw_data())[i], static_cast<const std::uint16_t*>(c.raw_data())[i])
          << dtype_name(t) << " of 0x" << std::hex << bits[static_cast<std::size_t>(i)];
  }
}

TEST(CudaDenseOps, Bf16MatmulAccumulatesInF32) {
  REQUIRE_GPU();
  // Round the inputs to bf16 on the CPU; the f32 product of the rounded values is the reference.
  const Tensor a = nn::cast(nn::cast(uniform({4, 3, 64}, 41), DType::bf16), DType::f32);
  const Tensor b = nn::cast(nn::cast(uniform({64, 24}, 42), DType::bf16), DType::f32);
  const Tensor ref = nn::matmul(a, b);
  const Tensor ag = nn::cast(a.to(kGpu), DType::bf16), bg = nn::cast(b.to(kGpu), DType::bf16);
  ASSERT_EQ(ag.dtype(), DType::bf16);
  // The product comes back in its operands' type (matmul's contract: the output is like a),
  // rounded once from an f32 accumulation: within one bf16 step (2^-8 relative) of the f32
  // product of the rounded inputs. A bf16 running sum over K = 64 terms would drift further.
  const Tensor c = nn::matmul(ag, bg);
  EXPECT_EQ(c.dtype(), DType::bf16);
  EXPECT_TRUE(tensors_close(on_cpu(nn::cast(c, DType::f32)), ref, 1e-3, 1.0 / 256));
}

TEST(CudaDenseOps, LongRowsUseTheBlockPerRowKernels) {
  REQUIRE_GPU();
  for (std::int64_t C : {4096, 30522}) {
    const Tensor x = uniform({3, C}, 51 + C, -8.0f, 8.0f);
    const Tensor dy = uniform({3, C}, 52 + C);
    const Tensor xg = x.to(kGpu), dyg = dy.to(kGpu);

    const Tensor y = nn::softmax_forward(x);
    const Tensor yg = nn::softmax_forward(xg);
    EXPECT_TRUE(tensors_close(on_cpu(yg), y, 1e-6, 1e-4)) << "softmax C=" << C;
    EXPECT_TRUE(tensors_close(on_cpu(nn::softmax_backward(dyg, yg)), nn::softmax_backward(dy, y), 1e-6, 1e-4))
        << "softmax backward C=" << C;
    const Tensor ly = nn::log_softmax_forward(x);
    EXPECT_TRUE(tensors_close(on_cpu(nn::log_softmax_forward(xg)), ly, 1e-4, 1e-5)) << "log_softmax C=" << C;

    const Tensor gamma = uniform({C}, 53, 0.5f, 1.5f), beta = uniform({C}, 54);
    nn::LayerNormSaved sc, sg;
    const Tensor lc = nn::layernorm_forward(x, gamma, beta, 1e-5f, &sc);
    const Tensor lg = nn::layernorm_forward(xg, gamma.to(kGpu), beta.to(kGpu), 1e-5f, &sg);
    EXPECT_TRUE(tensors_close(on_cpu(lg), lc, 1e-4, 1e-4)) << "layernorm C=" << C;
    EXPECT_TRUE(tensors_close(on_cpu(sg.rstd), sc.rstd, 1e-6, 1e-4)) << "rstd C=" << C;
    Tensor dgc = Tensor::zeros({C}), dbc = Tensor::zeros({C});
    Tensor dgg = Tensor::zeros({C}, DType::f32, kGpu), dbg = Tensor::zeros({C}, DType::f32, kGpu);
    const Tensor dxc = nn::layernorm_backward(dy, x, gamma, sc, dgc, dbc);
    const Tensor dxg = nn::layernorm_backward(dyg, xg, gamma.to(kGpu), sg, dgg, dbg);
    EXPECT_TRUE(tensors_close(on_cpu(dxg), dxc, 1e-4, 1e-3)) << "layernorm dx C=" << C;
    EXPECT_TRUE(tensors_close(on_cpu(dgg), dgc, 1e-4, 1e-4)) << "dgamma C=" << C;
    EXPECT_TRUE(tensors_close(on_cpu(dbg), dbc, 1e-5, 1e-5)) << "dbeta C=" << C;
  }
}

TEST(CudaDenseOps, SumOverLongRunsUsesChunkedPartials) {
  REQUIRE_GPU();
  const Tensor x = uniform({3, 100003}, 65);  // rows longer than one chunk, ragged last chunk
  EXPECT_TRUE(tensors_close(on_cpu(nn::sum(x.to(kGpu), {-1})), nn::sum(x, {-1}), 1e-4, 1e-6));
  EXPECT_TRUE(tensors_close(on_cpu(nn::mean(x.to(kGpu), {})), nn::mean(x, {}), 1e-7, 1e-6));
  EXPECT_TRUE(tensors_close(on_cpu(nn::sum(x.to(kGpu), {0})), nn::sum(x, {0}), 1e-5, 1e-5));
}

TEST(CudaDenseOps, LayerNormParameterGradientsAreDeterministic) {
  REQUIRE_GPU();
  const Tensor x = uniform({3000, 64}, 61).to(kGpu), dy = uniform({3000, 64}, 62).to(kGpu);
  const Tensor gamma = uniform({64}, 63).to(kGpu);
  nn::LayerNormSaved s;
  nn::layernorm_forward(x, gamma, Tensor{}, 1e-5f, &s);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    Tensor dg = Tensor::zeros({64}, DType::f32, kGpu), db = Tensor::zeros({64}, DType::f32, kGpu);
    nn::layernorm_backward(dy, x, gamma, s, dg, db);
    const std::vector<float> v = dg.to_float_vector();
    if (run == 0) first = v;
    else EXPECT_EQ(v, first);
  }
}

TEST(CudaDenseOps, StridedDeviceInputsAndBroadcastBackward) {
  REQUIRE_GPU();
  const Tensor x = uniform({6, 5, 4}, 71);
  const Tensor xt = x.transpose(0, 2);  // non-contiguous on both devices
  const Tensor xg = x.to(kGpu).transpose(0, 2);
  EXPECT_TRUE(tensors_close(on_cpu(nn::activation_forward(xg, nn::Activation::tanh)),
                            nn::activation_forward(xt, nn::Activation::tanh), 2e-6, 2e-6));
  EXPECT_TRUE(tensors_close(on_cpu(nn::sum(xg, {0, 2})), nn::sum(xt, {0, 2}), 1e-5, 1e-5));
  const Tensor dy = uniform({5}, 72);
  EXPECT_TRUE(tensors_close(on_cpu(nn::mean_backward(dy.to(kGpu), {4, 5, 6}, {0, 2})),
                            nn::mean_backward(dy, {4, 5, 6}, {0, 2}), 1e-7, 1e-6));
  EXPECT_TRUE(tensors_close(on_cpu(nn::sum_to_shape(x.to(kGpu), {5, 4})), nn::sum_to_shape(x, {5, 4}), 1e-5, 1e-5));
}

TEST(CudaDenseOps, DeviceSideChecksThrowLikeTheCpu) {
  REQUIRE_GPU();
  const Tensor logits = uniform({4, 7}, 81).to(kGpu);
  const Tensor bad_targets = Tensor::from_vector_i64({1, 7, 2, 0}, {4}).to(kGpu);
  EXPECT_THROW(nn::softmax_cross_entropy_forward(logits, bad_targets), InvalidArgument);
  const Tensor table = uniform({5, 3}, 82).to(kGpu);
  EXPECT_THROW(nn::embedding_forward(Tensor::from_vector_i64({0, 5}, {2}).to(kGpu), table), InvalidArgument);
  // The device is still usable afterwards (no sticky error).
  EXPECT_NO_THROW(nn::embedding_forward(Tensor::from_vector_i64({0, 4}, {2}).to(kGpu), table).to(Device::cpu()));
}

TEST(CudaDenseOps, SparseEmbeddingGradientMatchesCpu) {
  REQUIRE_GPU();
  const Tensor ids = Tensor::from_vector_i64({9, 2, 9, 40, 2, 2, 7}, {7});
  const Tensor dy = uniform({7, 6}, 91);
  const nn::SparseRows c = nn::embedding_backward_sparse(dy, ids, 50);
  const nn::SparseRows g = nn::embedding_backward_sparse(dy.to(kGpu), ids.to(kGpu), 50);
  EXPECT_EQ(on_cpu(g.rows).to_float_vector(), c.rows.to_float_vector());
  EXPECT_TRUE(tensors_close(on_cpu(g.grad), c.grad, 1e-6, 1e-6));
}

}  // namespace

// Layers under a precision policy (nn/module.hpp, Note [Layers under a precision policy]): the
// same model in fp32 and in bf16 / fp16 starts from the same weights; the half-precision run keeps
// its activations in the half type and its parameters and gradients in fp32, and its outputs and
// gradients stay within the half type's accuracy of the fp32 run. A layer that silently ran
// fp32 would fail the dtype checks; one that mangled the conversion would fail the closeness.

#include <gtest/gtest.h>

#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/embedding_bag.hpp"
#include "benchhost/nn/layers.hpp"
#include "benchhost/nn/transformer.hpp"
#include "benchhost/precision.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;
using benchhost::testing::relative_l2;

std::vector<std::vector<float>> values(const std::vector<Tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts) out.push_back(t.to_float_vector());
  return out;
}

std::vector<Tensor> grads(Module& m) {
  std::vector<Tensor> out;
  for (Parameter* p : m.parameters()) {
    EXPECT_EQ(p->value.dtype(), DType::f32) << p->name << ": master weights stay fp32";
    EXPECT_EQ(p->grad.dtype(), DType::f32) << p->name << ": gradients stay fp32";
    out.push_back(p->grad);
  }
  return out;
}

// Relative L2 bounds: a few rounding steps of the half type through a handful of layers.
double bound(DType h) { return h == DType::bf16 ? 3e-2 : 5e-3; }

class MixedPrecisionLayers : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(MixedPrecisionLayers, TransformerBlockTracksFp32) {
  const auto [h, pre_ln] = GetParam();
  TransformerBlockConfig c;
  c.hidden = 32;
  c.heads = 4;
  c.ffn = 64;
  c.hidden_dropout = c.attention_dropout = 0.1f;
  c.pre_ln = pre_ln;
  c.activation = pre_ln ? Activation::gelu_tanh : Activation::gelu_erf;
  c.layernorm_eps = 1e-5f;
  c.init_seed = 5;
  DropoutRng rng{11, 2};
  TransformerBlock ref(c, &rng), mixed(c, &rng);
  mixed.set_precision(PrecisionPolicy::create(h == DType::bf16 ? "bf16" : "fp16", Device::cpu()));
  EXPECT_EQ(ref.precision().precision(), Precision::fp32);
  EXPECT_EQ(mixed.fc1().precision().storage_dtype(OpClass::matmul), h) << "the policy reaches every child";

  AttentionMask mask;
  if (pre_ln) mask.causal = true;
  else mask.key_padding = Tensor::from_vector_i64({7, 5}, {2});
  // The block's input as the previous layer would hand it over: already in the half type.
  const Tensor x = random_tensor({2, 7, 32}, 3).to(h).to(DType::f32);
  const Tensor y_ref = ref.forward(x, mask);
  const Tensor y = mixed.forward(x.to(h), mask);
  EXPECT_EQ(y_ref.dtype(), DType::f32);
  EXPECT_EQ(y.dtype(), h) << "activations stay in the half type";
  EXPECT_LT(relative_l2(values({y}), values({y_ref})), bound(h));

  const Tensor dy = random_tensor({2, 7, 32}, 4).to(h).to(DType::f32);
  const Tensor dx_ref = ref.backward(dy);
  const Tensor dx = mixed.backward(dy.to(h));
  EXPECT_EQ(dx.dtype(), h) << "the input gradient comes back in the input's dtype";
  EXPECT_LT(relative_l2(values({dx}), values({dx_ref})), 2 * bound(h));
  EXPECT_LT(relative_l2(values(grads(mixed)), values(grads(ref))), 2 * bound(h));
}

INSTANTIATE_TEST_SUITE_P(Policies, MixedPrecisionLayers,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_pre_ln" : "_post_ln");
                         });

// A small convolutional stack: Conv2d -> BatchNorm2d(+ReLU) -> MaxPool2d -> GlobalAvgPool -> Linear.
struct ConvNet : Module {
  Conv2d* conv;
  BatchNorm2d* bn;
  MaxPool2d* pool;
  GlobalAvgPool* gap;
  Linear* fc;
  explicit ConvNet(ImageLayout layout) {
    Conv2dSpec cs;
    cs.pad_h = cs.pad_w = 1;
    cs.layout = layout;
    conv = &register_module("conv", std::make_unique<Conv2d>(3, 8, 3, 3, cs));
    conv->weight().value.copy_(random_tensor(conv->weight().value.shape(), 21, -0.3f, 0.3f));
    BatchNormSpec bs;
    bs.fuse_relu = true;
    bs.layout = layout;
    bn = &register_module("bn", std::make_unique<BatchNorm2d>(8, bs));
    Pool2dSpec ps;
    ps.kernel_h = ps.kernel_w = ps.stride_h = ps.stride_w = 2;
    ps.layout = layout;
    pool = &register_module("pool", std::make_unique<MaxPool2d>(ps));
    gap = &register_module("gap", std::make_unique<GlobalAvgPool>(layout));
    fc = &register_module("fc", std::make_unique<Linear>(8, 5, true, Activation::none, 9));
  }
  Tensor forward(const Tensor& x) { return fc->forward(gap->forward(pool->forward(bn->forward(conv->forward(x))))); }
  Tensor backward(const Tensor& dy) {
    return conv->backward(bn->backward(pool->backward(gap->backward(fc->backward(dy)))));
  }
};

class MixedPrecisionConv : public ::testing::TestWithParam<ImageLayout> {};

TEST_P(MixedPrecisionConv, ConvBnPoolLinearTracksFp32) {
  const ImageLayout layout = GetParam();
  ConvNet ref(layout), mixed(layout);
  mixed.set_precision(PrecisionPolicy::create("bf16", Device::cpu()));
  const Shape xs = layout == ImageLayout::nchw ? Shape{4, 3, 8, 8} : Shape{4, 8, 8, 3};
  const Tensor x = random_tensor(xs, 30).to(DType::bf16).to(DType::f32);
  const Tensor y_ref = ref.forward(x);
  const Tensor y = mixed.forward(x);  // an f32 input: the first conv converts it
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_LT(relative_l2(values({y}), values({y_ref})), bound(DType::bf16));
  const Tensor dy = random_tensor({4, 5}, 31);
  const Tensor dx_ref = ref.backward(dy);
  const Tensor dx = mixed.backward(dy);
  EXPECT_EQ(dx.dtype(), DType::f32) << "the input was f32, so is its gradient";
  EXPECT_LT(relative_l2(values({dx}), values({dx_ref})), 2 * bound(DType::bf16));
  EXPECT_LT(relative_l2(values(grads(mixed)), values(grads(ref))), 2 * bound(DType::bf16));
  EXPECT_LT(relative_l2(values({mixed.bn->running_mean(), mixed.bn->running_var()}),
                        values({ref.bn->running_mean(), ref.bn->running_var()})),
            bound(DType::bf16))
      << "running statistics are f32 and track the fp32 run";
}

INSTANTIATE_TEST_SUITE_P(Layouts, MixedPrecisionConv, ::testing::Values(ImageLayout::nchw, ImageLayout::nhwc),
                         [](const auto& info) { return info.param == ImageLayout::nchw ? "nchw" : "nhwc"; });

TEST(MixedPrecisionEmbeddings, StoreTheHalfTypeAndAccumulateFp32Gradients) {
  Embedding ref(50, 16, false, 3), mixed(50, 16, false, 3);
  mixed.set_precision(PrecisionPolicy::create("bf16", Device::cpu()));
  const Tensor ids = Tensor::from_vector_i64({1, 7, 7, 49, 0, 3}, {2, 3});
  const Tensor e = mixed.forward(ids);
  EXPECT_EQ(e.dtype(), DType::bf16);
  EXPECT_LT(relative_l2(values({e}), values({ref.forward(ids)})), 1e-2);
  const Tensor dy = random_tensor({2, 3, 16}, 8);
  ref.backward(dy);
  mixed.backward(dy.to(DType::bf16));
  EXPECT_LT(relative_l2(values(grads(mixed)), values(grads(ref))), 1e-2);

  EmbeddingBag bag_ref(40, 8), bag(40, 8);
  bag_ref.weight().value.copy_(random_tensor({40, 8}, 12));
  bag.weight().value.copy_(bag_ref.weight().value);
  bag.set_precision(PrecisionPolicy::create("fp16", Device::cpu()));
  const Tensor idx = Tensor::from_vector_i64({0, 5, 5, 39, 2, 2}, {3, 2});
  const Tensor pooled = bag.forward(idx);
  EXPECT_EQ(pooled.dtype(), DType::f16);
  EXPECT_LT(relative_l2(values({pooled}), values({bag_ref.forward(idx)})), 2e-3);
  const Tensor dp = random_tensor({3, 8}, 13);
  bag_ref.backward(dp);
  bag.backward(dp.to(DType::f16));
  EXPECT_LT(relative_l2(values(grads(bag)), values(grads(bag_ref))), 2e-3);
  EXPECT_EQ(bag.weight().sparse_rows.numel(), 4) << "rows 0, 2, 5, 39 were touched";
}

}  // namespace
}  // namespace benchhost::nn

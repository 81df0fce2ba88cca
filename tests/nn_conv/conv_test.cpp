// Convolution, batch norm and pooling (nn/conv.hpp): the dispatched implementation (oneDNN on
// CPU) against the plain reference, backward passes against finite differences, NCHW/NHWC
// consistency, layers (gradient accumulation, grad-ready hooks) and error reporting.

#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/nn/registry.hpp"
#include "common/gradcheck.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::nn;
using benchhost::testing::GradcheckOptions;
using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;

/// Run the op's reference implementation directly on a call.
void run_reference(const char* op, OpCall& call) {
  const OpDef& def = OpRegistry::instance().get(op);
  for (const OpImpl& impl : def.impls)
    if (impl.is_reference) {
      impl.run(call);
      return;
    }
  FAIL() << op << " has no reference implementation";
}

Tensor ref_conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dSpec& s) {
  OpCall c;
  c.inputs = {x, w, b};
  c.outputs = {Tensor::empty(conv2d_output_shape(x.shape(), w.shape(), s))};
  c.attrs.set_ints("stride", {s.stride_h, s.stride_w});
  c.attrs.set_ints("pad", {s.pad_h, s.pad_w});
  c.attrs.set_ints("dilation", {s.dilation_h, s.dilation_w});
  c.attrs.set("groups", static_cast<double>(s.groups));
  c.attrs.set("layout", s.layout == ImageLayout::nhwc ? 1.0 : 0.0);
  run_reference("conv2d_forward", c);
  return c.outputs[0];
}

/// NCHW tensor -> NHWC tensor with the same logical values.
Tensor to_nhwc(const Tensor& x) { return x.permute({0, 2, 3, 1}).contiguous(); }

struct ConvCase {
  const char* name;
  ImageDims x;
  std::int64_t out, kh, kw;
  Conv2dSpec spec;
  bool bias;
};

std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> v;
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    Conv2dSpec plain;
    plain.layout = layout;
    Conv2dSpec pad1 = plain;
    pad1.pad_h = pad1.pad_w = 1;
    Conv2dSpec s2 = pad1;
    s2.stride_h = s2.stride_w = 2;
    Conv2dSpec dil = plain;
    dil.dilation_h = 2;
    dil.dilation_w = 3;
    dil.pad_h = 2;
    dil.pad_w = 1;
    Conv2dSpec grp = pad1;
    grp.groups = 4;
    Conv2dSpec dw = pad1;  // depthwise
    dw.groups = 8;
    Conv2dSpec stem = plain;  // ResNet stem geometry, small
    stem.stride_h = stem.stride_w = 2;
    stem.pad_h = stem.pad_w = 3;
    v.push_back({"1x1", {2, 8, 5, 6}, 16, 1, 1, plain, false});
    v.push_back({"3x3_pad1_bias", {2, 8, 7, 5}, 8, 3, 3, pad1, true});
    v.push_back({"3x3_stride2", {3, 16, 9, 8}, 32, 3, 3, s2, false});
    v.push_back({"dilated_asym", {2, 4, 10, 11}, 6, 3, 2, dil, true});
    v.push_back({"groups4", {2, 8, 6, 6}, 12, 3, 3, grp, false});
    v.push_back({"depthwise", {2, 8, 6, 7}, 8, 3, 3, dw, true});
    v.push_back({"stem7x7", {2, 3, 20, 18}, 16, 7, 7, stem, false});
  }
  return v;
}

std::string case_name(const ConvCase& c) {
  return fmt::format("{}_{}", c.name, image_layout_name(c.spec.layout));
}

TEST(Conv2d, ForwardMatchesReference) {
  std::uint64_t seed = 1;
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(case_name(c));
    const Tensor x = random_tensor(image_shape(c.x, c.spec.layout), ++seed);
    const Tensor w = random_tensor({c.out, c.x.c / c.spec.groups, c.kh, c.kw}, ++seed);
    const Tensor b = c.bias ? random_tensor({c.out}, ++seed) : Tensor();
    EXPECT_TRUE(tensors_close(conv2d_forward(x, w, b, c.spec), ref_conv_forward(x, w, b, c.spec),
                              1e-4, 1e-4));
  }
}

TEST(Conv2d, BackwardMatchesReference) {
  std::uint64_t seed = 100;
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(case_name(c));
    const Shape xs = image_shape(c.x, c.spec.layout);
    const Shape ws{c.out, c.x.c / c.spec.groups, c.kh, c.kw};
    const Tensor x = random_tensor(xs, ++seed);
    const Tensor w = random_tensor(ws, ++seed);
    const Tensor dy = random_tensor(conv2d_output_shape(xs, ws, c.spec), ++seed);
    OpCall data;
    data.inputs = {dy, w};
    data.outputs = {Tensor::empty(xs)};
    data.attrs.set_ints("stride", {c.spec.stride_h, c.spec.stride_w});
    data.attrs.set_ints("pad", {c.spec.pad_h, c.spec.pad_w});
    data.attrs.set_ints("dilation", {c.spec.dilation_h, c.spec.dilation_w});
    data.attrs.set("groups", static_cast<double>(c.spec.groups));
    data.attrs.set("layout", c.spec.layout == ImageLayout::nhwc ? 1.0 : 0.0);
    OpCall weights = data;
    run_reference("conv2d_backward_data", data);
    EXPECT_TRUE(tensors_close(conv2d_backward_data(dy, w, xs, c.spec), data.outputs[0], 1e-4,
                              1e-4));
    // Accumulation: start both from the same non-zero gradient.
    const Tensor dw0 = random_tensor(ws, ++seed);
    const Tensor db0 = c.bias ? random_tensor({c.out}, ++seed) : Tensor();
    weights.inputs = {dy, x};
    weights.outputs = {dw0.clone(), c.bias ? db0.clone() : Tensor()};
    run_reference("conv2d_backward_weights", weights);
    Tensor dw = dw0.clone();
    Tensor db = c.bias ? db0.clone() : Tensor();
    conv2d_backward_weights(dy, x, dw, db, c.spec);
    EXPECT_TRUE(tensors_close(dw, weights.outputs[0], 1e-4, 1e-4));
    if (c.bias) EXPECT_TRUE(tensors_close(db, weights.outputs[1], 1e-4, 1e-4));
  }
}

// Conv2d::apply / apply_backward compute what forward / backward do, under the layer's policy
// (RetinaNet's and Mask R-CNN's heads use one layer on every pyramid level this way).
TEST(Conv2d, ApplyComputesWhatForwardAndBackwardDo) {
  Conv2dSpec spec;
  spec.pad_h = spec.pad_w = 1;
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    Conv2d conv(4, 6, 3, 3, spec, true);
    conv.set_precision(PrecisionPolicy::create(precision, Device::cpu()));
    conv.weight().value = random_tensor({6, 4, 3, 3}, 1);
    conv.bias()->value = random_tensor({6}, 2);
    const Tensor x = random_tensor({2, 4, 5, 7}, 3), dy = random_tensor({2, 6, 5, 7}, 4);
    auto zero_grads = [&] {
      conv.weight().grad.zero_();
      conv.bias()->grad.zero_();
    };
    zero_grads();
    const Tensor y_apply = conv.apply(x);
    const Tensor dx_apply = conv.apply_backward(dy, x, true);
    const Tensor dw_apply = conv.weight().grad.clone(), db_apply = conv.bias()->grad.clone();
    // A second use adds its gradients; no input gradient when none is asked for.
    EXPECT_FALSE(conv.apply_backward(dy, x, false).defined());
    EXPECT_TRUE(tensors_close(conv.weight().grad, nn::add(dw_apply, dw_apply), 1e-5, 1e-6));
    zero_grads();
    const Tensor y = conv.forward(x);
    const Tensor dx = conv.backward(dy);
    EXPECT_EQ(y_apply.dtype(), y.dtype());
    EXPECT_EQ(dx_apply.dtype(), DType::f32);
    EXPECT_TRUE(tensors_close(y_apply, y, 0, 0));
    EXPECT_TRUE(tensors_close(dx_apply, dx, 0, 0));
    EXPECT_TRUE(tensors_close(dw_apply, conv.weight().grad, 0, 0));
    EXPECT_TRUE(tensors_close(db_apply, conv.bias()->grad, 0, 0));
  }
}

TEST(Conv2d, BackwardMatchesFiniteDifferences) {
  for (const ConvCase& c : conv_cases()) {
    if (std::string(c.name) == "stem7x7") continue;  // same code path, just slower
    SCOPED_TRACE(case_name(c));
    const Shape xs = image_shape(c.x, c.spec.layout);
    const Shape ws{c.out, c.x.c / c.spec.groups, c.kh, c.kw};
    auto fwd = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{conv2d_forward(in[0], in[1], in[2], c.spec)};
    };
    auto bwd = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      Tensor dw = Tensor::zeros(ws);
      Tensor db = c.bias ? Tensor::zeros({c.out}) : Tensor();
      conv2d_backward_weights(dout[0], in[0], dw, db, c.spec);
      return std::vector<Tensor>{conv2d_backward_data(dout[0], in[1], xs, c.spec), dw, db};
    };
    GradcheckOptions opt;
    opt.max_checks_per_input = 16;  // the reference comparison above covers every element
    EXPECT_GRADCHECK(fwd, bwd,
                     {random_tensor(xs, 7), random_tensor(ws, 8),
                      c.bias ? random_tensor({c.out}, 9) : Tensor()},
                     opt);
  }
}

TEST(Conv2d, NhwcEqualsPermutedNchw) {
  Conv2dSpec s;
  s.pad_h = s.pad_w = 1;
  s.stride_h = 2;
  const Tensor x = random_tensor({2, 16, 9, 7}, 3);
  const Tensor w = random_tensor({24, 16, 3, 3}, 4);
  const Tensor y_nchw = conv2d_forward(x, w, Tensor(), s);
  s.layout = ImageLayout::nhwc;
  const Tensor y_nhwc = conv2d_forward(to_nhwc(x), w, Tensor(), s);
  EXPECT_TRUE(tensors_close(y_nhwc, to_nhwc(y_nchw), 1e-4, 1e-4));
}

TEST(Conv2d, OutputShapeAndMacs) {
  Conv2dSpec s;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 3;
  EXPECT_EQ(conv2d_output_shape({1, 3, 224, 224}, {64, 3, 7, 7}, s), Shape({1, 64, 112, 112}));
  EXPECT_DOUBLE_EQ(conv2d_macs_per_sample({1, 3, 224, 224}, {64, 3, 7, 7}, s),
                   64.0 * 112 * 112 * 3 * 49);
  s.layout = ImageLayout::nhwc;
  EXPECT_EQ(conv2d_output_shape({1, 224, 224, 3}, {64, 3, 7, 7}, s), Shape({1, 112, 112, 64}));
}

TEST(Conv2d, BadShapesAreReported) {
  Conv2dSpec s;
  const Tensor x = random_tensor({1, 3, 8, 8}, 1);
  EXPECT_THROW(conv2d_forward(x, random_tensor({4, 5, 3, 3}, 2), Tensor(), s), InvalidArgument);
  EXPECT_THROW(conv2d_forward(random_tensor({3, 8, 8}, 1), random_tensor({4, 3, 3, 3}, 2),
                              Tensor(), s),
               InvalidArgument);
  EXPECT_THROW(conv2d_forward(x, random_tensor({4, 3, 9, 9}, 2), Tensor(), s), InvalidArgument);
  EXPECT_THROW(conv2d_forward(x, random_tensor({4, 3, 3, 3}, 2), random_tensor({5}, 3), s),
               InvalidArgument);
  s.groups = 2;
  EXPECT_THROW(conv2d_forward(x, random_tensor({4, 1, 3, 3}, 2), Tensor(), s), InvalidArgument);
  s.groups = 1;
  // f16/bf16 activations are taken (ops.hpp's dtype rules); integer images are not.
  EXPECT_THROW(conv2d_forward(x.to(DType::i32), random_tensor({4, 3, 3, 3}, 2), Tensor(), s),
               Unsupported);
  EXPECT_EQ(conv2d_forward(x.to(DType::f16), random_tensor({4, 3, 3, 3}, 2), Tensor(), s).dtype(), DType::f16);
}

// ---- batch norm ----

struct BnCase {
  ImageLayout layout;
  bool relu;
};

class BatchNormTest : public ::testing::TestWithParam<BnCase> {};

TEST_P(BatchNormTest, TrainForwardStatsAndRunningUpdate) {
  const BnCase bc = GetParam();
  BatchNormSpec s;
  s.layout = bc.layout;
  s.fuse_relu = bc.relu;
  s.momentum = 0.25;
  const ImageDims d{4, 6, 5, 3};
  const Tensor x = random_tensor(image_shape(d, bc.layout), 11, -2.0f, 3.0f);
  const Tensor gamma = random_tensor({6}, 12), beta = random_tensor({6}, 13);
  Tensor rm = random_tensor({6}, 14), rv = random_tensor({6}, 15, 0.5f, 1.5f);
  const Tensor rm0 = rm.clone(), rv0 = rv.clone();
  BatchNormSaved saved;
  const Tensor y = batch_norm_forward_train(x, gamma, beta, rm, rv, s, saved);
  OpCall ref;
  ref.inputs = {x, gamma, beta, Tensor(), Tensor()};
  ref.outputs = {Tensor::empty(x.shape()), Tensor::empty({6}), Tensor::empty({6})};
  ref.attrs.set("eps", s.eps).set("training", 1).set("fuse_relu", bc.relu ? 1 : 0);
  ref.attrs.set("layout", bc.layout == ImageLayout::nhwc ? 1 : 0);
  run_reference("batch_norm_forward", ref);
  EXPECT_TRUE(tensors_close(y, ref.outputs[0], 1e-4, 1e-4));
  EXPECT_TRUE(tensors_close(saved.mean, ref.outputs[1], 1e-5, 1e-5));
  EXPECT_TRUE(tensors_close(saved.variance, ref.outputs[2], 1e-5, 1e-4));
  // Running statistics: PyTorch's rule, unbiased variance.
  const double n = static_cast<double>(d.n * d.h * d.w);
  for (std::int64_t c = 0; c < 6; ++c) {
    const double bm = ref.outputs[1].item({c}), bv = ref.outputs[2].item({c});
    EXPECT_NEAR(rm.item({c}), 0.75 * rm0.item({c}) + 0.25 * bm, 1e-5);
    EXPECT_NEAR(rv.item({c}), 0.75 * rv0.item({c}) + 0.25 * bv * n / (n - 1), 1e-5);
  }
}

TEST_P(BatchNormTest, EvalForwardUsesRunningStats) {
  const BnCase bc = GetParam();
  BatchNormSpec s;
  s.layout = bc.layout;
  s.fuse_relu = bc.relu;
  const Tensor x = random_tensor(image_shape({2, 5, 3, 4}, bc.layout), 21);
  const Tensor gamma = random_tensor({5}, 22), beta = random_tensor({5}, 23);
  const Tensor rm = random_tensor({5}, 24), rv = random_tensor({5}, 25, 0.5f, 2.0f);
  const Tensor rm0 = rm.clone();
  const Tensor y = batch_norm_forward_eval(x, gamma, beta, rm, rv, s);
  const ImageDims d = image_dims(x.shape(), bc.layout, "x");
  for (std::int64_t n = 0; n < d.n; ++n)
    for (std::int64_t c = 0; c < d.c; ++c)
      for (std::int64_t h = 0; h < d.h; ++h)
        for (std::int64_t w = 0; w < d.w; ++w) {
          auto at = [&](const Tensor& t) {
            return bc.layout == ImageLayout::nchw ? t.item({n, c, h, w}) : t.item({n, h, w, c});
          };
          double want = gamma.item({c}) * (at(x) - rm.item({c})) /
                            std::sqrt(rv.item({c}) + s.eps) +
                        beta.item({c});
          if (bc.relu) want = std::max(want, 0.0);
          ASSERT_NEAR(at(y), want, 1e-5);
        }
  EXPECT_TRUE(tensors_close(rm, rm0, 0, 0)) << "eval must not touch running stats";
}

TEST_P(BatchNormTest, BackwardMatchesReferenceAndFiniteDifferences) {
  const BnCase bc = GetParam();
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "frozen statistics");
    BatchNormSpec s;
    s.layout = bc.layout;
    s.fuse_relu = bc.relu;
    const Shape xs = image_shape({3, 4, 3, 2}, bc.layout);
    const Tensor rm = random_tensor({4}, 31), rv = random_tensor({4}, 32, 0.5f, 1.5f);
    auto forward = [&](const Tensor& x, const Tensor& g, const Tensor& b, BatchNormSaved& sv) {
      Tensor m = rm.clone(), v = rv.clone();
      return training ? batch_norm_forward_train(x, g, b, m, v, s, sv)
                      : batch_norm_forward_eval(x, g, b, m, v, s, &sv);
    };
    auto fwd = [&](const std::vector<Tensor>& in) {
      BatchNormSaved sv;
      return std::vector<Tensor>{forward(in[0], in[1], in[2], sv)};
    };
    auto bwd = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      BatchNormSaved sv;
      forward(in[0], in[1], in[2], sv);
      Tensor dg = Tensor::zeros({4}), db = Tensor::zeros({4});
      Tensor dx = batch_norm_backward(dout[0], in[0], in[1], sv, s, dg, db);
      return std::vector<Tensor>{dx, dg, db};
    };
    const Tensor x = random_tensor(xs, 33, -2.0f, 2.0f);
    const Tensor gamma = random_tensor({4}, 34, 0.5f, 1.5f), beta = random_tensor({4}, 35);
    GradcheckOptions opt;
    opt.eps = bc.relu ? 1e-3 : 1e-2;
    EXPECT_GRADCHECK(fwd, bwd, {x, gamma, beta}, opt);

    // Against the reference backward on the same saved state (accumulating into non-zero grads).
    BatchNormSaved sv;
    forward(x, gamma, beta, sv);
    const Tensor dy = random_tensor(xs, 36);
    const Tensor dg0 = random_tensor({4}, 37), db0 = random_tensor({4}, 38);
    Tensor dg = dg0.clone(), db = db0.clone();
    const Tensor dx = batch_norm_backward(dy, x, gamma, sv, s, dg, db);
    OpCall ref;
    ref.inputs = {dy, x, gamma, sv.mean, sv.variance, bc.relu ? sv.output : Tensor()};
    ref.outputs = {Tensor::empty(xs), dg0.clone(), db0.clone()};
    ref.attrs.set("eps", s.eps).set("training", training ? 1 : 0).set("fuse_relu", bc.relu);
    ref.attrs.set("layout", bc.layout == ImageLayout::nhwc ? 1 : 0);
    run_reference("batch_norm_backward", ref);
    EXPECT_TRUE(tensors_close(dx, ref.outputs[0], 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(dg, ref.outputs[1], 1e-4, 1e-4));
    EXPECT_TRUE(tensors_close(db, ref.outputs[2], 1e-4, 1e-4));
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, BatchNormTest,
                         ::testing::Values(BnCase{ImageLayout::nchw, false},
                                           BnCase{ImageLayout::nhwc, false},
                                           BnCase{ImageLayout::nchw, true},
                                           BnCase{ImageLayout::nhwc, true}),
                         [](const auto& info) {
                           return fmt::format("{}{}", image_layout_name(info.param.layout),
                                              info.param.relu ? "_relu" : "");
                         });

TEST(BatchNorm, SingleValuePerChannelIsRejected) {
  BatchNormSpec s;
  Tensor rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0);
  BatchNormSaved sv;
  EXPECT_THROW(batch_norm_forward_train(random_tensor({1, 3, 1, 1}, 1), Tensor::full({3}, 1.0),
                                        Tensor::zeros({3}), rm, rv, s, sv),
               InvalidArgument);
}

// ---- pooling ----

/// Distinct values spaced 0.1 apart in a seeded order: finite differences never flip a max.
Tensor distinct_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  std::vector<std::int64_t> order(static_cast<std::size_t>(t.numel()));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(seed);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  for (std::size_t i = 0; i < order.size(); ++i)
    t.data<float>()[i] = 0.1f * static_cast<float>(order[i]) - 3.0f;
  return t;
}

std::vector<Pool2dSpec> pool_specs() {
  std::vector<Pool2dSpec> v;
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc})
    for (bool include_pad : {true, false}) {
      Pool2dSpec a;
      a.kernel_h = a.kernel_w = 3;
      a.stride_h = a.stride_w = 2;
      a.pad_h = a.pad_w = 1;
      a.count_include_pad = include_pad;
      a.layout = layout;
      Pool2dSpec b;
      b.kernel_h = 2;
      b.kernel_w = 3;
      b.stride_h = 1;
      b.stride_w = 2;
      b.pad_w = 1;
      b.count_include_pad = include_pad;
      b.layout = layout;
      v.push_back(a);
      v.push_back(b);
    }
  return v;
}

OpCall pool_call(const Pool2dSpec& s) {
  OpCall c;
  c.attrs.set_ints("kernel", {s.kernel_h, s.kernel_w});
  c.attrs.set_ints("stride", {s.stride_h, s.stride_w});
  c.attrs.set_ints("pad", {s.pad_h, s.pad_w});
  c.attrs.set("count_include_pad", s.count_include_pad ? 1 : 0);
  c.attrs.set("layout", s.layout == ImageLayout::nhwc ? 1 : 0);
  return c;
}

TEST(Pooling, MatchesReferenceAndFiniteDifferences) {
  std::uint64_t seed = 50;
  for (const Pool2dSpec& s : pool_specs()) {
    SCOPED_TRACE(fmt::format("k{}x{} s{}x{} p{}x{} inc{} {}", s.kernel_h, s.kernel_w, s.stride_h,
                             s.stride_w, s.pad_h, s.pad_w, s.count_include_pad,
                             image_layout_name(s.layout)));
    const Shape xs = image_shape({2, 3, 7, 8}, s.layout);
    const Tensor x = distinct_tensor(xs, ++seed);
    const Tensor ymax = max_pool2d_forward(x, s);
    const Tensor yavg = avg_pool2d_forward(x, s);
    OpCall rmax = pool_call(s), ravg = pool_call(s);
    rmax.inputs = {x};
    rmax.outputs = {Tensor::empty(ymax.shape())};
    ravg.inputs = {x};
    ravg.outputs = {Tensor::empty(yavg.shape())};
    run_reference("max_pool2d_forward", rmax);
    run_reference("avg_pool2d_forward", ravg);
    EXPECT_TRUE(tensors_close(ymax, rmax.outputs[0], 0, 0));
    EXPECT_TRUE(tensors_close(yavg, ravg.outputs[0], 1e-5, 1e-5));

    const Tensor dy = random_tensor(ymax.shape(), ++seed);
    OpCall bmax = pool_call(s), bavg = pool_call(s);
    bmax.inputs = {dy, x, ymax};
    bmax.outputs = {Tensor::empty(xs)};
    bavg.inputs = {dy};
    bavg.outputs = {Tensor::empty(xs)};
    run_reference("max_pool2d_backward", bmax);
    run_reference("avg_pool2d_backward", bavg);
    EXPECT_TRUE(tensors_close(max_pool2d_backward(dy, x, ymax, s), bmax.outputs[0], 1e-6, 1e-6));
    EXPECT_TRUE(tensors_close(avg_pool2d_backward(dy, xs, s), bavg.outputs[0], 1e-5, 1e-5));

    auto fmax = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{max_pool2d_forward(in[0], s)};
    };
    auto bmaxf = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      return std::vector<Tensor>{max_pool2d_backward(dout[0], in[0], max_pool2d_forward(in[0], s), s)};
    };
    auto favg = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{avg_pool2d_forward(in[0], s)};
    };
    auto bavgf = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      return std::vector<Tensor>{avg_pool2d_backward(dout[0], xs, s)};
    };
    EXPECT_GRADCHECK(fmax, bmaxf, {x});
    EXPECT_GRADCHECK(favg, bavgf, {x});
  }
}

TEST(Pooling, GlobalAveragePool) {
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    SCOPED_TRACE(image_layout_name(layout));
    const ImageDims d{3, 5, 4, 6};
    const Tensor x = random_tensor(image_shape(d, layout), 61);
    const Tensor y = global_avg_pool_forward(x, layout);
    ASSERT_EQ(y.shape(), Shape({3, 5}));
    for (std::int64_t n = 0; n < d.n; ++n)
      for (std::int64_t c = 0; c < d.c; ++c) {
        double sum = 0;
        for (std::int64_t h = 0; h < d.h; ++h)
          for (std::int64_t w = 0; w < d.w; ++w)
            sum += layout == ImageLayout::nchw ? x.item({n, c, h, w}) : x.item({n, h, w, c});
        EXPECT_NEAR(y.item({n, c}), sum / (d.h * d.w), 1e-5);
      }
    auto fwd = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{global_avg_pool_forward(in[0], layout)};
    };
    auto bwd = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      return std::vector<Tensor>{global_avg_pool_backward(dout[0], in[0].shape(), layout)};
    };
    EXPECT_GRADCHECK(fwd, bwd, {x});
  }
}

TEST(Pooling, BadSpecsAreReported) {
  Pool2dSpec s;
  s.kernel_h = s.kernel_w = 3;
  s.pad_h = 2;
  EXPECT_THROW(max_pool2d_forward(random_tensor({1, 2, 8, 8}, 1), s), InvalidArgument);
  s.pad_h = 0;
  EXPECT_THROW(avg_pool2d_forward(random_tensor({1, 2, 2, 8}, 1), s), InvalidArgument);
}

// ---- layers ----

TEST(ConvLayers, GradientsAccumulateAndHooksFire) {
  Conv2dSpec s;
  s.pad_h = s.pad_w = 1;
  s.layout = ImageLayout::nhwc;
  Conv2d conv(4, 8, 3, 3, s, /*bias=*/true);
  conv.weight().value.copy_(random_tensor(conv.weight().value.shape(), 71));
  int ready = 0;
  for (Parameter* p : conv.parameters()) p->grad_ready_hook = [&](Parameter&) { ++ready; };
  const Tensor x = random_tensor({2, 5, 5, 4}, 72);
  const Tensor dy = random_tensor({2, 5, 5, 8}, 73);
  conv.forward(x);
  const Tensor dx1 = conv.backward(dy);
  EXPECT_EQ(ready, 2);
  const Tensor g1 = conv.weight().grad.clone();
  conv.forward(x);
  conv.backward(dy);
  Tensor twice = g1.clone();
  for (std::int64_t i = 0; i < twice.numel(); ++i) twice.data<float>()[i] *= 2;
  EXPECT_TRUE(tensors_close(conv.weight().grad, twice, 1e-5, 1e-5));
  EXPECT_TRUE(tensors_close(dx1, conv2d_backward_data(dy, conv.weight().value, x.shape(), s), 0, 0));
  conv.set_input_grad(false);
  conv.forward(x);
  EXPECT_FALSE(conv.backward(dy).defined());
  EXPECT_THROW(conv.backward(dy), InvalidArgument);  // no forward since the last backward
}

TEST(ConvLayers, BatchNormLayerModesAndNames) {
  BatchNormSpec s;
  s.fuse_relu = true;
  BatchNorm2d bn(3, s);
  auto params = bn.parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_FALSE(params[0]->weight_decay);
  EXPECT_FALSE(params[1]->weight_decay);
  EXPECT_EQ(bn.buffers().size(), 2u);
  const Tensor x = random_tensor({4, 3, 2, 2}, 81);
  const Tensor y = bn.forward(x);
  for (float v : y.to_float_vector()) EXPECT_GE(v, 0.0f);
  const Tensor dx = bn.backward(random_tensor(x.shape(), 82));
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_NE(bn.running_mean().item({0}), 0.0);
  bn.train(false);
  const Tensor rm = bn.running_mean().clone();
  bn.forward(x);
  EXPECT_TRUE(tensors_close(bn.running_mean(), rm, 0, 0));
  EXPECT_THROW(bn.backward(random_tensor(x.shape(), 83)), InvalidArgument);
}

TEST(ConvLayers, PoolLayers) {
  Pool2dSpec s;
  s.kernel_h = s.kernel_w = 3;
  s.stride_h = s.stride_w = 2;
  s.pad_h = s.pad_w = 1;
  MaxPool2d mp(s);
  const Tensor x = distinct_tensor({2, 3, 8, 8}, 91);
  const Tensor y = mp.forward(x);
  EXPECT_EQ(y.shape(), Shape({2, 3, 4, 4}));
  const Tensor dy = random_tensor(y.shape(), 92);
  EXPECT_TRUE(tensors_close(mp.backward(dy), max_pool2d_backward(dy, x, y, s), 0, 0));
  GlobalAvgPool gap(ImageLayout::nchw);
  EXPECT_EQ(gap.forward(x).shape(), Shape({2, 3}));
  EXPECT_EQ(gap.backward(random_tensor({2, 3}, 93)).shape(), x.shape());
  AvgPool2d ap(s);
  EXPECT_EQ(ap.forward(x).shape(), Shape({2, 3, 4, 4}));
  EXPECT_EQ(ap.backward(dy).shape(), x.shape());
}

TEST(ConvLayers, OpsAreRegisteredWithReferenceAndOneDnn) {
  for (const char* op : {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_weights",
                         "batch_norm_forward", "batch_norm_backward", "max_pool2d_forward",
                         "max_pool2d_backward", "avg_pool2d_forward", "avg_pool2d_backward"}) {
    SCOPED_TRACE(op);
    const OpDef* def = OpRegistry::instance().find(op);
    ASSERT_NE(def, nullptr);
    ASSERT_TRUE(static_cast<bool>(def->make_cases));
    int refs = 0, onednn = 0;
    for (const OpImpl& impl : def->impls) {
      refs += impl.is_reference ? 1 : 0;
      onednn += impl.name == "cpu.onednn" ? 1 : 0;
    }
    EXPECT_EQ(refs, 1);
    EXPECT_EQ(onednn, 1);
    // The example cases run and agree between implementations (the parity test does this on
    // every device; here just the CPU pair).
    for (OpCall& c : def->make_cases(5)) {
      OpCall ref = c;
      for (Tensor& t : ref.outputs)
        if (t.defined()) t = t.clone();
      run_reference(op, ref);
      OpRegistry::instance().dispatch(op, c);
      for (std::size_t i = 0; i < c.outputs.size(); ++i)
        if (c.outputs[i].defined())
          EXPECT_TRUE(tensors_close(c.outputs[i], ref.outputs[i], def->atol, def->rtol));
    }
  }
}

}  // namespace

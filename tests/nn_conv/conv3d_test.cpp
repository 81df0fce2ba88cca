// 3-d convolution and transposed convolution (nn/conv3d.hpp): output shapes (3D U-Net's),
// oneDNN against the plain reference, backward passes against finite differences, the
// transposed convolution as the adjoint of the convolution, NCDHW/NDHWC consistency, the layers,
// an independent cross-check against numpy and PyTorch (when python3 has them), errors, and the
// CUDA implementations against the CPU (skipped without a device).

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "benchhost/data/npy.hpp"
#include "benchhost/device.hpp"
#include "benchhost/nn/conv3d.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/precision.hpp"
#include "common/gradcheck.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::nn;
using benchhost::testing::GradcheckOptions;
using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;
namespace fs = std::filesystem;

Conv3dSpec spec3(std::int64_t stride, std::int64_t pad, VolumeLayout layout = VolumeLayout::ncdhw) {
  Conv3dSpec s;
  s.stride_d = s.stride_h = s.stride_w = stride;
  s.pad_d = s.pad_h = s.pad_w = pad;
  s.layout = layout;
  return s;
}

Attrs attrs_of(const Conv3dSpec& s) {
  Attrs a;
  a.set_ints("stride", {s.stride_d, s.stride_h, s.stride_w});
  a.set_ints("pad", {s.pad_d, s.pad_h, s.pad_w});
  a.set("layout", s.layout == VolumeLayout::ndhwc ? 1.0 : 0.0);
  return a;
}

/// Run the op's implementation named `impl` (e.g. "cpu.ref") directly on a call.
void run_impl(const std::string& op, const std::string& impl_name, OpCall& call) {
  const OpDef& def = OpRegistry::instance().get(op);
  for (const OpImpl& impl : def.impls)
    if (impl.name == impl_name && impl.device == DeviceType::cpu) {
      impl.run(call);
      return;
    }
  FAIL() << op << " has no implementation " << impl_name;
}

Tensor to_ndhwc(const Tensor& x) { return x.permute({0, 2, 3, 4, 1}).contiguous(); }
Tensor to_ncdhw(const Tensor& x) { return x.permute({0, 4, 1, 2, 3}).contiguous(); }

Shape weight_shape(bool transposed, std::int64_t in, std::int64_t out, std::int64_t k) {
  return transposed ? Shape{in, out, k, k, k} : Shape{out, in, k, k, k};
}

// The functional API of one of the two ops.
struct Ops {
  bool transposed;
  const char* prefix;
  Shape out_shape(const Shape& x, const Shape& w, const Conv3dSpec& s) const {
    return transposed ? conv_transpose3d_output_shape(x, w, s) : conv3d_output_shape(x, w, s);
  }
  Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv3dSpec& s) const {
    return transposed ? conv_transpose3d_forward(x, w, b, s) : conv3d_forward(x, w, b, s);
  }
  Tensor backward_data(const Tensor& dy, const Tensor& w, const Shape& xs,
                       const Conv3dSpec& s) const {
    return transposed ? conv_transpose3d_backward_data(dy, w, xs, s)
                      : conv3d_backward_data(dy, w, xs, s);
  }
  void backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db,
                        const Conv3dSpec& s) const {
    if (transposed)
      conv_transpose3d_backward_weights(dy, x, dw, db, s);
    else
      conv3d_backward_weights(dy, x, dw, db, s);
  }
  std::string op(const char* suffix) const { return fmt::format("{}_{}", prefix, suffix); }
};

const Ops kConv{false, "conv3d"};
const Ops kTransposed{true, "conv_transpose3d"};

struct Case {
  const char* name;
  VolumeDims x;  // logical n, c, d, h, w
  std::int64_t out, k;
  Conv3dSpec spec;
  bool bias;
};

std::vector<Case> cases(bool transposed) {
  std::vector<Case> v;
  for (VolumeLayout layout : {VolumeLayout::ncdhw, VolumeLayout::ndhwc}) {
    Conv3dSpec aniso = spec3(2, 1, layout);
    aniso.stride_h = 1;
    aniso.pad_w = 0;
    if (!transposed) {
      v.push_back({"k3s1p1_bias", {2, 4, 6, 5, 7}, 6, 3, spec3(1, 1, layout), true});
      v.push_back({"k3s2p1", {2, 5, 8, 7, 5}, 4, 3, spec3(2, 1, layout), false});
      v.push_back({"k1_head_bias", {2, 6, 3, 4, 5}, 3, 1, spec3(1, 0, layout), true});
      v.push_back({"k2_aniso_bias", {1, 3, 5, 4, 6}, 5, 2, aniso, true});
      v.push_back({"k3s1p0", {1, 3, 5, 3, 4}, 2, 3, spec3(1, 0, layout), false});
    } else {
      v.push_back({"k2s2_bias", {2, 6, 3, 4, 2}, 4, 2, spec3(2, 0, layout), true});
      v.push_back({"k3s2p1", {2, 4, 3, 2, 4}, 5, 3, spec3(2, 1, layout), false});
      v.push_back({"k3s1p1_bias", {1, 3, 4, 5, 3}, 4, 3, spec3(1, 1, layout), true});
      v.push_back({"k2_aniso", {1, 3, 3, 4, 2}, 2, 2, aniso, false});
      v.push_back({"k3s2p0_bias", {1, 2, 2, 3, 3}, 3, 3, spec3(2, 0, layout), true});
    }
  }
  return v;
}

std::string case_name(const Case& c) {
  return fmt::format("{}_{}", c.name, volume_layout_name(c.spec.layout));
}

// ---------------------------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------------------------

TEST(Conv3d, OutputShapesOfUnet3d) {
  const Conv3dSpec same = spec3(1, 1), down = spec3(2, 1), up = spec3(2, 0), head = spec3(1, 0);
  // Input block: 1 -> 32 channels at 128^3, k3 s1 p1.
  EXPECT_EQ(conv3d_output_shape({2, 1, 128, 128, 128}, {32, 1, 3, 3, 3}, same),
            Shape({2, 32, 128, 128, 128}));
  // Downsampling: k3 s2 p1 halves 8 -> 4 (and 128 -> 64, 5 -> 3).
  EXPECT_EQ(conv3d_output_shape({1, 256, 8, 8, 8}, {320, 256, 3, 3, 3}, down),
            Shape({1, 320, 4, 4, 4}));
  EXPECT_EQ(conv3d_output_shape({1, 32, 128, 128, 128}, {64, 32, 3, 3, 3}, down),
            Shape({1, 64, 64, 64, 64}));
  EXPECT_EQ(conv3d_output_shape({1, 2, 5, 5, 5}, {2, 2, 3, 3, 3}, down), Shape({1, 2, 3, 3, 3}));
  // Upsampling: transposed k2 s2 doubles 4 -> 8; weight [I, O, 2, 2, 2].
  EXPECT_EQ(conv_transpose3d_output_shape({1, 320, 4, 4, 4}, {320, 320, 2, 2, 2}, up),
            Shape({1, 320, 8, 8, 8}));
  EXPECT_EQ(conv_transpose3d_output_shape({1, 64, 64, 64, 64}, {64, 32, 2, 2, 2}, up),
            Shape({1, 32, 128, 128, 128}));
  // Output head: 1x1x1, 32 -> 3 classes.
  EXPECT_EQ(conv3d_output_shape({1, 32, 128, 128, 128}, {3, 32, 1, 1, 1}, head),
            Shape({1, 3, 128, 128, 128}));
  // NDHWC: the same logical shapes, channels last.
  EXPECT_EQ(conv3d_output_shape({1, 8, 8, 8, 256}, {320, 256, 3, 3, 3},
                                spec3(2, 1, VolumeLayout::ndhwc)),
            Shape({1, 4, 4, 4, 320}));
  EXPECT_EQ(conv_transpose3d_output_shape({1, 4, 4, 4, 320}, {320, 256, 2, 2, 2},
                                          spec3(2, 0, VolumeLayout::ndhwc)),
            Shape({1, 8, 8, 8, 256}));
  // Transposed k3 s2 p1: (in - 1) * 2 - 2 + 3.
  EXPECT_EQ(conv_transpose3d_output_shape({1, 4, 5, 6, 7}, {4, 3, 3, 3, 3}, down),
            Shape({1, 3, 9, 11, 13}));
}

TEST(Conv3d, MacsPerSample) {
  EXPECT_DOUBLE_EQ(conv3d_macs_per_sample({2, 32, 16, 16, 16}, {64, 32, 3, 3, 3}, spec3(2, 1)),
                   64.0 * 8 * 8 * 8 * 32 * 27);
  // Every input element meets every weight of its channel: I * D*H*W * O * k^3.
  EXPECT_DOUBLE_EQ(
      conv_transpose3d_macs_per_sample({2, 64, 8, 8, 8}, {64, 32, 2, 2, 2}, spec3(2, 0)),
      64.0 * 512 * 32 * 8);
}

// ---------------------------------------------------------------------------------------------
// oneDNN against the reference
// ---------------------------------------------------------------------------------------------

void check_against_reference(const Ops& ops) {
  std::uint64_t seed = ops.transposed ? 500 : 1;
  for (const Case& c : cases(ops.transposed)) {
    SCOPED_TRACE(case_name(c));
    const Shape xs = volume_shape(c.x, c.spec.layout);
    const Shape ws = weight_shape(ops.transposed, c.x.c, c.out, c.k);
    const Tensor x = random_tensor(xs, ++seed);
    const Tensor w = random_tensor(ws, ++seed);
    const Tensor b = c.bias ? random_tensor({c.out}, ++seed) : Tensor();
    const Shape ys = ops.out_shape(xs, ws, c.spec);
    const Tensor dy = random_tensor(ys, ++seed);

    OpCall fwd;
    fwd.inputs = {x, w, b};
    fwd.outputs = {Tensor::empty(ys)};
    fwd.attrs = attrs_of(c.spec);
    OpCall ref_fwd = fwd;
    ref_fwd.outputs = {Tensor::empty(ys)};
    run_impl(ops.op("forward"), "cpu.ref", ref_fwd);
    run_impl(ops.op("forward"), "cpu.onednn", fwd);
    EXPECT_TRUE(tensors_close(fwd.outputs[0], ref_fwd.outputs[0], 1e-4, 1e-4));
    // The public function dispatches to oneDNN.
    EXPECT_TRUE(tensors_close(ops.forward(x, w, b, c.spec), ref_fwd.outputs[0], 1e-4, 1e-4));

    OpCall data;
    data.inputs = {dy, w};
    data.outputs = {Tensor::empty(xs)};
    data.attrs = attrs_of(c.spec);
    run_impl(ops.op("backward_data"), "cpu.ref", data);
    EXPECT_TRUE(tensors_close(ops.backward_data(dy, w, xs, c.spec), data.outputs[0], 1e-4, 1e-4));

    // Accumulation: both start from the same non-zero gradient.
    const Tensor dw0 = random_tensor(ws, ++seed);
    const Tensor db0 = c.bias ? random_tensor({c.out}, ++seed) : Tensor();
    OpCall weights;
    weights.inputs = {dy, x};
    weights.outputs = {dw0.clone(), c.bias ? db0.clone() : Tensor()};
    weights.attrs = attrs_of(c.spec);
    run_impl(ops.op("backward_weights"), "cpu.ref", weights);
    Tensor dw = dw0.clone();
    Tensor db = c.bias ? db0.clone() : Tensor();
    ops.backward_weights(dy, x, dw, db, c.spec);
    EXPECT_TRUE(tensors_close(dw, weights.outputs[0], 1e-4, 1e-4));
    if (c.bias) EXPECT_TRUE(tensors_close(db, weights.outputs[1], 1e-4, 1e-4));
  }
}

TEST(Conv3d, OneDnnMatchesReference) { check_against_reference(kConv); }
TEST(ConvTranspose3d, OneDnnMatchesReference) { check_against_reference(kTransposed); }

// A hand-computed transposed convolution: 1 channel, 1-d along W (D = H = 1), k2 s2 and k3 s2 p1.
TEST(ConvTranspose3d, HandComputedExample) {
  const Tensor x = Tensor::from_vector({1, 2, 3}, {1, 1, 1, 1, 3});
  // k2 s2: each input element writes x * [w0, w1] into its own pair: [1a, 1b, 2a, 2b, 3a, 3b].
  const Tensor w2 = Tensor::from_vector({10, 100}, {1, 1, 1, 1, 2});
  Conv3dSpec s = spec3(1, 0);
  s.stride_w = 2;
  const Tensor y = conv_transpose3d_forward(x, w2, Tensor::from_vector({0.5f}, {1}), s);
  EXPECT_EQ(y.to_float_vector(), std::vector<float>({10.5f, 100.5f, 20.5f, 200.5f, 30.5f, 300.5f}));
  // k3 s2 p1: full output (7) = [1a, 1b, 1c+2a, 2b, 2c+3a, 3b, 3c], cropped by 1 each side.
  const Tensor w3 = Tensor::from_vector({1, 10, 100}, {1, 1, 1, 1, 3});
  s.pad_w = 1;
  const Tensor y3 = conv_transpose3d_forward(x, w3, Tensor(), s);
  EXPECT_EQ(y3.to_float_vector(), std::vector<float>({10, 102, 20, 203, 30}));
}

// <conv(a, w), b> == <a, conv_transpose(b, w)>: the transposed convolution is the adjoint of the
// convolution with the same weight tensor, for every stride and padding.
TEST(ConvTranspose3d, IsTheAdjointOfConv3d) {
  std::uint64_t seed = 900;
  int compared = 0;
  for (const Case& c : cases(false)) {
    SCOPED_TRACE(case_name(c));
    const Shape as = volume_shape(c.x, c.spec.layout);
    // [O, I, k...]: the transposed convolution reads it as [I', O', k...] with I' = O.
    const Shape ws = weight_shape(false, c.x.c, c.out, c.k);
    const Tensor a = random_tensor(as, ++seed);
    const Tensor w = random_tensor(ws, ++seed);
    const Tensor ca = conv3d_forward(a, w, Tensor(), c.spec);
    const Tensor b = random_tensor(ca.shape(), ++seed);
    // Cropped strided convolutions lose the last rows; the adjoint's output has x's shape only
    // when the geometry is exact, so compare where it is.
    const Shape ts = conv_transpose3d_output_shape(b.shape(), ws, c.spec);
    if (ts != as) continue;
    ++compared;
    const Tensor tb = conv_transpose3d_forward(b, w, Tensor(), c.spec);
    double lhs = 0, rhs = 0;
    const auto cav = ca.to_float_vector(), bv = b.to_float_vector();
    const auto av = a.to_float_vector(), tbv = tb.to_float_vector();
    for (std::size_t i = 0; i < cav.size(); ++i) lhs += static_cast<double>(cav[i]) * bv[i];
    for (std::size_t i = 0; i < av.size(); ++i) rhs += static_cast<double>(av[i]) * tbv[i];
    EXPECT_NEAR(lhs, rhs, 1e-3 * (1 + std::abs(lhs)));
    // And the backward-data of the convolution is exactly that transposed convolution.
    EXPECT_TRUE(tensors_close(conv3d_backward_data(b, w, as, c.spec), tb, 1e-4, 1e-4));
  }
  EXPECT_GE(compared, 6);  // every exact geometry of cases(), in both layouts
}

// ---------------------------------------------------------------------------------------------
// Finite differences
// ---------------------------------------------------------------------------------------------

void check_finite_differences(const Ops& ops) {
  for (const Case& c : cases(ops.transposed)) {
    SCOPED_TRACE(case_name(c));
    const Shape xs = volume_shape(c.x, c.spec.layout);
    const Shape ws = weight_shape(ops.transposed, c.x.c, c.out, c.k);
    auto fwd = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{ops.forward(in[0], in[1], in[2], c.spec)};
    };
    auto bwd = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      Tensor dw = Tensor::zeros(ws);
      Tensor db = c.bias ? Tensor::zeros({c.out}) : Tensor();
      ops.backward_weights(dout[0], in[0], dw, db, c.spec);
      return std::vector<Tensor>{ops.backward_data(dout[0], in[1], xs, c.spec), dw, db};
    };
    GradcheckOptions opt;
    opt.max_checks_per_input = 16;  // the reference comparison covers every element
    EXPECT_GRADCHECK(fwd, bwd,
                     {random_tensor(xs, 7), random_tensor(ws, 8),
                      c.bias ? random_tensor({c.out}, 9) : Tensor()},
                     opt);
  }
}

TEST(Conv3d, BackwardMatchesFiniteDifferences) { check_finite_differences(kConv); }
TEST(ConvTranspose3d, BackwardMatchesFiniteDifferences) { check_finite_differences(kTransposed); }

// ---------------------------------------------------------------------------------------------
// Layouts
// ---------------------------------------------------------------------------------------------

void check_layouts_agree(const Ops& ops, std::int64_t k, std::int64_t stride, std::int64_t pad) {
  Conv3dSpec s = spec3(stride, pad);
  const Shape ws = weight_shape(ops.transposed, 16, 24, k);
  const Tensor x = random_tensor({2, 16, 5, 6, 7}, 3);
  const Tensor w = random_tensor(ws, 4);
  const Tensor b = random_tensor({24}, 5);
  const Tensor y = ops.forward(x, w, b, s);
  const Tensor dy = random_tensor(y.shape(), 6);
  const Tensor dx = ops.backward_data(dy, w, x.shape(), s);
  Tensor dw = Tensor::zeros(ws), db = Tensor::zeros({24});
  ops.backward_weights(dy, x, dw, db, s);

  s.layout = VolumeLayout::ndhwc;
  const Tensor y2 = ops.forward(to_ndhwc(x), w, b, s);
  EXPECT_TRUE(tensors_close(to_ncdhw(y2), y, 1e-4, 1e-4));
  EXPECT_TRUE(tensors_close(to_ncdhw(ops.backward_data(to_ndhwc(dy), w, to_ndhwc(x).shape(), s)),
                            dx, 1e-4, 1e-4));
  Tensor dw2 = Tensor::zeros(ws), db2 = Tensor::zeros({24});
  ops.backward_weights(to_ndhwc(dy), to_ndhwc(x), dw2, db2, s);
  EXPECT_TRUE(tensors_close(dw2, dw, 1e-4, 1e-4));
  EXPECT_TRUE(tensors_close(db2, db, 1e-4, 1e-4));
}

TEST(Conv3d, NdhwcEqualsPermutedNcdhw) {
  check_layouts_agree(kConv, 3, 1, 1);
  check_layouts_agree(kConv, 3, 2, 1);
}

TEST(ConvTranspose3d, NdhwcEqualsPermutedNcdhw) {
  check_layouts_agree(kTransposed, 2, 2, 0);
  check_layouts_agree(kTransposed, 3, 2, 1);
}

// ---------------------------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------------------------

template <class L>
void check_layer(L& layer, const Ops& ops, const Shape& x_shape) {
  const Conv3dSpec& s = layer.spec();
  layer.weight().value.copy_(random_tensor(layer.weight().value.shape(), 71));
  if (layer.bias() != nullptr) layer.bias()->value.copy_(random_tensor({layer.out_channels()}, 72));
  int ready = 0;
  for (Parameter* p : layer.parameters()) p->grad_ready_hook = [&](Parameter&) { ++ready; };
  const Tensor x = random_tensor(x_shape, 73);
  const Tensor b = layer.bias() ? layer.bias()->value : Tensor();
  const Tensor y = layer.forward(x);
  EXPECT_TRUE(tensors_close(y, ops.forward(x, layer.weight().value, b, s), 0, 0));
  const Tensor dy = random_tensor(y.shape(), 74);
  const Tensor dx = layer.backward(dy);
  EXPECT_EQ(ready, layer.bias() ? 2 : 1);
  EXPECT_TRUE(tensors_close(dx, ops.backward_data(dy, layer.weight().value, x.shape(), s), 0, 0));
  Tensor dw = Tensor::zeros(layer.weight().value.shape());
  Tensor db = layer.bias() ? Tensor::zeros({layer.out_channels()}) : Tensor();
  ops.backward_weights(dy, x, dw, db, s);
  EXPECT_TRUE(tensors_close(layer.weight().grad, dw, 0, 0));
  if (layer.bias()) EXPECT_TRUE(tensors_close(layer.bias()->grad, db, 0, 0));
  // A second step accumulates (+=).
  layer.forward(x);
  layer.backward(dy);
  Tensor twice = dw.clone();
  for (std::int64_t i = 0; i < twice.numel(); ++i) twice.data<float>()[i] *= 2;
  EXPECT_TRUE(tensors_close(layer.weight().grad, twice, 1e-5, 1e-5));
  if (layer.bias()) {
    Tensor db2 = db.clone();
    for (std::int64_t i = 0; i < db2.numel(); ++i) db2.data<float>()[i] *= 2;
    EXPECT_TRUE(tensors_close(layer.bias()->grad, db2, 1e-5, 1e-5));
  }
  // Without the input gradient: no dx, the weight gradient still accumulates.
  layer.set_input_grad(false);
  layer.forward(x);
  EXPECT_FALSE(layer.backward(dy).defined());
  EXPECT_THROW(layer.backward(dy), InvalidArgument);  // no forward since the last backward
  Tensor thrice = dw.clone();
  for (std::int64_t i = 0; i < thrice.numel(); ++i) thrice.data<float>()[i] *= 3;
  EXPECT_TRUE(tensors_close(layer.weight().grad, thrice, 1e-5, 1e-5));
}

TEST(Conv3dLayers, Conv3dMatchesTheFunctions) {
  Conv3d conv(4, 6, 3, spec3(1, 1, VolumeLayout::ndhwc), /*bias=*/true);
  EXPECT_EQ(conv.weight().value.shape(), Shape({6, 4, 3, 3, 3}));
  ASSERT_NE(conv.bias(), nullptr);
  EXPECT_EQ(conv.bias()->value.shape(), Shape({6}));
  EXPECT_FALSE(conv.bias()->weight_decay);
  EXPECT_EQ(conv.in_channels(), 4);
  EXPECT_EQ(conv.out_channels(), 6);
  check_layer(conv, kConv, {2, 5, 4, 3, 4});
  Conv3d plain(3, 2, 3, spec3(2, 1));
  EXPECT_EQ(plain.bias(), nullptr);
  EXPECT_EQ(plain.parameters().size(), 1u);
  check_layer(plain, kConv, {1, 3, 5, 4, 6});
}

TEST(Conv3dLayers, ConvTranspose3dMatchesTheFunctions) {
  ConvTranspose3d up(6, 4, 2, spec3(2, 0));  // bias by default
  EXPECT_EQ(up.weight().value.shape(), Shape({6, 4, 2, 2, 2}));
  ASSERT_NE(up.bias(), nullptr);
  EXPECT_EQ(up.bias()->value.shape(), Shape({4}));
  check_layer(up, kTransposed, {2, 6, 3, 2, 3});
  ConvTranspose3d nobias(3, 5, 3, spec3(2, 1, VolumeLayout::ndhwc), false);
  EXPECT_EQ(nobias.bias(), nullptr);
  check_layer(nobias, kTransposed, {1, 3, 2, 4, 3});
}

TEST(Conv3dLayers, HalfInputsComeBackInTheirDtype) {
  Conv3d conv(2, 3, 3, spec3(1, 1));
  conv.weight().value.copy_(random_tensor(conv.weight().value.shape(), 5));
  const Tensor x = random_tensor({1, 2, 3, 3, 3}, 6).to(DType::bf16);
  const Tensor y = conv.forward(x);
  EXPECT_EQ(y.shape(), Shape({1, 3, 3, 3, 3}));
  const Tensor dx = conv.backward(random_tensor(y.shape(), 7));
  EXPECT_EQ(dx.dtype(), DType::bf16);
  EXPECT_EQ(conv.weight().grad.dtype(), DType::f32);
  // f16 through the functions: the registry's f32 promotion, close to the f32 result.
  const Tensor xf = random_tensor({1, 2, 4, 3, 3}, 8), wf = random_tensor({2, 3, 2, 2, 2}, 9);
  const Tensor yh = conv_transpose3d_forward(xf.to(DType::f16), wf.to(DType::f16), Tensor(),
                                             spec3(2, 0));
  EXPECT_EQ(yh.dtype(), DType::f16);
  EXPECT_TRUE(tensors_close(yh.to(DType::f32),
                            conv_transpose3d_forward(xf.to(DType::f16).to(DType::f32),
                                                     wf.to(DType::f16).to(DType::f32), Tensor(),
                                                     spec3(2, 0)),
                            1e-2, 1e-2));
}

// ---------------------------------------------------------------------------------------------
// Independent cross-checks in Python (numpy always when present, PyTorch when installed)
// ---------------------------------------------------------------------------------------------

// Reads x, w, b, dy (NCDHW, f32) per case from a directory, writes the results. numpy mode:
// forward of both ops from their definitions (tap by tap, strided slices). torch mode:
// F.conv3d / F.conv_transpose3d forward and, through autograd with dy, dx, dw and db.
constexpr const char* kPythonScript = R"PY(
import json, sys
import numpy as np
mode, d = sys.argv[1], sys.argv[2]
cases = json.load(open(d + "/cases.json"))
def load(n): return np.load(d + "/" + n + ".npy").astype(np.float64)
def np_conv(x, w, s, p):
    n, c, D, H, W = x.shape
    o, _, kd, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1]), (p[2], p[2])))
    od, oh, ow = [(i + 2 * q - k) // st + 1 for i, q, k, st in zip((D, H, W), p, (kd, kh, kw), s)]
    y = np.zeros((n, o, od, oh, ow))
    for a in range(kd):
        for b in range(kh):
            for e in range(kw):
                patch = xp[:, :, a:a + s[0] * (od - 1) + 1:s[0], b:b + s[1] * (oh - 1) + 1:s[1],
                           e:e + s[2] * (ow - 1) + 1:s[2]]
                y += np.einsum("ncdhw,oc->nodhw", patch, w[:, :, a, b, e])
    return y
def np_conv_t(x, w, s, p):
    n, i, D, H, W = x.shape
    _, o, kd, kh, kw = w.shape
    full = [(q - 1) * st + k for q, st, k in zip((D, H, W), s, (kd, kh, kw))]
    y = np.zeros((n, o, *full))
    for a in range(kd):
        for b in range(kh):
            for e in range(kw):
                y[:, :, a:a + s[0] * (D - 1) + 1:s[0], b:b + s[1] * (H - 1) + 1:s[1],
                  e:e + s[2] * (W - 1) + 1:s[2]] += np.einsum("ncdhw,co->nodhw", x, w[:, :, a, b, e])
    return y[:, :, p[0]:full[0] - p[0], p[1]:full[1] - p[1], p[2]:full[2] - p[2]]
for c in cases:
    name, s, p, tr = c["name"], c["stride"], c["pad"], c["transposed"]
    x, w, b, dy = load(name + "_x"), load(name + "_w"), load(name + "_b"), load(name + "_dy")
    if mode == "numpy":
        y = (np_conv_t if tr else np_conv)(x, w, s, p) + b.reshape(1, -1, 1, 1, 1)
        np.save(d + "/" + name + "_y.npy", y.astype(np.float32))
    else:
        import torch
        import torch.nn.functional as F
        tx, tw, tb = [torch.tensor(v, requires_grad=True) for v in (x, w, b)]
        f = F.conv_transpose3d if tr else F.conv3d
        y = f(tx, tw, tb, stride=tuple(s), padding=tuple(p))
        y.backward(torch.tensor(dy))
        for key, v in (("y", y), ("dx", tx.grad), ("dw", tw.grad), ("db", tb.grad)):
            np.save(d + "/" + name + "_" + key + ".npy", v.detach().numpy().astype(np.float32))
)PY";

// A python3 interpreter that can import `module` ("" if none): $BENCHHOST_PYTHON, python3 on
// the PATH, then the system one (a pyenv shim on the PATH may lack the system's packages).
std::string python_with(const char* module) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("BENCHHOST_PYTHON")) candidates.emplace_back(env);
  candidates.emplace_back("python3");
  candidates.emplace_back("/usr/bin/python3");
  for (const std::string& py : candidates) {
    const std::string cmd = fmt::format("'{}' -c 'import {}' >/dev/null 2>&1", py, module);
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

struct PyCase {
  std::string name;
  bool transposed;
  Conv3dSpec spec;  // NCDHW; the NDHWC run permutes
  std::int64_t in, out, k;
  Shape x;
};

std::vector<PyCase> py_cases() {
  Conv3dSpec aniso = spec3(2, 1);
  aniso.stride_w = 1;
  aniso.pad_h = 0;
  return {{"c_k3s1p1", false, spec3(1, 1), 3, 4, 3, {2, 3, 5, 4, 6}},
          {"c_k3s2p1", false, spec3(2, 1), 4, 3, 3, {1, 4, 7, 8, 5}},
          {"c_k1", false, spec3(1, 0), 5, 2, 1, {2, 5, 3, 2, 4}},
          {"c_aniso", false, aniso, 2, 3, 3, {1, 2, 6, 5, 4}},
          {"t_k2s2", true, spec3(2, 0), 4, 3, 2, {2, 4, 3, 2, 4}},
          {"t_k3s2p1", true, spec3(2, 1), 3, 2, 3, {1, 3, 3, 4, 2}},
          {"t_aniso", true, aniso, 2, 3, 3, {1, 2, 3, 2, 4}}};
}

// Writes the inputs, runs the script in `mode`, returns the directory with the results.
fs::path run_python(const std::string& python, const std::string& mode) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("bh_conv3d_{}_{}", mode, ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "check.py") << kPythonScript;
  std::string json = "[";
  std::uint64_t seed = 40;
  for (const PyCase& c : py_cases()) {
    const Shape ws = weight_shape(c.transposed, c.in, c.out, c.k);
    const Tensor x = random_tensor(c.x, ++seed), w = random_tensor(ws, ++seed);
    const Shape ys = c.transposed ? conv_transpose3d_output_shape(c.x, ws, c.spec)
                                  : conv3d_output_shape(c.x, ws, c.spec);
    data::write_npy((dir / (c.name + "_x.npy")).string(), x);
    data::write_npy((dir / (c.name + "_w.npy")).string(), w);
    data::write_npy((dir / (c.name + "_b.npy")).string(), random_tensor({c.out}, ++seed));
    data::write_npy((dir / (c.name + "_dy.npy")).string(), random_tensor(ys, ++seed));
    json += fmt::format(
        "{}{{\"name\": \"{}\", \"transposed\": {}, \"stride\": [{}, {}, {}], \"pad\": [{}, {}, "
        "{}]}}",
        json.size() > 1 ? ", " : "", c.name, c.transposed ? "true" : "false", c.spec.stride_d,
        c.spec.stride_h, c.spec.stride_w, c.spec.pad_d, c.spec.pad_h, c.spec.pad_w);
  }
  std::ofstream(dir / "cases.json") << json << "]";
  const std::string cmd =
      fmt::format("'{}' '{}' {} '{}'", python, (dir / "check.py").string(), mode, dir.string());
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

void compare_with_python(const fs::path& dir, bool with_grads) {
  for (const PyCase& c : py_cases()) {
    const Ops& ops = c.transposed ? kTransposed : kConv;
    const auto load = [&](const char* what) {
      return data::read_npy((dir / (c.name + "_" + what + ".npy")).string());
    };
    const Tensor x = load("x"), w = load("w"), b = load("b"), dy = load("dy");
    for (VolumeLayout layout : {VolumeLayout::ncdhw, VolumeLayout::ndhwc}) {
      SCOPED_TRACE(fmt::format("{} {}", c.name, volume_layout_name(layout)));
      Conv3dSpec s = c.spec;
      s.layout = layout;
      const bool cl = layout == VolumeLayout::ndhwc;
      const Tensor xl = cl ? to_ndhwc(x) : x, dyl = cl ? to_ndhwc(dy) : dy;
      const Tensor y = ops.forward(xl, w, b, s);
      EXPECT_TRUE(tensors_close(cl ? to_ncdhw(y) : y, load("y"), 1e-4, 1e-4));
      if (!with_grads) continue;
      const Tensor dx = ops.backward_data(dyl, w, xl.shape(), s);
      EXPECT_TRUE(tensors_close(cl ? to_ncdhw(dx) : dx, load("dx"), 1e-4, 1e-4));
      Tensor dw = Tensor::zeros(w.shape()), db = Tensor::zeros(b.shape());
      ops.backward_weights(dyl, xl, dw, db, s);
      EXPECT_TRUE(tensors_close(dw, load("dw"), 1e-4, 1e-4));
      EXPECT_TRUE(tensors_close(db, load("db"), 1e-4, 1e-4));
    }
  }
}

TEST(Conv3dCrossCheck, MatchesNumpyDefinition) {
  const std::string py = python_with("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy: numpy cross-check skipped";
  const fs::path dir = run_python(py, "numpy");
  compare_with_python(dir, false);
  fs::remove_all(dir);
}

TEST(Conv3dCrossCheck, MatchesPyTorch) {
  const std::string py = python_with("torch");
  if (py.empty()) GTEST_SKIP() << "no python3 with torch: PyTorch cross-check skipped";
  const fs::path dir = run_python(py, "torch");
  compare_with_python(dir, true);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Errors and registration
// ---------------------------------------------------------------------------------------------

// The call throws InvalidArgument whose message names `op`.
template <class F>
void expect_invalid(F&& f, const std::string& op) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected InvalidArgument naming " << op;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
  }
}

TEST(Conv3d, BadArgumentsAreReported) {
  const Conv3dSpec s = spec3(1, 0);
  const Tensor x = random_tensor({1, 3, 4, 4, 4}, 1);
  const Tensor w = random_tensor({4, 3, 3, 3, 3}, 2);
  // Rank 4 input.
  expect_invalid([&] { conv3d_forward(random_tensor({1, 3, 4, 4}, 1), w, Tensor(), s); },
                 "conv3d_forward");
  expect_invalid([&] { conv_transpose3d_forward(random_tensor({3, 4, 4, 4}, 1),
                                                random_tensor({3, 2, 2, 2, 2}, 2), Tensor(), s); },
                 "conv_transpose3d_forward");
  // Channel mismatch (the transposed weight is [I, O, ...]: [4, 3] does not take 3 channels).
  expect_invalid([&] { conv3d_forward(x, random_tensor({4, 2, 3, 3, 3}, 2), Tensor(), s); },
                 "conv3d_forward");
  expect_invalid([&] { conv_transpose3d_forward(x, w, Tensor(), s); }, "conv_transpose3d_forward");
  // Empty output: kernel larger than the padded input; transposed with too much padding.
  expect_invalid([&] { conv3d_forward(x, random_tensor({4, 3, 5, 5, 5}, 2), Tensor(), s); },
                 "conv3d_forward");
  expect_invalid([&] { conv_transpose3d_forward(random_tensor({1, 3, 1, 1, 1}, 1),
                                                random_tensor({3, 2, 2, 2, 2}, 2), Tensor(),
                                                spec3(1, 1)); },
                 "conv_transpose3d_forward");
  // Bias size, rank-4 weight, bad stride, mismatched gradients.
  expect_invalid([&] { conv3d_forward(x, w, random_tensor({5}, 3), s); }, "conv3d_forward");
  expect_invalid([&] { conv3d_forward(x, random_tensor({4, 3, 3, 3}, 2), Tensor(), s); },
                 "conv3d_forward");
  expect_invalid([&] { conv3d_forward(x, w, Tensor(), spec3(0, 0)); }, "conv3d_forward");
  expect_invalid([&] { conv3d_backward_data(random_tensor({1, 4, 3, 3, 3}, 4), w, x.shape(), s); },
                 "conv3d_backward_data");
  Tensor dw = Tensor::zeros({4, 3, 3, 3, 3}), db = Tensor::zeros({5});
  expect_invalid([&] { conv3d_backward_weights(random_tensor({1, 4, 2, 2, 2}, 4), x, dw, db, s); },
                 "conv3d_backward_weights");
  Tensor tdw = Tensor::zeros({3, 2, 2, 2, 2}), no_db;
  expect_invalid([&] { conv_transpose3d_backward_weights(random_tensor({1, 2, 4, 4, 4}, 4), x,
                                                         tdw, no_db, spec3(2, 0)); },
                 "conv_transpose3d_backward_weights");
  expect_invalid([&] { conv_transpose3d_backward_data(random_tensor({1, 2, 4, 4, 4}, 4),
                                                      random_tensor({3, 2, 2, 2, 2}, 5), x.shape(),
                                                      spec3(2, 0)); },
                 "conv_transpose3d_backward_data");
  // Integer images are not taken.
  EXPECT_THROW(conv3d_forward(x.to(DType::i32), w, Tensor(), s), Unsupported);
  // Layers check their arguments.
  EXPECT_THROW(Conv3d(0, 4, 3, s), InvalidArgument);
  EXPECT_THROW(ConvTranspose3d(4, 4, 0, s), InvalidArgument);
}

TEST(Conv3dLayers, OpsAreRegisteredWithReferenceAndOneDnn) {
  for (const char* op : {"conv3d_forward", "conv3d_backward_data", "conv3d_backward_weights",
                         "conv_transpose3d_forward", "conv_transpose3d_backward_data",
                         "conv_transpose3d_backward_weights"}) {
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
    EXPECT_GE(def->make_cases(5).size(), 8u);
  }
}

// ---------------------------------------------------------------------------------------------
// CUDA (cuDNN) against the CPU
// ---------------------------------------------------------------------------------------------

TEST(Conv3dCuda, CudnnMatchesCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Device gpu = Device::cuda(0);
  auto on = [&](const Tensor& t) { return t.defined() ? t.to(gpu) : t; };
  for (const Ops* ops : {&kConv, &kTransposed}) {
    std::uint64_t seed = 300;
    for (const Case& c : cases(ops->transposed)) {
      SCOPED_TRACE(fmt::format("{} {}", ops->prefix, case_name(c)));
      const Shape xs = volume_shape(c.x, c.spec.layout);
      const Shape ws = weight_shape(ops->transposed, c.x.c, c.out, c.k);
      const Tensor x = random_tensor(xs, ++seed), w = random_tensor(ws, ++seed);
      const Tensor b = c.bias ? random_tensor({c.out}, ++seed) : Tensor();
      const Tensor y = ops->forward(x, w, b, c.spec);
      const Tensor dy = random_tensor(y.shape(), ++seed);
      EXPECT_TRUE(tensors_close(ops->forward(on(x), on(w), on(b), c.spec).to(Device::cpu()), y,
                                1e-4, 1e-4));
      EXPECT_TRUE(tensors_close(
          ops->backward_data(on(dy), on(w), xs, c.spec).to(Device::cpu()),
          ops->backward_data(dy, w, xs, c.spec), 1e-4, 1e-4));
      const Tensor dw0 = random_tensor(ws, ++seed);
      Tensor dw = dw0.clone(), db = c.bias ? Tensor::zeros({c.out}) : Tensor();
      ops->backward_weights(dy, x, dw, db, c.spec);
      Tensor gdw = on(dw0.clone()), gdb = c.bias ? on(Tensor::zeros({c.out})) : Tensor();
      ops->backward_weights(on(dy), on(x), gdw, gdb, c.spec);
      EXPECT_TRUE(tensors_close(gdw.to(Device::cpu()), dw, 1e-4, 1e-4));
      if (c.bias) EXPECT_TRUE(tensors_close(gdb.to(Device::cpu()), db, 1e-4, 1e-4));
    }
  }
}

}  // namespace

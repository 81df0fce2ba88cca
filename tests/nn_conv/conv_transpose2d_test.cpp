// 2-d transposed convolution (nn/conv.hpp, conv_transpose2d_*; Mask R-CNN's mask-head
// ConvTranspose2d(256, 256, 2, stride 2)): shapes, a hand case, torch's conv_transpose2d forward
// and autograd (tools/peers/conv_transpose2d_peer.py, skipped visibly without torch) in both
// layouts, finite differences, the layer, refused arguments, the mask head's shape timed, and
// CUDA against the CPU (skipped without a device). The registry parity and half-precision walks
// (tests/nn_ops) cover the ops' implementations against the reference.
#include <chrono>
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
#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/ops.hpp"
#include "common/gradcheck.hpp"
#include "common/lm_peer.hpp"

using namespace benchhost;
using namespace benchhost::nn;
using benchhost::testing::GradcheckOptions;
using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;
namespace fs = std::filesystem;

namespace {

Conv2dSpec spec2(std::int64_t stride, std::int64_t pad, ImageLayout layout = ImageLayout::nchw) {
  Conv2dSpec s;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.layout = layout;
  return s;
}

Tensor to_nhwc(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); }
Tensor to_nchw(const Tensor& t) { return t.permute({0, 3, 1, 2}).contiguous(); }

struct Case {
  std::string name;
  Conv2dSpec spec;  // NCHW; the NHWC run permutes
  std::int64_t in, out, kh, kw;
  Shape x;
};

std::vector<Case> cases() {
  Conv2dSpec aniso = spec2(2, 1);
  aniso.stride_w = 3;
  aniso.pad_w = 0;
  return {{"mask_head", spec2(2, 0), 8, 6, 2, 2, {3, 8, 7, 7}},  // the mask head's k2 s2, fewer channels
          {"k3s2p1", spec2(2, 1), 3, 4, 3, 3, {2, 3, 4, 5}},
          {"k3s1p1", spec2(1, 1), 4, 2, 3, 3, {1, 4, 5, 3}},
          {"aniso", aniso, 2, 3, 3, 2, {2, 2, 3, 4}}};
}

}  // namespace

TEST(ConvTranspose2d, OutputShapeAndMacsOfTheMaskHead) {
  // 14x14 RoI features, 256 -> 256, k = stride = 2: 28x28.
  EXPECT_EQ(conv_transpose2d_output_shape({512, 256, 14, 14}, {256, 256, 2, 2}, spec2(2, 0)),
            (Shape{512, 256, 28, 28}));
  EXPECT_EQ(conv_transpose2d_output_shape({4, 14, 14, 256}, {256, 128, 2, 2}, spec2(2, 0, ImageLayout::nhwc)),
            (Shape{4, 28, 28, 128}));
  // (in - 1) * stride - 2 * pad + k per dimension.
  Conv2dSpec s = spec2(2, 1);
  s.stride_w = 3;
  EXPECT_EQ(conv_transpose2d_output_shape({1, 3, 4, 5}, {3, 2, 3, 4}, s), (Shape{1, 2, 7, 14}));
  EXPECT_DOUBLE_EQ(conv_transpose2d_macs_per_sample({1, 256, 14, 14}, {256, 256, 2, 2}, spec2(2, 0)),
                   256.0 * 196 * 256 * 4);
}

TEST(ConvTranspose2d, HandCaseKernelTwoStrideTwo) {
  // With k = stride = 2 every input pixel writes x * w into its own 2x2 output block:
  // y[2i + a, 2j + b] = x[i, j] * w[a, b] + bias, exactly.
  const Tensor x = Tensor::from_vector({1, 2, 3, 4}, {1, 1, 2, 2});
  const Tensor w = Tensor::from_vector({1, 10, 100, 1000}, {1, 1, 2, 2});
  const Tensor b = Tensor::from_vector({0.5f}, {1});
  const std::vector<float> want = {1.5f,   10.5f,   2.5f,   20.5f,    //
                                   100.5f, 1000.5f, 200.5f, 2000.5f,  //
                                   3.5f,   30.5f,   4.5f,   40.5f,    //
                                   300.5f, 3000.5f, 400.5f, 4000.5f};
  EXPECT_EQ(conv_transpose2d_forward(x, w, b, spec2(2, 0)).to_float_vector(), want);
  // NHWC with one channel is the same bytes.
  EXPECT_EQ(conv_transpose2d_forward(x.view({1, 2, 2, 1}), w, b, spec2(2, 0, ImageLayout::nhwc)).to_float_vector(),
            want);
  // backward-data of dy = ones: each x pixel gathers its block's weights, 1111; dw: each w tap
  // gathers every x once, 10; db: 16 outputs.
  const Tensor dy = Tensor::full({1, 1, 4, 4}, 1.0f);
  EXPECT_EQ(conv_transpose2d_backward_data(dy, w, x.shape(), spec2(2, 0)).to_float_vector(),
            (std::vector<float>{1111, 1111, 1111, 1111}));
  Tensor dw = Tensor::full({1, 1, 2, 2}, 1.0f), db = Tensor::zeros({1});
  conv_transpose2d_backward_weights(dy, x, dw, db, spec2(2, 0));
  EXPECT_EQ(dw.to_float_vector(), (std::vector<float>{11, 11, 11, 11}));  // 1 + 10: accumulated
  EXPECT_EQ(db.to_float_vector(), (std::vector<float>{16}));
}

namespace {

// Writes the cases' NCHW inputs, runs the torch peer, returns its folder ("" without torch).
fs::path run_torch_peer() {
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_conv_transpose2d_{}", ::getpid());
  fs::create_directories(dir);
  std::string json = "[";
  std::uint64_t seed = 70;
  for (const Case& c : cases()) {
    const Shape ws{c.in, c.out, c.kh, c.kw};
    data::write_npy((dir / (c.name + "_x.npy")).string(), random_tensor(c.x, ++seed));
    data::write_npy((dir / (c.name + "_w.npy")).string(), random_tensor(ws, ++seed));
    data::write_npy((dir / (c.name + "_b.npy")).string(), random_tensor({c.out}, ++seed));
    data::write_npy((dir / (c.name + "_dy.npy")).string(),
                    random_tensor(conv_transpose2d_output_shape(c.x, ws, c.spec), ++seed));
    json += fmt::format("{}{{\"name\": \"{}\", \"stride\": [{}, {}], \"pad\": [{}, {}]}}", json.size() > 1 ? ", " : "",
                        c.name, c.spec.stride_h, c.spec.stride_w, c.spec.pad_h, c.spec.pad_w);
  }
  std::ofstream(dir / "cases.json") << json << "]";
  const std::string cmd = fmt::format("/usr/bin/python3 '{}/tools/peers/conv_transpose2d_peer.py' '{}' > /dev/null",
                                      BENCHHOST_SOURCE_DIR, dir.string());
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir;
}

}  // namespace

TEST(ConvTranspose2d, MatchesTorchForwardAndAutogradInBothLayouts) {
  if (!test_support::have_torch()) GTEST_SKIP() << "torch is not importable by /usr/bin/python3";
  const fs::path dir = run_torch_peer();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto load = [&](const char* what) { return data::read_npy((dir / (c.name + "_" + what + ".npy")).string()); };
    const Tensor x = load("x"), w = load("w"), b = load("b"), dy = load("dy");
    for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
      SCOPED_TRACE(image_layout_name(layout));
      const bool last = layout == ImageLayout::nhwc;
      Conv2dSpec s = c.spec;
      s.layout = layout;
      const Tensor xl = last ? to_nhwc(x) : x, dyl = last ? to_nhwc(dy) : dy;
      const Tensor y = conv_transpose2d_forward(xl, w, b, s);
      const Tensor dx = conv_transpose2d_backward_data(dyl, w, xl.shape(), s);
      Tensor dw = Tensor::zeros(w.shape()), db = Tensor::zeros(b.shape());
      conv_transpose2d_backward_weights(dyl, xl, dw, db, s);
      EXPECT_TRUE(tensors_close(last ? to_nchw(y) : y, load("y"), 1e-5, 1e-5));
      EXPECT_TRUE(tensors_close(last ? to_nchw(dx) : dx, load("dx"), 1e-5, 1e-5));
      EXPECT_TRUE(tensors_close(dw, load("dw"), 1e-4, 1e-5));
      EXPECT_TRUE(tensors_close(db, load("db"), 1e-4, 1e-5));
    }
  }
  fs::remove_all(dir);
}

TEST(ConvTranspose2d, BackwardMatchesFiniteDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Shape ws{c.in, c.out, c.kh, c.kw};
    auto fwd = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{conv_transpose2d_forward(in[0], in[1], in[2], c.spec)};
    };
    auto bwd = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      Tensor dw = Tensor::zeros(ws), db = Tensor::zeros({c.out});
      conv_transpose2d_backward_weights(dout[0], in[0], dw, db, c.spec);
      return std::vector<Tensor>{conv_transpose2d_backward_data(dout[0], in[1], c.x, c.spec), dw, db};
    };
    GradcheckOptions opt;
    opt.max_checks_per_input = 16;
    EXPECT_GRADCHECK(fwd, bwd, {random_tensor(c.x, 7), random_tensor(ws, 8), random_tensor({c.out}, 9)}, opt);
  }
}

TEST(ConvTranspose2d, LayerIsTheFunctions) {
  const Conv2dSpec s = spec2(2, 0);
  ConvTranspose2d layer(6, 5, 2, 2, s);
  EXPECT_EQ(layer.weight().value.shape(), (Shape{6, 5, 2, 2}));
  ASSERT_NE(layer.bias(), nullptr);
  layer.weight().value.copy_(random_tensor({6, 5, 2, 2}, 3));
  layer.bias()->value.copy_(random_tensor({5}, 4));
  const Tensor x = random_tensor({2, 6, 4, 3}, 5), dy = random_tensor({2, 5, 8, 6}, 6);
  const Tensor y = layer.forward(x);
  EXPECT_TRUE(tensors_close(y, conv_transpose2d_forward(x, layer.weight().value, layer.bias()->value, s), 0, 0));
  const Tensor dx = layer.backward(dy);
  EXPECT_TRUE(tensors_close(dx, conv_transpose2d_backward_data(dy, layer.weight().value, x.shape(), s), 0, 0));
  Tensor dw = Tensor::zeros({6, 5, 2, 2}), db = Tensor::zeros({5});
  conv_transpose2d_backward_weights(dy, x, dw, db, s);
  EXPECT_TRUE(tensors_close(layer.weight().grad, dw, 0, 0));
  EXPECT_TRUE(tensors_close(layer.bias()->grad, db, 0, 0));
}

TEST(ConvTranspose2d, RefusesBadArguments) {
  const Tensor x = random_tensor({1, 4, 3, 3}, 1), w = random_tensor({4, 2, 2, 2}, 2);
  Conv2dSpec dilated = spec2(2, 0);
  dilated.dilation_h = 2;
  EXPECT_THROW(conv_transpose2d_forward(x, w, Tensor(), dilated), InvalidArgument);
  Conv2dSpec grouped = spec2(2, 0);
  grouped.groups = 2;
  EXPECT_THROW(conv_transpose2d_forward(x, w, Tensor(), grouped), InvalidArgument);
  EXPECT_THROW(conv_transpose2d_forward(random_tensor({1, 3, 3, 3}, 3), w, Tensor(), spec2(2, 0)),
               InvalidArgument);  // 3 input channels, weight wants 4
  EXPECT_THROW(conv_transpose2d_forward(x, random_tensor({4, 2, 2}, 4), Tensor(), spec2(2, 0)), InvalidArgument);
  EXPECT_THROW(conv_transpose2d_forward(x, w, random_tensor({3}, 5), spec2(2, 0)), InvalidArgument);  // bias [O = 2]
  EXPECT_THROW(conv_transpose2d_backward_data(random_tensor({1, 2, 5, 5}, 6), w, x.shape(), spec2(2, 0)),
               InvalidArgument);  // dy should be 6x6
  EXPECT_THROW(ConvTranspose2d(4, 2, 2, 2, dilated), InvalidArgument);
}

TEST(ConvTranspose2d, MaskHeadShapeTimed) {
  // The mask head's layer at 32 RoIs (MLPerf trains with up to 128 positive RoIs per image),
  // NCHW f32 on the CPU: forward, backward-data and backward-weights, timed for the record.
  const Conv2dSpec s = spec2(2, 0);
  const Tensor x = random_tensor({32, 256, 14, 14}, 1), w = random_tensor({256, 256, 2, 2}, 2, -0.05f, 0.05f);
  const Tensor b = random_tensor({256}, 3);
  Tensor dw = Tensor::zeros(w.shape()), db = Tensor::zeros({256});
  (void)conv_transpose2d_forward(x, w, b, s);  // primitives built
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor y = conv_transpose2d_forward(x, w, b, s);
  const auto t1 = std::chrono::steady_clock::now();
  const Tensor dx = conv_transpose2d_backward_data(y, w, x.shape(), s);
  const auto t2 = std::chrono::steady_clock::now();
  conv_transpose2d_backward_weights(y, x, dw, db, s);
  const auto t3 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  const double gmacs = conv_transpose2d_macs_per_sample(x.shape(), w.shape(), s) * 32 / 1e9;
  std::printf("mask head ConvTranspose2d [32, 256, 14, 14] -> [32, 256, 28, 28]: forward %.1f ms, backward-data "
              "%.1f ms, backward-weights %.1f ms (%.2f GMAC each)\n",
              ms(t0, t1), ms(t1, t2), ms(t2, t3), gmacs);
  EXPECT_EQ(y.shape(), (Shape{32, 256, 28, 28}));
  EXPECT_EQ(dx.shape(), x.shape());
  // The same product through the 2-d convolution's backward-data (4-d oneDNN primitives): the
  // transposed convolution is the adjoint of conv2d with the same weight read as [O, I, k, k].
  (void)conv2d_backward_data(x, w, y.shape(), s);
  const auto t4 = std::chrono::steady_clock::now();
  const Tensor y2 = conv2d_backward_data(x, w, y.shape(), s);
  const auto t5 = std::chrono::steady_clock::now();
  std::printf("  the same as conv2d_backward_data (4-d primitives): %.1f ms\n", ms(t4, t5));
  EXPECT_TRUE(tensors_close(conv_transpose2d_forward(x, w, Tensor(), s), y2, 1e-4, 1e-4));
}

TEST(ConvTranspose2d, CudaMatchesCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (const Case& c : cases())
    for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
      SCOPED_TRACE(c.name + " " + image_layout_name(layout));
      Conv2dSpec s = c.spec;
      s.layout = layout;
      const bool last = layout == ImageLayout::nhwc;
      const Shape ws{c.in, c.out, c.kh, c.kw};
      const Tensor x0 = random_tensor(c.x, 11), w = random_tensor(ws, 12), b = random_tensor({c.out}, 13);
      const Tensor x = last ? to_nhwc(x0) : x0;
      const Tensor y = conv_transpose2d_forward(x, w, b, s);
      const Tensor dy = random_tensor(y.shape(), 14);
      const Device g = Device::cuda(0);
      EXPECT_TRUE(tensors_close(conv_transpose2d_forward(x.to(g), w.to(g), b.to(g), s).to(Device::cpu()), y, 1e-4, 1e-4));
      EXPECT_TRUE(tensors_close(conv_transpose2d_backward_data(dy.to(g), w.to(g), x.shape(), s).to(Device::cpu()),
                                conv_transpose2d_backward_data(dy, w, x.shape(), s), 1e-4, 1e-4));
      Tensor dw = Tensor::zeros(ws), db = Tensor::zeros({c.out});
      Tensor dwg = dw.to(g), dbg = db.to(g);
      conv_transpose2d_backward_weights(dy, x, dw, db, s);
      conv_transpose2d_backward_weights(dy.to(g), x.to(g), dwg, dbg, s);
      EXPECT_TRUE(tensors_close(dwg.to(Device::cpu()), dw, 1e-4, 1e-4));
      EXPECT_TRUE(tensors_close(dbg.to(Device::cpu()), db, 1e-4, 1e-4));
    }
}

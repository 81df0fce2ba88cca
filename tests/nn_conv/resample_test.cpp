// Nearest upsampling (nn/resample.hpp) and FrozenBatchNorm2d (nn/frozen_bn.hpp): hand-computed
// indices and values, every CPU implementation against them in both layouts, the backward as the
// exact adjoint of the forward and against finite differences, torch's own indices when
// /usr/bin/python3 has torch, and the CUDA kernels when a device is present.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "benchhost/nn/frozen_bn.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/nn/resample.hpp"
#include "common/gradcheck.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::nn;
using benchhost::testing::random_tensor;

// Row indices PyTorch's nearest reads, written out by hand from s(d) = floor(d * float(in/out)).
TEST(UpsampleNearest, SourceIndicesByHand) {
  // 13 -> 25 (P5 -> P4 at 800x800): float(13/25) = 0.51999998; d = 24 gives 12.48 -> 12 and
  // d = 23 gives 11.96 -> 11, so row 12 is read once (not the half-pixel rule's row 6).
  const std::vector<std::int64_t> want{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12};
  for (std::int64_t d = 0; d < 25; ++d) EXPECT_EQ(nearest_source_index(d, 13, 25), want[d]) << d;
  // 7 -> 13: float(7/13) = 0.53846157.
  const std::vector<std::int64_t> want7{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6};
  for (std::int64_t d = 0; d < 13; ++d) EXPECT_EQ(nearest_source_index(d, 7, 13), want7[d]) << d;
  for (std::int64_t d = 0; d < 8; ++d) EXPECT_EQ(nearest_source_index(d, 4, 8), d / 2);
  for (std::int64_t d = 0; d < 5; ++d) EXPECT_EQ(nearest_source_index(d, 5, 5), d);
  // Shrinking 6 -> 4: scale 1.5 -> 0, 1, 3, 4.
  const std::vector<std::int64_t> want6{0, 1, 3, 4};
  for (std::int64_t d = 0; d < 4; ++d) EXPECT_EQ(nearest_source_index(d, 6, 4), want6[d]);
  // 50 -> 100 and 25 -> 50 (the other FPN levels at 800) are exact doublings.
  for (std::int64_t d = 0; d < 100; ++d) EXPECT_EQ(nearest_source_index(d, 50, 100), d / 2);
}

// Run one named implementation of an op directly (bypassing dispatch), on a CPU call.
void run_impl(const char* op, const char* impl, OpCall& call) {
  const OpDef& def = OpRegistry::instance().get(op);
  for (const OpImpl& i : def.impls)
    if (i.name == impl) {
      ASSERT_EQ(i.accepts ? i.accepts(call) : std::string(), "");
      i.run(call);
      return;
    }
  FAIL() << op << " has no implementation " << impl;
}

OpCall make_call(const Tensor& in, const Shape& out_shape, std::int64_t oh, std::int64_t ow, ImageLayout layout) {
  OpCall c;
  c.inputs = {in};
  c.outputs = {Tensor::empty(out_shape)};
  c.attrs.set_ints("out", {oh, ow});
  c.attrs.set("layout", layout == ImageLayout::nhwc ? 1.0 : 0.0);
  return c;
}

struct Case {
  std::int64_t ih, iw, oh, ow;
};
const Case kCases[] = {{13, 7, 25, 13}, {2, 3, 4, 6}, {6, 5, 4, 9}, {1, 1, 3, 2}};

TEST(UpsampleNearest, ForwardValuesEveryImplBothLayouts) {
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc})
    for (const Case& k : kCases) {
      const ImageDims xd{2, 3, k.ih, k.iw}, yd{2, 3, k.oh, k.ow};
      const Tensor x = random_tensor(image_shape(xd, layout), 5);
      for (const char* impl : {"cpu.ref", "cpu.tbb"}) {
        OpCall c = make_call(x, image_shape(yd, layout), k.oh, k.ow, layout);
        run_impl("upsample_nearest2d_forward", impl, c);
        for (std::int64_t n = 0; n < 2; ++n)
          for (std::int64_t ch = 0; ch < 3; ++ch)
            for (std::int64_t oh = 0; oh < k.oh; ++oh)
              for (std::int64_t ow = 0; ow < k.ow; ++ow) {
                const std::int64_t sh = nearest_source_index(oh, k.ih, k.oh), sw = nearest_source_index(ow, k.iw, k.ow);
                const double want = layout == ImageLayout::nchw ? x.item({n, ch, sh, sw}) : x.item({n, sh, sw, ch});
                const double got = layout == ImageLayout::nchw ? c.outputs[0].item({n, ch, oh, ow})
                                                               : c.outputs[0].item({n, oh, ow, ch});
                ASSERT_EQ(got, want) << impl << " " << image_layout_name(layout) << " " << k.ih << "->" << k.oh;
              }
      }
    }
}

// The backward is the adjoint of the (linear) forward: <up(x), g> == <x, up_backward(g)>; and
// the two CPU implementations agree.
TEST(UpsampleNearest, BackwardIsAdjointEveryImpl) {
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc})
    for (const Case& k : kCases) {
      const Shape xs = image_shape({2, 3, k.ih, k.iw}, layout), ys = image_shape({2, 3, k.oh, k.ow}, layout);
      const Tensor x = random_tensor(xs, 11), g = random_tensor(ys, 12);
      const Tensor y = upsample_nearest2d_forward(x, k.oh, k.ow, layout);
      double lhs = 0;
      for (std::int64_t i = 0; i < y.numel(); ++i) lhs += double(y.data<float>()[i]) * g.data<float>()[i];
      for (const char* impl : {"cpu.ref", "cpu.tbb"}) {
        OpCall c = make_call(g, xs, k.oh, k.ow, layout);
        run_impl("upsample_nearest2d_backward", impl, c);
        double rhs = 0;
        for (std::int64_t i = 0; i < x.numel(); ++i) rhs += double(x.data<float>()[i]) * c.outputs[0].data<float>()[i];
        EXPECT_NEAR(lhs, rhs, 1e-4) << impl << " " << image_layout_name(layout) << " " << k.ih << "->" << k.oh;
      }
    }
}

TEST(UpsampleNearest, BackwardMatchesFiniteDifferences) {
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc}) {
    const Shape xs = image_shape({1, 2, 13, 7}, layout);
    auto fwd = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{upsample_nearest2d_forward(in[0], 25, 13, layout)};
    };
    auto bwd = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& d) {
      return std::vector<Tensor>{upsample_nearest2d_backward(d[0], in[0].shape(), layout)};
    };
    EXPECT_GRADCHECK(fwd, bwd, {random_tensor(xs, 3)});
  }
}

TEST(UpsampleNearest, RejectsBadArguments) {
  const Tensor x = random_tensor({1, 2, 3, 4}, 1);
  EXPECT_THROW(upsample_nearest2d_forward(x, 0, 4, ImageLayout::nchw), InvalidArgument);
  EXPECT_THROW(upsample_nearest2d_forward(random_tensor({2, 3, 4}, 1), 4, 4, ImageLayout::nchw), InvalidArgument);
  EXPECT_THROW(upsample_nearest2d_backward(random_tensor({1, 3, 6, 8}, 1), {1, 2, 3, 4}, ImageLayout::nchw),
               InvalidArgument);
}

// torch's own indices, when /usr/bin/python3 has torch.
TEST(UpsampleNearest, MatchesTorchIndices) {
  if (std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 has no torch: torch cross-check skipped";
  const std::vector<std::pair<int, int>> sizes{{13, 25}, {7, 13}, {25, 50}, {3, 7}, {17, 31}, {9, 4}, {100, 199}};
  std::string spec;
  for (auto [i, o] : sizes) spec += fmt::format("{}:{},", i, o);
  const std::string cmd = fmt::format(
      "/usr/bin/python3 -c \"import torch,torch.nn.functional as F\n"
      "for p in '{}'.strip(',').split(','):\n"
      "  i,o=map(int,p.split(':'))\n"
      "  x=torch.arange(i,dtype=torch.float32).view(1,1,i,1)\n"
      "  print(' '.join(str(int(v)) for v in F.interpolate(x,size=(o,1),mode='nearest').flatten().tolist()))\"",
      spec);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) text += buf;
  ASSERT_EQ(::pclose(pipe), 0) << text;
  std::istringstream lines(text);
  for (auto [i, o] : sizes) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line));
    std::istringstream vals(line);
    for (std::int64_t d = 0; d < o; ++d) {
      std::int64_t v = -1;
      vals >> v;
      EXPECT_EQ(nearest_source_index(d, i, o), v) << i << " -> " << o << " at " << d;
    }
  }
}

TEST(UpsampleNearest, CudaMatchesCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc})
    for (const Case& k : kCases) {
      const Shape xs = image_shape({2, 3, k.ih, k.iw}, layout), ys = image_shape({2, 3, k.oh, k.ow}, layout);
      const Tensor x = random_tensor(xs, 21), g = random_tensor(ys, 22);
      const Tensor y = upsample_nearest2d_forward(x.to(Device::cuda(0)), k.oh, k.ow, layout).to(Device::cpu());
      EXPECT_EQ(benchhost::testing::max_abs_diff(y, upsample_nearest2d_forward(x, k.oh, k.ow, layout)), 0.0);
      const Tensor dx = upsample_nearest2d_backward(g.to(Device::cuda(0)), xs, layout).to(Device::cpu());
      EXPECT_LT(benchhost::testing::max_abs_diff(dx, upsample_nearest2d_backward(g, xs, layout)), 1e-5);
    }
}

// ---------------------------------------------------------------------------------------------
// FrozenBatchNorm2d
// ---------------------------------------------------------------------------------------------

void fill_frozen(FrozenBatchNorm2d& bn, std::uint64_t seed) {
  const std::int64_t c = bn.channels();
  bn.weight().copy_(random_tensor({c}, seed, 0.5f, 1.5f));
  bn.bias().copy_(random_tensor({c}, seed + 1, -0.5f, 0.5f));
  bn.running_mean().copy_(random_tensor({c}, seed + 2, -0.5f, 0.5f));
  bn.running_var().copy_(random_tensor({c}, seed + 3, 0.2f, 2.0f));
}

TEST(FrozenBatchNorm2d, BuffersNotParameters) {
  FrozenBatchNorm2d bn(5, {});
  EXPECT_EQ(bn.num_parameters(), 0);
  std::vector<std::string> names;
  for (auto& [name, t] : bn.buffers()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var"}));
  EXPECT_EQ(bn.weight().item({0}), 1.0);
  EXPECT_EQ(bn.running_var().item({4}), 1.0);
}

TEST(FrozenBatchNorm2d, ForwardIsScaleShiftAndBackwardIsScale) {
  for (ImageLayout layout : {ImageLayout::nchw, ImageLayout::nhwc})
    for (bool relu : {false, true}) {
      FrozenBatchNormSpec spec;
      spec.layout = layout;
      spec.fuse_relu = relu;
      FrozenBatchNorm2d bn(4, spec);
      fill_frozen(bn, 7);
      const Tensor x = random_tensor(image_shape({2, 4, 3, 5}, layout), 8, -2.0f, 2.0f);
      const Tensor dy = random_tensor(x.shape(), 9);
      const Tensor y = bn.forward(x);
      const Tensor dx = bn.backward(dy);
      for (std::int64_t n = 0; n < 2; ++n)
        for (std::int64_t c = 0; c < 4; ++c)
          for (std::int64_t h = 0; h < 3; ++h)
            for (std::int64_t w = 0; w < 5; ++w) {
              // torchvision: scale = w * rsqrt(var + eps), shift = b - mean * scale.
              const double scale = bn.weight().item({c}) / std::sqrt(bn.running_var().item({c}) + 1e-5);
              const double shift = bn.bias().item({c}) - bn.running_mean().item({c}) * scale;
              auto at = [&](const Tensor& t) {
                return layout == ImageLayout::nchw ? t.item({n, c, h, w}) : t.item({n, h, w, c});
              };
              double want = at(x) * scale + shift;
              double want_dx = at(dy) * scale;
              if (relu && want <= 0) {
                want = 0;
                want_dx = 0;
              }
              ASSERT_NEAR(at(y), want, 1e-5);
              ASSERT_NEAR(at(dx), want_dx, 1e-5);
            }
    }
}

TEST(FrozenBatchNorm2d, EvalForwardKeepsNothing) {
  FrozenBatchNorm2d bn(3, {});
  bn.train(false);
  bn.forward(random_tensor({1, 3, 2, 2}, 1));
  EXPECT_THROW(bn.backward(random_tensor({1, 3, 2, 2}, 2)), InvalidArgument);
}

}  // namespace

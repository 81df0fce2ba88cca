// The RNN-T layout ops (Note [Transducer layout ops] in nn/transducer.hpp): StackTime and the
// joint's broadcast add, forward and backward. Hand-made cases with exact values, each backward
// as the adjoint of its forward, finite differences, bit-for-bit agreement with the generic-op
// construction the RNN-T plugin used before (concat, permute_copy, add, sum), native half
// precision for StackTime, refusals of bad shapes, and on a machine with a GPU the CUDA kernels
// against the CPU at a size larger than the registry walk's. The registry parity and
// half-precision walks (parity_test.cpp, half_precision_test.cpp) cover the example cases.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "benchhost/device.hpp"
#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/nn/transducer.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;
using V = std::vector<Tensor>;

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.to_float_vector(), vb = b.to_float_vector();
  EXPECT_EQ(va.size(), vb.size());
  double s = 0.0;
  for (std::size_t i = 0; i < va.size(); ++i) s += static_cast<double>(va[i]) * vb[i];
  return s;
}

// Bitwise equality of two f32 tensors (the same arithmetic, not just close values).
::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  const std::vector<float> va = a.to_float_vector(), vb = b.to_float_vector();
  if (std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) != 0) {
    for (std::size_t i = 0; i < va.size(); ++i)
      if (std::memcmp(&va[i], &vb[i], sizeof(float)) != 0)
        return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i];
  }
  return ::testing::AssertionSuccess();
}

// Runs f, expects InvalidArgument whose message holds every one of `parts`.
void expect_invalid(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no InvalidArgument thrown (expected a message with \"" << parts.front() << "\")";
  } catch (const InvalidArgument& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// ============================================================================================
// Hand-made values
// ============================================================================================

TEST(TransducerOps, StackTimeHandMade) {
  // x[t, b, i] = 100 t + 10 b + i, T = 5, B = 2, H = 2; factor 2 -> 3 stacked frames, the last
  // half zero.
  std::vector<float> xv;
  for (int t = 0; t < 5; ++t)
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 2; ++i) xv.push_back(static_cast<float>(100 * t + 10 * b + i));
  const Tensor x = Tensor::from_vector(xv, {5, 2, 2});
  const Tensor y = stack_time_forward(x, 2);
  ASSERT_EQ(y.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(y.to_float_vector(), (std::vector<float>{0,   1,   100, 101, 10,  11,  110, 111,    // s = 0
                                                     200, 201, 300, 301, 210, 211, 310, 311,    // s = 1
                                                     400, 401, 0,   0,   410, 411, 0,   0}));  // s = 2
  // The backward drops the padding and returns x exactly.
  EXPECT_EQ(stack_time_backward(y, 2, 5).to_float_vector(), xv);
  // Factor 1 is a copy; factor 3 packs frames 0-2 and 3-4 (+ one zero frame).
  EXPECT_EQ(stack_time_forward(x, 1).to_float_vector(), xv);
  const Tensor y3 = stack_time_forward(x, 3);
  ASSERT_EQ(y3.shape(), (Shape{2, 2, 6}));
  EXPECT_EQ(y3.to_float_vector(), (std::vector<float>{0,   1,   100, 101, 200, 201, 10,  11,  110, 111, 210, 211,
                                                      300, 301, 400, 401, 0,   0,   310, 311, 410, 411, 0,   0}));
  EXPECT_EQ(stack_time_backward(y3, 3, 5).to_float_vector(), xv);
  EXPECT_EQ(stacked_length(5, 2), 3);
  EXPECT_EQ(stacked_length(6, 2), 3);
  EXPECT_EQ(stacked_length(0, 4), 0);
}

TEST(TransducerOps, JointAddHandMade) {
  // f [B = 1, T = 2, J = 3], g [1, U+1 = 3, 3].
  const Tensor f = Tensor::from_vector({1, 2, 3, 10, 20, 30}, {1, 2, 3});
  const Tensor g = Tensor::from_vector({100, 200, 300, 400, 500, 600, 700, 800, 900}, {1, 3, 3});
  const Tensor h = joint_add_forward(f, g);
  ASSERT_EQ(h.shape(), (Shape{1, 2, 3, 3}));
  EXPECT_EQ(h.to_float_vector(), (std::vector<float>{101, 202, 303, 401, 502, 603, 701, 802, 903,  // t = 0
                                                     110, 220, 330, 410, 520, 630, 710, 820, 930}));
  // dh[t, u, j] = 1 + j + 3 u + 9 t: df[t, j] = sum over u, dg[u, j] = sum over t.
  std::vector<float> dhv;
  for (int i = 0; i < 18; ++i) dhv.push_back(static_cast<float>(i + 1));
  const JointAddGrads d = joint_add_backward(Tensor::from_vector(dhv, {1, 2, 3, 3}));
  ASSERT_EQ(d.df.shape(), (Shape{1, 2, 3}));
  ASSERT_EQ(d.dg.shape(), (Shape{1, 3, 3}));
  EXPECT_EQ(d.df.to_float_vector(), (std::vector<float>{12, 15, 18, 39, 42, 45}));
  EXPECT_EQ(d.dg.to_float_vector(), (std::vector<float>{11, 13, 15, 17, 19, 21, 23, 25, 27}));
}

// ============================================================================================
// Adjoints and finite differences
// ============================================================================================

TEST(TransducerOps, StackTimeBackwardIsTheAdjoint) {
  // <dy, F(x)> == <B(dy), x>: B is F's transpose (F is linear).
  struct Case {
    std::int64_t T, B, H, factor;
  };
  for (const Case& k : {Case{7, 3, 5, 2}, Case{8, 2, 4, 2}, Case{10, 2, 3, 3}, Case{3, 1, 6, 4}, Case{5, 2, 3, 1}}) {
    SCOPED_TRACE(::testing::Message() << "T " << k.T << " B " << k.B << " H " << k.H << " factor " << k.factor);
    const Tensor x = random_tensor({k.T, k.B, k.H}, 11);
    const Tensor y = stack_time_forward(x, k.factor);
    const Tensor dy = random_tensor(y.shape(), 12);
    const Tensor dx = stack_time_backward(dy, k.factor, k.T);
    ASSERT_EQ(dx.shape(), x.shape());
    EXPECT_NEAR(dot(dy, y), dot(dx, x), 1e-5);
  }
}

TEST(TransducerOps, JointAddBackwardIsTheAdjoint) {
  struct Case {
    std::int64_t B, T, U1, J;
  };
  for (const Case& k : {Case{2, 5, 4, 7}, Case{1, 3, 1, 5}, Case{3, 1, 6, 9}, Case{2, 9, 7, 70}}) {
    SCOPED_TRACE(::testing::Message() << "B " << k.B << " T " << k.T << " U+1 " << k.U1 << " J " << k.J);
    const Tensor f = random_tensor({k.B, k.T, k.J}, 21), g = random_tensor({k.B, k.U1, k.J}, 22);
    const Tensor h = joint_add_forward(f, g);
    const Tensor dh = random_tensor(h.shape(), 23);
    const JointAddGrads d = joint_add_backward(dh);
    EXPECT_NEAR(dot(dh, h), dot(d.df, f) + dot(d.dg, g), 1e-5 * (1.0 + std::fabs(dot(dh, h))));
  }
}

TEST(TransducerOps, FiniteDifferences) {
  {
    SCOPED_TRACE("stack_time factor 2, T = 5");
    EXPECT_GRADCHECK([](const V& in) { return V{stack_time_forward(in[0], 2)}; },
                     [](const V&, const V& d) { return V{stack_time_backward(d[0], 2, 5)}; },
                     {random_tensor({5, 2, 3}, 31)});
  }
  {
    SCOPED_TRACE("stack_time factor 3, T = 7");
    EXPECT_GRADCHECK([](const V& in) { return V{stack_time_forward(in[0], 3)}; },
                     [](const V&, const V& d) { return V{stack_time_backward(d[0], 3, 7)}; },
                     {random_tensor({7, 1, 4}, 32)});
  }
  {
    SCOPED_TRACE("joint_add");
    EXPECT_GRADCHECK([](const V& in) { return V{joint_add_forward(in[0], in[1])}; },
                     [](const V&, const V& d) {
                       const JointAddGrads g = joint_add_backward(d[0]);
                       return V{g.df, g.dg};
                     },
                     {random_tensor({2, 3, 5}, 33), random_tensor({2, 4, 5}, 34)});
  }
}

// ============================================================================================
// The construction from generic ops that the RNN-T plugin used: the same values, bit for bit
// ============================================================================================

TEST(TransducerOps, MatchTheGenericOpConstructionBitForBit) {
  // StackTime: zero-pad with concat, then [T' f, B, H] -> [T', B, f H] with permute_copy.
  const std::int64_t T = 9, B = 3, H = 6, F = 2, Ts = 5;
  const Tensor x = random_tensor({T, B, H}, 41);
  const Tensor padded = concat({x, Tensor::zeros({Ts * F - T, B, H})}, 0);
  const Tensor y_generic = permute_copy(padded.view({Ts, F, B, H}), {0, 2, 1, 3}).view({Ts, B, F * H});
  EXPECT_TRUE(same_bits(stack_time_forward(x, F), y_generic));
  const Tensor dy = random_tensor({Ts, B, F * H}, 42);
  const Tensor dx_generic =
      permute_copy(dy.view({Ts, B, F, H}), {0, 2, 1, 3}).view({Ts * F, B, H}).slice(0, 0, T).contiguous();
  EXPECT_TRUE(same_bits(stack_time_backward(dy, F, T), dx_generic));

  // Joint: replicate f and g with concat, add; backward sums over each axis with nn::sum.
  const std::int64_t Bj = 2, Tj = 7, U1 = 5, J = 70;
  const Tensor f = random_tensor({Bj, Tj, J}, 43), g = random_tensor({Bj, U1, J}, 44);
  const Tensor f_rep = concat(std::vector<Tensor>(static_cast<std::size_t>(U1), f.view({Bj, Tj, 1, J})), 2);
  const Tensor g_rep = concat(std::vector<Tensor>(static_cast<std::size_t>(Tj), g.view({Bj, 1, U1, J})), 1);
  EXPECT_TRUE(same_bits(joint_add_forward(f, g), add(f_rep, g_rep)));
  const Tensor dh = random_tensor({Bj, Tj, U1, J}, 45, -3.0f, 3.0f);
  const JointAddGrads d = joint_add_backward(dh);
  EXPECT_TRUE(same_bits(d.df, sum(dh, {2})));
  EXPECT_TRUE(same_bits(d.dg, sum(dh, {1})));
}

// ============================================================================================
// Half precision: StackTime copies f16/bf16 natively (exact)
// ============================================================================================

TEST(TransducerOps, StackTimeCopiesHalfTypesExactly) {
  const Tensor x = random_tensor({7, 2, 5}, 51);
  const Tensor y = stack_time_forward(x, 2);
  for (DType h : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(h));
    const Tensor yh = stack_time_forward(x.to(h), 2);
    EXPECT_EQ(yh.dtype(), h);
    EXPECT_TRUE(same_bits(yh.to(DType::f32), y.to(h).to(DType::f32)));
    const Tensor dxh = stack_time_backward(yh, 2, 7);
    EXPECT_EQ(dxh.dtype(), h);
    EXPECT_TRUE(same_bits(dxh.to(DType::f32), x.to(h).to(DType::f32)));
    // The joint's ops are promoted to f32 and round once.
    const Tensor f = random_tensor({1, 3, 4}, 52), g = random_tensor({1, 2, 4}, 53);
    const Tensor hh = joint_add_forward(f.to(h), g.to(h));
    EXPECT_EQ(hh.dtype(), h);
    EXPECT_TRUE(same_bits(hh.to(DType::f32),
                          joint_add_forward(f.to(h).to(DType::f32), g.to(h).to(DType::f32)).to(h).to(DType::f32)));
  }
}

// ============================================================================================
// Refusals
// ============================================================================================

TEST(TransducerOps, RefusesBadShapesWithAClearMessage) {
  const Tensor x = random_tensor({5, 2, 3}, 61);
  expect_invalid([&] { stack_time_forward(random_tensor({5, 6}, 1), 2); }, {"stack_time_forward", "[5, 6]"});
  expect_invalid([&] { stack_time_forward(x, 0); }, {"stack_time_forward", "factor"});
  // dy [3, 2, 6] stacks 5 or 6 frames with factor 2, not 7 or 4.
  const Tensor dy = random_tensor({3, 2, 6}, 62);
  expect_invalid([&] { stack_time_backward(dy, 2, 7); }, {"stack_time_backward", "[7, 2, 3]", "[4, 2, 6]", "[3, 2, 6]"});
  expect_invalid([&] { stack_time_backward(dy, 2, 4); }, {"stack_time_backward", "[2, 2, 6]"});
  expect_invalid([&] { stack_time_backward(dy, 4, 10); }, {"stack_time_backward", "factor 4", "[3, 2, 6]"});
  expect_invalid([&] { stack_time_forward(Tensor::zeros({5, 2, 3}, DType::i32), 2); }, {"stack_time_forward", "i32"});

  const Tensor f = random_tensor({2, 4, 5}, 63), g = random_tensor({2, 3, 5}, 64);
  expect_invalid([&] { joint_add_forward(f, random_tensor({3, 3, 5}, 65)); },
                 {"joint_add_forward", "f [2, 4, 5]", "g [3, 3, 5]"});
  expect_invalid([&] { joint_add_forward(f, random_tensor({2, 3, 6}, 66)); },
                 {"joint_add_forward", "[2, 4, 5]", "[2, 3, 6]"});
  expect_invalid([&] { joint_add_forward(f.view({8, 5}), g); }, {"joint_add_forward", "[8, 5]"});
  expect_invalid([&] { joint_add_forward(f, g.to(DType::bf16)); }, {"joint_add_forward", "dtype"});
  expect_invalid([&] { joint_add_backward(random_tensor({2, 4, 15}, 67)); }, {"joint_add_backward", "[2, 4, 15]"});

  // Calls built by hand reach the implementations' own checks.
  OpCall call;
  call.inputs = {f, g};
  call.outputs = {Tensor::empty({2, 4, 4, 5})};
  expect_invalid([&] { dispatch("joint_add_forward", call); }, {"joint_add_forward", "[2, 4, 3, 5]", "[2, 4, 4, 5]"});
  OpCall sc;
  sc.inputs = {dy};
  sc.outputs = {Tensor::empty({5, 2, 3})};
  sc.attrs.set("factor", 2).set("frames", 6);
  expect_invalid([&] { dispatch("stack_time_backward", sc); }, {"stack_time_backward", "frames 6"});
}

// ============================================================================================
// CUDA against the CPU (the registry walk covers the small cases; this one is larger)
// ============================================================================================

TEST(TransducerOps, CudaMatchesCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Device dev = Device::cuda(0);
  const Tensor x = random_tensor({75, 4, 96}, 71);
  const Tensor y = stack_time_forward(x, 2);
  EXPECT_TRUE(same_bits(stack_time_forward(x.to(dev), 2).to(Device::cpu()), y));
  EXPECT_TRUE(same_bits(stack_time_backward(y.to(dev), 2, 75).to(Device::cpu()), x));
  const Tensor xh = x.to(DType::bf16);
  EXPECT_TRUE(same_bits(stack_time_forward(xh.to(dev), 2).to(Device::cpu()).to(DType::f32),
                        stack_time_forward(xh, 2).to(DType::f32)));
  const Tensor f = random_tensor({3, 37, 130}, 72), g = random_tensor({3, 13, 130}, 73);
  EXPECT_TRUE(same_bits(joint_add_forward(f.to(dev), g.to(dev)).to(Device::cpu()), joint_add_forward(f, g)));
  const Tensor dh = random_tensor({3, 37, 13, 130}, 74);
  const JointAddGrads cpu = joint_add_backward(dh), gpu = joint_add_backward(dh.to(dev));
  // f32 sums of up to 37 terms in [-1, 1] against the CPU's f64 ones.
  EXPECT_TRUE(tensors_close(gpu.df.to(Device::cpu()), cpu.df, 1e-5, 1e-5));
  EXPECT_TRUE(tensors_close(gpu.dg.to(Device::cpu()), cpu.dg, 1e-5, 1e-5));
}

}  // namespace
}  // namespace benchhost::nn

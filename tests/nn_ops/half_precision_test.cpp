// Every op in f16 and bf16 (the registry walk of parity_test.cpp, for mixed precision): each
// op's example cases are run with their f32 tensors stored in the half type, through dispatch()
// (so through a native half implementation where one takes the call, else f32 promotion,
// Note [Half-precision promotion]), and compared with the op's f32 reference run on the same
// values (the f32 inputs rounded through the half type first). The difference may only be the
// rounding of the outputs to the half type (plus the op's own parity tolerance, for native
// implementations that sum in another order). On a machine with a GPU the same walk runs on CUDA.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "benchhost/device.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/registry.hpp"
#include "common/gradcheck.hpp"
#include "nn_ops/registry_walk.hpp"

namespace benchhost::nn {
namespace {

struct HalfParam {
  std::string op;
  DType half;
  DeviceType device;
  /// true: every f32 tensor of the case becomes `half`; false: only the inputs do and the
  /// outputs stay f32 (half activations with f32 gradient buffers, a mixed-precision backward).
  bool outputs_half;
};

// "cast" is the conversion itself (tested in parity_test.cpp), and the fp8 ops define their own
// input dtypes (fp8 operands, f32 scales).
const std::set<std::string> kNotWalked = {"cast", "fp8_cast_scaled", "matmul_fp8"};

std::vector<HalfParam> all_params() {
  std::vector<HalfParam> out;
  for (const auto& name : OpRegistry::instance().op_names()) {
    const OpDef* def = OpRegistry::instance().find(name);
    if (!def->make_cases || kNotWalked.count(name) || name.rfind("test.", 0) == 0) continue;
    for (DType h : {DType::bf16, DType::f16})
      for (DeviceType d : {DeviceType::cpu, DeviceType::cuda})
        for (bool outputs_half : {true, false}) out.push_back({name, h, d, outputs_half});
  }
  return out;
}

void PrintTo(const HalfParam& p, std::ostream* os) {
  *os << p.op << " " << dtype_name(p.half) << (p.outputs_half ? "" : " inputs")
      << (p.device == DeviceType::cpu ? " on cpu" : " on cuda");
}

// The f32 tensor rounded through `half` (still f32).
Tensor rounded(const Tensor& t, DType half) {
  if (!t.defined() || t.dtype() != DType::f32) return t;
  return t.contiguous().to(half).to(DType::f32);
}

// Native half implementations that sum many products and round partial sums to the data type:
// cuDNN's weight-gradient kernels in f16/bf16 (NDHWC and NHWC, tensor ops; the 2-d transposed
// convolution runs the 3-d ones on its depth-1 view). Their error scales with the gradient's
// largest element, not with each element: on an H100 (results/gpu/2026-11-26/run5) a -0.00045
// element of a gradient whose largest is 6.1 came back as 0 in bf16, 0.07 of a bf16 step of the
// largest. These ops may differ by `steps` half steps of the largest expected element, on top of
// the per-element bound every op has.
const std::map<std::string, double> kHalfSteps = {{"conv3d_backward_weights", 1.0},
                                                  {"conv_transpose3d_backward_weights", 1.0},
                                                  {"conv_transpose2d_backward_weights", 1.0},
                                                  {"conv2d_backward_weights", 1.0}};

// Half-precision rounding step: 2^-8 (bf16), 2^-11 (f16) relative.
double half_eps(DType h) { return h == DType::bf16 ? 1.0 / 256 : 1.0 / 2048; }

class HalfPrecisionOps : public ::testing::TestWithParam<HalfParam> {};

TEST_P(HalfPrecisionOps, MatchReferenceUpToOutputRounding) {
  const HalfParam& p = GetParam();
  const Device device = p.device == DeviceType::cpu ? Device::cpu() : Device::cuda(0);
  std::string why;
  if (!device_available(device, &why)) GTEST_SKIP() << device.str() << " is not available here: " << why;
  const OpDef& def = OpRegistry::instance().get(p.op);
  const OpImpl* ref = cpu_reference(def);
  ASSERT_NE(ref, nullptr) << p.op << " has no CPU reference implementation";

  const auto cases = def.make_cases(20261123);
  int walked = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const OpCall& base = cases[ci];
    bool any_f32 = false;
    for (const Tensor& t : base.inputs) any_f32 |= t.defined() && t.dtype() == DType::f32;
    if (!any_f32) continue;  // nothing floating to store in the half type

    OpCall expected{{}, {}, base.attrs};
    OpCall half{{}, {}, base.attrs};
    for (const Tensor& t : base.inputs) {
      expected.inputs.push_back(rounded(t, p.half));
      half.inputs.push_back(!t.defined() ? t : (t.dtype() == DType::f32 ? t.contiguous().to(p.half) : t).to(device));
    }
    for (const Tensor& t : base.outputs) {
      if (!p.outputs_half) {
        expected.outputs.push_back(t.defined() ? t.clone() : t);
        half.outputs.push_back(t.defined() ? t.clone().to(device) : t);
        continue;
      }
      expected.outputs.push_back(t.defined() ? rounded(t, p.half).clone() : t);
      half.outputs.push_back(!t.defined() ? t : (t.dtype() == DType::f32 ? t.contiguous().to(p.half) : t.clone()).to(device));
    }
    ref->run(expected);
    ASSERT_NO_THROW(OpRegistry::instance().dispatch(p.op, half))
        << p.op << " case " << ci << " (" << base.attrs.str() << ") in " << dtype_name(p.half);
    for (std::size_t o = 0; o < half.outputs.size(); ++o) {
      if (!half.outputs[o].defined()) continue;
      const Tensor got = half.outputs[o].to(Device::cpu());
      EXPECT_EQ(got.dtype(), base.outputs[o].dtype() == DType::f32 && p.outputs_half ? p.half : base.outputs[o].dtype())
          << "an output keeps the dtype its caller allocated";
      // Output rounding is at most half a step of the half type; a native implementation may add
      // its own summation-order difference (the op's parity tolerance) on top.
      const auto steps = kHalfSteps.find(p.op);
      const double half_tol = half_eps(p.half);
      double atol = def.atol + half_tol * 1e-3;
      if (p.device == DeviceType::cuda && steps != kHalfSteps.end()) {
        double largest = 0.0;
        for (float v : expected.outputs[o].to_float_vector()) largest = std::max(largest, std::fabs(double(v)));
        atol += steps->second * half_tol * largest;
      }
      const double rtol = def.rtol + half_tol;
      EXPECT_TRUE(benchhost::testing::tensors_close(got, expected.outputs[o], atol, rtol))
          << p.op << " case " << ci << " (" << base.attrs.str() << ") output " << o << " in "
          << dtype_name(p.half);
    }
    ++walked;
  }
  if (walked == 0) GTEST_SKIP() << p.op << " has no case with floating inputs";
  RecordProperty("walked_calls", walked);
}

INSTANTIATE_TEST_SUITE_P(Registry, HalfPrecisionOps, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<HalfParam>& info) {
                           return info.param.op + "_" + dtype_name(info.param.half) +
                                  (info.param.outputs_half ? "" : "_inputs") +
                                  (info.param.device == DeviceType::cpu ? "_cpu" : "_cuda");
                         });

}  // namespace
}  // namespace benchhost::nn

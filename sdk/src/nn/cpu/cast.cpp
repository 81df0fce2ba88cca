// cast: convert between f32 and f16 / bf16 / f64 (round to nearest even; dtype.hpp's scalar
// conversions). cpu.tbb runs the conversion in parallel chunks for the pairs involving f32;
// cpu.ref is the core's element-by-element Tensor::copy_.

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

std::string accepts(const OpCall& c) {
  const DType a = c.inputs[0].dtype(), b = c.outputs[0].dtype();
  if (!c.inputs[0].is_contiguous()) return "needs a contiguous input";
  const bool ok = (a == DType::f32 && (b == DType::f16 || b == DType::bf16 || b == DType::f32)) ||
                  (b == DType::f32 && (a == DType::f16 || a == DType::bf16));
  return ok ? std::string() : fmt::format("{} -> {} is not a parallel cast", dtype_name(a), dtype_name(b));
}

void run_tbb(OpCall& c) {
  const DType a = c.inputs[0].dtype(), b = c.outputs[0].dtype();
  const std::int64_t n = c.inputs[0].numel();
  const void* src = c.inputs[0].raw_data();
  void* dst = c.outputs[0].raw_data();
  parallel_range(n, 16384, [&](std::int64_t s, std::int64_t e) {
    if (a == DType::f32 && b == DType::f16)
      for (std::int64_t i = s; i < e; ++i) static_cast<std::uint16_t*>(dst)[i] = float_to_half(static_cast<const float*>(src)[i]);
    else if (a == DType::f32 && b == DType::bf16)
      for (std::int64_t i = s; i < e; ++i) static_cast<std::uint16_t*>(dst)[i] = float_to_bf16(static_cast<const float*>(src)[i]);
    else if (a == DType::f16)
      for (std::int64_t i = s; i < e; ++i) static_cast<float*>(dst)[i] = half_to_float(static_cast<const std::uint16_t*>(src)[i]);
    else if (a == DType::bf16)
      for (std::int64_t i = s; i < e; ++i) static_cast<float*>(dst)[i] = bf16_to_float(static_cast<const std::uint16_t*>(src)[i]);
    else
      std::copy(static_cast<const float*>(src) + s, static_cast<const float*>(src) + e, static_cast<float*>(dst) + s);
  });
}

void run_ref(OpCall& c) { c.outputs[0].copy_(c.inputs[0]); }

std::vector<OpCall> cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  Tensor x = case_tensor({3, 333}, seed, -70000.0f, 70000.0f);  // beyond f16's range: saturates to inf
  for (DType t : {DType::f16, DType::bf16}) {
    OpCall down;
    down.inputs = {x};
    down.outputs = {Tensor::empty({3, 333}, t)};
    out.push_back(down);
    OpCall up;
    up.inputs = {case_tensor({3, 333}, seed + 1, -4.0f, 4.0f).to(t)};
    up.outputs = {Tensor::empty({3, 333})};
    out.push_back(up);
  }
  return out;
}

const bool registered = register_op(OpDef{
    "cast", "inputs {x}, outputs {y of another dtype}", cases, 0, 0,
    {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, run_tbb, false},
     OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, run_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu

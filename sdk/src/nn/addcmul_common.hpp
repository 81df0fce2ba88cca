#pragma once
// Op "addcmul": operand rules shared by the Tensor-level API (ops.cpp) and the CPU and CUDA
// implementations, so every path refuses the same calls with the same InvalidArgument message.
// Private to the SDK.
//
// Registry calling convention: inputs {a, b, c?} -> outputs {out}; attribute alpha (default 1).
//   out = c + alpha * (a * b), or alpha * (a * b) when c is absent (undefined or not passed).
//   a: any shape S; b: S or a suffix of S (broadcast over a's leading dims: element i of a
//   meets b[i % b.numel()]); c and out: S. out may alias c (in place) or a.
//   One dtype for every tensor: f32, or f16 / bf16 storage with f32 arithmetic. One device.

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn::addcmul_detail {

inline bool is_storage_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

/// "" when a, b, c (may be undefined) and out (may be undefined: not allocated yet) fit the op;
/// else the reason, naming the shapes or dtypes involved.
inline std::string operand_error(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out) {
  if (!a.defined() || !b.defined()) return "a and b must be defined";
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  if (!(bs.size() <= as.size() && std::equal(bs.rbegin(), bs.rend(), as.rbegin())))
    return fmt::format("b {} must equal a {} or a suffix of its shape", shape_str(bs), shape_str(as));
  if (c.defined() && c.shape() != as)
    return fmt::format("c {} must have a's shape {}", shape_str(c.shape()), shape_str(as));
  if (out.defined() && out.shape() != as)
    return fmt::format("output {} must have a's shape {}", shape_str(out.shape()), shape_str(as));
  if (!is_storage_dtype(a.dtype())) return fmt::format("a is {}, needs f32, f16 or bf16", dtype_name(a.dtype()));
  for (const Tensor* t : {&b, &c, &out})
    if (t->defined() && t->dtype() != a.dtype())
      return fmt::format("dtypes differ: a is {}, {} is {}", dtype_name(a.dtype()),
                         t == &b ? "b" : t == &c ? "c" : "the output", dtype_name(t->dtype()));
  for (const Tensor* t : {&b, &c, &out})
    if (t->defined() && t->device() != a.device())
      return fmt::format("devices differ: a on {}, another operand on {}", a.device().str(), t->device().str());
  return {};
}

/// The optional c of a call (inputs {a, b} or {a, b, c}).
inline const Tensor& c_of(const OpCall& call) {
  static const Tensor absent;
  return call.inputs.size() > 2 ? call.inputs[2] : absent;
}

/// OpImpl::accepts for the kernels of `device`: "" when a is f32, f16 or bf16, every defined
/// tensor has a's dtype, is contiguous and on that device type, else the reason. A registry call
/// that mixes f16/bf16 with f32 is thus promoted to f32 (registry.hpp); the Tensor-level
/// functions reject mixed dtypes before dispatch. Shapes are not refusals: run() throws
/// InvalidArgument for them (check_call), on every device alike.
inline std::string kernel_refusal(const OpCall& call, DeviceType device) {
  if (call.inputs.empty() || call.outputs.empty()) return "needs inputs {a, b, c?} and outputs {out}";
  const DType t = call.inputs[0].dtype();
  if (!is_storage_dtype(t)) return fmt::format("a is {}, needs f32, f16 or bf16", dtype_name(t));
  for (const auto* list : {&call.inputs, &call.outputs})
    for (const Tensor& x : *list) {
      if (!x.defined()) continue;
      if (x.dtype() != t) return fmt::format("mixed dtypes ({} and {})", dtype_name(t), dtype_name(x.dtype()));
      if (x.device().type != device)
        return fmt::format("{} is not on {}", x.describe(), device == DeviceType::cpu ? "the cpu" : "a cuda device");
      if (!x.is_contiguous()) return fmt::format("{} is not contiguous", x.describe());
    }
  return {};
}

/// For implementations: throws InvalidArgument unless the call fits the op and every tensor is
/// contiguous (the kernels index flat arrays).
inline void check_call(const OpCall& call) {
  BH_CHECK_AS(InvalidArgument, (call.inputs.size() == 2 || call.inputs.size() == 3) && call.outputs.size() == 1,
              "addcmul: needs inputs {{a, b, c?}} and outputs {{out}}, got {} and {}", call.inputs.size(),
              call.outputs.size());
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &c = c_of(call), &out = call.outputs[0];
  const std::string why = operand_error(a, b, c, out);
  BH_CHECK_AS(InvalidArgument, why.empty(), "addcmul: {}", why);
  BH_CHECK_AS(InvalidArgument, out.defined(), "addcmul: the output is undefined");
  for (const Tensor* t : {&a, &b, &c, &out})
    BH_CHECK_AS(InvalidArgument, !t->defined() || t->is_contiguous(), "addcmul: {} is not contiguous", t->describe());
}

}  // namespace benchhost::nn::addcmul_detail

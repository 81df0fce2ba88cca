#pragma once
// Dtype checks shared by the CPU and CUDA op implementations (private to sdk/src/nn).

#include <string>

#include "benchhost/nn/registry.hpp"

namespace benchhost::nn {

/// "" if every defined tensor of the call (inputs and outputs) has one dtype, else the reason.
/// For byte-copying ops (concat, split, permute), which handle any dtype natively, f16/bf16
/// included, but cannot convert: a call mixing f16/bf16 with f32 is then promoted by dispatch
/// (Note [Half-precision promotion]).
inline std::string mixed_dtype_refusal(const OpCall& c) {
  const Tensor* first = nullptr;
  for (const auto* list : {&c.inputs, &c.outputs})
    for (const Tensor& t : *list) {
      if (!t.defined()) continue;
      if (!first) first = &t;
      else if (t.dtype() != first->dtype())
        return fmt::format("mixed dtypes ({} and {})", dtype_name(first->dtype()), dtype_name(t.dtype()));
    }
  return {};
}

}  // namespace benchhost::nn

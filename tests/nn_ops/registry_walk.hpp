#pragma once
// What the registry-walking tests (parity_test.cpp, half_precision_test.cpp) share.

#include "benchhost/nn/registry.hpp"

namespace benchhost::nn {

/// The op's plain reference implementation on the CPU (the baseline of every walk), or nullptr.
inline const OpImpl* cpu_reference(const OpDef& def) {
  for (const auto& impl : def.impls)
    if (impl.is_reference && impl.device == DeviceType::cpu) return &impl;
  return nullptr;
}

}  // namespace benchhost::nn

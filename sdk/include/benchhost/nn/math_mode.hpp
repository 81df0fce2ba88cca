#pragma once
/// @file nn/math_mode.hpp  Per-thread math modes that op implementations consult.
///
/// Note [Math modes]
/// Some precision choices are not a dtype but a mode of the arithmetic unit: TF32 tensor-core
/// math for f32 matmuls and convolutions on CUDA (sm_80+). The precision policy turns the mode on
/// for the thread that runs the training step (Tf32Scope); CUDA matmul and convolution
/// implementations read tf32_enabled() when they choose their compute type. CPU implementations
/// ignore the mode: a CPU run that asks for tf32 is refused by the policy (Note [Precision on
/// CPU]), it never reaches the ops. The mode is thread-local so that two runs in one process
/// (tests, rank-threads) cannot change each other's numerics.

namespace benchhost::nn {

/// Whether f32 matmuls/convolutions on this thread may use TF32 tensor-core math (default false).
bool tf32_enabled() noexcept;
/// Set the mode for this thread; returns the previous value.
bool set_tf32_enabled(bool on) noexcept;

/// Sets the TF32 mode for a scope and restores the previous value on exit.
class Tf32Scope {
 public:
  explicit Tf32Scope(bool on) noexcept : previous_(set_tf32_enabled(on)) {}
  ~Tf32Scope() { set_tf32_enabled(previous_); }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;

 private:
  bool previous_;
};

}  // namespace benchhost::nn

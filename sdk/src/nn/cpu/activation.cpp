// activation_forward / activation_backward: relu, gelu (erf and tanh), sigmoid, tanh.
//
// Elementwise over any shape (contiguous f32). The backward takes the activation's input x and
// recomputes what it needs (GELU's derivative needs x, not y). cpu.tbb: oneTBB chunks of 16K
// elements, vectorisable math (vec_math.hpp, Note [Vectorisable exp]) in multiversioned loops;
// cpu.ref: the standard library in double. Results below FLT_MIN are flushed to zero
// (vec_math.hpp Note [No denormal outputs]).

#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/vec_math.hpp"

namespace benchhost::nn::cpu {
namespace {

template <Activation A>
BH_INLINE void fwd_loop(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = flush_tiny(act_fwd<A>(x[i]));
}

template <Activation A>
BH_INLINE void bwd_loop(const float* dy, const float* x, float* dx, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = flush_tiny(dy[i] * act_grad<A>(x[i]));
}

// One explicit switch per kernel (no dispatch helper) so that every loop is inlined into, and
// vectorised for, each multiversioned clone.
BH_CPU_KERNEL void act_forward_kernel(int act, const float* x, float* y, std::int64_t n) {
  switch (static_cast<Activation>(act)) {
    case Activation::none: fwd_loop<Activation::none>(x, y, n); break;
    case Activation::relu: fwd_loop<Activation::relu>(x, y, n); break;
    case Activation::gelu_erf: fwd_loop<Activation::gelu_erf>(x, y, n); break;
    case Activation::gelu_tanh: fwd_loop<Activation::gelu_tanh>(x, y, n); break;
    case Activation::sigmoid: fwd_loop<Activation::sigmoid>(x, y, n); break;
    case Activation::tanh: fwd_loop<Activation::tanh>(x, y, n); break;
  }
}

BH_CPU_KERNEL void act_backward_kernel(int act, const float* dy, const float* x, float* dx,
                                       std::int64_t n) {
  switch (static_cast<Activation>(act)) {
    case Activation::none: bwd_loop<Activation::none>(dy, x, dx, n); break;
    case Activation::relu: bwd_loop<Activation::relu>(dy, x, dx, n); break;
    case Activation::gelu_erf: bwd_loop<Activation::gelu_erf>(dy, x, dx, n); break;
    case Activation::gelu_tanh: bwd_loop<Activation::gelu_tanh>(dy, x, dx, n); break;
    case Activation::sigmoid: bwd_loop<Activation::sigmoid>(dy, x, dx, n); break;
    case Activation::tanh: bwd_loop<Activation::tanh>(dy, x, dx, n); break;
  }
}

Activation act_of(const OpCall& c) { return static_cast<Activation>(c.attrs.get_int("act", 0)); }

void fwd_tbb(OpCall& c) {
  const float* x = c.inputs[0].data<float>();
  float* y = c.outputs[0].data<float>();
  const int act = static_cast<int>(act_of(c));
  parallel_range(c.inputs[0].numel(), 16384, [&](std::int64_t b, std::int64_t e) {
    act_forward_kernel(act, x + b, y + b, e - b);
  });
}

void bwd_tbb(OpCall& c) {
  const float* dy = c.inputs[0].data<float>();
  const float* x = c.inputs[1].data<float>();
  float* dx = c.outputs[0].data<float>();
  const int act = static_cast<int>(act_of(c));
  parallel_range(c.inputs[0].numel(), 16384, [&](std::int64_t b, std::int64_t e) {
    act_backward_kernel(act, dy + b, x + b, dx + b, e - b);
  });
}

void fwd_ref(OpCall& c) {
  const float* x = c.inputs[0].data<float>();
  float* y = c.outputs[0].data<float>();
  for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i)
    y[i] = static_cast<float>(act_fwd_ref(act_of(c), x[i]));
}

void bwd_ref(OpCall& c) {
  const float* dy = c.inputs[0].data<float>();
  const float* x = c.inputs[1].data<float>();
  float* dx = c.outputs[0].data<float>();
  for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i)
    dx[i] = static_cast<float>(dy[i] * act_grad_ref(act_of(c), x[i]));
}

constexpr Activation kAll[] = {Activation::none, Activation::relu, Activation::gelu_erf,
                               Activation::gelu_tanh, Activation::sigmoid, Activation::tanh};

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (Activation a : kAll) {
    OpCall c;
    c.inputs = {case_tensor({3, 37}, seed + static_cast<int>(a), -6.0f, 6.0f)};
    c.outputs = {Tensor::empty({3, 37})};
    c.attrs.set("act", static_cast<int>(a));
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (Activation a : kAll) {
    OpCall c;
    c.inputs = {case_tensor({2, 41}, seed), case_tensor({2, 41}, seed + 1 + static_cast<int>(a), -6.0f, 6.0f)};
    c.outputs = {Tensor::empty({2, 41})};
    c.attrs.set("act", static_cast<int>(a));
    out.push_back(std::move(c));
  }
  return out;
}

const bool registered =
    register_op(OpDef{"activation_forward",
                      "y = act(x); inputs {x}, outputs {y}; attr act (nn::Activation)",
                      fwd_cases, 2e-6, 2e-6,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"activation_backward",
                      "dx = dy * act'(x); inputs {dy, x}, outputs {dx}; attr act",
                      bwd_cases, 2e-6, 2e-6,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu

// stack_time_forward / stack_time_backward / joint_add_forward / joint_add_backward: the op
// declarations, the oneTBB kernels and the plain-loop references (Note [Transducer layout ops] in
// nn/transducer.hpp; the Tensor-level functions are in nn/transducer.cpp).
//
// StackTime is a copy: the fast kernel moves whole H-element frames with memcpy (any dtype, so
// f16/bf16 are native and exact), parallel over the stacked rows (s, b). The joint's forward
// writes, per (b, t) row in parallel, U+1 rows f[b, t] + g[b, u]. Its backward reads dh once:
// a task owns a batch element and a slice of at most kJointCols columns and walks t then u,
// adding each dh row slice to df[b, t] (in u order) and dg[b, u] (in t order), with f64
// accumulators rounded once at the end: the same sums, in the same order, as nn::sum over that
// axis (cpu/reduce.cpp), so the RNN-T plugin's gradients are unchanged bit for bit. The
// reference does the same sums by index loops; the parity tolerance only covers the CUDA
// kernels' f32 accumulation.

#include <algorithm>
#include <cstring>
#include <vector>

#include "nn/cpu/cpu_common.hpp"
#include "nn/transducer_common.hpp"

namespace benchhost::nn::cpu {
namespace {

using transducer::JointDims;
using transducer::StackDims;

constexpr std::int64_t kJointCols = 64;  // columns per joint backward task: U+1 rows of f64 accumulators

StackDims stack_fwd_dims(const OpCall& c) {
  return transducer::check_stack_time(c.inputs[0], c.outputs[0], c.attrs.get_int("factor", 1), "stack_time_forward");
}

StackDims stack_bwd_dims(const OpCall& c) {
  const StackDims d =
      transducer::check_stack_time(c.outputs[0], c.inputs[0], c.attrs.get_int("factor", 1), "stack_time_backward");
  BH_CHECK_AS(InvalidArgument, c.attrs.get_int("frames", d.T) == d.T,
              "stack_time_backward: attr frames {} differs from dx's {} frames", c.attrs.get_int("frames", d.T), d.T);
  return d;
}

// ---------------------------------------------------------------------------------------------
// Fast kernels
// ---------------------------------------------------------------------------------------------

void stack_fwd_tbb(OpCall& c) {
  const StackDims d = stack_fwd_dims(c);
  const auto esz = static_cast<std::int64_t>(c.inputs[0].element_size());
  const auto* x = static_cast<const std::uint8_t*>(c.inputs[0].raw_data());
  auto* y = static_cast<std::uint8_t*>(c.outputs[0].raw_data());
  const std::int64_t frame = d.H * esz;
  parallel_range(d.Ts * d.B, row_grain(d.stacked_width()), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t s = r / d.B, b = r % d.B;
      std::uint8_t* out = y + r * d.factor * frame;
      for (std::int64_t k = 0; k < d.factor; ++k) {
        const std::int64_t t = s * d.factor + k;
        if (t < d.T) std::memcpy(out + k * frame, x + (t * d.B + b) * frame, static_cast<std::size_t>(frame));
        else std::memset(out + k * frame, 0, static_cast<std::size_t>(frame));
      }
    }
  });
}

void stack_bwd_tbb(OpCall& c) {
  const StackDims d = stack_bwd_dims(c);
  const auto esz = static_cast<std::int64_t>(c.inputs[0].element_size());
  const auto* dy = static_cast<const std::uint8_t*>(c.inputs[0].raw_data());
  auto* dx = static_cast<std::uint8_t*>(c.outputs[0].raw_data());
  const std::int64_t frame = d.H * esz;
  parallel_range(d.T * d.B, row_grain(d.H), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t t = r / d.B, b = r % d.B;
      std::memcpy(dx + r * frame, dy + ((t / d.factor * d.B + b) * d.factor + t % d.factor) * frame,
                  static_cast<std::size_t>(frame));
    }
  });
}

BH_CPU_KERNEL void add_rows(const float* f, const float* g, float* h, std::int64_t rows, std::int64_t J) {
  for (std::int64_t u = 0; u < rows; ++u) {
    const float* gu = g + u * J;
    float* hu = h + u * J;
#pragma omp simd
    for (std::int64_t j = 0; j < J; ++j) hu[j] = f[j] + gu[j];
  }
}

void joint_fwd_tbb(OpCall& c) {
  const JointDims d = transducer::check_joint(c.inputs[0], c.inputs[1], c.outputs[0], "joint_add_forward");
  const float* f = c.inputs[0].data<float>();
  const float* g = c.inputs[1].data<float>();
  float* h = c.outputs[0].data<float>();
  parallel_range(d.B * d.T, row_grain(d.U1 * d.J), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      add_rows(f + r * d.J, g + (r / d.T) * d.U1 * d.J, h + r * d.U1 * d.J, d.U1, d.J);
  });
}

// Columns [j0, j0 + n) of batch element b: dh rows (t, u) at stride J, df rows t, dg rows u.
// dg_acc: [U1, n] f64 scratch; df_acc: [n].
BH_CPU_KERNEL void joint_bwd_slice(const float* dh, float* df, float* dg, std::int64_t T, std::int64_t U1,
                                   std::int64_t J, std::int64_t n, double* df_acc, double* dg_acc) {
  for (std::int64_t i = 0; i < U1 * n; ++i) dg_acc[i] = 0.0;
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t j = 0; j < n; ++j) df_acc[j] = 0.0;
    for (std::int64_t u = 0; u < U1; ++u) {
      const float* row = dh + (t * U1 + u) * J;
      double* gu = dg_acc + u * n;
#pragma omp simd
      for (std::int64_t j = 0; j < n; ++j) {
        df_acc[j] += row[j];
        gu[j] += row[j];
      }
    }
    float* dft = df + t * J;
    for (std::int64_t j = 0; j < n; ++j) dft[j] = static_cast<float>(df_acc[j]);
  }
  for (std::int64_t u = 0; u < U1; ++u)
    for (std::int64_t j = 0; j < n; ++j) dg[u * J + j] = static_cast<float>(dg_acc[u * n + j]);
}

void joint_bwd_tbb(OpCall& c) {
  const JointDims d = transducer::check_joint(c.outputs[0], c.outputs[1], c.inputs[0], "joint_add_backward");
  const float* dh = c.inputs[0].data<float>();
  float* df = c.outputs[0].data<float>();
  float* dg = c.outputs[1].data<float>();
  const std::int64_t slices = (d.J + kJointCols - 1) / kJointCols;
  parallel_range(d.B * slices, 1, [&](std::int64_t k0, std::int64_t k1) {
    std::vector<double> df_acc(kJointCols), dg_acc(static_cast<std::size_t>(d.U1 * kJointCols));
    for (std::int64_t k = k0; k < k1; ++k) {
      const std::int64_t b = k / slices, j0 = (k % slices) * kJointCols, n = std::min(kJointCols, d.J - j0);
      joint_bwd_slice(dh + b * d.T * d.U1 * d.J + j0, df + b * d.T * d.J + j0, dg + b * d.U1 * d.J + j0, d.T, d.U1,
                      d.J, n, df_acc.data(), dg_acc.data());
    }
  });
}

// ---------------------------------------------------------------------------------------------
// References: plain index loops (f32 tensors)
// ---------------------------------------------------------------------------------------------

void stack_fwd_ref(OpCall& c) {
  const StackDims d = stack_fwd_dims(c);
  const float* x = c.inputs[0].data<float>();
  float* y = c.outputs[0].data<float>();
  for (std::int64_t s = 0; s < d.Ts; ++s)
    for (std::int64_t b = 0; b < d.B; ++b)
      for (std::int64_t k = 0; k < d.factor; ++k)
        for (std::int64_t i = 0; i < d.H; ++i) {
          const std::int64_t t = s * d.factor + k;
          y[(s * d.B + b) * d.factor * d.H + k * d.H + i] = t < d.T ? x[(t * d.B + b) * d.H + i] : 0.0f;
        }
}

void stack_bwd_ref(OpCall& c) {
  const StackDims d = stack_bwd_dims(c);
  const float* dy = c.inputs[0].data<float>();
  float* dx = c.outputs[0].data<float>();
  for (std::int64_t t = 0; t < d.T; ++t)
    for (std::int64_t b = 0; b < d.B; ++b)
      for (std::int64_t i = 0; i < d.H; ++i)
        dx[(t * d.B + b) * d.H + i] = dy[(t / d.factor * d.B + b) * d.factor * d.H + (t % d.factor) * d.H + i];
}

void joint_fwd_ref(OpCall& c) {
  const JointDims d = transducer::check_joint(c.inputs[0], c.inputs[1], c.outputs[0], "joint_add_forward");
  const float* f = c.inputs[0].data<float>();
  const float* g = c.inputs[1].data<float>();
  float* h = c.outputs[0].data<float>();
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t t = 0; t < d.T; ++t)
      for (std::int64_t u = 0; u < d.U1; ++u)
        for (std::int64_t j = 0; j < d.J; ++j)
          h[((b * d.T + t) * d.U1 + u) * d.J + j] = f[(b * d.T + t) * d.J + j] + g[(b * d.U1 + u) * d.J + j];
}

void joint_bwd_ref(OpCall& c) {
  const JointDims d = transducer::check_joint(c.outputs[0], c.outputs[1], c.inputs[0], "joint_add_backward");
  const float* dh = c.inputs[0].data<float>();
  float* df = c.outputs[0].data<float>();
  float* dg = c.outputs[1].data<float>();
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t j = 0; j < d.J; ++j) {
      for (std::int64_t t = 0; t < d.T; ++t) {
        double s = 0.0;
        for (std::int64_t u = 0; u < d.U1; ++u) s += dh[((b * d.T + t) * d.U1 + u) * d.J + j];
        df[(b * d.T + t) * d.J + j] = static_cast<float>(s);
      }
      for (std::int64_t u = 0; u < d.U1; ++u) {
        double s = 0.0;
        for (std::int64_t t = 0; t < d.T; ++t) s += dh[((b * d.T + t) * d.U1 + u) * d.J + j];
        dg[(b * d.U1 + u) * d.J + j] = static_cast<float>(s);
      }
    }
}

// StackTime copies bytes: any dtype, as long as input and output agree.
std::string accepts_copy(const OpCall& c) {
  const Tensor& in = c.inputs[0];
  const Tensor& out = c.outputs[0];
  if (!in.device().is_cpu() || !out.device().is_cpu()) return "needs cpu tensors";
  if (!in.is_contiguous() || !out.is_contiguous()) return "needs contiguous tensors";
  if (in.dtype() != out.dtype()) return fmt::format("input {} and output {} differ in dtype", in.describe(), out.describe());
  return {};
}

// ---------------------------------------------------------------------------------------------
// Example cases: T not divisible by the factor, T < factor, factor 1; U+1 = 1, T = 1, odd J and
// J over one backward slice
// ---------------------------------------------------------------------------------------------

struct StackCase {
  std::int64_t T, B, H, factor;
};
const StackCase kStackCases[] = {{5, 2, 3, 2}, {6, 3, 4, 2}, {7, 1, 5, 3}, {4, 2, 3, 1}, {1, 2, 3, 2}, {9, 3, 8, 4}};

struct JointCase {
  std::int64_t B, T, U1, J;
};
const JointCase kJointCases[] = {{2, 3, 4, 5}, {1, 4, 1, 3}, {3, 1, 2, 7}, {2, 5, 3, 16}, {2, 7, 5, 67}};

std::vector<OpCall> stack_fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (const StackCase& k : kStackCases) {
    OpCall c;
    c.inputs = {case_tensor({k.T, k.B, k.H}, seed + out.size())};
    c.outputs = {Tensor::empty({(k.T + k.factor - 1) / k.factor, k.B, k.factor * k.H})};
    c.attrs.set("factor", static_cast<double>(k.factor));
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> stack_bwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (const StackCase& k : kStackCases) {
    OpCall c;
    c.inputs = {case_tensor({(k.T + k.factor - 1) / k.factor, k.B, k.factor * k.H}, seed + out.size())};
    c.outputs = {Tensor::empty({k.T, k.B, k.H})};
    c.attrs.set("factor", static_cast<double>(k.factor)).set("frames", static_cast<double>(k.T));
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> joint_fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (const JointCase& k : kJointCases) {
    OpCall c;
    c.inputs = {case_tensor({k.B, k.T, k.J}, seed + 2 * out.size()), case_tensor({k.B, k.U1, k.J}, seed + 2 * out.size() + 1)};
    c.outputs = {Tensor::empty({k.B, k.T, k.U1, k.J})};
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> joint_bwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  for (const JointCase& k : kJointCases) {
    OpCall c;
    c.inputs = {case_tensor({k.B, k.T, k.U1, k.J}, seed + out.size())};
    c.outputs = {Tensor::empty({k.B, k.T, k.J}), Tensor::empty({k.B, k.U1, k.J})};
    out.push_back(std::move(c));
  }
  return out;
}

const bool registered =
    register_op(OpDef{"stack_time_forward",
                      "inputs {x [T, B, H]}, outputs {y [ceil(T / f), B, f H]} (frames f s .. f s + f - 1 side by "
                      "side, zero frames past T); attr factor f >= 1",
                      stack_fwd_cases, 0.0, 0.0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts_copy, stack_fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, stack_fwd_ref, true}}}) &&
    register_op(OpDef{"stack_time_backward",
                      "inputs {dy [ceil(T / f), B, f H]}, outputs {dx [T, B, H]} (the padding's gradient dropped); "
                      "attrs factor f, frames T",
                      stack_bwd_cases, 0.0, 0.0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts_copy, stack_bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, stack_bwd_ref, true}}}) &&
    register_op(OpDef{"joint_add_forward",
                      "inputs {f [B, T, J], g [B, U+1, J]}, outputs {h [B, T, U+1, J] = f[b, t] + g[b, u]}",
                      joint_fwd_cases, 0.0, 0.0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, joint_fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, joint_fwd_ref, true}}}) &&
    register_op(OpDef{"joint_add_backward",
                      "inputs {dh [B, T, U+1, J]}, outputs {df [B, T, J] = sum over u, dg [B, U+1, J] = sum over t} "
                      "(overwritten)",
                      joint_bwd_cases, 1e-6, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, joint_bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, joint_bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu

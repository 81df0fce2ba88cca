#pragma once
// Helpers shared by the CPU op implementations (private to sdk/src/nn/cpu).

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"

/// Note [Kernel multiversioning]
/// The build targets baseline x86-64 (SSE2) so binaries run anywhere, but the hot loops are
/// compiled three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline, and
/// the loader picks one per machine (GCC target_clones, an ifunc). Put BH_CPU_KERNEL on a
/// non-template function that holds the loop; inline helpers (vec_math.hpp) inline into each
/// clone. oneDNN JIT-compiles for the machine on its own.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BH_CPU_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BH_CPU_KERNEL
#endif

namespace benchhost::nn::cpu {

/// Run f(begin, end) over [0, n) in oneTBB chunks of at least `grain` items.
template <class F>
inline void parallel_range(std::int64_t n, std::int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n <= grain) {
    f(std::int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<std::int64_t>& r) { f(r.begin(), r.end()); });
}

/// Rows per chunk so that a chunk is roughly `target` elements of work.
inline std::int64_t row_grain(std::int64_t cols, std::int64_t target = 16384) {
  return std::max<std::int64_t>(1, target / std::max<std::int64_t>(cols, 1));
}

/// "" if every defined tensor among `ts` is f32, contiguous and on the CPU; else the reason.
inline std::string require_f32_contiguous(const std::vector<Tensor>& ts) {
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (!t.defined()) continue;
    if (t.dtype() != DType::f32) return fmt::format("tensor {} is {}, needs f32", i, dtype_name(t.dtype()));
    if (!t.is_contiguous()) return fmt::format("tensor {} is not contiguous", i);
    if (!t.device().is_cpu()) return fmt::format("tensor {} is not on the cpu", i);
  }
  return {};
}

/// "" if every floating tensor of the call (inputs and outputs) is f32, else the reason: for the
/// accepts() of kernels that read integer tensors of any type but floating ones only as f32
/// (Note [Half-precision promotion] in registry.hpp: such a call with f16/bf16 is promoted).
inline std::string require_floating_f32(const OpCall& c) {
  for (const auto* list : {&c.inputs, &c.outputs})
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Tensor& t = (*list)[i];
      if (t.defined() && is_floating(t.dtype()) && t.dtype() != DType::f32)
        return fmt::format("{} {} is {}, needs f32", list == &c.inputs ? "input" : "output", i,
                           dtype_name(t.dtype()));
    }
  return {};
}

/// Accept f32 contiguous inputs and outputs (the usual requirement of our CPU kernels).
inline std::string accept_f32(const OpCall& c) {
  std::string why = require_f32_contiguous(c.inputs);
  if (!why.empty()) return "input " + why;
  why = require_f32_contiguous(c.outputs);
  if (!why.empty()) return "output " + why;
  return {};
}

/// Seeded uniform f32 CPU tensor for the ops' example cases.
inline Tensor case_tensor(const Shape& shape, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Rng rng(seed, 99);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(lo, hi);
  return t;
}

/// Rows and columns of a tensor viewed as [rows, last dim].
inline std::int64_t rows_of(const Tensor& t) { return t.dim() == 0 ? 1 : t.numel() / t.size(-1); }

/// Philox4x32-10 (random.hpp) for `n` <= 64 consecutive counters first..first+n-1 at once, in
/// struct-of-arrays form so the rounds vectorise: lane l of block i lands in out[l][i]. Bit-exact
/// with philox4x32(key, counter_hi, first + i).
inline void philox4x32_blocks(std::uint64_t key, std::uint64_t counter_hi, std::uint64_t first,
                              int n, std::uint32_t out[4][64]) {
  std::uint32_t c0[64], c1[64], c2[64], c3[64];
  const auto hi0 = static_cast<std::uint32_t>(counter_hi), hi1 = static_cast<std::uint32_t>(counter_hi >> 32);
  for (int i = 0; i < n; ++i) {
    const std::uint64_t lo = first + static_cast<std::uint64_t>(i);
    c0[i] = static_cast<std::uint32_t>(lo);
    c1[i] = static_cast<std::uint32_t>(lo >> 32);
    c2[i] = hi0;
    c3[i] = hi1;
  }
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < n; ++i) {
      const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0[i];
      const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2[i];
      const auto n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[i] ^ k0;
      const auto n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[i] ^ k1;
      c1[i] = static_cast<std::uint32_t>(p1);
      c3[i] = static_cast<std::uint32_t>(p0);
      c0[i] = n0;
      c2[i] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int i = 0; i < n; ++i) {
    out[0][i] = c0[i];
    out[1][i] = c1[i];
    out[2][i] = c2[i];
    out[3][i] = c3[i];
  }
}

/// Pack/unpack 64-bit random state through Attrs integer lists (doubles would lose bits).
inline std::uint64_t attr_u64(const Attrs& a, std::string_view name, std::size_t i) {
  const auto& v = a.get_ints(name);
  BH_CHECK_AS(InvalidArgument, v.size() > i, "op attribute {} needs at least {} values", name, i + 1);
  return static_cast<std::uint64_t>(v[i]);
}

}  // namespace benchhost::nn::cpu

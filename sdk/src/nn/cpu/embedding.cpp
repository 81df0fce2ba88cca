// embedding_forward / embedding_backward (dense) / embedding_backward_sparse.
//
// ids: i32 or i64, any shape (N = numel); table [V, D]; out [N, D] (callers reshape to ids'
// shape + D). Every id is range-checked first (InvalidArgument naming the id, its position and
// V). Backward scatter-adds dy rows into the table gradient; to stay race-free and deterministic
// without atomics, each task owns a slice of the D columns and walks all N tokens in order.
// Sparse backward writes [n_unique, D] rows for the sorted unique ids given as input `rows`.

#include <algorithm>
#include <limits>

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

std::vector<std::int64_t> ids_of(const Tensor& ids, std::int64_t V) {
  BH_CHECK_AS(InvalidArgument, ids.dtype() == DType::i32 || ids.dtype() == DType::i64,
              "embedding ids must be i32 or i64, got {}", dtype_name(ids.dtype()));
  Tensor c = ids.contiguous();
  std::vector<std::int64_t> out(static_cast<std::size_t>(c.numel()));
  for (std::int64_t i = 0; i < c.numel(); ++i) {
    const std::int64_t id = c.dtype() == DType::i32 ? c.data<std::int32_t>()[i] : c.data<std::int64_t>()[i];
    BH_CHECK_AS(InvalidArgument, id >= 0 && id < V,
                "embedding id {} at position {} is out of range for a table of {} rows", id, i, V);
    out[static_cast<std::size_t>(i)] = id;
  }
  return out;
}

std::string accepts(const OpCall& c) {
  for (const Tensor& t : c.outputs)
    if (t.defined() && (t.dtype() != DType::f32 || !t.is_contiguous())) return "outputs must be contiguous f32";
  return require_floating_f32(c);
}

void fwd_tbb(OpCall& c) {
  const Tensor& table = c.inputs[1];
  const std::int64_t V = table.size(0), D = table.size(1);
  const auto ids = ids_of(c.inputs[0], V);
  Tensor tab = table.contiguous();
  const float* tp = tab.data<float>();
  float* out = c.outputs[0].data<float>();
  parallel_range(static_cast<std::int64_t>(ids.size()), row_grain(D), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) std::copy_n(tp + ids[i] * D, D, out + i * D);
  });
}

void bwd_tbb(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  float* dt = c.outputs[0].data<float>();
  const std::int64_t V = c.outputs[0].size(0), D = c.outputs[0].size(1);
  const auto ids = ids_of(c.inputs[1], V);
  const float* g = dy.data<float>();
  parallel_range(D, 16, [&](std::int64_t d0, std::int64_t d1) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      float* dst = dt + ids[i] * D;
      const float* src = g + static_cast<std::int64_t>(i) * D;
      for (std::int64_t d = d0; d < d1; ++d) dst[d] += src[d];
    }
  });
}

void sparse_tbb(OpCall& c) {
  const Tensor& dy = c.inputs[0];
  const Tensor& rows = c.inputs[2];
  const std::int64_t n = rows.numel(), D = dy.size(-1);
  const std::int64_t* rp = rows.data<std::int64_t>();
  const auto ids = ids_of(c.inputs[1], std::numeric_limits<std::int64_t>::max());
  std::vector<std::int64_t> slot(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t* it = std::lower_bound(rp, rp + n, ids[i]);
    BH_CHECK_AS(InvalidArgument, it != rp + n && *it == ids[i],
                "embedding_backward_sparse: id {} is missing from the rows list", ids[i]);
    slot[i] = it - rp;
  }
  float* out = c.outputs[0].data<float>();
  std::fill_n(out, n * D, 0.0f);
  const float* g = dy.data<float>();
  parallel_range(D, 16, [&](std::int64_t d0, std::int64_t d1) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      float* dst = out + slot[i] * D;
      const float* src = g + static_cast<std::int64_t>(i) * D;
      for (std::int64_t d = d0; d < d1; ++d) dst[d] += src[d];
    }
  });
}

void fwd_ref(OpCall& c) {
  const Tensor& table = c.inputs[1];
  const auto ids = ids_of(c.inputs[0], table.size(0));
  const std::int64_t D = table.size(1);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::int64_t d = 0; d < D; ++d)
      c.outputs[0].data<float>()[static_cast<std::int64_t>(i) * D + d] =
          static_cast<float>(table.item({ids[i], d}));
}

void bwd_ref(OpCall& c) {
  const std::int64_t V = c.outputs[0].size(0), D = c.outputs[0].size(1);
  const auto ids = ids_of(c.inputs[1], V);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::int64_t d = 0; d < D; ++d)
      c.outputs[0].data<float>()[ids[i] * D + d] += c.inputs[0].data<float>()[static_cast<std::int64_t>(i) * D + d];
}

void sparse_ref(OpCall& c) {
  const Tensor& rows = c.inputs[2];
  const std::int64_t D = c.inputs[0].size(-1);
  const auto ids = ids_of(c.inputs[1], std::numeric_limits<std::int64_t>::max());
  c.outputs[0].zero_();
  for (std::int64_t r = 0; r < rows.numel(); ++r)
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == rows.data<std::int64_t>()[r])
        for (std::int64_t d = 0; d < D; ++d)
          c.outputs[0].data<float>()[r * D + d] += c.inputs[0].data<float>()[static_cast<std::int64_t>(i) * D + d];
}

Tensor case_ids(std::int64_t n, std::int64_t V, std::uint64_t seed, bool i32) {
  Rng r(seed);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(V)));
  if (!i32) return Tensor::from_vector_i64(v, {n});
  return Tensor::from_vector_i32(std::vector<std::int32_t>(v.begin(), v.end()), {n});
}

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  OpCall c;
  c.inputs = {case_ids(40, 13, seed, false), case_tensor({13, 24}, seed + 1)};
  c.outputs = {Tensor::empty({40, 24})};
  OpCall d = c;
  d.inputs[0] = case_ids(40, 13, seed + 2, true);
  d.outputs = {Tensor::empty({40, 24})};
  return {c, d};
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  OpCall c;
  c.inputs = {case_tensor({50, 20}, seed), case_ids(50, 9, seed + 1, false)};
  c.outputs = {case_tensor({9, 20}, seed + 2)};
  return {c};
}

std::vector<OpCall> sparse_cases(std::uint64_t seed) {
  Tensor ids = case_ids(50, 1000, seed + 1, false);
  std::vector<std::int64_t> u(ids.data<std::int64_t>(), ids.data<std::int64_t>() + 50);
  std::sort(u.begin(), u.end());
  u.erase(std::unique(u.begin(), u.end()), u.end());
  OpCall c;
  c.inputs = {case_tensor({50, 12}, seed), ids, Tensor::from_vector_i64(u, {static_cast<std::int64_t>(u.size())})};
  c.outputs = {Tensor::empty({static_cast<std::int64_t>(u.size()), 12})};
  return {c};
}

const bool registered =
    register_op(OpDef{"embedding_forward", "inputs {ids i32/i64 [N], table [V, D]}, outputs {out [N, D]}",
                      fwd_cases, 0, 0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"embedding_backward", "inputs {dy [N, D], ids [N]}, outputs {dtable [V, D] +=}",
                      bwd_cases, 1e-5, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}}) &&
    register_op(OpDef{"embedding_backward_sparse",
                      "inputs {dy [N, D], ids [N], rows i64 [n] sorted unique}, outputs {grad [n, D]}",
                      sparse_cases, 1e-5, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, sparse_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, sparse_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu

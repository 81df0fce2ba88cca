// concat / split / permute: materialising copies for any dtype.
//
// concat and split view every tensor as [outer, size(dim) * inner] and copy contiguous runs
// (memcpy) per outer index, in parallel over outer. permute walks the output in rows of its
// last dim, computing each row's source offset from the permuted strides, and copies the row
// with the source's stride for that dim. cpu.ref uses the core strided copy (Tensor::copy_ /
// contiguous()), an independent code path.

#include <cstring>
#include <numeric>

#include "nn/cpu/cpu_common.hpp"
#include "nn/dtype_checks.hpp"

namespace benchhost::nn::cpu {
namespace {

std::int64_t norm_dim(std::int64_t d, std::int64_t n) { return d < 0 ? d + n : d; }

// Byte copies: any dtype (f16/bf16 included, natively), but one dtype for every tensor.
std::string accepts_contig(const OpCall& c) {
  for (const Tensor& t : c.inputs)
    if (!t.is_contiguous() || !t.device().is_cpu()) return "needs contiguous cpu tensors";
  return mixed_dtype_refusal(c);
}

// pieces: the small tensors; big: the concatenated one. to_big: copy pieces -> big.
void concat_copy(std::vector<Tensor>& pieces, Tensor& big, std::int64_t dim, bool to_big) {
  const std::int64_t outer = std::accumulate(big.shape().begin(), big.shape().begin() + dim,
                                             std::int64_t{1}, std::multiplies<>());
  const std::size_t es = big.element_size();
  const std::int64_t big_row = big.numel() / std::max<std::int64_t>(outer, 1);
  std::vector<std::int64_t> offs, rows;
  std::int64_t off = 0;
  for (const Tensor& p : pieces) {
    offs.push_back(off);
    rows.push_back(p.numel() / std::max<std::int64_t>(outer, 1));
    off += rows.back();
  }
  BH_CHECK_AS(InvalidArgument, off == big_row, "concat/split: piece sizes do not add up to {}", shape_str(big.shape()));
  auto* bp = static_cast<char*>(big.raw_data());
  parallel_range(outer, row_grain(big_row, 65536), [&](std::int64_t o0, std::int64_t o1) {
    for (std::int64_t o = o0; o < o1; ++o)
      for (std::size_t k = 0; k < pieces.size(); ++k) {
        auto* pp = static_cast<char*>(pieces[k].raw_data()) + o * rows[k] * es;
        char* bb = bp + (o * big_row + offs[k]) * es;
        if (to_big) std::memcpy(bb, pp, rows[k] * es);
        else std::memcpy(pp, bb, rows[k] * es);
      }
  });
}

void concat_tbb(OpCall& c) {
  std::int64_t dim = norm_dim(c.attrs.get_int("dim", 0), c.outputs[0].dim());
  concat_copy(c.inputs, c.outputs[0], dim, true);
}
void split_tbb(OpCall& c) {
  std::int64_t dim = norm_dim(c.attrs.get_int("dim", 0), c.inputs[0].dim());
  concat_copy(c.outputs, c.inputs[0], dim, false);
}
void concat_ref(OpCall& c) {
  std::int64_t dim = norm_dim(c.attrs.get_int("dim", 0), c.outputs[0].dim());
  std::int64_t at = 0;
  for (const Tensor& t : c.inputs) {
    Tensor dst = c.outputs[0].slice(dim, at, at + t.size(dim));
    dst.copy_(t);
    at += t.size(dim);
  }
}
void split_ref(OpCall& c) {
  std::int64_t dim = norm_dim(c.attrs.get_int("dim", 0), c.inputs[0].dim());
  std::int64_t at = 0;
  for (Tensor& t : c.outputs) {
    t.copy_(c.inputs[0].slice(dim, at, at + t.size(dim)));
    at += t.size(dim);
  }
}

void permute_tbb(OpCall& c) {
  const Tensor src = c.inputs[0].permute(c.attrs.get_ints("order"));
  Tensor& dst = c.outputs[0];
  const std::int64_t nd = src.dim();
  if (nd == 0) {
    dst.copy_(src);
    return;
  }
  const std::int64_t inner = src.size(nd - 1), rows = src.numel() / std::max<std::int64_t>(inner, 1);
  const std::int64_t s_inner = src.strides()[nd - 1];
  const std::size_t es = src.element_size();
  const auto* sp = static_cast<const char*>(src.raw_data());
  auto* dp = static_cast<char*>(dst.raw_data());
  parallel_range(rows, row_grain(inner, 32768), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      std::int64_t rem = r, off = 0;
      for (std::int64_t d = nd - 2; d >= 0; --d) {
        off += (rem % src.size(d)) * src.strides()[d];
        rem /= src.size(d);
      }
      char* out = dp + r * inner * es;
      if (s_inner == 1) {
        std::memcpy(out, sp + off * es, inner * es);
      } else if (es == 4) {
        const auto* in = reinterpret_cast<const std::uint32_t*>(sp) + off;
        auto* o = reinterpret_cast<std::uint32_t*>(out);
        for (std::int64_t j = 0; j < inner; ++j) o[j] = in[j * s_inner];
      } else {
        for (std::int64_t j = 0; j < inner; ++j) std::memcpy(out + j * es, sp + (off + j * s_inner) * es, es);
      }
    }
  });
}

void permute_ref(OpCall& c) { c.outputs[0].copy_(c.inputs[0].permute(c.attrs.get_ints("order"))); }

std::vector<OpCall> concat_cases(std::uint64_t seed) {
  OpCall a;
  a.inputs = {case_tensor({2, 3, 4}, seed), case_tensor({2, 5, 4}, seed + 1), case_tensor({2, 1, 4}, seed + 2)};
  a.outputs = {Tensor::empty({2, 9, 4})};
  a.attrs.set("dim", 1);
  OpCall b;
  b.inputs = {Tensor::from_vector_i64({1, 2, 3, 4}, {2, 2}), Tensor::from_vector_i64({5, 6}, {2, 1})};
  b.outputs = {Tensor::empty({2, 3}, DType::i64)};
  b.attrs.set("dim", -1);
  return {a, b};
}
std::vector<OpCall> split_cases(std::uint64_t seed) {
  OpCall a;
  a.inputs = {case_tensor({3, 10, 2}, seed)};
  a.outputs = {Tensor::empty({3, 4, 2}), Tensor::empty({3, 6, 2})};
  a.attrs.set("dim", 1);
  return {a};
}
std::vector<OpCall> permute_cases(std::uint64_t seed) {
  OpCall a;
  a.inputs = {case_tensor({2, 5, 3, 4}, seed)};
  a.outputs = {Tensor::empty({2, 3, 5, 4})};
  a.attrs.set_ints("order", {0, 2, 1, 3});
  OpCall b;
  b.inputs = {case_tensor({2, 5, 3, 4}, seed + 1)};
  b.outputs = {Tensor::empty({4, 2, 3, 5})};
  b.attrs.set_ints("order", {3, 0, 2, 1});
  return {a, b};
}

const bool registered =
    register_op(OpDef{"concat", "inputs {xs...}, outputs {y}; attr dim", concat_cases, 0, 0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts_contig, concat_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, concat_ref, true}}}) &&
    register_op(OpDef{"split", "inputs {x}, outputs {pieces...}; attr dim", split_cases, 0, 0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts_contig, split_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, split_ref, true}}}) &&
    register_op(OpDef{"permute", "inputs {x}, outputs {y = x.permute(order) contiguous}; ints order",
                      permute_cases, 0, 0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, mixed_dtype_refusal, permute_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, permute_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu

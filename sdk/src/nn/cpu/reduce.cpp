// sum / mean over a set of dims; amax over one dim (values and arg-max) and its backward.
//
// sum/mean, cpu.tbb: the kept dims are moved to the front (one materialising permute when the
// reduced dims are not already innermost), then each output element is the fp64 sum of one
// contiguous row. cpu.ref: one pass over the input, each element added (fp64) to its output slot
// by index arithmetic. amax: [outer, n, inner] view; ties pick the first index; NaN propagates.

#include <algorithm>
#include <numeric>

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

std::vector<bool> reduced_mask(const Tensor& x, const std::vector<std::int64_t>& dims) {
  std::vector<bool> red(static_cast<std::size_t>(x.dim()), dims.empty());
  for (auto d : dims) {
    const std::int64_t dd = d < 0 ? d + x.dim() : d;
    BH_CHECK_AS(InvalidArgument, dd >= 0 && dd < x.dim(), "reduction dim {} out of range for {}", d, shape_str(x.shape()));
    red[static_cast<std::size_t>(dd)] = true;
  }
  return red;
}

void sum_tbb(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const auto red = reduced_mask(x, c.attrs.get_ints("dims"));
  std::vector<std::int64_t> order;
  std::int64_t count = 1;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (!red[d]) order.push_back(d);
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (red[d]) {
      order.push_back(d);
      count *= x.size(d);
    }
  const Tensor xp = x.permute(order).contiguous();
  const double div = c.attrs.get_bool("mean") ? static_cast<double>(count) : 1.0;
  const float* p = xp.data<float>();
  float* out = c.outputs[0].data<float>();
  const std::int64_t rows = c.outputs[0].numel();
  parallel_range(rows, row_grain(count), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      double s = 0;
      for (std::int64_t j = 0; j < count; ++j) s += p[r * count + j];
      out[r] = static_cast<float>(s / div);
    }
  });
}

void sum_ref(OpCall& c) {
  const Tensor& x = c.inputs[0];
  const auto red = reduced_mask(x, c.attrs.get_ints("dims"));
  std::vector<double> acc(static_cast<std::size_t>(c.outputs[0].numel()), 0.0);
  std::int64_t count = 1;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (red[d]) count *= x.size(d);
  const Tensor xc = x.contiguous();
  for (std::int64_t i = 0; i < xc.numel(); ++i) {
    std::int64_t rem = i, out_idx = 0, mul = 1;
    for (std::int64_t d = x.dim() - 1; d >= 0; --d) {
      const std::int64_t id = rem % x.size(d);
      rem /= x.size(d);
      if (!red[d]) {
        out_idx += id * mul;
        mul *= x.size(d);
      }
    }
    acc[static_cast<std::size_t>(out_idx)] += xc.data<float>()[i];
  }
  const double div = c.attrs.get_bool("mean") ? static_cast<double>(count) : 1.0;
  for (std::size_t k = 0; k < acc.size(); ++k) c.outputs[0].data<float>()[k] = static_cast<float>(acc[k] / div);
}

void amax_impl(OpCall& c, bool parallel) {
  const Tensor& x = c.inputs[0];
  const std::int64_t dim = c.attrs.get_int("dim", -1) < 0 ? c.attrs.get_int("dim", -1) + x.dim() : c.attrs.get_int("dim", -1);
  BH_CHECK_AS(InvalidArgument, dim >= 0 && dim < x.dim(), "amax dim out of range for {}", shape_str(x.shape()));
  const std::int64_t n = x.size(dim);
  BH_CHECK_AS(InvalidArgument, n > 0, "amax over an empty dim of {}", shape_str(x.shape()));
  const std::int64_t inner = std::accumulate(x.shape().begin() + dim + 1, x.shape().end(), std::int64_t{1}, std::multiplies<>());
  const std::int64_t outer = x.numel() / (n * inner);
  const float* p = x.data<float>();
  float* val = c.outputs[0].data<float>();
  std::int64_t* idx = c.outputs[1].data<std::int64_t>();
  auto body = [&](std::int64_t o0, std::int64_t o1) {
    for (std::int64_t o = o0; o < o1; ++o)
      for (std::int64_t in = 0; in < inner; ++in) {
        float best = p[o * n * inner + in];
        std::int64_t bi = 0;
        for (std::int64_t k = 1; k < n && !std::isnan(best); ++k) {
          const float v = p[(o * n + k) * inner + in];
          if (v > best || std::isnan(v)) {
            best = v;
            bi = k;
          }
        }
        val[o * inner + in] = best;
        idx[o * inner + in] = bi;
      }
  };
  if (parallel) parallel_range(outer, row_grain(n * inner), body);
  else body(0, outer);
}
void amax_tbb(OpCall& c) { amax_impl(c, true); }
void amax_ref(OpCall& c) { amax_impl(c, false); }

void amax_bwd(OpCall& c, bool parallel) {
  const Tensor& dy = c.inputs[0];
  const Tensor& ind = c.inputs[1];
  Tensor& dx = c.outputs[0];
  const std::int64_t dim = c.attrs.get_int("dim", -1) < 0 ? c.attrs.get_int("dim", -1) + dx.dim() : c.attrs.get_int("dim", -1);
  const std::int64_t n = dx.size(dim);
  const std::int64_t inner = std::accumulate(dx.shape().begin() + dim + 1, dx.shape().end(), std::int64_t{1}, std::multiplies<>());
  const std::int64_t outer = dx.numel() / std::max<std::int64_t>(n * inner, 1);
  float* d = dx.data<float>();
  const float* g = dy.data<float>();
  const std::int64_t* ip = ind.data<std::int64_t>();
  auto body = [&](std::int64_t o0, std::int64_t o1) {
    for (std::int64_t o = o0; o < o1; ++o) {
      std::fill_n(d + o * n * inner, n * inner, 0.0f);
      for (std::int64_t in = 0; in < inner; ++in) {
        const std::int64_t k = ip[o * inner + in];
        BH_CHECK_AS(InvalidArgument, k >= 0 && k < n, "amax_backward: index {} out of range [0, {})", k, n);
        d[(o * n + k) * inner + in] = g[o * inner + in];
      }
    }
  };
  if (parallel) parallel_range(outer, row_grain(n * inner), body);
  else body(0, outer);
}
void amax_bwd_tbb(OpCall& c) { amax_bwd(c, true); }
void amax_bwd_ref(OpCall& c) { amax_bwd(c, false); }

std::vector<OpCall> sum_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  auto add = [&](std::vector<std::int64_t> dims, Shape out_shape, bool mean) {
    OpCall c;
    c.inputs = {case_tensor({3, 4, 5, 6}, seed + out.size())};
    c.outputs = {Tensor::empty(out_shape)};
    c.attrs.set_ints("dims", dims).set("mean", mean);
    out.push_back(std::move(c));
  };
  add({1}, {3, 5, 6}, false);
  add({0, 2}, {4, 6}, true);
  add({-1}, {3, 4, 5}, true);
  add({}, {}, false);
  return out;
}

std::vector<OpCall> amax_cases(std::uint64_t seed) {
  OpCall c;
  c.inputs = {case_tensor({3, 7, 5}, seed)};
  c.outputs = {Tensor::empty({3, 5}), Tensor::empty({3, 5}, DType::i64)};
  c.attrs.set("dim", 1);
  return {c};
}

std::vector<OpCall> amax_bwd_cases(std::uint64_t seed) {
  OpCall c;
  Rng r(seed);
  std::vector<std::int64_t> idx(15);
  for (auto& v : idx) v = static_cast<std::int64_t>(r.below(7));
  c.inputs = {case_tensor({3, 5}, seed), Tensor::from_vector_i64(idx, {3, 5})};
  c.outputs = {Tensor::empty({3, 7, 5})};
  c.attrs.set("dim", 1);
  return {c};
}

std::string accept_x(const OpCall& c) {
  if (c.inputs[0].dtype() != DType::f32 || !c.inputs[0].is_contiguous()) return "needs contiguous f32";
  return {};
}

const bool registered =
    register_op(OpDef{"sum", "inputs {x}, outputs {y}; ints dims (empty: all), attr mean", sum_cases, 1e-5, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_x, sum_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, sum_ref, true}}}) &&
    register_op(OpDef{"amax", "inputs {x}, outputs {values, indices i64}; attr dim", amax_cases, 0, 0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_x, amax_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, amax_ref, true}}}) &&
    register_op(OpDef{"amax_backward", "inputs {dy, indices}, outputs {dx}; attr dim", amax_bwd_cases, 0, 0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, nullptr, amax_bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, amax_bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu

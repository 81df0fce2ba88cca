#pragma once
/// @file tests/common/gradcheck.hpp  Finite-difference gradient checks for explicit backward passes.
///
/// Usage (any test area; tests/ is on the include path):
///   #include "common/gradcheck.hpp"
///   using namespace benchhost::testing;
///   auto fwd = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ my_forward(in[0], in[1]) }; };
///   auto bwd = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
///     ... run forward again if the backward needs saved state, then
///     return std::vector<Tensor>{ dx, dw };   // undefined Tensor{} = not checked
///   };
///   EXPECT_GRADCHECK(fwd, bwd, {x, w});
///
/// Method: the scalar L = sum_k sum_i out_k[i] * r_k[i] with fixed random weights r (which are
/// also the upstream gradients passed to `backward`); each checked input element x_j is
/// perturbed by +-eps and dL/dx_j = (L(x+eps) - L(x-eps)) / (2 eps), accumulated in double.
/// Inputs are fp32; the forward runs in fp32, so tolerances are fp32-sized (defaults below).
/// For a large input only `max_checks_per_input` elements (spread evenly, seeded) are checked.
/// Inputs that are not f32 (ids, masks) are never perturbed.
/// Forward must be deterministic (dropout: fixed seed and step).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::testing {

using ForwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs,
                                                     const std::vector<Tensor>& douts)>;

struct GradcheckOptions {
  double eps = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  std::int64_t max_checks_per_input = 48;
  std::uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  ///< the first failures, with input index, element and both values
  double max_abs_err = 0;
  std::int64_t checked = 0;
};

/// A CPU f32 tensor with values uniform in [lo, hi) from Rng(seed).
inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, float lo = -1.0f,
                            float hi = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Rng rng(seed, 7);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(lo, hi);
  return t;
}

/// max |a - b| over elements (any numeric dtypes, CPU or device; same numel required).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto va = a.to_float_vector(), vb = b.to_float_vector();
  if (va.size() != vb.size()) return INFINITY;
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    double d = std::fabs(static_cast<double>(va[i]) - vb[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

/// ||a - ref|| / ||ref|| over several tensors' values taken together (e.g. every weight of a model
/// after some training steps on two devices); INFINITY when the sets do not line up or hold NaN.
inline double relative_l2(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (std::size_t t = 0; t < ref.size(); ++t) {
    if (a[t].size() != ref[t].size()) return INFINITY;
    for (std::size_t i = 0; i < ref[t].size(); ++i) {
      const double d = static_cast<double>(a[t][i]) - ref[t][i];
      num += d * d;
      den += static_cast<double>(ref[t][i]) * ref[t][i];
    }
  }
  const double r = std::sqrt(num / den);
  return std::isnan(r) ? INFINITY : r;
}

/// Elementwise |a - ref| <= atol + rtol |ref|; message lists the first mismatches.
inline ::testing::AssertionResult tensors_close(const Tensor& a, const Tensor& ref, double atol,
                                                double rtol) {
  if (a.shape() != ref.shape())
    return ::testing::AssertionFailure()
           << "shape " << shape_str(a.shape()) << " vs reference " << shape_str(ref.shape());
  auto va = a.to_float_vector(), vr = ref.to_float_vector();
  std::string msg;
  int bad = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (va[i] == vr[i]) continue;  // also equal infinities
    double d = std::fabs(static_cast<double>(va[i]) - vr[i]);
    if (!(d <= atol + rtol * std::fabs(vr[i]))) {
      if (bad < 5) msg += fmt::format(" [{}] got {} want {};", i, va[i], vr[i]);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << va.size() << " elements differ:" << msg;
}

namespace detail {
inline double weighted_sum(const std::vector<Tensor>& outs, const std::vector<Tensor>& weights) {
  double s = 0;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    auto o = outs[k].to_float_vector();
    const float* w = weights[k].data<float>();
    for (std::size_t i = 0; i < o.size(); ++i) s += static_cast<double>(o[i]) * w[i];
  }
  return s;
}
}  // namespace detail

/// Compare backward() with central finite differences of forward(). `inputs` are CPU tensors;
/// they are cloned, never modified.
inline GradcheckResult gradcheck(const ForwardFn& forward, const BackwardFn& backward,
                                 const std::vector<Tensor>& inputs,
                                 const GradcheckOptions& opt = {}) {
  GradcheckResult res;
  std::vector<Tensor> in;
  for (const auto& t : inputs) in.push_back(t.defined() ? t.contiguous().clone() : t);

  auto outs = forward(in);
  std::vector<Tensor> weights;
  for (std::size_t k = 0; k < outs.size(); ++k)
    weights.push_back(random_tensor(outs[k].shape(), opt.seed + 101 * (k + 1)));
  auto grads = backward(in, weights);
  if (grads.size() > in.size()) {
    res.ok = false;
    res.message = fmt::format("backward returned {} grads for {} inputs", grads.size(), in.size());
    return res;
  }
  int failures = 0;
  for (std::size_t j = 0; j < grads.size(); ++j) {
    if (!grads[j].defined() || !in[j].defined() || in[j].dtype() != DType::f32) continue;
    if (grads[j].shape() != in[j].shape()) {
      res.ok = false;
      res.message += fmt::format("grad {} has shape {}, input has {}; ", j,
                                 shape_str(grads[j].shape()), shape_str(in[j].shape()));
      continue;
    }
    auto analytic = grads[j].to_float_vector();
    float* x = in[j].data<float>();
    const std::int64_t n = in[j].numel();
    const std::int64_t checks = std::min(n, opt.max_checks_per_input);
    Rng pick(opt.seed, 31 + j);
    const std::int64_t offset = n > checks ? static_cast<std::int64_t>(pick.below(n / checks)) : 0;
    for (std::int64_t c = 0; c < checks; ++c) {
      const std::int64_t i = (n > checks) ? (c * (n / checks) + offset) % n : c;
      const float saved = x[i];
      x[i] = static_cast<float>(saved + opt.eps);
      const double lp = detail::weighted_sum(forward(in), weights);
      x[i] = static_cast<float>(saved - opt.eps);
      const double lm = detail::weighted_sum(forward(in), weights);
      x[i] = saved;
      const double numeric = (lp - lm) / (2 * opt.eps);
      const double a = analytic[i];
      const double err = std::fabs(a - numeric);
      res.max_abs_err = std::max(res.max_abs_err, err);
      ++res.checked;
      if (!(err <= opt.atol + opt.rtol * std::max(std::fabs(a), std::fabs(numeric)))) {
        res.ok = false;
        if (++failures <= 6)
          res.message += fmt::format("input {} element {}: analytic {:.6g} numeric {:.6g}; ", j, i,
                                     a, numeric);
      }
    }
  }
  if (!res.ok) res.message = fmt::format("{} mismatches: {}", failures, res.message);
  return res;
}

}  // namespace benchhost::testing

/// EXPECT_GRADCHECK(forward, backward, inputs[, options])
#define EXPECT_GRADCHECK(...)                                                        \
  do {                                                                               \
    auto bh_gc_result_ = ::benchhost::testing::gradcheck(__VA_ARGS__);               \
    EXPECT_TRUE(bh_gc_result_.ok) << bh_gc_result_.message;                          \
    EXPECT_GT(bh_gc_result_.checked, 0) << "gradcheck checked no element";           \
  } while (0)

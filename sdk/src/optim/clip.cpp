#include "benchhost/optim/clip.hpp"

#include <cmath>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "nn/multi_tensor.hpp"

namespace benchhost::optim {

namespace {

// Per-parameter sums of squares of the meaningful gradient elements, one multi-tensor op per
// device (one small device-to-host copy per CUDA device).
std::vector<double> grad_sum_squares(const std::vector<nn::Parameter*>& params) {
  for (auto* p : params) nn::detail::check_f32_parameter(*p, "global_grad_norm", true, true);
  std::vector<double> sums(params.size(), 0.0);
  for (const auto& g : nn::detail::group_by_device(params)) {
    nn::OpCall c;
    for (std::size_t i : g.index) c.inputs.push_back(params[i]->grad);
    for (std::size_t i : g.index) c.inputs.push_back(nn::detail::rows_on(*params[i], g.device));
    c.outputs.push_back(Tensor::empty({static_cast<std::int64_t>(g.index.size())}, DType::f64, g.device));  // op writes all
    nn::dispatch(nn::detail::kSumSqOp, c);
    const Tensor host = c.outputs[0].device().is_cpu() ? c.outputs[0] : c.outputs[0].to(Device::cpu());
    for (std::size_t k = 0; k < g.index.size(); ++k) sums[g.index[k]] = host.data<double>()[k];
  }
  return sums;
}

}  // namespace

float global_grad_norm(const std::vector<nn::Parameter*>& params) {
  double total = 0.0;
  for (double s : grad_sum_squares(params)) total += s;  // parameter order: deterministic
  return static_cast<float>(std::sqrt(total));
}

float clip_grad_norm(const std::vector<nn::Parameter*>& params, float max_norm) {
  BH_CHECK_AS(InvalidArgument, max_norm > 0.0f && std::isfinite(max_norm),
              "clip_grad_norm: max_norm must be finite and > 0, got {}", max_norm);
  const float norm = global_grad_norm(params);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const float coef = max_norm / (norm + 1e-6f);
  for (const auto& g : nn::detail::group_by_device(params)) {
    nn::OpCall c;
    c.inputs.push_back(Tensor::full({1}, coef, DType::f32, g.device));
    for (std::size_t i : g.index) c.inputs.push_back(nn::detail::rows_on(*params[i], g.device));
    for (std::size_t i : g.index) c.outputs.push_back(params[i]->grad);
    c.outputs.push_back(Tensor::empty({1}, DType::f32, g.device));  // finiteness: not needed here
    nn::dispatch(nn::detail::kScaleCheckOp, c);
  }
  return norm;
}

}  // namespace benchhost::optim

#include "benchhost/optim/clip.hpp"

#include <cmath>

#include "benchhost/error.hpp"
#include "optim/parallel.hpp"

namespace benchhost::optim {

float global_grad_norm(const std::vector<nn::Parameter*>& params) {
  double total = 0.0;
  for (auto* p : params) {
    detail::check_cpu_f32_parameter(*p, "global_grad_norm", true, true);
    const float* g = p->grad.data<float>();
    total += detail::grad_span_sum<1>(*p, [&](std::int64_t b, std::int64_t e) {
      return std::array<double, 1>{detail::sum_squares(g + b, e - b)};
    })[0];
  }
  return static_cast<float>(std::sqrt(total));
}

float clip_grad_norm(const std::vector<nn::Parameter*>& params, float max_norm) {
  BH_CHECK_AS(InvalidArgument, max_norm > 0.0f && std::isfinite(max_norm),
              "clip_grad_norm: max_norm must be finite and > 0, got {}", max_norm);
  const float norm = global_grad_norm(params);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const float coef = max_norm / (norm + 1e-6f);
  for (auto* p : params) {
    float* g = p->grad.data<float>();
    detail::for_each_grad_span(*p, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k) g[k] *= coef;
    });
  }
  return norm;
}

}  // namespace benchhost::optim

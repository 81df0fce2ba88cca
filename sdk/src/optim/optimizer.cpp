// CPU fp32 optimizers. Each update is a plain element loop over [begin, end) spans that the
// compiler vectorises (no branches inside the loop bodies: decisions are hoisted per tensor);
// spans come from for_each_grad_span (whole tensor in chunks, or the sparse rows).
#include "benchhost/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include "benchhost/error.hpp"
#include "benchhost/optim/schedule.hpp"
#include "optim/parallel.hpp"

namespace benchhost::optim {

namespace detail {

void check_cpu_f32_parameter(const nn::Parameter& p, const char* what, bool need_grad,
                             bool allow_sparse_rows) {
  const std::string& n = p.name;
  BH_CHECK_AS(InvalidArgument, p.value.defined(), "{}: parameter '{}' has no value", what, n);
  if (!p.value.device().is_cpu())
    BH_THROW(Unsupported, "{}: parameter '{}' is on {}; only CPU updates are built in this "
             "version (the fused multi-tensor CUDA updates are not implemented yet)",
             what, n, p.value.device().str());
  BH_CHECK_AS(InvalidArgument, p.value.dtype() == DType::f32,
              "{}: parameter '{}' is {}, expected f32 master weights (precision.hpp)", what, n,
              dtype_name(p.value.dtype()));
  BH_CHECK_AS(InvalidArgument, p.value.is_contiguous(), "{}: parameter '{}' is not contiguous",
              what, n);
  if (!need_grad) return;
  BH_CHECK_AS(InvalidArgument, p.grad.defined(), "{}: parameter '{}' has no gradient", what, n);
  BH_CHECK_AS(InvalidArgument, p.grad.shape() == p.value.shape() && p.grad.dtype() == DType::f32 &&
              p.grad.device().is_cpu() && p.grad.is_contiguous(),
              "{}: gradient of '{}' is {}, expected a contiguous f32 CPU tensor of shape {}", what,
              n, p.grad.describe(), shape_str(p.value.shape()));
  if (!p.sparse_rows.defined()) return;
  BH_CHECK_AS(InvalidArgument, allow_sparse_rows,
              "{}: parameter '{}' has a sparse-rows gradient, which {} does not support (its "
              "update needs the whole tensor); use adagrad or sgd for embedding tables", what, n,
              what);
  const Tensor& r = p.sparse_rows;
  BH_CHECK_AS(InvalidArgument, r.dtype() == DType::i64 && r.dim() == 1 && r.device().is_cpu() &&
              r.is_contiguous() && p.value.dim() >= 1,
              "{}: sparse_rows of '{}' is {}, expected a contiguous 1-d i64 CPU tensor (and a "
              "parameter with at least one dimension)", what, n, r.describe());
  const std::int64_t rows = p.value.size(0);
  const std::int64_t* idx = r.data<std::int64_t>();
  std::vector<std::int64_t> sorted(idx, idx + r.numel());
  tbb::parallel_sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    BH_CHECK_AS(InvalidArgument, sorted[i] >= 0 && sorted[i] < rows,
                "{}: sparse_rows of '{}' holds row {}, outside [0, {})", what, n, sorted[i], rows);
    BH_CHECK_AS(InvalidArgument, i == 0 || sorted[i] != sorted[i - 1],
                "{}: sparse_rows of '{}' holds row {} twice; rows must be unique", what, n,
                sorted[i]);
  }
}

}  // namespace detail

using detail::for_each_grad_span;
using detail::grad_span_sum;

// ---- Optimizer ----------------------------------------------------------------------------------

Optimizer::Optimizer(std::vector<nn::Parameter*> params) : params_(std::move(params)) {
  std::unordered_set<const nn::Parameter*> seen;
  for (auto* p : params_) {
    BH_CHECK_AS(InvalidArgument, p != nullptr, "optimizer: null parameter pointer");
    BH_CHECK_AS(InvalidArgument, seen.insert(p).second,
                "optimizer: parameter '{}' is listed twice", p->name);
    BH_CHECK_AS(InvalidArgument, p->value.defined(), "optimizer: parameter '{}' has no value",
                p->name);
  }
}

std::vector<Tensor>& Optimizer::add_state_slot(const std::string& slot, float initial_value) {
  auto s = std::make_unique<Slot>();
  s->name = slot;
  s->tensors.reserve(params_.size());
  for (auto* p : params_)
    s->tensors.push_back(Tensor::full(p->value.shape(), initial_value, DType::f32, p->value.device()));
  slots_.push_back(std::move(s));
  return slots_.back()->tensors;
}

void Optimizer::check_parameter(const nn::Parameter& p, bool allow_sparse_rows) const {
  detail::check_cpu_f32_parameter(p, name(), /*need_grad=*/true, allow_sparse_rows);
}

void Optimizer::step(float lr) {
  BH_CHECK_AS(InvalidArgument, std::isfinite(lr) && lr >= 0.0f,
              "{}: learning rate must be finite and >= 0, got {}", name(), lr);
  ++step_count_;
  last_lr_ = lr;
  try {
    update(lr);
  } catch (...) {
    --step_count_;  // a refused step (bad parameter) does not count
    throw;
  }
}

void Optimizer::step(const Schedule& schedule) { step(schedule.lr(step_count_)); }

void Optimizer::zero_grad() {
  for (auto* p : params_) {
    if (p->grad.defined()) p->grad.zero_();
    p->sparse_rows = Tensor();
  }
}

std::vector<StateTensor> Optimizer::state() {
  std::vector<StateTensor> out;
  for (auto& s : slots_)
    for (std::size_t i = 0; i < params_.size(); ++i)
      out.push_back({s->name + "." + params_[i]->name, s->tensors[i]});
  out.push_back({"step", Tensor::from_vector_i64({step_count_}, {1})});
  return out;
}

void Optimizer::load_state(const std::vector<StateTensor>& saved) {
  auto mine = state();
  BH_CHECK_AS(InvalidArgument, saved.size() == mine.size(),
              "{}: saved optimizer state has {} tensors, this optimizer has {} ({} parameters)",
              name(), saved.size(), mine.size(), params_.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    BH_CHECK_AS(InvalidArgument, saved[i].name == mine[i].name,
                "{}: saved optimizer state tensor {} is '{}', expected '{}'", name(), i,
                saved[i].name, mine[i].name);
    BH_CHECK_AS(InvalidArgument, saved[i].tensor.shape() == mine[i].tensor.shape(),
                "{}: saved optimizer state '{}' has shape {}, expected {}", name(), mine[i].name,
                shape_str(saved[i].tensor.shape()), shape_str(mine[i].tensor.shape()));
    BH_CHECK_AS(InvalidArgument, saved[i].tensor.dtype() == mine[i].tensor.dtype(),
                "{}: saved optimizer state '{}' is {}, expected {}", name(), mine[i].name,
                dtype_name(saved[i].tensor.dtype()), dtype_name(mine[i].tensor.dtype()));
  }
  for (std::size_t i = 0; i + 1 < mine.size(); ++i) mine[i].tensor.copy_(saved[i].tensor);
  step_count_ = static_cast<std::int64_t>(saved.back().tensor.item({0}));
}

namespace {

// Parallel over parameters; each parameter's spans are parallel again (oneTBB nests).
template <class F>
void for_each_param(std::size_t n, F&& f) {
  tbb::parallel_for(std::size_t{0}, n, [&](std::size_t i) { f(i); });
}

float wd_for(const nn::Parameter& p, float wd) { return p.weight_decay ? wd : 0.0f; }

void refuse_sparse_decay(const nn::Parameter& p, float wd, const char* opt) {
  BH_CHECK_AS(InvalidArgument, !(p.sparse_rows.defined() && p.weight_decay && wd != 0.0f),
              "{}: parameter '{}' has a sparse-rows gradient and weight decay {}; decay would "
              "have to touch every row. Register it with weight_decay=false or use wd 0", opt,
              p.name, wd);
}

}  // namespace

// ---- SGD ----------------------------------------------------------------------------------------

Sgd::Sgd(std::vector<nn::Parameter*> params, SgdOptions options)
    : Optimizer(std::move(params)), opt_(options) {
  BH_CHECK_AS(InvalidArgument, opt_.momentum >= 0.0f && opt_.weight_decay >= 0.0f,
              "sgd: momentum ({}) and weight_decay ({}) must be >= 0", opt_.momentum,
              opt_.weight_decay);
  BH_CHECK_AS(InvalidArgument, !opt_.nesterov || opt_.momentum > 0.0f,
              "sgd: nesterov needs momentum > 0");
  if (opt_.momentum > 0.0f) momentum_ = &add_state_slot("momentum");
}

std::string Sgd::describe() const {
  return fmt::format("sgd(momentum={}, nesterov={}, weight_decay={})", opt_.momentum,
                     opt_.nesterov, opt_.weight_decay);
}

void Sgd::update(float lr) {
  for (auto* p : params_) {
    check_parameter(*p, true);
    refuse_sparse_decay(*p, opt_.weight_decay, name());
  }
  const float mom = opt_.momentum;
  const bool nesterov = opt_.nesterov;
  for_each_param(params_.size(), [&](std::size_t i) {
    nn::Parameter& p = *params_[i];
    float* w = p.value.data<float>();
    const float* g = p.grad.data<float>();
    const float wd = wd_for(p, opt_.weight_decay);
    float* buf = momentum_ ? (*momentum_)[i].data<float>() : nullptr;
    for_each_grad_span(p, [&](std::int64_t b, std::int64_t e) {
      if (!buf) {
        for (std::int64_t k = b; k < e; ++k) w[k] -= lr * (g[k] + wd * w[k]);
      } else if (!nesterov) {
        for (std::int64_t k = b; k < e; ++k) {
          const float d = g[k] + wd * w[k];
          buf[k] = mom * buf[k] + d;
          w[k] -= lr * buf[k];
        }
      } else {
        for (std::int64_t k = b; k < e; ++k) {
          const float d = g[k] + wd * w[k];
          buf[k] = mom * buf[k] + d;
          w[k] -= lr * (d + mom * buf[k]);
        }
      }
    });
  });
}

// ---- LARS ---------------------------------------------------------------------------------------

Lars::Lars(std::vector<nn::Parameter*> params, LarsOptions options)
    : Optimizer(std::move(params)), opt_(options), trust_(params_.size(), 1.0f) {
  BH_CHECK_AS(InvalidArgument, opt_.momentum >= 0.0f && opt_.weight_decay >= 0.0f &&
              opt_.eta > 0.0f && opt_.epsilon >= 0.0f,
              "lars: need momentum >= 0 ({}), weight_decay >= 0 ({}), eta > 0 ({}), epsilon >= 0 "
              "({})", opt_.momentum, opt_.weight_decay, opt_.eta, opt_.epsilon);
  velocity_ = &add_state_slot("velocity");
}

std::string Lars::describe() const {
  return fmt::format("lars(momentum={}, weight_decay={}, eta={}, epsilon={})", opt_.momentum,
                     opt_.weight_decay, opt_.eta, opt_.epsilon);
}

void Lars::update(float lr) {
  for (auto* p : params_) check_parameter(*p, false);
  const float mom = opt_.momentum;
  for_each_param(params_.size(), [&](std::size_t i) {
    nn::Parameter& p = *params_[i];
    float* w = p.value.data<float>();
    const float* g = p.grad.data<float>();
    float* v = (*velocity_)[i].data<float>();
    float scaled_lr = lr, wd = 0.0f, ratio = 1.0f;
    if (p.weight_decay) {
      auto s = grad_span_sum<2>(p, [&](std::int64_t b, std::int64_t e) {
        return std::array<double, 2>{detail::sum_squares(w + b, e - b),
                                     detail::sum_squares(g + b, e - b)};
      });
      const double wn = std::sqrt(s[0]), gn = std::sqrt(s[1]);
      wd = opt_.weight_decay;
      if (wn > 0.0 && gn > 0.0)
        ratio = static_cast<float>(opt_.eta * wn / (gn + wd * wn + opt_.epsilon));
      scaled_lr = lr * ratio;
    }
    trust_[i] = ratio;
    for_each_grad_span(p, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k) {
        v[k] = mom * v[k] + scaled_lr * (g[k] + wd * w[k]);
        w[k] -= v[k];
      }
    });
  });
}

// ---- LAMB ---------------------------------------------------------------------------------------

Lamb::Lamb(std::vector<nn::Parameter*> params, LambOptions options)
    : Optimizer(std::move(params)), opt_(options), trust_(params_.size(), 1.0f) {
  BH_CHECK_AS(InvalidArgument, opt_.beta1 >= 0.0f && opt_.beta1 < 1.0f && opt_.beta2 >= 0.0f &&
              opt_.beta2 < 1.0f && opt_.epsilon > 0.0f && opt_.weight_decay >= 0.0f,
              "lamb: need beta1, beta2 in [0, 1) ({}, {}), epsilon > 0 ({}), weight_decay >= 0 "
              "({})", opt_.beta1, opt_.beta2, opt_.epsilon, opt_.weight_decay);
  m_ = &add_state_slot("exp_avg");
  v_ = &add_state_slot("exp_avg_sq");
}

std::string Lamb::describe() const {
  return fmt::format("lamb(beta1={}, beta2={}, epsilon={}, weight_decay={}, bias_correction={})",
                     opt_.beta1, opt_.beta2, opt_.epsilon, opt_.weight_decay,
                     opt_.bias_correction);
}

void Lamb::update(float lr) {
  for (auto* p : params_) check_parameter(*p, false);
  const double t = static_cast<double>(step_count());
  const float b1 = opt_.beta1, b2 = opt_.beta2, eps = opt_.epsilon;
  const float inv_bc1 = opt_.bias_correction ? static_cast<float>(1.0 / (1.0 - std::pow(b1, t))) : 1.0f;
  const float inv_bc2 = opt_.bias_correction ? static_cast<float>(1.0 / (1.0 - std::pow(b2, t))) : 1.0f;
  for_each_param(params_.size(), [&](std::size_t i) {
    nn::Parameter& p = *params_[i];
    float* w = p.value.data<float>();
    const float* g = p.grad.data<float>();
    float* m = (*m_)[i].data<float>();
    float* v = (*v_)[i].data<float>();
    const float wd = wd_for(p, opt_.weight_decay);
    // Pass 1: moments, and the norms of w and of the update u (recomputed in pass 2 rather
    // than stored: one less tensor-sized buffer, and the loop is memory-bound either way).
    auto s = grad_span_sum<2>(p, [&](std::int64_t b, std::int64_t e) {
      double ww = detail::sum_squares(w + b, e - b), uu = 0;
      float buf[detail::kBlock];  // Note [Vectorising optimizer loops]
      for (std::int64_t s0 = b; s0 < e; s0 += detail::kBlock) {
        const std::int64_t n = std::min(detail::kBlock, e - s0);
        float* W = w + s0; const float* G = g + s0; float* M = m + s0; float* V = v + s0;
        for (std::int64_t j = 0; j < n; ++j) {
          M[j] = b1 * M[j] + (1.0f - b1) * G[j];
          V[j] = b2 * V[j] + (1.0f - b2) * G[j] * G[j];
          buf[j] = V[j] * inv_bc2;
        }
        detail::sqrt_inplace(buf, n);
        for (std::int64_t j = 0; j < n; ++j) buf[j] = (M[j] * inv_bc1) / (buf[j] + eps) + wd * W[j];
        uu += detail::sum_squares(buf, n);
      }
      return std::array<double, 2>{ww, uu};
    });
    float ratio = 1.0f;
    if (p.weight_decay) {
      const double wn = std::sqrt(s[0]), un = std::sqrt(s[1]);
      if (wn > 0.0 && un > 0.0) ratio = static_cast<float>(wn / un);
    }
    trust_[i] = ratio;
    const float step = lr * ratio;
    for_each_grad_span(p, [&](std::int64_t b, std::int64_t e) {
      float buf[detail::kBlock];
      for (std::int64_t s0 = b; s0 < e; s0 += detail::kBlock) {
        const std::int64_t n = std::min(detail::kBlock, e - s0);
        float* W = w + s0; const float* M = m + s0; const float* V = v + s0;
        for (std::int64_t j = 0; j < n; ++j) buf[j] = V[j] * inv_bc2;
        detail::sqrt_inplace(buf, n);
        for (std::int64_t j = 0; j < n; ++j)
          W[j] -= step * ((M[j] * inv_bc1) / (buf[j] + eps) + wd * W[j]);
      }
    });
  });
}

// ---- Adam / AdamW -------------------------------------------------------------------------------

Adam::Adam(std::vector<nn::Parameter*> params, AdamOptions options)
    : Adam(std::move(params), options, /*decoupled=*/false) {}

Adam::Adam(std::vector<nn::Parameter*> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params)), opt_(options), decoupled_(decoupled) {
  BH_CHECK_AS(InvalidArgument, opt_.beta1 >= 0.0f && opt_.beta1 < 1.0f && opt_.beta2 >= 0.0f &&
              opt_.beta2 < 1.0f && opt_.epsilon > 0.0f && opt_.weight_decay >= 0.0f,
              "{}: need beta1, beta2 in [0, 1) ({}, {}), epsilon > 0 ({}), weight_decay >= 0 "
              "({})", decoupled ? "adamw" : "adam", opt_.beta1, opt_.beta2, opt_.epsilon,
              opt_.weight_decay);
  m_ = &add_state_slot("exp_avg");
  v_ = &add_state_slot("exp_avg_sq");
}

AdamW::AdamW(std::vector<nn::Parameter*> params, AdamOptions options)
    : Adam(std::move(params), options, /*decoupled=*/true) {}

std::string Adam::describe() const {
  return fmt::format("{}(beta1={}, beta2={}, epsilon={}, weight_decay={})", name(), opt_.beta1,
                     opt_.beta2, opt_.epsilon, opt_.weight_decay);
}

void Adam::update(float lr) {
  for (auto* p : params_) {
    check_parameter(*p, true);
    refuse_sparse_decay(*p, opt_.weight_decay, name());
  }
  const double t = static_cast<double>(step_count());
  const float b1 = opt_.beta1, b2 = opt_.beta2, eps = opt_.epsilon;
  const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(b1, t)));
  const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(b2, t)));
  for_each_param(params_.size(), [&](std::size_t i) {
    nn::Parameter& p = *params_[i];
    float* w = p.value.data<float>();
    const float* g = p.grad.data<float>();
    float* m = (*m_)[i].data<float>();
    float* v = (*v_)[i].data<float>();
    const float wd = wd_for(p, opt_.weight_decay);
    const float l2 = decoupled_ ? 0.0f : wd;    // added to the gradient
    const float dec = decoupled_ ? wd : 0.0f;   // added to the update
    for_each_grad_span(p, [&](std::int64_t b, std::int64_t e) {
      float buf[detail::kBlock];  // Note [Vectorising optimizer loops]
      for (std::int64_t s0 = b; s0 < e; s0 += detail::kBlock) {
        const std::int64_t n = std::min(detail::kBlock, e - s0);
        float* W = w + s0; const float* G = g + s0; float* M = m + s0; float* V = v + s0;
        for (std::int64_t j = 0; j < n; ++j) {
          const float gk = G[j] + l2 * W[j];
          M[j] = b1 * M[j] + (1.0f - b1) * gk;
          V[j] = b2 * V[j] + (1.0f - b2) * gk * gk;
          buf[j] = V[j] * inv_bc2;
        }
        detail::sqrt_inplace(buf, n);
        for (std::int64_t j = 0; j < n; ++j)
          W[j] -= lr * ((M[j] * inv_bc1) / (buf[j] + eps) + dec * W[j]);
      }
    });
  });
}

// ---- Adagrad ------------------------------------------------------------------------------------

Adagrad::Adagrad(std::vector<nn::Parameter*> params, AdagradOptions options)
    : Optimizer(std::move(params)), opt_(options) {
  BH_CHECK_AS(InvalidArgument, opt_.epsilon > 0.0f && opt_.initial_accumulator >= 0.0f &&
              opt_.weight_decay >= 0.0f && opt_.lr_decay >= 0.0f,
              "adagrad: need epsilon > 0 ({}), initial_accumulator >= 0 ({}), weight_decay >= 0 "
              "({}), lr_decay >= 0 ({})", opt_.epsilon, opt_.initial_accumulator,
              opt_.weight_decay, opt_.lr_decay);
  acc_ = &add_state_slot("sum", opt_.initial_accumulator);
}

std::string Adagrad::describe() const {
  return fmt::format("adagrad(epsilon={}, initial_accumulator={}, weight_decay={}, lr_decay={})",
                     opt_.epsilon, opt_.initial_accumulator, opt_.weight_decay, opt_.lr_decay);
}

void Adagrad::update(float lr) {
  for (auto* p : params_) {
    check_parameter(*p, true);
    refuse_sparse_decay(*p, opt_.weight_decay, name());
  }
  const float clr = lr / (1.0f + static_cast<float>(step_count() - 1) * opt_.lr_decay);
  const float eps = opt_.epsilon;
  for_each_param(params_.size(), [&](std::size_t i) {
    nn::Parameter& p = *params_[i];
    float* w = p.value.data<float>();
    const float* g = p.grad.data<float>();
    float* acc = (*acc_)[i].data<float>();
    const float wd = wd_for(p, opt_.weight_decay);
    for_each_grad_span(p, [&](std::int64_t b, std::int64_t e) {
      float root[detail::kBlock];  // Note [Vectorising optimizer loops]
      for (std::int64_t s0 = b; s0 < e; s0 += detail::kBlock) {
        const std::int64_t n = std::min(detail::kBlock, e - s0);
        float* W = w + s0; const float* G = g + s0; float* A = acc + s0;
        for (std::int64_t j = 0; j < n; ++j) {
          const float gk = G[j] + wd * W[j];
          A[j] += gk * gk;
          root[j] = A[j];
        }
        detail::sqrt_inplace(root, n);
        for (std::int64_t j = 0; j < n; ++j) W[j] -= clr * (G[j] + wd * W[j]) / (root[j] + eps);
      }
    });
  });
}

}  // namespace benchhost::optim

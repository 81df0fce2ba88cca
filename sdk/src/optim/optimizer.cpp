// fp32 optimizers. update() validates the parameters, groups them by device and hands each
// group to the optimizer's multi-tensor op (Note [Multi-tensor optimizer ops]): the CPU
// implementation in nn/cpu/optim_multi.cpp, the fused CUDA one in nn/cuda/optim_multi.cu.
#include "benchhost/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <tbb/parallel_for.h>

#include "benchhost/error.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/nn/registry.hpp"
#include "nn/multi_tensor.hpp"

namespace benchhost::optim {

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
  nn::detail::check_f32_parameter(p, name(), /*need_grad=*/true, allow_sparse_rows);
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
  // Device gradients: one fill op per device (Tensor::zero_ on a device copies a host buffer).
  std::vector<nn::Parameter*> with_grad;
  for (auto* p : params_) {
    p->sparse_rows = Tensor();
    if (!p->grad.defined()) continue;
    if (p->grad.device().is_cpu())
      p->grad.zero_();
    else
      with_grad.push_back(p);
  }
  for (const auto& g : nn::detail::group_by_device(with_grad)) {
    const Device d = with_grad[g.index[0]]->grad.device();
    auto it = std::find_if(device_zeros_.begin(), device_zeros_.end(), [&](const Tensor& z) { return z.device() == d; });
    if (it == device_zeros_.end()) {
      device_zeros_.push_back(Tensor::zeros({1}, DType::f32, d));
      it = device_zeros_.end() - 1;
    }
    nn::OpCall c;
    c.inputs.push_back(*it);
    for (std::size_t i : g.index) c.outputs.push_back(with_grad[i]->grad);
    nn::dispatch(nn::detail::kFillOp, c);
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

using nn::detail::DeviceGroup;

void refuse_sparse_decay(const nn::Parameter& p, float wd, const char* opt) {
  BH_CHECK_AS(InvalidArgument, !(p.sparse_rows.defined() && p.weight_decay && wd != 0.0f),
              "{}: parameter '{}' has a sparse-rows gradient and weight decay {}; decay would "
              "have to touch every row. Register it with weight_decay=false or use wd 0", opt,
              p.name, wd);
}

// The multi-tensor op call for one device group (Note [Multi-tensor optimizer ops]): inputs
// {grad[n], rows[n] (when with_rows)}, outputs {w[n], slot_0[n], ...} (a null slot gives
// undefined tensors), attribute "decay".
nn::OpCall group_call(const std::vector<nn::Parameter*>& params, const DeviceGroup& g,
                      bool with_rows, std::initializer_list<const std::vector<Tensor>*> slots) {
  nn::OpCall c;
  for (std::size_t i : g.index) c.inputs.push_back(params[i]->grad);
  if (with_rows)
    for (std::size_t i : g.index) c.inputs.push_back(nn::detail::rows_on(*params[i], g.device));
  for (std::size_t i : g.index) c.outputs.push_back(params[i]->value);
  for (const auto* slot : slots)
    for (std::size_t i : g.index) c.outputs.push_back(slot ? (*slot)[i] : Tensor());
  std::vector<std::int64_t> decay;
  for (std::size_t i : g.index) decay.push_back(params[i]->weight_decay ? 1 : 0);
  c.attrs.set_ints("decay", std::move(decay));
  return c;
}

}  // namespace

// ---- trust ratios -------------------------------------------------------------------------------

void detail::TrustRatios::reset(std::size_t n) {
  host_.assign(n, 1.0f);
  pending_.clear();
}

void detail::TrustRatios::set_pending(Tensor ratios, std::vector<std::size_t> index) {
  if (ratios.device().is_cpu()) {
    const float* r = ratios.data<float>();
    for (std::size_t k = 0; k < index.size(); ++k) host_[index[k]] = r[k];
    return;
  }
  pending_.push_back({std::move(ratios), std::move(index)});
}

float detail::TrustRatios::get(std::size_t i) const {
  for (auto& [t, index] : pending_) {
    const std::vector<float> r = t.to(Device::cpu()).to_float_vector();
    for (std::size_t k = 0; k < index.size(); ++k) host_[index[k]] = r[k];
  }
  pending_.clear();
  return host_.at(i);
}

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
  for (const auto& g : nn::detail::group_by_device(params_)) {
    nn::OpCall c = group_call(params_, g, /*with_rows=*/true, {momentum_});
    c.attrs.set("lr", lr).set("momentum", opt_.momentum).set("nesterov", opt_.nesterov ? 1 : 0)
        .set("weight_decay", opt_.weight_decay);
    nn::dispatch(nn::detail::kSgdOp, c);
  }
}

// ---- LARS ---------------------------------------------------------------------------------------

Lars::Lars(std::vector<nn::Parameter*> params, LarsOptions options)
    : Optimizer(std::move(params)), opt_(options) {
  BH_CHECK_AS(InvalidArgument, opt_.momentum >= 0.0f && opt_.weight_decay >= 0.0f &&
              opt_.eta > 0.0f && opt_.epsilon >= 0.0f,
              "lars: need momentum >= 0 ({}), weight_decay >= 0 ({}), eta > 0 ({}), epsilon >= 0 "
              "({})", opt_.momentum, opt_.weight_decay, opt_.eta, opt_.epsilon);
  velocity_ = &add_state_slot("velocity");
  trust_.reset(params_.size());
}

std::string Lars::describe() const {
  return fmt::format("lars(momentum={}, weight_decay={}, eta={}, epsilon={})", opt_.momentum,
                     opt_.weight_decay, opt_.eta, opt_.epsilon);
}

void Lars::update(float lr) {
  for (auto* p : params_) check_parameter(*p, false);
  trust_.reset(params_.size());
  for (const auto& g : nn::detail::group_by_device(params_)) {
    nn::OpCall c = group_call(params_, g, /*with_rows=*/false, {velocity_});
    // Written in full by the op; empty, not zeros: zero-filling a device tensor is a host copy.
    Tensor ratios = Tensor::empty({static_cast<std::int64_t>(g.index.size())}, DType::f32, g.device);
    c.outputs.push_back(ratios);
    c.attrs.set("lr", lr).set("momentum", opt_.momentum).set("weight_decay", opt_.weight_decay)
        .set("eta", opt_.eta).set("epsilon", opt_.epsilon);
    nn::dispatch(nn::detail::kLarsOp, c);
    trust_.set_pending(ratios, g.index);
  }
}

// ---- LAMB ---------------------------------------------------------------------------------------

Lamb::Lamb(std::vector<nn::Parameter*> params, LambOptions options)
    : Optimizer(std::move(params)), opt_(options) {
  BH_CHECK_AS(InvalidArgument, opt_.beta1 >= 0.0f && opt_.beta1 < 1.0f && opt_.beta2 >= 0.0f &&
              opt_.beta2 < 1.0f && opt_.epsilon > 0.0f && opt_.weight_decay >= 0.0f,
              "lamb: need beta1, beta2 in [0, 1) ({}, {}), epsilon > 0 ({}), weight_decay >= 0 "
              "({})", opt_.beta1, opt_.beta2, opt_.epsilon, opt_.weight_decay);
  m_ = &add_state_slot("exp_avg");
  v_ = &add_state_slot("exp_avg_sq");
  trust_.reset(params_.size());
}

std::string Lamb::describe() const {
  return fmt::format("lamb(beta1={}, beta2={}, epsilon={}, weight_decay={}, bias_correction={})",
                     opt_.beta1, opt_.beta2, opt_.epsilon, opt_.weight_decay,
                     opt_.bias_correction);
}

void Lamb::update(float lr) {
  for (auto* p : params_) check_parameter(*p, false);
  trust_.reset(params_.size());
  for (const auto& g : nn::detail::group_by_device(params_)) {
    nn::OpCall c = group_call(params_, g, /*with_rows=*/false, {m_, v_});
    // Written in full by the op; empty, not zeros: zero-filling a device tensor is a host copy.
    Tensor ratios = Tensor::empty({static_cast<std::int64_t>(g.index.size())}, DType::f32, g.device);
    c.outputs.push_back(ratios);
    c.attrs.set("lr", lr).set("beta1", opt_.beta1).set("beta2", opt_.beta2)
        .set("epsilon", opt_.epsilon).set("weight_decay", opt_.weight_decay)
        .set("step", static_cast<double>(step_count()))
        .set("bias_correction", opt_.bias_correction ? 1 : 0);
    nn::dispatch(nn::detail::kLambOp, c);
    trust_.set_pending(ratios, g.index);
  }
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
  for (const auto& g : nn::detail::group_by_device(params_)) {
    nn::OpCall c = group_call(params_, g, /*with_rows=*/true, {m_, v_});
    c.attrs.set("lr", lr).set("beta1", opt_.beta1).set("beta2", opt_.beta2)
        .set("epsilon", opt_.epsilon).set("weight_decay", opt_.weight_decay)
        .set("step", static_cast<double>(step_count())).set("decoupled", decoupled_ ? 1 : 0);
    nn::dispatch(nn::detail::kAdamOp, c);
  }
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
  for (const auto& g : nn::detail::group_by_device(params_)) {
    nn::OpCall c = group_call(params_, g, /*with_rows=*/true, {acc_});
    c.attrs.set("lr", clr).set("epsilon", opt_.epsilon).set("weight_decay", opt_.weight_decay);
    nn::dispatch(nn::detail::kAdagradOp, c);
  }
}

}  // namespace benchhost::optim

#include "benchhost/nn/module.hpp"

#include "benchhost/precision.hpp"

namespace benchhost::nn {

Parameter& Module::register_parameter(const std::string& name, Tensor value, bool weight_decay) {
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->grad = Tensor::zeros(value.shape(), value.dtype(), value.device());
  p->value = std::move(value);
  p->weight_decay = weight_decay;
  params_.push_back(std::move(p));
  return *params_.back();
}

Tensor& Module::register_buffer(const std::string& name, Tensor value) {
  buffers_.emplace_back(name, std::make_unique<Tensor>(std::move(value)));
  return *buffers_.back().second;
}

void Module::collect(const std::string& prefix, std::vector<Parameter*>& out) {
  for (auto& p : params_) {
    // Names are stored short; full dotted names are produced on collection.
    auto dot = p->name.rfind('.');
    std::string leaf = dot == std::string::npos ? p->name : p->name.substr(dot + 1);
    p->name = prefix.empty() ? leaf : prefix + "." + leaf;
    out.push_back(p.get());
  }
  for (auto& c : children_) c->collect(prefix.empty() ? c->name_ : prefix + "." + c->name_, out);
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  collect("", out);
  return out;
}

void Module::collect_buffers(const std::string& prefix,
                             std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& [n, t] : buffers_) out.emplace_back(prefix.empty() ? n : prefix + "." + n, t.get());
  for (auto& c : children_) c->collect_buffers(prefix.empty() ? c->name_ : prefix + "." + c->name_, out);
}

std::vector<std::pair<std::string, Tensor*>> Module::buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect_buffers("", out);
  return out;
}

std::int64_t Module::num_parameters() {
  std::int64_t n = 0;
  for (auto* p : parameters()) n += p->value.numel();
  return n;
}

void Module::zero_grad() {
  for (auto* p : parameters()) {
    p->grad.zero_();
    p->sparse_rows = Tensor();
  }
}

void Module::to(Device device) {
  for (auto* p : parameters()) {
    if (p->value.defined() && !(p->value.device() == device)) p->value = p->value.to(device);
    if (p->grad.defined() && !(p->grad.device() == device)) p->grad = p->grad.to(device);
  }
  for (auto& [name, t] : buffers())
    if (t->defined() && !(t->device() == device)) *t = t->to(device);
}

void Module::set_precision(const PrecisionPolicy& policy) {
  auto shared = std::make_shared<const PrecisionPolicy>(policy);
  std::vector<Module*> stack{this};
  while (!stack.empty()) {
    Module* m = stack.back();
    stack.pop_back();
    m->precision_ = shared;
    for (auto& c : m->children_) stack.push_back(c.get());
  }
}

const PrecisionPolicy& Module::precision() const {
  static const PrecisionPolicy fp32;
  return precision_ ? *precision_ : fp32;
}

void Module::train(bool on) {
  training_ = on;
  on_train_mode_change(on);
  for (auto& c : children_) c->train(on);
}

}  // namespace benchhost::nn

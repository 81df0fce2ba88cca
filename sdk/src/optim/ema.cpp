#include "benchhost/optim/ema.hpp"

#include <algorithm>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "nn/multi_tensor.hpp"
#include "nn/parallel.hpp"

namespace benchhost::optim {

Ema::Ema(std::vector<nn::Parameter*> params, float decay, bool warmup)
    : params_(std::move(params)), decay_(decay), warmup_(warmup) {
  BH_CHECK_AS(InvalidArgument, decay >= 0.0f && decay < 1.0f,
              "ema: decay must be in [0, 1), got {}", decay);
  shadow_.reserve(params_.size());
  for (auto* p : params_) {
    nn::detail::check_f32_parameter(*p, "ema", /*need_grad=*/false, false);
    shadow_.push_back(p->value.clone());
  }
}

void Ema::update() {
  BH_CHECK_AS(InvalidArgument, !swapped_,
              "ema: update() called while the averages are swapped in; swap() back first");
  ++num_updates_;
  float d = decay_;
  if (warmup_) d = std::min(d, static_cast<float>(1.0 + num_updates_) / static_cast<float>(10.0 + num_updates_));
  last_decay_ = d;
  for (const auto& g : nn::detail::group_by_device(params_)) {
    nn::OpCall c;
    for (std::size_t i : g.index) c.inputs.push_back(params_[i]->value);
    for (std::size_t i : g.index) c.outputs.push_back(shadow_[i]);
    c.attrs.set("decay", d);
    nn::dispatch(nn::detail::kLerpOp, c);
  }
}

void Ema::swap() {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!shadow_[i].device().is_cpu()) {
      // Device tensors: three device-to-device copies through a scratch tensor.
      Tensor live = params_[i]->value.clone();
      params_[i]->value.copy_(shadow_[i]);
      shadow_[i].copy_(live);
      continue;
    }
    float* w = params_[i]->value.data<float>();
    float* s = shadow_[i].data<float>();
    nn::detail::parallel_chunks(shadow_[i].numel(), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k) std::swap(w[k], s[k]);
    });
  }
  swapped_ = !swapped_;
}

}  // namespace benchhost::optim

// The Tensor-level API of nn/transducer.hpp: argument checks (on host copies of the labels and
// lengths when they live on a device), output allocation and dispatch through the op registry.
// The ops are declared next to their CPU implementations in nn/cpu/transducer.cpp (CUDA:
// nn/cuda/transducer.cu); their signatures are in nn/transducer_common.hpp.

#include "benchhost/nn/transducer.hpp"

#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/registry.hpp"
#include "nn/transducer_common.hpp"

namespace benchhost::nn {

namespace {

Tensor host_i32(const Tensor& t) { return t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous(); }

}  // namespace

Tensor transducer_loss_forward(const Tensor& logits, const Tensor& labels, const Tensor& logit_lengths,
                               const Tensor& label_lengths, const TransducerLossSpec& spec,
                               TransducerLossSaved* saved) {
  const char* op = "transducer_loss_forward";
  const transducer::Dims d = transducer::check_shapes(logits, labels, logit_lengths, label_lengths, spec.blank, op);
  const DType dt = logits.dtype();
  BH_CHECK_AS(Unsupported, dt == DType::f32 || dt == DType::f16 || dt == DType::bf16,
              "{}: logits have dtype {}; f32, f16 and bf16 are implemented", op, dtype_name(dt));
  BH_CHECK_AS(InvalidArgument, d.B >= 1, "{}: the batch is empty (logits {})", op, shape_str(logits.shape()));
  {
    const Tensor hl = host_i32(labels), hf = host_i32(logit_lengths), hu = host_i32(label_lengths);
    transducer::check_values(d, d.U() > 0 ? hl.data<std::int32_t>() : nullptr, hf.data<std::int32_t>(),
                             hu.data<std::int32_t>(), op);
  }
  const Device dev = logits.device();
  OpCall call;
  call.inputs = {logits.contiguous(), labels.contiguous(), logit_lengths.contiguous(), label_lengths.contiguous()};
  call.outputs = {Tensor::empty({d.B}, DType::f32, dev), Tensor::empty({d.B, d.T, d.U1}, DType::f64, dev),
                  Tensor::empty({d.B, d.T, d.U1}, DType::f64, dev)};
  call.attrs.set("blank", static_cast<double>(d.blank));
  dispatch("transducer_loss_forward", call);
  if (saved != nullptr) {
    saved->logits = call.inputs[0];
    saved->labels = call.inputs[1];
    saved->logit_lengths = call.inputs[2];
    saved->label_lengths = call.inputs[3];
    saved->log_denominators = call.outputs[1];
    saved->alpha = call.outputs[2];
    saved->blank = d.blank;
    saved->reduction = spec.reduction;
  }
  if (spec.reduction == TransducerReduction::none) return call.outputs[0];
  return mean(call.outputs[0], {0}, true);  // Note [Transducer loss reduction]
}

Tensor transducer_loss_backward(const Tensor& dloss, const TransducerLossSaved& saved) {
  const char* op = "transducer_loss_backward";
  BH_CHECK_AS(InvalidArgument, saved.logits.defined() && saved.alpha.defined() && saved.log_denominators.defined(),
              "{}: the saved state is empty (pass a TransducerLossSaved to transducer_loss_forward first)", op);
  const transducer::Dims d =
      transducer::check_shapes(saved.logits, saved.labels, saved.logit_lengths, saved.label_lengths, saved.blank, op);
  const Shape lattice{d.B, d.T, d.U1};
  for (const Tensor* t : {&saved.alpha, &saved.log_denominators})
    BH_CHECK_AS(InvalidArgument,
                t->dtype() == DType::f64 && t->shape() == lattice && t->device() == saved.logits.device(),
                "{}: saved lattice {} does not match the logits {} (expected f64 [{}, {}, {}])", op, t->describe(),
                shape_str(saved.logits.shape()), d.B, d.T, d.U1);
  const bool mean_reduced = saved.reduction == TransducerReduction::mean;
  BH_CHECK_AS(InvalidArgument,
              dloss.defined() && dloss.dtype() == DType::f32 && dloss.device() == saved.logits.device() &&
                  (mean_reduced ? dloss.numel() == 1 : dloss.numel() == d.B),
              "{}: the incoming gradient must be f32 on {} with {} (reduction {}), got {}", op,
              saved.logits.device().str(), mean_reduced ? std::string("one element") : fmt::format("{} elements", d.B),
              mean_reduced ? "mean" : "none", dloss.defined() ? dloss.describe() : std::string("undefined"));
  OpCall call;
  call.inputs = {saved.logits,
                 saved.labels,
                 saved.logit_lengths,
                 saved.label_lengths,
                 saved.log_denominators,
                 saved.alpha,
                 dloss.contiguous().reshape({dloss.numel()})};
  call.outputs = {Tensor::empty(saved.logits.shape(), saved.logits.dtype(), saved.logits.device())};
  call.attrs.set("blank", static_cast<double>(d.blank))
      .set("scale", mean_reduced ? 1.0 / static_cast<double>(d.B) : 1.0);
  dispatch("transducer_loss_backward", call);
  return call.outputs[0];
}

Tensor transducer_loss_backward(const TransducerLossSaved& saved, float dloss) {
  BH_CHECK_AS(InvalidArgument, saved.logits.defined(),
              "transducer_loss_backward: the saved state is empty (pass a TransducerLossSaved to "
              "transducer_loss_forward first)");
  const std::int64_t n = saved.reduction == TransducerReduction::mean ? 1 : saved.logits.size(0);
  return transducer_loss_backward(Tensor::full({n}, dloss, DType::f32, saved.logits.device()), saved);
}

}  // namespace benchhost::nn

// The Tensor-level API of nn/transducer.hpp: argument checks (on host copies of the labels and
// lengths when they live on a device), output allocation and dispatch through the op registry.
// The loss ops are declared next to their CPU implementations in nn/cpu/transducer.cpp (CUDA:
// nn/cuda/transducer.cu), the layout ops in nn/cpu/transducer_ops.cpp (CUDA:
// nn/cuda/transducer_ops.cu); their signatures are in nn/transducer_common.hpp and
// nn/transducer.hpp.

#include "benchhost/nn/transducer.hpp"

#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/registry.hpp"
#include "nn/transducer_common.hpp"

namespace benchhost::nn {

namespace {

Tensor host_i32(const Tensor& t) { return t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous(); }

void check_layout_dtype(const Tensor& t, const char* what, const char* op) {
  BH_CHECK_AS(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
  const DType dt = t.dtype();
  BH_CHECK_AS(InvalidArgument, dt == DType::f32 || dt == DType::f16 || dt == DType::bf16,
              "{}: {} is {}; f32, f16 and bf16 are implemented", op, what, t.describe());
}

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


// ---- StackTime and the joint broadcast (Note [Transducer layout ops]) --------------------------

std::int64_t stacked_length(std::int64_t frames, std::int64_t factor) {
  BH_CHECK_AS(InvalidArgument, factor >= 1 && frames >= 0, "stacked_length: need frames >= 0 and factor >= 1, got {} and {}",
              frames, factor);
  return (frames + factor - 1) / factor;
}

Tensor stack_time_forward(const Tensor& x, std::int64_t factor) {
  const char* op = "stack_time_forward";
  check_layout_dtype(x, "x", op);
  BH_CHECK_AS(InvalidArgument, x.dim() == 3 && factor >= 1, "{}: expected x [T, B, H] and factor >= 1, got {} and {}",
              op, shape_str(x.shape()), factor);
  OpCall call;
  call.inputs = {x.contiguous()};
  call.outputs = {Tensor::empty({stacked_length(x.size(0), factor), x.size(1), factor * x.size(2)}, x.dtype(), x.device())};
  call.attrs.set("factor", static_cast<double>(factor));
  transducer::check_stack_time(call.inputs[0], call.outputs[0], factor, op);
  dispatch(op, call);
  return call.outputs[0];
}

Tensor stack_time_backward(const Tensor& dy, std::int64_t factor, std::int64_t frames) {
  const char* op = "stack_time_backward";
  check_layout_dtype(dy, "dy", op);
  BH_CHECK_AS(InvalidArgument, dy.dim() == 3 && factor >= 1 && frames >= 0 && dy.size(2) % factor == 0,
              "{}: expected dy [ceil(T / f), B, f H] with f = factor {} >= 1 dividing its last size and T = frames {} "
              ">= 0, got dy {}",
              op, factor, frames, shape_str(dy.shape()));
  OpCall call;
  call.inputs = {dy.contiguous()};
  call.outputs = {Tensor::empty({frames, dy.size(1), dy.size(2) / factor}, dy.dtype(), dy.device())};
  call.attrs.set("factor", static_cast<double>(factor)).set("frames", static_cast<double>(frames));
  transducer::check_stack_time(call.outputs[0], call.inputs[0], factor, op);
  dispatch(op, call);
  return call.outputs[0];
}

Tensor joint_add_forward(const Tensor& f, const Tensor& g) {
  const char* op = "joint_add_forward";
  check_layout_dtype(f, "f", op);
  check_layout_dtype(g, "g", op);
  BH_CHECK_AS(InvalidArgument,
              f.dim() == 3 && g.dim() == 3 && f.size(0) == g.size(0) && f.size(2) == g.size(2),
              "{}: expected f [B, T, J] and g [B, U+1, J] with the same B and J, got f {} and g {}", op,
              shape_str(f.shape()), shape_str(g.shape()));
  BH_CHECK_AS(InvalidArgument, f.dtype() == g.dtype() && f.device() == g.device(),
              "{}: f {} and g {} must share one dtype and device", op, f.describe(), g.describe());
  OpCall call;
  call.inputs = {f.contiguous(), g.contiguous()};
  call.outputs = {Tensor::empty({f.size(0), f.size(1), g.size(1), f.size(2)}, f.dtype(), f.device())};
  transducer::check_joint(call.inputs[0], call.inputs[1], call.outputs[0], op);
  dispatch(op, call);
  return call.outputs[0];
}

JointAddGrads joint_add_backward(const Tensor& dh) {
  const char* op = "joint_add_backward";
  check_layout_dtype(dh, "dh", op);
  BH_CHECK_AS(InvalidArgument, dh.dim() == 4, "{}: expected dh [B, T, U+1, J], got {}", op, shape_str(dh.shape()));
  const std::int64_t b = dh.size(0), t = dh.size(1), u1 = dh.size(2), j = dh.size(3);
  OpCall call;
  call.inputs = {dh.contiguous()};
  call.outputs = {Tensor::empty({b, t, j}, dh.dtype(), dh.device()), Tensor::empty({b, u1, j}, dh.dtype(), dh.device())};
  transducer::check_joint(call.outputs[0], call.outputs[1], call.inputs[0], op);
  dispatch(op, call);
  return {call.outputs[0], call.outputs[1]};
}

}  // namespace benchhost::nn

// The Tensor-level API of nn/segmentation.hpp (instance norm, DiceCE loss, channel argmax):
// argument checks, output allocation and dispatch through the op registry, and the
// InstanceNorm3d layer. The ops are declared next to their CPU implementations in
// nn/cpu/instance_norm.cpp and nn/cpu/dice_ce.cpp (CUDA: nn/cuda/instance_norm.cu, dice_ce.cu).

#include "benchhost/nn/segmentation.hpp"

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"

namespace benchhost::nn {

namespace {

double layout_attr(VolumeLayout layout) { return layout == VolumeLayout::ndhwc ? 1.0 : 0.0; }

void check_floating(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
  const DType d = t.dtype();
  if (d != DType::f32 && d != DType::f16 && d != DType::bf16)
    BH_THROW(Unsupported, "{}: {} has dtype {}; f32, f16 and bf16 are implemented", op, what, dtype_name(d));
}

void check_vec(const Tensor& t, std::int64_t c, const Tensor& x, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument,
              t.defined() && t.numel() == c && t.dtype() == DType::f32 && t.is_contiguous() &&
                  t.device() == x.device(),
              "{}: {} must be a contiguous f32 tensor of {} elements (channels) on {}, got {}", op, what, c,
              x.device().str(), t.defined() ? t.describe() : std::string("undefined"));
}

VolumeDims check_volume(const Tensor& x, VolumeLayout layout, const char* op, const char* what) {
  check_floating(x, op, what);
  const VolumeDims d = volume_dims(x.shape(), layout, op);
  BH_CHECK_AS(InvalidArgument, d.n > 0 && d.c > 0 && d.spatial() > 0, "{}: {} {} is empty", op, what,
              shape_str(x.shape()));
  return d;
}

Attrs in_attrs(const InstanceNormSpec& s) {
  Attrs a;
  a.set("eps", s.eps).set("fuse_relu", s.fuse_relu ? 1.0 : 0.0).set("layout", layout_attr(s.layout));
  return a;
}

// Labels [N, D, H, W] u8/i32 matching the logits' dims and device.
void check_labels(const Tensor& labels, const Tensor& logits, const VolumeDims& d, const char* op) {
  BH_CHECK_AS(InvalidArgument, labels.defined() && (labels.dtype() == DType::u8 || labels.dtype() == DType::i32),
              "{}: labels must be u8 or i32, got {}", op, labels.defined() ? labels.describe() : "undefined");
  BH_CHECK_AS(InvalidArgument, labels.shape() == Shape({d.n, d.d, d.h, d.w}) && labels.device() == logits.device(),
              "{}: labels {} on {} do not match logits {} on {} (expected [{}, {}, {}, {}])", op,
              shape_str(labels.shape()), labels.device().str(), shape_str(logits.shape()), logits.device().str(), d.n,
              d.d, d.h, d.w);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Instance normalisation
// ---------------------------------------------------------------------------------------------

Tensor instance_norm3d_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const InstanceNormSpec& spec, InstanceNormSaved& saved) {
  const char* op = "instance_norm3d_forward";
  BH_CHECK_AS(InvalidArgument, spec.eps > 0, "{}: eps must be positive, got {}", op, spec.eps);
  const VolumeDims d = check_volume(x, spec.layout, op, "input");
  check_vec(gamma, d.c, x, op, "gamma");
  check_vec(beta, d.c, x, op, "beta");
  OpCall call;
  call.inputs = {x.contiguous(), gamma, beta};
  call.outputs = {Tensor::empty(x.shape(), x.dtype(), x.device()), Tensor::empty({d.n * d.c}, DType::f32, x.device()),
                  Tensor::empty({d.n * d.c}, DType::f32, x.device())};
  call.attrs = in_attrs(spec);
  dispatch("instance_norm3d_forward", call);
  saved.mean = call.outputs[1];
  saved.rstd = call.outputs[2];
  saved.output = spec.fuse_relu ? call.outputs[0] : Tensor();
  return call.outputs[0];
}

Tensor instance_norm3d_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                const InstanceNormSaved& saved, const InstanceNormSpec& spec,
                                Tensor& dgamma, Tensor& dbeta) {
  const char* op = "instance_norm3d_backward";
  const VolumeDims d = check_volume(x, spec.layout, op, "input");
  BH_CHECK_AS(InvalidArgument, dy.defined() && dy.shape() == x.shape() && dy.device() == x.device(),
              "{}: output gradient {} does not match the input {}", op,
              dy.defined() ? shape_str(dy.shape()) : "undefined", shape_str(x.shape()));
  check_floating(dy, op, "output gradient");
  check_vec(gamma, d.c, x, op, "gamma");
  check_vec(dgamma, d.c, x, op, "gamma gradient");
  check_vec(dbeta, d.c, x, op, "beta gradient");
  check_vec(saved.mean, d.n * d.c, x, op, "saved mean (was the forward pass run with `saved`?)");
  check_vec(saved.rstd, d.n * d.c, x, op, "saved rstd");
  BH_CHECK_AS(InvalidArgument, !spec.fuse_relu || (saved.output.defined() && saved.output.shape() == x.shape()),
              "{}: fuse_relu needs the forward output saved in `saved.output`", op);
  OpCall call;
  call.inputs = {dy.contiguous(), x.contiguous(), gamma, saved.mean, saved.rstd,
                 spec.fuse_relu ? saved.output.contiguous() : Tensor()};
  call.outputs = {Tensor::empty(x.shape(), x.dtype(), x.device()), dgamma, dbeta};
  call.attrs = in_attrs(spec);
  dispatch("instance_norm3d_backward", call);
  return call.outputs[0];
}

InstanceNorm3d::InstanceNorm3d(std::int64_t channels, const InstanceNormSpec& spec)
    : channels_(channels), spec_(spec) {
  BH_CHECK_AS(InvalidArgument, channels > 0 && spec.eps > 0,
              "InstanceNorm3d: channels ({}) and eps ({}) must be positive", channels, spec.eps);
  gamma_ = &register_parameter("weight", Tensor::full({channels}, 1.0), false);
  beta_ = &register_parameter("bias", Tensor::zeros({channels}), false);
}

Tensor InstanceNorm3d::forward(const Tensor& x) {
  InstanceNormSaved saved;
  Tensor y = instance_norm3d_forward(x, gamma_->value, beta_->value, spec_, saved);
  if (is_training()) {
    x_ = x;
    saved_ = std::move(saved);
  } else {
    x_ = Tensor();
    saved_ = InstanceNormSaved{};
  }
  return y;
}

Tensor InstanceNorm3d::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, x_.defined(), "InstanceNorm3d '{}': backward() needs a training-mode forward() first",
              name());
  Tensor dx = instance_norm3d_backward(dy, x_, gamma_->value, saved_, spec_, gamma_->grad, beta_->grad);
  gamma_->mark_grad_ready();
  beta_->mark_grad_ready();
  x_ = Tensor();
  saved_ = InstanceNormSaved{};
  return dx;
}

// ---------------------------------------------------------------------------------------------
// DiceCE loss and argmax
// ---------------------------------------------------------------------------------------------

DiceCeResult dice_ce_loss_forward(const Tensor& logits, const Tensor& labels, VolumeLayout layout, double smooth) {
  const char* op = "dice_ce_loss_forward";
  const VolumeDims d = check_volume(logits, layout, op, "logits");
  BH_CHECK_AS(InvalidArgument, d.c >= 2, "{}: needs at least 2 classes (background and one more), got {}", op, d.c);
  BH_CHECK_AS(InvalidArgument, smooth >= 0, "{}: smooth must be >= 0, got {}", op, smooth);
  check_labels(labels, logits, d, op);
  OpCall call;
  call.inputs = {logits.contiguous(), labels.contiguous()};
  call.outputs = {Tensor::empty(logits.shape(), DType::f32, logits.device()),
                  Tensor::empty({d.n, d.c, 3}, DType::f32, logits.device()),
                  Tensor::empty({3}, DType::f32, logits.device())};
  call.attrs.set("smooth", smooth).set("layout", layout_attr(layout));
  dispatch("dice_ce_loss_forward", call);
  const Tensor out = call.outputs[2].to(Device::cpu());
  DiceCeResult r;
  r.loss = out.data<float>()[0];
  r.dice_loss = out.data<float>()[1];
  r.ce_loss = out.data<float>()[2];
  r.probs = call.outputs[0];
  r.dice_terms = call.outputs[1];
  r.logits_dtype = logits.dtype();
  return r;
}

Tensor dice_ce_loss_backward(const DiceCeResult& fwd, const Tensor& labels, VolumeLayout layout, double smooth,
                             float dloss) {
  const char* op = "dice_ce_loss_backward";
  BH_CHECK_AS(InvalidArgument, fwd.probs.defined() && fwd.probs.dtype() == DType::f32,
              "{}: the forward result holds no f32 probabilities (was dice_ce_loss_forward run?)", op);
  const VolumeDims d = check_volume(fwd.probs, layout, op, "probs");
  BH_CHECK_AS(InvalidArgument, d.c >= 2, "{}: needs at least 2 classes, got {}", op, d.c);
  check_labels(labels, fwd.probs, d, op);
  check_vec(fwd.dice_terms, d.n * d.c * 3, fwd.probs, op, "dice_terms");
  const DType ld = fwd.logits_dtype;
  BH_CHECK_AS(Unsupported, ld == DType::f32 || ld == DType::f16 || ld == DType::bf16,
              "{}: logits dtype {}; f32, f16 and bf16 are implemented", op, dtype_name(ld));
  OpCall call;
  call.inputs = {fwd.probs, labels.contiguous(), fwd.dice_terms};
  call.outputs = {Tensor::empty(fwd.probs.shape(), fwd.logits_dtype, fwd.probs.device())};
  call.attrs.set("smooth", smooth).set("layout", layout_attr(layout)).set("dloss", dloss);
  dispatch("dice_ce_loss_backward", call);
  return call.outputs[0];
}

Tensor argmax_channels(const Tensor& logits, VolumeLayout layout) {
  const char* op = "argmax_channels";
  const VolumeDims d = check_volume(logits, layout, op, "logits");
  BH_CHECK_AS(InvalidArgument, d.c <= 256, "{}: at most 256 channels fit a u8 label, got {}", op, d.c);
  OpCall call;
  call.inputs = {logits.contiguous()};
  call.outputs = {Tensor::empty({d.n, d.d, d.h, d.w}, DType::u8, logits.device())};
  call.attrs.set("layout", layout_attr(layout));
  dispatch("argmax_channels", call);
  return call.outputs[0];
}

}  // namespace benchhost::nn

// CUDA batch normalisation ops: batch_norm_forward (training: batch statistics; inference: the
// running ones), batch_norm_backward and batch_norm_running_update. Attribute parsing, checks
// and registration; the kernels and the reasons for not using cuDNN are in batchnorm.cu.

#include "nn/cpu/conv_common.hpp"
#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/image_kernels.hpp"

namespace benchhost::nn::cuda {
namespace {

BnShape bn_shape(const Tensor& x, ImageLayout layout, const char* op) {
  const ImageDims d = image_dims(x.shape(), layout, op);
  BnShape s;
  s.n = d.n;
  s.c = d.c;
  s.hw = d.h * d.w;
  s.nhwc = layout == ImageLayout::nhwc;
  return s;
}

const float* opt(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// inputs {x, gamma, beta, mean? var? (eval)}; outputs {y, mean, var}
void forward(OpCall& call) {
  const BatchNormSpec spec = conv_detail::bn_spec(call.attrs);
  const bool training = call.attrs.get_bool("training", true);
  const Tensor &x = call.inputs[0], &gamma = call.inputs[1], &beta = call.inputs[2];
  Tensor &y = call.outputs[0], &mean = call.outputs[1], &var = call.outputs[2];
  const BnShape s = bn_shape(x, spec.layout, "batch_norm_forward");
  BH_CHECK_AS(InvalidArgument, gamma.numel() == s.c && beta.numel() == s.c && mean.numel() == s.c &&
                                   var.numel() == s.c && y.numel() == x.numel(),
              "batch_norm_forward: gamma, beta, mean and var must have {} elements and y {}", s.c,
              x.numel());
  set_device_of(x);
  if (training) {
    BH_CHECK_AS(InvalidArgument, s.count() > 0 || s.c == 0,
                "batch_norm_forward: no values per channel in {}", x.describe());
    bn_batch_stats(x.data<float>(), s, mean.data<float>(), var.data<float>(), x);
  } else {
    const Tensor &running_mean = call.inputs.at(3), &running_var = call.inputs.at(4);
    BH_CHECK_AS(InvalidArgument,
                running_mean.defined() && running_var.defined() && running_mean.numel() == s.c &&
                    running_var.numel() == s.c,
                "batch_norm_forward (inference): running mean and variance of {} elements needed",
                s.c);
    BH_CHECK_CUDA(cudaMemcpyAsync(mean.raw_data(), running_mean.raw_data(), mean.nbytes(),
                                  cudaMemcpyDeviceToDevice, op_stream()));
    BH_CHECK_CUDA(cudaMemcpyAsync(var.raw_data(), running_var.raw_data(), var.nbytes(),
                                  cudaMemcpyDeviceToDevice, op_stream()));
  }
  bn_normalize(x.data<float>(), gamma.data<float>(), beta.data<float>(), mean.data<float>(),
               var.data<float>(), spec.eps, spec.fuse_relu, s, y.data<float>());
}

// inputs {dy, x, gamma, mean, var, y? (fuse_relu)}; outputs {dx, dgamma +=, dbeta +=}
void backward(OpCall& call) {
  const BatchNormSpec spec = conv_detail::bn_spec(call.attrs);
  const bool training = call.attrs.get_bool("training", true);
  const Tensor &dy = call.inputs[0], &x = call.inputs[1], &gamma = call.inputs[2],
               &mean = call.inputs[3], &var = call.inputs[4];
  const Tensor y = spec.fuse_relu && call.inputs.size() > 5 ? call.inputs[5] : Tensor();
  BH_CHECK_AS(InvalidArgument, !spec.fuse_relu || (y.defined() && y.numel() == x.numel()),
              "batch_norm_backward: fuse_relu needs the forward output (input 5) of x's size");
  Tensor &dx = call.outputs[0], &dgamma = call.outputs[1], &dbeta = call.outputs[2];
  const BnShape s = bn_shape(x, spec.layout, "batch_norm_backward");
  BH_CHECK_AS(InvalidArgument, dy.numel() == x.numel() && dx.numel() == x.numel() &&
                                   gamma.numel() == s.c && mean.numel() == s.c &&
                                   var.numel() == s.c && dgamma.numel() == s.c &&
                                   dbeta.numel() == s.c,
              "batch_norm_backward: dy/dx must match x {} and the channel vectors have {} "
              "elements",
              x.describe(), s.c);
  set_device_of(x);
  bn_backward(dy.data<float>(), x.data<float>(), opt(y), gamma.data<float>(), mean.data<float>(),
              var.data<float>(), spec.eps, training, s, dx.data<float>(), dgamma.data<float>(),
              dbeta.data<float>(), x);
}

// inputs {batch_mean, batch_var}; outputs {running_mean, running_var} (updated in place)
void running_update(OpCall& call) {
  const Tensor &bm = call.inputs[0], &bv = call.inputs[1];
  Tensor &rm = call.outputs[0], &rv = call.outputs[1];
  const std::int64_t count = call.attrs.get_int("count", 2);
  BH_CHECK_AS(InvalidArgument, count > 1, "batch_norm_running_update: count must be > 1, got {}",
              count);
  BH_CHECK_AS(InvalidArgument,
              bm.numel() == rm.numel() && bv.numel() == rm.numel() && rv.numel() == rm.numel(),
              "batch_norm_running_update: all four vectors must have {} elements", rm.numel());
  set_device_of(bm);
  const float unbias = static_cast<float>(count) / static_cast<float>(count - 1);
  bn_running_update(bm.data<float>(), bv.data<float>(),
                    static_cast<float>(call.attrs.get("momentum", 0.1)), unbias, rm.numel(),
                    rm.data<float>(), rv.data<float>());
}

const bool registered = [] {
  register_op_impl("batch_norm_forward", cuda_impl("cuda.kernels", 50, forward));
  register_op_impl("batch_norm_backward", cuda_impl("cuda.kernels", 50, backward));
  register_op_impl("batch_norm_running_update", cuda_impl("cuda.kernels", 50, running_update));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn::cuda

// CUDA batch normalisation ops: batch_norm_forward (training: batch statistics; inference: the
// running ones), batch_norm_backward and batch_norm_running_update. Attribute parsing, checks
// and registration; the kernels and the reasons for not using cuDNN are in batchnorm.cu.
// The activation-shaped tensors share one storage type (f32, f16 or bf16), the [C] vectors are
// f32: the calls of a mixed-precision network (half activations, f32 parameters and statistics).

#include "nn/conv_common.hpp"
#include "nn/cuda/cuda_common.hpp"
#include "nn/cuda/image_kernels.hpp"
#include "nn/cuda/storage.hpp"

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

template <class T>
const T* opt(const Tensor& t) { return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr; }
template <class T>
const T* in(const Tensor& t) { return static_cast<const T*>(t.raw_data()); }
template <class T>
T* out(Tensor& t) { return static_cast<T*>(t.raw_data()); }

// "" when the activations share one storage type and the [C] vectors are f32, all contiguous on
// a cuda device; else the reason.
std::string accepts_split(const std::vector<Tensor>& activations, const std::vector<Tensor>& vectors) {
  std::string why = require_one_storage(activations);
  if (!why.empty()) return "activation " + why;
  why = require_cuda_contiguous(vectors);
  return why.empty() ? why : "channel vector " + why;
}

// inputs {x, gamma, beta, mean?, var?}; outputs {y, mean, var}
std::string accepts_forward(const OpCall& c) {
  if (c.inputs.size() < 3 || c.outputs.size() != 3) return "needs inputs {x, gamma, beta, ...} and outputs {y, mean, var}";
  std::vector<Tensor> vectors(c.inputs.begin() + 1, c.inputs.end());
  vectors.push_back(c.outputs[1]);
  vectors.push_back(c.outputs[2]);
  return accepts_split({c.inputs[0], c.outputs[0]}, vectors);
}

// inputs {dy, x, gamma, mean, var, y?}; outputs {dx, dgamma, dbeta}
std::string accepts_backward(const OpCall& c) {
  if (c.inputs.size() < 5 || c.outputs.size() != 3) return "needs inputs {dy, x, gamma, mean, var, y?} and outputs {dx, dgamma, dbeta}";
  return accepts_split({c.inputs[0], c.inputs[1], c.inputs.size() > 5 ? c.inputs[5] : Tensor(), c.outputs[0]},
                       {c.inputs[2], c.inputs[3], c.inputs[4], c.outputs[1], c.outputs[2]});
}

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
    with_storage(x.dtype(), [&](auto tag) {
      bn_batch_stats(in<decltype(tag)>(x), s, mean.data<float>(), var.data<float>(), x);
    });
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
  with_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    bn_normalize(in<T>(x), gamma.data<float>(), beta.data<float>(), mean.data<float>(),
                 var.data<float>(), spec.eps, spec.fuse_relu, s, out<T>(y));
  });
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
  with_storage(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    bn_backward(in<T>(dy), in<T>(x), opt<T>(y), gamma.data<float>(), mean.data<float>(),
                var.data<float>(), spec.eps, training, s, out<T>(dx), dgamma.data<float>(),
                dbeta.data<float>(), x);
  });
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
  register_op_impl("batch_norm_forward", cuda_impl("cuda.kernels", 50, forward, accepts_forward));
  register_op_impl("batch_norm_backward", cuda_impl("cuda.kernels", 50, backward, accepts_backward));
  register_op_impl("batch_norm_running_update", cuda_impl("cuda.kernels", 50, running_update));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn::cuda

#pragma once
/// @file nn/conv3d.hpp  3-d convolution and 3-d transposed convolution (3D U-Net), forward and
/// backward, as plain functions (llm.c style) and as nn::Layer modules.
///
/// Layout. A 5-d activation is NCDHW ([N, C, D, H, W]) or NDHWC ([N, D, H, W, C]) as the spec's
/// VolumeLayout says (nn/volume.hpp); nothing is guessed from the shape. Weights never depend on
/// the layout and are PyTorch's: [O, I, KD, KH, KW] for Conv3d, [I, O, KD, KH, KW] for
/// ConvTranspose3d (in_channels first), so weights files are interchangeable with PyTorch.
/// Channel vectors (bias) are [O]. Dilation and groups are 1; padding is symmetric.
///
/// The transposed convolution is the adjoint (the gradient with respect to the input) of the
/// convolution with the same weight tensor read as [O_conv = I, I_conv = O]: its output size per
/// dimension is (in - 1) * stride - 2 * pad + k (PyTorch's ConvTranspose3d with
/// output_padding 0), so with k = stride = 2 and pad 0 it doubles each spatial dimension.
///
/// Backend. Every function validates its arguments, allocates its outputs and dispatches through
/// the op registry (nn/registry.hpp) to ops named conv3d_forward, conv3d_backward_data,
/// conv3d_backward_weights, conv_transpose3d_forward, conv_transpose3d_backward_data and
/// conv_transpose3d_backward_weights. CPU: oneDNN convolution / deconvolution primitives with 5-d
/// memory descriptors, built once per shape and cached (Note [Primitive cache] in
/// sdk/src/nn/cpu/conv_dnnl.hpp), and plain-loop references (sdk/src/nn/cpu/conv3d.cpp). CUDA:
/// cuDNN's Nd convolutions (sdk/src/nn/cuda/conv3d_cudnn.cpp); not yet run on a GPU.
///
/// Precision: f32, f16 or bf16 activations (outputs in the input's dtype), f32 accumulation;
/// other dtypes throw Unsupported. The CPU oneDNN path computes in f32 (half types through the
/// registry's f32 promotion, Note [Half-precision promotion]); cuDNN takes f16/bf16 natively in
/// NDHWC with channel counts that are multiples of 8 and no bias.
/// Ownership: outputs are new tensors; inputs are never modified except the gradients that a
/// function says it accumulates into (`+=`).
/// Threading: the functions may be called from several threads; layers are not thread-safe.
/// Errors: a shape, layout or parameter mismatch throws InvalidArgument naming the op and shapes.

#include <cstdint>

#include "benchhost/nn/module.hpp"
#include "benchhost/nn/volume.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn {

/// Geometry of a 3-d (transposed) convolution. Padding is symmetric (PyTorch's padding=).
struct Conv3dSpec {
  std::int64_t stride_d = 1, stride_h = 1, stride_w = 1;
  std::int64_t pad_d = 0, pad_h = 0, pad_w = 0;
  VolumeLayout layout = VolumeLayout::ncdhw;
};

// ============================================================================================
// Convolution
// ============================================================================================

/// Output shape of conv3d for input shape `x` and weight shape `w` ([O, I, KD, KH, KW]); per
/// dimension (in + 2 * pad - k) / stride + 1. Throws InvalidArgument if the shapes do not agree
/// or the output would be empty.
Shape conv3d_output_shape(const Shape& x, const Shape& w, const Conv3dSpec& spec);

/// y = conv(x, w) + bias. `bias` may be undefined (no bias); otherwise [O].
Tensor conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dSpec& spec);

/// dx from dy (shape of the forward output) and w; `x_shape` is the forward input's shape.
Tensor conv3d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv3dSpec& spec);

/// Weight (and bias) gradients. Accumulates: dw += dL/dw ([O, I, KD, KH, KW]), dbias += dL/dbias
/// ([O]; dbias may be undefined when the convolution has no bias).
void conv3d_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& dbias,
                             const Conv3dSpec& spec);

/// Multiply-accumulates of one forward pass for one sample (2 FLOPs each).
double conv3d_macs_per_sample(const Shape& x, const Shape& w, const Conv3dSpec& spec);

// ============================================================================================
// Transposed convolution (PyTorch ConvTranspose3d: output_padding 0, dilation 1, groups 1)
// ============================================================================================

/// Output shape for input `x` ([N, I, D, H, W] or NDHWC) and weight `w` ([I, O, KD, KH, KW]);
/// per dimension (in - 1) * stride - 2 * pad + k. Throws InvalidArgument if the shapes do not
/// agree or the output would be empty.
Shape conv_transpose3d_output_shape(const Shape& x, const Shape& w, const Conv3dSpec& spec);

/// y = conv_transpose(x, w) + bias. `bias` may be undefined; otherwise [O] (= w's dim 1).
Tensor conv_transpose3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                const Conv3dSpec& spec);

/// dx from dy (shape of the forward output) and w; `x_shape` is the forward input's shape.
Tensor conv_transpose3d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                      const Conv3dSpec& spec);

/// Accumulates dw += dL/dw ([I, O, KD, KH, KW]) and dbias += dL/dbias ([O], may be undefined).
void conv_transpose3d_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw,
                                       Tensor& dbias, const Conv3dSpec& spec);

/// Multiply-accumulates of one forward pass for one sample (each input element times each
/// weight of its input channel).
double conv_transpose3d_macs_per_sample(const Shape& x, const Shape& w, const Conv3dSpec& spec);

// ============================================================================================
// Layers
// ============================================================================================

/// 3-d convolution with a cubic kernel. Parameters: "weight" [O, I, k, k, k] (zeros here; the
/// caller initialises it, e.g. through nn/init.hpp) and optional "bias" [O] (zeros, no weight
/// decay). Keeps its input for backward. Computes in the conv class's type of its precision
/// policy (nn/module.hpp, Note [Layers under a precision policy]), like Conv2d; the input
/// gradient comes back in the input's dtype.
class Conv3d : public Layer {
 public:
  Conv3d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         const Conv3dSpec& spec, bool bias = false);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  const Conv3dSpec& spec() const { return spec_; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  std::int64_t in_channels() const { return in_channels_; }
  std::int64_t out_channels() const { return out_channels_; }
  /// Without an input gradient (the first layer of a network) backward() skips the
  /// backward-data convolution and returns an undefined tensor.
  void set_input_grad(bool on) { input_grad_ = on; }

 private:
  std::int64_t in_channels_, out_channels_;
  Conv3dSpec spec_;
  bool input_grad_ = true;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Tensor x_;  // forward input (in the conv class's type), kept for the weight gradient
  Tensor w_;  // the weight in that type
  DType input_dtype_ = DType::f32;
  Tensor no_bias_grad_;
};

/// 3-d transposed convolution with a cubic kernel (3D U-Net's upsampling: k = stride = 2).
/// Parameters: "weight" [I, O, k, k, k] (PyTorch's ConvTranspose3d layout; zeros here) and, by
/// default, "bias" [O]. Otherwise as Conv3d.
class ConvTranspose3d : public Layer {
 public:
  ConvTranspose3d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
                  const Conv3dSpec& spec, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  const Conv3dSpec& spec() const { return spec_; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  std::int64_t in_channels() const { return in_channels_; }
  std::int64_t out_channels() const { return out_channels_; }
  void set_input_grad(bool on) { input_grad_ = on; }

 private:
  std::int64_t in_channels_, out_channels_;
  Conv3dSpec spec_;
  bool input_grad_ = true;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Tensor x_;
  Tensor w_;
  DType input_dtype_ = DType::f32;
  Tensor no_bias_grad_;
};

}  // namespace benchhost::nn

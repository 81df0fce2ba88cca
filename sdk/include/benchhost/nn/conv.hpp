#pragma once
/// @file nn/conv.hpp  Convolution, batch normalisation and pooling for image models, forward and
/// backward, as plain functions (llm.c style) and as nn::Layer modules.
///
/// Layout. A 4-d activation tensor is either NCHW (shape [N, C, H, W]) or NHWC (shape
/// [N, H, W, C]); the logical shape says which, and every function takes the ImageLayout so
/// nothing is guessed. Weights are always [O, I/groups, KH, KW] (PyTorch's OIHW) whatever the
/// activation layout, so weights files are interchangeable between layouts and with PyTorch.
/// Channel vectors (bias, gamma, beta, running statistics) are [C].
///
/// Backend. Every function here validates its arguments, allocates its outputs and dispatches
/// through the op registry (nn/registry.hpp) to ops named conv2d_forward, conv2d_backward_data,
/// conv2d_backward_weights, batch_norm_forward, batch_norm_backward, max_pool2d_forward,
/// max_pool2d_backward, avg_pool2d_forward, avg_pool2d_backward. CPU implementations: oneDNN
/// primitives (OpenMP runtime, threads = omp_get_max_threads()), each built once per distinct
/// (op, shapes, parameters) and cached (Note [Primitive cache] in sdk/src/nn/cpu/conv_dnnl.hpp),
/// and plain-loop references (sdk/src/nn/cpu/conv_reference.cpp) that the parity test and the
/// unit tests compare against. CUDA implementations (sdk/src/nn/cuda/: cuDNN convolutions, our
/// batch-norm and pooling kernels) take CUDA tensors; they have not yet been run on a GPU.
///
/// Precision: f32, f16 or bf16 activations (outputs in the input's dtype), fp32 accumulation and
/// statistics; other dtypes throw Unsupported. Half types run natively where an implementation
/// takes them and through f32 promotion otherwise (nn/registry.hpp).
/// Ownership: outputs are new tensors; inputs are never modified except where a function says
/// it accumulates (`+=`) into a gradient or updates running statistics.
/// Threading: the functions may be called from several threads (the primitive cache is locked);
/// layers are not thread-safe (one training thread, like every nn::Module).
/// Errors: a shape, layout or parameter mismatch throws InvalidArgument naming the op and shapes.

#include <cstdint>
#include <string>

#include "benchhost/nn/module.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn {

/// Memory layout of a 4-d activation tensor.
enum class ImageLayout { nchw, nhwc };

const char* image_layout_name(ImageLayout layout);
/// "nchw" / "nhwc" (case-insensitive); throws InvalidArgument otherwise.
ImageLayout parse_image_layout(const std::string& text);

/// Logical dimensions of an activation tensor, independent of layout.
struct ImageDims {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
};
/// Read N, C, H, W from a 4-d tensor shape in `layout`; throws InvalidArgument if not 4-d.
ImageDims image_dims(const Shape& shape, ImageLayout layout, const char* what);
/// The shape of an activation tensor with these dimensions in `layout`.
Shape image_shape(const ImageDims& d, ImageLayout layout);

// ============================================================================================
// Convolution
// ============================================================================================

/// Geometry of a 2-d convolution. Padding is symmetric (PyTorch's padding=(pad_h, pad_w)).
struct Conv2dSpec {
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;  ///< 1 = dense
  std::int64_t groups = 1;
  ImageLayout layout = ImageLayout::nchw;
};

/// Output shape of conv2d for input shape `x` and weight shape `w` ([O, I/g, KH, KW]).
/// Throws InvalidArgument if the shapes do not agree or the output would be empty.
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dSpec& spec);

/// y = conv(x, w) + bias. `bias` may be undefined (no bias); otherwise [O].
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dSpec& spec);

/// dx from dy (shape of the forward output) and w; `x_shape` is the forward input's shape.
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2dSpec& spec);

/// Weight (and bias) gradients. Accumulates: dw += dL/dw, dbias += dL/dbias (dbias may be
/// undefined when the convolution has no bias). dw has the weight's shape [O, I/g, KH, KW].
void conv2d_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& dbias,
                             const Conv2dSpec& spec);

/// Multiply-accumulates of one forward pass for one sample (for FLOPs accounting: 2 FLOPs each).
double conv2d_macs_per_sample(const Shape& x, const Shape& w, const Conv2dSpec& spec);

// ============================================================================================
// Transposed convolution (PyTorch ConvTranspose2d: output_padding 0, dilation 1, groups 1)
// ============================================================================================
//
// Mask R-CNN's mask head upsamples 14x14 RoI features to 28x28 with ConvTranspose2d(256, 256,
// kernel 2, stride 2). The weight is PyTorch's [I, O, KH, KW] (in_channels first); the output
// size per dimension is (in - 1) * stride - 2 * pad + k. The spec's dilation and groups must be
// 1 (InvalidArgument otherwise). Ops: conv_transpose2d_forward, conv_transpose2d_backward_data,
// conv_transpose2d_backward_weights; each implementation runs the 3-d transposed convolution's
// (nn/conv3d.hpp: oneDNN deconvolution, cuDNN, plain reference) on the same memory seen with a
// depth of 1 (Note [2-d transposed convolution as 3-d] in sdk/src/nn/conv_transpose2d_common.hpp).

/// Output shape for input `x` ([N, I, H, W] or NHWC) and weight `w` ([I, O, KH, KW]). Throws
/// InvalidArgument if the shapes do not agree or the output would be empty.
Shape conv_transpose2d_output_shape(const Shape& x, const Shape& w, const Conv2dSpec& spec);

/// y = conv_transpose(x, w) + bias. `bias` may be undefined; otherwise [O] (= w's dim 1).
Tensor conv_transpose2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                const Conv2dSpec& spec);

/// dx from dy (shape of the forward output) and w; `x_shape` is the forward input's shape.
Tensor conv_transpose2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                      const Conv2dSpec& spec);

/// Accumulates dw += dL/dw ([I, O, KH, KW]) and dbias += dL/dbias ([O], may be undefined).
void conv_transpose2d_backward_weights(const Tensor& dy, const Tensor& x, Tensor& dw,
                                       Tensor& dbias, const Conv2dSpec& spec);

/// Multiply-accumulates of one forward pass for one sample (each input element times each
/// weight of its input channel).
double conv_transpose2d_macs_per_sample(const Shape& x, const Shape& w, const Conv2dSpec& spec);

// ============================================================================================
// Batch normalisation (per channel, over N, H, W)
// ============================================================================================

struct BatchNormSpec {
  double eps = 1e-5;
  /// running = (1 - momentum) * running + momentum * batch (PyTorch's convention); the running
  /// variance uses the unbiased batch variance (n / (n - 1)), like PyTorch.
  double momentum = 0.1;
  /// Apply ReLU to the output inside the same primitive (oneDNN fuse_norm_relu): saves a pass
  /// over the activations forward and backward.
  bool fuse_relu = false;
  ImageLayout layout = ImageLayout::nchw;
};

/// What the backward pass of a batch norm needs from its forward pass.
struct BatchNormSaved {
  Tensor mean;      ///< [C] the mean that normalised the batch (batch or running)
  Tensor variance;  ///< [C] the variance that normalised the batch (biased batch, or running)
  Tensor output;    ///< the post-ReLU output when fuse_relu (its sign is the ReLU mask)
  bool training = true;  ///< false: statistics were frozen (running), gradients treat them as constants
};

/// Training mode: normalise with batch statistics, update running_mean / running_var in place
/// (both [C], f32), fill `saved` for the backward pass.
Tensor batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                Tensor& running_mean, Tensor& running_var,
                                const BatchNormSpec& spec, BatchNormSaved& saved);

/// Evaluation mode: normalise with the running statistics (not modified). If `saved` is given,
/// it is filled so that batch_norm_backward can run (gradient with frozen statistics).
Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var,
                               const BatchNormSpec& spec, BatchNormSaved* saved = nullptr);

/// dx for dy; accumulates dgamma += dL/dgamma and dbeta += dL/dbeta ([C]). `x` is the forward
/// input. With fuse_relu, dy is the gradient w.r.t. the post-ReLU output.
Tensor batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                           const BatchNormSaved& saved, const BatchNormSpec& spec,
                           Tensor& dgamma, Tensor& dbeta);

// ============================================================================================
// Pooling
// ============================================================================================

struct Pool2dSpec {
  std::int64_t kernel_h = 2, kernel_w = 2;
  std::int64_t stride_h = 2, stride_w = 2;
  std::int64_t pad_h = 0, pad_w = 0;  ///< symmetric; padding never wins a max
  /// Average pooling only: divide by the full window including padding (PyTorch's default
  /// count_include_pad=True) or only by the valid elements.
  bool count_include_pad = true;
  ImageLayout layout = ImageLayout::nchw;
};

Shape pool2d_output_shape(const Shape& x, const Pool2dSpec& spec);

/// Max pooling. Padding never wins; ties go to the first element of the window in (kh, kw)
/// order.
Tensor max_pool2d_forward(const Tensor& x, const Pool2dSpec& spec);
/// dx from dy, the forward input x and output y (the argmax is recomputed from them, so the
/// backward does not depend on an implementation-specific index format).
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& x, const Tensor& y,
                           const Pool2dSpec& spec);

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dSpec& spec);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dSpec& spec);

/// Mean over H and W: [N, C] from a 4-d tensor in `layout`.
Tensor global_avg_pool_forward(const Tensor& x, ImageLayout layout);
/// dx (shape x_shape, in `layout`) from dy [N, C].
Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape, ImageLayout layout);

// ============================================================================================
// Layers
// ============================================================================================

/// 2-d convolution. Parameters: "weight" [O, I/g, KH, KW] (Kaiming-uniform-initialised by the
/// caller through nn/init.hpp, zeros here), optional "bias" [O]. Keeps its input for backward.
/// Computes in the conv class's type of its precision policy (nn/module.hpp, Note [Layers under
/// a precision policy]); BatchNorm2d and the pooling layers keep their input's dtype.
class Conv2d : public Layer {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_h,
         std::int64_t kernel_w, const Conv2dSpec& spec, bool bias = false);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  /// The layer as a function, for a convolution applied to several inputs (a head shared by the
  /// levels of a feature pyramid) or one whose input the caller keeps anyway. apply() computes
  /// what forward() does, under the same policy, and keeps nothing. apply_backward() adds one
  /// use's weight (and bias) gradient, given that use's input x, and returns the gradient of x in
  /// x's type, or an undefined tensor when `input_grad` is false. It does not mark the gradients
  /// ready: the caller does, once every use has been differentiated.
  Tensor apply(const Tensor& x) const;
  Tensor apply_backward(const Tensor& dy, const Tensor& x, bool input_grad);
  const Conv2dSpec& spec() const { return spec_; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  std::int64_t in_channels() const { return in_channels_; }
  std::int64_t out_channels() const { return out_channels_; }
  /// The first layer of a network needs no input gradient: backward() then skips the
  /// backward-data convolution and returns an undefined tensor.
  void set_input_grad(bool on) { input_grad_ = on; }

 private:
  std::int64_t in_channels_, out_channels_;
  Conv2dSpec spec_;
  bool input_grad_ = true;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Tensor x_;  // forward input (in the conv class's type), kept for the weight gradient
  Tensor w_;  // the weight in that type (Note [Layers under a precision policy])
  DType input_dtype_ = DType::f32;
  Tensor no_bias_grad_;
};

/// 2-d transposed convolution (Mask R-CNN's mask-head upsampling: k = stride = 2). Parameters:
/// "weight" [I, O, KH, KW] (PyTorch's ConvTranspose2d layout; zeros here, the caller
/// initialises it) and, by default, "bias" [O] (zeros, no weight decay). Keeps its input for
/// backward; computes in the conv class's type of its precision policy, like Conv2d.
class ConvTranspose2d : public Layer {
 public:
  ConvTranspose2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_h,
                  std::int64_t kernel_w, const Conv2dSpec& spec, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  const Conv2dSpec& spec() const { return spec_; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  std::int64_t in_channels() const { return in_channels_; }
  std::int64_t out_channels() const { return out_channels_; }
  void set_input_grad(bool on) { input_grad_ = on; }

 private:
  std::int64_t in_channels_, out_channels_;
  Conv2dSpec spec_;
  bool input_grad_ = true;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Tensor x_;
  Tensor w_;
  DType input_dtype_ = DType::f32;
  Tensor no_bias_grad_;
};

/// Batch normalisation over channels. Parameters "weight" (gamma, ones) and "bias" (beta,
/// zeros), both excluded from weight decay; buffers "running_mean" (zeros) and "running_var"
/// (ones). Uses batch statistics in training mode and running statistics in eval mode; a
/// forward pass in eval mode is inference only (backward() after it throws InvalidArgument; the
/// functional batch_norm_forward_eval with `saved` supports frozen-statistics gradients).
class BatchNorm2d : public Layer {
 public:
  BatchNorm2d(std::int64_t channels, const BatchNormSpec& spec);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  const BatchNormSpec& spec() const { return spec_; }
  Parameter& gamma() { return *gamma_; }
  Parameter& beta() { return *beta_; }
  Tensor& running_mean() { return *running_mean_; }
  Tensor& running_var() { return *running_var_; }

 private:
  std::int64_t channels_;
  BatchNormSpec spec_;
  Parameter* gamma_ = nullptr;
  Parameter* beta_ = nullptr;
  Tensor* running_mean_ = nullptr;
  Tensor* running_var_ = nullptr;
  Tensor x_;
  BatchNormSaved saved_;
};

class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(const Pool2dSpec& spec) : spec_(spec) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Pool2dSpec spec_;
  Tensor x_, y_;
};

class AvgPool2d : public Layer {
 public:
  explicit AvgPool2d(const Pool2dSpec& spec) : spec_(spec) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Pool2dSpec spec_;
  Shape x_shape_;
};

/// [N, C, H, W] (or NHWC) -> [N, C]: the head of a ResNet.
class GlobalAvgPool : public Layer {
 public:
  explicit GlobalAvgPool(ImageLayout layout) : layout_(layout) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  ImageLayout layout_;
  Shape x_shape_;
};

}  // namespace benchhost::nn

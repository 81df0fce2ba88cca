#pragma once
/// @file nn/layers.hpp  The common layers: Linear, LayerNorm, Embedding, Dropout, activations and
/// multi-head attention, each with an explicit backward (see nn/module.hpp
/// Note [Modules and backward]).
///
/// Each layer keeps what its backward needs from the LAST forward() call, so the sequence is
/// forward, forward, ..., backward in reverse order, once per step. A layer used twice in one
/// step needs two instances. backward() accumulates parameter gradients (+=) and calls
/// Parameter::mark_grad_ready() on each of its parameters once they are complete.
/// A layer keeps a handle (not a copy) to its input until backward: do not modify that tensor
/// in place in between. Identity cases (Dropout in eval mode or p == 0, activation none) return
/// their input tensor itself.
///
/// Dtypes: each layer follows its module's precision policy (nn/module.hpp, Note [Layers under
/// a precision policy]): Linear computes in the matmul class's type, LayerNorm and Embedding
/// store the norm / embedding class's type, Dropout and activations keep their input's type;
/// backward returns the input gradient in the input's dtype. Under fp32 nothing is converted.
///
/// Initial values: Linear and Embedding weights are N(0, 0.02^2) from benchhost::Rng(init_seed,
/// stream), biases zero; LayerNorm gamma 1, beta 0. Workloads that need another scheme
/// re-initialise through nn/init.hpp.
/// Not thread-safe: one training thread drives a model (ops parallelise internally).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchhost/nn/module.hpp"
#include "benchhost/nn/ops.hpp"

namespace benchhost::nn {

/// The dropout randomness of one model: the model owns one; dropout sites hold a const pointer;
/// the training loop sets `step` before each forward (Note [Dropout randomness] in ops.hpp).
struct DropoutRng {
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
};

/// y = act(x W^T + b). x: [..., in]; W: [out, in] ("weight"); b: [out] ("bias", optional,
/// weight_decay = false).
///
/// Note [fp8 Linear]
/// Under a policy whose matmul class is fp8_scaled (precision fp8, Hopper), the three products of
/// a Linear run as scaled fp8 matmuls, Transformer Engine's recipe ("delayed scaling"):
///   forward   y  = (x8 / s_x) (W8 / s_w)^T            x8 = e4m3(s_x x), W8 = e4m3(s_w W)
///   backward  dx = (dz8 / s_dz) (W8 / s_w)             dz8 = e5m2(s_dz dz)
///             dW += (dz8 / s_dz)^T (x8 / s_x)          (f32, into the fp32 master gradient)
/// Each of x, W and dz has its own Fp8DelayedScaling: a cast uses the scale computed from the
/// amax history of earlier steps, then records this step's amax (measured by the cast), so the
/// first step runs at scale 1. The bias add and activation follow in the policy's bf16 storage
/// type; dbias is summed from dz in f32. The fp8 operands are kept for backward (x8, W8: a
/// quarter of an f32 copy); the transposes the "TN" kernels need are byte copies.
/// cuBLASLt's fp8 kernels need every dim a multiple of 16: a call whose rows, in or out
/// features are not runs the bf16 path of the same policy instead and is counted
/// (fp8_scales().bf16_steps), so a report can say how much of a run was really fp8.
/// Reading each amax back costs a 4-byte device-to-host copy per cast (three per Linear per
/// step); keeping the histories on the device is a later optimisation.
class Linear : public Layer {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         Activation act = Activation::none, std::uint64_t init_seed = 0);
  ~Linear() override;
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

  /// The current fp8 scales (Note [fp8 Linear]), once a forward ran under an fp8 policy.
  struct Fp8Scales {
    float input = 1, weight = 1, grad = 1;  ///< the next casts' scale() of x, W and dy
    std::int64_t fp8_steps = 0;             ///< forwards that ran the fp8 product
    std::int64_t bf16_steps = 0;            ///< forwards that fell back (dims not multiples of 16)
  };
  std::optional<Fp8Scales> fp8_scales() const;

  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }
  /// The first layer of a network needs no input gradient: backward() then skips the dx product
  /// and returns an undefined tensor (as Conv2d::set_input_grad).
  void set_input_grad(bool on) { input_grad_ = on; }

 private:
  std::int64_t in_, out_;
  Activation act_;
  bool input_grad_ = true;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Tensor x_, w_, preact_;  // the input, weight and pre-activation in the matmul's type
  DType input_dtype_ = DType::f32;
  struct Fp8State;
  std::unique_ptr<Fp8State> fp8_;  // created by the first forward under an fp8 policy
  Tensor forward_fp8(const Tensor& x);
  Tensor backward_fp8(const Tensor& dy);
};

/// Layers applied in order; backward() runs their backward passes in reverse and returns the
/// first layer's input gradient. Children are named "0", "1", ... (their parameters "0.weight",
/// ...), so parameters(), to(), set_precision() and train() reach them. A layer in the middle that
/// returns no input gradient (set_input_grad(false)) is an error: the layers before it need one.
///   Sequential mlp;
///   mlp.add(std::make_unique<Linear>(784, 128, true, Activation::relu, seed)).set_input_grad(false);
///   mlp.add(std::make_unique<Linear>(128, 10, true, Activation::none, seed + 1));
class Sequential : public Layer {
 public:
  /// Appends `layer` and returns it, for further settings.
  template <class L>
  L& add(std::unique_ptr<L> layer) {
    L& ref = register_module(std::to_string(layers_.size()), std::move(layer));
    layers_.push_back(&ref);
    return ref;
  }
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::size_t size() const { return layers_.size(); }
  Layer& operator[](std::size_t i) { return *layers_.at(i); }

 private:
  std::vector<Layer*> layers_;
};

/// LayerNorm over the last dim: "weight" (gamma) and "bias" (beta), both weight_decay = false.
class LayerNorm : public Layer {
 public:
  explicit LayerNorm(std::int64_t features, float eps = 1e-5f);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  Parameter& weight() { return *gamma_; }
  Parameter& bias() { return *beta_; }

 private:
  float eps_;
  Parameter* gamma_ = nullptr;
  Parameter* beta_ = nullptr;
  Tensor x_;
  LayerNormSaved saved_;
};

/// Token embedding: ids (i32/i64, any shape) -> [..., dim]. "weight" [num, dim].
/// With sparse_grad, backward fills weight.sparse_rows and only those rows of weight.grad
/// (accumulating into the dense grad buffer at those rows).
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t dim, bool sparse_grad = false,
            std::uint64_t init_seed = 0);
  Tensor forward(const Tensor& ids);
  void backward(const Tensor& dy);
  Parameter& weight() { return *weight_; }

 private:
  std::int64_t num_, dim_;
  bool sparse_;
  Parameter* weight_ = nullptr;
  Tensor ids_;
};

/// Inverted dropout; identity in eval mode or when p == 0. `rng` must outlive the layer.
class Dropout : public Layer {
 public:
  Dropout(float p, const DropoutRng* rng, std::uint64_t stream_id);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  float p() const { return p_; }

 private:
  float p_;
  const DropoutRng* rng_;
  std::uint64_t stream_id_;
  DropoutSaved saved_;
  bool active_ = false;
};

/// A parameter-free activation as a layer.
class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(Activation act) : act_(act) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;

 private:
  Activation act_;
  Tensor x_;
};

/// Multi-head self-attention: fused QKV projection ("qkv": Linear(C, 3C)), scaled dot-product
/// attention with masks and attention-probability dropout, output projection ("out":
/// Linear(C, C)). x: [B, T, C] -> [B, T, C]. heads must divide C.
class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(std::int64_t hidden, std::int64_t heads, float attention_dropout,
                     const DropoutRng* rng, std::uint64_t stream_id, std::uint64_t init_seed = 0);
  Tensor forward(const Tensor& x, const AttentionMask& mask);
  Tensor backward(const Tensor& dy);
  Linear& qkv() { return *qkv_; }
  Linear& out() { return *out_; }
  std::int64_t heads() const { return heads_; }

 private:
  std::int64_t hidden_, heads_;
  float attn_dropout_;
  const DropoutRng* rng_;
  std::uint64_t stream_id_;
  Linear* qkv_ = nullptr;
  Linear* out_ = nullptr;
  Tensor q_, k_, v_;  // [B, H, T, D] contiguous
  AttentionSaved saved_;
  Shape x_shape_;
};

}  // namespace benchhost::nn

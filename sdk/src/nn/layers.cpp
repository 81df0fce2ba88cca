// Linear, LayerNorm, Embedding, Dropout, ActivationLayer, MultiHeadAttention (nn/layers.hpp).

#include "benchhost/nn/layers.hpp"

#include <algorithm>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/random.hpp"

namespace benchhost::nn {

namespace {

Tensor normal_init(const Shape& shape, std::uint64_t seed, std::uint64_t stream, float stddev) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Rng rng(seed, stream);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.normal(0.0f, stddev);
  return t;
}

constexpr float kInitStd = 0.02f;

}  // namespace

// ---- Linear ----

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias, Activation act,
               std::uint64_t init_seed)
    : in_(in_features), out_(out_features), act_(act) {
  BH_CHECK_AS(InvalidArgument, in_features > 0 && out_features > 0,
              "Linear needs positive sizes, got in={} out={}", in_features, out_features);
  weight_ = &register_parameter("weight", normal_init({out_, in_}, init_seed, 0x4c494e, kInitStd));
  if (bias) bias_ = &register_parameter("bias", Tensor::zeros({out_}), /*weight_decay=*/false);
}

// Note [fp8 Linear] (layers.hpp).
struct Linear::Fp8State {
  explicit Fp8State(const Fp8Options& o)
      : x(o.forward, o), w(o.forward, o), dy(o.backward, o) {}
  Fp8DelayedScaling x, w, dy;
  Tensor x8, w8;                  // the forward's fp8 operands, kept for backward
  Tensor x_scale_inv, w_scale_inv;  // f32 [1] on the device: the scales those casts used
  Shape x_shape;
  bool active = false;            // the last forward ran the fp8 product
  std::int64_t fp8_steps = 0, bf16_steps = 0;
};

Linear::~Linear() = default;

namespace {

// Cast `t` to fp8 with s.scale() and record the amax the cast measured; returns the fp8 tensor
// and sets *scale_inv to the f32 [1] device scalar the product must multiply back by.
Tensor cast_fp8_recording(const Tensor& t, Fp8DelayedScaling& s, Tensor* scale_inv) {
  const Device dev = t.device();
  *scale_inv = Tensor::full({1}, s.scale_inv(), DType::f32, dev);
  Tensor amax;
  Tensor q = fp8_cast_scaled(t, Tensor::full({1}, s.scale(), DType::f32, dev), s.type(), &amax);
  s.record_amax(amax.to(Device::cpu()).data<float>()[0]);
  return q;
}

bool fp8_shapes(std::int64_t rows, std::int64_t in, std::int64_t out) {
  return rows > 0 && rows % 16 == 0 && in % 16 == 0 && out % 16 == 0;
}

}  // namespace

std::optional<Linear::Fp8Scales> Linear::fp8_scales() const {
  if (!fp8_) return std::nullopt;
  return Fp8Scales{fp8_->x.scale(), fp8_->w.scale(), fp8_->dy.scale(), fp8_->fp8_steps, fp8_->bf16_steps};
}

Tensor Linear::forward_fp8(const Tensor& x) {
  Fp8State& f = *fp8_;
  const DType h = precision().storage_dtype(OpClass::matmul);
  input_dtype_ = x.dtype();
  f.x_shape = x.shape();
  Tensor x2 = x.contiguous().reshape({-1, in_});
  f.x8 = cast_fp8_recording(x2, f.x, &f.x_scale_inv);
  f.w8 = cast_fp8_recording(weight_->value, f.w, &f.w_scale_inv);
  Tensor z = matmul_fp8(f.x8, f.w8, f.x_scale_inv, f.w_scale_inv, h);
  if (bias_) z = add(z, bias_->value);
  Shape y_shape = f.x_shape;
  y_shape.back() = out_;
  if (act_ == Activation::none) return z.view(y_shape);
  preact_ = z;
  return activation_forward(z, act_).view(y_shape);
}

Tensor Linear::backward_fp8(const Tensor& dy) {
  Fp8State& f = *fp8_;
  BH_CHECK_AS(InvalidArgument, f.x8.defined(), "Linear::backward called before forward");
  const DType h = precision().storage_dtype(OpClass::matmul);
  Tensor dy2 = cast(dy, h).contiguous().reshape({-1, out_});
  Tensor dz = act_ == Activation::none ? dy2 : activation_backward(dy2, preact_, act_);
  Tensor dz_scale_inv;
  Tensor dz8 = cast_fp8_recording(dz, f.dy, &dz_scale_inv);
  // dx [rows, in] = dz [rows, out] @ W [out, in]: the TN kernel takes W^T [in, out].
  Tensor dx = input_grad_ ? matmul_fp8(dz8, transpose_copy(f.w8, 0, 1), dz_scale_inv, f.w_scale_inv, h) : Tensor{};
  // dW [out, in] = dz^T [out, rows] @ x [rows, in]: the TN kernel takes x^T [in, rows].
  if (weight_->grad.defined())
    add_(weight_->grad, matmul_fp8(transpose_copy(dz8, 0, 1), transpose_copy(f.x8, 0, 1), dz_scale_inv,
                                   f.x_scale_inv, DType::f32));
  if (bias_ && bias_->grad.defined()) {
    OpCall c{{dz}, {bias_->grad}, Attrs().set("accumulate", 1)};
    dispatch("bias_backward", c);
  }
  weight_->mark_grad_ready();
  if (bias_) bias_->mark_grad_ready();
  preact_ = f.x8 = f.w8 = f.x_scale_inv = f.w_scale_inv = Tensor{};
  f.active = false;
  return dx.defined() ? cast(dx, input_dtype_).view(f.x_shape) : dx;
}

Tensor Linear::forward(const Tensor& x) {
  const OpPrecision& mm = precision().op(OpClass::matmul);
  if (mm.fp8_scaled) {
    if (!fp8_) fp8_ = std::make_unique<Fp8State>(precision().fp8_options());
    fp8_->active = fp8_shapes(x.numel() / in_, in_, out_);
    ++(fp8_->active ? fp8_->fp8_steps : fp8_->bf16_steps);
    if (fp8_->active) return forward_fp8(x);
  }
  // Note [Layers under a precision policy]: the product runs in the matmul class's type on a
  // copy of the fp32 master weight, kept for backward (as torch.autocast's weight cache does).
  const DType h = mm.storage;
  input_dtype_ = x.dtype();
  x_ = cast(x, h);
  w_ = cast(weight_->value, h);
  return linear_forward(x_, w_, bias_ ? bias_->value : Tensor{}, act_,
                        act_ == Activation::none ? nullptr : &preact_);
}

Tensor Linear::backward(const Tensor& dy) {
  if (fp8_ && fp8_->active) return backward_fp8(dy);
  BH_CHECK_AS(InvalidArgument, x_.defined(), "Linear::backward called before forward");
  Tensor none;
  Tensor dx = linear_backward(cast(dy, x_.dtype()), x_, w_, preact_, act_, weight_->grad,
                              bias_ ? bias_->grad : none, input_grad_);
  weight_->mark_grad_ready();
  if (bias_) bias_->mark_grad_ready();
  x_ = w_ = preact_ = Tensor{};
  return dx.defined() ? cast(dx, input_dtype_) : dx;
}

// ---- Sequential ----

Tensor Sequential::forward(const Tensor& x) {
  BH_CHECK_AS(InvalidArgument, !layers_.empty(), "Sequential::forward with no layers");
  Tensor y = layers_.front()->forward(x);
  for (std::size_t i = 1; i < layers_.size(); ++i) y = layers_[i]->forward(y);
  return y;
}

Tensor Sequential::backward(const Tensor& dy) {
  Tensor g = dy;
  for (std::size_t i = layers_.size(); i-- > 0;) {
    BH_CHECK_AS(InvalidArgument, g.defined(),
                "Sequential::backward: layer {} returned no input gradient (set_input_grad(false)), but layer {} "
                "before it needs one",
                i + 1, i);
    g = layers_[i]->backward(g);
  }
  return g;
}

// ---- LayerNorm ----

LayerNorm::LayerNorm(std::int64_t features, float eps) : eps_(eps) {
  BH_CHECK_AS(InvalidArgument, features > 0, "LayerNorm needs a positive size, got {}", features);
  gamma_ = &register_parameter("weight", Tensor::full({features}, 1.0), false);
  beta_ = &register_parameter("bias", Tensor::zeros({features}), false);
}

Tensor LayerNorm::forward(const Tensor& x) {
  x_ = x;
  return cast(layernorm_forward(x, gamma_->value, beta_->value, eps_, &saved_),
              precision().storage_dtype(OpClass::norm));
}

Tensor LayerNorm::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, x_.defined(), "LayerNorm::backward called before forward");
  Tensor dx = layernorm_backward(dy, x_, gamma_->value, saved_, gamma_->grad, beta_->grad);
  gamma_->mark_grad_ready();
  beta_->mark_grad_ready();
  x_ = Tensor{};
  return dx;
}

// ---- Embedding ----

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t dim, bool sparse_grad,
                     std::uint64_t init_seed)
    : num_(num_embeddings), dim_(dim), sparse_(sparse_grad) {
  BH_CHECK_AS(InvalidArgument, num_embeddings > 0 && dim > 0,
              "Embedding needs positive sizes, got {} x {}", num_embeddings, dim);
  weight_ = &register_parameter("weight", normal_init({num_, dim_}, init_seed, 0x454d42, kInitStd));
}

Tensor Embedding::forward(const Tensor& ids) {
  ids_ = ids;
  return cast(embedding_forward(ids, weight_->value), precision().storage_dtype(OpClass::embedding));
}

void Embedding::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, ids_.defined(), "Embedding::backward called before forward");
  if (!sparse_) {
    embedding_backward(dy, ids_, weight_->grad);
  } else {
    SparseRows sr = embedding_backward_sparse(dy, ids_, num_);
    // Accumulate the rows into the dense buffer and extend the row set (union, sorted).
    embedding_backward(sr.grad, sr.rows, weight_->grad);
    if (weight_->sparse_rows.defined()) {
      Tensor old = weight_->sparse_rows.to(Device::cpu());
      Tensor add = sr.rows.to(Device::cpu());
      std::vector<std::int64_t> u(old.data<std::int64_t>(), old.data<std::int64_t>() + old.numel());
      u.insert(u.end(), add.data<std::int64_t>(), add.data<std::int64_t>() + add.numel());
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
      weight_->sparse_rows = Tensor::from_vector_i64(u, {static_cast<std::int64_t>(u.size())},
                                                     weight_->grad.device());
    } else {
      weight_->sparse_rows = sr.rows;
    }
  }
  weight_->mark_grad_ready();
  ids_ = Tensor{};
}

// ---- Dropout ----

Dropout::Dropout(float p, const DropoutRng* rng, std::uint64_t stream_id)
    : p_(p), rng_(rng), stream_id_(stream_id) {
  BH_CHECK_AS(InvalidArgument, p >= 0.0f && p < 1.0f, "dropout probability must be in [0, 1), got {}", p);
  BH_CHECK_AS(InvalidArgument, p == 0.0f || rng != nullptr, "Dropout with p={} needs a DropoutRng", p);
}

Tensor Dropout::forward(const Tensor& x) {
  active_ = is_training() && p_ > 0.0f;
  if (!active_) return x;
  return dropout_forward(x, p_, rng_->seed, rng_->step, stream_id_, &saved_);
}

Tensor Dropout::backward(const Tensor& dy) {
  if (!active_) return dy;
  Tensor dx = dropout_backward(dy, saved_);
  saved_ = DropoutSaved{};
  return dx;
}

// ---- ActivationLayer ----

Tensor ActivationLayer::forward(const Tensor& x) {
  x_ = x;
  return activation_forward(x, act_);
}

Tensor ActivationLayer::backward(const Tensor& dy) {
  Tensor dx = activation_backward(dy, x_, act_);
  x_ = Tensor{};
  return dx;
}

// ---- MultiHeadAttention ----

MultiHeadAttention::MultiHeadAttention(std::int64_t hidden, std::int64_t heads,
                                       float attention_dropout, const DropoutRng* rng,
                                       std::uint64_t stream_id, std::uint64_t init_seed)
    : hidden_(hidden), heads_(heads), attn_dropout_(attention_dropout), rng_(rng),
      stream_id_(stream_id) {
  BH_CHECK_AS(InvalidArgument, heads > 0 && hidden % heads == 0,
              "MultiHeadAttention: {} heads must divide hidden size {}", heads, hidden);
  BH_CHECK_AS(InvalidArgument, attention_dropout == 0.0f || rng != nullptr,
              "MultiHeadAttention with dropout {} needs a DropoutRng", attention_dropout);
  qkv_ = &register_module("qkv", std::make_unique<Linear>(hidden, 3 * hidden, true, Activation::none,
                                                          mix64(init_seed ^ 0x71)));
  out_ = &register_module("out", std::make_unique<Linear>(hidden, hidden, true, Activation::none,
                                                          mix64(init_seed ^ 0x72)));
}

Tensor MultiHeadAttention::forward(const Tensor& x, const AttentionMask& mask) {
  BH_CHECK_AS(InvalidArgument, x.dim() == 3 && x.size(2) == hidden_,
              "MultiHeadAttention expects x [B, T, {}], got {}", hidden_, shape_str(x.shape()));
  x_shape_ = x.shape();
  const std::int64_t B = x.size(0), T = x.size(1), D = hidden_ / heads_;
  Tensor qkv = qkv_->forward(x).view({B, T, 3, heads_, D});
  Tensor qkv_h = permute_copy(qkv, {2, 0, 3, 1, 4});  // [3, B, H, T, D]
  q_ = qkv_h.select(0, 0);
  k_ = qkv_h.select(0, 1);
  v_ = qkv_h.select(0, 2);
  const bool drop = is_training() && attn_dropout_ > 0.0f;
  Tensor o = sdpa_forward(q_, k_, v_, mask, 0.0f, &saved_, drop ? attn_dropout_ : 0.0f,
                          drop ? rng_->seed : 0, drop ? rng_->step : 0, stream_id_);
  Tensor merged = permute_copy(o, {0, 2, 1, 3}).view({B, T, hidden_});  // [B, T, H*D]
  return out_->forward(merged);
}

Tensor MultiHeadAttention::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, q_.defined(), "MultiHeadAttention::backward called before forward");
  const std::int64_t B = x_shape_[0], T = x_shape_[1], D = hidden_ / heads_;
  Tensor dmerged = out_->backward(dy).view({B, T, heads_, D});
  Tensor dout = permute_copy(dmerged, {0, 2, 1, 3});  // [B, H, T, D]
  AttentionGrads g = sdpa_backward(dout, q_, k_, v_, saved_, 0.0f);
  Tensor dqkv_h = concat({g.dq.unsqueeze(0), g.dk.unsqueeze(0), g.dv.unsqueeze(0)}, 0);  // [3, B, H, T, D]
  Tensor dqkv = permute_copy(dqkv_h, {1, 3, 0, 2, 4}).view({B, T, 3 * hidden_});
  q_ = k_ = v_ = Tensor{};
  saved_ = AttentionSaved{};
  return qkv_->backward(dqkv);
}

}  // namespace benchhost::nn

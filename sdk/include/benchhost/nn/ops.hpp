#pragma once
/// @file nn/ops.hpp  Tensor-level nn ops with explicit backward passes.
///
/// Every function here builds an OpCall and dispatches it through the op registry
/// (nn/registry.hpp) to the first implementation that accepts it on the inputs' device: on the
/// CPU oneDNN where it has the primitive (matmul), oneTBB-parallel code elsewhere, and a
/// plain-loop reference last. The op name used for dispatch is given with each function.
///
/// Conventions (llm.c style, see nn/module.hpp Note [Modules and backward]):
/// - Inputs must be on one device; outputs are allocated on it, contiguous.
/// - Compute is fp32 (accumulation in fp32, or fp64 where noted). Floating tensors may be f32,
///   f16 or bf16, and one call may mix them (bf16 activations, f32 weights and gradient
///   buffers): an implementation that handles the combination natively runs it, otherwise the
///   call is computed in f32 and its f16/bf16 outputs rounded once (registry.hpp, Note
///   [Half-precision promotion]). Outputs take the dtype of the tensor they stand for (y and dx
///   that of x, dy's for gradients); saved statistics (LayerNormSaved, AttentionSaved::probs,
///   CrossEntropyResult::log_probs) and losses are f32. Which dtype activations have is the
///   precision policy's decision (precision.hpp), made by the layers (nn/layers.hpp).
/// - `*_forward` returns what the matching `*_backward` needs (saved statistics, masks).
/// - Backward functions that take `Tensor& d<param>` ACCUMULATE into it (+=), so a parameter
///   used twice sums its gradients; pass an undefined Tensor to skip that gradient. Gradients
///   with respect to inputs are returned fresh.
/// - Shape errors throw InvalidArgument naming the op and the shapes.
/// Threading: each call may use all threads configured through benchhost/threading.hpp; calls
/// from several threads at once are allowed (each is internally parallel).

#include <cstdint>
#include <vector>

#include "benchhost/tensor.hpp"

namespace benchhost::nn {

// ================================================================================================
// Activations
// ================================================================================================

/// Note [GELU flavour]
/// BERT (Google's reference and MLPerf's) uses the exact erf GELU; GPT-2/GPT-3 use the tanh
/// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Both are provided; the
/// TransformerBlock defaults to gelu_erf and GPT-3 selects gelu_tanh.
enum class Activation : std::uint8_t { none, relu, gelu_erf, gelu_tanh, sigmoid, tanh };
const char* activation_name(Activation a) noexcept;

/// y = act(x). Op "activation_forward" (attr act). Activation::none returns x itself (no copy).
Tensor activation_forward(const Tensor& x, Activation act);
/// dx = dy * act'(x). Takes the activation's INPUT x. Op "activation_backward". none returns dy.
Tensor activation_backward(const Tensor& dy, const Tensor& x, Activation act);

inline Tensor relu(const Tensor& x) { return activation_forward(x, Activation::relu); }
inline Tensor gelu(const Tensor& x, bool tanh_approx = false) {
  return activation_forward(x, tanh_approx ? Activation::gelu_tanh : Activation::gelu_erf);
}
inline Tensor sigmoid(const Tensor& x) { return activation_forward(x, Activation::sigmoid); }
inline Tensor tanh_activation(const Tensor& x) { return activation_forward(x, Activation::tanh); }

// ================================================================================================
// Matmul and linear
// ================================================================================================

/// c = alpha * op(a) @ op(b) (+ c if accumulate), op = transpose of the last two dims if asked.
/// a: [..., M, K] (or [..., K, M] with trans_a), b: [..., K, N] (or [..., N, K] with trans_b);
/// leading (batch) dims must be equal, or b may have none (broadcast). Inputs may be strided
/// views whose last two dims have a unit stride in one of them (a transpose view is fine).
/// Op "matmul" (attrs trans_a, trans_b, alpha, accumulate). CPU: oneDNN matmul, cached by shape.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              float alpha = 1.0f);
/// Same, into an existing c (shape [..., M, N], contiguous); accumulate adds to c.
void matmul_into(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a = false,
                 bool trans_b = false, float alpha = 1.0f, bool accumulate = false);

/// Gradients of c = a @ b (no transposes): da = dc @ b^T, db = a^T @ dc (batch-summed when b
/// was broadcast). Either may be skipped by passing undefined; both ACCUMULATE.
void matmul_backward(const Tensor& dc, const Tensor& a, const Tensor& b, Tensor& da, Tensor& db);

/// y = act(x @ w^T + bias). x: [..., in], w: [out, in] (PyTorch layout), bias: [out] or undefined.
/// If `preact` is non-null, *preact receives z = x @ w^T + bias (needed by linear_backward for
/// act != none and relu/gelu/...); then the activation runs as a separate pass. If null, the
/// activation is fused into the oneDNN matmul as a post-op (inference path).
/// Op "linear_forward" (attr act) and, when split, "activation_forward".
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                      Activation act = Activation::none, Tensor* preact = nullptr);
/// Backward of linear_forward. dy: gradient w.r.t. y. preact: z saved by forward (ignored when
/// act == none). Returns dx; dw += dz^T x, dbias += sum(dz). Pass undefined dw/dbias to skip.
/// With input_grad false, dx is not computed and an undefined tensor is returned.
Tensor linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& preact,
                       Activation act, Tensor& dw, Tensor& dbias, bool input_grad = true);

// ================================================================================================
// Normalisation
// ================================================================================================

/// What layernorm_forward saves for its backward.
struct LayerNormSaved {
  Tensor mean;  ///< f32 [rows]
  Tensor rstd;  ///< f32 [rows], 1 / sqrt(var + eps)
};
/// y = (x - mean) * rstd * gamma + beta over the last dim. x: [..., C]; gamma, beta: [C]
/// (beta may be undefined). Op "layernorm_forward" (attr eps).
Tensor layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         LayerNormSaved* saved = nullptr);
/// Returns dx; dgamma += ..., dbeta += .... Op "layernorm_backward".
Tensor layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                          const LayerNormSaved& saved, Tensor& dgamma, Tensor& dbeta);

// ================================================================================================
// Softmax
// ================================================================================================

/// Softmax over the last dim. Op "softmax_forward".
Tensor softmax_forward(const Tensor& x);
/// dx = y * (dy - sum(dy * y)). Takes the softmax OUTPUT y. Op "softmax_backward".
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
/// log softmax over the last dim. Op "log_softmax_forward".
Tensor log_softmax_forward(const Tensor& x);
/// dx = dy - exp(y) * sum(dy). Takes the OUTPUT y. Op "log_softmax_backward".
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);

// ================================================================================================
// Dropout
// ================================================================================================

/// Note [Dropout randomness]
/// The keep decision for element i is uniform_at(i) >= p of benchhost::Rng(seed, stream) with
/// stream = mix64(step) ^ stream_id: a pure function of (seed, step, stream_id, i), independent
/// of thread count, chunking and device. Callers give every dropout site its own stream_id
/// (e.g. layer index * 16 + site). Kept elements are scaled by 1 / (1 - p).
struct DropoutSaved {
  Tensor mask;  ///< u8, same shape as x: 1 kept, 0 dropped
  float p = 0;
};
/// Op "dropout_forward" (attrs p, seed, step, stream). p == 0 returns x (no copy, mask undefined).
Tensor dropout_forward(const Tensor& x, float p, std::uint64_t seed, std::uint64_t step,
                       std::uint64_t stream_id, DropoutSaved* saved);
/// Op "dropout_backward".
Tensor dropout_backward(const Tensor& dy, const DropoutSaved& saved);

// ================================================================================================
// Embedding (single index per row; multi-hot bags live in nn/embedding_bag.hpp)
// ================================================================================================

/// out[..., :] = table[ids[...], :]. ids: i32 or i64, any shape; table: [V, D].
/// Out-of-range ids throw InvalidArgument naming the id and V. Op "embedding_forward".
Tensor embedding_forward(const Tensor& ids, const Tensor& table);
/// Dense gradient: dtable[ids[i]] += dy[i]. Op "embedding_backward".
void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dtable);
/// Sparse gradient: the unique ids (i64 [n], ascending) and their summed gradient rows [n, D].
struct SparseRows {
  Tensor rows;  ///< i64 [n]
  Tensor grad;  ///< f32 [n, D]
};
/// Op "embedding_backward_sparse".
SparseRows embedding_backward_sparse(const Tensor& dy, const Tensor& ids, std::int64_t num_rows);

// ================================================================================================
// Attention
// ================================================================================================

/// Masks for scaled dot-product attention; all optional and combinable.
struct AttentionMask {
  bool causal = false;  ///< key j visible from query i only if j <= i (+ the S - T offset)
  /// Key padding: i32/i64 [B] valid lengths (keys >= length masked), or u8/bool [B, S] with
  /// 1 = keep, 0 = masked.
  Tensor key_padding;
  /// Arbitrary mask for packed sequences (block-diagonal): u8/bool [B, T, S] (1 = keep) or f32
  /// additive [B, T, S] / [B, H, T, S] (added to scores; use -inf/-1e4 to mask).
  Tensor mask;
};
/// What sdpa_forward saves.
struct AttentionSaved {
  Tensor probs;         ///< f32 [B, H, T, S]: softmax(scores) before dropout
  DropoutSaved dropout; ///< attention-probability dropout (mask undefined when p == 0)
};
/// out = dropout(softmax(scale * q k^T + mask)) v. q: [B, H, T, D], k: [B, H, S, D],
/// v: [B, H, S, Dv]; out: [B, H, T, Dv]. scale <= 0 means 1/sqrt(D). A row whose keys are all
/// masked yields zeros (not NaN). Op "sdpa_forward".
Tensor sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                    float scale, AttentionSaved* saved, float dropout_p = 0.0f,
                    std::uint64_t seed = 0, std::uint64_t step = 0, std::uint64_t stream_id = 0);
/// Returns {dq, dk, dv}. Op "sdpa_backward".
struct AttentionGrads {
  Tensor dq, dk, dv;
};
AttentionGrads sdpa_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                             const Tensor& v, const AttentionSaved& saved, float scale);

// ================================================================================================
// Elementwise, shape and reductions
// ================================================================================================

/// a + b (same shape, or b broadcast over leading dims: b's shape a suffix of a's).
/// Op "add". The backward of a residual add is the identity for a (and sum_to_shape for b).
Tensor add(const Tensor& a, const Tensor& b);
/// a += b in place (same rules). Op "add".
void add_(Tensor& a, const Tensor& b, float alpha = 1.0f);
/// Sum a gradient over the leading dims so it matches `shape` (broadcast backward).
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

/// Element-wise products, all through op "addcmul" (out = c + alpha * a * b, c optional).
/// Shapes: a any shape; b equal to a's shape or a suffix of it (broadcast over a's leading dims,
/// as in add); c and the result have a's shape. Dtypes: every tensor the same, f32, or f16 /
/// bf16 storage computed in f32 (one rounding on store). Any strides in (copied to contiguous
/// first); results are new contiguous tensors on the inputs' device. Bad shapes, mixed dtypes
/// or devices, other dtypes: InvalidArgument naming them.
///
/// Backward needs no op of its own. With dy the gradient of the result:
///   y = mul(a, b):              da = mul(dy, b),  db = mul(dy, a)
///   y = addcmul(c, a, b, alpha): dc = dy,  da = alpha * mul(dy, b),  db = alpha * mul(dy, a)
/// and alpha * mul(dy, b) is one call, addcmul_(da, dy, b, alpha), on a zeroed da (or on a
/// gradient being accumulated). When b was broadcast, its gradient is summed back to its shape:
/// db = sum_to_shape(mul(dy, a), b.shape()) (times alpha for addcmul).

/// a * b element-wise (same shape, or b a suffix of a's; f32, or f16/bf16 storage computed in f32).
Tensor mul(const Tensor& a, const Tensor& b);
/// out = c + alpha * a * b element-wise (c and a the same shape, b as in mul); returns a new tensor.
Tensor addcmul(const Tensor& c, const Tensor& a, const Tensor& b, float alpha = 1.0f);
/// In place: c += alpha * a * b (c contiguous, a's shape; b as in mul). a or b may be c itself.
void addcmul_(Tensor& c, const Tensor& a, const Tensor& b, float alpha = 1.0f);

/// Concatenate along dim (same shapes elsewhere, same dtype). Op "concat".
Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim);
/// Split into pieces of `sizes` along dim (materialised copies). Op "split".
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes,
                          std::int64_t dim);
/// Materialising permute: out = x.permute(order).contiguous(). Op "permute".
/// Its backward is permute_copy(dy, inverse_permutation(order)).
Tensor permute_copy(const Tensor& x, const std::vector<std::int64_t>& order);
Tensor transpose_copy(const Tensor& x, std::int64_t a, std::int64_t b);
std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& order);
/// Materialising reshape (copies when not contiguous; contiguous x returns a view). Backward:
/// reshape back to the input shape.
Tensor reshape_copy(const Tensor& x, const Shape& shape);

/// Reductions over `dims` (negative counts from the end; empty = all dims). Ops "sum", "mean".
Tensor sum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
/// Broadcast dy back over the reduced dims (divided by the count for mean).
Tensor sum_backward(const Tensor& dy, const Shape& input_shape,
                    const std::vector<std::int64_t>& dims, bool keepdim = false);
Tensor mean_backward(const Tensor& dy, const Shape& input_shape,
                     const std::vector<std::int64_t>& dims, bool keepdim = false);
/// Max over ONE dim; also returns the arg-max (i64), which the backward scatters to. Op "amax".
/// (Named amax, not max, so unqualified std::max/std::tanh calls inside benchhost::nn still work.)
struct MaxResult {
  Tensor values, indices;
};
MaxResult amax(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor amax_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape,
                    std::int64_t dim, bool keepdim = false);

/// Convert dtype (f32 <-> f16/bf16/f64; round to nearest even). Op "cast".
Tensor cast(const Tensor& x, DType dtype);

// ================================================================================================
// fp8 (Hopper; Note [Precision policies] in precision.hpp)
// ================================================================================================

/// y = fp8(x * scale), saturating, round to nearest even; *amax (if given) receives max |x| as an
/// f32 [1] tensor on x's device, for Fp8DelayedScaling's history. x: f32/f16/bf16; scale: f32 [1]
/// on x's device; dtype: f8e4m3 (activations, weights) or f8e5m2 (gradients). Op "fp8_cast_scaled".
Tensor fp8_cast_scaled(const Tensor& x, const Tensor& scale, DType dtype, Tensor* amax = nullptr);
/// d = (a_scale_inv a) @ (b_scale_inv b)^T with f32 accumulation: a fp8 [M, K], b fp8 [N, K] (the
/// "TN" layout cuBLASLt's fp8 kernels take; at most one of them e5m2), scales f32 [1] on the
/// device. out_dtype f32, bf16 or f16 (an fp8 output needs d_scale: use the registry op directly).
/// *amax_d (if given) receives max |d|. On CUDA, cuBLASLt on sm_90+ with M, N, K multiples of 16;
/// the CPU has only the reference implementation (for tests, not a speed path). Op "matmul_fp8".
Tensor matmul_fp8(const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                  const Tensor& b_scale_inv, DType out_dtype = DType::bf16, Tensor* amax_d = nullptr);

// ================================================================================================
// Losses
// ================================================================================================

/// Softmax cross-entropy over logits [N, C] with class targets (i32/i64 [N]).
/// label_smoothing e: target distribution (1 - e) one-hot + e / C. Rows whose target equals
/// ignore_index contribute nothing; the loss is the mean over the other rows (0 if none).
struct CrossEntropyResult {
  float loss = 0;        ///< mean loss
  std::int64_t count = 0;///< rows not ignored
  Tensor log_probs;      ///< f32 [N, C], saved for backward
};
/// Op "cross_entropy_forward".
CrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                                 float label_smoothing = 0.0f,
                                                 std::int64_t ignore_index = -100);
/// dlogits for d(loss) = dloss. Op "cross_entropy_backward".
Tensor softmax_cross_entropy_backward(const CrossEntropyResult& fwd, const Tensor& targets,
                                      float label_smoothing = 0.0f,
                                      std::int64_t ignore_index = -100, float dloss = 1.0f);

/// Binary cross-entropy with logits, mean over all elements; numerically stable
/// (max(x,0) - x t + log(1 + exp(-|x|))). logits and targets f32, same shape.
/// Op "bce_with_logits_forward".
float bce_with_logits_forward(const Tensor& logits, const Tensor& targets);
/// dlogits = (sigmoid(x) - t) / n * dloss. Op "bce_with_logits_backward".
Tensor bce_with_logits_backward(const Tensor& logits, const Tensor& targets, float dloss = 1.0f);

}  // namespace benchhost::nn

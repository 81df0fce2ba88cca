#pragma once
/// @file nn/transducer.hpp  The transducer (RNN-T) loss of MLPerf's speech recognition benchmark,
/// forward and backward, and the two layout ops of its model (StackTime and the joint's broadcast
/// add), as plain functions (llm.c style).
///
/// Definition (Graves 2012; HawkAaron/warp-transducer, which the MLPerf reference calls through
/// warprnnt_pytorch.RNNTLoss(blank=1023), and torchaudio.functional.rnnt_loss). For utterance b
/// with T_b frames and U_b labels y_1..y_{U_b}, the raw joint logits z[b, t, u, :] over V classes
/// give lp(t, u, k) = z[b, t, u, k] - log sum_j exp z[b, t, u, j] (the log-softmax is fused in).
/// The alpha lattice over 0 <= t < T_b, 0 <= u <= U_b is
///   alpha(0, 0) = 0,
///   alpha(t, u) = logsumexp(alpha(t-1, u) + lp(t-1, u, blank), alpha(t, u-1) + lp(t, u-1, y_u))
/// (a term whose node is outside the lattice is left out), and the loss of the utterance is
///   -log P(y | x) = -(alpha(T_b - 1, U_b) + lp(T_b - 1, U_b, blank)).
/// Frames t >= T_b and label positions u > U_b of the padded tensors are ignored (their gradient
/// is zero). An utterance with T_b = 0 and U_b = 0 has loss 0 (the empty alignment).
///
/// Note [Transducer loss reduction]
/// reduction 'mean' is the sum of the per-utterance losses divided by the batch size B. That is
/// what warp-transducer's RNNTLoss(reduction='mean') and torchaudio's rnnt_loss(reduction='mean')
/// compute, and so what the MLPerf reference trains with; warprnnt_pytorch's docstring says the
/// losses are "divided by the target lengths", which its code does not do. 'none' gives the B
/// per-utterance losses. (There is no 'sum': a caller sums the 'none' losses.)
///
/// Note [Transducer loss saved state]
/// The forward saves the log-softmax denominators lse[b, t, u] = log sum_k exp z[b, t, u, k] and
/// the alpha lattice, each f64 [B, T, U+1] (zero outside an utterance's lattice), and keeps a
/// reference to the logits; the backward recomputes the beta lattice (beta(t, u) = log of the
/// probability of finishing from node (t, u)) into f64 [B, T, U+1] scratch, then writes
///   dz[t, u, k] = s_b * ( exp(alpha(t, u) + beta(t, u) - ll + lp(t, u, k))
///                         - [k == blank] exp(alpha(t, u) + lp(t, u, blank) + beta(t+1, u) - ll)
///                         - [k == y_{u+1}] exp(alpha(t, u) + lp(t, u, y_{u+1}) + beta(t, u+1) - ll) )
/// with ll = beta(0, 0) = log P(y | x), beta(T_b, U_b) taken as 0 (the final blank) and the blank
/// term absent at t = T_b - 1, u < U_b; s_b is the incoming gradient of utterance b (dloss[b] for
/// 'none', dloss / B for 'mean'). Memory beyond the logits and their gradient is therefore
/// 3 B T (U+1) doubles; nothing of size V is saved, and the softmax is never materialised.
///
/// Note [Transducer lattice precision]
/// The lattices are f64 on every backend. alpha, beta and ll grow like the path length times
/// log V (about -7 per step at V = 1024: -350 at T + U = 50, some -2500 at the reference's
/// longest utterances, T up to 279), and the gradient exponentiates alpha + beta - ll, a
/// difference of such numbers. In f32 each is rounded at every step of its recursion (an ulp is
/// 3e-5 at 350, 2.4e-4 at 2500) and those absolute errors become relative errors of the
/// gradient: at T = 40, U = 10, V = 1024, torchaudio (f32 lattices, like warp-transducer) is
/// 7e-5 of the gradient's largest element away from an f64 computation, ours 6e-7
/// (tests/transducer/transducer_loss_test.cpp). The lattices are B T (U+1) values against the
/// logits' B T (U+1) V, so f64 costs nothing measurable; the per-class work (the denominators'
/// sums of exp and the gradient's exps) stays f32, with the row's offset formed in f64 first.
///
/// Backend. The functions validate their arguments, allocate the outputs and dispatch through
/// the op registry (nn/registry.hpp) to ops transducer_loss_forward and transducer_loss_backward.
/// CPU: a oneTBB implementation (log-softmax denominators and the gradient parallel over the
/// (b, t, u) rows with vectorised exp, the lattices parallel over utterances) and a plain-loop
/// reference in f64 (sdk/src/nn/cpu/transducer.cpp); CUDA: our kernels (one warp per row for the
/// denominators, one block per utterance walking anti-diagonals for alpha and beta, one block per
/// row for the gradient; sdk/src/nn/cuda/transducer.cu), which have not yet been run on a GPU.
/// Log-sum-exp is the stable max + log1p(exp(min - max)) form throughout.
///
/// Precision: f32 logits (f16/bf16 logits go through f32 promotion, Note [Half-precision
/// promotion]; the gradient comes back in the logits' dtype); lattices f64 (Note [Transducer
/// lattice precision]), per-class sums and exps f32 (f64 in the reference), losses f32. Labels
/// and lengths are int32, as in the reference.
/// Ownership: outputs are new tensors; inputs are never modified. The saved state holds the
/// logits tensor (shared storage, no copy): do not overwrite the logits before the backward.
/// Threading: the functions may be called from several threads at once.
/// Errors (InvalidArgument, naming the utterance and the value): a label < 0, >= V or equal to
/// blank; a frame length outside [0, T] or a label length outside [0, U]; T_b = 0 with U_b > 0
/// (no alignment exists); shapes, dtypes or devices that disagree; a blank outside [0, V). On
/// CUDA the labels and lengths are copied to the host for this check (B (U + 2) ints, one
/// synchronisation per forward; the backward trusts the forward's check).

#include <cstdint>

#include "benchhost/tensor.hpp"

namespace benchhost::nn {

enum class TransducerReduction : std::uint8_t { none, mean };

struct TransducerLossSpec {
  /// The blank class; negative means V - 1 (the reference: blank = 1023 of V = 1024).
  std::int64_t blank = -1;
  TransducerReduction reduction = TransducerReduction::mean;
};

/// What transducer_loss_backward needs from the forward (Note [Transducer loss saved state]).
struct TransducerLossSaved {
  Tensor logits;            ///< the forward's logits (shared, not copied), f32 or promoted
  Tensor labels;            ///< i32 [B, U]
  Tensor logit_lengths;     ///< i32 [B]
  Tensor label_lengths;     ///< i32 [B]
  Tensor log_denominators;  ///< f64 [B, T, U+1]
  Tensor alpha;             ///< f64 [B, T, U+1]
  std::int64_t blank = 0;   ///< resolved (never negative)
  TransducerReduction reduction = TransducerReduction::mean;
};

/// The transducer loss of raw joint logits [B, T, U+1, V] (f32, f16 or bf16) against labels
/// i32 [B, U] (padding ignored; any value there), frame lengths i32 [B] in [0, T] and label
/// lengths i32 [B] in [0, U], all on one device. U may be 0 (labels [B, 0]). Returns f32 on the
/// logits' device: [B] for reduction none, [1] for mean (Note [Transducer loss reduction]).
/// Fills `saved` when given.
Tensor transducer_loss_forward(const Tensor& logits, const Tensor& labels, const Tensor& logit_lengths,
                               const Tensor& label_lengths, const TransducerLossSpec& spec = {},
                               TransducerLossSaved* saved = nullptr);

/// d(loss) / d logits, scaled by the incoming gradient `dloss` (f32 on the logits' device: [1] or
/// [] for reduction mean, [B] for none): a tensor of the logits' shape and dtype, zero outside
/// every utterance's lattice.
Tensor transducer_loss_backward(const Tensor& dloss, const TransducerLossSaved& saved);

/// The same with a host scalar incoming gradient (every utterance's for reduction none).
Tensor transducer_loss_backward(const TransducerLossSaved& saved, float dloss = 1.0f);

// ---- StackTime and the joint broadcast ---------------------------------------------------------
//
// Note [Transducer layout ops]
// The RNN-T encoder's StackTime (MLPerf rnnt/model.py, StackTime(factor)) and the joint's
// broadcast add h[b, t, u, :] = f[b, t, :] + g[b, u, :] (rnnt/model.py, RNNT.joint), forward and
// backward, as registry ops (nn/registry.hpp) stack_time_forward, stack_time_backward,
// joint_add_forward and joint_add_backward:
//   stack_time_forward   {x [T, B, H]} -> {y [ceil(T / f), B, f H]}; attr factor f >= 1.
//                        y[s, b, k H + i] = x[f s + k, b, i], zero where f s + k >= T (the
//                        reference pads the end of the sequence with zero frames).
//   stack_time_backward  {dy [ceil(T / f), B, f H]} -> {dx [T, B, H]}; attrs factor, frames = T.
//                        dx[t, b, i] = dy[t / f, b, (t % f) H + i] (the padding's gradient is
//                        dropped).
//   joint_add_forward    {f [B, T, J], g [B, U+1, J]} -> {h [B, T, U+1, J]}.
//   joint_add_backward   {dh [B, T, U+1, J]} -> {df [B, T, J] = sum over u, dg [B, U+1, J] = sum
//                        over t} (both overwritten).
// The joint op writes the broadcast sum once, where adding two replicated copies (concat) would
// materialise two more [B, T, U+1, J] tensors; its backward reads dh once for both sums.
// Numerics: the copies and the add are exact and identical on every backend. The backward sums
// run in order (u = 0, 1, ... for df; t = 0, 1, ... for dg): in f64 rounded once on the CPU
// (bit-identical to nn::sum over that axis, sdk/src/nn/cpu/reduce.cpp), in f32 on CUDA.
// Backends: CPU oneTBB (cpu.tbb) and plain loops (cpu.ref) in sdk/src/nn/cpu/transducer_ops.cpp;
// CUDA kernels (cuda.kernel) in sdk/src/nn/cuda/transducer_ops.cu, which have not yet been run
// on a GPU. Dtypes: StackTime copies f32, f16 and bf16 natively (the CPU kernel any dtype);
// the joint's ops compute in f32 (f16/bf16 tensors go through f32 promotion, Note [Half-precision
// promotion] in nn/registry.hpp, which is exact for the add: one rounding of the f32 sum).
// Ownership: outputs are new contiguous tensors on the input's device; inputs are never
// modified. Threading: the functions may be called from several threads at once.
// Errors: InvalidArgument naming the op and the shapes (wrong rank, factor < 1, frames that do
// not stack to dy's length, f and g that disagree in B or J, mixed dtypes or devices).

/// StackTime forward: x [T, B, H] (f32, f16 or bf16) -> y [ceil(T / factor), B, factor H], the
/// frames of each group of `factor` side by side, zero frames after the last (Note [Transducer
/// layout ops]). factor 1 returns a copy of x.
Tensor stack_time_forward(const Tensor& x, std::int64_t factor);

/// StackTime backward: dy [ceil(frames / factor), B, factor H] -> dx [frames, B, H].
Tensor stack_time_backward(const Tensor& dy, std::int64_t factor, std::int64_t frames);

/// ceil(frames / factor): the length StackTime gives `frames` frames (factor >= 1).
std::int64_t stacked_length(std::int64_t frames, std::int64_t factor);

/// The joint's broadcast add: h [B, T, U+1, J] with h[b, t, u, :] = f[b, t, :] + g[b, u, :], from
/// f [B, T, J] and g [B, U+1, J] of one dtype (f32, f16 or bf16) on one device.
Tensor joint_add_forward(const Tensor& f, const Tensor& g);

/// The joint broadcast's gradients: df [B, T, J] = sum over u of dh, dg [B, U+1, J] = sum over t.
struct JointAddGrads {
  Tensor df;  ///< [B, T, J], dh's dtype
  Tensor dg;  ///< [B, U+1, J], dh's dtype
};

/// Backward of joint_add_forward from dh [B, T, U+1, J] (Note [Transducer layout ops]).
JointAddGrads joint_add_backward(const Tensor& dh);

}  // namespace benchhost::nn

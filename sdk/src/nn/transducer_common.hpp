#pragma once
// Shape and value checks of the transducer loss and of the layout ops (nn/transducer.hpp),
// shared by the Tensor-level functions (nn/transducer.cpp) and the CPU and CUDA implementations
// (nn/cpu/transducer*.cpp, nn/cuda/transducer*.cu). Private to sdk/src/nn.
//
// Ops (attrs: blank, resolved, in [0, V); backward also scale):
//   transducer_loss_forward  {logits [B, T, U+1, V], labels i32 [B, U], logit_lengths i32 [B],
//                             label_lengths i32 [B]} -> {losses [B], lse f64 [B, T, U+1],
//                             alpha f64 [B, T, U+1]}
//   transducer_loss_backward {logits, labels, logit_lengths, label_lengths, lse (f64), alpha
//                             (f64), dloss [B] or [1]} -> {dlogits [B, T, U+1, V]}
// Floating tensors are f32 unless marked f64.
// Utterance b's incoming gradient is scale * dloss[b] (dloss of B elements) or scale * dloss[0].

#include <cstdint>

#include "benchhost/error.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn::transducer {

struct Dims {
  std::int64_t B = 0, T = 0, U1 = 0, V = 0, blank = 0;
  std::int64_t U() const { return U1 - 1; }
  std::int64_t rows() const { return B * T * U1; }
  /// Row (b, t, u) of [B, T, U+1]: its offset in the lattices, times V in the logits.
  std::int64_t row(std::int64_t b, std::int64_t t, std::int64_t u) const { return (b * T + t) * U1 + u; }
};

/// The dtype an implementation takes for input (or output) `i` of either op (f16/bf16 logits,
/// gradients and dloss are promoted by dispatch, Note [Half-precision promotion]).
inline DType expected_dtype(bool input, std::size_t i) {
  if (input) return i >= 1 && i <= 3 ? DType::i32 : (i == 4 || i == 5 ? DType::f64 : DType::f32);
  return i == 1 || i == 2 ? DType::f64 : DType::f32;
}

/// The dimensions, after checking that the four tensors agree (rank, sizes, integer dtypes,
/// device) and that blank is in [0, V). `blank` < 0 means V - 1.
inline Dims check_shapes(const Tensor& logits, const Tensor& labels, const Tensor& logit_lengths,
                         const Tensor& label_lengths, std::int64_t blank, const char* op) {
  BH_CHECK_AS(InvalidArgument, logits.defined() && logits.dim() == 4, "{}: logits must be 4-d [B, T, U+1, V], got {}",
              op, logits.defined() ? shape_str(logits.shape()) : std::string("undefined"));
  Dims d;
  d.B = logits.size(0);
  d.T = logits.size(1);
  d.U1 = logits.size(2);
  d.V = logits.size(3);
  BH_CHECK_AS(InvalidArgument, d.U1 >= 1 && d.V >= 1, "{}: logits {} need U+1 >= 1 and V >= 1", op,
              shape_str(logits.shape()));
  BH_CHECK_AS(InvalidArgument,
              labels.defined() && labels.dtype() == DType::i32 && labels.dim() == 2 && labels.size(0) == d.B &&
                  labels.size(1) == d.U1 - 1,
              "{}: labels must be i32 [B, U] = [{}, {}] for logits {}, got {}", op, d.B, d.U1 - 1,
              shape_str(logits.shape()), labels.defined() ? labels.describe() : std::string("undefined"));
  for (const Tensor* t : {&logit_lengths, &label_lengths})
    BH_CHECK_AS(InvalidArgument, t->defined() && t->dtype() == DType::i32 && t->dim() == 1 && t->size(0) == d.B,
                "{}: {} lengths must be i32 [{}] (one per utterance), got {}", op,
                t == &logit_lengths ? "logit (frame)" : "label", d.B,
                t->defined() ? t->describe() : std::string("undefined"));
  for (const Tensor* t : {&labels, &logit_lengths, &label_lengths})
    BH_CHECK_AS(InvalidArgument, t->device() == logits.device(), "{}: {} is on {} but the logits are on {}", op,
                t->describe(), t->device().str(), logits.device().str());
  d.blank = blank < 0 ? d.V - 1 : blank;
  BH_CHECK_AS(InvalidArgument, d.blank < d.V, "{}: blank {} is outside [0, V = {})", op, blank, d.V);
  return d;
}

/// The lengths and labels of every utterance (host pointers): frame length in [0, T], label
/// length in [0, U], T_b = 0 only with U_b = 0, labels[b, 0..U_b) in [0, V) and != blank.
inline void check_values(const Dims& d, const std::int32_t* labels, const std::int32_t* logit_lengths,
                         const std::int32_t* label_lengths, const char* op) {
  for (std::int64_t b = 0; b < d.B; ++b) {
    const std::int64_t tb = logit_lengths[b], ub = label_lengths[b];
    BH_CHECK_AS(InvalidArgument, tb >= 0 && tb <= d.T,
                "{}: utterance {} has logit (frame) length {}, outside [0, T = {}]", op, b, tb, d.T);
    BH_CHECK_AS(InvalidArgument, ub >= 0 && ub <= d.U(), "{}: utterance {} has label length {}, outside [0, U = {}]",
                op, b, ub, d.U());
    BH_CHECK_AS(InvalidArgument, tb > 0 || ub == 0,
                "{}: utterance {} has {} labels but no frames (logit length 0): no alignment exists", op, b, ub);
    for (std::int64_t u = 0; u < ub; ++u) {
      const std::int64_t y = labels[b * d.U() + u];
      BH_CHECK_AS(InvalidArgument, y >= 0 && y < d.V && y != d.blank,
                  "{}: utterance {} label {} (position {} of {}) is {}: labels must be in [0, V = {}) and differ "
                  "from blank {}",
                  op, b, y, u, ub, y == d.blank ? "the blank" : "out of range", d.V, d.blank);
    }
  }
}


// ---- StackTime and the joint broadcast (Note [Transducer layout ops] in nn/transducer.hpp) ----

/// Sizes of StackTime: the frames side [T, B, H], the factor and the stacked length Ts.
struct StackDims {
  std::int64_t T = 0, B = 0, H = 0, factor = 1, Ts = 0;
  std::int64_t stacked_width() const { return factor * H; }
};

/// Checks that `frames_side` is [T, B, H] and `stacked_side` [ceil(T / factor), B, factor H]
/// (the x and y of the forward, the dx and dy of the backward), on one device with one dtype.
inline StackDims check_stack_time(const Tensor& frames_side, const Tensor& stacked_side, std::int64_t factor,
                                  const char* op) {
  BH_CHECK_AS(InvalidArgument, factor >= 1, "{}: factor {} must be at least 1", op, factor);
  BH_CHECK_AS(InvalidArgument, frames_side.defined() && frames_side.dim() == 3,
              "{}: the frames must be 3-d [T, B, H], got {}", op,
              frames_side.defined() ? shape_str(frames_side.shape()) : std::string("undefined"));
  StackDims d;
  d.T = frames_side.size(0);
  d.B = frames_side.size(1);
  d.H = frames_side.size(2);
  d.factor = factor;
  d.Ts = (d.T + factor - 1) / factor;
  const Shape want{d.Ts, d.B, d.factor * d.H};
  BH_CHECK_AS(InvalidArgument, stacked_side.defined() && stacked_side.shape() == want,
              "{}: frames [T, B, H] = {} with factor {} stack to {}, got {}", op, shape_str(frames_side.shape()),
              factor, shape_str(want), stacked_side.defined() ? shape_str(stacked_side.shape()) : std::string("undefined"));
  BH_CHECK_AS(InvalidArgument,
              stacked_side.dtype() == frames_side.dtype() && stacked_side.device() == frames_side.device(),
              "{}: {} and {} differ in dtype or device", op, frames_side.describe(), stacked_side.describe());
  return d;
}

/// Sizes of the joint broadcast: f [B, T, J], g [B, U1, J], h [B, T, U1, J].
struct JointDims {
  std::int64_t B = 0, T = 0, U1 = 0, J = 0;
};

/// Checks that f/df is [B, T, J], g/dg [B, U1, J] and h/dh [B, T, U1, J], one dtype, one device.
inline JointDims check_joint(const Tensor& f, const Tensor& g, const Tensor& h, const char* op) {
  auto shape_of = [](const Tensor& t) { return t.defined() ? shape_str(t.shape()) : std::string("undefined"); };
  BH_CHECK_AS(InvalidArgument,
              f.defined() && g.defined() && f.dim() == 3 && g.dim() == 3 && f.size(0) == g.size(0) &&
                  f.size(2) == g.size(2),
              "{}: expected f [B, T, J] and g [B, U+1, J] with the same B and J, got f {} and g {}", op, shape_of(f),
              shape_of(g));
  JointDims d{f.size(0), f.size(1), g.size(1), f.size(2)};
  const Shape want{d.B, d.T, d.U1, d.J};
  BH_CHECK_AS(InvalidArgument, h.defined() && h.shape() == want,
              "{}: f {} and g {} broadcast to {}, but the joint tensor is {}", op, shape_of(f), shape_of(g),
              shape_str(want), shape_of(h));
  BH_CHECK_AS(InvalidArgument,
              f.dtype() == h.dtype() && g.dtype() == h.dtype() && f.device() == h.device() && g.device() == h.device(),
              "{}: f {}, g {} and the joint tensor {} must share one dtype and device", op, f.describe(), g.describe(),
              h.describe());
  return d;
}

}  // namespace benchhost::nn::transducer

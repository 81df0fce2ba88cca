#pragma once
/// @file nn/lstm.hpp  The LSTM of RNN-T (MLPerf speech recognition): one unidirectional layer over
/// a sequence, forward and backward, a single decoding step, and a multi-layer nn::LSTM module.
///
/// Note [LSTM maths and layout]
/// PyTorch's torch.nn.LSTM exactly. Per layer, parameters weight_ih [4H, I], weight_hh [4H, H],
/// bias_ih [4H], bias_hh [4H], their rows in gate order i, f, g, o (row g*H + k is unit k of
/// gate g). Per time step t, with x_t [B, I] and the state (h, c) [B, H]:
///   a = x_t W_ih^T + b_ih + h W_hh^T + b_hh                 [B, 4H], split into a_i a_f a_g a_o
///   i = sigmoid(a_i), f = sigmoid(a_f), g = tanh(a_g), o = sigmoid(a_o)
///   c' = f * c + i * g,   h' = o * tanh(c'),   y_t = h'.
/// Sequences are time-major: x [T, B, I], y [T, B, H]. The initial state (h0, c0) is [B, H] and
/// zero when absent; the final state (hT, cT) is returned. Both biases are parameters and
/// receive the same gradient (the gradient of a).
///
/// Backends. The functions check their arguments, allocate outputs and dispatch through the op
/// registry (nn/registry.hpp) to the ops lstm_forward, lstm_backward and lstm_cell_forward
/// (declared in sdk/src/nn/cpu/lstm.cpp):
/// - CPU: oneDNN's vanilla LSTM primitives (lstm_forward / lstm_backward, f32), the weights
///   described in place as oneDNN's ldgoi (which is PyTorch's row layout) and reordered into the
///   format each primitive asks for, one bias b_ih + b_hh; primitives and reorders are cached per
///   shape and thread (Note [Primitive cache] in nn/cpu/conv_dnnl.hpp). The cell: a oneDNN
///   matmul and a oneTBB pointwise kernel. Plain double-precision loops are the references.
/// - CUDA: cuDNN's RNN API (CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS, one layer per call) with the
///   weights packed into cuDNN's weight space each call; the cell: a cuBLASLt matmul and our
///   kernel (sdk/src/nn/cuda/lstm_cudnn.cu). The CUDA code has not yet run on a GPU.
///
/// Note [LSTM backward recomputes]
/// No backend-private state crosses the registry (as for pooling and batch norm): the backward
/// op takes the forward's inputs and runs the forward again (oneDNN's training forward, for its
/// workspace; cuDNN's, for its reserve space) before the backward proper. That costs one extra
/// forward pass per training step (35-40% of forward + backward at RNN-T encoder size on the
/// CPU) and keeps every implementation interchangeable and testable against the others; a
/// workspace handed from forward to backward is the optimisation left.
///
/// Precision: f32. Half-precision tensors are promoted to f32 by the registry (Note
/// [Half-precision promotion]); nn::LSTM computes in f32 under every policy.
/// Ownership: outputs are new tensors; weight gradients are accumulated (+=) into the caller's.
/// Threading: the functions may be called from several threads; modules are not thread-safe.
/// Errors: shape, dtype or device mismatches throw InvalidArgument naming the function, the
/// argument and the shapes.

#include <cstdint>
#include <vector>

#include "benchhost/nn/layers.hpp"
#include "benchhost/nn/module.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn {

/// The four parameters of one LSTM layer (handles, not copies), PyTorch's layout.
struct LstmWeights {
  Tensor w_ih;  ///< [4H, I]
  Tensor w_hh;  ///< [4H, H]
  Tensor b_ih;  ///< [4H]
  Tensor b_hh;  ///< [4H]
};

/// Gradients of one layer's parameters, accumulated (+=); an undefined tensor skips that one.
struct LstmWeightGrads {
  Tensor w_ih, w_hh, b_ih, b_hh;
};

/// The recurrent state (h, c) of one layer, each [B, H]; both undefined mean zeros.
struct LstmState {
  Tensor h, c;
  bool defined() const { return h.defined(); }
};

/// y [T, B, H] = one LSTM layer over x [T, B, I] from `initial` (zeros when undefined); writes
/// the final state to *final_state when non-null. Op "lstm_forward".
Tensor lstm_forward(const Tensor& x, const LstmWeights& w, const LstmState& initial = {},
                    LstmState* final_state = nullptr);

/// What lstm_backward returns: dx [T, B, I]; dh0 and dc0 [B, H] only when `initial` was given.
struct LstmInputGrads {
  Tensor dx;
  LstmState dinitial;
};

/// Backward of lstm_forward(x, w, initial): dy [T, B, H] is the gradient w.r.t. y, `dfinal` the
/// gradients w.r.t. (hT, cT) (undefined: zero). Accumulates into `grads`. Runs the forward again
/// (Note [LSTM backward recomputes]). Op "lstm_backward".
LstmInputGrads lstm_backward(const Tensor& dy, const Tensor& x, const LstmWeights& w,
                             const LstmState& initial, const LstmState& dfinal,
                             LstmWeightGrads& grads);

/// One time step for decoding: (h', c') from x [B, I] and `state` (zeros when undefined). Equal
/// to lstm_forward at T = 1 up to f32 rounding. Forward only. Op "lstm_cell_forward".
LstmState lstm_cell_forward(const Tensor& x, const LstmState& state, const LstmWeights& w);

// ============================================================================================
// nn::LSTM
// ============================================================================================

struct LstmSpec {
  std::int64_t input_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t layers = 1;
  /// Dropout probability on each layer's output except the last (torch.nn.LSTM's `dropout`).
  float dropout = 0.0f;
  /// Also apply dropout to the last layer's output (the MLPerf RNN-T reference does).
  bool dropout_after_last = false;
};

/// A stack of unidirectional LSTM layers like torch.nn.LSTM(input_size, hidden_size, layers,
/// dropout=dropout) on time-major input. Parameters, per layer k: "weight_ih_l{k}",
/// "weight_hh_l{k}", "bias_ih_l{k}", "bias_hh_l{k}" (biases without weight decay), initialised
/// U(-1/sqrt(H), 1/sqrt(H)) from Rng(init_seed, k * 4 + j) like PyTorch's reset_parameters().
/// Dropout sites use `rng` (required when dropout > 0) with stream stream_id + k after layer k;
/// active in training mode only.
class LSTM : public Layer {
 public:
  LSTM(const LstmSpec& spec, const DropoutRng* rng = nullptr, std::uint64_t stream_id = 0,
       std::uint64_t init_seed = 0);

  /// y [T, B, H] from x [T, B, I], zero initial state.
  Tensor forward(const Tensor& x) override;
  /// Same from an initial state per layer (empty: zeros), the final state per layer into
  /// *final_states when non-null.
  Tensor forward(const Tensor& x, const std::vector<LstmState>& initial,
                 std::vector<LstmState>* final_states);
  /// dx from dy; accumulates every parameter's gradient. Needs a training-mode forward first.
  Tensor backward(const Tensor& dy) override;
  /// Same with gradients w.r.t. the final states (empty: zeros); the gradients w.r.t. the
  /// initial states go to *dinitial (per layer, only if forward was given initial states).
  Tensor backward(const Tensor& dy, const std::vector<LstmState>& dfinal,
                  std::vector<LstmState>* dinitial);

  /// One decoding step: x [B, I] -> output [B, H]; `state` holds one LstmState per layer (empty
  /// or undefined entries: zeros) and is replaced by the new state. No dropout, nothing kept
  /// for backward: for inference (greedy decoding of the prediction network).
  Tensor step(const Tensor& x, std::vector<LstmState>& state);

  const LstmSpec& spec() const { return spec_; }
  /// Layer k's parameters (handles to the current values).
  LstmWeights weights(std::int64_t k) const;

 private:
  struct LayerParams {
    Parameter* w_ih = nullptr;
    Parameter* w_hh = nullptr;
    Parameter* b_ih = nullptr;
    Parameter* b_hh = nullptr;
  };
  Tensor apply_dropout(const Tensor& y, std::int64_t k);
  bool dropout_after(std::int64_t k) const;

  LstmSpec spec_;
  const DropoutRng* rng_;
  std::uint64_t stream_id_;
  std::vector<LayerParams> params_;
  // Kept from the last training-mode forward, per layer.
  std::vector<Tensor> inputs_;
  std::vector<LstmState> initial_;
  std::vector<DropoutSaved> dropout_saved_;
  std::vector<bool> dropped_;
};

}  // namespace benchhost::nn

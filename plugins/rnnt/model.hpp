#pragma once
/// @file plugins/rnnt/model.hpp  RNN-T (MLPerf Training speech recognition) with explicit
/// backward, built from the SDK's LSTM (nn/lstm.hpp), Linear, Embedding and dropout layers, and
/// batched greedy decoding.
///
/// Note [RNN-T model]
/// The reference (rnn_speech_recognition/pytorch/rnnt/model.py, common/rnn.py,
/// configs/baseline_v3-1023sp.yaml), time-major as it is:
///   encoder     pre_rnn LSTM(240 -> 1024, 2 layers) -> StackTime(2) -> post_rnn LSTM(2048 ->
///               1024, 3 layers); dropout 0.1 between layers and after each stack's last layer
///   prediction  Embedding(1023, 512) of the labels, a zero vector (SOS) prepended, LSTM(512 ->
///               512, 2 layers), dropout 0.3 likewise
///   joint       f = joint_enc Linear(1024 -> 512) of the encoder output [B, T', 512],
///               g = joint_pred Linear(512 -> 512) of the prediction output [B, U+1, 512],
///               h = ReLU(f[:, :, None] + g[:, None]) -> Dropout(0.3) -> Linear(512 -> 1024)
///               gives the raw logits [B, T', U+1, 1024] the transducer loss takes (blank = the
///               last class, 1023).
/// 49,006,080 parameters. StackTime(f): output frame t' concatenates frames f t' .. f t' + f - 1
/// along features (zeros past the end), T' = ceil(T / f), and the lengths become ceil(len / f).
/// Padded frames run through the LSTMs (no packing); only the lengths mask them, in the loss and
/// in decoding. Parameter names are the reference's state_dict names
/// ("encoder.pre_rnn.lstm.weight_ih_l0", "prediction.embed.weight", "joint_net.2.bias"), so a
/// weights file interchanges with the PyTorch peer (tools/peers/rnnt_peer.py).
/// Initialisation (common/rnn.py): PyTorch's LSTM default U(+-1/sqrt(H)), then the forget-gate
/// quarter of bias_ih set to forget_gate_bias (1.0) and that of bias_hh multiplied by
/// hidden_hidden_bias_scale (0.0), then every LSTM weight and bias multiplied by
/// weights_init_scale (0.5); Linear and Embedding keep the SDK's defaults (a peer test loads the
/// same weights, so the exact draw does not matter for parity).
///
/// Note [RNN-T joint broadcast]
/// StackTime and the joint's broadcast add f[:, :, None] + g[:, None] are SDK ops
/// (nn::stack_time_forward/backward, nn::joint_add_forward/backward; Note [Transducer layout ops]
/// in benchhost/nn/transducer.hpp): the add writes the [B, T', U+1, 512] sum once, without the
/// two replicated copies of f and g that concat-and-add would materialise, and its backward
/// reads the joint gradient once for both sums (over the label axis for f, over the time axis
/// for g). Greedy decoding's per-frame joint (f_t [B, J] + g [B, J]) is a plain add.
///
/// Note [RNN-T greedy decoding]
/// The reference's RNNTGreedyDecoder (rnnt/decoder.py), batched: all utterances walk the encoder
/// frames together. Per utterance the state is (g, s): the prediction network's output and LSTM
/// state after its last emitted label (initially after the zero SOS vector from a zero state).
/// At frame t the joint of (f_t, g) is argmaxed: blank (or max_symbols_per_step symbols at this
/// frame) moves to frame t + 1; another class k is emitted and (g, s) advance by one prediction
/// step on k. A step computes every utterance and keeps the new (g, s) only where one was emitted
/// (a masked merge with SDK ops, so it runs on any device). An utterance stops emitting at
/// max_symbols symbols (the reference's max_symbol_per_sample, here an inclusive cap) and at its
/// own length.
///
/// Note [RNN-T precision]
/// The model follows the policy of set_precision(): under bf16/fp16 the joint's Linear layers
/// (joint_enc, joint_pred, the classifier) store their outputs in the half type and the embedding
/// its rows (the zero SOS row too), while nn::LSTM, the joint's broadcast add and the transducer
/// loss compute in f32 (the registry's promotion; the reference's apex AMP runs the cuDNN LSTMs
/// in fp16, the step left for a GPU session). Master weights and gradients are f32; the
/// workload seeds backward with the fp16 loss scale and unscales before the global-norm clip.
///
/// Ownership: the model owns its layers and keeps the activations of the last training forward
/// for the backward. Threading: one training thread.

#include <cstdint>
#include <vector>

#include "benchhost/nn/layers.hpp"
#include "benchhost/nn/lstm.hpp"
#include "benchhost/nn/module.hpp"

namespace benchhost::rnnt {

struct RnntConfig {
  std::int64_t in_features = 240;   ///< spliced features per frame (80 mels x 3)
  std::int64_t enc_n_hid = 1024;
  std::int64_t enc_pre_rnn_layers = 2;
  std::int64_t enc_post_rnn_layers = 3;
  std::int64_t enc_stack_time_factor = 2;
  float enc_dropout = 0.1f;
  std::int64_t pred_n_hid = 512;
  std::int64_t pred_rnn_layers = 2;
  float pred_dropout = 0.3f;
  std::int64_t joint_n_hid = 512;
  float joint_dropout = 0.3f;
  std::int64_t n_classes = 1024;    ///< tokenizer pieces + 1; blank = n_classes - 1
  float forget_gate_bias = 1.0f;
  float hidden_hidden_bias_scale = 0.0f;
  float weights_init_scale = 0.5f;

  std::int64_t blank() const { return n_classes - 1; }
};


class Rnnt : public nn::Module {
 public:
  /// Built on the CPU with the reference initialisation (Note [RNN-T model]), deterministic per
  /// seed; move it with to(device).
  explicit Rnnt(const RnntConfig& config, std::uint64_t seed = 0);
  const RnntConfig& config() const { return config_; }

  /// Training forward: raw joint logits f32 [B, T', U+1, n_classes] from features x [T, B,
  /// in_features] and labels i32 [B, U] (U may be 0). Keeps what backward() needs.
  Tensor forward(const Tensor& x, const Tensor& labels);
  /// Accumulates every parameter's gradient from d(loss)/d(logits).
  void backward(const Tensor& dlogits);

  /// The encoder's joint input f [B, T', joint_n_hid] from x [T, B, in_features] (eval mode).
  Tensor encode(const Tensor& x);
  /// Batched greedy decoding (Note [RNN-T greedy decoding]) of x [T, B, in_features] with the
  /// frame lengths of each utterance (before stacking): the label ids per utterance.
  std::vector<std::vector<std::int32_t>> greedy_decode(const Tensor& x, const std::vector<std::int64_t>& lengths,
                                                       std::int64_t max_symbols_per_step = 30,
                                                       std::int64_t max_symbols = 300);

  /// The dropout randomness: the training loop advances step before each forward.
  nn::DropoutRng& dropout_rng() { return dropout_rng_; }

 private:
  struct PredState {
    Tensor g;                            ///< joint_pred output [B, joint_n_hid]
    std::vector<nn::LstmState> lstm;     ///< per prediction layer
  };
  PredState prediction_step(const Tensor& embedded, const std::vector<nn::LstmState>& state);
  Tensor joint_step(const Tensor& f_t, const Tensor& g);

  RnntConfig config_;
  nn::DropoutRng dropout_rng_;
  nn::LSTM* pre_rnn_;
  nn::LSTM* post_rnn_;
  nn::Embedding* embed_;
  nn::LSTM* dec_rnn_;
  nn::Linear* joint_enc_;
  nn::Linear* joint_pred_;
  nn::Sequential* joint_net_;
  // Kept from the training forward.
  std::int64_t frames_ = 0, batch_ = 0, labels_ = 0, frames_stacked_ = 0;
};

/// Parameters of the model a configuration describes, counted without building it.
std::int64_t count_parameters(const RnntConfig& config);

}  // namespace benchhost::rnnt

// RNN-T from SDK layers (see model.hpp for the architecture and the notes).

#include "model.hpp"

#include <algorithm>
#include <memory>

#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/transducer.hpp"
#include "benchhost/precision.hpp"

namespace benchhost::rnnt {

namespace {

// Dropout stream ids: one block of 16 per LSTM stack, the joint's after them.
constexpr std::uint64_t kPreRnnStream = 0x100, kPostRnnStream = 0x110, kDecRnnStream = 0x120, kJointStream = 0x130;

nn::LstmSpec lstm_spec(std::int64_t in, std::int64_t hid, std::int64_t layers, float dropout) {
  nn::LstmSpec s;
  s.input_size = in;
  s.hidden_size = hid;
  s.layers = layers;
  s.dropout = dropout;
  s.dropout_after_last = true;  // common/rnn.py applies dropout to the last layer's output too
  return s;
}

// common/rnn.py: forget-gate quarter of bias_ih = forget_gate_bias, of bias_hh *=
// hidden_hidden_bias_scale, then every weight and bias *= weights_init_scale. On the CPU.
void reference_lstm_init(nn::LSTM& lstm, const RnntConfig& c) {
  const std::int64_t h = lstm.spec().hidden_size;
  for (nn::Parameter* p : lstm.parameters()) {
    float* v = p->value.data<float>();
    const std::int64_t n = p->value.numel();
    const bool bias_ih = p->name.find("bias_ih") != std::string::npos;
    const bool bias_hh = p->name.find("bias_hh") != std::string::npos;
    for (std::int64_t i = h; i < 2 * h; ++i) {  // gate order i, f, g, o: rows [H, 2H) are f
      if (bias_ih) v[i] = c.forget_gate_bias;
      if (bias_hh) v[i] *= c.hidden_hidden_bias_scale;
    }
    for (std::int64_t i = 0; i < n; ++i) v[i] *= c.weights_init_scale;
  }
}

std::int64_t lstm_params(std::int64_t in, std::int64_t hid, std::int64_t layers) {
  std::int64_t n = 0;
  for (std::int64_t k = 0; k < layers; ++k) n += 4 * hid * ((k == 0 ? in : hid) + hid) + 8 * hid;
  return n;
}

// old * (1 - m) + new * m, m a 0/1 mask of the same shape (Note [RNN-T greedy decoding]).
Tensor masked_merge(const Tensor& old_value, const Tensor& new_value, const Tensor& keep_old, const Tensor& take_new) {
  // The masks (f32 0/1) in the values' type: the joint's g is in the policy's storage type.
  Tensor out = nn::mul(old_value, nn::cast(keep_old, old_value.dtype()));
  nn::addcmul_(out, new_value, nn::cast(take_new, new_value.dtype()));
  return out;
}

}  // namespace

Rnnt::Rnnt(const RnntConfig& c, std::uint64_t seed) : nn::Module("rnnt"), config_(c) {
  BH_CHECK_AS(InvalidArgument, c.n_classes >= 2, "rnnt: n_classes {} must be at least 2 (pieces + blank)", c.n_classes);
  BH_CHECK_AS(InvalidArgument, c.enc_stack_time_factor >= 1, "rnnt: stack time factor {} must be >= 1", c.enc_stack_time_factor);
  dropout_rng_.seed = seed;
  pre_rnn_ = &register_module("encoder.pre_rnn.lstm",
                              std::make_unique<nn::LSTM>(lstm_spec(c.in_features, c.enc_n_hid, c.enc_pre_rnn_layers, c.enc_dropout),
                                                         &dropout_rng_, kPreRnnStream, seed * 16 + 1));
  post_rnn_ = &register_module(
      "encoder.post_rnn.lstm",
      std::make_unique<nn::LSTM>(lstm_spec(c.enc_stack_time_factor * c.enc_n_hid, c.enc_n_hid, c.enc_post_rnn_layers, c.enc_dropout),
                                 &dropout_rng_, kPostRnnStream, seed * 16 + 2));
  embed_ = &register_module("prediction.embed", std::make_unique<nn::Embedding>(c.n_classes - 1, c.pred_n_hid, false, seed * 16 + 3));
  dec_rnn_ = &register_module("prediction.dec_rnn.lstm",
                              std::make_unique<nn::LSTM>(lstm_spec(c.pred_n_hid, c.pred_n_hid, c.pred_rnn_layers, c.pred_dropout),
                                                         &dropout_rng_, kDecRnnStream, seed * 16 + 4));
  joint_enc_ = &register_module("joint_enc", std::make_unique<nn::Linear>(c.enc_n_hid, c.joint_n_hid, true, nn::Activation::none, seed * 16 + 5));
  joint_pred_ = &register_module("joint_pred", std::make_unique<nn::Linear>(c.pred_n_hid, c.joint_n_hid, true, nn::Activation::none, seed * 16 + 6));
  joint_net_ = &register_module("joint_net", std::make_unique<nn::Sequential>());
  joint_net_->add(std::make_unique<nn::ActivationLayer>(nn::Activation::relu));
  joint_net_->add(std::make_unique<nn::Dropout>(c.joint_dropout, &dropout_rng_, kJointStream));
  joint_net_->add(std::make_unique<nn::Linear>(c.joint_n_hid, c.n_classes, true, nn::Activation::none, seed * 16 + 7));
  for (nn::LSTM* l : {pre_rnn_, post_rnn_, dec_rnn_}) reference_lstm_init(*l, c);
}

Tensor Rnnt::forward(const Tensor& x, const Tensor& labels) {
  BH_CHECK_AS(InvalidArgument, x.dim() == 3 && x.size(2) == config_.in_features,
              "rnnt: expected features [T, B, {}], got {}", config_.in_features, shape_str(x.shape()));
  BH_CHECK_AS(InvalidArgument, labels.dim() == 2 && labels.size(0) == x.size(1),
              "rnnt: expected labels [B = {}, U], got {}", x.size(1), shape_str(labels.shape()));
  frames_ = x.size(0), batch_ = x.size(1), labels_ = labels.size(1);
  const std::int64_t b = batch_;
  // Encoder.
  const Tensor pre = pre_rnn_->forward(x);
  const Tensor stacked = nn::stack_time_forward(pre, config_.enc_stack_time_factor);
  const Tensor enc = post_rnn_->forward(stacked);
  frames_stacked_ = enc.size(0);
  const Tensor f = joint_enc_->forward(nn::permute_copy(enc, {1, 0, 2}));  // [B, T', J]
  // Prediction network: zero SOS then the embedded labels, time-major.
  const DType emb_type = precision().storage_dtype(benchhost::OpClass::embedding);
  Tensor emb = Tensor::zeros({b, 1, config_.pred_n_hid}, emb_type, x.device());
  if (labels_ > 0) emb = nn::concat({emb, embed_->forward(labels)}, 1);
  const Tensor dec = dec_rnn_->forward(nn::permute_copy(emb, {1, 0, 2}));   // [U+1, B, P]
  const Tensor g = joint_pred_->forward(nn::permute_copy(dec, {1, 0, 2}));  // [B, U+1, J]
  // Joint (Note [RNN-T joint broadcast]).
  return joint_net_->forward(nn::joint_add_forward(f, g));  // [B, T', U+1, V]
}

void Rnnt::backward(const Tensor& dlogits) {
  const nn::JointAddGrads dj = nn::joint_add_backward(joint_net_->backward(dlogits));  // from [B, T', U+1, J]
  const Tensor& df = dj.df;                                                             // [B, T', J]
  const Tensor& dg = dj.dg;                                                             // [B, U+1, J]
  // Prediction network.
  const Tensor ddec = nn::permute_copy(joint_pred_->backward(dg), {1, 0, 2});
  const Tensor demb = nn::permute_copy(dec_rnn_->backward(ddec), {1, 0, 2});  // [B, U+1, P]
  // The labels' rows (after SOS), copied by the split op: a strided slice cannot be copied on a device.
  if (labels_ > 0) embed_->backward(nn::split(demb, {1, labels_}, 1)[1]);
  // Encoder.
  const Tensor denc = nn::permute_copy(joint_enc_->backward(df), {1, 0, 2});
  const Tensor dstacked = post_rnn_->backward(denc);
  pre_rnn_->backward(nn::stack_time_backward(dstacked, config_.enc_stack_time_factor, frames_));
}

Tensor Rnnt::encode(const Tensor& x) {
  const Tensor pre = pre_rnn_->forward(x);
  const Tensor enc = post_rnn_->forward(nn::stack_time_forward(pre, config_.enc_stack_time_factor));
  return joint_enc_->forward(nn::permute_copy(enc, {1, 0, 2}));
}

Rnnt::PredState Rnnt::prediction_step(const Tensor& embedded, const std::vector<nn::LstmState>& state) {
  PredState out;
  out.lstm = state;
  const Tensor y = dec_rnn_->step(embedded, out.lstm);
  out.g = joint_pred_->forward(y);
  return out;
}

Tensor Rnnt::joint_step(const Tensor& f_t, const Tensor& g) { return joint_net_->forward(nn::add(f_t, g)); }

std::vector<std::vector<std::int32_t>> Rnnt::greedy_decode(const Tensor& x, const std::vector<std::int64_t>& lengths,
                                                           std::int64_t max_symbols_per_step, std::int64_t max_symbols) {
  const std::int64_t b = x.size(1);
  BH_CHECK_AS(InvalidArgument, static_cast<std::int64_t>(lengths.size()) == b,
              "rnnt greedy_decode: {} lengths for a batch of {}", lengths.size(), b);
  const Device dev = x.device();
  // Time-major, so that each frame's rows are one contiguous block (no strided copy on a device).
  const Tensor f = nn::permute_copy(encode(x), {1, 0, 2});  // [T', B, J]
  const std::int64_t t_max = f.size(0), v = config_.n_classes, blank = config_.blank();
  std::vector<std::int64_t> len(static_cast<std::size_t>(b));
  for (std::int64_t i = 0; i < b; ++i)
    len[i] = std::min(t_max, nn::stacked_length(lengths[static_cast<std::size_t>(i)], config_.enc_stack_time_factor));
  std::vector<std::vector<std::int32_t>> hyp(static_cast<std::size_t>(b));
  PredState cur = prediction_step(Tensor::zeros({b, config_.pred_n_hid}, DType::f32, dev), {});
  std::vector<float> take(static_cast<std::size_t>(b));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(b));
  auto rows_mask = [&](const std::vector<float>& m, std::int64_t width, bool invert) {
    std::vector<float> full(static_cast<std::size_t>(b * width));
    for (std::int64_t i = 0; i < b; ++i)
      std::fill_n(full.begin() + i * width, width, invert ? 1.0f - m[static_cast<std::size_t>(i)] : m[static_cast<std::size_t>(i)]);
    return Tensor::from_vector(full, {b, width}).to(dev);
  };
  for (std::int64_t t = 0; t < t_max; ++t) {
    std::vector<bool> active(static_cast<std::size_t>(b));
    bool any = false;
    for (std::int64_t i = 0; i < b; ++i) {
      active[i] = t < len[i] && static_cast<std::int64_t>(hyp[i].size()) < max_symbols;
      any = any || active[i];
    }
    if (!any) continue;
    const Tensor f_t = f.select(0, t);  // [B, J]
    for (std::int64_t sym = 0; sym < max_symbols_per_step; ++sym) {
      const std::vector<float> logits = joint_step(f_t, cur.g).to(Device::cpu()).to_float_vector();
      bool emitted = false;
      for (std::int64_t i = 0; i < b; ++i) {
        const float* row = logits.data() + i * v;
        const auto k = static_cast<std::int32_t>(std::max_element(row, row + v) - row);
        const bool emit = active[i] && k != blank && static_cast<std::int64_t>(hyp[i].size()) < max_symbols;
        take[i] = emit ? 1.0f : 0.0f;
        ids[i] = emit ? k : 0;
        if (emit) hyp[i].push_back(k), emitted = true;
        else active[i] = false;  // blank: on to the next frame
      }
      if (!emitted) break;
      const Tensor embedded = nn::embedding_forward(Tensor::from_vector_i32(ids, {b}).to(dev), embed_->weight().value);
      PredState next = prediction_step(embedded, cur.lstm);
      const Tensor keep_h = rows_mask(take, config_.pred_n_hid, true), take_h = rows_mask(take, config_.pred_n_hid, false);
      for (std::size_t k = 0; k < next.lstm.size(); ++k) {
        if (!cur.lstm[k].defined()) {
          cur.lstm[k].h = Tensor::zeros(next.lstm[k].h.shape(), DType::f32, dev);
          cur.lstm[k].c = Tensor::zeros(next.lstm[k].c.shape(), DType::f32, dev);
        }
        next.lstm[k].h = masked_merge(cur.lstm[k].h, next.lstm[k].h, keep_h, take_h);
        next.lstm[k].c = masked_merge(cur.lstm[k].c, next.lstm[k].c, keep_h, take_h);
      }
      next.g = masked_merge(cur.g, next.g, rows_mask(take, config_.joint_n_hid, true), rows_mask(take, config_.joint_n_hid, false));
      cur = std::move(next);
    }
  }
  return hyp;
}

std::int64_t count_parameters(const RnntConfig& c) {
  return lstm_params(c.in_features, c.enc_n_hid, c.enc_pre_rnn_layers) +
         lstm_params(c.enc_stack_time_factor * c.enc_n_hid, c.enc_n_hid, c.enc_post_rnn_layers) +
         (c.n_classes - 1) * c.pred_n_hid + lstm_params(c.pred_n_hid, c.pred_n_hid, c.pred_rnn_layers) +
         (c.enc_n_hid + 1) * c.joint_n_hid + (c.pred_n_hid + 1) * c.joint_n_hid + (c.joint_n_hid + 1) * c.n_classes;
}

}  // namespace benchhost::rnnt

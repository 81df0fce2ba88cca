// The Tensor-level API of nn/lstm.hpp (argument checks, output allocation, dispatch) and the
// nn::LSTM module. The ops are declared next to their CPU implementations in nn/cpu/lstm.cpp
// (CUDA: nn/cuda/lstm_cudnn.cu).

#include "benchhost/nn/lstm.hpp"

#include <cmath>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/random.hpp"

namespace benchhost::nn {

namespace {

std::string describe(const Tensor& t) { return t.defined() ? t.describe() : std::string("undefined"); }

void check_floating(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
  const DType d = t.dtype();
  BH_CHECK_AS(InvalidArgument, d == DType::f32 || d == DType::f16 || d == DType::bf16,
              "{}: {} has dtype {}; f32, f16 and bf16 are implemented", op, what, dtype_name(d));
}

void check_tensor(const Tensor& t, const Shape& want, const Device& device, const char* op, const char* what) {
  check_floating(t, op, what);
  BH_CHECK_AS(InvalidArgument, t.shape() == want && t.device() == device,
              "{}: {} must be {} on {}, got {}", op, what, shape_str(want), device.str(), describe(t));
}

struct Dims {
  std::int64_t T = 1, B = 0, I = 0, H = 0;
};

// I and H from the weights, checked against each other and x's device.
Dims check_weights(const LstmWeights& w, const Device& device, const char* op) {
  check_floating(w.w_ih, op, "weight_ih");
  check_floating(w.w_hh, op, "weight_hh");
  BH_CHECK_AS(InvalidArgument, w.w_hh.dim() == 2 && w.w_hh.size(1) > 0 && w.w_hh.size(0) == 4 * w.w_hh.size(1),
              "{}: weight_hh must be [4H, H], got {}", op, describe(w.w_hh));
  Dims d;
  d.H = w.w_hh.size(1);
  BH_CHECK_AS(InvalidArgument, w.w_ih.dim() == 2 && w.w_ih.size(0) == 4 * d.H && w.w_ih.size(1) > 0,
              "{}: weight_ih must be [4H, I] = [{}, I], got {}", op, 4 * d.H, describe(w.w_ih));
  d.I = w.w_ih.size(1);
  check_tensor(w.w_ih, {4 * d.H, d.I}, device, op, "weight_ih");
  check_tensor(w.w_hh, {4 * d.H, d.H}, device, op, "weight_hh");
  check_tensor(w.b_ih, {4 * d.H}, device, op, "bias_ih");
  check_tensor(w.b_hh, {4 * d.H}, device, op, "bias_hh");
  return d;
}

// A state pair: both defined ([B, H], x's device) or both undefined.
void check_state(const LstmState& s, const Dims& d, const Device& device, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, s.h.defined() == s.c.defined(), "{}: {} needs both h and c, or neither", op, what);
  if (!s.h.defined()) return;
  check_tensor(s.h, {d.B, d.H}, device, op, fmt::format("{}.h", what).c_str());
  check_tensor(s.c, {d.B, d.H}, device, op, fmt::format("{}.c", what).c_str());
}

Dims check_sequence(const Tensor& x, const LstmWeights& w, const char* op) {
  check_floating(x, op, "input");
  Dims d = check_weights(w, x.device(), op);
  BH_CHECK_AS(InvalidArgument, x.dim() == 3 && x.size(0) > 0 && x.size(1) > 0 && x.size(2) == d.I,
              "{}: input must be [T, B, I] with I = {} (weight_ih's columns) and T, B > 0, got {}", op, d.I,
              describe(x));
  d.T = x.size(0);
  d.B = x.size(1);
  return d;
}

Tensor contig(const Tensor& t) { return t.defined() ? t.contiguous() : t; }

std::vector<Tensor> weight_inputs(const LstmWeights& w) {
  return {w.w_ih.contiguous(), w.w_hh.contiguous(), w.b_ih.contiguous(), w.b_hh.contiguous()};
}

}  // namespace

Tensor lstm_forward(const Tensor& x, const LstmWeights& w, const LstmState& initial, LstmState* final_state) {
  const char* op = "lstm_forward";
  const Dims d = check_sequence(x, w, op);
  check_state(initial, d, x.device(), op, "initial state");
  OpCall call;
  call.inputs = {x.contiguous(), contig(initial.h), contig(initial.c)};
  for (Tensor& t : weight_inputs(w)) call.inputs.push_back(std::move(t));
  call.outputs = {Tensor::empty({d.T, d.B, d.H}, x.dtype(), x.device()),
                  Tensor::empty({d.B, d.H}, x.dtype(), x.device()), Tensor::empty({d.B, d.H}, x.dtype(), x.device())};
  dispatch("lstm_forward", call);
  if (final_state) *final_state = {call.outputs[1], call.outputs[2]};
  return call.outputs[0];
}

LstmInputGrads lstm_backward(const Tensor& dy, const Tensor& x, const LstmWeights& w, const LstmState& initial,
                             const LstmState& dfinal, LstmWeightGrads& grads) {
  const char* op = "lstm_backward";
  const Dims d = check_sequence(x, w, op);
  check_state(initial, d, x.device(), op, "initial state");
  check_state(dfinal, d, x.device(), op, "final-state gradient");
  check_tensor(dy, {d.T, d.B, d.H}, x.device(), op, "output gradient");
  // Skipped parameter gradients are computed into scratch (the kernels produce all four).
  auto grad_or_scratch = [&](Tensor& g, const Tensor& p, const char* what) {
    if (!g.defined()) return Tensor::zeros(p.shape(), DType::f32, x.device());
    check_tensor(g, p.shape(), x.device(), op, what);
    BH_CHECK_AS(InvalidArgument, g.is_contiguous(), "{}: {} must be contiguous, got {}", op, what, g.describe());
    return g;
  };
  OpCall call;
  call.inputs = {x.contiguous(), contig(initial.h), contig(initial.c)};
  for (Tensor& t : weight_inputs(w)) call.inputs.push_back(std::move(t));
  call.inputs.push_back(dy.contiguous());
  call.inputs.push_back(contig(dfinal.h));
  call.inputs.push_back(contig(dfinal.c));
  const bool with_initial = initial.defined();
  call.outputs = {Tensor::empty(x.shape(), x.dtype(), x.device()),
                  with_initial ? Tensor::empty({d.B, d.H}, initial.h.dtype(), x.device()) : Tensor(),
                  with_initial ? Tensor::empty({d.B, d.H}, initial.c.dtype(), x.device()) : Tensor(),
                  grad_or_scratch(grads.w_ih, w.w_ih, "weight_ih gradient"),
                  grad_or_scratch(grads.w_hh, w.w_hh, "weight_hh gradient"),
                  grad_or_scratch(grads.b_ih, w.b_ih, "bias_ih gradient"),
                  grad_or_scratch(grads.b_hh, w.b_hh, "bias_hh gradient")};
  dispatch("lstm_backward", call);
  LstmInputGrads out;
  out.dx = call.outputs[0];
  if (with_initial) out.dinitial = {call.outputs[1], call.outputs[2]};
  return out;
}

LstmState lstm_cell_forward(const Tensor& x, const LstmState& state, const LstmWeights& w) {
  const char* op = "lstm_cell_forward";
  check_floating(x, op, "input");
  Dims d = check_weights(w, x.device(), op);
  BH_CHECK_AS(InvalidArgument, x.dim() == 2 && x.size(0) > 0 && x.size(1) == d.I,
              "{}: input must be [B, I] with I = {} (weight_ih's columns), got {}", op, d.I, describe(x));
  d.B = x.size(0);
  check_state(state, d, x.device(), op, "state");
  OpCall call;
  call.inputs = {x.contiguous(), contig(state.h), contig(state.c)};
  for (Tensor& t : weight_inputs(w)) call.inputs.push_back(std::move(t));
  call.outputs = {Tensor::empty({d.B, d.H}, x.dtype(), x.device()), Tensor::empty({d.B, d.H}, x.dtype(), x.device())};
  dispatch("lstm_cell_forward", call);
  return {call.outputs[0], call.outputs[1]};
}

// ---------------------------------------------------------------------------------------------
// nn::LSTM
// ---------------------------------------------------------------------------------------------

LSTM::LSTM(const LstmSpec& spec, const DropoutRng* rng, std::uint64_t stream_id, std::uint64_t init_seed)
    : spec_(spec), rng_(rng), stream_id_(stream_id) {
  BH_CHECK_AS(InvalidArgument, spec.input_size > 0 && spec.hidden_size > 0 && spec.layers > 0,
              "LSTM: input_size ({}), hidden_size ({}) and layers ({}) must be positive", spec.input_size,
              spec.hidden_size, spec.layers);
  BH_CHECK_AS(InvalidArgument, spec.dropout >= 0.0f && spec.dropout < 1.0f, "LSTM: dropout must be in [0, 1), got {}",
              spec.dropout);
  BH_CHECK_AS(InvalidArgument, spec.dropout == 0.0f || rng != nullptr, "LSTM with dropout {} needs a DropoutRng",
              spec.dropout);
  const std::int64_t H = spec.hidden_size;
  const float bound = 1.0f / std::sqrt(static_cast<float>(H));
  auto uniform = [&](const Shape& shape, std::uint64_t stream) {
    Tensor t = Tensor::empty(shape, DType::f32);
    Rng r(init_seed, stream);
    float* p = t.data<float>();
    for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = r.uniform(-bound, bound);
    return t;
  };
  for (std::int64_t k = 0; k < spec.layers; ++k) {
    const std::int64_t in = k == 0 ? spec.input_size : H;
    const auto s = static_cast<std::uint64_t>(k) * 4;
    LayerParams p;
    p.w_ih = &register_parameter(fmt::format("weight_ih_l{}", k), uniform({4 * H, in}, s));
    p.w_hh = &register_parameter(fmt::format("weight_hh_l{}", k), uniform({4 * H, H}, s + 1));
    p.b_ih = &register_parameter(fmt::format("bias_ih_l{}", k), uniform({4 * H}, s + 2), false);
    p.b_hh = &register_parameter(fmt::format("bias_hh_l{}", k), uniform({4 * H}, s + 3), false);
    params_.push_back(p);
  }
}

LstmWeights LSTM::weights(std::int64_t k) const {
  BH_CHECK_AS(InvalidArgument, k >= 0 && k < spec_.layers, "LSTM '{}': layer {} of {}", name(), k, spec_.layers);
  const LayerParams& p = params_[static_cast<std::size_t>(k)];
  return {p.w_ih->value, p.w_hh->value, p.b_ih->value, p.b_hh->value};
}

bool LSTM::dropout_after(std::int64_t k) const {
  return spec_.dropout > 0.0f && (k + 1 < spec_.layers || spec_.dropout_after_last);
}

Tensor LSTM::forward(const Tensor& x) { return forward(x, {}, nullptr); }

Tensor LSTM::forward(const Tensor& x, const std::vector<LstmState>& initial, std::vector<LstmState>* final_states) {
  BH_CHECK_AS(InvalidArgument, initial.empty() || static_cast<std::int64_t>(initial.size()) == spec_.layers,
              "LSTM '{}': {} initial states for {} layers (pass none for zeros)", name(), initial.size(),
              spec_.layers);
  const bool training = is_training();
  inputs_.clear();
  initial_.clear();
  dropout_saved_.clear();
  dropped_.clear();
  if (final_states) final_states->assign(static_cast<std::size_t>(spec_.layers), LstmState{});
  Tensor h = x;
  for (std::int64_t k = 0; k < spec_.layers; ++k) {
    const LstmState init = initial.empty() ? LstmState{} : initial[static_cast<std::size_t>(k)];
    LstmState fin;
    Tensor y = lstm_forward(h, weights(k), init, final_states ? &fin : nullptr);
    if (final_states) (*final_states)[static_cast<std::size_t>(k)] = fin;
    if (training) {
      inputs_.push_back(h);
      initial_.push_back(init);
    }
    const bool drop = training && dropout_after(k);
    DropoutSaved saved;
    if (drop) y = dropout_forward(y, spec_.dropout, rng_->seed, rng_->step, stream_id_ + static_cast<std::uint64_t>(k),
                                  &saved);
    if (training) {
      dropout_saved_.push_back(std::move(saved));
      dropped_.push_back(drop);
    }
    h = y;
  }
  return h;
}

Tensor LSTM::backward(const Tensor& dy) { return backward(dy, {}, nullptr); }

Tensor LSTM::backward(const Tensor& dy, const std::vector<LstmState>& dfinal, std::vector<LstmState>* dinitial) {
  BH_CHECK_AS(InvalidArgument, static_cast<std::int64_t>(inputs_.size()) == spec_.layers,
              "LSTM '{}': backward() needs a training-mode forward() first", name());
  BH_CHECK_AS(InvalidArgument, dfinal.empty() || static_cast<std::int64_t>(dfinal.size()) == spec_.layers,
              "LSTM '{}': {} final-state gradients for {} layers (pass none for zeros)", name(), dfinal.size(),
              spec_.layers);
  if (dinitial) dinitial->assign(static_cast<std::size_t>(spec_.layers), LstmState{});
  Tensor g = dy;
  for (std::int64_t k = spec_.layers - 1; k >= 0; --k) {
    const auto ku = static_cast<std::size_t>(k);
    if (dropped_[ku]) g = dropout_backward(g, dropout_saved_[ku]);
    const LayerParams& p = params_[ku];
    LstmWeightGrads grads{p.w_ih->grad, p.w_hh->grad, p.b_ih->grad, p.b_hh->grad};
    const LstmInputGrads r =
        lstm_backward(g, inputs_[ku], weights(k), initial_[ku], dfinal.empty() ? LstmState{} : dfinal[ku], grads);
    for (Parameter* q : {p.w_ih, p.w_hh, p.b_ih, p.b_hh}) q->mark_grad_ready();
    if (dinitial) (*dinitial)[ku] = r.dinitial;
    g = r.dx;
  }
  inputs_.clear();
  initial_.clear();
  dropout_saved_.clear();
  dropped_.clear();
  return g;
}

Tensor LSTM::step(const Tensor& x, std::vector<LstmState>& state) {
  BH_CHECK_AS(InvalidArgument, state.empty() || static_cast<std::int64_t>(state.size()) == spec_.layers,
              "LSTM '{}': step() state has {} entries for {} layers (pass an empty vector to start)", name(),
              state.size(), spec_.layers);
  state.resize(static_cast<std::size_t>(spec_.layers));
  Tensor h = x;
  for (std::int64_t k = 0; k < spec_.layers; ++k) {
    LstmState& s = state[static_cast<std::size_t>(k)];
    s = lstm_cell_forward(h, s, weights(k));
    h = s.h;
  }
  return h;
}

}  // namespace benchhost::nn

// The RNN-T model and workload pieces: the reference's parameter count, StackTime, the model's
// gradients against finite differences, greedy decoding on a hand-built model, the LR policy,
// WER of an empty hypothesis, and the shipped configurations' options and rules.

#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "benchhost/metrics/wer.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/transducer.hpp"
#include "benchhost/random.hpp"
#include "common/shipped_configs.hpp"
#include "small_rnnt.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::rnnt;

Tensor random_tensor(const Shape& shape, std::uint64_t seed, float scale = 1.0f) {
  Rng rng(seed, 0);
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = scale * (2.0f * rng.uniform() - 1.0f);
  return t;
}

TEST(RnntModel, ReferenceParameterCount) {
  const RnntConfig c;  // the defaults are the reference's
  EXPECT_EQ(count_parameters(c), 49006080);
  Rnnt model(c, 1);
  EXPECT_EQ(model.num_parameters(), 49006080);
  // The reference's state_dict names, so weights interchange with the peer.
  std::vector<std::string> names;
  for (nn::Parameter* p : model.parameters()) names.push_back(p->name);
  for (const char* n : {"encoder.pre_rnn.lstm.weight_ih_l0", "encoder.post_rnn.lstm.bias_hh_l2", "prediction.embed.weight",
                        "prediction.dec_rnn.lstm.weight_hh_l1", "joint_enc.weight", "joint_pred.bias", "joint_net.2.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  // Initialisation: forget-gate bias_ih 1.0 * 0.5, bias_hh forget part 0.
  for (nn::Parameter* p : model.parameters()) {
    if (p->name == "encoder.pre_rnn.lstm.bias_ih_l0") {
      EXPECT_FLOAT_EQ(p->value.data<float>()[1024], 0.5f);
      EXPECT_LE(std::fabs(p->value.data<float>()[0]), 0.5f / 32.0f + 1e-6f);
    }
    if (p->name == "encoder.pre_rnn.lstm.bias_hh_l0") EXPECT_EQ(p->value.data<float>()[1500], 0.0f);
  }
}

TEST(RnntModel, MlperfConfigBuildsTheReference) {
  const Options o = declared_options<RnntWorkload>(plugin_values(read_config_file(test_support::shipped_config("rnnt", "mlperf.conf").string()), "rnnt"));
  EXPECT_EQ(count_parameters(RnntWorkload::model_config(o, o.get_int("vocab-size"))), 49006080);
}

TEST(RnntModel, StackTimeConcatenatesFrames) {
  // x [T = 3, B = 1, H = 2]: frames (0,1), (2,3), (4,5); factor 2 -> [(0,1,2,3), (4,5,0,0)].
  const Tensor x = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {3, 1, 2});
  const Tensor y = nn::stack_time_forward(x, 2);
  ASSERT_EQ(y.shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(y.to_float_vector(), (std::vector<float>{0, 1, 2, 3, 4, 5, 0, 0}));
  const Tensor dx = nn::stack_time_backward(y, 2, 3);
  EXPECT_EQ(dx.to_float_vector(), x.to_float_vector());
  EXPECT_EQ(nn::stacked_length(5, 2), 3);
}

RnntConfig tiny_config() {
  RnntConfig c;
  c.in_features = 6;
  c.enc_n_hid = 5;
  c.enc_pre_rnn_layers = 1;
  c.enc_post_rnn_layers = 2;
  c.enc_dropout = 0;
  c.pred_n_hid = 4;
  c.pred_rnn_layers = 2;
  c.pred_dropout = 0;
  c.joint_n_hid = 7;
  c.joint_dropout = 0;
  c.n_classes = 6;
  return c;
}

double loss_of(Rnnt& m, const Tensor& x, const Tensor& labels, const Tensor& flen, const Tensor& llen, bool backward) {
  const Tensor logits = m.forward(x, labels);
  nn::TransducerLossSaved saved;
  const Tensor loss = nn::transducer_loss_forward(logits, labels, flen, llen, {}, &saved);
  if (backward) m.backward(nn::transducer_loss_backward(saved, 1.0f));
  return loss.item({0});
}

// Every parameter's gradient (a few entries each) against central differences of the loss.
TEST(RnntModel, GradientsMatchFiniteDifferences) {
  Rnnt m(tiny_config(), 3);
  for (nn::Parameter* p : m.parameters()) {  // larger weights than the init, for visible gradients
    float* v = p->value.data<float>();
    Rng rng(11, static_cast<std::uint64_t>(p->value.numel()));
    for (std::int64_t i = 0; i < p->value.numel(); ++i) v[i] += 0.3f * (2.0f * rng.uniform() - 1.0f);
  }
  const Tensor x = random_tensor({7, 2, 6}, 5);  // T = 7 -> T' = 4
  const Tensor labels = Tensor::from_vector_i32({1, 3, 2, 4, 0, 0}, {2, 3});
  const Tensor flen = Tensor::from_vector_i32({4, 3}, {2});
  const Tensor llen = Tensor::from_vector_i32({3, 1}, {2});
  m.zero_grad();
  loss_of(m, x, labels, flen, llen, true);
  double worst = 0;
  for (nn::Parameter* p : m.parameters()) {
    float* v = p->value.data<float>();
    const float* g = p->grad.data<float>();
    for (std::int64_t i : {std::int64_t{0}, p->value.numel() / 2, p->value.numel() - 1}) {
      const float keep = v[i], h = 1e-2f;
      v[i] = keep + h;
      const double up = loss_of(m, x, labels, flen, llen, false);
      v[i] = keep - h;
      const double down = loss_of(m, x, labels, flen, llen, false);
      v[i] = keep;
      const double fd = (up - down) / (2.0 * h);
      const double err = std::fabs(fd - g[i]) / std::max(0.05, std::fabs(fd));
      worst = std::max(worst, err);
      EXPECT_LT(err, 2e-2) << p->name << "[" << i << "]: finite difference " << fd << ", gradient " << g[i];
    }
  }
  std::printf("worst relative gradient error vs finite differences: %.2e\n", worst);
}

// A hand-built model whose joint ignores the encoder: from SOS the prediction network's unit 0 is
// on and the joint says class 2; after label 2 unit 1 is on (class 4); after label 4 unit 2
// (blank). Greedy decoding therefore emits 2, 4 and then blanks to the end; the caps per frame
// and per utterance and each utterance's own length cut that short, utterance by utterance.
TEST(RnntModel, GreedyDecodingOnHandBuiltModel) {
  RnntConfig c = tiny_config();
  c.pred_rnn_layers = 1;
  c.n_classes = 6;  // blank 5
  Rnnt m(c, 1);
  m.train(false);
  for (nn::Parameter* p : m.parameters()) p->value.zero_();
  auto param = [&](const std::string& name) -> float* {
    for (nn::Parameter* p : m.parameters())
      if (p->name == name) return p->value.data<float>();
    throw std::runtime_error(name);
  };
  // LSTM gates i, f, g, o: c' = i * g (forget gate shut), h = o * tanh(c'), o open, g = 1;
  // the input gate of unit k opens when the input's element k is 1 (SOS opens unit 0).
  const std::int64_t hp = c.pred_n_hid;
  float* b_ih = param("prediction.dec_rnn.lstm.bias_ih_l0");
  float* w_ih = param("prediction.dec_rnn.lstm.weight_ih_l0");  // [4H, H]
  float* emb = param("prediction.embed.weight");                 // [5, H]
  for (std::int64_t k = 0; k < hp; ++k) {
    b_ih[0 * hp + k] = k == 0 ? 10.0f : -10.0f;
    b_ih[1 * hp + k] = -10.0f;
    b_ih[2 * hp + k] = 10.0f;
    b_ih[3 * hp + k] = 10.0f;
    w_ih[(0 * hp + k) * hp + k] = 40.0f;
  }
  w_ih[(0 * hp + 0) * hp + 1] = -40.0f;
  w_ih[(0 * hp + 0) * hp + 2] = -40.0f;
  emb[2 * hp + 1] = 1.0f;  // label 2 -> unit 1
  emb[4 * hp + 2] = 1.0f;  // label 4 -> unit 2
  float* jp = param("joint_pred.weight");  // [J, P]: copies units 0..2
  for (std::int64_t k = 0; k < 3; ++k) jp[k * hp + k] = 1.0f;
  float* out = param("joint_net.2.weight");  // [V, J]
  const std::int64_t j = c.joint_n_hid;
  out[2 * j + 0] = 10.0f;  // unit 0 -> class 2
  out[4 * j + 1] = 10.0f;  // unit 1 -> class 4
  out[5 * j + 2] = 10.0f;  // unit 2 -> blank
  const Tensor x = random_tensor({8, 3, 6}, 2);  // T' = 4
  using Ids = std::vector<std::int32_t>;
  const auto hyp = m.greedy_decode(x, {8, 3, 0}, 30, 300);
  ASSERT_EQ(hyp.size(), 3u);
  EXPECT_EQ(hyp[0], (Ids{2, 4}));
  EXPECT_EQ(hyp[1], (Ids{2, 4}));
  EXPECT_TRUE(hyp[2].empty());  // no frames, no symbols
  EXPECT_EQ(m.greedy_decode(x, {8, 8, 8}, 30, 1)[0], (Ids{2}));  // per-utterance cap
  // One symbol per frame: 2 at frame 0 and 4 at frame 1, so a one-frame utterance stops at 2
  // while its neighbour goes on (the masked state merge).
  const auto one = m.greedy_decode(x, {8, 2, 1}, 1, 300);
  EXPECT_EQ(one[0], (Ids{2, 4}));
  EXPECT_EQ(one[1], (Ids{2}));
  EXPECT_EQ(one[2], (Ids{2}));
}

TEST(RnntSchedule, WarmupHoldDecayFloor) {
  const RnntLrSchedule s(0.004f, 2, 3, 0.5, 1e-5f, 10);  // 10 steps per epoch
  EXPECT_FLOAT_EQ(s.lr(0), 0.004f * 2.0f / 21.0f);        // reference step 1: (1 + 1) / (20 + 1)
  EXPECT_FLOAT_EQ(s.lr(18), 0.004f * 20.0f / 21.0f);
  EXPECT_FLOAT_EQ(s.lr(19), 0.004f);                      // hold from reference step 20
  EXPECT_FLOAT_EQ(s.lr(48), 0.004f);
  EXPECT_FLOAT_EQ(s.lr(49), 0.004f);                      // epoch 5: 0.5^0
  EXPECT_FLOAT_EQ(s.lr(50), 0.002f);                      // epoch 6: 0.5^1
  EXPECT_FLOAT_EQ(s.lr(100000), 1e-5f);                   // the floor
}

TEST(RnntMetric, EmptyHypothesisScoresOne) {
  metrics::WordErrorRate wer;
  wer.add("", "one two three");
  wer.add("", "oh");
  EXPECT_EQ(wer.value(), 1.0);
}

}  // namespace

namespace {

// Note [RNN-T precision]: under bf16 and fp16 the joint's Linear layers and the embedding store the
// half type (the LSTMs and the transducer loss compute in f32, as the policy's promotion does), so
// the loss and gradients of one batch are fp32's within half-precision rounding; fp16 seeds
// backward with its loss scale and unscales before the clip; training steps and greedy decoding run.
RunContext precision_context(const std::string& precision) { return test::small_context(precision); }

ModelBatch precision_batch(std::int64_t in_features) {
  ModelBatch batch;
  batch.features = random_tensor({9, 3, in_features}, 17);
  batch.labels = Tensor::from_vector_i32({1, 7, 3, 10, 2, 0, 0, 0, 9, 9, 0, 0}, {3, 4});
  batch.feature_lengths = {9, 6, 4};
  batch.frame_lengths = Tensor::from_vector_i32({5, 3, 2}, {3});
  batch.label_lengths = Tensor::from_vector_i32({4, 1, 2}, {3});
  return batch;
}

class RnntPrecision : public ::testing::TestWithParam<std::string> {};

TEST_P(RnntPrecision, HalfTypesTrainLikeFp32) {
  RnntWorkload full, half;
  full.setup(precision_context("fp32"));
  half.setup(precision_context(GetParam()));
  const ModelBatch batch = precision_batch(full.model().config().in_features);
  // The reference initialisation leaves the logits near 1e-5, where every precision's loss is
  // log(V) per step; larger weights (the same in both) give logits of order one.
  for (RnntWorkload* w : {&full, &half})
    for (nn::Parameter* p : w->model().parameters())
      for (std::int64_t k = 0; k < p->value.numel(); ++k) p->value.data<float>()[k] *= 6.0f;
  full.model().zero_grad();
  half.model().zero_grad();
  const double want = full.loss_and_gradients(batch), got = half.loss_and_gradients(batch);
  EXPECT_NEAR(got, want, 0.02 * std::fabs(want)) << GetParam();
  EXPECT_NE(got, want) << "the half-precision run computed in f32 throughout";
  std::printf("loss fp32 %.6f, %s %.6f\n", want, GetParam().c_str(), got);
  // The gradients point the same way (fp16's carry the loss scale: compare directions).
  const std::vector<nn::Parameter*> a = full.model().parameters(), b = half.model().parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> x = a[i]->grad.to_float_vector(), y = b[i]->grad.to_float_vector();
    double dot = 0, nx = 0, ny = 0;
    for (std::size_t k = 0; k < x.size(); ++k) dot += double(x[k]) * y[k], nx += double(x[k]) * x[k], ny += double(y[k]) * y[k];
    if (nx == 0) continue;
    EXPECT_GT(dot / std::sqrt(nx * ny), 0.99) << a[i]->name << " in " << GetParam();
  }
  // The joint's logits are in the storage type.
  half.model().train(false);
  const DType storage = GetParam() == "bf16" ? DType::bf16 : DType::f16;
  EXPECT_EQ(half.model().forward(batch.features, batch.labels).dtype(), storage);
  half.model().train(true);
  half.model().zero_grad();
  for (int s = 0; s < 4; ++s) {
    half.prepare_batch();
    const StepResult r = half.train_step();
    ASSERT_TRUE(std::isfinite(r.loss)) << "step " << s;
    if (GetParam() == "fp16") {
      EXPECT_GT(r.loss_scale, 1.0);
    } else {
      EXPECT_EQ(r.loss_scale, 0.0);
    }
  }
  half.model().train(false);
  const auto decoded = half.model().greedy_decode(batch.features, batch.feature_lengths, 30, 300);
  EXPECT_EQ(decoded.size(), 3u);
  full.teardown();
  half.teardown();
}

INSTANTIATE_TEST_SUITE_P(Cpu, RnntPrecision, ::testing::Values("bf16", "fp16"), [](const auto& i) { return i.param; });

TEST(RnntWorkload, RefusesFp8SayingWhy) {
  EXPECT_NE(RnntWorkload::check_support(precision_context("fp8")).find("run bf16"), std::string::npos);
  EXPECT_EQ(RnntWorkload::check_support(precision_context("bf16")), "");
}

}  // namespace

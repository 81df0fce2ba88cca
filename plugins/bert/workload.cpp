#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "benchhost/device.hpp"
#include "benchhost/nn/math_mode.hpp"
#include "benchhost/optim/clip.hpp"
#include "benchhost/threading.hpp"
#include "epoch_order.hpp"
#include "initial_weights.hpp"

namespace benchhost::bert {
namespace {

// Each epoch's training order is Rng(seed, kShuffleStream + epoch)'s (lm::epoch_order).
constexpr std::uint64_t kShuffleStream = 0xe90c000ull;

// The model's shape and regularisation. With real data, vocab, seq-len and max-predictions come
// from the data folder; these are the shapes of synthetic runs.
std::vector<OptionSpec> model_options() {
  return {
      int_option("layers", 24, "transformer layers").at_least(1),
      int_option("hidden", 1024, "hidden size").at_least(1),
      int_option("heads", 16, "attention heads").at_least(1),
      int_option("ffn", 4096, "feed-forward size").at_least(1),
      int_option("vocab", 30522, "vocabulary size, 5 special tokens included (real data: taken from the data's vocab.txt)")
          .at_least(6),
      int_option("max-positions", 512, "position embeddings").at_least(1).in("tokens"),
      int_option("seq-len", 512, "tokens per sample (real data: taken from the shards)").at_least(4).in("tokens"),
      int_option("max-predictions", 76, "masked positions per sample (real data: from the shards)").at_least(1),
      float_option("hidden-dropout", 0.1, "dropout after embeddings, attention and FFN").at_least(0).below(1),
      float_option("attention-dropout", 0.1, "dropout on attention probabilities").at_least(0).below(1),
      float_option("init-std", 0.02, "std of the truncated-normal weight init (BERT's initializer_range)").above(0),
  };
}

// Batches, evaluation and the time-to-train target.
std::vector<OptionSpec> run_options() {
  return {
      int_option("batch-size", 32, "per-device batch size (rows) when -b is not given").at_least(1).in("samples"),
      int_option("eval-batch-size", 64, "evaluation batch size").at_least(1).in("samples"),
      int_option("eval-samples", 10000, "evaluation samples used (MLPerf: 10000; 0 = all)").at_least(0).in("samples"),
      int_option("eval-every-samples", 0,
                 "evaluate every N training samples (0 = MLPerf rule FLOOR(0.05*(230.23*GBS+3e6), 25000))")
          .at_least(0)
          .in("samples"),
      int_option("max-epochs", 1, "time-to-train gives up after this many passes over the training shards")
          .at_least(1)
          .in("epochs"),
      float_option("target", 0.72, "masked-LM accuracy target (MLPerf: 0.720)").above(0).at_most(1),
  };
}

// Where the samples come from (the build-* options: Note [A data folder built once from a
// corpus]) and how they are packed into rows.
std::vector<OptionSpec> data_options() {
  return {
      string_option("data-dir", "", "folder with part_*.hdf5, eval.hdf5 and vocab.txt (MLPerf layout)"),
      string_option("corpus", "", "text to build data-dir from when it holds no shards ('kjv' = bible-kjv-text)"),
      int_option("build-vocab-size", 4096, "WordPiece vocabulary size when building from a corpus").at_least(6),
      int_option("build-seq-len", 128, "sequence length when building from a corpus").at_least(8).in("tokens"),
      int_option("build-max-predictions", 20, "masked positions when building from a corpus").at_least(1),
      int_option("build-dupe-factor", 5, "passes with fresh masks when building from a corpus").at_least(1),
      bool_option("packing", false, "pack several sequences per row (block-diagonal attention)"),
      int_option("max-per-row", 3, "most sequences in one packed row").at_least(1),
  };
}

// LAMB with linear warm-up and polynomial decay, as MLPerf's reference trains.
std::vector<OptionSpec> optimizer_options() {
  return {
      float_option("lr", 0.00035, "LAMB base learning rate (opt_base_learning_rate)").above(0),
      int_option("warmup-steps", 0, "linear warm-up steps (opt_learning_rate_warmup_steps)").at_least(0).in("steps"),
      int_option("start-warmup-step", 0, "MLPerf start_warmup_step (logged)").in("steps"),
      int_option("train-steps", 13700, "steps of the polynomial decay (opt_learning_rate_training_steps)")
          .at_least(1)
          .in("steps"),
      float_option("lamb-beta1", 0.9, "LAMB beta1").at_least(0).below(1),
      float_option("lamb-beta2", 0.999, "LAMB beta2").at_least(0).below(1),
      float_option("lamb-epsilon", 1e-6, "LAMB epsilon").above(0),
      float_option("weight-decay", 0.01, "LAMB weight decay rate").at_least(0),
      float_option("clip-norm", 1.0, "global gradient norm clip (0 = off)").at_least(0),
  };
}

std::vector<OptionSpec> declared_options() {
  std::vector<OptionSpec> all;
  for (auto group : {model_options(), run_options(), data_options(), optimizer_options(), lm::initial_weights_options()})
    all.insert(all.end(), group.begin(), group.end());
  return all;
}

// What MLPerf Training v3.0 requires of a "bert" result (closed_bert.yaml and the rules).
mlperf::Rules mlperf_rules() {
  mlperf::Rules r;
  r.closed_division = true;
  r.runs = 10;
  r.olympic_drop_each_side = 1;
  r.eval_cadence = "every FLOOR(0.05 x (230.23 x global batch + 3,000,000), 25,000) training samples";
  r.closed_target = mlperf::between(0.720, 1.0, false, true);
  for (const char* key : {"global_batch_size", "opt_base_learning_rate", "opt_lamb_epsilon",
                          "opt_learning_rate_training_steps", "opt_learning_rate_warmup_steps", "num_warmup_steps",
                          "start_warmup_step", "opt_lamb_beta_1", "opt_lamb_beta_2", "opt_lamb_weight_decay_rate"})
    r.keys.push_back(mlperf::logged_once(key));  // exactly once, any value
  return r;
}

}  // namespace

WorkloadInfo BertWorkload::describe() {
  WorkloadInfo i;
  i.name = "bert";
  i.version = "1.0.0";
  i.benchmark = "bert";
  i.description = "BERT-large pre-training (masked LM + NSP), LAMB; mini: 2 layers on the King James Bible";
  i.metric_name = "masked_lm_accuracy";
  i.metric_target = 0.720;
  i.higher_is_better = true;
  i.devices = {"cpu", "cuda"};  // cuda: fp32 and tf32 (check_support)
  i.precisions = {"fp32", "tf32", "bf16", "fp16", "fp8"};  // as the device allows (check_support)
  i.modes = {"ttt", "train", "infer"};
  i.options = declared_options();
  i.configs = {"mlperf.conf", "mini.conf"};
  i.default_config = "mini.conf";  // runs on a fresh machine; --config mlperf for the reference
  i.mlperf = mlperf_rules();
  return i;
}

std::string BertWorkload::check_support(const RunContext& ctx) {
  // The device must exist and the SDK's layers must run this precision on it.
  const std::string why = PrecisionPolicy::layers_support(ctx.precision, ctx.device);
  return why.empty() ? why : "bert: " + why;
}

std::int64_t BertWorkload::mlperf_eval_interval(std::int64_t gbs) {
  const double raw = 0.05 * (230.23 * static_cast<double>(gbs) + 3e6);
  return static_cast<std::int64_t>(std::floor(raw / 25000.0)) * 25000;
}

RunInfo BertWorkload::setup(const RunContext& ctx) {
  ctx_ = ctx;
  if (ctx.num_threads > 0) set_num_threads(ctx.num_threads);
  precision_ = TrainingPrecision(ctx.precision, ctx.device);
  read_run_options();
  build_data();
  measure_baselines();
  build_model();
  build_optimizer();
  log_hyperparameters();
  return run_info();
}

void BertWorkload::read_run_options() {
  const Options& o = ctx_.options;
  auto& s = cfg_.shape;
  s.layers = o.get_int("layers");
  s.hidden = o.get_int("hidden");
  s.heads = o.get_int("heads");
  s.ffn = o.get_int("ffn");
  s.vocab = o.get_int("vocab");
  s.max_positions = o.get_int("max-positions");
  s.seq_len = o.get_int("seq-len");
  max_predictions_ = o.get_int("max-predictions");
  cfg_.hidden_dropout = static_cast<float>(o.get_float("hidden-dropout"));
  cfg_.attention_dropout = static_cast<float>(o.get_float("attention-dropout"));
  cfg_.init_std = static_cast<float>(o.get_float("init-std"));
  batch_ = ctx_.batch_size > 0 ? ctx_.batch_size : o.get_int("batch-size");
  eval_batch_ = o.get_int("eval-batch-size");
  packing_ = o.get_bool("packing");
  max_per_row_ = o.get_int("max-per-row");
  target_ = o.get_float("target");
  clip_norm_ = static_cast<float>(o.get_float("clip-norm"));
}

void BertWorkload::build_data() {
  const Options& o = ctx_.options;
  auto& s = cfg_.shape;
  // Throughput and inference runs without a data folder use synthetic samples of the same shapes.
  synthetic_ = ctx_.synthetic_data || (ctx_.mode != "ttt" && o.get_string("data-dir").empty());
  if (synthetic_) {
    data_ = synthetic_data(batch_, eval_batch_, s.seq_len, max_predictions_, s.vocab, ctx_.seed);
  } else {
    const std::string dir = o.get_string("data-dir");
    BH_CHECK_AS(InvalidArgument, !dir.empty(), "bert: time-to-train needs bert.data-dir (MLPerf HDF5 shards) or --synthetic");
    text::BertPrepareOptions build;
    build.vocab_size = static_cast<std::int32_t>(o.get_int("build-vocab-size"));
    build.samples.seq_len = o.get_int("build-seq-len");
    build.samples.max_predictions = o.get_int("build-max-predictions");
    build.samples.dupe_factor = o.get_int("build-dupe-factor");
    data_ = read_data_folder(dir, o.get_string("corpus"), build);
    s.vocab = data_.vocab.size();
    s.seq_len = data_.train.seq_len;
    max_predictions_ = data_.train.max_predictions;
  }
  s.max_positions = std::max(s.max_positions, s.seq_len);
  const std::int64_t eval_samples = o.get_int("eval-samples");
  eval_limit_ = eval_samples > 0 ? std::min(eval_samples, data_.eval.count) : data_.eval.count;
  begin_epoch(0);
  eval_order_.resize(static_cast<std::size_t>(data_.eval.count));
  std::iota(eval_order_.begin(), eval_order_.end(), std::int64_t{0});  // evaluation keeps the file's order
}

void BertWorkload::measure_baselines() {
  majority_baseline_ = bigram_baseline_ = std::numeric_limits<double>::quiet_NaN();
  if (synthetic_) return;
  const auto& s = cfg_.shape;
  const MaskedLmBaselines b = masked_lm_baselines(data_.train, data_.eval, eval_limit_, s.vocab);
  majority_baseline_ = b.majority;
  bigram_baseline_ = b.left_bigram;
  fmt::print(stderr, "bert: {} training / {} eval samples ({} evaluated), vocabulary {}, seq_len {}; "
             "next-sentence labels {:.1f}% / {:.1f}% IsNext; masked-LM accuracy of always predicting '{}': {:.4f}, of "
             "the left neighbour's most frequent successor: {:.4f}; target {:.4f}\n", data_.train.count, data_.eval.count,
             eval_limit_, s.vocab, s.seq_len, 100.0 * text::nsp_split(data_.train).is_next_fraction(),
             100.0 * text::nsp_split(data_.eval).is_next_fraction(), data_.vocab.token(b.top_token), majority_baseline_,
             bigram_baseline_, target_);
}

void BertWorkload::build_model() {
  model_ = std::make_unique<BertModel>(cfg_, ctx_.seed);
  lm::place_initial_weights(*model_, ctx_.options, ctx_.device, precision_.policy());
}

void BertWorkload::build_optimizer() {
  const Options& o = ctx_.options;
  optim::LambOptions lo;
  lo.beta1 = static_cast<float>(o.get_float("lamb-beta1"));
  lo.beta2 = static_cast<float>(o.get_float("lamb-beta2"));
  lo.epsilon = static_cast<float>(o.get_float("lamb-epsilon"));
  lo.weight_decay = static_cast<float>(o.get_float("weight-decay"));
  optimizer_ = std::make_unique<optim::Lamb>(model_->parameters(), lo);
  const float lr = static_cast<float>(o.get_float("lr"));
  const std::int64_t warmup = o.get_int("warmup-steps"), total = o.get_int("train-steps");
  BH_CHECK_AS(InvalidArgument, total > warmup, "bert.train-steps {} must exceed bert.warmup-steps {}", total, warmup);
  schedule_ = std::make_unique<optim::WarmupPolySchedule>(
      optim::WarmupPolyOptions{.base_lr = lr, .warmup_steps = warmup, .total_steps = total, .power = 1.0f, .end_lr = 0.0f});
}

void BertWorkload::log_hyperparameters() {
  const Options& o = ctx_.options;
  const std::int64_t warmup = o.get_int("warmup-steps");
  hyper_ = {{"global_batch_size", batch_ * ctx_.world_size},
            {"opt_base_learning_rate", o.get_float("lr")},
            {"opt_lamb_epsilon", o.get_float("lamb-epsilon")},
            {"opt_learning_rate_training_steps", o.get_int("train-steps")},
            {"opt_learning_rate_warmup_steps", warmup},
            {"num_warmup_steps", warmup},
            {"start_warmup_step", o.get_int("start-warmup-step")},
            {"opt_lamb_beta_1", o.get_float("lamb-beta1")},
            {"opt_lamb_beta_2", o.get_float("lamb-beta2")},
            {"opt_lamb_weight_decay_rate", o.get_float("weight-decay")},
            {"gradient_accumulation_steps", std::int64_t{1}},
            {"max_sequence_length", cfg_.shape.seq_len},
            {"max_predictions_per_seq", max_predictions_}};
}

RunInfo BertWorkload::run_info() const {
  const Options& o = ctx_.options;
  RunInfo info;
  info.samples_per_epoch = data_.train.count;
  info.global_batch_size = batch_ * ctx_.world_size;
  const std::int64_t every = o.get_int("eval-every-samples");
  info.eval_every_samples = every > 0 ? every : mlperf_eval_interval(info.global_batch_size);
  info.max_epochs = o.get_int("max-epochs");
  info.train_flops_per_sample = lm::bert_train_flops_per_sample(cfg_.shape, max_predictions_);
  info.infer_flops_per_sample = info.train_flops_per_sample / 3.0;
  info.eval_samples = eval_limit_;
  info.metric_target = target_;  // the config's target (mini: calibrated), see plugin_abi.h
  return info;
}

void BertWorkload::begin_epoch(std::int64_t epoch) {
  order_ = lm::epoch_order(data_.train.count, ctx_.seed, kShuffleStream + static_cast<std::uint64_t>(epoch));
  cursor_ = 0;
}

StepResult BertWorkload::train_step() {
  const auto math = precision_.policy().math_scope();
  if (cursor_ >= static_cast<std::int64_t>(order_.size())) cursor_ = 0;  // throughput runs wrap around
  const std::int64_t avail = static_cast<std::int64_t>(order_.size()) - cursor_;
  const std::int64_t want = packing_ ? std::min(avail, batch_ * max_per_row_) : std::min(avail, batch_);
  std::int64_t used = 0;
  const BertBatch b = batch_to(
      make_batch(data_.train, order_, cursor_, want, packing_ ? batch_ : want, packing_, max_per_row_, &used), ctx_.device);
  cursor_ += used;
  model_->train(true);
  const BertOutput out = model_->forward(b, static_cast<std::uint64_t>(step_));
  train_nsp_.add(out.nsp_scores, b.nsp_labels);
  model_->backward(precision_.loss_scale());
  if (precision_.unscale_and_check(optimizer_->parameters())) {
    if (clip_norm_ > 0) optim::clip_grad_norm(optimizer_->parameters(), clip_norm_);
    optimizer_->step(*schedule_);
  }
  optimizer_->zero_grad();
  ++step_;
  StepResult r{used, out.loss};
  r.loss_scale = precision_.step_loss_scale();
  r.update_skipped = precision_.update_skipped();
  return r;
}

EvalResult BertWorkload::evaluate() {
  const auto math = precision_.policy().math_scope();
  model_->train(false);
  metrics::MaskedLmAccuracy masked_lm;
  metrics::TopKAccuracy next_sentence(1);
  for (std::int64_t first = 0; first < eval_limit_; first += eval_batch_) {
    const std::int64_t n = std::min(eval_batch_, eval_limit_ - first);
    const BertBatch b = batch_to(make_batch(data_.eval, eval_order_, first, n, n, false, 1, nullptr), ctx_.device);
    const BertOutput out = model_->forward(b, 0);
    masked_lm.add(out.mlm_scores, b.mlm_labels);
    next_sentence.add(out.nsp_scores, b.nsp_labels);
  }
  model_->train(true);
  const double mlm_accuracy = masked_lm.compute(ctx_.communicator);
  nsp_accuracy_ = next_sentence.compute(ctx_.communicator);
  // MLPerf scores the masked LM only; the NSP accuracy shows whether that head learns (against
  // the label split printed at setup), on the evaluated samples and on the training batches
  // since the previous evaluation.
  fmt::print(stderr, "bert: evaluation after {} steps: masked-LM accuracy {:.4f}, next-sentence accuracy {:.4f} "
             "(training batches since the last evaluation: {:.4f})\n", step_, mlm_accuracy, nsp_accuracy_,
             train_nsp_.compute());
  train_nsp_.reset();
  return {mlm_accuracy, eval_limit_};
}

StepResult BertWorkload::infer_step() {
  const auto math = precision_.policy().math_scope();
  model_->train(false);
  const std::int64_t n = std::min<std::int64_t>(batch_, data_.train.count);
  const BertBatch b = batch_to(make_batch(data_.train, order_, 0, n, n, false, 1, nullptr), ctx_.device);
  const BertOutput out = model_->forward(b, 0);
  return {n, out.loss};
}

void BertWorkload::synchronize() { benchhost::synchronize(ctx_.device); }

Hyperparameters BertWorkload::hyperparameters() const { return hyper_; }

void BertWorkload::teardown() {
  optimizer_.reset();
  model_.reset();
}

}  // namespace benchhost::bert

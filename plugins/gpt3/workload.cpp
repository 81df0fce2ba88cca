#include "workload.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "benchhost/device.hpp"
#include "benchhost/memory_budget.hpp"
#include "benchhost/metrics/perplexity.hpp"
#include "benchhost/nn/math_mode.hpp"
#include "benchhost/optim/clip.hpp"
#include "benchhost/threading.hpp"
#include "epoch_order.hpp"
#include "initial_weights.hpp"

namespace benchhost::gpt3 {
namespace {

// Each epoch's order of the training windows is Rng(seed, kShuffleStream + epoch)'s (lm::epoch_order).
constexpr std::uint64_t kShuffleStream = 0x6e90c000ull;

// The model's shape (the GPT-3 paper's family: configs/gpt3/<size>.conf) and regularisation.
std::vector<OptionSpec> model_options() {
  return {
      int_option("layers", 96, "transformer layers").at_least(1),
      int_option("hidden", 12288, "hidden size").at_least(1),
      int_option("heads", 96, "attention heads").at_least(1),
      int_option("ffn", 0, "feed-forward size (0 = 4 x hidden)").at_least(0),
      int_option("vocab", 50257, "vocabulary size (real data: from the tokenizer)").at_least(2),
      int_option("seq-len", 2048, "tokens per sample").at_least(1).in("tokens"),
      int_option("max-positions", 0, "learned positions (0 = seq-len)").at_least(0).in("tokens"),
      float_option("hidden-dropout", 0, "dropout after embeddings, attention and FFN").at_least(0).below(1),
      float_option("attention-dropout", 0, "dropout on attention probabilities").at_least(0).below(1),
  };
}

// Batches, evaluation and the time-to-train target.
std::vector<OptionSpec> run_options() {
  return {
      int_option("batch-size", 1, "per-device batch size when -b is not given").at_least(1).in("samples"),
      int_option("eval-batch-size", 8, "evaluation batch size").at_least(1).in("samples"),
      int_option("eval-samples", 11590, "validation windows evaluated (MLPerf: 11590; 0 = all)").at_least(0).in("samples"),
      int_option("eval-every-samples", 0, "evaluate every N training samples (0 = MLPerf: 24576 for 175B at GBS 1536)")
          .at_least(0)
          .in("samples"),
      int_option("max-epochs", 1, "time-to-train gives up after this many passes over the training tokens")
          .at_least(1)
          .in("epochs"),
      float_option("target", 2.69, "validation log perplexity target (lower is better; MLPerf 2.69)").above(0),
  };
}

// Where the tokens come from (Note [A data folder built once from a corpus]).
std::vector<OptionSpec> data_options() {
  return {
      string_option("data-dir", "", "folder with train_text_document / valid_text_document .bin/.idx and bpe.txt"),
      string_option("corpus", "", "text to build data-dir from when it is empty ('kjv' = bible-kjv-text)"),
      int_option("build-merges", 2048, "BPE merges when building from a corpus").at_least(1),
  };
}

// Adam with linear warm-up and cosine decay, as MLPerf's reference trains, and what is logged of
// the run it continues.
std::vector<OptionSpec> optimizer_options() {
  return {
      float_option("lr", 2e-5, "Adam peak learning rate (MLPerf: 2e-5 or 3e-5)").above(0),
      float_option("min-lr", 2e-6, "learning rate at the end of the cosine (opt_end_learning_rate)").at_least(0),
      int_option("warmup-steps", 265, "linear warm-up steps").at_least(0).in("steps"),
      int_option("decay-steps", 108600, "steps of the cosine decay (opt_learning_rate_decay_steps)").at_least(1).in("steps"),
      float_option("adam-beta1", 0.9, "Adam beta1").at_least(0).below(1),
      float_option("adam-beta2", 0.95, "Adam beta2").at_least(0).below(1),
      float_option("adam-epsilon", 1e-8, "Adam epsilon").above(0),
      float_option("weight-decay", 0.1, "decoupled weight decay").at_least(0),
      float_option("clip-norm", 1.0, "global gradient norm clip (0 = off)").at_least(0),
      float_option("device-memory-gib", 0, "memory of one device for the fit check (0 = this device's)")
          .at_least(0)
          .in("GiB"),
      int_option("init-checkpoint-step", 0, "MLPerf init_checkpoint_step (logged; 0 = from scratch)")
          .at_least(0)
          .in("steps"),
  };
}

std::vector<OptionSpec> declared_options() {
  std::vector<OptionSpec> all;
  for (auto group : {model_options(), run_options(), data_options(), optimizer_options(), lm::initial_weights_options()})
    all.insert(all.end(), group.begin(), group.end());
  return all;
}

// What MLPerf Training v3.0 requires of a "gpt3" result (closed_gpt3.yaml and the rules).
mlperf::Rules mlperf_rules() {
  using mlperf::equals;
  using mlperf::logged_once;
  mlperf::Rules r;
  r.closed_division = true;
  r.runs = 3;
  r.olympic_drop_each_side = 1;
  r.eval_cadence = "every 24,576 training samples";
  r.closed_target = mlperf::between(2.6, 2.69, true, false);
  r.keys = {
      logged_once("global_batch_size"),
      logged_once("max_sequence_length", {}, equals(std::int64_t{2048})),
      logged_once("opt_name", equals(std::string("adam"))),
      logged_once("opt_base_learning_rate", {}, mlperf::one_of({2e-5, 3e-5})),
      logged_once("opt_end_learning_rate"),
      logged_once("opt_learning_rate_decay_steps"),
      logged_once("opt_learning_rate_warmup_steps"),
      logged_once("opt_learning_rate_decay_schedule", equals(std::string("cosine with linear warmup"))),
      logged_once("opt_adam_beta_1", {}, equals(0.9)),
      logged_once("opt_adam_beta_2", {}, equals(0.95)),
      logged_once("opt_adam_epsilon", {}, equals(1e-8)),
      logged_once("opt_gradient_clip_norm", {}, equals(1.0)),
      logged_once("trained_samples"),
      logged_once("init_checkpoint_step", {}, mlperf::positive()),
  };
  return r;
}

// Memory of the device the fit check plans for: the GPU's own, or on the CPU the host's within
// any cgroup limit (Note [Memory budgets]).
double device_memory_bytes(Device device) { return memory_budget(device).capacity_bytes; }

}  // namespace

WorkloadInfo GptWorkload::describe() {
  WorkloadInfo i;
  i.name = "gpt3";
  i.version = "1.0.0";
  i.benchmark = "gpt3";
  i.description = "GPT-3 causal LM (125M..175B), Adam + cosine; mini: 2 layers on the King James Bible";
  i.metric_name = "log_perplexity";
  i.metric_target = 2.69;
  i.higher_is_better = false;
  i.devices = {"cpu", "cuda"};
  i.precisions = {"fp32", "tf32", "bf16", "fp16", "fp8"};  // as the device allows (check_support)
  i.modes = {"ttt", "train", "infer"};
  i.options = declared_options();
  i.configs = {"mlperf.conf", "mini.conf", "125m.conf", "350m.conf", "760m.conf", "1.3b.conf",
               "2.7b.conf",   "6.7b.conf", "13b.conf",  "175b.conf"};
  i.default_config = "mini.conf";  // runs on a fresh machine; --config mlperf for the reference
  i.mlperf = mlperf_rules();
  return i;
}

std::string GptWorkload::check_support(const RunContext& ctx) {
  // The device must exist and the SDK's layers must run this precision on it.
  const std::string why = PrecisionPolicy::layers_support(ctx.precision, ctx.device);
  return why.empty() ? why : "gpt3: " + why;
}

lm::ModelShape GptWorkload::shape_from_options(const Options& o) {
  lm::ModelShape s;
  s.layers = o.get_int("layers");
  s.hidden = o.get_int("hidden");
  s.heads = o.get_int("heads");
  s.ffn = o.get_int("ffn");
  if (s.ffn == 0) s.ffn = 4 * s.hidden;
  s.vocab = o.get_int("vocab");
  s.seq_len = o.get_int("seq-len");
  s.max_positions = o.get_int("max-positions");
  if (s.max_positions == 0) s.max_positions = s.seq_len;
  return s;
}

RunInfo GptWorkload::setup(const RunContext& ctx) {
  ctx_ = ctx;
  if (ctx.num_threads > 0) set_num_threads(ctx.num_threads);
  precision_ = TrainingPrecision(ctx.precision, ctx.device);
  read_run_options();
  refuse_what_cannot_fit();
  build_data();
  measure_baseline();
  build_model();
  build_optimizer();
  log_hyperparameters();
  return run_info();
}

void GptWorkload::read_run_options() {
  const Options& o = ctx_.options;
  cfg_.shape = shape_from_options(o);
  cfg_.hidden_dropout = static_cast<float>(o.get_float("hidden-dropout"));
  cfg_.attention_dropout = static_cast<float>(o.get_float("attention-dropout"));
  batch_ = ctx_.batch_size > 0 ? ctx_.batch_size : o.get_int("batch-size");
  eval_batch_ = o.get_int("eval-batch-size");
  target_ = o.get_float("target");
  clip_norm_ = static_cast<float>(o.get_float("clip-norm"));
}

// Refuse what cannot fit before touching any data or allocating any weight.
void GptWorkload::refuse_what_cannot_fit() const {
  const double gib = ctx_.options.get_float("device-memory-gib");
  const double device_bytes = gib > 0 ? gib * 1024.0 * 1024.0 * 1024.0 : device_memory_bytes(ctx_.device);
  const bool half_activations = precision_.policy().storage_dtype(OpClass::matmul) != DType::f32;
  const std::string device_name = gib > 0 ? ctx_.device.str() + " (as set by gpt3.device-memory-gib)" : ctx_.device.str();
  const lm::MemoryPlan plan = lm::plan_gpt_memory(cfg_.shape, batch_, half_activations, device_bytes, device_name);
  if (!plan.fits) throw OutOfMemory(plan.message, static_cast<std::size_t>(plan.total_bytes), __FILE__, __LINE__);
}

void GptWorkload::build_data() {
  const Options& o = ctx_.options;
  auto& s = cfg_.shape;
  // Throughput and inference runs without a data folder use synthetic tokens of the same shapes.
  synthetic_ = ctx_.synthetic_data || (ctx_.mode != "ttt" && o.get_string("data-dir").empty());
  if (synthetic_) {
    data_ = synthetic_tokens(batch_, eval_batch_, s.seq_len, s.vocab, ctx_.seed);
  } else {
    const std::string dir = o.get_string("data-dir");
    BH_CHECK_AS(InvalidArgument, !dir.empty(), "gpt3: time-to-train needs gpt3.data-dir (Megatron .bin/.idx) or --synthetic");
    data_ = read_data_folder(dir, o.get_string("corpus"), static_cast<std::int32_t>(o.get_int("build-merges")), s.seq_len);
    s.vocab = data_.vocab;
  }
  const std::int64_t eval_samples = o.get_int("eval-samples"), windows = window_count(data_.valid, s.seq_len);
  eval_windows_ = eval_samples > 0 ? std::min(eval_samples, windows) : windows;
  begin_epoch(0);
}

void GptWorkload::measure_baseline() {
  unigram_baseline_ = std::numeric_limits<double>::quiet_NaN();
  if (synthetic_) return;
  const auto& s = cfg_.shape;
  unigram_baseline_ = unigram_log_perplexity(data_.train, data_.valid, eval_windows_, s.seq_len, s.vocab);
  fmt::print(stderr, "gpt3: {} training / {} validation tokens, vocabulary {}; unigram-model validation log "
             "perplexity = {:.4f}; target {:.4f}\n", data_.train.size(), data_.valid.size(), s.vocab,
             unigram_baseline_, target_);
}

void GptWorkload::build_model() {
  model_ = std::make_unique<GptModel>(cfg_, ctx_.seed);
  lm::place_initial_weights(*model_, ctx_.options, ctx_.device, precision_.policy());
}

void GptWorkload::build_optimizer() {
  const Options& o = ctx_.options;
  optim::AdamOptions ao;
  ao.beta1 = static_cast<float>(o.get_float("adam-beta1"));
  ao.beta2 = static_cast<float>(o.get_float("adam-beta2"));
  ao.epsilon = static_cast<float>(o.get_float("adam-epsilon"));
  ao.weight_decay = static_cast<float>(o.get_float("weight-decay"));
  optimizer_ = std::make_unique<optim::AdamW>(model_->parameters(), ao);
  const float lr = static_cast<float>(o.get_float("lr")), min_lr = static_cast<float>(o.get_float("min-lr"));
  const std::int64_t warmup = o.get_int("warmup-steps"), decay = o.get_int("decay-steps");
  BH_CHECK_AS(InvalidArgument, decay > warmup, "gpt3.decay-steps {} must exceed gpt3.warmup-steps {}", decay, warmup);
  schedule_ = std::make_unique<optim::WarmupCosineSchedule>(
      optim::WarmupCosineOptions{.base_lr = lr, .warmup_steps = warmup, .total_steps = decay, .min_lr = min_lr});
}

void GptWorkload::log_hyperparameters() {
  const Options& o = ctx_.options;
  hyper_ = {{"global_batch_size", batch_ * ctx_.world_size},
            {"max_sequence_length", cfg_.shape.seq_len},
            {"opt_name", std::string("adam")},
            {"opt_base_learning_rate", o.get_float("lr")},
            {"opt_end_learning_rate", o.get_float("min-lr")},
            {"opt_learning_rate_decay_steps", o.get_int("decay-steps")},
            {"opt_learning_rate_warmup_steps", o.get_int("warmup-steps")},
            {"opt_learning_rate_decay_schedule", std::string("cosine with linear warmup")},
            {"opt_adam_beta_1", o.get_float("adam-beta1")},
            {"opt_adam_beta_2", o.get_float("adam-beta2")},
            {"opt_adam_epsilon", o.get_float("adam-epsilon")},
            {"opt_gradient_clip_norm", o.get_float("clip-norm")},
            {"gradient_accumulation_steps", std::int64_t{1}},
            {"init_checkpoint_step", o.get_int("init-checkpoint-step")}};
}

RunInfo GptWorkload::run_info() const {
  const Options& o = ctx_.options;
  RunInfo info;
  info.samples_per_epoch = static_cast<std::int64_t>(order_.size());
  info.global_batch_size = batch_ * ctx_.world_size;
  const std::int64_t every = o.get_int("eval-every-samples");
  info.eval_every_samples = every > 0 ? every : 24576;
  info.max_epochs = o.get_int("max-epochs");
  info.train_flops_per_sample = lm::gpt_train_flops_per_sample(cfg_.shape);
  info.infer_flops_per_sample = info.train_flops_per_sample / 3.0;
  info.eval_samples = eval_windows_;
  info.metric_target = target_;  // the config's target (mini: calibrated), see plugin_abi.h
  return info;
}

void GptWorkload::begin_epoch(std::int64_t epoch) {
  order_ = lm::epoch_order(window_count(data_.train, cfg_.shape.seq_len), ctx_.seed,
                           kShuffleStream + static_cast<std::uint64_t>(epoch));
  cursor_ = 0;
}

StepResult GptWorkload::train_step() {
  const auto math = precision_.policy().math_scope();
  std::vector<std::int64_t> windows(static_cast<std::size_t>(batch_));
  for (auto& w : windows) {
    if (cursor_ >= static_cast<std::int64_t>(order_.size())) cursor_ = 0;  // throughput runs wrap around
    w = order_[cursor_++];
  }
  const WindowBatch b = window_batch(data_.train, windows, cfg_.shape.seq_len, ctx_.device);
  model_->train(true);
  const double loss = model_->forward(b.tokens, b.targets, static_cast<std::uint64_t>(step_));
  model_->backward(precision_.loss_scale());
  if (precision_.unscale_and_check(optimizer_->parameters())) {
    if (clip_norm_ > 0) optim::clip_grad_norm(optimizer_->parameters(), clip_norm_);
    optimizer_->step(*schedule_);
  }
  optimizer_->zero_grad();
  ++step_;
  StepResult r{batch_, loss};
  r.loss_scale = precision_.step_loss_scale();
  r.update_skipped = precision_.update_skipped();
  return r;
}

EvalResult GptWorkload::evaluate() {
  const auto math = precision_.policy().math_scope();
  model_->train(false);
  metrics::LogPerplexity log_perplexity;
  for (std::int64_t first = 0; first < eval_windows_; first += eval_batch_) {
    std::vector<std::int64_t> windows(static_cast<std::size_t>(std::min(eval_batch_, eval_windows_ - first)));
    std::iota(windows.begin(), windows.end(), first);  // the validation windows in order
    const WindowBatch b = window_batch(data_.valid, windows, cfg_.shape.seq_len, ctx_.device);
    model_->forward(b.tokens, b.targets, 0);
    log_perplexity.add(model_->last_loss_sum(), model_->last_count());
  }
  model_->train(true);
  return {log_perplexity.compute(ctx_.communicator), eval_windows_};
}

StepResult GptWorkload::infer_step() {
  const auto math = precision_.policy().math_scope();
  std::vector<std::int64_t> windows(static_cast<std::size_t>(batch_));
  for (std::size_t b = 0; b < windows.size(); ++b) windows[b] = order_[b % order_.size()];
  const WindowBatch batch = window_batch(data_.train, windows, cfg_.shape.seq_len, ctx_.device);
  model_->train(false);
  const double loss = model_->forward(batch.tokens, batch.targets, 0);
  return {batch_, loss};
}

void GptWorkload::synchronize() { benchhost::synchronize(ctx_.device); }

Hyperparameters GptWorkload::hyperparameters() const { return hyper_; }

void GptWorkload::teardown() {
  optimizer_.reset();
  model_.reset();
}

}  // namespace benchhost::gpt3

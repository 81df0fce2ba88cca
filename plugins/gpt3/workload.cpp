#include "workload.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include <fmt/format.h>

#include "benchhost/device.hpp"
#include "benchhost/nn/math_mode.hpp"
#include "benchhost/nn/serialize.hpp"
#include "benchhost/optim/clip.hpp"
#include "benchhost/random.hpp"
#include "benchhost/threading.hpp"
#include "text/bpe.hpp"
#include "text/indexed_dataset.hpp"
#include "text/prepare.hpp"

namespace benchhost::gpt3 {
namespace fs = std::filesystem;

const lm::OptionTable& GptWorkload::options() {
  static const lm::OptionTable table("gpt3", {
      {"layers", "int", "96", "transformer layers"},
      {"hidden", "int", "12288", "hidden size"},
      {"heads", "int", "96", "attention heads"},
      {"ffn", "int", "0", "feed-forward size (0 = 4 x hidden)"},
      {"vocab", "int", "50257", "vocabulary size (real data: from the tokenizer)"},
      {"seq-len", "int", "2048", "tokens per sample"},
      {"max-positions", "int", "0", "learned positions (0 = seq-len)"},
      {"hidden-dropout", "float", "0", "dropout after embeddings, attention and FFN"},
      {"attention-dropout", "float", "0", "dropout on attention probabilities"},
      {"batch-size", "int", "1", "per-device batch size when -b is not given"},
      {"eval-batch-size", "int", "8", "evaluation batch size"},
      {"eval-samples", "int", "11590", "validation windows evaluated (MLPerf: 11590; 0 = all)"},
      {"eval-every-samples", "int", "0", "evaluate every N training samples (0 = MLPerf: 24576 for 175B at GBS 1536)"},
      {"max-epochs", "int", "1", "time-to-train gives up after this many passes over the training tokens"},
      {"target", "float", "2.69", "validation log perplexity target (lower is better; MLPerf 2.69)"},
      {"data-dir", "string", "", "folder with train_text_document / valid_text_document .bin/.idx and bpe.txt"},
      {"corpus", "string", "", "text to build data-dir from when it is empty ('kjv' = bible-kjv-text)"},
      {"build-merges", "int", "2048", "BPE merges when building from a corpus"},
      {"lr", "float", "2e-5", "Adam peak learning rate (MLPerf: 2e-5 or 3e-5)"},
      {"min-lr", "float", "2e-6", "learning rate at the end of the cosine (opt_end_learning_rate)"},
      {"warmup-steps", "int", "265", "linear warm-up steps"},
      {"decay-steps", "int", "108600", "steps of the cosine decay (opt_learning_rate_decay_steps)"},
      {"adam-beta1", "float", "0.9", "Adam beta1"},
      {"adam-beta2", "float", "0.95", "Adam beta2"},
      {"adam-epsilon", "float", "1e-8", "Adam epsilon"},
      {"weight-decay", "float", "0.1", "decoupled weight decay"},
      {"clip-norm", "float", "1.0", "global gradient norm clip (0 = off)"},
      {"device-memory-gib", "float", "0", "memory of one device for the fit check (0 = this device's)"},
      {"init-checkpoint-step", "int", "0", "MLPerf init_checkpoint_step (logged; 0 = from scratch)"},
      {"init-weights", "string", "", "weight file to start from"},
      {"save-initial-weights", "string", "", "write the initial weights here (for the PyTorch peer)"},
  });
  return table;
}

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
  i.options = options().specs();
  i.configs = {"mlperf.conf", "mini.conf", "125m.conf", "350m.conf", "760m.conf", "1.3b.conf",
               "2.7b.conf",   "6.7b.conf", "13b.conf",  "175b.conf"};
  i.default_config = "mini.conf";  // runs on a fresh machine; --config mlperf for the reference
  return i;
}

std::string GptWorkload::check_support(const RunContext& ctx) {
  // The device must exist and the SDK's layers must run this precision on it.
  const std::string why = PrecisionPolicy::layers_support(ctx.precision, ctx.device);
  return why.empty() ? why : "gpt3: " + why;
}

namespace {

// Memory of the device the fit check plans for: the GPU's own (the CUDA backend's environment
// facts) or, on the CPU, the host's.
double device_memory_bytes(Device device) {
  if (device.is_cuda())
    for (const auto& [k, v] : device_backend(DeviceType::cuda).environment())
      if (k == fmt::format("gpu{}_memory_bytes", device.index)) return std::stod(v);
  return lm::host_memory_bytes();
}

}  // namespace

void GptWorkload::synchronize() {
  if (ctx_.device.is_cuda()) benchhost::synchronize(ctx_.device);
}

lm::ModelShape GptWorkload::shape_from_options(const Options& o) {
  const auto& t = options();
  lm::ModelShape s;
  s.layers = t.get_int(o, "layers");
  s.hidden = t.get_int(o, "hidden");
  s.heads = t.get_int(o, "heads");
  s.ffn = t.get_int(o, "ffn");
  if (s.ffn == 0) s.ffn = 4 * s.hidden;
  s.vocab = t.get_int(o, "vocab");
  s.seq_len = t.get_int(o, "seq-len");
  s.max_positions = t.get_int(o, "max-positions");
  if (s.max_positions == 0) s.max_positions = s.seq_len;
  return s;
}

namespace {

text::GptPrepared ensure_gpt_data(const std::string& dir, const std::string& corpus, std::int32_t merges) {
  // The options the folder was built with (see the bert plugin): never reuse other data silently.
  const std::string recipe = corpus.empty() ? std::string() : fmt::format("gpt3 corpus={} merges={}\n", corpus, merges);
  auto found = text::find_gpt_data(dir);
  if (!found.train_prefix.empty()) {
    std::ifstream in(dir + "/benchhost-recipe.txt");
    const std::string had((std::istreambuf_iterator<char>(in)), {});
    BH_CHECK_AS(InvalidArgument, recipe.empty() || !in || had == recipe,
                "gpt3.data-dir '{}' was built as '{}' but this config asks for '{}': choose another gpt3.data-dir", dir,
                had.substr(0, had.size() - 1), recipe.substr(0, recipe.size() - 1));
    return found;
  }
  BH_CHECK_AS(InvalidArgument, !corpus.empty(),
              "gpt3.data-dir '{}' has no train_text_document/valid_text_document .bin/.idx and bpe.txt; give "
              "gpt3.corpus to build them or run make_gpt_dataset", dir);
  std::string path = corpus;
  if (corpus == "kjv") {
    path = text::default_kjv_path();
    if (path.empty()) BH_THROW(Unsupported, "gpt3.corpus = kjv needs the bible-kjv-text package (apt-get install bible-kjv-text)");
  }
  text::GptPrepareOptions p;
  p.corpus = path;
  p.out_dir = fmt::format("{}.tmp.{}", dir, ::getpid());
  p.merges = merges;
  text::prepare_gpt_data(p);
  std::ofstream(p.out_dir + "/benchhost-recipe.txt") << recipe;
  std::error_code ec;
  fs::create_directories(fs::path(dir).parent_path(), ec);
  fs::rename(p.out_dir, dir, ec);
  if (ec) fs::remove_all(p.out_dir);
  found = text::find_gpt_data(dir);
  BH_CHECK_AS(DataError, !found.train_prefix.empty(), "building GPT data into '{}' failed", dir);
  return found;
}

}  // namespace

RunInfo GptWorkload::setup(const RunContext& ctx) {
  ctx_ = ctx;
  const auto& t = options();
  const Options& o = ctx.options;
  if (ctx.num_threads > 0) set_num_threads(ctx.num_threads);
  cfg_.shape = shape_from_options(o);
  auto& s = cfg_.shape;
  cfg_.hidden_dropout = static_cast<float>(t.get_float(o, "hidden-dropout"));
  cfg_.attention_dropout = static_cast<float>(t.get_float(o, "attention-dropout"));
  batch_ = ctx.batch_size > 0 ? ctx.batch_size : t.get_int(o, "batch-size");
  eval_batch_ = t.get_int(o, "eval-batch-size");
  target_ = t.get_float(o, "target");
  clip_norm_ = static_cast<float>(t.get_float(o, "clip-norm"));
  BH_CHECK_AS(InvalidArgument, batch_ >= 1 && eval_batch_ >= 1, "gpt3: batch sizes must be >= 1");

  // Refuse what cannot fit before touching any data or allocating any weight.
  const double gib = t.get_float(o, "device-memory-gib");
  const double device_bytes = gib > 0 ? gib * 1024.0 * 1024.0 * 1024.0 : device_memory_bytes(ctx.device);
  precision_ = TrainingPrecision(ctx.precision, ctx.device);
  const bool half_activations = precision_.policy().storage_dtype(OpClass::matmul) != DType::f32;
  const lm::MemoryPlan plan = lm::plan_gpt_memory(s, batch_, half_activations, device_bytes,
                                                  gib > 0 ? ctx.device.str() + " (as set by gpt3.device-memory-gib)" : ctx.device.str());
  if (!plan.fits) throw OutOfMemory(plan.message, static_cast<std::size_t>(plan.total_bytes), __FILE__, __LINE__);

  const bool synthetic = ctx.synthetic_data || (ctx.mode != "ttt" && t.get_string(o, "data-dir").empty());
  unigram_baseline_ = std::numeric_limits<double>::quiet_NaN();
  if (synthetic) {
    Rng rng(ctx.seed, 0x6e7);
    const std::int64_t n = (std::max<std::int64_t>(4 * batch_, 16)) * s.seq_len + 1;
    train_tokens_.resize(static_cast<std::size_t>(n));
    for (auto& tok : train_tokens_) tok = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(s.vocab)));
    valid_tokens_.assign(train_tokens_.begin(), train_tokens_.begin() + std::min<std::int64_t>(n, eval_batch_ * s.seq_len + 1));
  } else {
    const std::string dir = t.get_string(o, "data-dir");
    BH_CHECK_AS(InvalidArgument, !dir.empty(), "gpt3: time-to-train needs gpt3.data-dir (Megatron .bin/.idx) or --synthetic");
    const auto files = ensure_gpt_data(dir, t.get_string(o, "corpus"), static_cast<std::int32_t>(t.get_int(o, "build-merges")));
    s.vocab = files.vocab_size;
    train_tokens_ = text::IndexedDataset(files.train_prefix).all_tokens();
    valid_tokens_ = text::IndexedDataset(files.valid_prefix).all_tokens();
    for (const auto* v : {&train_tokens_, &valid_tokens_})
      for (std::int32_t tok : *v)
        BH_CHECK_AS(DataError, tok >= 0 && tok < s.vocab, "gpt3: token {} in '{}' is outside the tokenizer's vocabulary of {}",
                    tok, dir, s.vocab);
    BH_CHECK_AS(DataError, static_cast<std::int64_t>(valid_tokens_.size()) > s.seq_len &&
                               static_cast<std::int64_t>(train_tokens_.size()) > s.seq_len,
                "gpt3: '{}' holds fewer tokens than one sequence of {}", dir, s.seq_len);
  }
  const std::int64_t eval_opt = t.get_int(o, "eval-samples");
  const std::int64_t windows = (static_cast<std::int64_t>(valid_tokens_.size()) - 1) / s.seq_len;
  eval_windows_ = eval_opt > 0 ? std::min(eval_opt, windows) : windows;
  if (!synthetic) {
    std::vector<double> counts(static_cast<std::size_t>(s.vocab), 1.0);  // add-one smoothing
    for (std::int32_t tok : train_tokens_) counts[tok] += 1.0;
    const double total = static_cast<double>(train_tokens_.size()) + static_cast<double>(s.vocab);
    double nll = 0;
    const std::int64_t n = eval_windows_ * s.seq_len;
    for (std::int64_t i = 1; i <= n; ++i) nll -= std::log(counts[valid_tokens_[i]] / total);
    unigram_baseline_ = nll / static_cast<double>(n);
    fmt::print(stderr, "gpt3: {} training / {} validation tokens, vocabulary {}; unigram-model validation log "
               "perplexity = {:.4f}; target {:.4f}\n", train_tokens_.size(), valid_tokens_.size(), s.vocab,
               unigram_baseline_, target_);
  }

  model_ = std::make_unique<GptModel>(cfg_, ctx.seed);
  if (const auto w = t.get_string(o, "init-weights"); !w.empty()) nn::load_weights(*model_, w);
  if (const auto w = t.get_string(o, "save-initial-weights"); !w.empty()) nn::save_weights(*model_, w);
  model_->to(ctx.device);  // initialised on the CPU: the same weights on every device
  model_->set_precision(precision_.policy());
  optim::AdamOptions ao;
  ao.beta1 = static_cast<float>(t.get_float(o, "adam-beta1"));
  ao.beta2 = static_cast<float>(t.get_float(o, "adam-beta2"));
  ao.epsilon = static_cast<float>(t.get_float(o, "adam-epsilon"));
  ao.weight_decay = static_cast<float>(t.get_float(o, "weight-decay"));
  optimizer_ = std::make_unique<optim::AdamW>(model_->parameters(), ao);
  const float lr = static_cast<float>(t.get_float(o, "lr")), min_lr = static_cast<float>(t.get_float(o, "min-lr"));
  const std::int64_t warmup = t.get_int(o, "warmup-steps"), decay = t.get_int(o, "decay-steps");
  BH_CHECK_AS(InvalidArgument, decay > warmup && warmup >= 0, "gpt3.decay-steps {} must exceed gpt3.warmup-steps {}", decay, warmup);
  schedule_ = std::make_unique<optim::WarmupCosineSchedule>(
      optim::WarmupCosineOptions{.base_lr = lr, .warmup_steps = warmup, .total_steps = decay, .min_lr = min_lr});

  order_.resize(static_cast<std::size_t>((static_cast<std::int64_t>(train_tokens_.size()) - 1) / s.seq_len));
  begin_epoch(0);
  const std::int64_t gbs = batch_ * ctx.world_size;
  hyper_ = {{"global_batch_size", gbs},
            {"max_sequence_length", s.seq_len},
            {"opt_name", std::string("adam")},
            {"opt_base_learning_rate", t.get_float(o, "lr")},
            {"opt_end_learning_rate", t.get_float(o, "min-lr")},
            {"opt_learning_rate_decay_steps", decay},
            {"opt_learning_rate_warmup_steps", warmup},
            {"opt_learning_rate_decay_schedule", std::string("cosine with linear warmup")},
            {"opt_adam_beta_1", t.get_float(o, "adam-beta1")},
            {"opt_adam_beta_2", t.get_float(o, "adam-beta2")},
            {"opt_adam_epsilon", t.get_float(o, "adam-epsilon")},
            {"opt_gradient_clip_norm", t.get_float(o, "clip-norm")},
            {"gradient_accumulation_steps", std::int64_t{1}},
            {"init_checkpoint_step", t.get_int(o, "init-checkpoint-step")}};

  RunInfo info;
  info.samples_per_epoch = static_cast<std::int64_t>(order_.size());
  info.global_batch_size = gbs;
  const std::int64_t every = t.get_int(o, "eval-every-samples");
  info.eval_every_samples = every > 0 ? every : 24576;
  info.max_epochs = t.get_int(o, "max-epochs");
  info.train_flops_per_sample = lm::gpt_train_flops_per_sample(s);
  info.infer_flops_per_sample = info.train_flops_per_sample / 3.0;
  info.eval_samples = eval_windows_;
  info.metric_target = target_;  // the config's target (mini: calibrated), see plugin_abi.h
  return info;
}

void GptWorkload::begin_epoch(std::int64_t epoch) {
  for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<std::int64_t>(i);
  Rng rng(ctx_.seed, 0x6e90c000ull + static_cast<std::uint64_t>(epoch));
  for (std::size_t k = order_.size(); k > 1; --k) std::swap(order_[k - 1], order_[rng.below(k)]);
  cursor_ = 0;
}

void GptWorkload::fill_window(const std::vector<std::int32_t>& tokens, std::int64_t window, std::int32_t* in,
                              std::int32_t* tgt) const {
  const std::int64_t T = cfg_.shape.seq_len;
  const std::int32_t* src = tokens.data() + window * T;
  std::copy(src, src + T, in);
  std::copy(src + 1, src + T + 1, tgt);
}

StepResult GptWorkload::train_step() {
  const auto math = precision_.policy().math_scope();
  const std::int64_t T = cfg_.shape.seq_len;
  std::vector<std::int32_t> in(batch_ * T), tgt(batch_ * T);
  for (std::int64_t b = 0; b < batch_; ++b) {
    if (cursor_ >= static_cast<std::int64_t>(order_.size())) cursor_ = 0;  // throughput runs wrap around
    fill_window(train_tokens_, order_[cursor_++], in.data() + b * T, tgt.data() + b * T);
  }
  const Tensor tokens = Tensor::from_vector_i32(in, {batch_, T}, ctx_.device);
  const Tensor targets = Tensor::from_vector_i32(tgt, {batch_, T}, ctx_.device);
  model_->train(true);
  const double loss = model_->forward(tokens, targets, static_cast<std::uint64_t>(step_));
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
  const std::int64_t T = cfg_.shape.seq_len;
  model_->train(false);
  double nll = 0;
  std::int64_t count = 0;
  for (std::int64_t first = 0; first < eval_windows_; first += eval_batch_) {
    const std::int64_t n = std::min(eval_batch_, eval_windows_ - first);
    std::vector<std::int32_t> in(n * T), tgt(n * T);
    for (std::int64_t b = 0; b < n; ++b) fill_window(valid_tokens_, first + b, in.data() + b * T, tgt.data() + b * T);
    model_->forward(Tensor::from_vector_i32(in, {n, T}, ctx_.device), Tensor::from_vector_i32(tgt, {n, T}, ctx_.device), 0);
    nll += model_->last_loss_sum();
    count += model_->last_count();
  }
  model_->train(true);
  return {count ? nll / static_cast<double>(count) : 0.0, eval_windows_};
}

StepResult GptWorkload::infer_step() {
  const auto math = precision_.policy().math_scope();
  const std::int64_t T = cfg_.shape.seq_len;
  std::vector<std::int32_t> in(batch_ * T), tgt(batch_ * T);
  for (std::int64_t b = 0; b < batch_; ++b)
    fill_window(train_tokens_, order_[static_cast<std::size_t>(b) % order_.size()], in.data() + b * T, tgt.data() + b * T);
  model_->train(false);
  const double loss = model_->forward(Tensor::from_vector_i32(in, {batch_, T}, ctx_.device),
                                      Tensor::from_vector_i32(tgt, {batch_, T}, ctx_.device), 0);
  return {batch_, loss};
}

Hyperparameters GptWorkload::hyperparameters() const { return hyper_; }

void GptWorkload::teardown() {
  optimizer_.reset();
  model_.reset();
}

}  // namespace benchhost::gpt3

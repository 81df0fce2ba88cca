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
#include "text/prepare.hpp"

namespace benchhost::bert {
namespace fs = std::filesystem;

const lm::OptionTable& BertWorkload::options() {
  static const lm::OptionTable table("bert", {
      {"layers", "int", "24", "transformer layers"},
      {"hidden", "int", "1024", "hidden size"},
      {"heads", "int", "16", "attention heads"},
      {"ffn", "int", "4096", "feed-forward size"},
      {"vocab", "int", "30522", "vocabulary size (real data: taken from the data's vocab.txt)"},
      {"max-positions", "int", "512", "position embeddings"},
      {"seq-len", "int", "512", "tokens per sample (real data: taken from the shards)"},
      {"max-predictions", "int", "76", "masked positions per sample (real data: from the shards)"},
      {"hidden-dropout", "float", "0.1", "dropout after embeddings, attention and FFN"},
      {"attention-dropout", "float", "0.1", "dropout on attention probabilities"},
      {"init-std", "float", "0.02", "std of the truncated-normal weight init (BERT's initializer_range)"},
      {"batch-size", "int", "32", "per-device batch size (rows) when -b is not given"},
      {"eval-batch-size", "int", "64", "evaluation batch size"},
      {"eval-samples", "int", "10000", "evaluation samples used (MLPerf: 10000; 0 = all)"},
      {"eval-every-samples", "int", "0", "evaluate every N training samples (0 = MLPerf rule FLOOR(0.05*(230.23*GBS+3e6), 25000))"},
      {"max-epochs", "int", "1", "time-to-train gives up after this many passes over the training shards"},
      {"target", "float", "0.72", "masked-LM accuracy target (MLPerf: 0.720)"},
      {"data-dir", "string", "", "folder with part_*.hdf5, eval.hdf5 and vocab.txt (MLPerf layout)"},
      {"corpus", "string", "", "text to build data-dir from when it holds no shards ('kjv' = bible-kjv-text)"},
      {"build-vocab-size", "int", "4096", "WordPiece vocabulary size when building from a corpus"},
      {"build-seq-len", "int", "128", "sequence length when building from a corpus"},
      {"build-max-predictions", "int", "20", "masked positions when building from a corpus"},
      {"build-dupe-factor", "int", "5", "passes with fresh masks when building from a corpus"},
      {"packing", "bool", "false", "pack several sequences per row (block-diagonal attention)"},
      {"max-per-row", "int", "3", "most sequences in one packed row"},
      {"lr", "float", "0.00035", "LAMB base learning rate (opt_base_learning_rate)"},
      {"warmup-steps", "int", "0", "linear warm-up steps (opt_learning_rate_warmup_steps)"},
      {"start-warmup-step", "int", "0", "MLPerf start_warmup_step (logged)"},
      {"train-steps", "int", "13700", "steps of the polynomial decay (opt_learning_rate_training_steps)"},
      {"lamb-beta1", "float", "0.9", "LAMB beta1"},
      {"lamb-beta2", "float", "0.999", "LAMB beta2"},
      {"lamb-epsilon", "float", "1e-6", "LAMB epsilon"},
      {"weight-decay", "float", "0.01", "LAMB weight decay rate"},
      {"clip-norm", "float", "1.0", "global gradient norm clip (0 = off)"},
      {"init-weights", "string", "", "weight file to start from (nn/serialize.hpp format)"},
      {"save-initial-weights", "string", "", "write the initial weights here (for the PyTorch peer)"},
  });
  return table;
}

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
  i.options = options().specs();
  i.configs = {"mlperf.conf", "mini.conf"};
  i.default_config = "mini.conf";  // runs on a fresh machine; --config mlperf for the reference
  return i;
}

std::string BertWorkload::check_support(const RunContext& ctx) {
  // The device must exist and the SDK's layers must run this precision on it.
  const std::string why = PrecisionPolicy::layers_support(ctx.precision, ctx.device);
  return why.empty() ? why : "bert: " + why;
}

void BertWorkload::synchronize() {
  if (ctx_.device.is_cuda()) benchhost::synchronize(ctx_.device);
}

std::int64_t BertWorkload::mlperf_eval_interval(std::int64_t gbs) {
  const double raw = 0.05 * (230.23 * static_cast<double>(gbs) + 3e6);
  return static_cast<std::int64_t>(std::floor(raw / 25000.0)) * 25000;
}

namespace {

std::string resolve_corpus(const std::string& c) {
  if (c == "kjv") {
    const std::string p = text::default_kjv_path();
    if (p.empty()) BH_THROW(Unsupported, "bert.corpus = kjv needs the bible-kjv-text package (apt-get install bible-kjv-text)");
    return p;
  }
  return c;
}

// Build the shards once into data_dir (in a private folder, then renamed, so concurrent runs
// never see half-written files).
text::BertPrepared ensure_bert_data(const std::string& data_dir, const std::string& corpus, const lm::OptionTable& t,
                                    const Options& o) {
  // The options the folder was built with, and the version of the sample builder, so that a
  // folder built with other options or by an older builder is never silently reused for a config
  // that asks for different data.
  const std::string recipe = corpus.empty() ? std::string()
      : fmt::format("bert corpus={} vocab={} seq_len={} max_predictions={} dupe_factor={} builder={}\n", corpus,
                    t.get_int(o, "build-vocab-size"), t.get_int(o, "build-seq-len"),
                    t.get_int(o, "build-max-predictions"), t.get_int(o, "build-dupe-factor"),
                    text::kBertSampleBuilderVersion);
  auto found = text::find_bert_data(data_dir);
  if (!found.train_files.empty()) {
    std::ifstream in(data_dir + "/benchhost-recipe.txt");
    const std::string had((std::istreambuf_iterator<char>(in)), {});
    BH_CHECK_AS(InvalidArgument, recipe.empty() || !in || had == recipe,
                "bert.data-dir '{}' was built as '{}' but this config asks for '{}': choose another bert.data-dir",
                data_dir, had.substr(0, had.size() - 1), recipe.substr(0, recipe.size() - 1));
    return found;
  }
  BH_CHECK_AS(InvalidArgument, !corpus.empty(),
              "bert.data-dir '{}' has no part_*.hdf5 / eval.hdf5 / vocab.txt; give bert.corpus to build them or run make_bert_shards",
              data_dir);
  text::BertPrepareOptions p;
  p.corpus = resolve_corpus(corpus);
  p.out_dir = fmt::format("{}.tmp.{}", data_dir, ::getpid());
  p.vocab_size = static_cast<std::int32_t>(t.get_int(o, "build-vocab-size"));
  p.samples.seq_len = t.get_int(o, "build-seq-len");
  p.samples.max_predictions = t.get_int(o, "build-max-predictions");
  p.samples.dupe_factor = t.get_int(o, "build-dupe-factor");
  text::prepare_bert_data(p);
  std::ofstream(p.out_dir + "/benchhost-recipe.txt") << recipe;
  std::error_code ec;
  fs::create_directories(fs::path(data_dir).parent_path(), ec);
  fs::rename(p.out_dir, data_dir, ec);
  if (ec) fs::remove_all(p.out_dir);  // another process won the race: use its files
  found = text::find_bert_data(data_dir);
  BH_CHECK_AS(DataError, !found.train_files.empty(), "building BERT data into '{}' failed", data_dir);
  return found;
}

}  // namespace

RunInfo BertWorkload::setup(const RunContext& ctx) {
  ctx_ = ctx;
  const auto& t = options();
  const Options& o = ctx.options;
  if (ctx.num_threads > 0) set_num_threads(ctx.num_threads);
  precision_ = TrainingPrecision(ctx.precision, ctx.device);
  auto& s = cfg_.shape;
  s.layers = t.get_int(o, "layers");
  s.hidden = t.get_int(o, "hidden");
  s.heads = t.get_int(o, "heads");
  s.ffn = t.get_int(o, "ffn");
  s.vocab = t.get_int(o, "vocab");
  s.max_positions = t.get_int(o, "max-positions");
  s.seq_len = t.get_int(o, "seq-len");
  std::int64_t max_pred = t.get_int(o, "max-predictions");
  cfg_.hidden_dropout = static_cast<float>(t.get_float(o, "hidden-dropout"));
  cfg_.attention_dropout = static_cast<float>(t.get_float(o, "attention-dropout"));
  cfg_.init_std = static_cast<float>(t.get_float(o, "init-std"));
  BH_CHECK_AS(InvalidArgument, cfg_.init_std > 0, "bert.init-std {} must be > 0", cfg_.init_std);
  batch_ = ctx.batch_size > 0 ? ctx.batch_size : t.get_int(o, "batch-size");
  eval_batch_ = t.get_int(o, "eval-batch-size");
  packing_ = t.get_bool(o, "packing");
  max_per_row_ = t.get_int(o, "max-per-row");
  target_ = t.get_float(o, "target");
  clip_norm_ = static_cast<float>(t.get_float(o, "clip-norm"));
  BH_CHECK_AS(InvalidArgument, batch_ >= 1 && eval_batch_ >= 1 && max_per_row_ >= 1, "bert: batch sizes and max-per-row must be >= 1");

  // Throughput and inference runs without a data folder use synthetic samples of the same shapes.
  const bool synthetic = ctx.synthetic_data || (ctx.mode != "ttt" && t.get_string(o, "data-dir").empty());
  majority_baseline_ = bigram_baseline_ = std::numeric_limits<double>::quiet_NaN();
  text::WordPiece vocab;
  if (synthetic) {
    const std::int64_t n = std::max<std::int64_t>(4 * batch_, 64);
    train_ = synthetic_samples(n, s.seq_len, max_pred, s.vocab, ctx.seed);
    eval_ = synthetic_samples(std::max<std::int64_t>(eval_batch_, 16), s.seq_len, max_pred, s.vocab, ctx.seed + 1);
  } else {
    const std::string dir = t.get_string(o, "data-dir");
    BH_CHECK_AS(InvalidArgument, !dir.empty(), "bert: time-to-train needs bert.data-dir (MLPerf HDF5 shards) or --synthetic");
    const auto files = ensure_bert_data(dir, t.get_string(o, "corpus"), t, o);
    vocab = text::WordPiece::load(files.vocab_file);
    s.vocab = vocab.size();
    for (const auto& f : files.train_files) {
      auto shard = text::read_bert_hdf5(f, s.vocab);
      if (train_.count == 0) {
        train_ = std::move(shard);
        continue;
      }
      BH_CHECK_AS(DataError, shard.seq_len == train_.seq_len && shard.max_predictions == train_.max_predictions,
                  "'{}' has seq_len {} / max_predictions {}, unlike the first shard ({} / {})", f, shard.seq_len,
                  shard.max_predictions, train_.seq_len, train_.max_predictions);
      for (std::int64_t i = 0; i < shard.count; ++i) train_.append(shard, i);
    }
    eval_ = text::read_bert_hdf5(files.eval_file, s.vocab);
    BH_CHECK_AS(DataError, eval_.seq_len == train_.seq_len, "eval.hdf5 seq_len {} differs from the training shards' {}",
                eval_.seq_len, train_.seq_len);
    BH_CHECK_AS(DataError, train_.count > 0 && eval_.count > 0, "bert: '{}' holds no samples", dir);
    s.seq_len = train_.seq_len;
    max_pred = train_.max_predictions;
  }
  s.max_positions = std::max(s.max_positions, s.seq_len);
  const std::int64_t eval_samples_opt = t.get_int(o, "eval-samples");
  eval_limit_ = eval_samples_opt > 0 ? std::min(eval_samples_opt, eval_.count) : eval_.count;
  if (!synthetic) {
    const MaskedLmBaselines b = masked_lm_baselines(train_, eval_, eval_limit_, s.vocab);
    majority_baseline_ = b.majority;
    bigram_baseline_ = b.left_bigram;
    fmt::print(stderr, "bert: {} training / {} eval samples ({} evaluated), vocabulary {}, seq_len {}; "
               "next-sentence labels {:.1f}% / {:.1f}% IsNext; masked-LM accuracy of always predicting '{}': {:.4f}, of "
               "the left neighbour's most frequent successor: {:.4f}; target {:.4f}\n", train_.count, eval_.count,
               eval_limit_, s.vocab, s.seq_len, 100.0 * text::nsp_split(train_).is_next_fraction(),
               100.0 * text::nsp_split(eval_).is_next_fraction(), vocab.token(b.top_token), majority_baseline_,
               bigram_baseline_, target_);
  }

  model_ = std::make_unique<BertModel>(cfg_, ctx.seed);
  if (const auto w = t.get_string(o, "init-weights"); !w.empty()) nn::load_weights(*model_, w);
  if (const auto w = t.get_string(o, "save-initial-weights"); !w.empty()) nn::save_weights(*model_, w);
  model_->to(ctx.device);  // initialised on the CPU: the same weights on every device
  model_->set_precision(precision_.policy());
  optim::LambOptions lo;
  lo.beta1 = static_cast<float>(t.get_float(o, "lamb-beta1"));
  lo.beta2 = static_cast<float>(t.get_float(o, "lamb-beta2"));
  lo.epsilon = static_cast<float>(t.get_float(o, "lamb-epsilon"));
  lo.weight_decay = static_cast<float>(t.get_float(o, "weight-decay"));
  optimizer_ = std::make_unique<optim::Lamb>(model_->parameters(), lo);
  const float lr = static_cast<float>(t.get_float(o, "lr"));
  const std::int64_t warmup = t.get_int(o, "warmup-steps"), total = t.get_int(o, "train-steps");
  BH_CHECK_AS(InvalidArgument, total > warmup && warmup >= 0, "bert.train-steps {} must exceed bert.warmup-steps {}", total, warmup);
  schedule_ = std::make_unique<optim::WarmupPolySchedule>(
      optim::WarmupPolyOptions{.base_lr = lr, .warmup_steps = warmup, .total_steps = total, .power = 1.0f, .end_lr = 0.0f});

  order_.resize(static_cast<std::size_t>(train_.count));
  begin_epoch(0);
  eval_order_.resize(static_cast<std::size_t>(eval_.count));
  for (std::int64_t i = 0; i < eval_.count; ++i) eval_order_[i] = i;

  const std::int64_t gbs = batch_ * ctx.world_size;
  hyper_ = {{"global_batch_size", gbs},
            {"opt_base_learning_rate", t.get_float(o, "lr")},
            {"opt_lamb_epsilon", t.get_float(o, "lamb-epsilon")},
            {"opt_learning_rate_training_steps", total},
            {"opt_learning_rate_warmup_steps", warmup},
            {"num_warmup_steps", warmup},
            {"start_warmup_step", t.get_int(o, "start-warmup-step")},
            {"opt_lamb_beta_1", t.get_float(o, "lamb-beta1")},
            {"opt_lamb_beta_2", t.get_float(o, "lamb-beta2")},
            {"opt_lamb_weight_decay_rate", t.get_float(o, "weight-decay")},
            {"gradient_accumulation_steps", std::int64_t{1}},
            {"max_sequence_length", s.seq_len},
            {"max_predictions_per_seq", max_pred}};

  RunInfo info;
  info.samples_per_epoch = train_.count;
  info.global_batch_size = gbs;
  const std::int64_t every = t.get_int(o, "eval-every-samples");
  info.eval_every_samples = every > 0 ? every : mlperf_eval_interval(gbs);
  info.max_epochs = t.get_int(o, "max-epochs");
  info.train_flops_per_sample = lm::bert_train_flops_per_sample(s, max_pred);
  info.infer_flops_per_sample = info.train_flops_per_sample / 3.0;
  info.eval_samples = eval_limit_;
  info.metric_target = target_;  // the config's target (mini: calibrated), see plugin_abi.h
  return info;
}

void BertWorkload::begin_epoch(std::int64_t epoch) {
  for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<std::int64_t>(i);
  Rng rng(ctx_.seed, 0xe90c000ull + static_cast<std::uint64_t>(epoch));
  for (std::size_t k = order_.size(); k > 1; --k) std::swap(order_[k - 1], order_[rng.below(k)]);
  cursor_ = 0;
}

StepResult BertWorkload::train_step() {
  const auto math = precision_.policy().math_scope();
  if (cursor_ >= static_cast<std::int64_t>(order_.size())) cursor_ = 0;  // throughput runs wrap around
  const std::int64_t avail = static_cast<std::int64_t>(order_.size()) - cursor_;
  const std::int64_t want = packing_ ? std::min(avail, batch_ * max_per_row_) : std::min(avail, batch_);
  std::int64_t used = 0;
  const BertBatch b = batch_to(make_batch(train_, order_, cursor_, want, packing_ ? batch_ : want, packing_, max_per_row_, &used),
                               ctx_.device);
  cursor_ += used;
  model_->train(true);
  const BertOutput out = model_->forward(b, static_cast<std::uint64_t>(step_));
  train_nsp_correct_ += out.nsp_correct;
  train_nsp_count_ += out.nsp_count;
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
  std::int64_t correct = 0, count = 0, nsp_correct = 0, nsp_count = 0;
  for (std::int64_t first = 0; first < eval_limit_; first += eval_batch_) {
    const std::int64_t n = std::min(eval_batch_, eval_limit_ - first);
    const BertBatch b = batch_to(make_batch(eval_, eval_order_, first, n, n, false, 1, nullptr), ctx_.device);
    const BertOutput out = model_->forward(b, 0);
    correct += out.mlm_correct;
    count += out.mlm_count;
    nsp_correct += out.nsp_correct;
    nsp_count += out.nsp_count;
  }
  model_->train(true);
  const double mlm_accuracy = count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
  nsp_accuracy_ = nsp_count ? static_cast<double>(nsp_correct) / static_cast<double>(nsp_count) : 0.0;
  // MLPerf scores the masked LM only; the NSP accuracy shows whether that head learns (against
  // the label split printed at setup), on the evaluated samples and on the training batches
  // since the previous evaluation.
  fmt::print(stderr, "bert: evaluation after {} steps: masked-LM accuracy {:.4f}, next-sentence accuracy {:.4f} "
             "(training batches since the last evaluation: {:.4f})\n", step_, mlm_accuracy, nsp_accuracy_,
             train_nsp_count_ ? static_cast<double>(train_nsp_correct_) / static_cast<double>(train_nsp_count_) : 0.0);
  train_nsp_correct_ = train_nsp_count_ = 0;
  return {mlm_accuracy, eval_limit_};
}

StepResult BertWorkload::infer_step() {
  const auto math = precision_.policy().math_scope();
  model_->train(false);
  const std::int64_t n = std::min<std::int64_t>(batch_, train_.count);
  const BertBatch b = batch_to(make_batch(train_, order_, 0, n, n, false, 1, nullptr), ctx_.device);
  const BertOutput out = model_->forward(b, 0);
  return {n, out.loss};
}

Hyperparameters BertWorkload::hyperparameters() const { return hyper_; }

void BertWorkload::teardown() {
  optimizer_.reset();
  model_.reset();
}

}  // namespace benchhost::bert

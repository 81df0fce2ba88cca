// The dlrm_dcnv2 workload: options, memory check, data, training step, AUC evaluation.
#include "workload.hpp"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/nn/embedding_bag.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/random.hpp"
#include "synthetic.hpp"

namespace dlrm {

using namespace benchhost;
namespace criteo = benchhost::criteo;

namespace {

constexpr double kAdagradEpsilon = 1e-10;  // MLPerf: exactly 1e-10 in the log

std::string join(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

template <std::size_t N>
std::vector<std::int64_t> vec(const std::array<std::int64_t, N>& a) {
  return {a.begin(), a.end()};
}

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
double cpu_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  return 0;
}

// "cache:NAME" -> ${XDG_CACHE_HOME:-$HOME/.cache}/benchhost/NAME; relative paths are taken from
// the working directory.
std::string resolve_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.rfind("cache:", 0) == 0) {
    fs::path base;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
      base = x;
    else if (const char* h = std::getenv("HOME"); h && *h)
      base = fs::path(h) / ".cache";
    else
      base = fs::temp_directory_path();
    return (base / "benchhost" / dir.substr(6)).string();
  }
  if (dir.empty() || fs::path(dir).is_absolute()) return dir;
  return fs::absolute(fs::path(dir)).string();
}

}  // namespace

WorkloadInfo DlrmWorkload::describe() {
  WorkloadInfo w;
  w.name = "dlrm_dcnv2";
  w.version = "1.0.0";
  w.benchmark = "dlrm_dcnv2";
  w.description = "DLRM with DCN-v2 interaction on Criteo 1TB multi-hot (MLPerf Training "
                  "DLRM-DCNv2): 26 multi-hot embedding bags, 3 low-rank cross layers, Adagrad";
  w.metric_name = "AUC";
  w.metric_target = 0.80275;
  w.higher_is_better = true;
  w.devices = {"cpu"};
  w.precisions = {"fp32"};
  w.modes = {"ttt", "train", "infer"};
  w.configs = {"mlperf.conf", "mini.conf"};
  w.default_config = "mini.conf";  // runs on a fresh machine; --config mlperf for the reference
  const auto tables = join(vec(criteo::mlperf_table_sizes()));
  const auto hot = join(vec(criteo::mlperf_multi_hot_sizes()));
  w.options = {
      {"data-dir", "string", "",
       "directory of day_<d>_{dense,labels}.npy and day_<d>_sparse_multi_hot.npz; \"cache:NAME\" "
       "= ${XDG_CACHE_HOME:-~/.cache}/benchhost/NAME"},
      {"num-days", "int", "24", "days in data-dir: all but the last train, the last's first half validates"},
      {"table-sizes", "int-list", tables, "rows of each of the 26 embedding tables (ids are taken modulo)"},
      {"multi-hot-sizes", "int-list", hot, "ids per sample per feature (synthetic source and generator)"},
      {"embedding-dim", "int", "128", "embedding dimension"},
      {"bottom-mlp", "int-list", "512,256,128", "bottom MLP layer sizes (the last = embedding-dim)"},
      {"top-mlp", "int-list", "1024,1024,512,256,1", "top MLP layer sizes (the last = 1)"},
      {"cross-layers", "int", "3", "DCN-v2 cross layers"},
      {"cross-rank", "int", "512", "DCN-v2 low rank"},
      {"pooling", "string", "sum", "embedding bag pooling: sum or mean"},
      {"global-batch-size", "int", "65536", "global training batch (split evenly over ranks)"},
      {"eval-batch-size", "int", "65536", "evaluation batch per rank"},
      {"learning-rate", "float", "0.005", "Adagrad learning rate (constant, as MLPerf requires)"},
      {"evals-per-epoch", "int", "20", "evaluations per epoch"},
      {"max-epochs", "int", "1", "epoch limit"},
      {"target", "float", "0.80275", "validation AUC target of time-to-train (MLPerf: 0.80275)"},
      {"generate", "bool", "false", "fill a missing data-dir with the planted-teacher generator"},
      {"gen-days", "int", "2", "generator: training days"},
      {"gen-rows-per-day", "int", "100000", "generator: samples per training day"},
      {"gen-eval-rows", "int", "40000", "generator: samples of the evaluation day"},
      {"gen-seed", "int", "1", "generator: seed (fixed: the same data for every run)"},
  };
  return w;
}

std::string DlrmWorkload::check_support(const RunContext& ctx) {
  if (!ctx.device.is_cpu())
    return "dlrm_dcnv2 runs on the CPU only in this build: the CUDA embedding-bag kernels and the "
           "CUDA Adagrad update are not written yet";
  if (ctx.precision != "fp32" && ctx.precision != "tf32")
    return fmt::format("dlrm_dcnv2 supports precision fp32 only, not {}", ctx.precision);
  return "";
}

RunInfo DlrmWorkload::setup(const RunContext& ctx) {
  ctx_ = ctx;
  const Options& o = ctx.options;
  auto opt_int = [&](const char* n, std::int64_t d) { return o.has(n) ? o.get_int(n) : d; };
  auto opt_list = [&](const char* n, std::vector<std::int64_t> d) {
    return o.has(n) ? o.get_int_list(n) : d;
  };
  config_.table_sizes = opt_list("table-sizes", vec(criteo::mlperf_table_sizes()));
  config_.hotness = opt_list("multi-hot-sizes", vec(criteo::mlperf_multi_hot_sizes()));
  config_.embedding_dim = opt_int("embedding-dim", 128);
  config_.bottom_mlp = opt_list("bottom-mlp", {512, 256, 128});
  config_.top_mlp = opt_list("top-mlp", {1024, 1024, 512, 256, 1});
  config_.cross_layers = opt_int("cross-layers", 3);
  config_.cross_rank = opt_int("cross-rank", 512);
  config_.pooling = nn::parse_bag_pooling(o.has("pooling") ? o.get_string("pooling") : "sum");
  BH_CHECK_AS(InvalidArgument, config_.table_sizes.size() == criteo::kNumSparse,
              "--dlrm_dcnv2.table-sizes: the Criteo layout has {} categorical features, got {} sizes",
              criteo::kNumSparse, config_.table_sizes.size());
  config_.validate();

  const int world = std::max(1, ctx.world_size);
  if (ctx.batch_size > 0) {
    local_batch_ = ctx.batch_size;
    global_batch_ = local_batch_ * world;
  } else {
    global_batch_ = opt_int("global-batch-size", 65536);
    BH_CHECK_AS(InvalidArgument, global_batch_ > 0 && global_batch_ % world == 0,
                "--dlrm_dcnv2.global-batch-size {} must be a positive multiple of the {} ranks",
                global_batch_, world);
    local_batch_ = global_batch_ / world;
  }
  eval_batch_size_ = opt_int("eval-batch-size", 65536);
  learning_rate_ = static_cast<float>(o.has("learning-rate") ? o.get_float("learning-rate") : 0.005);
  evals_per_epoch_ = static_cast<int>(opt_int("evals-per-epoch", 20));
  max_epochs_ = static_cast<int>(opt_int("max-epochs", 1));
  target_ = o.has("target") ? o.get_float("target") : 0.80275;
  BH_CHECK_AS(InvalidArgument, target_ > 0.5 && target_ < 1.0,
              "dlrm_dcnv2.target {} must be an AUC in (0.5, 1)", target_);
  BH_CHECK_AS(InvalidArgument, eval_batch_size_ > 0 && evals_per_epoch_ >= 0 && max_epochs_ >= 1,
              "dlrm_dcnv2: need eval-batch-size > 0, evals-per-epoch >= 0, max-epochs >= 1");

  // Memory need, before anything big is allocated (Note [Sparse embedding gradients] explains
  // why table gradients count at full size).
  const bool training = ctx.mode != "infer";
  const MemoryNeed need = memory_need(config_, std::max(local_batch_, eval_batch_size_), training);
  const double avail = cpu_available_bytes();
  if (avail > 0 && need.total() > avail)
    throw OutOfMemory(
        fmt::format("dlrm_dcnv2: this configuration needs {} but the cpu has {:.2f} GiB available "
                    "(MemAvailable); the MLPerf tables need a machine with more memory, or use "
                    "smaller --dlrm_dcnv2.table-sizes (e.g. configs/dlrm_dcnv2/mini.conf)",
                    need.describe(), avail / (1024.0 * 1024.0 * 1024.0)),
        static_cast<std::size_t>(need.total()), __FILE__, __LINE__);

  // Data.
  if (ctx.synthetic_data || (ctx.mode == "infer" && !o.has("data-dir"))) {
    Rng rng(ctx.seed, 0x5D);
    for (int b = 0; b < 4; ++b) {
      auto batch = criteo::make_batch(local_batch_, config_.hotness);
      float* d = batch.dense.data<float>();
      for (std::int64_t i = 0; i < batch.dense.numel(); ++i) d[i] = std::log(3.0f + 20.0f * rng.uniform());
      float* l = batch.labels.data<float>();
      for (std::int64_t i = 0; i < local_batch_; ++i) l[i] = rng.uniform() < 0.25f ? 1.0f : 0.0f;
      for (std::size_t k = 0; k < batch.sparse.size(); ++k) {
        auto* s = batch.sparse[k].data<std::int32_t>();
        for (std::int64_t i = 0; i < batch.sparse[k].numel(); ++i)
          s[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(config_.table_sizes[k])));
      }
      synthetic_.push_back(std::move(batch));
    }
    train_size_ = global_batch_ * 256;
  } else {
    const std::string dir = resolve_dir(o.has("data-dir") ? o.get_string("data-dir") : "");
    BH_CHECK_AS(InvalidArgument, !dir.empty(),
                "dlrm_dcnv2: no --dlrm_dcnv2.data-dir given (point it at MLPerf's preprocessed "
                "Criteo multi-hot days, or use --synthetic for throughput runs)");
    int num_days = static_cast<int>(opt_int("num-days", 24));
    if (o.has("generate") && o.get_bool("generate")) {
      criteo::SyntheticOptions g;
      g.out_dir = dir;
      g.train_days = static_cast<int>(opt_int("gen-days", 2));
      g.rows_per_day = opt_int("gen-rows-per-day", 100000);
      g.eval_rows = opt_int("gen-eval-rows", 40000);
      g.seed = static_cast<std::uint64_t>(opt_int("gen-seed", 1));
      g.table_sizes = config_.table_sizes;
      g.hotness = config_.hotness;
      // Rank 0 generates (or finds) the data; the others wait for it.
      criteo::SyntheticReport rep;
      if (ctx.rank == 0) rep = criteo::ensure_synthetic(g);
      if (ctx.communicator && ctx.communicator->size() > 1) ctx.communicator->barrier();
      if (ctx.rank != 0) rep = criteo::ensure_synthetic(g);
      teacher_auc_ = rep.teacher_auc_validation;
      num_days = g.train_days + 1;
      if (ctx.rank == 0)
        fmt::print(stderr, "dlrm_dcnv2: synthetic Criteo in {} ({} training samples); the planted "
                           "teacher's (Bayes-optimal) validation AUC is {:.5f}\n",
                   dir, rep.train_samples, rep.teacher_auc_validation);
    }
    train_ = std::make_unique<criteo::CriteoMultiHot>(dir, num_days, criteo::CriteoMultiHot::Split::train,
                                                      config_.table_sizes);
    validation_ = std::make_unique<criteo::CriteoMultiHot>(
        dir, num_days, criteo::CriteoMultiHot::Split::validation, config_.table_sizes);
    BH_CHECK_AS(DataError, train_->hotness() == config_.hotness,
                "dlrm_dcnv2: {} has multi-hot sizes {} but the config says {}", dir,
                join(train_->hotness()), join(config_.hotness));
    train_size_ = train_->size() / global_batch_ * global_batch_;  // drop the last partial batch
    BH_CHECK_AS(DataError, train_size_ > 0,
                "dlrm_dcnv2: the training days of {} hold {} samples, less than one global batch "
                "of {}", dir, train_->size(), global_batch_);
  }

  model_ = std::make_unique<DlrmDcnV2>(config_);
  model_->initialize(ctx.seed);
  optim::AdagradOptions ao;
  ao.epsilon = static_cast<float>(kAdagradEpsilon);
  optimizer_ = std::make_unique<optim::Adagrad>(model_->parameters(), ao);
  batch_ = criteo::make_batch(local_batch_, config_.hotness);

  RunInfo info;
  info.samples_per_epoch = train_size_;
  info.global_batch_size = global_batch_;
  info.max_epochs = max_epochs_;
  info.metric_target = target_;  // the config's target (mini: from the teacher), see plugin_abi.h
  if (evals_per_epoch_ > 0) {
    const std::int64_t steps = train_size_ / global_batch_;
    info.eval_every_samples = std::max<std::int64_t>(1, steps / evals_per_epoch_) * global_batch_;
  }
  const double fwd = forward_flops_per_sample(config_);
  info.train_flops_per_sample = 3.0 * fwd;
  info.infer_flops_per_sample = fwd;
  info.eval_samples = validation_ ? validation_->size() : local_batch_;
  return info;
}

void DlrmWorkload::begin_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  batch_ready_ = false;
}

void DlrmWorkload::read_train_batch() {
  if (!train_) return;
  if (cursor_ + global_batch_ > train_size_) cursor_ = 0;  // past the epoch: wrap (throughput runs)
  train_->read_rows(cursor_ + static_cast<std::int64_t>(ctx_.rank) * local_batch_, local_batch_, batch_);
  batch_ready_ = true;
}

void DlrmWorkload::prepare_batch() {
  if (!batch_ready_) read_train_batch();
}

StepResult DlrmWorkload::train_step() {
  const criteo::Batch* b = &batch_;
  if (!synthetic_.empty()) {
    b = &synthetic_[steps_ % synthetic_.size()];
  } else if (!batch_ready_) {
    read_train_batch();
  }
  model_->train(true);
  Tensor logits = model_->forward(b->dense, b->sparse);
  const float loss = nn::bce_with_logits_forward(logits, b->labels);
  if (!std::isfinite(loss))
    BH_THROW(Diverged, "dlrm_dcnv2: training loss became {} at step {}", loss, steps_);
  model_->backward(nn::bce_with_logits_backward(logits, b->labels));
  reduce_gradients();
  optimizer_->step(learning_rate_);
  model_->zero_grad_fast();
  ++steps_;
  cursor_ += global_batch_;
  batch_ready_ = false;
  return {local_batch_, static_cast<double>(loss)};
}

// Note [DLRM parallelism] in workload.hpp.
void DlrmWorkload::reduce_gradients() {
  Communicator* comm = ctx_.communicator;
  if (comm == nullptr || comm->size() == 1) return;
  const int p = comm->size();
  // Dense parameters: one flat allreduce (average).
  auto dense = model_->dense_parameters();
  std::int64_t n = 0;
  for (auto* q : dense) n += q->grad.numel();
  Tensor flat = Tensor::empty({n});
  std::int64_t off = 0;
  for (auto* q : dense) {
    std::copy_n(q->grad.data<float>(), q->grad.numel(), flat.data<float>() + off);
    off += q->grad.numel();
  }
  comm->allreduce(flat, ReduceOp::avg).wait();
  off = 0;
  for (auto* q : dense) {
    std::copy_n(flat.data<float>() + off, q->grad.numel(), q->grad.data<float>());
    off += q->grad.numel();
  }
  // Tables: union of touched rows, then average those gradient rows.
  for (auto* t : model_->tables()) {
    nn::Parameter& w = t->weight();
    const std::int64_t mine = w.sparse_rows.defined() ? w.sparse_rows.numel() : 0;
    Tensor cnt_in = Tensor::from_vector_i64({mine}, {1});
    Tensor counts = Tensor::empty({p}, DType::i64);
    comm->allgather(cnt_in, counts).wait();
    std::int64_t max_count = 0;
    for (int r = 0; r < p; ++r) max_count = std::max(max_count, counts.data<std::int64_t>()[r]);
    Tensor rows_in = Tensor::full({max_count}, -1.0, DType::i64);
    if (mine) std::copy_n(w.sparse_rows.data<std::int64_t>(), mine, rows_in.data<std::int64_t>());
    Tensor all_rows = Tensor::empty({max_count * p}, DType::i64);
    comm->allgather(rows_in, all_rows).wait();
    std::vector<std::int64_t> u;
    for (std::int64_t i = 0; i < max_count * p; ++i)
      if (all_rows.data<std::int64_t>()[i] >= 0) u.push_back(all_rows.data<std::int64_t>()[i]);
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    const std::int64_t dim = t->dim(), nu = static_cast<std::int64_t>(u.size());
    Tensor buf = Tensor::empty({nu, dim});
    float* g = w.grad.data<float>();
    for (std::int64_t i = 0; i < nu; ++i)  // untouched local rows are zero (the invariant)
      std::copy_n(g + u[i] * dim, dim, buf.data<float>() + i * dim);
    if (nu) comm->allreduce(buf, ReduceOp::avg).wait();
    for (std::int64_t i = 0; i < nu; ++i) std::copy_n(buf.data<float>() + i * dim, dim, g + u[i] * dim);
    w.sparse_rows = Tensor::from_vector_i64(u, {nu});
  }
}

EvalResult DlrmWorkload::evaluate() {
  model_->train(false);
  metrics::AucAccumulator auc;
  std::int64_t first = 0, count = 0;
  if (validation_) {
    const int p = std::max(1, ctx_.world_size);
    first = chunk_offset(validation_->size(), p, ctx_.rank);
    count = chunk_count(validation_->size(), p, ctx_.rank);
  }
  for (std::int64_t done = 0; done < count || (!validation_ && done == 0);) {
    const criteo::Batch* b;
    std::int64_t n;
    if (validation_) {
      n = std::min(eval_batch_size_, count - done);
      if (eval_batch_.size() < n) eval_batch_ = criteo::make_batch(n, config_.hotness);
      validation_->read_rows(first + done, n, eval_batch_);
      b = &eval_batch_;
    } else {
      b = &synthetic_[0];
      n = b->size();
    }
    std::vector<Tensor> sparse;
    for (const auto& s : b->sparse) sparse.push_back(n == b->size() ? s : s.slice(0, 0, n));
    Tensor dense = n == b->size() ? b->dense : b->dense.slice(0, 0, n);
    Tensor probs = nn::sigmoid(model_->forward(dense, sparse));
    auc.add(std::span<const float>(probs.data<float>(), n),
            std::span<const float>(b->labels.data<float>(), n));
    done += n;
    if (!validation_) break;
  }
  const double value = auc.compute(ctx_.communicator);
  const std::int64_t samples = auc.total_size(ctx_.communicator);
  model_->train(true);
  if (std::isnan(value))
    BH_THROW(DataError, "dlrm_dcnv2: the validation set ({} samples) holds only one class, so its "
                        "AUC is undefined", samples);
  return {value, samples};
}

StepResult DlrmWorkload::infer_step() {
  model_->train(false);
  const criteo::Batch* b = &batch_;
  if (!synthetic_.empty()) {
    b = &synthetic_[steps_ % synthetic_.size()];
  } else {
    if (!batch_ready_) read_train_batch();
    batch_ready_ = false;
    cursor_ += global_batch_;
  }
  Tensor probs = nn::sigmoid(model_->forward(b->dense, b->sparse));
  (void)probs;
  ++steps_;
  return {local_batch_, std::numeric_limits<double>::quiet_NaN()};
}

Hyperparameters DlrmWorkload::hyperparameters() const {
  return {
      {"global_batch_size", global_batch_},
      {"gradient_accumulation_steps", std::int64_t{1}},
      {"opt_name", std::string("adagrad")},
      {"opt_base_learning_rate", static_cast<double>(learning_rate_)},
      {"opt_adagrad_learning_rate_decay", 0.0},
      {"opt_weight_decay", 0.0},
      {"opt_adagrad_initial_accumulator_value", 0.0},
      {"opt_adagrad_epsilon", kAdagradEpsilon},
      {"opt_learning_rate_warmup_steps", std::int64_t{0}},
      {"opt_learning_rate_decay_start_step", std::int64_t{0}},
      {"opt_learning_rate_decay_steps", std::int64_t{0}},
  };
}

void DlrmWorkload::teardown() {
  optimizer_.reset();
  model_.reset();
  train_.reset();
  validation_.reset();
  synthetic_.clear();
}

}  // namespace dlrm

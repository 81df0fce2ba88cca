// The dlrm_dcnv2 workload: options, memory check, data, training step, AUC evaluation.
#include "workload.hpp"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <fmt/format.h>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/device.hpp"
#include "benchhost/nn/embedding_bag.hpp"
#include "benchhost/nn/math_mode.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/random.hpp"
#include "sharding.hpp"
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

// Memory the run may use on `device`, in bytes (0 when unknown): the GPU's own memory (the CUDA
// backend's environment facts), or MemAvailable from /proc/meminfo.
double available_bytes(Device device) {
  if (device.is_cuda()) {
    for (const auto& [k, v] : device_backend(DeviceType::cuda).environment())
      if (k == fmt::format("gpu{}_memory_bytes", device.index)) return std::stod(v);
    return 0;
  }
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  return 0;
}

// Per feature, the rows of its table that each rank holds (Notes [Table-wise sharding] and
// [Row-wise sharding] in sharding.hpp).
std::vector<std::vector<std::int64_t>> rows_held(const DlrmConfig& c, Sharding s, int world) {
  std::vector<std::vector<std::int64_t>> held(static_cast<std::size_t>(world));
  if (s == Sharding::replicated || world == 1) {
    std::fill(held.begin(), held.end(), c.table_sizes);
  } else if (s == Sharding::table) {
    const std::vector<int> owner = place_tables(c.table_sizes, world);
    for (int r = 0; r < world; ++r)
      for (std::size_t k = 0; k < owner.size(); ++k) held[r].push_back(owner[k] == r ? c.table_sizes[k] : 0);
  } else {
    for (int r = 0; r < world; ++r)
      for (const RowRange& range : row_ranges(c.table_sizes, world, r)) held[r].push_back(range.size());
  }
  return held;
}

// The busiest rank's need with `s` over `world` ranks.
double busiest_rank_need(const DlrmConfig& c, Sharding s, int world, std::int64_t batch, bool training) {
  double worst = 0;
  for (const auto& h : rows_held(c, s, world))
    worst = std::max(worst, memory_need(c, batch, training, h, batch * world).total());
  return worst;
}

// What to do when a configuration does not fit: the fewest ranks (a power of two) each sharding
// needs to train `global_batch` samples per step, or why table-wise sharding cannot help.
std::string ways_to_fit(const DlrmConfig& c, std::int64_t global_batch, bool training, double avail) {
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  std::string cannot, ways;
  for (Sharding s : {Sharding::table, Sharding::row}) {
    auto need = [&](int n) { return busiest_rank_need(c, s, n, std::max<std::int64_t>(1, global_batch / n), training); };
    int n = 2;
    while (n <= 65536 && need(n) > avail) n *= 2;
    if (n <= 65536)
      ways += fmt::format("--dlrm_dcnv2.embedding-sharding {} over at least {} ranks ({:.2f} GiB on the "
                          "busiest rank at global batch {}), or ", sharding_name(s), n, need(n) / gib, global_batch);
    else if (s == Sharding::table)
      cannot = "table-wise sharding cannot help (the largest table alone does not fit); ";
  }
  return cannot + "use " + ways + "smaller --dlrm_dcnv2.table-sizes (e.g. configs/dlrm_dcnv2/mini.conf)";
}

// Batch tensors on the model's device (no copy on the CPU).
std::vector<Tensor> to_device(const std::vector<Tensor>& xs, Device d) {
  std::vector<Tensor> out;
  out.reserve(xs.size());
  for (const auto& x : xs) out.push_back(x.to(d));
  return out;
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
  w.devices = {"cpu", "cuda"};
  w.precisions = {"fp32", "tf32", "bf16", "fp16", "fp8"};  // as the device allows (check_support)
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
      {"embedding-sharding", "string", "replicated",
       "replicated: every rank holds every table (data parallel); table: each table on one rank; "
       "row: every table split by rows over all ranks (sum pooling); table and row are looked up "
       "through all-to-alls (model parallel tables, data parallel MLPs)"},
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
  // The device must exist and the SDK's layers must run this precision on it.
  const std::string why = PrecisionPolicy::layers_support(ctx.precision, ctx.device);
  return why.empty() ? why : "dlrm_dcnv2: " + why;
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
  learning_rate_ = o.has("learning-rate") ? o.get_float("learning-rate") : 0.005;
  evals_per_epoch_ = static_cast<int>(opt_int("evals-per-epoch", 20));
  max_epochs_ = static_cast<int>(opt_int("max-epochs", 1));
  target_ = o.has("target") ? o.get_float("target") : 0.80275;
  BH_CHECK_AS(InvalidArgument, target_ > 0.5 && target_ < 1.0,
              "dlrm_dcnv2.target {} must be an AUC in (0.5, 1)", target_);
  BH_CHECK_AS(InvalidArgument, eval_batch_size_ > 0 && evals_per_epoch_ >= 0 && max_epochs_ >= 1,
              "dlrm_dcnv2: need eval-batch-size > 0, evals-per-epoch >= 0, max-epochs >= 1");

  // Where the tables live (sharding.hpp): with one rank every table is local whatever the
  // option says.
  sharding_ = parse_sharding(o.has("embedding-sharding") ? o.get_string("embedding-sharding") : "replicated");
  const bool sharded = sharding_ != Sharding::replicated && world > 1;
  precision_ = TrainingPrecision(ctx.precision, ctx.device);
  // The all-to-all exchanges of sharded tables move f32 buffers (sharding.cpp).
  if (sharded && precision_.policy().storage_dtype(OpClass::embedding) != DType::f32)
    BH_THROW(Unsupported, "dlrm_dcnv2: {}-wise sharded tables exchange f32 embeddings only; run {} with "
             "--dlrm_dcnv2.embedding-sharding replicated, or fp32/tf32 with sharding",
             sharding_name(sharding_), ctx.precision);
  BH_CHECK_AS(InvalidArgument, !sharded || (ctx.communicator != nullptr && ctx.communicator->size() == world),
              "dlrm_dcnv2: {}-wise sharding over {} ranks needs the run's communicator",
              sharding_name(sharding_), world);
  const std::vector<std::vector<std::int64_t>> held_by = rows_held(config_, sharding_, world);
  const std::vector<std::int64_t>& held = held_by[static_cast<std::size_t>(ctx.rank)];
  if (sharded && ctx.rank == 0) {
    std::string per_rank;
    for (int r = 0; r < world; ++r) {
      const auto& h = held_by[static_cast<std::size_t>(r)];
      per_rank += fmt::format("{}rank {}: {} tables, {} rows", r ? "; " : "", r,
                              std::count_if(h.begin(), h.end(), [](std::int64_t x) { return x > 0; }),
                              std::accumulate(h.begin(), h.end(), std::int64_t{0}));
    }
    fmt::print(stderr, "dlrm_dcnv2: embedding tables sharded {}-wise over {} ranks ({})\n",
               sharding_name(sharding_), world, per_rank);
  }

  // Memory need, before anything big is allocated (Note [Sparse embedding gradients] explains
  // why table gradients count at full size).
  const bool training = ctx.mode != "infer";
  const std::int64_t rows_per_step = std::max(local_batch_, eval_batch_size_);
  const MemoryNeed need = memory_need(config_, rows_per_step, training, held, sharded ? rows_per_step * world : 0);
  const double avail = available_bytes(ctx.device);
  if (avail > 0 && need.total() > avail)
    throw OutOfMemory(
        fmt::format("dlrm_dcnv2: this configuration needs {}{} but {} has {:.2f} GiB available{}; {}",
                    need.describe(), sharded ? fmt::format(" on rank {} ({}-wise sharding)", ctx.rank, sharding_name(sharding_)) : "",
                    ctx.device.str(), avail / (1024.0 * 1024.0 * 1024.0),
                    ctx.device.is_cpu() ? " (MemAvailable)" : "", ways_to_fit(config_, global_batch_, training, avail)),
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

  if (sharded && sharding_ == Sharding::table) {
    const std::vector<int> owner = place_tables(config_.table_sizes, world);
    model_ = std::make_unique<DlrmDcnV2>(config_, owned_features(owner, ctx.rank));
    exchange_ = std::make_unique<TableShardedEmbeddings>(*model_, *ctx.communicator, owner);
  } else if (sharded) {
    model_ = std::make_unique<DlrmDcnV2>(config_, std::vector<std::int64_t>{},
                                         row_ranges(config_.table_sizes, world, ctx.rank));
    exchange_ = std::make_unique<RowShardedEmbeddings>(*model_, *ctx.communicator);
  } else {
    model_ = std::make_unique<DlrmDcnV2>(config_);
  }
  model_->initialize(ctx.seed);  // on the CPU: the same weights on every device
  model_->to(ctx.device);
  model_->set_precision(precision_.policy());
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

const criteo::Batch& DlrmWorkload::next_batch() {
  if (!synthetic_.empty()) return synthetic_[steps_ % synthetic_.size()];
  if (!batch_ready_) read_train_batch();
  return batch_;
}

Tensor DlrmWorkload::logits_for(const Tensor& dense, const std::vector<Tensor>& sparse,
                                const std::vector<std::int64_t>& batch_sizes) {
  if (exchange_) {
    std::vector<Tensor> pooled = exchange_->forward(sparse, batch_sizes);
    if (dense.size(0) == 0) return Tensor();  // this rank has no samples in this round
    return model_->interact(dense.to(ctx_.device), pooled);
  }
  return model_->forward(dense.to(ctx_.device), to_device(sparse, ctx_.device));
}

StepResult DlrmWorkload::train_step() {
  const auto math = precision_.policy().math_scope();
  const criteo::Batch& b = next_batch();
  const int world = std::max(1, ctx_.world_size);
  model_->train(true);
  Tensor logits = logits_for(b.dense, b.sparse, std::vector<std::int64_t>(static_cast<std::size_t>(world), local_batch_));
  const Tensor labels = b.labels.to(ctx_.device);
  const float loss = nn::bce_with_logits_forward(logits, labels);
  const float scale = precision_.loss_scale();
  if (!std::isfinite(loss))
    BH_THROW(Diverged, "dlrm_dcnv2: training loss became {} at step {}", loss, steps_);
  if (exchange_) {
    // Note [Table-wise sharding]: dlogits / world, so that the summed gradients are the
    // global-batch mean for the dense layers and the tables alike.
    exchange_->backward(model_->interact_backward(
        nn::bce_with_logits_backward(logits, labels, scale / static_cast<float>(world))));
  } else {
    model_->backward(nn::bce_with_logits_backward(logits, labels, scale));
  }
  reduce_gradients();  // every rank then sees the same gradients, and decides alike
  if (precision_.unscale_and_check(optimizer_->parameters())) optimizer_->step(static_cast<float>(learning_rate_));
  model_->zero_grad_fast();
  ++steps_;
  cursor_ += global_batch_;
  batch_ready_ = false;
  StepResult r{local_batch_, static_cast<double>(loss)};
  r.loss_scale = precision_.step_loss_scale();
  r.update_skipped = precision_.update_skipped();
  return r;
}

// Note [DLRM parallelism] in workload.hpp.
void DlrmWorkload::reduce_gradients() {
  Communicator* comm = ctx_.communicator;
  if (comm == nullptr || comm->size() == 1) return;
  const int p = comm->size();
  const Device cd = comm->device(), md = ctx_.device;
  // Dense parameters: one flat allreduce; the average of the ranks' means with replicated
  // tables, the sum with sharded ones (their dlogits were scaled by 1 / world).
  auto dense = model_->dense_parameters();
  std::vector<Tensor> grads;
  std::vector<std::int64_t> sizes;
  for (auto* q : dense) {
    grads.push_back(q->grad.view({q->grad.numel()}));
    sizes.push_back(q->grad.numel());
  }
  Tensor flat = nn::concat(grads, 0).to(cd);
  comm->allreduce(flat, exchange_ ? ReduceOp::sum : ReduceOp::avg).wait();
  std::vector<Tensor> parts = nn::split(flat.to(md), sizes, 0);
  for (std::size_t i = 0; i < dense.size(); ++i) grads[i].copy_(parts[i]);
  if (exchange_) return;  // each table is updated by its one owner from the global batch
  // Replicated tables: union of the touched rows, then the average of those gradient rows.
  for (auto* t : model_->tables()) {
    nn::Parameter& w = t->weight();
    const std::int64_t mine = w.sparse_rows.defined() ? w.sparse_rows.numel() : 0;
    Tensor counts = Tensor::empty({p}, DType::i64, cd);
    comm->allgather(Tensor::from_vector_i64({mine}, {1}).to(cd), counts).wait();
    counts = counts.to(Device::cpu());
    std::int64_t max_count = 0;
    for (int r = 0; r < p; ++r) max_count = std::max(max_count, counts.data<std::int64_t>()[r]);
    if (max_count == 0) continue;  // no rank touched this table
    Tensor rows_in = Tensor::full({max_count}, -1.0, DType::i64);
    if (mine) std::copy_n(w.sparse_rows.to(Device::cpu()).data<std::int64_t>(), mine, rows_in.data<std::int64_t>());
    Tensor all_rows = Tensor::empty({max_count * p}, DType::i64, cd);
    comm->allgather(rows_in.to(cd), all_rows).wait();
    all_rows = all_rows.to(Device::cpu());
    std::vector<std::int64_t> u;
    for (std::int64_t i = 0; i < max_count * p; ++i)
      if (all_rows.data<std::int64_t>()[i] >= 0) u.push_back(all_rows.data<std::int64_t>()[i]);
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    const auto nu = static_cast<std::int64_t>(u.size());
    const Tensor ids = Tensor::from_vector_i64(u, {nu}, md);
    // Gather the union's rows (untouched local rows are zero: the invariant of Note [Sparse
    // embedding gradients]), average them, and write them back over zeroed rows.
    Tensor buf = nn::embedding_forward(ids, w.grad).to(cd);
    comm->allreduce(buf, ReduceOp::avg).wait();
    nn::zero_sparse_grad(w);
    nn::embedding_backward(buf.to(md), ids, w.grad);
    w.sparse_rows = Tensor::from_vector_i64(u, {nu});
  }
}

EvalResult DlrmWorkload::evaluate() {
  const auto math = precision_.policy().math_scope();
  model_->train(false);
  metrics::AucAccumulator auc;
  // Every rank's share of the evaluation set (chunk_count; the synthetic source evaluates one
  // batch per rank), in rounds of at most eval-batch-size samples. With sharded tables every rank
  // takes part in every round's all-to-alls, also once its own share is done.
  const int p = std::max(1, ctx_.world_size);
  std::vector<std::int64_t> share(static_cast<std::size_t>(p)), first(share.size(), 0);
  for (int r = 0; r < p; ++r) {
    share[r] = validation_ ? chunk_count(validation_->size(), p, r) : synthetic_[0].size();
    if (validation_) first[r] = chunk_offset(validation_->size(), p, r);
  }
  const std::int64_t per_round = validation_ ? eval_batch_size_ : synthetic_[0].size();
  const std::int64_t rounds = (*std::max_element(share.begin(), share.end()) + per_round - 1) / per_round;
  const std::int64_t me = ctx_.rank;
  if (validation_ && eval_batch_.size() < std::min(per_round, share[me]))
    eval_batch_ = criteo::make_batch(std::min(per_round, share[me]), config_.hotness);
  if (validation_ && eval_batch_.sparse.empty()) eval_batch_ = criteo::make_batch(1, config_.hotness);
  for (std::int64_t round = 0; round < rounds; ++round) {
    std::vector<std::int64_t> sizes(share.size());
    for (std::size_t r = 0; r < share.size(); ++r)
      sizes[r] = std::clamp<std::int64_t>(share[r] - round * per_round, 0, per_round);
    const std::int64_t n = sizes[me];
    if (n == 0 && !exchange_) break;
    const criteo::Batch& b = validation_ ? eval_batch_ : synthetic_[0];
    if (validation_ && n > 0) validation_->read_rows(first[me] + round * per_round, n, eval_batch_);
    std::vector<Tensor> sparse;
    for (const auto& s : b.sparse) sparse.push_back(n == b.size() ? s : s.slice(0, 0, n));
    Tensor logits = logits_for(n == b.size() ? b.dense : b.dense.slice(0, 0, n), sparse, sizes);
    if (n == 0) continue;
    const Tensor probs = nn::cast(nn::sigmoid(logits), DType::f32).to(Device::cpu());
    const Tensor labels = b.labels.slice(0, 0, n);
    auc.add(std::span<const float>(probs.data<float>(), n),
            std::span<const float>(labels.data<float>(), n));
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
  const auto math = precision_.policy().math_scope();
  model_->train(false);
  const criteo::Batch& b = next_batch();
  if (synthetic_.empty()) {
    batch_ready_ = false;
    cursor_ += global_batch_;
  }
  const int world = std::max(1, ctx_.world_size);
  Tensor probs = nn::sigmoid(logits_for(b.dense, b.sparse, std::vector<std::int64_t>(static_cast<std::size_t>(world), local_batch_)));
  (void)probs;
  ++steps_;
  return {local_batch_, std::numeric_limits<double>::quiet_NaN()};
}

void DlrmWorkload::synchronize() {
  if (ctx_.device.is_cuda()) benchhost::synchronize(ctx_.device);
}

Hyperparameters DlrmWorkload::hyperparameters() const {
  return {
      {"global_batch_size", global_batch_},
      {"gradient_accumulation_steps", std::int64_t{1}},
      {"opt_name", std::string("adagrad")},
      {"opt_base_learning_rate", learning_rate_},
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
  exchange_.reset();
  optimizer_.reset();
  model_.reset();
  train_.reset();
  validation_.reset();
  synthetic_.clear();
}

}  // namespace dlrm

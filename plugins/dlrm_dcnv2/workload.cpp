// The dlrm_dcnv2 workload's lifecycle: its declaration (options, MLPerf rules), setup as named
// steps (options, sharding, memory check, data, model, optimizer), the training step with its
// gradient reduction, and the AUC evaluation.
#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "benchhost/threading.hpp"
#include "benchhost/comm/communicator.hpp"
#include "benchhost/device.hpp"
#include "benchhost/memory_budget.hpp"
#include "benchhost/mlperf_rules.hpp"
#include "benchhost/nn/embedding_bag.hpp"
#include "benchhost/nn/math_mode.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/options.hpp"
#include "data.hpp"
#include "sharding.hpp"

namespace dlrm {

using namespace benchhost;
namespace criteo = benchhost::criteo;

namespace {

constexpr double kAdagradEpsilon = 1e-10;  // MLPerf: exactly 1e-10 in the log
constexpr double kMlperfAucTarget = 0.80275;  // MLPerf's quality target on the Criteo validation set

// Batch tensors on the model's device (no copy on the CPU).
std::vector<Tensor> to_device(const std::vector<Tensor>& xs, Device d) {
  std::vector<Tensor> out;
  out.reserve(xs.size());
  for (const auto& x : xs) out.push_back(x.to(d));
  return out;
}

// ---- the options (Note [Options declared once]), in the order --help lists them ----

std::vector<OptionSpec> data_options() {
  return {
      string_option("data-dir", "",
                    "directory of day_<d>_{dense,labels}.npy and day_<d>_sparse_multi_hot.npz; \"cache:NAME\" "
                    "= ${XDG_CACHE_HOME:-~/.cache}/benchhost/NAME"),
      int_option("num-days", 24, "days in data-dir: all but the last train, the last's first half validates")
          .at_least(2)
          .in("days"),
  };
}

std::vector<OptionSpec> model_options() {
  const auto& tables = criteo::mlperf_table_sizes();
  const auto& hot = criteo::mlperf_multi_hot_sizes();
  return {
      int_list_option("table-sizes", {tables.begin(), tables.end()},
                      "rows of each of the 26 embedding tables (ids are taken modulo)")
          .at_least(1)
          .items(criteo::kNumSparse, criteo::kNumSparse),
      int_list_option("multi-hot-sizes", {hot.begin(), hot.end()},
                      "ids per sample per feature (synthetic source and generator)")
          .at_least(1)
          .items(criteo::kNumSparse, criteo::kNumSparse),
      int_option("embedding-dim", 128, "embedding dimension").at_least(1),
      int_list_option("bottom-mlp", {512, 256, 128}, "bottom MLP layer sizes (the last = embedding-dim)")
          .at_least(1)
          .items(1, 0),
      int_list_option("top-mlp", {1024, 1024, 512, 256, 1}, "top MLP layer sizes (the last = 1)")
          .at_least(1)
          .items(1, 0),
      int_option("cross-layers", 3, "DCN-v2 cross layers").at_least(0),
      int_option("cross-rank", 512, "DCN-v2 low rank").at_least(1),
      choice_option("pooling", "sum", {"sum", "mean"}, "embedding bag pooling: sum or mean"),
      choice_option("embedding-sharding", "replicated", {"replicated", "table", "row"},
                    "replicated: every rank holds every table (data parallel); table: each table on one rank; "
                    "row: every table split by rows over all ranks (sum pooling); table and row are looked up "
                    "through all-to-alls (model parallel tables, data parallel MLPs)"),
  };
}

std::vector<OptionSpec> training_options() {
  return {
      int_option("global-batch-size", 65536, "global training batch (split evenly over ranks)").at_least(1).in("samples"),
      int_option("eval-batch-size", 65536, "evaluation batch per rank").at_least(1).in("samples"),
      float_option("learning-rate", 0.005, "Adagrad learning rate (constant, as MLPerf requires)").above(0),
      int_option("evals-per-epoch", 20, "evaluations per epoch").at_least(0),
      int_option("max-epochs", 1, "epoch limit").at_least(1).in("epochs"),
      float_option("target", kMlperfAucTarget, "validation AUC target of time-to-train (MLPerf: 0.80275)")
          .above(0.5)
          .below(1),
  };
}

std::vector<OptionSpec> generator_options() {
  return {
      bool_option("generate", false, "fill a missing data-dir with the planted-teacher generator"),
      int_option("gen-days", 2, "generator: training days").range(1, 64).in("days"),
      int_option("gen-rows-per-day", 100000, "generator: samples per training day").at_least(1).in("samples"),
      int_option("gen-eval-rows", 40000, "generator: samples of the evaluation day").at_least(2).in("samples"),
      int_option("gen-seed", 1, "generator: seed (fixed: the same data for every run)").at_least(0),
  };
}

// What the MLPerf Training rules and the closed_dlrm_dcnv2 compliance file require of a
// DLRM-DCNv2 result (Note [MLPerf rules declared by the plugin]): Adagrad with a constant
// learning rate and no decay, warm-up or initial accumulator, epsilon 1e-10.
mlperf::Rules mlperf_rules() {
  using mlperf::logged_once;
  const mlperf::ValueCheck zero = mlperf::equals(std::int64_t{0});  // numbers compare as numbers: 0.0 too
  mlperf::Rules r;
  r.closed_division = true;
  r.runs = 10;
  r.olympic_drop_each_side = 1;
  r.eval_cadence = "20 evaluations per epoch (every 0.05 epoch)";
  r.closed_target = mlperf::between(kMlperfAucTarget, 1.0);
  r.closed_eval_samples = mlperf::equals(std::int64_t{criteo::kMlperfEvalSamples});
  r.keys = {
      logged_once("global_batch_size"),
      logged_once("opt_name", mlperf::equals(std::string("adagrad"))),
      logged_once("opt_base_learning_rate"),
      logged_once("opt_adagrad_learning_rate_decay", {}, zero),
      logged_once("opt_weight_decay", {}, zero),
      logged_once("opt_adagrad_initial_accumulator_value", {}, zero),
      logged_once("opt_adagrad_epsilon", {}, mlperf::equals(kAdagradEpsilon)),
      logged_once("opt_learning_rate_warmup_steps", {}, zero),
      logged_once("opt_learning_rate_decay_start_step", {}, zero),
      logged_once("opt_learning_rate_decay_steps", {}, zero),
  };
  return r;
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
  w.metric_target = kMlperfAucTarget;
  w.higher_is_better = true;
  w.devices = {"cpu", "cuda"};
  w.precisions = {"fp32", "tf32", "bf16", "fp16", "fp8"};  // as the device allows (check_support)
  w.modes = {"ttt", "train", "infer"};
  w.configs = {"mlperf.conf", "mini.conf"};
  w.default_config = "mini.conf";  // runs on a fresh machine; --config mlperf for the reference
  for (const auto& group : {data_options(), model_options(), training_options(), generator_options()})
    w.options.insert(w.options.end(), group.begin(), group.end());
  w.mlperf = mlperf_rules();
  return w;
}

std::string DlrmWorkload::check_support(const RunContext& ctx) {
  // The device must exist and the SDK's layers must run this precision on it.
  const std::string why = PrecisionPolicy::layers_support(ctx.precision, ctx.device);
  return why.empty() ? why : "dlrm_dcnv2: " + why;
}

RunInfo DlrmWorkload::setup(const RunContext& ctx) {
  ctx_ = ctx;
  if (ctx.num_threads > 0) set_num_threads(ctx.num_threads);  // --threads, as the other workloads
  read_options();
  choose_sharding();
  check_memory();
  build_data();
  build_model();
  build_optimizer();
  return run_info();
}

// The model's shapes and the training options; ranges are the declaration's (describe), so only
// what relates options to each other or to the run is checked here.
void DlrmWorkload::read_options() {
  const Options& o = ctx_.options;
  config_.table_sizes = o.get_int_list("table-sizes");
  config_.hotness = o.get_int_list("multi-hot-sizes");
  config_.embedding_dim = o.get_int("embedding-dim");
  config_.bottom_mlp = o.get_int_list("bottom-mlp");
  config_.top_mlp = o.get_int_list("top-mlp");
  config_.cross_layers = o.get_int("cross-layers");
  config_.cross_rank = o.get_int("cross-rank");
  config_.pooling = nn::parse_bag_pooling(o.get_string("pooling"));
  config_.validate();

  const int world = std::max(1, ctx_.world_size);
  if (ctx_.batch_size > 0) {
    local_batch_ = ctx_.batch_size;
    global_batch_ = local_batch_ * world;
  } else {
    global_batch_ = o.get_int("global-batch-size");
    BH_CHECK_AS(InvalidArgument, global_batch_ % world == 0,
                "--dlrm_dcnv2.global-batch-size {} must be a positive multiple of the {} ranks",
                global_batch_, world);
    local_batch_ = global_batch_ / world;
  }
  eval_batch_size_ = o.get_int("eval-batch-size");
  learning_rate_ = o.get_float("learning-rate");
  evals_per_epoch_ = o.get_int("evals-per-epoch");
  max_epochs_ = o.get_int("max-epochs");
  target_ = o.get_float("target");
}

// Where the tables live (sharding.hpp): with one rank every table is local whatever the
// option says.
void DlrmWorkload::choose_sharding() {
  const int world = std::max(1, ctx_.world_size);
  sharding_ = parse_sharding(ctx_.options.get_string("embedding-sharding"));
  sharded_ = sharding_ != Sharding::replicated && world > 1;
  precision_ = TrainingPrecision(ctx_.precision, ctx_.device);
  // The all-to-all exchanges of sharded tables move f32 buffers (sharding.cpp).
  if (sharded_ && precision_.policy().storage_dtype(OpClass::embedding) != DType::f32)
    BH_THROW(Unsupported, "dlrm_dcnv2: {}-wise sharded tables exchange f32 embeddings only; run {} with "
             "--dlrm_dcnv2.embedding-sharding replicated, or fp32/tf32 with sharding",
             sharding_name(sharding_), ctx_.precision);
  BH_CHECK_AS(InvalidArgument, !sharded_ || (ctx_.communicator != nullptr && ctx_.communicator->size() == world),
              "dlrm_dcnv2: {}-wise sharding over {} ranks needs the run's communicator",
              sharding_name(sharding_), world);
  if (!sharded_ || ctx_.rank != 0) return;
  const std::vector<std::vector<std::int64_t>> held_by = rows_held_by_rank(config_.table_sizes, sharding_, world);
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
void DlrmWorkload::check_memory() const {
  const int world = std::max(1, ctx_.world_size);
  const std::vector<std::int64_t> held =
      rows_held_by_rank(config_.table_sizes, sharding_, world)[static_cast<std::size_t>(ctx_.rank)];
  const bool training = ctx_.mode != "infer";
  const std::int64_t rows_per_step = std::max(local_batch_, eval_batch_size_);
  const MemoryNeed need = memory_need(config_, rows_per_step, training, held, sharded_ ? rows_per_step * world : 0);
  // Note [Memory budgets]: on the CPU, what is free now, within any cgroup limit.
  const MemoryBudget budget = memory_budget(ctx_.device);
  const double avail = budget.available_bytes;
  if (avail > 0 && need.total() > avail)
    throw OutOfMemory(
        fmt::format("dlrm_dcnv2: this configuration needs {}{} but {} has {:.2f} GiB available ({}); {}",
                    need.describe(), sharded_ ? fmt::format(" on rank {} ({}-wise sharding)", ctx_.rank, sharding_name(sharding_)) : "",
                    ctx_.device.str(), avail / (1024.0 * 1024.0 * 1024.0), budget.source,
                    ways_to_fit(config_, global_batch_, training, avail)),
        static_cast<std::size_t>(need.total()), __FILE__, __LINE__);
}

// The synthetic source for --synthetic (and for inference without a data-dir), else the Criteo
// days (data.hpp).
void DlrmWorkload::build_data() {
  const bool synthetic = ctx_.synthetic_data || (ctx_.mode == "infer" && !ctx_.options.has("data-dir"));
  data_ = synthetic ? synthetic_data(config_, local_batch_, global_batch_, ctx_.seed)
                    : criteo_data(ctx_.options, config_, global_batch_, ctx_);
  batch_ = criteo::make_batch(local_batch_, config_.hotness);
}

// The whole model, or this rank's tables and the dense layers when the tables are sharded.
void DlrmWorkload::build_model() {
  const int world = std::max(1, ctx_.world_size);
  if (sharded_ && sharding_ == Sharding::table) {
    const std::vector<int> owner = place_tables(config_.table_sizes, world);
    model_ = std::make_unique<DlrmDcnV2>(config_, owned_features(owner, ctx_.rank));
    exchange_ = std::make_unique<TableShardedEmbeddings>(*model_, *ctx_.communicator, owner);
  } else if (sharded_) {
    model_ = std::make_unique<DlrmDcnV2>(config_, std::vector<std::int64_t>{},
                                         row_ranges(config_.table_sizes, world, ctx_.rank));
    exchange_ = std::make_unique<RowShardedEmbeddings>(*model_, *ctx_.communicator);
  } else {
    model_ = std::make_unique<DlrmDcnV2>(config_);
  }
  model_->initialize(ctx_.seed);  // on the CPU: the same weights on every device
  model_->to(ctx_.device);
  model_->set_precision(precision_.policy());
}

void DlrmWorkload::build_optimizer() {
  optim::AdagradOptions ao;
  ao.epsilon = static_cast<float>(kAdagradEpsilon);
  optimizer_ = std::make_unique<optim::Adagrad>(model_->parameters(), ao);
}

RunInfo DlrmWorkload::run_info() const {
  RunInfo info;
  info.samples_per_epoch = data_.train_size;
  info.global_batch_size = global_batch_;
  info.max_epochs = max_epochs_;
  info.metric_target = target_;  // the config's target (mini: from the teacher), see plugin_abi.h
  if (evals_per_epoch_ > 0) {
    const std::int64_t steps = data_.train_size / global_batch_;
    info.eval_every_samples = std::max<std::int64_t>(1, steps / evals_per_epoch_) * global_batch_;
  }
  const double fwd = forward_flops_per_sample(config_);
  info.train_flops_per_sample = 3.0 * fwd;
  info.infer_flops_per_sample = fwd;
  info.eval_samples = data_.validation ? data_.validation->size() : local_batch_;
  return info;
}

void DlrmWorkload::begin_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
  batch_ready_ = false;
}

void DlrmWorkload::read_train_batch() {
  if (!data_.train) return;
  if (cursor_ + global_batch_ > data_.train_size) cursor_ = 0;  // past the epoch: wrap (throughput runs)
  data_.train->read_rows(cursor_ + static_cast<std::int64_t>(ctx_.rank) * local_batch_, local_batch_, batch_);
  batch_ready_ = true;
}

void DlrmWorkload::prepare_batch() {
  if (!batch_ready_) read_train_batch();
}

const criteo::Batch& DlrmWorkload::next_batch() {
  if (!data_.synthetic.empty()) return data_.synthetic[steps_ % data_.synthetic.size()];
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
  if (ctx_.communicator == nullptr || ctx_.communicator->size() == 1) return;
  reduce_dense_gradients();
  // Sharded tables: each table is updated by its one owner from the global batch.
  if (!exchange_) reduce_table_gradients();
}

// Dense parameters: one flat allreduce; the average of the ranks' means with replicated
// tables, the sum with sharded ones (their dlogits were scaled by 1 / world).
void DlrmWorkload::reduce_dense_gradients() {
  Communicator* comm = ctx_.communicator;
  auto dense = model_->dense_parameters();
  std::vector<Tensor> grads;
  std::vector<std::int64_t> sizes;
  for (auto* q : dense) {
    grads.push_back(q->grad.view({q->grad.numel()}));
    sizes.push_back(q->grad.numel());
  }
  Tensor flat = nn::concat(grads, 0).to(comm->device());
  comm->allreduce(flat, exchange_ ? ReduceOp::sum : ReduceOp::avg).wait();
  std::vector<Tensor> parts = nn::split(flat.to(ctx_.device), sizes, 0);
  for (std::size_t i = 0; i < dense.size(); ++i) grads[i].copy_(parts[i]);
}

namespace {

// The rows of `w` touched on any rank, ascending (every rank gets the same list): an allgather
// of the counts, then one of the row ids padded to the largest count with -1.
std::vector<std::int64_t> touched_rows_on_any_rank(Communicator& comm, const nn::Parameter& w) {
  const int p = comm.size();
  const Device cd = comm.device();
  const std::int64_t mine = w.sparse_rows.defined() ? w.sparse_rows.numel() : 0;
  Tensor counts = Tensor::empty({p}, DType::i64, cd);
  comm.allgather(Tensor::from_vector_i64({mine}, {1}).to(cd), counts).wait();
  counts = counts.to(Device::cpu());
  std::int64_t max_count = 0;
  for (int r = 0; r < p; ++r) max_count = std::max(max_count, counts.data<std::int64_t>()[r]);
  if (max_count == 0) return {};  // no rank touched this table
  Tensor rows_in = Tensor::full({max_count}, -1.0, DType::i64);
  if (mine) std::copy_n(w.sparse_rows.to(Device::cpu()).data<std::int64_t>(), mine, rows_in.data<std::int64_t>());
  Tensor all_rows = Tensor::empty({max_count * p}, DType::i64, cd);
  comm.allgather(rows_in.to(cd), all_rows).wait();
  all_rows = all_rows.to(Device::cpu());
  std::vector<std::int64_t> u;
  for (std::int64_t i = 0; i < max_count * p; ++i)
    if (all_rows.data<std::int64_t>()[i] >= 0) u.push_back(all_rows.data<std::int64_t>()[i]);
  std::sort(u.begin(), u.end());
  u.erase(std::unique(u.begin(), u.end()), u.end());
  return u;
}

}  // namespace

// Replicated tables: union of the touched rows, then the average of those gradient rows.
void DlrmWorkload::reduce_table_gradients() {
  Communicator* comm = ctx_.communicator;
  const Device cd = comm->device(), md = ctx_.device;
  for (auto* t : model_->tables()) {
    nn::Parameter& w = t->weight();
    const std::vector<std::int64_t> u = touched_rows_on_any_rank(*comm, w);
    if (u.empty()) continue;
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
  const EvalPlan plan = plan_evaluation();
  const std::int64_t rows = std::min(plan.per_round, plan.share[static_cast<std::size_t>(ctx_.rank)]);
  if (data_.validation && (eval_batch_.size() < rows || eval_batch_.sparse.empty()))
    eval_batch_ = criteo::make_batch(std::max<std::int64_t>(rows, 1), config_.hotness);
  for (std::int64_t round = 0; round < plan.rounds; ++round)
    if (!evaluate_round(plan, round, auc)) break;
  const double value = auc.compute(ctx_.communicator);
  const std::int64_t samples = auc.total_size(ctx_.communicator);
  model_->train(true);
  if (std::isnan(value))
    BH_THROW(DataError, "dlrm_dcnv2: the validation set ({} samples) holds only one class, so its "
                        "AUC is undefined", samples);
  return {value, samples};
}

// Every rank's share of the evaluation set (chunk_count; the synthetic source evaluates one
// batch per rank), in rounds of at most eval-batch-size samples. With sharded tables every rank
// takes part in every round's all-to-alls, also once its own share is done.
DlrmWorkload::EvalPlan DlrmWorkload::plan_evaluation() const {
  const int p = std::max(1, ctx_.world_size);
  const criteo::CriteoMultiHot* validation = data_.validation.get();
  EvalPlan plan;
  plan.share.assign(static_cast<std::size_t>(p), 0);
  plan.first.assign(static_cast<std::size_t>(p), 0);
  for (int r = 0; r < p; ++r) {
    plan.share[r] = validation ? chunk_count(validation->size(), p, r) : data_.synthetic[0].size();
    if (validation) plan.first[r] = chunk_offset(validation->size(), p, r);
  }
  plan.per_round = validation ? eval_batch_size_ : data_.synthetic[0].size();
  plan.rounds = (*std::max_element(plan.share.begin(), plan.share.end()) + plan.per_round - 1) / plan.per_round;
  return plan;
}

bool DlrmWorkload::evaluate_round(const EvalPlan& plan, std::int64_t round, metrics::AucAccumulator& auc) {
  const criteo::CriteoMultiHot* validation = data_.validation.get();
  const std::int64_t me = ctx_.rank, per_round = plan.per_round;
  std::vector<std::int64_t> sizes(plan.share.size());
  for (std::size_t r = 0; r < plan.share.size(); ++r)
    sizes[r] = std::clamp<std::int64_t>(plan.share[r] - round * per_round, 0, per_round);
  const std::int64_t n = sizes[me];
  if (n == 0 && !exchange_) return false;
  const criteo::Batch& b = validation ? eval_batch_ : data_.synthetic[0];
  if (validation && n > 0) validation->read_rows(plan.first[me] + round * per_round, n, eval_batch_);
  std::vector<Tensor> sparse;
  for (const auto& s : b.sparse) sparse.push_back(n == b.size() ? s : s.slice(0, 0, n));
  Tensor logits = logits_for(n == b.size() ? b.dense : b.dense.slice(0, 0, n), sparse, sizes);
  if (n == 0) return true;
  const Tensor probs = nn::cast(nn::sigmoid(logits), DType::f32).to(Device::cpu());
  const Tensor labels = b.labels.slice(0, 0, n);
  auc.add(std::span<const float>(probs.data<float>(), n), std::span<const float>(labels.data<float>(), n));
  return true;
}

StepResult DlrmWorkload::infer_step() {
  const auto math = precision_.policy().math_scope();
  model_->train(false);
  const criteo::Batch& b = next_batch();
  if (data_.synthetic.empty()) {
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
  data_ = DlrmData{};
}

}  // namespace dlrm

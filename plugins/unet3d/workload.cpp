// The unet3d workload: the lifecycle around the 3D U-Net of model.hpp and the data of data.hpp:
// options, optimizer, the train/eval/infer steps. See workload.hpp.

#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "benchhost/comm/data_parallel.hpp"
#include "benchhost/device.hpp"
#include "benchhost/metrics/dice.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/serialize.hpp"
#include "benchhost/threading.hpp"
#include "sliding_window.hpp"

namespace benchhost::unet3d {

namespace {

// Note [3D U-Net options]
// Every knob of the run is an option, so configs/unet3d/*.conf describe complete runs. Defaults
// are the MLPerf closed reference (run_and_time.sh, arguments.py): batch 2, SGD with Nesterov
// momentum 0.9, LR 0.8 warmed up linearly from 1e-4 over 200 epochs, 128^3 patches with
// oversampling 0.4, sliding-window evaluation with 128^3 windows overlapping by half, from epoch
// 1000 every 20. The epoch counts of the evaluation cadence are in passes over the 168 training
// cases and are rescaled to this run's epochs as the rules say: start = ceil(1000 * 168 /
// samples_per_epoch), every = ceil(20 * 168 / samples_per_epoch).
std::vector<OptionSpec> option_specs() {
  return {
      int_list_option("filters", {32, 64, 128, 256, 320}, "channels per level (MLPerf: 32,64,128,256,320)")
          .at_least(1)
          .items(2, 7),
      choice_option("layout", "ndhwc", {"ndhwc", "ncdhw"}, "activation layout (ndhwc: channels last)"),
      string_option("data-dir", "", "KiTS19 as MLPerf's preprocessing leaves it (case_XXXXX_{x,y}.npy, evaluation_cases.txt)"),
      bool_option("generate", false, "fill a missing data-dir with the synthetic generator (datasets/kits19/synthetic.hpp)"),
      int_option("gen-train-cases", 48, "generator: training cases").range(1, 10000).in("cases"),
      int_option("gen-eval-cases", 12, "generator: evaluation cases").range(1, 10000).in("cases"),
      int_option("gen-size-min", 48, "generator: smallest side of a volume").range(8, 1024).in("voxels"),
      int_option("gen-size-max", 64, "generator: largest side of a volume").range(8, 1024).in("voxels"),
      int_option("gen-seed", 1, "generator: seed (fixed: the same data for every run)").at_least(0),
      int_list_option("patch-size", {128, 128, 128}, "training patch D,H,W (training_input_shape)").at_least(2).items(3, 3).in("voxels"),
      int_list_option("roi-size", {128, 128, 128}, "sliding-window size D,H,W (validation_input_shape)").at_least(2).items(3, 3).in("voxels"),
      float_option("overlap", 0.5, "sliding-window overlap (validation_overlap)").at_least(0).below(1),
      int_option("eval-window-batch", 2, "windows per model call in the sliding window").range(1, 64).in("windows"),
      float_option("oversampling", 0.4, "probability of a foreground-centred training crop").range(0, 1),
      int_option("batch-size", 2, "per-rank training batch size when -b is not given").at_least(1).in("samples"),
      int_option("loader-threads", 0, "data loader threads (0 = the run's thread count)").at_least(0),
      int_option("epochs", 4000, "maximum epochs of time-to-train").at_least(1).in("epochs"),
      float_option("start-eval-at", 1000, "first evaluation, in passes over the training cases (MLPerf: 1000)").at_least(0).in("epochs"),
      float_option("evaluate-every", 20, "evaluation cadence, in passes over the training cases (MLPerf: 20)").above(0).in("epochs"),
      float_option("target", 0.908, "mean DICE target of time-to-train (MLPerf: 0.908)").above(0).at_most(1),
      float_option("base-lr", 0.8, "learning rate after warm-up").above(0),
      float_option("init-lr", 1e-4, "learning rate the warm-up starts from").at_least(0),
      float_option("warmup-epochs", 200, "linear warm-up epochs").at_least(0).in("epochs"),
      int_list_option("lr-decay-epochs", {}, "multiply the learning rate by lr-decay-factor after each of these epochs (MLPerf: none)")
          .at_least(1)
          .items(0, 64)
          .in("epochs"),
      float_option("lr-decay-factor", 1.0, "learning-rate factor at each lr-decay-epochs boundary (MLPerf: 1)").above(0).at_most(1),
      float_option("momentum", 0.9, "SGD momentum").at_least(0).below(1),
      bool_option("nesterov", true, "Nesterov momentum"),
      float_option("weight-decay", 0, "weight decay").at_least(0),
      string_option("init-weights", "", "weights file to start from (nn/serialize.hpp format)"),
      string_option("save-initial-weights", "", "write the initial weights here (for the PyTorch peer)"),
  };
}

// What MLPerf Training v3.0 requires of benchmark "unet3d" (closed_unet3d.yaml of mlcommons/
// logging; the rules' 40 runs with 4 dropped each side).
mlperf::Rules mlperf_rules() {
  using mlperf::logged_once;
  mlperf::Rules r;
  r.closed_division = true;
  r.runs = 40;
  r.olympic_drop_each_side = 4;
  r.eval_cadence = "from epoch ceil(1000*168/samples_per_epoch), every ceil(20*168/samples_per_epoch) epochs";
  r.closed_target = mlperf::between(0.908, 1.0, false, false);
  r.closed_eval_samples = mlperf::equals(std::int64_t{42});
  r.open_target = mlperf::between(0.0, 1.0, false, true);  // open_unet3d.yaml: some value < 1.0
  r.keys.push_back(logged_once("global_batch_size", mlperf::positive()));
  r.keys.push_back(logged_once("opt_name"));
  r.keys.push_back(logged_once("opt_base_learning_rate"));
  r.keys.push_back(logged_once("opt_learning_rate_warmup_epochs", mlperf::between(0, 1e12)));
  for (const char* key : {"opt_learning_rate_decay_boundary_epochs", "opt_learning_rate_decay_factor",
                          "opt_weight_decay", "opt_momentum", "oversampling", "training_input_shape",
                          "validation_input_shape", "validation_overlap"})
    r.keys.push_back(logged_once(key));
  r.keys.push_back(logged_once("train_samples", {}, mlperf::equals(std::int64_t{168})));
  return r;
}

std::vector<double> as_doubles(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

// ---------------------------------------------------------------------------------------------

EpochWarmupSchedule::EpochWarmupSchedule(float init_lr, float base_lr, double warmup_epochs,
                                         std::int64_t steps_per_epoch, std::vector<std::int64_t> decay_epochs,
                                         double decay_factor)
    : init_lr_(init_lr),
      base_lr_(base_lr),
      warmup_epochs_(warmup_epochs),
      steps_per_epoch_(std::max<std::int64_t>(1, steps_per_epoch)),
      decay_epochs_(std::move(decay_epochs)),
      decay_factor_(decay_factor) {}

float EpochWarmupSchedule::lr(std::int64_t step) const {
  const double epoch = static_cast<double>(step / steps_per_epoch_ + 1);  // the reference counts epochs from 1
  if (warmup_epochs_ > 0 && epoch <= warmup_epochs_)
    return static_cast<float>(init_lr_ + (static_cast<double>(base_lr_) - init_lr_) * epoch / warmup_epochs_);
  double lr = base_lr_;
  for (const std::int64_t m : decay_epochs_)
    if (static_cast<double>(m) < epoch && static_cast<double>(m) > warmup_epochs_ - 1) lr *= decay_factor_;
  return static_cast<float>(lr);
}

std::string EpochWarmupSchedule::describe() const {
  const std::string after =
      decay_epochs_.empty() ? std::string("constant")
                            : fmt::format("x{} after epochs {}", decay_factor_, fmt::join(decay_epochs_, ","));
  return fmt::format("per-epoch linear warm-up {} -> {} over {} epochs of {} steps, then {}", init_lr_, base_lr_,
                     warmup_epochs_, steps_per_epoch_, after);
}

// ---------------------------------------------------------------------------------------------

UNet3dWorkload::UNet3dWorkload() = default;
UNet3dWorkload::~UNet3dWorkload() = default;

WorkloadInfo UNet3dWorkload::describe() {
  WorkloadInfo i;
  i.name = "unet3d";
  i.version = "1.0.0";
  i.benchmark = "unet3d";
  i.description =
      "3D U-Net kidney and tumour segmentation on KiTS19 (SGD, Nesterov); mini: a shallower U-Net on "
      "generated volumes with planted organs";
  i.metric_name = "mean_dice";
  i.metric_target = 0.908;
  i.higher_is_better = true;
  i.devices = {"cpu", "cuda"};
  i.precisions = {"fp32", "tf32", "bf16", "fp16"};
  i.modes = {"ttt", "train", "infer"};
  i.options = option_specs();
  i.configs = {"mlperf.conf", "mini.conf"};
  i.default_config = "mini.conf";
  i.mlperf = mlperf_rules();
  return i;
}

std::string UNet3dWorkload::check_support(const RunContext& ctx) {
  const std::string why = PrecisionPolicy::layers_support(ctx.precision, ctx.device);
  if (!why.empty()) return "unet3d: " + why;
  if (parse_precision(ctx.precision) == Precision::fp8)
    return "unet3d: precision fp8 drives Linear layers only and 3D U-Net has none; run bf16";
  return {};
}

UNet3dConfig UNet3dWorkload::model_config(const Options& o) {
  UNet3dConfig c;
  c.filters = o.get_int_list("filters");
  c.layout = nn::parse_volume_layout(o.get_string("layout"));
  return c;
}

RunInfo UNet3dWorkload::setup(const RunContext& ctx) {
  ctx_ = ctx;
  if (ctx.num_threads > 0) set_num_threads(ctx.num_threads);
  const std::string why = check_support(ctx);
  if (!why.empty()) BH_THROW(Unsupported, "{}", why);
  precision_ = TrainingPrecision(ctx.precision, ctx.device);
  build_model();
  read_batch_size();
  build_data();
  build_optimizer();
  build_data_parallel();
  log_hyperparameters();
  model_->train(ctx.mode != "infer");
  return run_info();
}

void UNet3dWorkload::build_model() {
  const Options& o = ctx_.options;
  model_ = std::make_unique<UNet3d>(model_config(o));
  // Every patch side must survive len(filters) halvings with a bottleneck of >= 2 voxels.
  const std::int64_t m = model_->side_multiple();
  for (const char* name : {"patch-size", "roi-size"})
    for (std::int64_t s : o.get_int_list(name))
      BH_CHECK_AS(InvalidArgument, s % m == 0 && s >= 2 * m,
                  "unet3d.{} = {}: with {} filter levels each side must be a multiple of {} and at least {}", name,
                  fmt::join(o.get_int_list(name), ","), model_->config().filters.size(), m, 2 * m);
  model_->initialize(ctx_.seed);
  if (const std::string w = o.get_string("init-weights"); !w.empty()) nn::load_weights(*model_, w);
  if (const std::string w = o.get_string("save-initial-weights"); !w.empty()) nn::save_weights(*model_, w);
  model_->to(ctx_.device);
  model_->set_precision(precision_.policy());
}

void UNet3dWorkload::read_batch_size() {
  batch_size_ = ctx_.batch_size > 0 ? ctx_.batch_size : ctx_.options.get_int("batch-size");
}

void UNet3dWorkload::build_data() {
  data_ = build_data_sources(ctx_, batch_size_);
  steps_per_epoch_ = data_.train->batches_per_epoch();
  BH_CHECK_AS(InvalidArgument, steps_per_epoch_ > 0, "unet3d: {} training cases give no full batch of {} per rank",
              data_.train_cases, batch_size_);
  // Note [3D U-Net options]: the cadence in passes over the training cases, rescaled.
  const Options& o = ctx_.options;
  const double per_epoch = static_cast<double>(data_.samples_per_epoch);
  const double cases = static_cast<double>(std::max<std::int64_t>(1, data_.train_cases));
  start_eval_epoch_ = static_cast<std::int64_t>(std::ceil(o.get_float("start-eval-at") * cases / per_epoch - 1e-9));
  eval_every_epochs_ =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(o.get_float("evaluate-every") * cases / per_epoch - 1e-9)));
}

void UNet3dWorkload::build_optimizer() {
  const Options& o = ctx_.options;
  schedule_ = std::make_unique<EpochWarmupSchedule>(
      static_cast<float>(o.get_float("init-lr")), static_cast<float>(o.get_float("base-lr")), o.get_float("warmup-epochs"),
      steps_per_epoch_, o.get_int_list("lr-decay-epochs"), o.get_float("lr-decay-factor"));
  optim::SgdOptions sg;
  sg.momentum = static_cast<float>(o.get_float("momentum"));
  sg.nesterov = o.get_bool("nesterov");
  sg.weight_decay = static_cast<float>(o.get_float("weight-decay"));
  BH_CHECK_AS(InvalidArgument, !sg.nesterov || sg.momentum > 0, "unet3d.nesterov needs unet3d.momentum > 0");
  optimizer_ = std::make_unique<optim::Sgd>(model_->parameters(), sg);
}

void UNet3dWorkload::build_data_parallel() {
  if (ctx_.world_size <= 1) return;
  BH_CHECK_AS(InvalidArgument, ctx_.communicator != nullptr, "unet3d: world size {} but no communicator",
              ctx_.world_size);
  data_parallel_ = std::make_unique<DataParallel>(model_->parameters(), *ctx_.communicator);
}

// MLLOG hyperparameters (mlcommons/logging closed_unet3d.yaml, and what the reference logs
// beside them), from the option values as given.
void UNet3dWorkload::log_hyperparameters() {
  const Options& o = ctx_.options;
  hyper_.clear();
  hyper_.emplace_back("global_batch_size", batch_size_ * ctx_.world_size);
  hyper_.emplace_back("gradient_accumulation_steps", std::int64_t{1});
  hyper_.emplace_back("opt_name", std::string("sgd"));
  hyper_.emplace_back("opt_base_learning_rate", o.get_float("base-lr"));
  hyper_.emplace_back("opt_initial_learning_rate", o.get_float("init-lr"));
  hyper_.emplace_back("opt_learning_rate_warmup_epochs", o.get_float("warmup-epochs"));
  hyper_.emplace_back("opt_learning_rate_decay_boundary_epochs", as_doubles(o.get_int_list("lr-decay-epochs")));
  hyper_.emplace_back("opt_learning_rate_decay_factor", o.get_float("lr-decay-factor"));
  hyper_.emplace_back("opt_weight_decay", o.get_float("weight-decay"));
  hyper_.emplace_back("opt_momentum", o.get_float("momentum"));
  hyper_.emplace_back("oversampling", o.get_float("oversampling"));
  hyper_.emplace_back("training_input_shape", as_doubles(o.get_int_list("patch-size")));
  hyper_.emplace_back("validation_input_shape", as_doubles(o.get_int_list("roi-size")));
  hyper_.emplace_back("validation_overlap", o.get_float("overlap"));
  hyper_.emplace_back("samples_per_epoch", data_.samples_per_epoch);
}

RunInfo UNet3dWorkload::run_info() const {
  const Options& o = ctx_.options;
  RunInfo info;
  info.samples_per_epoch = data_.samples_per_epoch;
  info.eval_every_samples = eval_every_epochs_ * data_.samples_per_epoch;
  info.eval_start_samples = start_eval_epoch_ * data_.samples_per_epoch;
  info.train_samples = data_.train_cases;  // closed_unet3d.yaml: 168, whatever an epoch drops
  info.global_batch_size = batch_size_ * ctx_.world_size;
  info.max_epochs = o.get_int("epochs");
  const auto p = o.get_int_list("patch-size");
  const double macs = model_->forward_macs(p[0], p[1], p[2]);
  info.infer_flops_per_sample = 2.0 * macs;
  info.train_flops_per_sample = 3.0 * 2.0 * macs;
  info.eval_samples = data_.eval_samples;
  info.metric_target = o.get_float("target");
  return info;
}

Tensor UNet3dWorkload::as_model_input(const Tensor& images) const {
  // The loader's patches are [B, 1, D, H, W]; with one channel NDHWC holds the same bytes.
  BH_CHECK_AS(DataError, images.dim() == 5 && images.size(1) == 1, "unet3d: expected patches [B, 1, D, H, W], got {}",
              shape_str(images.shape()));
  if (model_->config().layout == nn::VolumeLayout::ncdhw) return images;
  return images.contiguous().view({images.size(0), images.size(2), images.size(3), images.size(4), 1});
}

Tensor UNet3dWorkload::as_labels(const Tensor& labels) const {
  BH_CHECK_AS(DataError, labels.dim() == 5 && labels.size(1) == 1, "unet3d: expected labels [B, 1, D, H, W], got {}",
              shape_str(labels.shape()));
  return labels.contiguous().view({labels.size(0), labels.size(2), labels.size(3), labels.size(4)});
}

void UNet3dWorkload::begin_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  data_.train->start_epoch(epoch);
}

void UNet3dWorkload::prepare_batch() {
  if (epoch_ < 0) begin_epoch(0);
  batch_ = data_.train->next();
  if (!batch_) {  // the host asked past the end of the epoch (throughput mode): next epoch
    begin_epoch(epoch_ + 1);
    batch_ = data_.train->next();
  }
  BH_CHECK_AS(DataError, batch_.has_value(), "unet3d: the training data source is empty");
}

StepResult UNet3dWorkload::train_step() {
  const auto math = precision_.policy().math_scope();
  if (!batch_) prepare_batch();
  const data::Batch batch = std::move(*batch_);
  batch_.reset();
  const Tensor labels = as_labels(batch["label"]);
  const Tensor logits = nn::cast(model_->forward(as_model_input(batch["image"])), DType::f32);
  const nn::VolumeLayout layout = model_->config().layout;
  const nn::DiceCeResult loss = nn::dice_ce_loss_forward(logits, labels, layout);
  model_->backward(nn::dice_ce_loss_backward(loss, labels, layout, 1e-6, precision_.loss_scale()));
  if (data_parallel_) data_parallel_->finish();
  if (precision_.unscale_and_check(optimizer_->parameters())) optimizer_->step(*schedule_);
  optimizer_->zero_grad();
  StepResult r{batch.size(), static_cast<double>(loss.loss)};
  r.loss_scale = precision_.step_loss_scale();
  r.update_skipped = precision_.update_skipped();
  return r;
}

double UNet3dWorkload::loss_of(const Tensor& images, const Tensor& labels) {
  const auto math = precision_.policy().math_scope();
  const Tensor logits = nn::cast(model_->forward(as_model_input(images)), DType::f32);
  return nn::dice_ce_loss_forward(logits, as_labels(labels), model_->config().layout).loss;
}

Tensor UNet3dWorkload::logits_ncdhw(const Tensor& patches) {
  Tensor x = patches;
  if (x.dim() == 4) x = x.contiguous().view({x.size(0), 1, x.size(1), x.size(2), x.size(3)});
  Tensor logits = nn::cast(model_->forward(as_model_input(x.to(ctx_.device))), DType::f32);
  if (model_->config().layout == nn::VolumeLayout::ndhwc) logits = nn::permute_copy(logits, {0, 4, 1, 2, 3});
  return logits.to(Device::cpu());
}

EvalResult UNet3dWorkload::evaluate() {
  BH_CHECK_AS(InvalidArgument, data_.index != nullptr,
              "unet3d: no evaluation set (synthetic data has none); use unet3d.data-dir for ttt");
  const auto math = precision_.policy().math_scope();
  const Options& o = ctx_.options;
  model_->train(false);
  kits19::SlidingWindowOptions sw;
  const auto roi = o.get_int_list("roi-size");
  sw.roi = {roi[0], roi[1], roi[2]};
  sw.overlap = o.get_float("overlap");
  sw.batch = o.get_int("eval-window-batch");
  sw.num_classes = static_cast<int>(model_->config().num_classes);
  metrics::DiceScore dice(static_cast<int>(model_->config().num_classes));
  for (std::int64_t c : data_.eval_cases) {
    const kits19::Kits19Case& kase = data_.index->eval().at(static_cast<std::size_t>(c));
    const kits19::SlidingWindowResult r = kits19::sliding_window_inference(
        kase.image, kase.label, sw, [&](const Tensor& patches) { return logits_ncdhw(patches); });
    dice.add(r.classes, r.label);
  }
  model_->train(true);
  return {dice.mean(ctx_.communicator), data_.eval_samples};
}

StepResult UNet3dWorkload::infer_step() {
  const auto math = precision_.policy().math_scope();
  if (!infer_images_.defined()) {
    prepare_batch();
    infer_images_ = as_model_input((*batch_)["image"]);
    batch_.reset();
  }
  model_->train(false);
  const Tensor logits = model_->forward(infer_images_);
  return {logits.size(0), std::numeric_limits<double>::quiet_NaN()};
}

void UNet3dWorkload::synchronize() {
  if (ctx_.device.is_cuda()) benchhost::synchronize(ctx_.device);
}

Hyperparameters UNet3dWorkload::hyperparameters() const { return hyper_; }

void UNet3dWorkload::teardown() {
  batch_.reset();
  data_parallel_.reset();
  data_.train.reset();  // the loader first: its dataset reads the index
  data_ = DataSources{};
  optimizer_.reset();
  model_.reset();
}

}  // namespace benchhost::unet3d

// The resnet50 workload: options, data, optimizer and the train/eval/infer steps around the
// ResNet model of model.hpp. See workload.hpp.

#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "benchhost/comm/data_parallel.hpp"
#include "benchhost/data/idx.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/data/sampler.hpp"
#include "benchhost/data/synthetic.hpp"
#include "benchhost/device.hpp"
#include "benchhost/nn/math_mode.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/serialize.hpp"
#include "benchhost/threading.hpp"
#include "imagenet_folder.hpp"

namespace benchhost::resnet {
namespace fs = std::filesystem;

namespace {

// Note [ResNet options]
// Every knob of the run is an option so that configs/resnet50/*.conf describe complete runs:
// the model shape (full ResNet-50 or a scaled variant), the data source, the optimizer and its
// schedule. Defaults are the MLPerf closed reference (mlperf.conf repeats them explicitly).
const std::vector<OptionSpec>& option_specs() {
  static const std::vector<OptionSpec> specs = {
      {"blocks", "int-list", "3,4,6,3", "bottleneck blocks per stage (ResNet-50: 3,4,6,3)"},
      {"base-width", "int", "64", "stem channels and stage-1 bottleneck width (doubles per stage)"},
      {"num-classes", "int", "1000", "classes of the classifier (1000 or 1001 for ImageNet)"},
      {"small-stem", "bool", "false", "3x3/1 stem conv without max pooling (28x28 inputs)"},
      {"zero-init-residual", "bool", "false", "start each block's last BN gamma at 0"},
      {"layout", "string", "nhwc", "activation layout: nhwc or nchw"},
      {"image-size", "int", "224", "training/eval crop size (synthetic and ImageNet data)"},
      {"dataset", "string", "imagenet", "imagenet (folders in data-dir), fashion-mnist (IDX) or synthetic"},
      {"data-dir", "string", "", "ImageNet root (train/, val/) or the folder of the IDX files"},
      {"batch-size", "int", "256", "per-rank training batch size when -b is not given"},
      {"eval-batch-size", "int", "256", "evaluation batch size"},
      {"loader-threads", "int", "0", "data loader threads (0 = the run's thread count)"},
      {"epochs", "int", "42", "training epochs: the LR schedule length and the time-to-train limit"},
      {"eval-every-epochs", "int", "4", "evaluate every N epochs (MLPerf: 4)"},
      {"target", "float", "0.759", "top-1 accuracy target of time-to-train (MLPerf: 0.759)"},
      {"optimizer", "string", "lars", "lars or sgd"},
      {"base-lr", "float", "10.0", "peak learning rate after warm-up"},
      {"end-lr", "float", "0.0001", "learning rate at the end of the polynomial decay"},
      {"warmup-epochs", "float", "5", "linear warm-up epochs"},
      {"poly-power", "float", "2", "power of the polynomial decay"},
      {"momentum", "float", "0.9", "momentum (LARS and SGD)"},
      {"nesterov", "bool", "false", "Nesterov momentum (SGD only)"},
      {"weight-decay", "float", "0.0002", "weight decay (not applied to BN parameters and biases)"},
      {"lars-eta", "float", "0.001", "LARS trust coefficient"},
      {"lars-epsilon", "float", "0", "LARS epsilon"},
      {"label-smoothing", "float", "0.1", "label smoothing of the cross-entropy"},
      {"bn-momentum", "float", "0.1", "batch norm running-statistics momentum (PyTorch convention)"},
      {"train-samples", "int", "0", "use only the first N training samples (0 = all)"},
      {"eval-samples", "int", "0", "use only the first N evaluation samples (0 = all)"},
      {"init-weights", "string", "", "weights file to start from (nn/serialize.hpp format)"},
      {"save-initial-weights", "string", "", "write the initial weights here (for the PyTorch peer)"},
  };
  return specs;
}

std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& name) {
  std::vector<std::int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(std::remove_if(item.begin(), item.end(), ::isspace), item.end());
    if (item.empty()) continue;
    try {
      std::size_t used = 0;
      out.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (...) {
      BH_THROW(InvalidArgument, "--resnet50.{}: '{}' is not a comma-separated list of integers",
               name, text);
    }
  }
  return out;
}

double get_float(const Options& o, const std::string& name) {
  const std::string v = ResNetWorkload::option(o, name);
  try {
    std::size_t used = 0;
    const double d = std::stod(v, &used);
    if (used == v.size()) return d;
  } catch (...) {
  }
  BH_THROW(InvalidArgument, "--resnet50.{}: '{}' is not a number", name, v);
}

std::int64_t get_int(const Options& o, const std::string& name) {
  const std::string v = ResNetWorkload::option(o, name);
  try {
    std::size_t used = 0;
    const long long i = std::stoll(v, &used);
    if (used == v.size()) return i;
  } catch (...) {
  }
  BH_THROW(InvalidArgument, "--resnet50.{}: '{}' is not an integer", name, v);
}

bool get_bool(const Options& o, const std::string& name) {
  const std::string v = ResNetWorkload::option(o, name);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  BH_THROW(InvalidArgument, "--resnet50.{}: '{}' is not a boolean (true/false)", name, v);
}

/// A source that yields the first `limit` samples of each batch stream: used to cap the
/// evaluation set size without touching the dataset.
std::shared_ptr<const data::Dataset> first_n(std::shared_ptr<const data::Dataset> ds,
                                             std::int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  struct Prefix final : data::Dataset {
    std::shared_ptr<const data::Dataset> inner;
    std::int64_t n;
    std::int64_t size() const override { return n; }
    data::Sample get(const data::SampleContext& ctx) const override { return inner->get(ctx); }
    std::string source(std::int64_t i) const override { return inner->source(i); }
  };
  auto p = std::make_shared<Prefix>();
  p->inner = std::move(ds);
  p->n = n;
  return p;
}

/// Images as the model wants them. Datasets deliver CHW samples ([N, C, H, W]) unless asked for
/// HWC; an NHWC model gets [N, H, W, C] (a view when C is 1, a transposing copy otherwise).
Tensor as_model_input(const Tensor& images, const ResNetConfig& c) {
  BH_CHECK_AS(DataError, images.dim() == 4, "resnet50: expected a batch of images [N, ...], got {}",
              shape_str(images.shape()));
  if (c.layout == nn::ImageLayout::nhwc && images.size(3) != c.in_channels &&
      images.size(1) == c.in_channels) {
    if (c.in_channels == 1)
      return images.contiguous().view({images.size(0), images.size(2), images.size(3), 1});
    return nn::permute_copy(images, {0, 2, 3, 1});  // the permute op: any device
  }
  return images;
}

}  // namespace

std::string ResNetWorkload::option(const Options& options, const std::string& name) {
  if (options.has(name)) return options.values().at(name);
  for (const OptionSpec& s : option_specs())
    if (s.name == name) return s.default_value;
  BH_THROW(InvalidArgument, "resnet50: unknown option '{}'", name);
}

ResNetWorkload::ResNetWorkload() = default;
ResNetWorkload::~ResNetWorkload() = default;

WorkloadInfo ResNetWorkload::describe() {
  WorkloadInfo i;
  i.name = "resnet50";
  i.version = "1.0.0";
  i.benchmark = "resnet";
  i.description =
      "ResNet-50 v1.5 image classification on ImageNet (LARS or SGD); mini: a narrow ResNet on "
      "Fashion-MNIST";
  i.metric_name = "top1_accuracy";
  i.metric_target = 0.759;
  i.higher_is_better = true;
  i.devices = {"cpu", "cuda"};
  i.precisions = {"fp32", "tf32", "bf16", "fp16"};  // as the device allows (check_support)
  i.modes = {"ttt", "train", "infer"};
  i.options = option_specs();
  i.configs = {"mlperf.conf", "sgd.conf", "mini.conf"};
  i.default_config = "mini.conf";  // runs on a fresh machine; --config mlperf for the reference
  return i;
}

std::string ResNetWorkload::check_support(const RunContext& ctx) {
  // The device must exist and the SDK's layers must run this precision on it.
  const std::string why = PrecisionPolicy::layers_support(ctx.precision, ctx.device);
  if (!why.empty()) return "resnet50: " + why;
  if (parse_precision(ctx.precision) == Precision::fp8)
    return "resnet50: precision fp8 drives Linear layers only (Note [fp8 Linear]); the convolutions, "
           "nearly all of ResNet-50's work, would run bf16 and the run would pass bf16 off as fp8; run bf16";
  return {};
}

ResNetConfig ResNetWorkload::model_config(const Options& o) {
  ResNetConfig c;
  c.blocks = parse_int_list(option(o, "blocks"), "blocks");
  c.base_width = get_int(o, "base-width");
  c.num_classes = get_int(o, "num-classes");
  c.small_stem = get_bool(o, "small-stem");
  c.zero_init_last_bn_gamma = get_bool(o, "zero-init-residual");
  c.layout = nn::parse_image_layout(option(o, "layout"));
  c.bn_momentum = get_float(o, "bn-momentum");
  c.in_channels = option(o, "dataset") == "fashion-mnist" ? 1 : 3;  // grey vs RGB
  return c;
}

RunInfo ResNetWorkload::setup(const RunContext& ctx) {
  ctx_ = ctx;
  const Options& o = ctx.options;
  if (ctx.num_threads > 0) set_num_threads(ctx.num_threads);
  const std::string why = check_support(ctx);
  if (!why.empty()) BH_THROW(Unsupported, "{}", why);

  precision_ = TrainingPrecision(ctx.precision, ctx.device);
  const ResNetConfig cfg = model_config(o);
  model_ = std::make_unique<ResNet>(cfg);
  model_->initialize(ctx.seed);
  if (const std::string w = option(o, "init-weights"); !w.empty()) nn::load_weights(*model_, w);
  if (const std::string w = option(o, "save-initial-weights"); !w.empty())
    nn::save_weights(*model_, w);
  model_->to(ctx.device);  // initialised on the CPU: the same weights on every device
  model_->set_precision(precision_.policy());

  batch_size_ = ctx.batch_size > 0 ? ctx.batch_size : get_int(o, "batch-size");
  BH_CHECK_AS(InvalidArgument, batch_size_ >= (ctx.mode == "infer" ? 1 : 2),
              "resnet50: batch size {} is too small for training batch norm (use at least 2)",
              batch_size_);
  label_smoothing_ = static_cast<float>(get_float(o, "label-smoothing"));
  const std::int64_t image_size = get_int(o, "image-size");
  const std::int64_t epochs = get_int(o, "epochs");
  const std::int64_t eval_every_epochs = get_int(o, "eval-every-epochs");
  BH_CHECK_AS(InvalidArgument, epochs > 0 && eval_every_epochs > 0 && image_size >= 8,
              "resnet50: epochs ({}) and eval-every-epochs ({}) must be positive, image-size ({}) "
              ">= 8",
              epochs, eval_every_epochs, image_size);
  const int loader_threads = static_cast<int>(std::max<std::int64_t>(
      1, get_int(o, "loader-threads") > 0 ? get_int(o, "loader-threads") : ctx.num_threads));
  const bool nhwc = cfg.layout == nn::ImageLayout::nhwc;

  // ---- data ----
  const std::string dataset = option(o, "dataset");
  std::int64_t train_size = 0;
  const bool synthetic = ctx.synthetic_data || dataset == "synthetic" || ctx.mode == "infer";
  Shape image_shape = nhwc ? Shape{image_size, image_size, cfg.in_channels}
                           : Shape{cfg.in_channels, image_size, image_size};
  if (synthetic) {
    // Note [Synthetic data]: the same batch every step, like DeepLearningExamples' --data-backend
    // synthetic: measures the model, not the input pipeline.
    const std::int64_t batches = 100;
    train_size = batches * batch_size_ * ctx.world_size;
    train_source_ = std::make_unique<data::SyntheticSource>(
        std::vector<data::FieldSpec>{{"image", image_shape, DType::f32, -2.0, 2.0},
                                     {"label", {}, DType::i64, 0.0, static_cast<double>(cfg.num_classes)}},
        batch_size_, batches, ctx.device, ctx.seed);
    eval_samples_ = 0;
  } else {
    std::shared_ptr<const data::Dataset> train, eval;
    if (dataset == "fashion-mnist") {
      std::string dir = option(o, "data-dir");
      if (dir.empty()) dir = "/usr/share/datasets/fashion-mnist";
      auto idx = [&](const char* images, const char* labels) {
        const fs::path pi = fs::path(dir) / images, pl = fs::path(dir) / labels;
        if (!fs::exists(pi) || !fs::exists(pl))
          BH_THROW(DataError,
                   "resnet50: Fashion-MNIST files {} / {} not found (apt-get install "
                   "dataset-fashion-mnist, or set resnet50.data-dir)",
                   pi.string(), pl.string());
        // Fashion-MNIST pixel mean/std over the training set.
        return std::make_shared<data::IdxClassificationDataset>(pi.string(), pl.string(), 0.2860f,
                                                                0.3530f);
      };
      train = idx("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
      eval = idx("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
    } else if (dataset == "imagenet") {
      const std::string root = option(o, "data-dir");
      BH_CHECK_AS(InvalidArgument, !root.empty(),
                  "resnet50.dataset = imagenet needs resnet50.data-dir (a folder with train/ and "
                  "val/; see datasets/imagenet/imagenet_folder.hpp), or use --synthetic");
      const imagenet::ImageList tr = imagenet::scan_train(root);
      const imagenet::ImageList va = imagenet::scan_val(root, tr.classes);
      BH_CHECK_AS(InvalidArgument, static_cast<std::int64_t>(tr.classes.size()) <= cfg.num_classes,
                  "resnet50: {} has {} classes but the model has resnet50.num-classes = {}", root,
                  tr.classes.size(), cfg.num_classes);
      data::ImageTransform t;
      t.out_height = t.out_width = static_cast<int>(image_size);
      t.layout = nhwc ? data::Layout::hwc : data::Layout::chw;
      t.train = true;
      train = imagenet::make_dataset(tr, t);
      t.train = false;
      t.resize_short = static_cast<int>(std::lround(image_size * 256.0 / 224.0));
      eval = imagenet::make_dataset(va, t);
    } else {
      BH_THROW(InvalidArgument,
               "resnet50.dataset '{}' is not one of imagenet, fashion-mnist, synthetic", dataset);
    }
    train = first_n(train, get_int(o, "train-samples"));
    eval = first_n(eval, get_int(o, "eval-samples"));
    data::SamplerOptions so;
    so.dataset_size = train->size();
    so.rank = ctx.rank;
    so.world_size = ctx.world_size;
    so.shuffle = true;
    so.seed = ctx.seed;
    so.tail = data::TailPolicy::drop;
    data::LoaderOptions lo;
    lo.batch_size = batch_size_;
    lo.num_threads = loader_threads;
    lo.drop_last_batch = true;
    lo.seed = ctx.seed;
    lo.device = ctx.device;  // pinned host memory and a side-stream copy on CUDA
    train_source_ = std::make_unique<data::DataLoader>(train, data::Sampler(so), lo);
    BH_CHECK_AS(InvalidArgument, train_source_->batches_per_epoch() > 0,
                "resnet50: {} training samples give no full batch of {} per rank", train->size(),
                batch_size_);
    so.dataset_size = eval->size();
    so.shuffle = false;
    so.tail = data::TailPolicy::uneven;
    lo.batch_size = get_int(o, "eval-batch-size");
    lo.drop_last_batch = false;
    eval_source_ = std::make_unique<data::DataLoader>(eval, data::Sampler(so), lo);
    eval_samples_ = eval->size();
    train_size = train_source_->batches_per_epoch() * batch_size_ * ctx.world_size;
  }
  steps_per_epoch_ = train_source_->batches_per_epoch();

  // ---- optimizer and schedule ----
  const std::string opt_name = option(o, "optimizer");
  const float base_lr = static_cast<float>(get_float(o, "base-lr"));
  const float end_lr = static_cast<float>(get_float(o, "end-lr"));
  const double warmup_epochs = get_float(o, "warmup-epochs");
  const float power = static_cast<float>(get_float(o, "poly-power"));
  const float momentum = static_cast<float>(get_float(o, "momentum"));
  const float wd = static_cast<float>(get_float(o, "weight-decay"));
  optim::WarmupPolyOptions so;
  so.base_lr = base_lr;
  so.warmup_steps = static_cast<std::int64_t>(std::llround(warmup_epochs * steps_per_epoch_));
  so.total_steps = std::max<std::int64_t>(epochs * steps_per_epoch_, so.warmup_steps + 1);
  so.power = power;
  so.end_lr = end_lr;
  schedule_ = std::make_unique<optim::WarmupPolySchedule>(so);
  const std::int64_t decay_steps = so.total_steps - so.warmup_steps;
  if (opt_name == "lars") {
    optim::LarsOptions lo;
    lo.momentum = momentum;
    lo.weight_decay = wd;
    lo.eta = static_cast<float>(get_float(o, "lars-eta"));
    lo.epsilon = static_cast<float>(get_float(o, "lars-epsilon"));
    optimizer_ = std::make_unique<optim::Lars>(model_->parameters(), lo);
  } else if (opt_name == "sgd") {
    optim::SgdOptions sg;
    sg.momentum = momentum;
    sg.nesterov = get_bool(o, "nesterov");
    sg.weight_decay = wd;
    optimizer_ = std::make_unique<optim::Sgd>(model_->parameters(), sg);
  } else {
    BH_THROW(InvalidArgument, "resnet50.optimizer '{}' is not lars or sgd", opt_name);
  }
  if (ctx.world_size > 1) {
    BH_CHECK_AS(InvalidArgument, ctx.communicator != nullptr,
                "resnet50: world size {} but no communicator", ctx.world_size);
    data_parallel_ = std::make_unique<DataParallel>(model_->parameters(), *ctx.communicator);
  }

  // ---- MLLOG hyperparameters (mlcommons/logging closed_resnet.yaml and resnet_<opt>.yaml) ----
  const std::int64_t global_batch = batch_size_ * ctx.world_size;
  hyper_.clear();
  hyper_.emplace_back("global_batch_size", global_batch);
  hyper_.emplace_back("gradient_accumulation_steps", std::int64_t{1});
  hyper_.emplace_back("opt_name", opt_name);
  // Logged from the option values as given (doubles), not from the float copies above.
  const double base_lr_d = get_float(o, "base-lr"), end_lr_d = get_float(o, "end-lr"),
               power_d = get_float(o, "poly-power"), momentum_d = get_float(o, "momentum"),
               wd_d = get_float(o, "weight-decay");
  hyper_.emplace_back("opt_base_learning_rate", base_lr_d);
  hyper_.emplace_back("opt_learning_rate_warmup_epochs", warmup_epochs);
  hyper_.emplace_back("model_bn_span", batch_size_);
  hyper_.emplace_back("label_smoothing", get_float(o, "label-smoothing"));
  if (opt_name == "lars") {
    hyper_.emplace_back("lars_epsilon", get_float(o, "lars-epsilon"));
    hyper_.emplace_back("lars_opt_weight_decay", wd_d);
    hyper_.emplace_back("lars_opt_base_learning_rate", base_lr_d);
    hyper_.emplace_back("lars_opt_end_learning_rate", end_lr_d);
    hyper_.emplace_back("lars_opt_learning_rate_decay_poly_power", power_d);
    hyper_.emplace_back("lars_opt_learning_rate_decay_steps", decay_steps);
    hyper_.emplace_back("lars_opt_learning_rate_warmup_epochs", warmup_epochs);
    hyper_.emplace_back("lars_opt_momentum", momentum_d);
  } else {
    hyper_.emplace_back("sgd_opt_base_learning_rate", base_lr_d);
    hyper_.emplace_back("sgd_opt_end_learning_rate", end_lr_d);
    hyper_.emplace_back("sgd_opt_learning_rate_decay_poly_power", power_d);
    hyper_.emplace_back("sgd_opt_learning_rate_decay_steps", decay_steps);
    hyper_.emplace_back("sgd_opt_weight_decay", wd_d);
    hyper_.emplace_back("sgd_opt_momentum", momentum_d);
    hyper_.emplace_back("sgd_opt_nesterov", get_bool(o, "nesterov"));
    // resnet_sgd.yaml asks for the step-decay boundaries too; the schedule here is the
    // polynomial one (no boundaries), so the list is empty rather than absent.
    hyper_.emplace_back("opt_learning_rate_decay_boundary_epochs", std::vector<double>{});
  }
  // closed_resnet.yaml: one weights_initialization event per tensor, under MLPerf's names.
  std::vector<std::string> initialized;
  for (auto* p : model_->parameters()) initialized.push_back(ResNet::mlperf_tensor_name(p->name));
  hyper_.emplace_back("weights_initialization", std::move(initialized));

  RunInfo info;
  info.samples_per_epoch = train_size;
  info.eval_every_samples = eval_every_epochs * train_size;
  info.global_batch_size = global_batch;
  info.max_epochs = epochs;
  const double macs = model_->forward_macs_per_image(image_size, image_size);
  info.infer_flops_per_sample = 2.0 * macs;
  info.train_flops_per_sample = 3.0 * 2.0 * macs;
  info.eval_samples = eval_samples_;
  info.metric_target = get_float(o, "target");
  BH_CHECK_AS(InvalidArgument, info.metric_target > 0 && info.metric_target <= 1,
              "resnet50.target {} must be a top-1 accuracy in (0, 1]", info.metric_target);
  model_->train(ctx.mode != "infer");
  return info;
}

void ResNetWorkload::begin_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  train_source_->start_epoch(epoch);
}

void ResNetWorkload::prepare_batch() {
  if (epoch_ < 0) begin_epoch(0);
  batch_ = train_source_->next();
  if (!batch_) {  // the host asked past the end of the epoch (throughput mode): next epoch
    begin_epoch(epoch_ + 1);
    batch_ = train_source_->next();
  }
  BH_CHECK_AS(DataError, batch_.has_value(), "resnet50: the training data source is empty");
}

StepResult ResNetWorkload::train_step() {
  const auto math = precision_.policy().math_scope();
  if (!batch_) prepare_batch();
  const data::Batch batch = std::move(*batch_);
  batch_.reset();
  const Tensor& images = batch["image"];
  const Tensor& labels = batch["label"];
  const Tensor logits = model_->forward(as_model_input(images, model_->config()));
  const nn::CrossEntropyResult ce =
      nn::softmax_cross_entropy_forward(logits, labels, label_smoothing_);
  model_->backward(nn::softmax_cross_entropy_backward(ce, labels, label_smoothing_, -100,
                                                      precision_.loss_scale()));
  if (data_parallel_) data_parallel_->finish();  // every rank then sees the same gradients
  if (precision_.unscale_and_check(optimizer_->parameters())) optimizer_->step(*schedule_);
  optimizer_->zero_grad();
  StepResult r{batch.size(), static_cast<double>(ce.loss)};
  r.loss_scale = precision_.step_loss_scale();
  r.update_skipped = precision_.update_skipped();
  return r;
}

EvalResult ResNetWorkload::evaluate() {
  BH_CHECK_AS(InvalidArgument, eval_source_ != nullptr,
              "resnet50: no evaluation set (synthetic data has none); use a real dataset for ttt");
  const auto math = precision_.policy().math_scope();
  model_->train(false);
  std::int64_t correct = 0, total = 0;
  eval_source_->start_epoch(0);
  while (auto b = eval_source_->next()) {
    const Tensor logits = nn::cast(model_->forward(as_model_input((*b)["image"], model_->config())), DType::f32)
                              .to(Device::cpu())
                              .contiguous();
    const Tensor labels = (*b)["label"].to(Device::cpu()).to(DType::i64);
    const std::int64_t n = logits.size(0), classes = logits.size(1);
    const float* p = logits.data<float>();
    const std::int64_t* l = labels.data<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      const float* row = p + i * classes;
      const std::int64_t arg = std::max_element(row, row + classes) - row;
      correct += arg == l[i] ? 1 : 0;
    }
    total += n;
  }
  model_->train(true);
  if (ctx_.world_size > 1 && ctx_.communicator != nullptr) {
    auto sums = allreduce_values(*ctx_.communicator, std::vector<std::int64_t>{correct, total},
                                 ReduceOp::sum);
    correct = sums[0];
    total = sums[1];
  }
  BH_CHECK_AS(DataError, total > 0, "resnet50: the evaluation set is empty");
  return {static_cast<double>(correct) / static_cast<double>(total), total};
}

StepResult ResNetWorkload::infer_step() {
  const auto math = precision_.policy().math_scope();
  if (!infer_images_.defined()) {
    prepare_batch();
    infer_images_ = as_model_input((*batch_)["image"], model_->config());
    batch_.reset();
  }
  model_->train(false);
  const Tensor logits = model_->forward(infer_images_);
  return {logits.size(0), std::numeric_limits<double>::quiet_NaN()};
}

void ResNetWorkload::synchronize() {
  if (ctx_.device.is_cuda()) benchhost::synchronize(ctx_.device);
}

Hyperparameters ResNetWorkload::hyperparameters() const { return hyper_; }

void ResNetWorkload::teardown() {
  batch_.reset();
  data_parallel_.reset();
  train_source_.reset();
  eval_source_.reset();
  optimizer_.reset();
  model_.reset();
}

}  // namespace benchhost::resnet

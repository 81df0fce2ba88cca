// The classifier example: a complete out-of-tree workload plugin, written against the installed
// SDK headers alone. It trains a multilayer perceptron on Fashion-MNIST (28x28 grey images of
// clothing, 10 classes; Debian's dataset-fashion-mnist package) to a top-1 accuracy target:
//
//   image [N, 1, 28, 28] -> flatten [N, 784] -> Linear(784, hidden) + ReLU -> Linear(hidden, 10)
//   -> softmax cross-entropy against the label; Adam; top-1 accuracy on the 10,000 test images.
//
// It uses the SDK the way a real workload does:
//   options     benchhost/options.hpp             declared once in describe(), read in setup()
//   data        benchhost/data/idx.hpp            the IDX reader: IdxClassificationDataset
//               benchhost/data/pipeline.hpp       training_loader / evaluation_loader: DataLoaders sharded by rank
//               benchhost/data/synthetic.hpp      same-shaped random batches for --synthetic
//   model       benchhost/nn/layers.hpp           Linear layers with explicit backward passes
//   loss        benchhost/nn/ops.hpp              softmax cross-entropy, forward and backward
//   optimizer   benchhost/optim/optimizer.hpp     Adam
//   precision   benchhost/precision.hpp           TrainingPrecision: fp32, bf16, fp16 (the last
//                                                 two emulated on the CPU)
//   ranks       benchhost/comm/data_parallel.hpp  gradients averaged over ctx.communicator
//   metric      benchhost/metrics/accuracy.hpp    top-1 accuracy merged across the ranks
//   threads     benchhost/threading.hpp           set_num_threads(ctx.num_threads)
//
// The host owns the clocks, the epochs, the seeds and the thread count (docs/plugin-abi.md, "What
// the host calls, mode by mode"); the workload builds everything in setup() and then does steps:
//   ttt     begin_epoch(e), then prepare_batch + train_step until the epoch's samples are
//           consumed; evaluate() at each epoch end until the accuracy reaches the target
//   train   begin_epoch(0), then prepare_batch + train_step for -w + -i steps (wrapping around)
//   infer   infer_step() on one batch of images, again and again
//   loader  begin_epoch(0), then prepare_batch alone: the data pipeline's speed
//
// Build and run it (README.md, "Writing a plugin"):
//   cmake -S <prefix>/share/doc/benchhost/examples -B build -DCMAKE_PREFIX_PATH=<prefix>
//   cmake --build build
//   <prefix>/bin/benchhost --plugin-dir build --plugin classifier

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <benchhost/comm/data_parallel.hpp>
#include <benchhost/data/idx.hpp>
#include <benchhost/data/pipeline.hpp>
#include <benchhost/data/sampler.hpp>
#include <benchhost/data/synthetic.hpp>
#include <benchhost/metrics/accuracy.hpp>
#include <benchhost/nn/layers.hpp>
#include <benchhost/nn/ops.hpp>
#include <benchhost/optim/optimizer.hpp>
#include <benchhost/precision.hpp>
#include <benchhost/threading.hpp>
#include <benchhost/workload.hpp>

namespace {

namespace data = benchhost::data;
namespace mlperf = benchhost::mlperf;
namespace nn = benchhost::nn;
namespace optim = benchhost::optim;
using benchhost::Tensor;

constexpr std::int64_t kImagePixels = 28 * 28;
constexpr std::int64_t kClasses = 10;
constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

// ================================================================================================
// Options
// ================================================================================================

// Every knob is declared once, here: the host checks values against these declarations before a
// run starts (--classifier.hidden 0 is refused, naming the option and what it allows), prints
// them in `benchhost info classifier`, and ctx.options returns the value given or the default.
// The defaults are a small configuration: top-1 0.83 after 1 to 3 epochs, seconds on a CPU.
std::vector<benchhost::OptionSpec> option_specs() {
  using benchhost::float_option;
  using benchhost::int_option;
  using benchhost::string_option;
  return {
      string_option("data-dir", kDefaultDataDir,
                    "folder of the four Fashion-MNIST IDX files (apt-get install dataset-fashion-mnist)"),
      int_option("train-samples", 20000, "train on the first N of the 60,000 training images (0 = all)")
          .at_least(0)
          .in("samples"),
      int_option("hidden", 128, "width of the hidden layer").at_least(1).in("units"),
      int_option("batch-size", 64, "per-rank training batch size when -b is not given").at_least(1).in("samples"),
      int_option("eval-batch-size", 1000, "evaluation batch size").at_least(1).in("samples"),
      int_option("loader-threads", 1, "threads of each data loader").at_least(1),
      float_option("lr", 1e-3, "Adam learning rate").above(0).at_most(1),
      float_option("weight-decay", 0, "L2 weight decay (Adam adds it to the gradient)").at_least(0),
      int_option("epochs", 5, "time-to-train gives up after this many epochs").at_least(1).in("epochs"),
      float_option("target", 0.83, "top-1 accuracy target of time-to-train").above(0).at_most(1),
  };
}

// The MLPerf-style rules of this benchmark: the MLLOG keys it promises to log (checked by
// `benchhost check-mllog`). A third-party benchmark has no closed division, only these keys on
// top of the rules every benchmark follows.
mlperf::Rules mlperf_rules() {
  mlperf::Rules r;
  r.runs = 1;                    // a result is one run (`--runs N` still averages N of them)
  r.olympic_drop_each_side = 0;  // so none is dropped, and every run must converge
  r.eval_cadence = "every epoch";
  r.keys = {mlperf::logged_once("opt_name", mlperf::equals(std::string("adam"))),
            mlperf::logged_once("opt_base_learning_rate", mlperf::positive()),
            mlperf::logged_once("global_batch_size", mlperf::positive())};
  return r;
}

// ================================================================================================
// Data
// ================================================================================================

// The first `n` samples of another dataset. The DataLoader's sampler covers a whole dataset, so a
// smaller training set is a smaller dataset: a view that forwards get() to the one it wraps.
// get() is called from the loader's threads at once; this class has no mutable state, so that
// is safe.
class FirstSamples final : public data::Dataset {
 public:
  FirstSamples(std::shared_ptr<const data::Dataset> inner, std::int64_t n) : inner_(std::move(inner)), n_(n) {}
  std::int64_t size() const override { return n_; }
  data::Sample get(const data::SampleContext& ctx) const override {
    data::check_index(ctx.index, n_);
    return inner_->get(ctx);
  }
  using data::Dataset::get;
  std::string source(std::int64_t index) const override { return inner_->source(index); }

 private:
  std::shared_ptr<const data::Dataset> inner_;
  std::int64_t n_;
};

// One IDX image/label file pair of the dataset, read into memory. A missing file is a DataError
// (the run FAILS with this message) that says how to get it.
std::shared_ptr<const data::Dataset> open_idx_pair(const std::string& dir, const char* images, const char* labels) {
  namespace fs = std::filesystem;
  for (const char* name : {images, labels})
    if (!fs::exists(fs::path(dir) / name))
      BH_THROW(DataError,
               "classifier: {} not found: install Debian's Fashion-MNIST with `apt-get install "
               "dataset-fashion-mnist`, or point --classifier.data-dir at a folder holding its four "
               "IDX files",
               (fs::path(dir) / name).string());
  // Samples: "image" f32 [1, 28, 28] = (pixel / 255 - mean) / std, with Fashion-MNIST's mean and
  // standard deviation over the training images, and "label" i64 [].
  auto ds = std::make_shared<data::IdxClassificationDataset>((fs::path(dir) / images).string(),
                                                             (fs::path(dir) / labels).string(), 0.2860f, 0.3530f);
  BH_CHECK_AS(DataError, ds->images().numel() == ds->size() * kImagePixels, "classifier: {} does not hold 28x28 images",
              (fs::path(dir) / images).string());
  return ds;
}

// The run's loaders (data/pipeline.hpp, Note [Training and evaluation loaders]). Training: shuffled
// batches of this rank's shard, from one global order per epoch (the seed is the same on every
// rank); every rank must take the same number of steps (each step's gradient reduction is a
// collective), so the tail that does not divide among the ranks and the last incomplete batch are
// dropped. Evaluation: the test set in order, each rank taking its share; uneven shares are fine,
// because the evaluation's only collective comes after every rank has seen all of its batches.
data::RunLoaderOptions loader_options(const benchhost::RunContext& ctx, int threads) {
  data::RunLoaderOptions o;
  o.rank = ctx.rank;
  o.world_size = ctx.world_size;
  o.seed = ctx.seed;
  o.num_threads = threads;
  o.device = ctx.device;
  return o;
}

std::unique_ptr<data::DataLoader> training_loader(std::shared_ptr<const data::Dataset> train,
                                                  const benchhost::RunContext& ctx, std::int64_t batch_size,
                                                  int threads) {
  const std::int64_t n = train->size();
  auto loader = data::training_loader(std::move(train), batch_size, loader_options(ctx, threads));
  BH_CHECK_AS(InvalidArgument, loader->batches_per_epoch() > 0,
              "classifier: {} training samples over {} ranks give no full batch of {}", n, ctx.world_size, batch_size);
  return loader;
}

std::unique_ptr<data::DataLoader> evaluation_loader(std::shared_ptr<const data::Dataset> test,
                                                    const benchhost::RunContext& ctx, std::int64_t batch_size,
                                                    int threads) {
  return data::evaluation_loader(std::move(test), batch_size, loader_options(ctx, threads));
}

// ================================================================================================
// Model
// ================================================================================================

// The SDK has no autograd tape (nn/module.hpp, Note [Modules and backward]): a model is a Module
// whose forward() keeps what backward() needs and whose backward() calls its layers' backward
// passes in reverse order. Registering the layers as children makes parameters(), to(),
// set_precision() and train() reach them. (A plain chain of layers is nn::Sequential; this model
// is written out because its input needs a reshape first.)
class Mlp final : public nn::Module {
 public:
  // Each Linear draws its initial weights from its own stream of the run's seed.
  Mlp(std::int64_t hidden, std::uint64_t seed)
      : hidden_(register_module("hidden", std::make_unique<nn::Linear>(kImagePixels, hidden, /*bias=*/true,
                                                                        nn::Activation::relu, seed))),
        output_(register_module("output", std::make_unique<nn::Linear>(hidden, kClasses, /*bias=*/true,
                                                                        nn::Activation::none, seed + 1))) {
    hidden_.set_input_grad(false);  // nothing needs the gradient of the images: skip that product
  }

  // images [N, 1, 28, 28] (a contiguous batch) -> logits [N, 10].
  Tensor forward(const Tensor& images) {
    const Tensor pixels = images.view({images.size(0), kImagePixels});
    return output_.forward(hidden_.forward(pixels));
  }

  // dlogits [N, 10] -> accumulates every parameter's gradient. Each Linear calls
  // mark_grad_ready() on its parameters as it finishes, which lets DataParallel start reducing
  // the output layer's gradients while the hidden layer's backward still runs.
  void backward(const Tensor& dlogits) {
    // Each Linear::backward returns the gradient with respect to its input; the first layer's
    // would be the images', which set_input_grad(false) skipped (it returns an empty tensor).
    hidden_.backward(output_.backward(dlogits));
  }

  // Multiply-adds of one image's forward pass: the two weight products.
  std::int64_t macs_per_sample() const {
    return hidden_.in_features() * hidden_.out_features() + output_.in_features() * output_.out_features();
  }
  // ... and of its training step: forward, each layer's weight gradient (the same size again) and
  // the output layer's input gradient; the hidden layer skips its input gradient (the images').
  std::int64_t train_macs_per_sample() const {
    const std::int64_t hidden = hidden_.in_features() * hidden_.out_features();
    const std::int64_t output = output_.in_features() * output_.out_features();
    return 2 * hidden + 3 * output;
  }

 private:
  nn::Linear& hidden_;
  nn::Linear& output_;
};

// ================================================================================================
// The workload
// ================================================================================================

class ClassifierWorkload final : public benchhost::Workload {
 public:
  // Everything the host and the tools need to know without running anything: `benchhost list`,
  // `info`, --help, the option checks and the MLLOG checker read it.
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "classifier";
    i.version = "1.0.0";
    i.benchmark = "classifier";  // logged as submission_benchmark; a third-party name
    i.description = "out-of-tree example: an MLP classifier on Fashion-MNIST (SDK loader, layers, Adam)";
    i.metric_name = "top1_accuracy";
    i.metric_target = 0.83;
    i.higher_is_better = true;
    i.devices = {"cpu"};
    i.precisions = {"fp32", "bf16", "fp16"};
    i.modes = {"ttt", "train", "infer", "loader"};
    i.options = option_specs();
    i.mlperf = mlperf_rules();
    return i;
  }

  // Asked before anything is built: a run this workload cannot do is SKIPPED with the reason
  // instead of failing halfway. On the CPU, bf16 and fp16 are emulated and tf32/fp8 are refused.
  static std::string check_support(const benchhost::RunContext& ctx) {
    if (!ctx.device.is_cpu()) return "classifier: the example runs on the CPU only";
    const std::string why = benchhost::PrecisionPolicy::layers_support(ctx.precision, ctx.device);
    return why.empty() ? std::string() : "classifier: " + why;
  }

  // Untimed: build everything the steps need, and tell the host the run's shape.
  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override {
    ctx_ = ctx;
    const benchhost::Options& o = ctx.options;
    // The host chose the thread count (--threads, divided among the ranks of a node); the
    // plugin applies it to the SDK's ops.
    benchhost::set_num_threads(ctx.num_threads);
    batch_size_ = ctx.batch_size > 0 ? ctx.batch_size : o.get_int("batch-size");
    lr_ = static_cast<float>(o.get_float("lr"));

    // The model: built and initialised from the run's seed on the CPU, then moved to the device
    // and set to follow the precision policy (master weights stay fp32).
    precision_ = benchhost::TrainingPrecision(ctx.precision, ctx.device);
    model_ = std::make_unique<Mlp>(o.get_int("hidden"), ctx.seed);
    model_->to(ctx.device);
    model_->set_precision(precision_.policy());

    build_data();
    optim::AdamOptions ao;
    ao.weight_decay = static_cast<float>(o.get_float("weight-decay"));
    optimizer_ = std::make_unique<optim::Adam>(model_->parameters(), ao);
    // With several ranks, DataParallel broadcasts rank 0's initial weights and averages every
    // step's gradients over the ranks.
    if (ctx.world_size > 1) {
      BH_CHECK_AS(InvalidArgument, ctx.communicator != nullptr, "classifier: {} ranks but no communicator",
                  ctx.world_size);
      data_parallel_ = std::make_unique<benchhost::DataParallel>(model_->parameters(), *ctx.communicator);
    }
    // Inference times the model alone: one batch, loaded now, is run again and again.
    if (ctx.mode == "infer") {
      model_->train(false);
      prepare_batch();
      infer_images_ = (*batch_)["image"];
      batch_.reset();
    }

    benchhost::RunInfo info;
    info.samples_per_epoch = samples_per_epoch_;
    info.eval_every_samples = 0;  // evaluate at the end of every epoch
    info.global_batch_size = batch_size_ * ctx.world_size;
    info.max_epochs = o.get_int("epochs");
    info.infer_flops_per_sample = 2.0 * static_cast<double>(model_->macs_per_sample());
    info.train_flops_per_sample = 2.0 * static_cast<double>(model_->train_macs_per_sample());
    info.eval_samples = eval_samples_;
    info.metric_target = o.get_float("target");
    return info;
  }

  // The host starts each epoch; the loader reshuffles from (seed, epoch).
  void begin_epoch(std::int64_t epoch) override {
    epoch_ = epoch;
    train_loader_->start_epoch(epoch);
  }

  // Timed as data wait: take the next batch from the loader. In throughput modes the host stays in
  // epoch 0 for as many steps as it likes, so a loader that runs out starts its next epoch.
  void prepare_batch() override {
    if (epoch_ < 0) begin_epoch(0);
    batch_ = train_loader_->next();
    if (!batch_) {
      begin_epoch(epoch_ + 1);
      batch_ = train_loader_->next();
    }
    BH_CHECK_AS(DataError, batch_.has_value(), "classifier: the training loader delivered no batch");
  }

  // One optimizer step on this rank's batch.
  benchhost::StepResult train_step() override {
    if (!batch_) prepare_batch();
    const data::Batch batch = std::move(*batch_);
    batch_.reset();
    const Tensor& labels = batch["label"];
    const auto math = precision_.policy().math_scope();  // the policy's arithmetic for this thread

    const Tensor logits = model_->forward(batch["image"]);
    const nn::CrossEntropyResult ce = nn::softmax_cross_entropy_forward(logits, labels);
    // Seed backward with the loss scale (1 unless fp16's dynamic loss scaling is on).
    model_->backward(nn::softmax_cross_entropy_backward(ce, labels, 0.0f, -100, precision_.loss_scale()));
    if (data_parallel_) data_parallel_->finish();  // every rank now holds the mean gradient
    // Under fp16: unscale, and skip the update if a gradient overflowed. Otherwise always true.
    if (precision_.unscale_and_check(optimizer_->parameters())) optimizer_->step(lr_);
    optimizer_->zero_grad();

    benchhost::StepResult r{batch.size(), static_cast<double>(ce.loss)};
    r.loss_scale = precision_.step_loss_scale();
    r.update_skipped = precision_.update_skipped();
    return r;
  }

  // Top-1 accuracy on the whole test set: each rank counts its share, and compute() sums the
  // counts over the ranks (a collective every rank calls), so every rank returns the same value.
  benchhost::EvalResult evaluate() override {
    BH_CHECK_AS(InvalidArgument, eval_loader_ != nullptr,
                "classifier: synthetic data has no test set to evaluate; run ttt on the real data");
    const auto math = precision_.policy().math_scope();
    model_->train(false);
    benchhost::metrics::TopKAccuracy top1(1);
    eval_loader_->start_epoch(0);
    while (std::optional<data::Batch> b = eval_loader_->next()) top1.add(model_->forward((*b)["image"]), (*b)["label"]);
    model_->train(true);
    const std::int64_t counted = top1.total_counted(ctx_.communicator);
    BH_CHECK_AS(DataError, counted > 0, "classifier: the test set is empty");
    return {top1.compute(ctx_.communicator), counted};
  }

  // Forward only, on the batch loaded in setup(). The loss is not computed (NaN).
  benchhost::StepResult infer_step() override {
    const auto math = precision_.policy().math_scope();
    const Tensor logits = model_->forward(infer_images_);
    return {logits.size(0), std::numeric_limits<double>::quiet_NaN()};
  }

  // MLLOG keys, logged by the host between init_start and init_stop.
  benchhost::Hyperparameters hyperparameters() const override {
    return {{"global_batch_size", batch_size_ * ctx_.world_size},
            {"opt_name", std::string("adam")},
            {"opt_base_learning_rate", ctx_.options.get_float("lr")},
            {"opt_weight_decay", ctx_.options.get_float("weight-decay")}};
  }

  // Stop the loaders' threads and free the model before the host unloads the plugin.
  void teardown() override {
    batch_.reset();
    data_parallel_.reset();
    train_loader_.reset();
    eval_loader_.reset();
    optimizer_.reset();
    model_.reset();
  }

 private:
  // The training batches (and the test set): Fashion-MNIST behind DataLoaders, or with
  // --synthetic random images of the same shapes, generated once, to time the model alone.
  void build_data() {
    const benchhost::Options& o = ctx_.options;
    if (ctx_.synthetic_data) {
      const std::int64_t batches = 100;
      train_loader_ = std::make_unique<data::SyntheticSource>(
          std::vector<data::FieldSpec>{{"image", {1, 28, 28}, benchhost::DType::f32, -1.0, 3.0},
                                       {"label", {}, benchhost::DType::i64, 0.0, static_cast<double>(kClasses)}},
          batch_size_, batches, ctx_.device, ctx_.seed);
      samples_per_epoch_ = batches * batch_size_ * ctx_.world_size;
      return;
    }
    const std::string dir = o.get_string("data-dir");
    std::shared_ptr<const data::Dataset> train =
        open_idx_pair(dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
    std::shared_ptr<const data::Dataset> test =
        open_idx_pair(dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
    const std::int64_t n = o.get_int("train-samples");
    if (n > 0 && n < train->size()) train = std::make_shared<FirstSamples>(train, n);

    const int threads = static_cast<int>(o.get_int("loader-threads"));
    auto loader = training_loader(train, ctx_, batch_size_, threads);
    // An epoch is what the loaders of all ranks deliver together: the host counts samples over
    // the ranks and calls begin_epoch() when this many were trained.
    samples_per_epoch_ = loader->batches_per_epoch() * batch_size_ * ctx_.world_size;
    train_loader_ = std::move(loader);
    eval_loader_ = evaluation_loader(test, ctx_, o.get_int("eval-batch-size"), threads);
    eval_samples_ = test->size();
  }

  benchhost::RunContext ctx_;
  benchhost::TrainingPrecision precision_;
  std::unique_ptr<Mlp> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<benchhost::DataParallel> data_parallel_;
  std::unique_ptr<data::BatchSource> train_loader_;  // a DataLoader, or synthetic batches
  std::unique_ptr<data::BatchSource> eval_loader_;   // null with synthetic data
  std::optional<data::Batch> batch_;                 // prepared by prepare_batch, used by train_step
  Tensor infer_images_;
  std::int64_t epoch_ = -1;
  std::int64_t batch_size_ = 0;         // per rank
  std::int64_t samples_per_epoch_ = 0;  // over all ranks
  std::int64_t eval_samples_ = 0;
  float lr_ = 0;
};

}  // namespace

BENCHHOST_PLUGIN(ClassifierWorkload)

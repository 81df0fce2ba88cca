// A tiny but real time-to-train workload: linear least squares trained by mini-batch SGD on a
// planted problem y = x . w_true + noise. The metric is the held-out mean squared error (lower is
// better); the target sits just above the noise floor, so the run converges after a predictable
// number of evaluations and a broken optimiser (or too high a learning rate, which diverges to
// Inf/NaN) never reaches it. Plain C++ with a SplitMix64 generator: bit-for-bit deterministic.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "benchhost/workload.hpp"

namespace {

struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

class ToyWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "toy";
    i.version = "1.0.0";
    i.description = "least squares by mini-batch SGD on a planted linear problem (host tests)";
    i.metric_name = "mse";
    i.metric_target = 0.002;
    i.higher_is_better = false;
    i.modes = {"ttt", "train", "infer"};
    // Note [Options declared once] (options.hpp): the ranges below are all the checking there is;
    // the host refuses a value outside them before setup() runs.
    using benchhost::float_option;
    using benchhost::int_option;
    i.options = {int_option("features", 8, "input features").range(1, 4096),
                 int_option("train-samples", 512, "training samples (one epoch)").range(1, 1 << 22).in("samples"),
                 int_option("eval-samples", 256, "held-out samples").range(1, 1 << 22).in("samples"),
                 int_option("batch-size", 16, "samples per step when -b is not given").at_least(1).in("samples"),
                 float_option("lr", 0.02, "SGD learning rate").above(0),
                 float_option("noise", 0.03, "standard deviation of the label noise").at_least(0),
                 int_option("eval-every", 128, "evaluate every N training samples (0 = each epoch)").at_least(0).in("samples"),
                 int_option("eval-start", 0, "no evaluation before N training samples").at_least(0).in("samples"),
                 int_option("mllog-train-samples", 0, "MLLOG train_samples (0 = one epoch's)").at_least(0).in("samples"),
                 int_option("max-epochs", 20, "give up (aborted) after this many epochs").at_least(1).in("epochs"),
                 int_option("data-seed", 1234, "seed of the planted problem")};
    return i;
  }

  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override {
    const auto& o = ctx.options;
    d_ = o.get_int("features");
    const std::int64_t n_train = o.get_int("train-samples"), n_eval = o.get_int("eval-samples");
    batch_ = ctx.batch_size > 0 ? ctx.batch_size : o.get_int("batch-size");
    lr_ = o.get_float("lr");
    BH_CHECK_AS(InvalidArgument, batch_ > 0 && batch_ <= n_train, "batch size {} must be in [1, train-samples]", batch_);
    SplitMix64 data{static_cast<std::uint64_t>(o.get_int("data-seed"))};
    std::vector<double> w_true(d_);
    for (auto& v : w_true) v = data.normal();
    const double noise = o.get_float("noise");
    auto make = [&](std::int64_t n, std::vector<double>& x, std::vector<double>& y) {
      x.resize(n * d_);
      y.resize(n);
      for (std::int64_t i = 0; i < n; ++i) {
        double dot = 0;
        for (std::int64_t j = 0; j < d_; ++j) dot += (x[i * d_ + j] = data.normal()) * w_true[j];
        y[i] = dot + noise * data.normal();
      }
    };
    make(n_train, x_train_, y_train_);
    make(n_eval, x_eval_, y_eval_);
    w_.assign(d_, 0.0);
    grad_.assign(d_, 0.0);
    order_.resize(n_train);
    std::iota(order_.begin(), order_.end(), 0);
    rng_ = SplitMix64{ctx.seed};
    cursor_ = 0;
    benchhost::RunInfo r;
    r.samples_per_epoch = n_train;
    r.eval_every_samples = o.get_int("eval-every");
    r.eval_start_samples = o.get_int("eval-start");
    r.train_samples = o.get_int("mllog-train-samples");
    r.global_batch_size = batch_;
    r.max_epochs = o.get_int("max-epochs");
    r.train_flops_per_sample = 4.0 * static_cast<double>(d_);  // forward dot + gradient
    r.infer_flops_per_sample = 2.0 * static_cast<double>(d_);
    r.eval_samples = n_eval;
    hyper_ = {{"global_batch_size", batch_}, {"opt_name", std::string("sgd")}, {"opt_base_learning_rate", lr_}};
    return r;
  }

  void begin_epoch(std::int64_t) override {
    // Deterministic Fisher-Yates shuffle from the run's seed.
    std::iota(order_.begin(), order_.end(), 0);
    for (std::size_t i = order_.size() - 1; i > 0; --i) std::swap(order_[i], order_[rng_.next() % (i + 1)]);
    cursor_ = 0;
    prepared_ = false;
  }

  // The data step: gather the next batch's rows in sampler order (what a loader does).
  void prepare_batch() override {
    const std::int64_t n = static_cast<std::int64_t>(order_.size());
    batch_x_.resize(static_cast<std::size_t>(batch_ * d_));
    batch_y_.resize(static_cast<std::size_t>(batch_));
    for (std::int64_t b = 0; b < batch_; ++b) {
      const std::int64_t i = order_[cursor_];
      cursor_ = (cursor_ + 1) % n;
      std::copy(&x_train_[i * d_], &x_train_[i * d_] + d_, &batch_x_[b * d_]);
      batch_y_[b] = y_train_[i];
    }
    prepared_ = true;
  }

  benchhost::StepResult train_step() override {
    if (!prepared_) prepare_batch();
    prepared_ = false;
    std::fill(grad_.begin(), grad_.end(), 0.0);
    double loss = 0;
    for (std::int64_t b = 0; b < batch_; ++b) {
      const double* x = &batch_x_[b * d_];
      double err = -batch_y_[b];
      for (std::int64_t j = 0; j < d_; ++j) err += x[j] * w_[j];
      loss += err * err;
      for (std::int64_t j = 0; j < d_; ++j) grad_[j] += 2.0 * err * x[j];
    }
    const double scale = lr_ / static_cast<double>(batch_);
    for (std::int64_t j = 0; j < d_; ++j) w_[j] -= scale * grad_[j];
    return {batch_, loss / static_cast<double>(batch_)};
  }

  benchhost::EvalResult evaluate() override {
    const std::int64_t n = static_cast<std::int64_t>(y_eval_.size());
    double sse = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      double err = -y_eval_[i];
      for (std::int64_t j = 0; j < d_; ++j) err += x_eval_[i * d_ + j] * w_[j];
      sse += err * err;
    }
    return {sse / static_cast<double>(n), n};
  }

  benchhost::StepResult infer_step() override {
    double sink = 0;
    for (std::int64_t b = 0; b < batch_; ++b) {
      const std::int64_t i = b % static_cast<std::int64_t>(y_eval_.size());
      for (std::int64_t j = 0; j < d_; ++j) sink += x_eval_[i * d_ + j] * w_[j];
    }
    sink_ += sink;
    return {batch_, std::numeric_limits<double>::quiet_NaN()};
  }

  benchhost::Hyperparameters hyperparameters() const override { return hyper_; }

 private:
  std::int64_t d_ = 0, batch_ = 1, cursor_ = 0;
  double lr_ = 0, sink_ = 0;
  std::vector<double> x_train_, y_train_, x_eval_, y_eval_, w_, grad_;
  std::vector<double> batch_x_, batch_y_;  // the prepared batch
  bool prepared_ = false;
  std::vector<std::int64_t> order_;
  SplitMix64 rng_{0};
  benchhost::Hyperparameters hyper_;
};

}  // namespace

BENCHHOST_PLUGIN(ToyWorkload)

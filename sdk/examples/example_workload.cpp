// An example workload plugin built outside the benchhost tree: it estimates the mean of a
// planted Gaussian by stochastic gradient descent on the squared error, evaluated as the absolute
// error of the estimate. Everything a plugin needs is in the installed SDK headers: describe() the
// workload, set it up from the host's context, and do steps; the host times everything.
#include <cmath>
#include <cstdint>

#include <benchhost/workload.hpp>

namespace {

class ExampleWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "example";
    i.version = "0.1.0";
    i.description = "out-of-tree example: estimate a mean by SGD";
    i.metric_name = "abs_error";
    i.metric_target = 0.05;
    i.higher_is_better = false;
    i.modes = {"ttt", "train"};
    // Declared once (options.hpp): the host checks values against these ranges, --help and
    // `benchhost info example` print them, and ctx.options returns the defaults below.
    i.options = {benchhost::float_option("mean", 3.0, "the mean to recover"),
                 benchhost::float_option("lr", 0.05, "SGD learning rate").above(0).at_most(1),
                 benchhost::int_option("samples-per-epoch", 1024, "samples in one epoch").at_least(1).in("samples")};
    return i;
  }

  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override {
    mean_ = ctx.options.get_float("mean");
    lr_ = ctx.options.get_float("lr");
    batch_ = ctx.batch_size > 0 ? ctx.batch_size : 32;
    state_ = ctx.seed * 2654435761u + 1;
    benchhost::RunInfo r;
    r.samples_per_epoch = ctx.options.get_int("samples-per-epoch");
    r.global_batch_size = batch_;
    r.max_epochs = 10;
    r.train_flops_per_sample = 3;
    return r;
  }

  benchhost::StepResult train_step() override {
    double grad = 0, loss = 0;
    for (std::int64_t i = 0; i < batch_; ++i) {
      const double x = mean_ + gaussian();
      grad += 2 * (estimate_ - x);
      loss += (estimate_ - x) * (estimate_ - x);
    }
    estimate_ -= lr_ * grad / static_cast<double>(batch_);
    return {batch_, loss / static_cast<double>(batch_)};
  }

  benchhost::EvalResult evaluate() override { return {std::fabs(estimate_ - mean_), 1}; }

  benchhost::Hyperparameters hyperparameters() const override {
    return {{"opt_base_learning_rate", lr_}, {"global_batch_size", batch_}};
  }

 private:
  double uniform() {  // xorshift64*
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<double>((state_ * 2685821657736338717ull) >> 11) * 0x1.0p-53;
  }
  double gaussian() { return std::sqrt(-2 * std::log(1 - uniform())) * std::cos(6.283185307179586 * uniform()); }

  double mean_ = 0, lr_ = 0, estimate_ = 0;
  std::int64_t batch_ = 32;
  std::uint64_t state_ = 1;
};

}  // namespace

BENCHHOST_PLUGIN(ExampleWorkload)

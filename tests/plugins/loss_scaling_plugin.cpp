// Reports fp16 dynamic loss-scaling outcomes (ABI 1.2 bh_step_result.loss_scale, update_skipped)
// on chosen steps, so the host's counting and every reporter can be checked exactly. No model: a
// step "overflows" when its 1-based number since setup (warm-up steps included) is listed in
// --loss_scaling.overflow-steps, or on every step with --loss_scaling.overflow-every-step. The
// scaler follows the SDK's DynamicLossScaler rules: an overflow skips the update and halves the
// scale (not below 1); growth-interval clean steps in a row double it (not above 2^24). Under any
// precision but fp16 nothing is scaled and nothing is skipped, like a real workload.
// The metric (time-to-train) is the number of updates applied, so skipped steps delay convergence.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "benchhost/workload.hpp"

namespace {

class LossScalingWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "loss_scaling";
    i.version = "1.0.0";
    i.description = "reports fp16 loss-scaling outcomes on chosen steps (host tests)";
    i.metric_name = "updates_applied";
    i.metric_target = 10;
    i.higher_is_better = true;
    i.precisions = {"fp32", "fp16"};
    i.modes = {"ttt", "train"};
    i.options = {{"batch-size", "int", "4", "samples per step when -b is not given", false},
                 {"steps-per-epoch", "int", "8", "training steps in one epoch (evaluation after each)", false},
                 {"max-epochs", "int", "4", "give up (aborted) after this many epochs", false},
                 {"overflow-steps", "int-list", "", "1-based steps since setup whose gradients overflow", false},
                 {"overflow-every-step", "bool", "false", "every step's gradients overflow", false},
                 {"initial-scale", "float", "65536", "loss scale before the first step", false},
                 {"growth-interval", "int", "2000", "clean steps in a row before the scale doubles", false}};
    return i;
  }

  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override {
    const auto& o = ctx.options;
    batch_ = ctx.batch_size > 0 ? ctx.batch_size : o.get_int("batch-size");
    const std::int64_t steps_per_epoch = o.get_int("steps-per-epoch");
    BH_CHECK_AS(InvalidArgument, batch_ > 0, "batch size {} must be positive", batch_);
    BH_CHECK_AS(InvalidArgument, steps_per_epoch > 0, "--loss_scaling.steps-per-epoch {} must be positive", steps_per_epoch);
    scaling_ = ctx.precision == "fp16";
    if (o.has("overflow-steps")) overflow_steps_ = o.get_int_list("overflow-steps");  // no default: none
    overflow_every_step_ = o.get_bool("overflow-every-step");
    scale_ = o.get_float("initial-scale");
    growth_interval_ = o.get_int("growth-interval");
    BH_CHECK_AS(InvalidArgument, scale_ >= 1, "--loss_scaling.initial-scale {} must be at least 1", scale_);
    BH_CHECK_AS(InvalidArgument, growth_interval_ > 0, "--loss_scaling.growth-interval {} must be positive", growth_interval_);
    benchhost::RunInfo r;
    r.samples_per_epoch = steps_per_epoch * batch_ * ctx.world_size;
    r.eval_every_samples = 0;  // after each epoch
    r.global_batch_size = batch_ * ctx.world_size;
    r.max_epochs = o.get_int("max-epochs");
    return r;
  }

  benchhost::StepResult train_step() override {
    ++step_;
    benchhost::StepResult out{batch_, 1.0 / static_cast<double>(step_)};
    if (!scaling_) {
      ++updates_applied_;
      return out;
    }
    const bool overflow = overflow_every_step_ ||
                          std::find(overflow_steps_.begin(), overflow_steps_.end(), step_) != overflow_steps_.end();
    if (overflow) {
      scale_ = std::max(1.0, scale_ * 0.5);
      clean_in_a_row_ = 0;
    } else {
      ++updates_applied_;
      if (++clean_in_a_row_ == growth_interval_) {
        scale_ = std::min(16777216.0, scale_ * 2.0);
        clean_in_a_row_ = 0;
      }
    }
    out.loss_scale = scale_;
    out.update_skipped = overflow;
    return out;
  }

  benchhost::EvalResult evaluate() override { return {static_cast<double>(updates_applied_), 1}; }

 private:
  std::int64_t batch_ = 1, step_ = 0, updates_applied_ = 0, growth_interval_ = 1, clean_in_a_row_ = 0;
  bool scaling_ = false, overflow_every_step_ = false;
  double scale_ = 1;
  std::vector<std::int64_t> overflow_steps_;
};

}  // namespace

BENCHHOST_PLUGIN(LossScalingWorkload)

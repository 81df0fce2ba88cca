// Runs normally, except that at batch size --throw_midrun.fail-batch its train_step throws
// OutOfMemory at step --throw_midrun.fail-step: earlier sweep points must stay in the report.
#include "benchhost/workload.hpp"

namespace {

class ThrowMidrunWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "throw_midrun";
    i.version = "1.0.0";
    i.description = "throws OutOfMemory from train_step at a given batch size and step";
    i.modes = {"train"};
    i.options = {{"fail-batch", "int", "4", "batch size at which train_step fails", false},
                 {"fail-step", "int", "3", "1-based step (warm-up included) that fails", false}};
    return i;
  }
  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override {
    batch_ = ctx.batch_size > 0 ? ctx.batch_size : 1;
    fail_ = batch_ == ctx.options.get_int("fail-batch");
    fail_step_ = ctx.options.get_int("fail-step");
    benchhost::RunInfo r;
    r.global_batch_size = batch_;
    r.samples_per_epoch = batch_ * 100;
    return r;
  }
  benchhost::StepResult train_step() override {
    ++step_;
    if (fail_ && step_ == fail_step_) {
      const std::size_t bytes = static_cast<std::size_t>(batch_) << 30;
      throw benchhost::OutOfMemory(fmt::format("cannot allocate {} bytes for activations at step {}", bytes, step_),
                                   bytes, __FILE__, __LINE__);
    }
    return {batch_, 1.0 / static_cast<double>(step_)};
  }

 private:
  std::int64_t batch_ = 1, step_ = 0, fail_step_ = 0;
  bool fail_ = false;
};

}  // namespace

BENCHHOST_PLUGIN(ThrowMidrunWorkload)

// The null workload: every slot returns at once. A throughput run of it measures the host's own
// per-step cost (two slot calls through the C ABI plus three clock reads), like LoadGen's null SUT.
#include "benchhost/workload.hpp"

namespace {

class NullWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "null";
    i.version = "1.0.0";
    i.description = "does no work: measures the host's per-step overhead";
    i.modes = {"train", "infer"};
    i.options = {{"samples-per-step", "int", "0", "samples reported per step (0 = the batch size)", false}};
    return i;
  }
  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override {
    samples_ = ctx.options.get_int("samples-per-step");
    if (samples_ <= 0) samples_ = ctx.batch_size > 0 ? ctx.batch_size : 1;
    benchhost::RunInfo r;
    r.samples_per_epoch = samples_ * 1000;
    r.global_batch_size = samples_ * ctx.world_size;
    return r;
  }
  benchhost::StepResult train_step() override { return {samples_, 0.0}; }
  benchhost::StepResult infer_step() override { return {samples_, 0.0}; }

 private:
  std::int64_t samples_ = 1;
};

}  // namespace

BENCHHOST_PLUGIN(NullWorkload)

// The null workload: every slot returns at once. A throughput run of it measures the host's own
// per-step cost (two slot calls through the C ABI plus three clock reads), like LoadGen's null SUT.
// With --null.allreduce N, each training step sums N floats over the ranks, as data-parallel
// training does once per step: the multi-rank interrupt tests stop a job inside that collective.
// With --null.step-us U, each training and inference step sleeps U microseconds: a step time that
// does not depend on how busy the CPUs are, so `benchhost compare` tests can plant a slowdown.
#include <chrono>
#include <thread>

#include "benchhost/comm/communicator.hpp"
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
    i.options = {{"samples-per-step", "int", "0", "samples reported per step (0 = the batch size)", false},
                 benchhost::int_option("allreduce", 0, "floats summed over the ranks in each training step").range(0, 1 << 24),
                 benchhost::int_option("step-us", 0, "time each step sleeps").range(0, 10000000).in("microseconds")};
    return i;
  }
  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override {
    samples_ = ctx.options.get_int("samples-per-step");
    if (samples_ <= 0) samples_ = ctx.batch_size > 0 ? ctx.batch_size : 1;
    comm_ = ctx.communicator;
    step_ = std::chrono::microseconds(ctx.options.get_int("step-us"));
    if (const std::int64_t n = ctx.options.get_int("allreduce"); n > 0 && comm_)
      buffer_ = benchhost::Tensor::full({n}, 1.0, benchhost::DType::f32);
    benchhost::RunInfo r;
    r.samples_per_epoch = samples_ * 1000;
    r.global_batch_size = samples_ * ctx.world_size;
    return r;
  }
  benchhost::StepResult train_step() override {
    if (step_.count() > 0) std::this_thread::sleep_for(step_);
    if (buffer_.defined()) comm_->allreduce(buffer_, benchhost::ReduceOp::sum).wait();
    return {samples_, 0.0};
  }
  benchhost::StepResult infer_step() override {
    if (step_.count() > 0) std::this_thread::sleep_for(step_);
    return {samples_, 0.0};
  }

 private:
  std::int64_t samples_ = 1;
  std::chrono::microseconds step_{0};
  benchhost::Communicator* comm_ = nullptr;
  benchhost::Tensor buffer_;
};

}  // namespace

BENCHHOST_PLUGIN(NullWorkload)

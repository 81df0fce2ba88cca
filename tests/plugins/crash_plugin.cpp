// Runs normally, except that at batch size --crash.fail-batch (and, in time to train, in the run
// whose seed is --crash.fail-seed) the step --crash.fail-step takes the process down the way a
// broken native library does: a real invalid memory access, abort(), a step that never returns,
// or exit(). The host must record that point and go on with the next (Note [Crash isolation]).
// In time to train the metric is the step count, evaluated at the end of each 4-step epoch: with
// --crash.target 8 the first evaluation misses, so a failure in the second epoch ends a run that
// has one evaluation to keep (Note [What an unfinished run keeps]).
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "benchhost/workload.hpp"

namespace {

class CrashWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "crash";
    i.version = "1.0.0";
    i.description = "crashes, aborts, hangs or exits in a chosen step (host crash-isolation tests)";
    i.metric_name = "steps";
    i.metric_target = 4;  // one epoch of 4 steps converges
    i.higher_is_better = true;
    i.modes = {"train", "infer", "ttt"};
    i.options = {benchhost::choice_option("how", "segv", {"segv", "abort", "hang", "exit"},
                                          "segv (invalid memory access) | abort | hang | exit"),
                 {"fail-batch", "int", "16", "batch size whose step fails (0 = every batch size)", false},
                 {"fail-seed", "int", "0", "only the run with this seed fails (0 = every run)", false},
                 {"fail-step", "int", "3", "1-based step (warm-up included) that fails", false},
                 {"target", "int", "4", "time to train: steps to reach (4 steps an epoch; 8: the first evaluation misses)", false}};
    return i;
  }
  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override {
    const auto& o = ctx.options;
    batch_ = ctx.batch_size > 0 ? ctx.batch_size : 4;
    const std::int64_t fail_batch = o.get_int("fail-batch"), fail_seed = o.get_int("fail-seed");
    fail_ = (fail_batch == 0 || fail_batch == batch_) &&
            (fail_seed == 0 || static_cast<std::uint64_t>(fail_seed) == ctx.seed);
    fail_step_ = o.get_int("fail-step");
    how_ = o.get_string("how");
    benchhost::RunInfo r;
    r.global_batch_size = batch_;
    r.samples_per_epoch = batch_ * 4;
    r.max_epochs = 2;
    r.eval_samples = 1;
    r.metric_target = static_cast<double>(o.get_int("target"));
    return r;
  }
  benchhost::StepResult train_step() override { return step(); }
  benchhost::StepResult infer_step() override { return step(); }
  benchhost::EvalResult evaluate() override { return {static_cast<double>(step_), 1}; }

 private:
  benchhost::StepResult step() {
    if (++step_ == fail_step_ && fail_) fail();
    return {batch_, 1.0};
  }
  // A real SIGSEGV also in tools/sanitize.sh's build: UBSan would report the null store and abort.
  __attribute__((no_sanitize("undefined"))) void fail() const {
    if (how_ == "segv") {
      // A store through a volatile pointer the compiler cannot see is null: it must happen, and faults.
      volatile std::uintptr_t address = 0;
      *reinterpret_cast<volatile int*>(address) = 1;
    } else if (how_ == "abort") {
      std::abort();
    } else if (how_ == "exit") {
      std::exit(3);
    }
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // hang; signals do not end it
  }

  std::int64_t batch_ = 4, step_ = 0, fail_step_ = 0;
  bool fail_ = false;
  std::string how_;
};

}  // namespace

BENCHHOST_PLUGIN(CrashWorkload)

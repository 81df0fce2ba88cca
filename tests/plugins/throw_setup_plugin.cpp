// Throws from setup, as a workload whose dataset is missing would.
#include "benchhost/workload.hpp"

namespace {

class ThrowSetupWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "throw_setup";
    i.version = "1.0.0";
    i.description = "throws DataError from setup";
    i.modes = {"train"};
    return i;
  }
  benchhost::RunInfo setup(const benchhost::RunContext&) override {
    BH_THROW(DataError, "dataset file /nonexistent/throw_setup/train.bin does not exist");
  }
  benchhost::StepResult train_step() override { return {1, 0.0}; }
};

}  // namespace

BENCHHOST_PLUGIN(ThrowSetupWorkload)

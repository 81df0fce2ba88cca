// Declines every context in check_support: the host must record SKIPPED with this reason.
#include "benchhost/workload.hpp"

namespace {

class DeclineWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "decline";
    i.version = "1.0.0";
    i.description = "always declines: needs a GPU";
    i.devices = {"cuda"};
    i.modes = {"train", "infer"};
    return i;
  }
  static std::string check_support(const benchhost::RunContext&) { return "needs a GPU"; }
  benchhost::RunInfo setup(const benchhost::RunContext&) override {
    BH_THROW(Error, "setup must not be called after check_support declined");
  }
  benchhost::StepResult train_step() override { return {1, 0.0}; }
};

}  // namespace

BENCHHOST_PLUGIN(DeclineWorkload)

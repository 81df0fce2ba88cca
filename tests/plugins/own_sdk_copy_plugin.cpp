// A plugin whose symbol lookup finds an SDK copy of its own: it defines (and exports)
// benchhost_sdk_identity itself, as a plugin that links the SDK statically with default visibility
// would. The host must refuse it (Note [One SDK in the process], plugin_abi.h): the communicator it
// would be handed belongs to another copy of the library.
#include "benchhost/workload.hpp"

extern "C" __attribute__((visibility("default"))) const void* benchhost_sdk_identity(void) {
  static const char another_copy = 0;
  return &another_copy;
}

namespace {

class OwnSdkCopyWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "own_sdk_copy";
    i.version = "1.0.0";
    i.modes = {"train"};
    return i;
  }
  benchhost::RunInfo setup(const benchhost::RunContext&) override { return {}; }
  benchhost::StepResult train_step() override { return {1, 0.0}; }
};

}  // namespace

BENCHHOST_PLUGIN(OwnSdkCopyWorkload)

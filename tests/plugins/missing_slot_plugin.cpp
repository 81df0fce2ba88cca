// A current-ABI descriptor that lacks the required train_step slot: listed as broken, naming it.
#include "benchhost/plugin_abi.h"

namespace {
const char* describe() { return "{\"name\": \"missing_slot\"}"; }
bh_status create(bh_workload** out, bh_error*) {
  static int instance;
  *out = reinterpret_cast<bh_workload*>(&instance);
  return BH_STATUS_OK;
}
void destroy(bh_workload*) {}
bh_status setup(bh_workload*, const bh_run_context*, bh_run_info*, bh_error*) { return BH_STATUS_OK; }
}  // namespace

extern "C" __attribute__((visibility("default"))) const bh_plugin_descriptor* benchhost_plugin_descriptor(void) {
  static bh_plugin_descriptor d = [] {
    bh_plugin_descriptor x{};
    x.abi_major = BENCHHOST_ABI_MAJOR;
    x.abi_minor = BENCHHOST_ABI_MINOR;
    x.struct_size = sizeof(bh_plugin_descriptor);
    x.name = "missing_slot";
    x.version = "1.0.0";
    x.describe_json = &describe;
    x.create = &create;
    x.destroy = &destroy;
    x.setup = &setup;
    return x;
  }();
  return &d;
}

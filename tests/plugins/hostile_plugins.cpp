// Plugin files that take down the process loading them, one per HOSTILE_KIND (compile definition):
// a library constructor that aborts, one that exits, and an entry point whose describe_json
// faults. Discovery must survive all of them (Note [Isolated discovery], core/plugin_loader.cpp).
#include <cstdint>
#include <cstdlib>

#include "benchhost/plugin_abi.h"

#if HOSTILE_KIND == 1
__attribute__((constructor)) static void abort_on_load() { std::abort(); }
#elif HOSTILE_KIND == 2
__attribute__((constructor)) static void exit_on_load() { std::exit(7); }
#endif

namespace {
const char* describe() {
#if HOSTILE_KIND == 3
  volatile std::uintptr_t address = 0;
  return *reinterpret_cast<const char* volatile*>(address);  // faults
#else
  return "{\"name\": \"hostile\"}";
#endif
}
bh_status create(bh_workload**, bh_error*) { return BH_STATUS_FAILED; }
void destroy(bh_workload*) {}
bh_status setup(bh_workload*, const bh_run_context*, bh_run_info*, bh_error*) { return BH_STATUS_FAILED; }
bh_status train_step(bh_workload*, bh_step_result*, bh_error*) { return BH_STATUS_FAILED; }
}  // namespace

extern "C" __attribute__((visibility("default"))) const bh_plugin_descriptor* benchhost_plugin_descriptor(void) {
  static bh_plugin_descriptor d = [] {
    bh_plugin_descriptor x{};
    x.abi_major = BENCHHOST_ABI_MAJOR;
    x.abi_minor = BENCHHOST_ABI_MINOR;
    x.struct_size = sizeof(bh_plugin_descriptor);
    x.name = "hostile";
    x.version = "1.0.0";
    x.describe_json = &describe;
    x.create = &create;
    x.destroy = &destroy;
    x.setup = &setup;
    x.train_step = &train_step;
    return x;
  }();
  return &d;
}

// Plugin files that take down the process loading them, one per HOSTILE_KIND (compile definition):
// a library constructor that aborts, one that exits, and an entry point whose describe_json
// faults. Discovery must survive all of them (Note [Isolated discovery], core/plugin_loader.cpp).
#include <cstdint>
#include <cstdlib>

#include "hand_written_plugin.hpp"

#if HOSTILE_KIND == 1
__attribute__((constructor)) static void abort_on_load() { std::abort(); }
#elif HOSTILE_KIND == 2
__attribute__((constructor)) static void exit_on_load() { std::exit(7); }
#endif

namespace {
// The fault must be the real one, also in tools/sanitize.sh's build: UBSan would report the null
// load and abort first.
__attribute__((no_sanitize("undefined"))) const char* describe() {
#if HOSTILE_KIND == 3
  volatile std::uintptr_t address = 0;
  return *reinterpret_cast<const char* volatile*>(address);  // faults
#else
  return "{\"name\": \"hostile\"}";
#endif
}
bh_status setup(bh_workload*, const bh_run_context*, bh_run_info*, bh_error*) { return BH_STATUS_FAILED; }
bh_status train_step(bh_workload*, bh_step_result*, bh_error*) { return BH_STATUS_FAILED; }
}  // namespace

HAND_WRITTEN_PLUGIN(hand_written::descriptor("hostile", &describe, &setup, &train_step))

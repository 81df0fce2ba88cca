// A current-ABI descriptor that lacks the required train_step slot: listed as broken, naming it.
#include "hand_written_plugin.hpp"

namespace {
const char* describe() { return "{\"name\": \"missing_slot\"}"; }
bh_status setup(bh_workload*, const bh_run_context*, bh_run_info*, bh_error*) { return BH_STATUS_OK; }
}  // namespace

HAND_WRITTEN_PLUGIN(hand_written::descriptor("missing_slot", &describe, &setup, nullptr))

// A plugin written against the C ABI alone (plugin_abi.h), linking no SDK library: it loads, and
// the host hands it no communicator (Note [One SDK in the process], plugin_abi.h), because a
// benchhost::Communicator* is only usable through the host's SDK. setup() fails if it gets one.
#include <cstring>

#include "hand_written_plugin.hpp"

namespace {

const char* describe() {
  return "{\"name\": \"no_sdk\", \"version\": \"1.0.0\", \"description\": \"C ABI only, no SDK library\", "
         "\"modes\": [\"train\"]}";
}
bh_status setup(bh_workload*, const bh_run_context* ctx, bh_run_info* info, bh_error* err) {
  if (ctx->communicator != nullptr) {
    std::strncpy(err->message, "no_sdk: the host passed a communicator to a plugin without the SDK",
                 BH_ERROR_MESSAGE_CAPACITY - 1);
    return BH_STATUS_FAILED;
  }
  info->samples_per_epoch = 1000;
  info->global_batch_size = ctx->batch_size > 0 ? ctx->batch_size : 1;
  return BH_STATUS_OK;
}
bh_status train_step(bh_workload*, bh_step_result* out, bh_error*) {
  out->samples = 1;
  out->loss = 0.0;
  return BH_STATUS_OK;
}

}  // namespace

HAND_WRITTEN_PLUGIN(hand_written::descriptor("no_sdk", &describe, &setup, &train_step))

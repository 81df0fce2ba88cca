// A plugin as the 1.1 SDK built it, written against the C ABI by hand: it declares ABI 1.1, and its
// bh_step_result ends at `loss` (1.2 appended loss_scale and update_skipped). A 1.2 host must load
// it (an older minor) and read only what its struct_size covers. To make that observable, each
// step also leaves a nonzero pattern in the host's struct past the 1.1 size, where the 1.2 fields
// lie: bytes a 1.1 plugin never meant, which the host must not take for loss-scaling outcomes.
// Its evaluate does the same past bh_eval_result's 1.0-1.3 end, where ABI 1.4's value_json (a
// pointer the host must not follow) and target_verdict lie; its metric passes the target at the
// second evaluation, which only the host's own comparison can tell.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "benchhost/plugin_abi.h"

namespace {

// bh_step_result as ABI 1.1 defined it.
struct step_result_abi_1_1 {
  uint32_t struct_size;
  int64_t samples;
  double loss;
};
static_assert(sizeof(step_result_abi_1_1) == offsetof(bh_step_result, loss_scale),
              "the 1.2 fields must start where the 1.1 struct ended");

// bh_eval_result as ABI 1.0-1.3 defined it.
struct eval_result_abi_1_1 {
  uint32_t struct_size;
  double metric;
  int64_t samples;
};
static_assert(sizeof(eval_result_abi_1_1) == offsetof(bh_eval_result, value_json),
              "the 1.4 fields must start where the 1.3 struct ended");

int evaluations = 0;  // of the one instance (these plugins keep no per-instance state)

constexpr int64_t kSamplesPerStep = 2;

const char* describe() {
  return "{\"name\": \"abi_1_1\", \"version\": \"1.1.0\", \"description\": \"a plugin built against ABI 1.1 "
         "(host tests)\", \"metric\": {\"name\": \"score\", \"target\": 0.5, \"direction\": \"max\"}, "
         "\"precisions\": [\"fp32\", \"fp16\"], \"modes\": [\"ttt\", \"train\"], \"sdk_abi\": \"1.1\"}";
}
bh_status create(bh_workload** out, bh_error*) {
  static int instance;
  *out = reinterpret_cast<bh_workload*>(&instance);
  return BH_STATUS_OK;
}
void destroy(bh_workload*) {}
bh_status setup(bh_workload*, const bh_run_context* ctx, bh_run_info* info, bh_error*) {
  info->samples_per_epoch = 1000 * kSamplesPerStep * ctx->world_size;
  info->global_batch_size = kSamplesPerStep * ctx->world_size;
  info->max_epochs = 1;
  info->eval_every_samples = 10 * kSamplesPerStep * ctx->world_size;
  evaluations = 0;
  return BH_STATUS_OK;
}
bh_status train_step(bh_workload*, bh_step_result* out, bh_error*) {
  const uint32_t host_size = out->struct_size;
  step_result_abi_1_1 mine{sizeof(step_result_abi_1_1), kSamplesPerStep, 0.5};
  std::memcpy(out, &mine, sizeof mine);
  if (host_size > sizeof mine)  // inside the host's struct: safe to write, wrong to read
    std::memset(reinterpret_cast<unsigned char*>(out) + sizeof mine, 0x5A, host_size - sizeof mine);
  return BH_STATUS_OK;
}

bh_status evaluate(bh_workload*, bh_eval_result* out, bh_error*) {
  const uint32_t host_size = out->struct_size;
  ++evaluations;
  eval_result_abi_1_1 mine{sizeof(eval_result_abi_1_1), 0.25 * evaluations, 100};  // 0.25, 0.5: target at the 2nd
  std::memcpy(out, &mine, sizeof mine);
  if (host_size > sizeof mine)
    std::memset(reinterpret_cast<unsigned char*>(out) + sizeof mine, 0x5A, host_size - sizeof mine);
  return BH_STATUS_OK;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const bh_plugin_descriptor* benchhost_plugin_descriptor(void) {
  static bh_plugin_descriptor d = [] {
    bh_plugin_descriptor x{};
    x.abi_major = 1;
    x.abi_minor = 1;
    x.struct_size = sizeof(bh_plugin_descriptor);  // unchanged from 1.1: 1.2 added no slot
    x.name = "abi_1_1";
    x.version = "1.1.0";
    x.describe_json = &describe;
    x.create = &create;
    x.destroy = &destroy;
    x.setup = &setup;
    x.train_step = &train_step;
    x.evaluate = &evaluate;
    return x;
  }();
  return &d;
}

#pragma once
// For test plugins written against the C ABI by hand, without the SDK's BENCHHOST_PLUGIN macro:
// a descriptor of the current ABI with the slots given (a null slot is absent), and the trivial
// create/destroy such plugins share. Header-only: these plugins link no SDK library.
#include "benchhost/plugin_abi.h"

namespace hand_written {

/// One static instance for every create (these plugins keep no per-instance state).
inline bh_status create_static(bh_workload** out, bh_error*) {
  static int instance;
  *out = reinterpret_cast<bh_workload*>(&instance);
  return BH_STATUS_OK;
}
inline void destroy_nothing(bh_workload*) {}

inline bh_plugin_descriptor descriptor(const char* name, const char* (*describe_json)(),
                                       bh_status (*setup)(bh_workload*, const bh_run_context*, bh_run_info*, bh_error*),
                                       bh_status (*train_step)(bh_workload*, bh_step_result*, bh_error*)) {
  bh_plugin_descriptor d{};
  d.abi_major = BENCHHOST_ABI_MAJOR;
  d.abi_minor = BENCHHOST_ABI_MINOR;
  d.struct_size = sizeof(bh_plugin_descriptor);
  d.name = name;
  d.version = "1.0.0";
  d.describe_json = describe_json;
  d.create = &create_static;
  d.destroy = &destroy_nothing;
  d.setup = setup;
  d.train_step = train_step;
  return d;
}

}  // namespace hand_written

/// The entry point returning `descriptor_expression`, evaluated once.
#define HAND_WRITTEN_PLUGIN(descriptor_expression)                                                              \
  extern "C" __attribute__((visibility("default"))) const bh_plugin_descriptor* benchhost_plugin_descriptor(void) { \
    static const bh_plugin_descriptor d = (descriptor_expression);                                              \
    return &d;                                                                                                  \
  }

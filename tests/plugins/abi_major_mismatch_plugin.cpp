// A descriptor written by hand, as a plugin built against a future SDK (ABI major + 1) would
// export it. The host must refuse it, naming both versions, without calling any slot.
#include "benchhost/plugin_abi.h"

namespace {
const char* describe() { return "{\"name\": \"abi_major_mismatch\"}"; }
}  // namespace

extern "C" __attribute__((visibility("default"))) const bh_plugin_descriptor* benchhost_plugin_descriptor(void) {
  static bh_plugin_descriptor d = [] {
    bh_plugin_descriptor x{};
    x.abi_major = BENCHHOST_ABI_MAJOR + 1;
    x.abi_minor = 0;
    x.struct_size = sizeof(bh_plugin_descriptor);
    x.name = "abi_major_mismatch";
    x.version = "9.9.9";
    x.describe_json = &describe;
    return x;
  }();
  return &d;
}

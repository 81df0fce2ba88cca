// A descriptor from a newer SDK minor (ABI 1.(minor+1)): the host must refuse it and say to update
// benchhost, naming both versions.
#include "benchhost/plugin_abi.h"

namespace {
const char* describe() { return "{\"name\": \"abi_minor_newer\"}"; }
}  // namespace

extern "C" __attribute__((visibility("default"))) const bh_plugin_descriptor* benchhost_plugin_descriptor(void) {
  static bh_plugin_descriptor d = [] {
    bh_plugin_descriptor x{};
    x.abi_major = BENCHHOST_ABI_MAJOR;
    x.abi_minor = BENCHHOST_ABI_MINOR + 1;
    x.struct_size = sizeof(bh_plugin_descriptor);
    x.name = "abi_minor_newer";
    x.version = "1.0.0";
    x.describe_json = &describe;
    return x;
  }();
  return &d;
}

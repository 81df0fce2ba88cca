// The shared library's own translation unit; the areas come in as whole archives.
#include "benchhost/version.hpp"

extern "C" __attribute__((visibility("default"))) const char* benchhost_sdk_version(void) {
  return BENCHHOST_VERSION_STRING;
}

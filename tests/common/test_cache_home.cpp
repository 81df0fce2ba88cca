// Linked into every test executable (tests/CMakeLists.txt). Runs that report MFU calibrate the
// device's peak and cache it under $XDG_CACHE_HOME/benchhost (Note [Peak cache], core/peak.hpp).
// Tests point that at the build tree before main(), for themselves and every benchhost they start:
// parallel tests share one calibration per build (writes are locked and atomic), and a
// calibration measured while the suite keeps the CPUs busy never lands in a user's ~/.cache.
#include <cstdlib>

namespace {
const bool cache_home_set = [] { return ::setenv("XDG_CACHE_HOME", BENCHHOST_BINARY_DIR "/test_cache", 1) == 0; }();
}  // namespace

// The maskrcnn plugin's entry point (the workload itself is in workload.cpp, a static library
// shared with the tests).
#include "workload.hpp"

BENCHHOST_PLUGIN(benchhost::maskrcnn::MaskRcnnWorkload)

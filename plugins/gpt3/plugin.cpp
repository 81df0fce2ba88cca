// The gpt3 plugin's entry point (see workload.hpp).
#include "workload.hpp"

BENCHHOST_PLUGIN(benchhost::gpt3::GptWorkload)

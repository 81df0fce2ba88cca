// The bert plugin's entry point (see workload.hpp).
#include "workload.hpp"

BENCHHOST_PLUGIN(benchhost::bert::BertWorkload)

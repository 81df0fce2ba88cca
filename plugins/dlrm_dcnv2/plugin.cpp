// The plugin entry point: the C descriptor of DlrmWorkload.
#include "workload.hpp"

BENCHHOST_PLUGIN(dlrm::DlrmWorkload)

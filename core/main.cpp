// benchhost: loads workload plugins and measures them (see docs/cli.md).
#include <cstdio>
#include <exception>

#include "commands.hpp"

int main(int argc, char** argv) {
  benchhost::host::install_signal_handlers();
  // run_main reports what it expects; anything else is still said, not std::terminate's abort.
  try {
    return benchhost::host::run_main(argc, argv, stdout, stderr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchhost: error: %s\n", e.what());
    return benchhost::host::kExitHostError;
  }
}

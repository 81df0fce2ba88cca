// benchhost: loads workload plugins and measures them (see docs/cli.md).
#include "commands.hpp"

int main(int argc, char** argv) {
  benchhost::host::install_signal_handlers();
  return benchhost::host::run_main(argc, argv, stdout, stderr);
}

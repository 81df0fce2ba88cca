#pragma once
// Internal: how optional communicator backends plug into create_communicator().
//
// Note [Communicator backend registry]
// The MPI backend is compiled into libbenchhost_sdk only when MPI is found, and the NCCL backend
// lives in libbenchhost_sdk_cuda.so, which is loaded on first use of a cuda device. Each registers
// a factory under its name from a static initialiser, so communicator.cpp needs no #ifdef per
// backend and a missing backend is reported by name ("this benchhost was built without MPI").

#include <memory>
#include <string>

#include "benchhost/comm/communicator.hpp"

namespace benchhost::detail {

/// bootstrap: an MPI communicator over the same processes (nullptr for world_size 1 or when
/// MPI is not built); a backend that needs one to exchange its unique id takes ownership.
using CommunicatorFactory = std::unique_ptr<Communicator> (*)(
    Device device, const LaunchEnv& env, const CommOptions& opts,
    std::unique_ptr<Communicator> bootstrap);

void register_communicator_backend(const std::string& name, CommunicatorFactory factory);
CommunicatorFactory find_communicator_backend(const std::string& name);

/// Report a fatal error once per communicator: call opts.on_fatal_error and arm the abort
/// watchdog (Note [Collective timeout]). `abort_fn` ends the job; it runs on a detached thread
/// after opts.abort_grace_seconds unless the process has exited.
void report_fatal_error(const CommOptions& opts, const CommError& error, void (*abort_fn)(int));

}  // namespace benchhost::detail

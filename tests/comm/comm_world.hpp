#pragma once
// The communicator every test in test_comm shares: the MPI backend when test_comm was started by
// mpirun (1, 2 or 3 ranks), the single backend when it was started alone.

#include <memory>

#include "benchhost/comm/communicator.hpp"

namespace comm_test {

benchhost::Communicator& world();
/// True when the shared communicator is the MPI backend.
bool world_is_mpi();

}  // namespace comm_test

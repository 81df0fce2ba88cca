// test_comm's main: create one communicator for the process (MPI is initialised once per
// process), run the tests on every rank, and print a failure on any rank with its rank number.

#include <cstdio>

#include <gtest/gtest.h>

#include "comm/comm_world.hpp"

namespace comm_test {
namespace {
std::unique_ptr<benchhost::Communicator> g_world;
}

benchhost::Communicator& world() { return *g_world; }
bool world_is_mpi() { return g_world->backend_name() == "mpi"; }

// Ranks other than 0 print only failures, tagged with their rank, so the log stays readable.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace comm_test

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  benchhost::LaunchEnv env = benchhost::detect_launch_env();
  benchhost::CommOptions opts;
  opts.timeout_seconds = 30;  // a test that desynchronises the ranks fails, it does not hang
  opts.abort_grace_seconds = 5;
  std::string backend = env.launcher == "none" ? "single" : "auto";
#ifdef BENCHHOST_BUILT_WITH_MPI
  if (env.launcher == "openmpi") backend = "mpi";  // also for -np 1: test the MPI path itself
#endif
  comm_test::g_world = benchhost::create_communicator(backend, benchhost::Device::cpu(), env, opts);
  if (comm_test::g_world->rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new comm_test::RankFailurePrinter(comm_test::g_world->rank()));
  }
  int rc = RUN_ALL_TESTS();
  comm_test::g_world.reset();
  return rc;
}

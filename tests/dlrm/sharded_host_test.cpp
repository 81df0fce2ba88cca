// Sharded DLRM tables in real processes: two hosts under mpirun, each rank holding half of the
// tables (table-wise) or half of every table's rows (row-wise), the exchanges of Notes [Table-wise
// sharding] and [Row-wise sharding] running over the MPI backend. (Numerical equality with one process is checked in workload_test.cpp over an
// in-process communicator; this checks the real collectives and the host's aggregation.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

void run_two_processes(const std::string& sharding, const std::string& expect_console) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  const fs::path bin = fs::path(BENCHHOST_BINARY_DIR) / "bin";
  ASSERT_TRUE(fs::exists(bin / "plugins" / "dlrm_dcnv2.so")) << "build the dlrm_dcnv2 target";
  const fs::path work = fs::path(BENCHHOST_BINARY_DIR) / ("dlrm_sharded_host_test_" + sharding);
  fs::create_directories(work);
  const fs::path report = work / "report.json";
  fs::remove(report);
  const std::string cmd = fmt::format(
      "OMP_WAIT_POLICY=PASSIVE mpirun {}--oversubscribe -np 2 {}/benchhost train dlrm_dcnv2 --config {}/configs/dlrm_dcnv2/mini.conf "
      "--synthetic -b 512 -w 1 -i 4 --threads 1 --dlrm_dcnv2.embedding-sharding {} -o {} > {}/console.txt 2>&1",
      ::geteuid() == 0 ? "--allow-run-as-root " : "", bin.string(), BENCHHOST_SOURCE_DIR, sharding,
      report.string(), work.string());
  const int rc = std::system(cmd.c_str());
  std::ifstream in(report);
  ASSERT_TRUE(in) << "no report; exit code " << rc << "; see " << (work / "console.txt");
  const auto j = nlohmann::json::parse(in);
  const auto& r = j.at("results").at(0);
  const std::string message = r.value("message", "");
  if (r.at("status") == "FAILED" && message.find("built without MPI") != std::string::npos)
    GTEST_SKIP() << "this build has no MPI backend: " << message;
  ASSERT_EQ(r.at("status"), "PASSED") << message << "\nsee " << (work / "console.txt");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(r.at("devices").get<int>(), 2) << r.dump(2);
  std::ifstream console(work / "console.txt");
  const std::string text((std::istreambuf_iterator<char>(console)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(expect_console), std::string::npos) << text;
}

}  // namespace

TEST(DlrmShardedHost, TwoProcessesTrainWithTablesSplitByAllToAll) {
  run_two_processes("table", "embedding tables sharded table-wise over 2 ranks (rank 0: 13 tables");
}

TEST(DlrmShardedHost, TwoProcessesTrainWithRowsSplitByAllToAll) {
  run_two_processes("row", "embedding tables sharded row-wise over 2 ranks (rank 0: 26 tables");
}

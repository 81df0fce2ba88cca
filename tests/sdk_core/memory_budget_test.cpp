// Note [Memory budgets]: the tightest cgroup memory limit above the process, v2 and v1, against
// hand-made cgroup trees; and the budget of this machine is sane.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "benchhost/memory_budget.hpp"

using namespace benchhost;
namespace fs = std::filesystem;

namespace {

struct Tree {
  fs::path root = fs::path(testing::TempDir()) / "cgroup_tree";
  Tree() {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~Tree() { fs::remove_all(root); }
  void write(const std::string& rel, const std::string& text) const {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text << "\n";
  }
};

}  // namespace

TEST(MemoryBudget, CgroupV2TakesTheTightestLimitAboveTheProcess) {
  Tree t;
  t.write("memory.max", "max");
  t.write("job.slice/memory.max", "8589934592");  // 8 GiB on the parent
  t.write("job.slice/memory.current", "1073741824");
  t.write("job.slice/step/memory.max", "max");  // none on the process's own cgroup
  t.write("job.slice/step/memory.current", "536870912");
  const MemoryBudget b = detail::cgroup_memory("0::/job.slice/step\n", t.root.string());
  EXPECT_EQ(b.capacity_bytes, 8589934592.0);
  EXPECT_EQ(b.available_bytes, 8589934592.0 - 1073741824.0);
  EXPECT_EQ(b.source, "cgroup /job.slice limit");
}

TEST(MemoryBudget, CgroupV1MemoryControllerAndNoLimit) {
  Tree t;
  t.write("memory/memory.limit_in_bytes", "9223372036854771712");  // v1's "no limit"
  t.write("memory/docker/abc/memory.limit_in_bytes", "2147483648");
  t.write("memory/docker/abc/memory.usage_in_bytes", "2000000000");
  const MemoryBudget b = detail::cgroup_memory("12:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n", t.root.string());
  EXPECT_EQ(b.capacity_bytes, 2147483648.0);
  EXPECT_EQ(b.available_bytes, 147483648.0);
  const MemoryBudget none = detail::cgroup_memory("4:memory:/\n", t.root.string());
  EXPECT_EQ(none.capacity_bytes, 0.0) << "9223372036854771712 is v1's 'unlimited'";
  EXPECT_EQ(detail::cgroup_memory("", t.root.string()).capacity_bytes, 0.0);
}

TEST(MemoryBudget, ThisMachinesCpuBudget) {
  const MemoryBudget b = memory_budget(Device::cpu());
  EXPECT_GT(b.capacity_bytes, 0.0);
  EXPECT_GT(b.available_bytes, 0.0);
  EXPECT_LE(b.available_bytes, b.capacity_bytes);
  EXPECT_FALSE(b.source.empty());
}

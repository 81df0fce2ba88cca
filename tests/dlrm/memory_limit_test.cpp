// Note [Memory budgets]: inside a memory cgroup smaller than the machine, a configuration that fits
// the machine but not the cgroup is OOM with the cgroup named, not a process the kernel kills.
// Needs permission to create a cgroup (root, a writable cgroup tree); skips visibly otherwise.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "common/host_run.hpp"

namespace fs = std::filesystem;

namespace {

// A fresh memory cgroup limited to `bytes`, v1 or v2, removed on destruction; path() is "" when
// this machine does not let the test make one.
class MemoryCgroup {
 public:
  explicit MemoryCgroup(long long bytes) {
    const std::string name = fmt::format("benchhost_test_{}", ::getpid());
    for (const auto& [dir, limit_file] : {std::pair<fs::path, const char*>{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"},
                                          {"/sys/fs/cgroup", "memory.max"}}) {
      std::error_code ec;
      if (!fs::exists(dir / limit_file, ec) && !fs::exists(dir / "cgroup.controllers", ec)) continue;
      const fs::path cg = dir / name;
      if (!fs::create_directory(cg, ec)) continue;
      std::ofstream(cg / limit_file) << bytes << "\n";
      std::ifstream back(cg / limit_file);
      long long got = 0;
      if ((back >> got) && got > 0 && got <= bytes) {
        path_ = cg;
        return;
      }
      fs::remove(cg, ec);
    }
  }
  ~MemoryCgroup() {
    std::error_code ec;
    if (!path_.empty()) fs::remove(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

TEST(DlrmMemoryLimit, AConfigurationOverTheCgroupLimitIsOomNamingIt) {
  MemoryCgroup cgroup(512ll << 20);
  if (cgroup.path().empty()) GTEST_SKIP() << "cannot create a memory cgroup here (needs root and a writable cgroup tree)";
  std::string tables;
  for (int k = 0; k < 26; ++k) tables += (k ? "," : "") + std::string("100000");  // 0.75 GiB to train: fits the machine
  const std::string cmd = fmt::format(
      "sh -c 'echo $$ > {}/cgroup.procs && exec {}/bin/benchhost --plugin dlrm_dcnv2 --mode train --synthetic -b 64 -i 1 "
      "-w 0 --dlrm_dcnv2.table-sizes {}' 2>&1",
      cgroup.path().string(), BENCHHOST_BINARY_DIR, tables);
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  ::pclose(pipe);
  EXPECT_NE(out.find("OOM"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("(cgroup /{} limit)", cgroup.path().filename().string())), std::string::npos) << out;
}

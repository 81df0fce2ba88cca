// Note [Run paths]: no binary of the build has an empty or relative run-path entry (an empty one
// is the current directory), and a library left in the current directory is never loaded.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "cli.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;

namespace {

// The RUNPATH (or RPATH) entries of an ELF file, as readelf shows them.
std::vector<std::string> run_path(const fs::path& elf) {
  const auto p = bhtest::run_command(fmt::format("readelf -d '{}'", elf.string()));
  std::vector<std::string> out;
  for (std::istringstream lines(p.output); !lines.eof();) {
    std::string line;
    std::getline(lines, line);
    const auto open = line.find("path: ["), close = line.rfind(']');
    if ((line.find("(RUNPATH)") == std::string::npos && line.find("(RPATH)") == std::string::npos) ||
        open == std::string::npos || close == std::string::npos)
      continue;
    const std::string value = line.substr(open + 7, close - open - 7);
    std::size_t start = 0;
    for (std::size_t colon; (colon = value.find(':', start)) != std::string::npos; start = colon + 1)
      out.push_back(value.substr(start, colon - start));
    out.push_back(value.substr(start));
  }
  return out;
}

}  // namespace

TEST(RunPaths, EveryEntryIsAbsoluteOrRelativeToTheBinary) {
  const fs::path build = BENCHHOST_BUILD_DIR;
  std::vector<fs::path> files{build / "bin" / "benchhost"};
  for (const fs::path dir : {build / "lib", build / "bin" / "plugins", build / "test_plugins"})
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().string().find(".so") != std::string::npos) files.push_back(e.path());
  int checked = 0;
  for (const auto& f : files) {
    const auto entries = run_path(f);
    for (const auto& entry : entries)
      EXPECT_TRUE(!entry.empty() && (entry.front() == '/' || entry.rfind("$ORIGIN", 0) == 0))
          << f << " has run-path entry '" << entry << "'";
    checked += !entries.empty();
  }
  EXPECT_GE(checked, 3) << "readelf found no run paths at all";
}

TEST(RunPaths, ALibraryInTheCurrentDirectoryIsNeverLoaded) {
  bhtest::TempDir cwd("cwd_trap");
  const fs::path trap = fs::path(BENCHHOST_TEST_PLUGIN_DIR) / "cwd_trap" / "libsndfile.so.1";
  ASSERT_TRUE(fs::exists(trap));
  fs::copy_file(trap, cwd.path / "libsndfile.so.1");
  const std::vector<std::string> commands{
      "--version", "list",
      fmt::format("--plugin-dir '{}' --plugin toy --mode train -b 4 -w 0 -i 2", BENCHHOST_TEST_PLUGIN_DIR)};
  for (const std::string& args : commands) {
    const auto p = bhtest::run_command(fmt::format("cd '{}' && '{}' {}", cwd.path.string(), BENCHHOST_EXECUTABLE, args));
    EXPECT_EQ(p.exit_code, 0) << args << "\n" << p.output;
    EXPECT_FALSE(fs::exists(cwd.path / "cwd_trap_loaded")) << "benchhost " << args << " loaded ./libsndfile.so.1";
  }
}

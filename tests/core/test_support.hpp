#pragma once
// Helpers shared by the host tests: plugin paths, running the real executable, temp dirs.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "events.hpp"

namespace bhtest {

inline std::filesystem::path plugin_dir() { return BENCHHOST_TEST_PLUGIN_DIR; }
inline std::filesystem::path broken_dir() { return plugin_dir() / "broken"; }
inline std::filesystem::path plugin_file(const std::string& name) { return plugin_dir() / (name + ".so"); }

struct Process {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

/// Run a shell command line, stdout and stderr together.
inline Process run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  Process p;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return p;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) p.output.append(buf, n);
  int status = ::pclose(f);
  p.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return p;
}

/// Run the real benchhost executable with `args` (shell-quoted by the caller when needed).
inline Process run_benchhost(const std::string& args) {
  return run_command(std::string("'") + BENCHHOST_EXECUTABLE + "' " + args);
}

/// A fresh directory under the system temp dir, removed on destruction.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() / ("benchhost_core_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// The last line of CSV text `rows` without its last `n` fields (its newline kept): for checks of
/// columns that come before ones whose values depend on the machine.
inline std::string without_last_csv_fields(const std::string& rows, int n) {
  std::string line = rows;
  if (!line.empty() && line.back() == '\n') line.pop_back();
  line = line.substr(line.rfind('\n') == std::string::npos ? 0 : line.rfind('\n') + 1);
  for (int i = 0; i < n && line.find(',') != std::string::npos; ++i) line.erase(line.rfind(','));
  return line + "\n";
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Collects everything the event bus emits.
struct CapturingReporter : benchhost::host::Reporter {
  std::vector<benchhost::host::MllogEvent>* mllog;
  explicit CapturingReporter(std::vector<benchhost::host::MllogEvent>* m) : mllog(m) {}
  void on_mllog(const benchhost::host::MllogEvent& e) override { mllog->push_back(e); }
};

}  // namespace bhtest

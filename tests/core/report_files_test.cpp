// Note [Writing report files] and Note [A report that cannot be written]: a report never replaces
// a device node or a symbolic link, and a file that cannot be written (here: a file-size limit,
// which fails writes like a full disk) is reported while the sweep goes on and the other files
// are written; the MLLOG file keeps whole lines; the exit code says something is missing.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>

#include "cli.hpp"
#include "reporters.hpp"
#include "test_support.hpp"

using namespace benchhost::host;
namespace fs = std::filesystem;

namespace {

std::string dirs() { return fmt::format("--plugin-dir '{}' ", BENCHHOST_TEST_PLUGIN_DIR); }

std::size_t count_lines(const fs::path& p) {
  std::ifstream in(p);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

}  // namespace

// Refused before anything runs (check_report_paths), so a long run is not spent on a report that
// could never be written; write_file_atomically refuses the same at every write.
TEST(ReportFiles, NeverReplaceADeviceNodeOrFollowALink) {
  bhtest::TempDir tmp("reports");
  const fs::path target = tmp.path / "elsewhere.json", link = tmp.path / "link.json";
  fs::create_symlink(target, link);
  auto p = bhtest::run_benchhost(dirs() + fmt::format("--plugin toy --mode train -b 4 -w 0 -i 2 -o '{}'", link.string()));
  EXPECT_EQ(p.exit_code, kExitUsage) << p.output;
  EXPECT_NE(p.output.find("option -o/--output: refusing to write"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("is not a regular file (a symbolic link)"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("nothing was run"), std::string::npos) << p.output;
  EXPECT_EQ(p.output.find("PASSED"), std::string::npos) << "nothing is measured: " << p.output;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_FALSE(fs::exists(target)) << "the report went through the link";
  EXPECT_THROW(write_file_atomically(link, "{}"), benchhost::Error);
  EXPECT_FALSE(fs::exists(target)) << "the report went through the link";

  // A character device (what /dev/full is); creating one needs privileges, a FIFO does not.
  const fs::path node = tmp.path / "node";
  ASSERT_EQ(::mkfifo(node.c_str(), 0666), 0);
  p = bhtest::run_benchhost(dirs() + fmt::format("--plugin toy --mode train -b 4 -w 0 -i 2 --csv '{}'", node.string()));
  EXPECT_EQ(p.exit_code, kExitUsage) << p.output;
  EXPECT_NE(p.output.find("option --csv: refusing to write"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("not a regular file"), std::string::npos) << p.output;
  EXPECT_TRUE(fs::is_fifo(node));
  for (const auto& e : fs::directory_iterator(tmp.path))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "a temporary file was left: " << e.path();
}

// Found by fuzz_cli: a component longer than NAME_MAX threw filesystem_error out of the option
// checks; before that, such a report (or one in a directory that cannot be made) failed only when
// the first result was written, after the run.
TEST(ReportFiles, AReportThatCouldNeverBeWrittenIsRefusedBeforeTheRun) {
  bhtest::TempDir tmp("reports");
  const std::string long_name(300, 'a');
  auto p = bhtest::run_benchhost(dirs() + fmt::format("--plugin toy --mode train -b 4 -w 0 -i 2 -o '{}' --csv '{}'",
                                                      (tmp.path / long_name / "r.json").string(),
                                                      (tmp.path / long_name / "r.csv").string()));
  EXPECT_EQ(p.exit_code, kExitUsage) << p.output;
  EXPECT_NE(p.output.find("option -o/--output: cannot write"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("File name too long; nothing was run"), std::string::npos) << p.output;
  EXPECT_EQ(p.output.find("PASSED"), std::string::npos) << p.output;

  // A directory that cannot be made: its parent is a file.
  std::ofstream(tmp.path / "file") << "x";
  p = bhtest::run_benchhost(dirs() + fmt::format("--plugin toy --seed 3 --mllog '{}'", (tmp.path / "file" / "run.mllog").string()));
  EXPECT_EQ(p.exit_code, kExitUsage) << p.output;
  EXPECT_NE(p.output.find("option --mllog: cannot write"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("Not a directory; nothing was run"), std::string::npos) << p.output;

  // The check leaves nothing behind, and a writable report is written as before.
  const fs::path json = tmp.path / "new" / "r.json";
  p = bhtest::run_benchhost(dirs() + fmt::format("--plugin toy --mode train -b 4 -w 0 -i 2 -o '{}'", json.string()));
  EXPECT_EQ(p.exit_code, kExitOk) << p.output;
  EXPECT_TRUE(fs::is_regular_file(json));
  for (const auto& e : fs::recursive_directory_iterator(tmp.path))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "a temporary file was left: " << e.path();

  // The MLLOG is written in place: an existing file no other file can be created beside is fine.
  p = bhtest::run_benchhost(dirs() + "--plugin toy --seed 3 --mllog /dev/stdout");
  EXPECT_EQ(p.exit_code, kExitOk) << p.output;
  EXPECT_NE(p.output.find(":::MLLOG"), std::string::npos) << p.output;

  // A working directory removed under the shell: said, not an abort.
  p = bhtest::run_command(fmt::format("mkdir '{0}/gone' && cd '{0}/gone' && rmdir '{0}/gone' && '{1}' {2} --plugin toy",
                                      tmp.path.string(), BENCHHOST_EXECUTABLE, dirs()));
  EXPECT_EQ(p.exit_code, kExitUsage) << p.output;
  EXPECT_NE(p.output.find("the working directory is gone"), std::string::npos) << p.output;
}

TEST(ReportFiles, AFailedWriteIsReportedAndTheSweepGoesOn) {
  bhtest::TempDir tmp("reports");
  // 4 KiB is enough for the CSV, not for the JSON report with its environment (without the
  // calibrated peak's source and notes, whose length depends on the machine).
  const fs::path json = tmp.path / "r.json", csv = tmp.path / "r.csv";
  auto p = bhtest::run_command(fmt::format("ulimit -f 4 && '{}' {} --plugin toy --mode train -b 4,8,16 -w 0 -i 3 "
                                           "--calibrate-peak off -o '{}' --csv '{}'",
                                           BENCHHOST_EXECUTABLE, dirs(), json.string(), csv.string()));
  EXPECT_EQ(p.exit_code, kExitHostError) << p.output;
  EXPECT_NE(p.output.find(fmt::format("cannot write {}", json.string())), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("incomplete output"), std::string::npos) << p.output;
  EXPECT_EQ(count_lines(csv), 4u) << "the CSV has every sweep point: " << p.output;
}

TEST(ReportFiles, AnMllogThatCannotBeWrittenIsNotAValidSilence) {
  bhtest::TempDir tmp("reports");
  const fs::path mllog = tmp.path / "run.mllog";
  auto p = bhtest::run_command(fmt::format("ulimit -f 8 && '{}' {} --plugin toy --seed 3 --mllog '{}'", BENCHHOST_EXECUTABLE,
                                           dirs(), mllog.string()));
  EXPECT_EQ(p.exit_code, kExitHostError) << "a time to train whose MLLOG is cut short is not a success: " << p.output;
  EXPECT_NE(p.output.find(fmt::format("cannot write MLLOG file {}", mllog.string())), std::string::npos) << p.output;
  std::ifstream in(mllog, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "the MLLOG ends in a whole line";
}

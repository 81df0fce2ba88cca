#pragma once
/// @file reporters.hpp  Console, JSON, CSV and MLLOG reporters over the event stream (events.hpp).

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "events.hpp"

namespace benchhost::host {

/// Write `content` to `path` atomically: a temporary file in the same directory, fsync, rename.
/// A reader sees the old file or the new one, never half of one. Throws Error naming the path.
void write_file_atomically(const std::filesystem::path& path, const std::string& content);

/// Before anything runs (Note [A report that cannot be written]): that a report at `path` can be
/// written, its directory created and a file made in it, and, for a file replaced whole
/// (write_file_atomically), that `path` is not a link, directory or device. Throws Error naming
/// the path and the reason. A full disk can still fail the write itself later.
void check_report_path(const std::filesystem::path& path, bool replaced_whole);

/// What every report starts with (see docs/report-schema.md).
struct ReportHeader {
  nlohmann::ordered_json invocation;   ///< argv, plugin, mode, device, precision, options, ...
  nlohmann::ordered_json plugin;       ///< name, version, abi, benchmark, metric
  nlohmann::ordered_json environment;  ///< environment_fingerprint()
};

/// 2: records gained updates_skipped, loss_scale; 3: promoted_calls; 4: machine_load; 5: peak_tflops,
/// peak_source, mfu_datasheet, datasheet_peak_tflops, datasheet_source; 6: iteration_ms,
/// rank_step_ms.per_rank and .straggler, summary.scaling; 7: ttt.evals[].value and .target_reached.
inline constexpr int kReportSchemaVersion = 7;

/// The JSON form of one record (every field present; null when not meaningful).
nlohmann::ordered_json record_to_json(const RunRecord& r);
/// Inverse of record_to_json (reads a child job's report in -n sweeps). Throws on a malformed record.
RunRecord record_from_json(const nlohmann::json& j);
/// The whole report document.
nlohmann::ordered_json report_to_json(const ReportHeader& h, const std::vector<RunRecord>& records,
                                      const Summary* summary);

/// One MLLOG line exactly as mlcommons/logging prints it (Python json.dumps spacing):
/// :::MLLOG {"namespace": "", "time_ms": 1700000000000, "event_type": "POINT_IN_TIME", "key": "seed",
///           "value": 1, "metadata": {"file": "core/run_modes.cpp", "lineno": 42}}
std::string format_mllog_line(const MllogEvent& e);

/// Rewrites the JSON report after every record (complete=false) and at the end (complete=true).
class JsonReporter : public Reporter {
 public:
  JsonReporter(std::filesystem::path path, ReportHeader header) : path_(std::move(path)), header_(std::move(header)) {}
  void on_record(const RunRecord&, const std::vector<RunRecord>& all) override;
  void on_finish(const std::vector<RunRecord>& all, const Summary& s) override;

 private:
  std::filesystem::path path_;
  ReportHeader header_;
};

/// One CSV row per record, rewritten atomically after every record.
class CsvReporter : public Reporter {
 public:
  explicit CsvReporter(std::filesystem::path path) : path_(std::move(path)) {}
  void on_record(const RunRecord&, const std::vector<RunRecord>& all) override;
  static std::string render(const std::vector<RunRecord>& all);

 private:
  std::filesystem::path path_;
};

/// Appends MLLOG lines to `path` (one file per ttt run when runs > 1: <stem>_<r><ext>), flushing
/// every line so a crash leaves every line logged so far.
class MllogReporter : public Reporter {
 public:
  MllogReporter(std::filesystem::path path, int runs) : path_(std::move(path)), runs_(runs) {}
  ~MllogReporter() override;
  MllogReporter(const MllogReporter&) = delete;
  MllogReporter& operator=(const MllogReporter&) = delete;
  void on_mllog(const MllogEvent& e) override;
  static std::filesystem::path path_for_run(const std::filesystem::path& base, int run, int runs);

 private:
  std::filesystem::path path_;
  int runs_;
  int open_run_ = -1;
  std::filesystem::path open_file_;
  std::FILE* out_ = nullptr;
};

/// Human output: a line per finished record, a live progress line when stdout is a terminal and a
/// point has run for more than a second, and a table at the end.
class ConsoleReporter : public Reporter {
 public:
  explicit ConsoleReporter(std::FILE* out);
  void on_progress(const Progress& p) override;
  void on_record(const RunRecord& r, const std::vector<RunRecord>&) override;
  void on_finish(const std::vector<RunRecord>& all, const Summary& s) override;

 private:
  void clear_progress();
  std::FILE* out_;
  bool tty_;
  bool progress_shown_ = false;
  double first_progress_ = -1;  ///< when the current point's first progress event came (s)
  double last_progress_ = -1;
};

}  // namespace benchhost::host

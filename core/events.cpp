#include "events.hpp"

#include <cstring>

namespace benchhost::host {

const char* to_string(RunStatus s) {
  switch (s) {
    case RunStatus::passed: return "PASSED";
    case RunStatus::skipped: return "SKIPPED";
    case RunStatus::invalid_arguments: return "INVALID_ARGUMENTS";
    case RunStatus::oom: return "OOM";
    case RunStatus::timeout: return "TIMEOUT";
    case RunStatus::diverged: return "DIVERGED";
    case RunStatus::failed: return "FAILED";
  }
  return "FAILED";
}

RunStatus status_from_bh(bh_status s) {
  switch (s) {
    case BH_STATUS_OK: return RunStatus::passed;
    case BH_STATUS_INVALID_ARGUMENT: return RunStatus::invalid_arguments;
    case BH_STATUS_UNSUPPORTED: return RunStatus::skipped;
    case BH_STATUS_OUT_OF_MEMORY: return RunStatus::oom;
    case BH_STATUS_DIVERGED: return RunStatus::diverged;
    case BH_STATUS_DATA_ERROR:
    case BH_STATUS_COMM_ERROR:
    case BH_STATUS_FAILED: return RunStatus::failed;
  }
  return RunStatus::failed;
}

std::int64_t unix_time_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

void EventBus::mllog(const std::string& event_type, const std::string& key, nlohmann::ordered_json value,
                     nlohmann::ordered_json metadata, std::source_location loc) {
  MllogEvent e;
  e.time_ms = unix_time_ms();
  e.event_type = event_type;
  e.key = key;
  e.value = std::move(value);
  e.metadata = std::move(metadata);
  // Report the host source file relative to the repository (core/run_modes.cpp), like
  // mlcommons/logging's root_dir trimming.
  std::string f = loc.file_name();
  if (auto pos = f.rfind("/core/"); pos != std::string::npos) f = f.substr(pos + 1);
  e.file = f;
  e.line = static_cast<int>(loc.line());
  e.run_index = run_index_;
  forward_mllog(e);
}

void EventBus::forward_mllog(const MllogEvent& e) {
  for (auto& r : reporters_) r->on_mllog(e);
}

void EventBus::point_start(const PointStart& p) {
  for (auto& r : reporters_) r->on_point_start(p);
}

void EventBus::progress(const Progress& p) {
  for (auto& r : reporters_) r->on_progress(p);
}

void EventBus::record(RunRecord r) {
  records_.push_back(std::move(r));
  for (auto& rep : reporters_) rep->on_record(records_.back(), records_);
}

void EventBus::finish(const Summary& s) {
  for (auto& r : reporters_) r->on_finish(records_, s);
}

}  // namespace benchhost::host

#pragma once
/// @file isolation.hpp  Runs the measurement in a supervised worker process, so that a plugin that
/// crashes or hangs costs one point, not the run (Note [Crash isolation] in isolation.cpp).

#include <cstdio>
#include <memory>
#include <optional>

#include "cli.hpp"
#include "events.hpp"
#include "plugin_loader.hpp"

namespace benchhost::host {

/// The private environment variable through which a supervisor hands a worker its channel:
/// "<events fd>,<progress fd>,<first point>". Not an interface: only benchhost sets it.
inline constexpr const char* kWorkerEnvironmentVariable = "BENCHHOST_ISOLATION_WORKER";

/// What a worker process was handed by its supervisor.
struct WorkerChannel {
  int events_fd = -1;    ///< write end of the event pipe: one JSON object per line
  int progress_fd = -1;  ///< shared memory holding the current point's step count
  int first_point = 0;   ///< run_selected_mode's first_point: where this worker resumes
};

/// In a worker process: read kWorkerEnvironmentVariable, remove it from the environment (so that
/// processes the worker starts, such as a -n sweep's mpirun, do not take the channel for theirs)
/// and make its descriptors close-on-exec. nullopt in any other process. Throws Error on a
/// malformed value.
std::optional<WorkerChannel> take_worker_channel();

/// A worker's only reporter: every event becomes one line on the events pipe, except the per-step
/// progress count, which goes to shared memory (Note [Crash isolation]). Throws Error when the
/// shared memory cannot be mapped.
std::unique_ptr<Reporter> make_worker_reporter(const WorkerChannel& channel);

/// How long the supervisor lets a step run past --timeout before it kills the worker: the larger
/// of 10 s and a quarter of the limit.
double hard_timeout_grace_seconds(double timeout_seconds);

/// How a supervised run ended.
struct SupervisedRun {
  bool interrupted = false;  ///< SIGINT/SIGTERM: forwarded to the worker, or reported by it
  /// >= 0: a worker failed before running any point (a usage error it printed, or a host error);
  /// the run ends with this code and no summary, as it would have in-process.
  int exit_code = -1;
};

/// The supervisor: runs the selected mode of `s` in worker processes (this executable with the
/// same command line), re-emits their events into `bus`, records the point a worker crashed in
/// (FAILED) or hung in past --timeout (TIMEOUT, killed), and starts a new worker after it.
/// SIGINT/SIGTERM received here are forwarded to the worker. Host messages go to `err`.
SupervisedRun supervise_workers(const Settings& s, const LoadedPlugin& plugin, EventBus& bus, std::FILE* err);

}  // namespace benchhost::host

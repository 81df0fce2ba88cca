#!/usr/bin/env bash
# Allreduce bus bandwidth of benchhost's MPI backend vs MPI_Allreduce, side by side in one run.
#   tools/bench_allreduce.sh [-np N] [bench_allreduce options...]
# BUILD_DIR selects the build tree (default: build). Builds the target if it is missing.
# RT=1 runs the ranks at real-time round-robin priority, one per core (chrt -r 10, --bind-to
# core): on a machine shared with builds it keeps other processes from distorting the timings.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
np=2
if [[ "${1:-}" == "-np" ]]; then np="$2"; shift 2; fi
if [[ ! -x "$build/bin/bench_allreduce" ]]; then
  ninja -C "$build" -j2 bench_allreduce
fi
prefix=()
bind=none
if [[ "${RT:-0}" == 1 ]]; then prefix=(chrt -r 10); bind=core; fi
exec "${prefix[@]}" mpirun --allow-run-as-root --oversubscribe --bind-to "$bind" -np "$np" \
  "$build/bin/bench_allreduce" "$@"

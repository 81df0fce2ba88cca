#!/usr/bin/env bash
# Allreduce bus bandwidth of benchhost's MPI backend vs MPI_Allreduce, side by side in one run.
#   tools/bench_allreduce.sh [-np N] [bench_allreduce options...]
# BUILD_DIR selects the build tree (default: build). Builds the target if it is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
np=2
if [[ "${1:-}" == "-np" ]]; then np="$2"; shift 2; fi
if [[ ! -x "$build/bin/bench_allreduce" ]]; then
  ninja -C "$build" -j2 bench_allreduce
fi
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
  "$build/bin/bench_allreduce" "$@"

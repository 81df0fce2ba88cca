#!/usr/bin/env bash
# The same workload on an idle machine and next to processes that spin on every CPU, under the
# OpenMP wait policy's default (libgomp: spin, then sleep) and PASSIVE, in alternating rounds of
# one run: how much a busy machine costs, and whether the report says so (machine_load.busy,
# Note [A busy machine], core/machine_load.cpp). Raw reports and the table go to results/cpu/<date>/.
#   tools/bench_busy_machine.sh                  # resnet50 and dlrm_dcnv2 mini, 3 rounds
#   ROUNDS=5 BUILD_DIR=build-x tools/bench_busy_machine.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
rounds=${ROUNDS:-3}
out=${OUT_DIR:-results/cpu/$(date -u +%F)/busy_machine}
mkdir -p "$out"
bin="$build/bin/benchhost"
[ -x "$bin" ] || { echo "bench_busy_machine: $bin not built" >&2; exit 1; }
declare -A runs=(
  [resnet50]="--plugin resnet50 --mode train --synthetic -b 32 -w 3 -i 30"
  [dlrm_dcnv2]="--plugin dlrm_dcnv2 --mode train --synthetic -b 512 -w 5 -i 60"
)
spinners=()
start_load() { for _ in $(seq "$(nproc)"); do (while :; do :; done) & spinners+=($!); done; }
stop_load() { for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done; wait "${spinners[@]}" 2>/dev/null || true; spinners=(); }
trap stop_load EXIT
{ date -u; uname -a; nproc; grep -m1 'model name' /proc/cpuinfo; echo "load average before: $(cat /proc/loadavg)"; } > "$out/machine.txt"
for round in $(seq "$rounds"); do
  for w in "${!runs[@]}"; do
    # Alternate the order of the four conditions from round to round.
    conds=("idle default" "busy default" "idle PASSIVE" "busy PASSIVE")
    ((round % 2 == 0)) && conds=("busy PASSIVE" "idle PASSIVE" "busy default" "idle default")
    for c in "${conds[@]}"; do
      read -r load policy <<< "$c"
      [ "$load" = busy ] && start_load && sleep 1
      tag="$w.$load.$policy.r$round"
      if [ "$policy" = default ]; then
        env -u OMP_WAIT_POLICY "$bin" ${runs[$w]} -o "$out/$tag.json" > "$out/$tag.log" 2>&1 || true
      else
        OMP_WAIT_POLICY=$policy "$bin" ${runs[$w]} -o "$out/$tag.json" > "$out/$tag.log" 2>&1 || true
      fi
      [ "$load" = busy ] && stop_load
      echo "$tag: $(grep -E '^(PASSED|FAILED)' "$out/$tag.log" | head -1 | cut -c1-150)"
    done
  done
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import glob, json, os, statistics, sys
out = sys.argv[1]
rows = {}
for f in glob.glob(os.path.join(out, "*.json")):
    w, load, policy, _ = os.path.basename(f)[:-5].split(".")
    r = json.load(open(f))["results"][0]
    rows.setdefault((w, load, policy), []).append(r)
print("%-11s %-5s %-8s %5s %12s %10s %11s %s" % ("workload", "load", "policy", "runs", "samples/s", "vs idle", "other CPUs", "flagged busy"))
for (w, load, policy), rs in sorted(rows.items()):
    sps = statistics.median(r["samples_per_second"] or 0 for r in rs)
    idle = rows.get((w, "idle", policy))
    base = statistics.median(r["samples_per_second"] or 0 for r in idle) if idle else float("nan")
    other = statistics.median((r["machine_load"] or {}).get("other_cpus", float("nan")) for r in rs)
    flagged = sum(1 for r in rs if (r["machine_load"] or {}).get("busy"))
    print("%-11s %-5s %-8s %5d %12.1f %9.2fx %11.2f %d of %d" % (w, load, policy, len(rs), sps, sps / base, other, flagged, len(rs)))
PY

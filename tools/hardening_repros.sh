#!/usr/bin/env bash
# Issue 19's ten numbered cases (hostile files, faults and signals), each replayed against the
# current build: the command-line repro where the case is one, then the case's regression tests.
# Every command, its exit code and its output go to $OUT (default
# results/hardening/<date>/repros.txt); a one-line verdict per case goes to the terminal and to
# the top of that file. Needs the normal build (bash tools/setup.sh); about two minutes.
#   bash tools/hardening_repros.sh
#   BUILD_DIR=build OUT=/tmp/repros.txt bash tools/hardening_repros.sh
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
bh=$(realpath "$build/bin/benchhost")
plugins=$(realpath "$build/test_plugins")
out=${OUT:-results/hardening/$(date -u +%F)/repros.txt}
mkdir -p "$(dirname "$out")"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
log="$scratch/log"
: > "$log"
verdicts=()

say() { printf '%s\n' "$@" >> "$log"; }
# run LABEL EXPECTED_RC COMMAND...: runs the command in a shell, logs it, its rc and output; 0 when
# the rc is the expected one.
run() {
  local label=$1 want=$2
  shift 2
  say "\$ $*"
  local text rc
  text=$(bash -c "$*" 2>&1)
  rc=$?
  say "$text" "[exit $rc, expected $want]" ""
  [ "$rc" = "$want" ]
}
# tests FILTER...: the named regression tests through ctest (exact names, anchored).
tests() {
  local re
  re="^($(IFS='|'; echo "$*"))\$"
  say "\$ ctest --test-dir $build -R '$re'"
  local text rc
  text=$(ctest --test-dir "$build" -R "$re" --output-on-failure 2>&1)
  rc=$?
  say "$(grep -E 'Test +#|tests passed|tests failed|Skipped|Failed' <<< "$text")" ""
  [ "$rc" = 0 ] && grep -q "tests passed" <<< "$text" && ! grep -q "No tests were found" <<< "$text"
}
# has TEXT: the last command's output holds TEXT.
has() { tail -n 40 "$log" | grep -qF -- "$1"; }
case_() {
  local n=$1 title=$2 ok=$3
  verdicts+=("case $n ($title): $([ "$ok" = 0 ] && echo ok || echo FAILED)")
  say "=== end of case $n: $([ "$ok" = 0 ] && echo ok || echo FAILED)" ""
}
syn="--plugin resnet50 --mode train --resnet50.dataset synthetic --resnet50.image-size 32 -b 4 -i 2 -w 1 --calibrate-peak off"

# 1. Report files: device nodes, FIFOs and links are refused before the run; the node or link's
#    target is untouched; no temporary is left.
say "=== case 1: -o replaces device nodes and follows symlinks"
ok=0
mkfifo "$scratch/fifo"
run 1 1 "'$bh' $syn -o '$scratch/fifo'" && has "is not a regular file" && [ -p "$scratch/fifo" ] || ok=1
ln -s "$scratch/target.json" "$scratch/link.json"
run 1 1 "'$bh' $syn -o '$scratch/link.json'" && has "(a symbolic link)" && [ ! -e "$scratch/target.json" ] || ok=1
if [ "$(id -u)" = 0 ]; then
  mknod -m 666 "$scratch/null_node" c 1 3
  run 1 1 "'$bh' $syn -o '$scratch/null_node'" && has "is not a regular file" && [ -c "$scratch/null_node" ] || ok=1
else
  say "(not root: the mknod repro is skipped; the FIFO above takes the same path)"
fi
run 1 0 "'$bh' $syn -o '$scratch/ok/r.json' && ls '$scratch/ok'" && has "r.json" || ok=1
[ -z "$(find "$scratch" -name '*.tmp.*')" ] || { say "a temporary file was left"; ok=1; }
tests ReportFiles.NeverReplaceADeviceNodeOrFollowALink ReportFiles.AReportThatCouldNeverBeWrittenIsRefusedBeforeTheRun \
  RunModes.DeviceCountSweepRelaunchesUnderMpirun || ok=1
case_ 1 "report files" $ok

# 2. Run paths: no empty RUNPATH entry; a library planted in the working directory is not loaded.
say "=== case 2: libraries load from the current directory"
ok=0
run 2 0 "readelf -d '$bh' '$build'/lib/libbenchhost_sdk.so '$build'/bin/plugins/bert.so '$build'/bin/plugins/gpt3.so 2>/dev/null | grep -E 'RUNPATH|RPATH'" || true
if grep -E 'R(UN)?PATH' "$log" | tail -n 4 | grep -qE '\[:|::|:\]'; then say "an empty run-path entry"; ok=1; fi
mkdir -p "$scratch/cwd"
printf '#include <stdio.h>\n__attribute__((constructor)) static void planted(void) { puts("PLANTED LIBRARY RAN"); }\n' > "$scratch/cwd/p.c"
if cc -shared -fPIC -o "$scratch/cwd/libsndfile.so.1" "$scratch/cwd/p.c" 2>> "$log"; then
  run 2 0 "cd '$scratch/cwd' && '$bh' --version" && ! has "PLANTED LIBRARY RAN" || ok=1
fi
tests RunPaths.EveryEntryIsAbsoluteOrRelativeToTheBinary RunPaths.ALibraryInTheCurrentDirectoryIsNeverLoaded || ok=1
case_ 2 "run paths" $ok

# 3. Crafted headers: a Megatron .idx pointer near INT64_MAX, zip64 fields near 2^64.
say "=== case 3: crafted headers crash readers"
ok=0
tests IndexedDataset.RejectsTruncatedAndCorruptPairs Npz.CorruptionAndTruncationAreRefused Npz.Zip64DirectoryIsUnderstood \
  CriteoReader.RejectsTruncatedCompressedAndIncompleteFiles || ok=1
case_ 3 "crafted headers" $ok

# 4. Signals: a step that never returns ends on SIGINT, SIGTERM or SIGHUP, with what was measured.
say "=== case 4: a hung step ignores Ctrl-C and SIGTERM; SIGHUP is not handled"
ok=0
hang="--plugin-dir '$plugins' --plugin crash --crash.how hang --mode ttt -b 16 --mllog '$scratch/hang.mllog' -o '$scratch/hang.json'"
for sig in HUP TERM INT; do
  run 4 130 "'$bh' $hang & pid=\$!; sleep 3; kill -$sig \$pid; wait \$pid" && has "interrupted by signal" || ok=1
  run 4 0 "grep run_stop '$scratch/hang.mllog'; grep -o '\"status\": \"[A-Z]*\"' '$scratch/hang.json' | sort | uniq -c" \
    && has '"status": "aborted"' && has '"status": "FAILED"' || ok=1
done
# A ttt run killed in its second epoch (two SIGTERMs) keeps the epoch and evaluation it finished.
run 4 130 "'$bh' --plugin-dir '$plugins' --plugin crash --crash.how hang --crash.fail-batch 0 --crash.fail-step 6 --crash.target 8 --mode ttt -o '$scratch/kept.json' & pid=\$!; sleep 3; kill -TERM \$pid; sleep 0.3; kill -TERM \$pid; wait \$pid" \
  && has "metric 4, 1 epochs" || ok=1
tests Isolation.HangupDuringAStepThatNeverReturnsEndsTheRunWithinTheGrace Isolation.ASecondInterruptEndsAHungRunWithoutIsolation \
  Isolation.HangupDuringAHungStepWithoutIsolationEndsTheRunAfterTheGrace Isolation.InterruptIsForwardedToTheWorkerAndEndsTheRunAsBefore \
  Isolation.ATimeToTrainRunThatEndsWithoutReturningKeepsItsEvaluations || ok=1
case_ 4 "signals" $ok

# 5. A failed report write: said at once and at the end, the sweep goes on, the CSV is whole.
say "=== case 5: one failed report write aborts the sweep"
ok=0
run 5 4 "ulimit -f 4 && '$bh' --plugin-dir '$plugins' --plugin toy --mode train -b 4,8,16 -w 0 -i 3 -o '$scratch/f.json' --csv '$scratch/f.csv'" \
  && has "incomplete output" || ok=1
run 5 0 "wc -l < '$scratch/f.csv'" && has "4" || ok=1
tests ReportFiles.AFailedWriteIsReportedAndTheSweepGoesOn || ok=1
case_ 5 "failed writes" $ok

# 6. MLLOG write errors: checked, the log ends in a whole line, the exit code says so.
say "=== case 6: MLLOG write errors are ignored"
ok=0
run 6 4 "ulimit -f 8 && '$bh' --plugin-dir '$plugins' --plugin toy --seed 3 --mllog '$scratch/m.mllog'" && has "cannot write MLLOG file" || ok=1
run 6 0 "tail -c 1 '$scratch/m.mllog' | od -c | head -n 1" && has '\n' || ok=1
tests ReportFiles.AnMllogThatCannotBeWrittenIsNotAValidSilence || ok=1
case_ 6 "MLLOG writes" $ok

# 7. Plugin discovery: a truncated plugin and other bad files are listed; list and runs go on.
say "=== case 7: one bad .so in a plugin directory kills list and every run"
ok=0
mkdir -p "$scratch/plugins"
head -c 4096 "$plugins/toy.so" > "$scratch/plugins/truncated.so"
mkfifo "$scratch/plugins/fifo.so"
ln -s "$scratch/nowhere.so" "$scratch/plugins/dangling.so"
run 7 0 "'$bh' list --plugin-dir '$scratch/plugins' --plugin-dir '$scratch/missing'" && has "truncated" || ok=1
run 7 0 "'$bh' --plugin-dir '$scratch/plugins' --plugin-dir '$plugins' --plugin toy --mode train -b 4 -w 0 -i 2" && has "PASSED" || ok=1
tests PluginLoader.AFileThatTakesDownItsLoaderIsListedAndTheRestLoad PluginLoader.BrokenFilesAreListedAndOthersStillWork \
  Executable.ListShowsPluginsAndBrokenFiles || ok=1
case_ 7 "plugin discovery" $ok

# 8. MPI: a rank killed or interrupted mid-run; rank 0 keeps the point in progress.
say "=== case 8: MPI rank killed or interrupted"
ok=0
tests Isolation.ARankKilledOrInterruptedMidRunLeavesRankZerosPointInTheReport || ok=1
case_ 8 "MPI ranks" $ok

# 9. Bad data is a data error naming the file and record.
say "=== case 9: bad data reported as PASSED"
ok=0
tests CriteoReader.BadValuesAreDataErrorsNamingFileAndRow Idx.TruncationAndMalformedFilesAreRefused \
  IndexedDataset.RejectsTruncatedAndCorruptPairs Image.AJpegHeaderClaimingMoreThanItsDataIsRefused || ok=1
case_ 9 "bad data" $ok

# 10. The smaller cases.
say "=== case 10: smaller cases"
ok=0
run 10 1 "'$bh' --plugin resnet50 --seed -1" && has "is not an integer" || ok=1
run 10 1 "'$bh' --plugin resnet50 --timeout nan" && has "option --timeout" || ok=1
run 10 1 "'$bh' --plugin resnet50 -b 8,,16" && has "an empty element" || ok=1
run 10 1 "'$bh' --plugin resnet50 -o r.json --csv ./r.json" && has "name the same file" || ok=1
run 10 1 "'$bh' --plugin resnet50 --threads 100000" && has "option --threads" || ok=1
run 10 1 "'$bh' --plugin dlrm" && has "dlrm_dcnv2" || ok=1
run 10 0 "'$bh' ${syn/-i 2/-i 400} & pid=\$!; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 1; w=\$(ps --ppid \$pid -o comm= | head -n 1); [ -n \"\$w\" ] && break; done; echo \"worker: \$w\"; kill -INT \$pid; wait \$pid; true" \
  && has "worker: benchhost-wrk" || ok=1
run 10 0 "grep -o 'schema_version: [0-9]*' docs/report-schema.md | head -n 1; '$bh' $syn -o '$scratch/s.json' > /dev/null && grep -o '\"schema_version\": [0-9]*' '$scratch/s.json' | tr -d '\"'" \
  && [ "$(tail -n 6 "$log" | grep -c "schema_version: $(grep -o 'kReportSchemaVersion = [0-9]*' core/reporters.hpp | grep -o '[0-9]*$')")" = 2 ] || ok=1
tests Cli.ValuesThatWereTakenSilentlyAreRefused Cli.UnknownOptionSuggestsNearest PluginLoader.AnUnterminatedErrorMessageIsReadWithinItsBuffer \
  MemoryBudget.CgroupV2TakesTheTightestLimitAboveTheProcess MemoryBudget.CgroupV1MemoryControllerAndNoLimit || ok=1
case_ 10 "smaller cases" $ok

# Before $out is opened: a tracked $out being rewritten would make the tree look dirty.
state="commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (dirty)')"
{
  echo "# Issue 19's numbered cases replayed: $(date -u '+%F %T UTC'), $state, $(uname -srm)"
  printf '%s\n' "${verdicts[@]}"
  echo
  cat "$log"
} > "$out"
printf '%s\n' "${verdicts[@]}"
echo "log: $out"
! grep -q FAILED <<< "${verdicts[*]}"

#!/usr/bin/env bash
# Coverage-guided fuzzing of every reader and the CLI with libFuzzer (Note [Fuzzing the readers],
# tests/fuzz/fuzz.hpp). Builds build-fuzz/ with clang (AddressSanitizer + UndefinedBehaviorSanitizer,
# coverage for libFuzzer, CPU only), writes each harness's seeds as its starting corpus, runs each
# fuzzer for RUNS executions (default 10 million) and writes every fuzzer's log and a summary under
# results/fuzz/<date>/. A finding stops that fuzzer and leaves crash-* (or leak-, oom-, timeout-)
# files in results/fuzz/<date>/<name>/; reproduce one with build/bin/fuzz_smoke_<name> FILE.
#   bash tools/fuzz.sh                         # all harnesses, 10M executions each
#   RUNS=100000 FUZZERS="npy image" bash tools/fuzz.sh
#   MAX_TIME=3600 JOBS=2 bash tools/fuzz.sh    # stop each fuzzer after an hour even short of RUNS
# Each fuzzer's working corpus is kept in $CORPUS_DIR/<name> (default build-fuzz/corpus), so a
# campaign split over several runs goes on from what the earlier runs found instead of starting
# again from the seeds; CORPUS_DIR=none starts from the seeds in a scratch directory.
# Needs clang and libclang-rt (Debian's clang and libclang-rt-dev; installed here when missing).
set -euo pipefail
# Started with a niceness (nice -n 19 bash tools/fuzz.sh), the fuzzers should yield the CPU to
# everything else. Where the kernel groups processes by session (autogroups), niceness ranks a
# process only within its session's group, and the groups share the CPU equally: fuzzers under
# nice 19 still took half of a 2-core machine from a test suite started in another session. So the
# script runs in a session of its own and gives that session's group its niceness.
if [ -z "${BH_FUZZ_OWN_SESSION:-}" ] && [ "$(nice)" -gt 0 ] && [ -e /proc/self/autogroup ] && command -v setsid >/dev/null; then
  BH_FUZZ_OWN_SESSION=1 exec setsid -w bash "$0" "$@"
fi
if [ -n "${BH_FUZZ_OWN_SESSION:-}" ]; then echo "$(nice)" > /proc/self/autogroup 2>/dev/null || true; fi
cd "$(dirname "$0")/.."
missing=()
for p in clang libclang-rt-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
build=${BUILD_DIR:-build-fuzz}
runs=${RUNS:-10000000}
fuzzers=${FUZZERS:-"npy idx image audio manifest text datasets hdf5 coco librispeech cli"}
jobs=${JOBS:-$(nproc)}
max_time=${MAX_TIME:-0}
corpus_root=${CORPUS_DIR:-$build/corpus}
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  # CMake takes the first configure's compilers and flags from the environment.
  CC=clang CXX=clang++ CXXFLAGS="$flags" CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" \
    cmake -S . -B "$build" -G Ninja -DBENCHHOST_CUDA=OFF -DBENCHHOST_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) >/dev/null
  targets=()
  for f in $fuzzers; do targets+=("fuzz_$f" "fuzz_smoke_$f"); done
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
fi
out=${OUT_DIR:-results/fuzz/$(date -u +%F)}
mkdir -p "$out"
{ date -u; uname -a; clang --version | head -n 1; echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"; echo "runs per fuzzer: $runs"; echo "time limit per fuzzer: ${max_time}s (0: none)"; echo "parallel fuzzers: $jobs"; echo "corpora: $corpus_root"; } > "$out/environment.txt"
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=0"  # leaks: see tools/sanitize.sh
: > "$out/summary.txt"
status=0
run_one() {
  local f=$1 seeds work
  seeds=$(mktemp -d)
  "$build/bin/fuzz_smoke_$f" --write-seeds "$seeds/seeds" > /dev/null
  if [ "$corpus_root" = none ]; then work="$seeds/work"; else work="$corpus_root/$f"; fi
  mkdir -p "$work"
  work=$(realpath "$work")
  local before
  before=$(ls "$work" | wc -l)
  mkdir -p "$out/$f"
  local rc=0 asan=$ASAN_OPTIONS
  # fuzz_hdf5 reads every input in a child process (Note [HDF5 files read in a child process]), and
  # each fork copies the page tables of all the memory ASan's quarantine of freed blocks holds (256
  # MB by default): 16 MB makes a fork cheaper. Many inputs make libhdf5 ask malloc for what a
  # header field claims (1.8 GB for a superblock, 16 GB for a local heap, 2^59 bytes): ASan mapped
  # and unpoisoned each block before libFuzzer's malloc limit ended the child (2.4 s an input, two
  # children), and a corpus full of them ran at 25 executions/s. Over 512 MB malloc now returns
  # NULL at once, which libhdf5 reports as an error: what the reader's address-space limit does
  # outside a sanitizer (256 MiB + 64x the file while libhdf5 parses it; inputs here are at most
  # 256 KB). operator new still ends the process with an ASan report, so our own code's oversized
  # allocations stay findings (results/fuzz/2026-11-27/hdf5-allocation-limit). Symbolizing each report runs a symbolizer
  # process and halved the rate; a finding in the fuzzer itself still names the modules and
  # offsets, and its crash file replays with symbols (fuzz_hdf5 <file>).
  [ "$f" = hdf5 ] && asan="$asan:quarantine_size_mb=16:symbolize=0:allocator_may_return_null=1:max_allocation_size_mb=512"
  # One process, no forking: the counts below are this fuzzer's alone. 2 GiB RSS and 20 s per input
  # are findings (a reader that allocates what the input's size cannot justify, or hangs).
  (cd "$out/$f" && ASAN_OPTIONS=$asan "$OLDPWD/$build/bin/fuzz_$f" -runs="$runs" -max_total_time="$max_time" -rss_limit_mb=2048 -timeout=20 -max_len=262144 \
     -print_final_stats=1 "$work" "$seeds/seeds") > "$out/$f.log" 2>&1 || rc=$?
  local execs
  # The last: the fuzzer's own figure comes when it ends.
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$f.log" | tail -n 1 | awk '{print $2}')
  local files what="finding file(s)"
  files=$(ls "$out/$f" | grep -cE '^(crash|leak|oom|timeout)-' || true)
  # A finding ends the fuzzer with a nonzero status. Files left by a run that exited 0 were written
  # by a forked child that libFuzzer's hooks followed (fuzz_hdf5: a libhdf5 allocation over the
  # limit in the child, which the parent reports as a DataError): look at them, they are not ours.
  [ "$rc" = 0 ] && [ "$files" != 0 ] && what="file(s) from forked children, not findings (the fuzzer went on)"
  echo "$f: ${execs:-?} executions, exit $rc, $files $what, corpus $before -> $(ls "$work" | wc -l) inputs" \
    >> "$out/summary.txt"
  rm -rf "$seeds"
  return $rc
}
active=0
for f in $fuzzers; do
  run_one "$f" &
  active=$((active + 1))
  if [ "$active" -ge "$jobs" ]; then wait -n || status=1; active=$((active - 1)); fi
done
while [ "$active" -gt 0 ]; do wait -n || status=1; active=$((active - 1)); done
cat "$out/summary.txt"
exit $status

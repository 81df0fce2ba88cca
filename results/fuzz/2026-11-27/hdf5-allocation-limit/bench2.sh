#!/bin/bash
# fuzz_hdf5 (d8dc5dd+), ASan options alternated: A = tools/fuzz.sh's before, B = with
# allocator_may_return_null=1:max_allocation_size_mb=2048. 20 s each, -seed=7, starting from a copy
# of the working corpus the campaign had (47 inputs) plus the seeds.
base="detect_leaks=0:quarantine_size_mb=16:symbolize=0"
for i in 1 2 3; do for v in A B; do
  rm -rf c2_$v && cp -r corpus0 c2_$v
  if [ $v = A ]; then o="$base:allocator_may_return_null=0"; else o="$base:allocator_may_return_null=1:max_allocation_size_mb=2048"; fi
  ASAN_OPTIONS=$o /work/main/build-fuzz/bin/fuzz_hdf5 -seed=7 -max_total_time=20 -rss_limit_mb=2048 -timeout=20 -max_len=262144 -print_final_stats=1 c2_$v seeds > r2_${v}_$i.log 2>&1
  echo "$v $i $(grep -o 'number_of_executed_units: [0-9]*' r2_${v}_$i.log) rc=$?"
done; done

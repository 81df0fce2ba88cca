#!/bin/bash
# alternate old/new fuzz_hdf5, 20 s each, same seed and starting corpus
for i in 1 2 3; do for v in old new; do
  rm -rf c_$v && mkdir c_$v
  ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=0:quarantine_size_mb=16:symbolize=0" /work/main/build-fuzz/bin/fuzz_hdf5.$v -seed=7 -max_total_time=20 -rss_limit_mb=2048 -timeout=20 -max_len=262144 -print_final_stats=1 c_$v seeds > r_${v}_$i.log 2>&1
  echo "$v $i $(grep -o 'number_of_executed_units: [0-9]*' r_${v}_$i.log)"
done; done

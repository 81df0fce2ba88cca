#!/bin/bash
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd "$(dirname "$0")/../../../.."
for s in 1 2 3; do
  name=ASAN-s$s-t2
  /usr/bin/time -f "%e s" build-asan/bin/benchhost --plugin unet3d --config configs/unet3d/mini.conf --threads 2 --seed $s \
    -o /tmp/us2/$name.json --mllog /tmp/us2/$name.mllog > /tmp/us2/$name.out 2>&1
  echo "$name: $(grep -o '"eval_accuracy", "value": [0-9.]*' /tmp/us2/$name.mllog | grep -o '[0-9.]*$' | tr '\n' ' ')" >> /tmp/us2/summary.txt
done

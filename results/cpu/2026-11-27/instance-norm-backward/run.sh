#!/usr/bin/env bash
# old: libbenchhost_sdk.so.0 built from the parent commit's instance_norm.cpp (copied to $OLD);
# new: the same library with this commit's (copied to $NEW).
# g++ -std=c++20 -O2 -I sdk/include -I build/sdk/include bench_instance_norm_backward.cpp -o inbench \
#   -L build/lib -lbenchhost_sdk -lfmt -Wl,-rpath,$PWD/build/lib
for r in 1 2 3 4 5; do for v in old new; do
  dir=$OLD; [ $v = new ] && dir=$NEW
  echo "$v $(LD_LIBRARY_PATH=$dir ./inbench 15 | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
done; done

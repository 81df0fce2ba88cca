#!/usr/bin/env bash
# old: libbenchhost_sdk.so built from 4eec604's instance_norm.cpp (copied to $OLD); new: build/lib.
# g++ -O2 -std=c++20 -I sdk/include -I build/sdk/include bench_instance_norm_forward.cpp -o b \
#   -Lbuild/lib -lbenchhost_sdk -Wl,-rpath,$PWD/build/lib -lfmt
for i in 1 2 3 4 5; do for m in "" cl; do
  echo -n "old "; LD_LIBRARY_PATH=$OLD ./b $m; echo -n "new "; ./b $m
done; done

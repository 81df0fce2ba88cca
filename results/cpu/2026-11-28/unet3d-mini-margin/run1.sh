#!/bin/bash
# usage: run1.sh NAME SEED [extra options...]
name=$1; seed=$2; shift 2
cd /work/main
/usr/bin/time -f "%e s" build/bin/benchhost --plugin unet3d --config configs/unet3d/mini.conf --threads 1 --seed $seed \
  --unet3d.epochs 80 "$@" -o /tmp/us/$name.json --mllog /tmp/us/$name.mllog > /tmp/us/$name.out 2>&1
echo "$name: $(grep -o '"eval_accuracy", "value": [0-9.]*' /tmp/us/$name.mllog | grep -o '[0-9.]*$' | tr '\n' ' ')" >> /tmp/us/summary.txt
tail -3 /tmp/us/$name.out >> /tmp/us/summary.txt

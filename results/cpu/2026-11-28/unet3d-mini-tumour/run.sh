#!/bin/bash
# usage: run.sh NAME VARIANT SEED THREADS [extra options]   (env XT_* set by caller)
name=$1; var=$2; seed=$3; thr=$4; shift 4
mkdir -p /tmp/us2
dd=(); [ "$var" != E5 ] && dd=(--unet3d.data-dir cache:kits19_x_$var)   # E5: mini.conf's own cache
cd "$(dirname "$0")/../../../.."
/usr/bin/time -f "%e s" build/bin/benchhost --plugin unet3d --config configs/unet3d/mini.conf --threads $thr --seed $seed "${dd[@]}" \
  "$@" -o /tmp/us2/$name.json --mllog /tmp/us2/$name.mllog > /tmp/us2/$name.out 2>&1
echo "$name: $(grep -o '"eval_accuracy", "value": [0-9.]*' /tmp/us2/$name.mllog | grep -o '[0-9.]*$' | tr '\n' ' ')" >> /tmp/us2/summary.txt
tail -2 /tmp/us2/$name.out | head -1 >> /tmp/us2/summary.txt

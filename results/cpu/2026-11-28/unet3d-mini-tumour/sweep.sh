#!/bin/bash
# The runs of this study, in the order they ran (run.sh and asanq.sh beside this file).
# Variants A-F ran on a build whose generator read the tumour's radii and intensity from the
# environment (XT_RMIN, XT_RMAX, XT_MEAN; never committed), each into its own cache directory
# (--unet3d.data-dir cache:kits19_x_<variant>); E5 and ASAN ran the committed generator v2
# (radii 6-10, intensity 2.2) from configs/unet3d/mini.conf as it is (cache:kits19_mini_v5),
# whose files are byte-identical to variant E's (cmp of cases 0, 31 and 59).
for seed in 1 2 3; do
  XT_MEAN=2.2 ./run.sh A-s$seed-t2 A $seed 2
  XT_RMIN=5 XT_RMAX=9 ./run.sh B-s$seed-t2 B $seed 2
done
for seed in 1 2 3; do
  XT_MEAN=2.2 ./run.sh A-s$seed-t1 A $seed 1
  XT_RMIN=5 XT_RMAX=9 ./run.sh B-s$seed-t1 B $seed 1    # B-s3-t1 stopped by hand
done
XT_RMIN=5 XT_RMAX=9 XT_MEAN=2.2 ./run.sh C-s2-t2 C 2 2
XT_RMIN=6 XT_RMAX=10 ./run.sh D-s2-t2 D 2 2
XT_RMIN=5 XT_RMAX=9 ./run.sh B-s3-t2 B 3 2               # again: the same 0.7128 after 40 epochs
XT_RMIN=5 XT_RMAX=9 XT_MEAN=2.2 ./run.sh C-s1-t2 C 1 2
XT_RMIN=6 XT_RMAX=10 ./run.sh D-s1-t2 D 1 2
XT_RMIN=5 XT_RMAX=9 XT_MEAN=2.2 ./run.sh C-s3-t2 C 3 2
XT_RMIN=6 XT_RMAX=10 ./run.sh D-s3-t2 D 3 2
for s in 2 3 1; do
  XT_RMIN=6 XT_RMAX=10 XT_MEAN=2.2 ./run.sh E-s$s-t2 E $s 2
  XT_RMIN=6 XT_RMAX=10 ./run.sh F-s$s-t2 F $s 2 --unet3d.gen-size-min 48 --unet3d.gen-size-max 64  # F-s1-t2 stopped by hand
done
# generator v2 committed; then
for s in 1 2 3; do ./run.sh E5-s$s-t1 E5 $s 1; done
for s in 4 5 6; do ./run.sh E5-s$s-t2 E5 $s 2; done
./asanq.sh   # beside the E5 runs: build-asan, seeds 1-3 at --threads 2

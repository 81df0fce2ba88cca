# Sourced by the device scripts (run_tests.sh, bench_gpu.sh) from the repository root on the GPU
# machine: unpacks .device/bundle.tar.xz (tools/device/pack.sh), links /work/main to this
# checkout so the build's absolute paths resolve, and sets LD_LIBRARY_PATH. Leaves $build set to
# the bundled build directory.
tar -xJf .device/bundle.tar.xz || { echo "no .device/bundle.tar.xz: run tools/device/pack.sh here first and carry .device"; exit 2; }
if [ "$PWD" != /work/main ]; then
  mkdir -p /work && { [ -e /work/main ] || ln -s "$PWD" /work/main; }
fi
build=$(cat .device/build_dir)
export LD_LIBRARY_PATH="$PWD/$build/lib:$PWD/$build/syslib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# cuDNN and NCCL may come from Python wheels on the device rather than /usr/local/cuda.
for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done

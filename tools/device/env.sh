# Sourced by the device scripts (run_tests.sh, bench_gpu.sh) from the repository root on the GPU
# machine: unpacks .device/bundle.tar.xz (tools/device/pack.sh) once, links /work/main to this
# checkout so the build's absolute paths resolve, and sets LD_LIBRARY_PATH for our binaries.
# Leaves $build set to the bundled build directory and $base_ld_library_path to the machine's own
# LD_LIBRARY_PATH: Python peers run with that one, since the bundle's Debian libraries (libz,
# libssl...) must not shadow the ones the machine's PyTorch was built against.
base_ld_library_path=${LD_LIBRARY_PATH:-}
build=$(cat .device/build_dir 2>/dev/null)
# Never over a real build tree (one that holds build.ninja): run here, as a plumbing check, the
# bundle would put its older binaries in place of the ones just built, and pack.sh would ship those.
unpacked=/tmp/benchhost_bundle_$(stat -c %Y.%s .device/bundle.tar.xz 2>/dev/null)  # once per bundle and machine
if [ -n "$build" ] && [ -f "$build/build.ninja" ]; then
  echo "env.sh: $build is a build tree here; using it as it is, not unpacking the bundle over it" >&2
elif [ ! -f "$unpacked" ]; then
  tar -xJf .device/bundle.tar.xz || { echo "no .device/bundle.tar.xz: run tools/device/pack.sh here first and carry .device"; return 2 2>/dev/null || exit 2; }
  touch "$unpacked"
fi
if [ "$PWD" != /work/main ]; then
  mkdir -p /work && { [ -e /work/main ] || ln -s "$PWD" /work/main; }
fi
# The machine's C++ runtime is newer than Debian 12's and backward compatible: use it, so that one
# process never holds two libstdc++ (our plugins beside Python or the CUDA libraries).
for l in libstdc++.so.6 libgcc_s.so.1; do
  for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu; do
    [ -e "$d/$l" ] && rm -f "$build/syslib/$l" && break
  done
done
# cuDNN and NCCL may come from Python wheels on the device rather than /usr/local/cuda: find them
# before LD_LIBRARY_PATH points at the bundle's libraries.
wheel_dirs=$(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/$build/lib:$PWD/$build/syslib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for d in $wheel_dirs; do
  [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done

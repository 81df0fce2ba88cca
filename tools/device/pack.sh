#!/usr/bin/env bash
# Pack a CUDA build of benchhost for the GPU machine that the device tool lends.
#
# That machine has CUDA, cuDNN, NCCL, CMake and PyTorch but none of Debian's libraries and no
# network, and the device tool carries at most 64 MiB. This builds build-cuda/ (CUDA ON) here and
# writes .device/bundle.tar.xz (ignored by git): build-cuda's executables, plugins, libraries and
# test plugins, plus every shared library they link that is not CUDA's or glibc's (under
# build-cuda/syslib). On the device, tools/device/run_tests.sh unpacks it at the same relative
# path and links /work/main to the checkout, so the absolute paths compiled into the build (RPATH,
# the tests' source and binary directories) resolve as they do here. Usage (here):
#   tools/device/pack.sh            then: device run, carry [".device"],
#                                   command "bash tools/device/run_tests.sh"
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$PWD" = /work/main ] || echo "pack: note: built in $PWD; run_tests.sh links /work/main to the checkout on the device, so absolute paths compiled here must start with /work/main" >&2
build=${BUILD_DIR:-build-cuda}  # any build dir of this checkout with CUDA ON (build/ is, when AUTO found CUDA)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBENCHHOST_CUDA=ON \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
fi
[ "${SKIP_BUILD:-0}" = 1 ] || cmake --build "$build" -j "$(nproc)"
rm -rf "$build/syslib" && mkdir -p "$build/syslib"
# Every non-CUDA shared library the binaries need (glibc stays: the device's is newer).
dirs=("$build/bin" "$build/lib")
[ -d "$build/test_plugins" ] && dirs+=("$build/test_plugins")  # optional: find would fail (and stop this script) on a missing folder
find "${dirs[@]}" -type f \( -perm -u+x -o -name '*.so*' \) -print0 |
  { xargs -0 ldd 2>/dev/null || true; } | awk '/=> \//{print $3}' | sort -u |
  grep -vE '/usr/local/cuda|/work/main/|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|ld-linux|libcuda\.so|libcudnn|libcublas|libnccl|libcudart' |
  while read -r lib; do cp -L "$lib" "$build/syslib/"; done
grep -q 'BENCHHOST_HAVE_CUDA\|libbenchhost_sdk_cuda' "$build/build.ninja" || { echo "pack: $build is not a CUDA build" >&2; exit 1; }
rm -rf .device && mkdir -p .device
echo "$build" > .device/build_dir
tar -cJf .device/bundle.tar.xz --exclude='*.o' --exclude='CMakeFiles' \
  "$build/bin" "$build/lib" "$build/syslib" $( [ -d "$build/test_plugins" ] && echo "$build/test_plugins")
ls -la .device/bundle.tar.xz
size=$(stat -c %s .device/bundle.tar.xz)
[ "$size" -lt $((60 * 1024 * 1024)) ] || { echo "pack: bundle is $size bytes, over the device tool's carry limit" >&2; exit 1; }

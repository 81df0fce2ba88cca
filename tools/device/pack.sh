#!/usr/bin/env bash
# Pack a CUDA build of benchhost for the GPU machine that the device tool lends.
#
# That machine has CUDA, cuDNN, NCCL and PyTorch but none of Debian's libraries and no network,
# so this copies the build's executables, plugins and tests plus every shared library they link
# that does not come from the CUDA toolkit into .device/ (ignored by git). Name `.device` in the
# tool's `carry`, then run on the device:
#   bash tools/device/run_tests.sh            # the CUDA and parity tests, output under $OUT
# Usage (here): tools/device/pack.sh [build-dir]   (default build-cuda, configured with CUDA ON)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-cuda}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DBENCHHOST_CUDA=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
fi
cmake --build "$build" -j "$(nproc)"
rm -rf .device && mkdir -p .device/bin .device/lib
cp -a "$build"/bin/. .device/bin/
cp -a "$build"/lib/*.so* .device/lib/
[ -d "$build/test_plugins" ] && cp -a "$build/test_plugins" .device/
cp -a configs .device/ 2>/dev/null || true
# Every non-CUDA shared library the binaries need (glibc stays: the device's must be new enough).
find .device -type f \( -perm -u+x -o -name '*.so*' \) -print0 |
  xargs -0 ldd 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
  grep -vE '/usr/local/cuda|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|ld-linux|libcuda\.so' |
  while read -r lib; do cp -L "$lib" .device/lib/; done
strip --strip-unneeded .device/lib/*.so* .device/bin/* .device/bin/plugins/*.so 2>/dev/null || true
du -sh .device

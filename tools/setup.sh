#!/usr/bin/env bash
# Set up a Debian 12 machine for benchhost and build it.
#   tools/setup.sh            install missing packages (apt), configure and build into build/
#   BUILD_DIR=dir tools/setup.sh   build elsewhere
# Extra CMake arguments can be passed in CMAKE_ARGS (e.g. CMAKE_ARGS=-DBENCHHOST_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libtbb-dev libfmt-dev nlohmann-json3-dev libdnnl-dev
  libopenmpi-dev openmpi-bin
  libhdf5-dev libjpeg62-turbo-dev libpng-dev libsndfile1-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist bible-kjv-text
  python3 python3-numpy python3-scipy python3-torch python3-torchvision python3-torchaudio python3-pil
  libsentencepiece-dev sentencepiece espeak-ng sox  # RNN-T: tokenizer, the mini's speech
  chromium  # the HTML report's rendering test (headless)
  libopenblas0-pthread  # an optimised BLAS for the PyTorch peers (Debian's default is the reference BLAS)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build_dir=${BUILD_DIR:-build}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja "${launcher[@]}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
echo "setup: built into $build_dir (host: $build_dir/bin/benchhost, plugins: $build_dir/bin/plugins)"

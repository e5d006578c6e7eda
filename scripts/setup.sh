#!/usr/bin/env bash
# Installs what tcc needs on Debian 12 (only the packages that are missing, so
# a second run is quick), then configures and builds tcc into build/.
# Sourced by scripts/example.sh and scripts/test.sh; safe to run on its own.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
packages=(
  g++ cmake ninja-build
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
  libprotobuf-dev protobuf-compiler libonnx-dev
  python3-onnx python3-torch python3-numpy libonnx-testdata
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} missing packages: ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build="${TCC_BUILD_DIR:-$repo/build}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE=/usr/bin/python3 >"$build.cmake.log" 2>&1 \
    || { cat "$build.cmake.log"; exit 1; }
fi
ninja -C "$build"

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
  clang-19 libfuzzer-19-dev libclang-rt-19-dev
  chromium fonts-dejavu-core
  libopenmpi-dev openmpi-bin
  libopenblas-pthread-dev
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

# The PyPI packages of scripts/requirements.txt, in one virtual environment
# made from the first python3 on PATH and reused while the requirements stay
# the same. TCC_NO_VENV=1 skips it (the tests that need it are then not
# registered).
venv="${TCC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tcc/venv}"
requirements="$repo/scripts/requirements.txt"
venv_python=""
if [ "${TCC_NO_VENV:-0}" != 1 ]; then
  if ! cmp -s "$requirements" "$venv/.tcc-requirements" 2>/dev/null; then
    echo "setup: installing scripts/requirements.txt into $venv (a few minutes the first time)"
    python3 -m venv "$venv" 2>/dev/null || {
      sudo=""; if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
      /usr/bin/python3 -m venv "$venv"
    }
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements" \
      || { echo "setup: error: pip install -r $requirements failed"; exit 1; }
    cp "$requirements" "$venv/.tcc-requirements"
  fi
  venv_python="$venv/bin/python"
fi

# TensorFlow and tf2onnx (scripts/requirements-tf.txt) in a second
# environment, for the Keras models' test; TCC_NO_TF=1 skips it (the test
# is then not registered).
tf_venv="${TCC_TF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tcc/venv-tf}"
tf_requirements="$repo/scripts/requirements-tf.txt"
tf_python=""
if [ "${TCC_NO_VENV:-0}" != 1 ] && [ "${TCC_NO_TF:-0}" != 1 ]; then
  if ! cmp -s "$tf_requirements" "$tf_venv/.tcc-requirements" 2>/dev/null; then
    echo "setup: installing scripts/requirements-tf.txt into $tf_venv (a few minutes the first time)"
    python3 -m venv "$tf_venv"
    "$tf_venv/bin/pip" install -q --disable-pip-version-check -r "$tf_requirements" \
      || { echo "setup: error: pip install -r $tf_requirements failed"; exit 1; }
    cp "$tf_requirements" "$tf_venv/.tcc-requirements"
  fi
  tf_python="$tf_venv/bin/python"
fi

build="${TCC_BUILD_DIR:-$repo/build}"
# TCC_SANITIZE=address,undefined (scripts/test.sh --sanitize) builds with
# those sanitizers, in its own folder (build-sanitize by default).
build_type=Release
sanitize_flags=()
if [ -n "${TCC_SANITIZE:-}" ]; then
  build="${TCC_BUILD_DIR:-$repo/build-sanitize}"
  build_type=RelWithDebInfo
  f="-fsanitize=$TCC_SANITIZE -fno-sanitize-recover=all -fno-omit-frame-pointer"
  sanitize_flags=(-DCMAKE_C_FLAGS="$f" -DCMAKE_CXX_FLAGS="$f" -DCMAKE_EXE_LINKER_FLAGS="$f"
                  -DCMAKE_SHARED_LINKER_FLAGS="$f" -DCMAKE_MODULE_LINKER_FLAGS="$f")
fi
if [ ! -f "$build/build.ninja" ] || ! grep -qs "^TCC_VENV_PYTHON:[A-Z]*=$venv_python\$" "$build/CMakeCache.txt" \
   || ! grep -qs "^TCC_TF_PYTHON:[A-Z]*=$tf_python\$" "$build/CMakeCache.txt"; then
  cmake -G Ninja -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=$build_type \
    -DPython3_EXECUTABLE=/usr/bin/python3 -DTCC_VENV_PYTHON="$venv_python" \
    -DTCC_TF_PYTHON="$tf_python" "${sanitize_flags[@]}" \
    >"$build.cmake.log" 2>&1 || { cat "$build.cmake.log"; exit 1; }
fi
ninja -C "$build"

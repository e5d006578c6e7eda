#!/usr/bin/env bash
# The README's second command: set up, build, and run every test (the lit
# suite and the ONNX backend node tests, through ctest).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh"
build="${TCC_BUILD_DIR:-$repo/build}"
cd "$build"
# Two tests at a time (most of them run two compilers at a time themselves).
ctest --output-on-failure -j "${TCC_TEST_JOBS:-2}"

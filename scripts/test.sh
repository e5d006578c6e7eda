#!/usr/bin/env bash
# The README's second command: set up, build, and run the tests (the lit
# suite, the ONNX backend node tests and the end-to-end checks, through ctest).
#
#   bash scripts/test.sh                 the default tier, in build/ (CI's;
#                                        under 10 minutes on 2 cores)
#   bash scripts/test.sh --all           every test: also those labelled
#                                        `long` (variants; docs/testing.md)
#   bash scripts/test.sh --sanitize=address,undefined [-R REGEX]
#       tcc, tcc-run and the tests' own programs built with those sanitizers
#       (gcc's -fsanitize, halting on the first report) into build-sanitize/,
#       then the lit tests, the runtime tests and the e2e checks: every test
#       but the CUDA emulation's and the ONNX node tests' long runs (the
#       generated steps themselves are not instrumented). Its first build is
#       a whole second build of tcc (RelWithDebInfo, instrumented): slow.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitize=""
regex=""
tier=(-LE long)
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize=*) sanitize="${1#--sanitize=}"; shift ;;
    --sanitize) sanitize="address,undefined"; shift ;;
    -R) regex="$2"; shift 2 ;;
    --all) tier=(); shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$sanitize" ]; then
  export TCC_SANITIZE="$sanitize"
  tier=()  # its own selection below, variants included
  export TCC_BUILD_DIR="${TCC_BUILD_DIR:-$repo/build-sanitize}"
  # Leaks are not errors here (MLIR's and MPI's process-lifetime
  # allocations); everything else stops the program with a report.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:halt_on_error=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  regex="${regex:-^(lit|runtime|runtime-device|onnx-save|loss-scale|cpu-kernels|e2e-gradients|e2e-training|gradient-rules|fusion-fuzz|observability|data-parallel|cuda-emu(-.*)?|cuda-kernels-emulated(-.*)?|hostile-cases)\$}"
fi
bash "$repo/scripts/setup.sh"
build="${TCC_BUILD_DIR:-$repo/build}"
cd "$build"
# Two tests at a time (most of them run two compilers at a time themselves).
ctest --output-on-failure -j "${TCC_TEST_JOBS:-2}" ${tier[@]+"${tier[@]}"} ${regex:+-R "$regex"}

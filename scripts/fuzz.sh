#!/usr/bin/env bash
# libFuzzer harnesses of tcc's readers (test/fuzz/), built with clang-19,
# AddressSanitizer and UndefinedBehaviorSanitizer, and run on their seed
# corpus plus the regression corpus (test/fuzz/regressions/<fuzzer>/: every
# crash found stays there as a test input).
#
#   bash scripts/fuzz.sh [--time SECONDS] [--runs N] [--only NAME] [--out DIR]
#
#   --time S   run each fuzzer for S seconds (default 10)
#   --runs N   or for N executions (libFuzzer's -runs)
#   --smoke    what CI runs: the regression corpus once, then 5 s each
#   --only X   one fuzzer: npy, tokens, checkpoint, manifest (a sharded
#              checkpoint's manifest and shard, and training-flags), hello
#              (the rendezvous's handshake), onnx_save, step_table, import
#              (the ONNX importer through the pipeline up to the memory plan:
#              its build compiles tcc with clang-19 into DIR/import-build,
#              minutes)
#   --out DIR  build folder and corpora (default build-fuzz/)
#
# Prints one line per fuzzer: executions, coverage (edges), crashes; exits 1
# if any crashed. A crash leaves its input in DIR/crashes/<fuzzer>/; add it to
# test/fuzz/regressions/<fuzzer>/ with the fix.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
time_s=10
runs=""
only=""
out="$repo/build-fuzz"
smoke=0
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time_s="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --smoke) smoke=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "fuzz.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
cxx="${TCC_FUZZ_CXX:-clang++-19}"
if ! command -v "$cxx" > /dev/null; then
  echo "fuzz.sh: $cxx not found (apt-get install clang-19 libfuzzer-19-dev)" >&2
  exit 2
fi
mkdir -p "$out"
# The harnesses write each input to a file: in memory where there is
# /dev/shm, in a folder removed at the end.
scratch_parent=/tmp
[ -w /dev/shm ] && scratch_parent=/dev/shm
export TCC_FUZZ_TMPDIR="$(mktemp -d "$scratch_parent/tcc-fuzz.XXXXXX")"
trap 'rm -rf "$TCC_FUZZ_TMPDIR"' EXIT
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$repo" -pthread)
declare -A sources=(
  [npy]="runtime/npy.cpp runtime/posix_io.cpp"
  [tokens]="runtime/train_data.cpp runtime/npy.cpp runtime/posix_io.cpp"
  [checkpoint]="runtime/checkpoint.cpp runtime/posix_io.cpp"
  [manifest]="runtime/checkpoint.cpp runtime/posix_io.cpp runtime/lib/resume_flags.cpp runtime/lib/text.cpp"
  [hello]="-"
  [onnx_save]="runtime/onnx_save.cpp runtime/posix_io.cpp"
  [step_table]="runtime/step_table.cpp runtime/npy.cpp runtime/posix_io.cpp"
)
names=(npy tokens checkpoint manifest hello onnx_save step_table import)
sources[import]=cmake
[ -n "$only" ] && names=("$only")

# Seeds: the project's own files of each kind.
seed() {
  # (head closes the pipes early: no pipefail here)
  set +o pipefail
  local name="$1" dir="$out/corpus/$1"
  mkdir -p "$dir"
  [ -n "$(ls -A "$dir")" ] && return 0
  case "$name" in
    npy) find "$repo/examples" "$repo/build/test" -name '*.npy' -size -64k 2>/dev/null | head -50 |
           while read -r f; do cp "$f" "$dir/"; done ;;
    tokens) head -c 4096 "$repo/examples/data/train.bin" > "$dir/train.bin.seed"
            printf '\x01' | cat - <(find "$repo/build/test" -name '*.npy' -size -16k 2>/dev/null |
              head -1 | xargs -r cat) > "$dir/npy.seed" ;;
    checkpoint) find "$repo/build/test" -name checkpoint.bin -size -64k 2>/dev/null | head -10 |
                  while read -r f; do cp "$f" "$dir/$(echo "$f" | md5sum | cut -c1-8).bin"; done ;;
    manifest) # a sharded checkpoint's two files and its flags, joined as the harness splits them
              find "$repo/build/test" -name 'checkpoint.shard-0-of-2.*' -size -64k 2>/dev/null | head -5 |
                while read -r f; do
                  k="$(dirname "$f")"
                  { cat "$k/checkpoint.bin"; printf TCCSHARD; cat "$f"; printf TCCFLAGS
                    cat "$k/training-flags" 2>/dev/null; } > "$dir/$(echo "$f" | md5sum | cut -c1-8).seed"
                done
              find "$repo/build/test" -name training-flags -size -8k 2>/dev/null | head -5 |
                while read -r f; do { printf TCCFLAGS; cat "$f"; } > "$dir/$(echo "$f" | md5sum | cut -c1-8).flags"; done ;;
    hello) # a version-3 hello for each rank of a four-rank world (token 0x1234), and a version-2 one
           python3 -c '
import struct, sys
d = sys.argv[1]
for r in range(5):
    open("%s/v3-rank%d.seed" % (d, r), "wb").write(
        struct.pack("<IIiiQii64s", 0x2A434354, 3, r, 4, 0x1234, 42, 0, b"fuzzhost"))
open(d + "/v2.seed", "wb").write(struct.pack("<IIiiQ", 0x2A434354, 2, 1, 4, 0x1234))
' "$dir" ;;
    onnx_save) find "$repo/examples" "$repo/test" -name '*.onnx' -size -256k 2>/dev/null | head -30 |
                 while read -r f; do cp "$f" "$dir/"; done ;;
    import) find "$repo/examples" "$repo/test" -name '*.onnx' -size -256k 2>/dev/null |
              while read -r f; do cp "$f" "$dir/$(echo "$f" | md5sum | cut -c1-8).onnx"; done
            find /usr/share/libonnx-testdata/data/node -name model.onnx 2>/dev/null |
              while read -r f; do cp "$f" "$dir/$(echo "$f" | md5sum | cut -c1-8).onnx"; done ;;
  esac
  # libFuzzer needs at least one input to start from
  [ -n "$(ls -A "$dir")" ] || printf 'seed' > "$dir/empty.seed"
  set -o pipefail
}

status=0
for name in "${names[@]}"; do
  [ -n "${sources[$name]:-}" ] || { echo "fuzz.sh: no fuzzer $name" >&2; exit 2; }
  bin="$out/fuzz_$name"
  srcs=()
  [ "$name" = import ] || [ "${sources[$name]}" = - ] ||
    for s in ${sources[$name]}; do srcs+=("$repo/$s"); done
  if [ "$name" = import ]; then
    # tcc itself, instrumented (TCC_FUZZ in CMakeLists.txt).
    if [ ! -f "$out/import-build/build.ninja" ]; then
      cmake -G Ninja -S "$repo" -B "$out/import-build" -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_C_COMPILER="${cxx/clang++/clang}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_FLAGS=-gline-tables-only \
        -DTCC_FUZZ=ON -DTCC_VENV_PYTHON= > "$out/import-build.log" 2>&1
    fi
    ninja -C "$out/import-build" fuzz-import >> "$out/import-build.log" 2>&1 ||
      { echo "fuzz.sh: building fuzz-import failed (see $out/import-build.log)" >&2; exit 1; }
    ln -sf "$out/import-build/bin/fuzz-import" "$bin"
  elif [ ! -x "$bin" ] || [ -n "$(find "$repo/test/fuzz" "$repo/runtime" -newer "$bin" -name '*.[ch]*' | head -1)" ]; then
    "$cxx" "${flags[@]}" "$repo/test/fuzz/fuzz_$name.cpp" "${srcs[@]}" -o "$bin"
  fi
  seed "$name"
  # The importer's harness links Debian's MLIR and LLVM archives, which are
  # not instrumented, with tcc's instrumented code. LLVM's BumpPtrAllocator
  # is a header template: the linker keeps one copy of its slow path, the
  # one compiled in tcc's units, which poisons each new slab through ASan's
  # user-poisoning interface, while the fast path inlined into MLIR's own
  # code never unpoisons what it hands out. Every input then stops in a
  # false use-after-poison in MLIRContext's constructor (Dialect::addType).
  # Turning user poisoning off loses only those allocator annotations: heap,
  # stack and global overflows, use-after-free and UBSan still report.
  asan=(env)
  [ "$name" = import ] && asan=(env "ASAN_OPTIONS=allow_user_poisoning=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}")
  crashes="$out/crashes/$name"
  mkdir -p "$crashes"
  regress="$repo/test/fuzz/regressions/$name"
  log="$out/fuzz_$name.log"
  rc=0
  if [ -d "$regress" ] && [ -n "$(ls -A "$regress")" ]; then
    # Every reproducer found so far, once.
    "${asan[@]}" "$bin" -runs=0 "$regress" > "$log.regress" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
      echo "fuzz_$name: a regression input crashes again (see $log.regress)"
      status=1
      continue
    fi
  fi
  limit=(-max_total_time="$time_s")
  [ -n "$runs" ] && limit=(-runs="$runs")
  [ "$smoke" = 1 ] && limit=(-max_total_time=5)
  (cd "$crashes" && "${asan[@]}" "$bin" "${limit[@]}" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
     -print_final_stats=1 "$out/corpus/$name" > "$log" 2>&1) || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
  found=$(find "$crashes" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  printf 'fuzz_%-11s %10s execs  %6s edges  %s crashes%s\n' "$name" "$execs" "$edges" "$found" \
    "$([ $rc -ne 0 ] && echo "  (exit $rc: $log)")"
  if [ $rc -ne 0 ] || [ "$found" -ne 0 ]; then status=1; fi
done
exit $status

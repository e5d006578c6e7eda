#!/bin/bash
# Prepares bench/gpu/payload/ on a machine with tcc and nvcc (no GPU needed)
# for bench/gpu/run.sh, which runs on the GPU machine (nvcc 13, CMake 4,
# PyTorch, no LLVM): everything tcc must compile is compiled here.
#
#   steps/<model>.so      CUDA steps of the test models (check_cuda_build.py)
#   feeds/<model>/        their input batch; ref/<model>/ the CPU target's
#                         loss and gradients for it (tcc-run --grads-only --dump)
#   steps/demo.so         the bundled demo GPT (CUDA); ref/train_cpu.jsonl the
#                         CPU target's loss curve with train_flags.txt, and
#                         ref/train_cpu_seed<s>.jsonl with --seed 1..4
#   steps/gpt2_<b>.so     GPT-2 small (bench/gpu/export_gpt2.py), compiled with
#                         --no-weights at budget <b> (none, 8G, 5G, 3G);
#                         gpt2_<b>.mem.json its memory report, or gpt2_<b>.err
#                         when tcc finds no plan within the budget;
#                         gpt2.manifest the parameter order for --init-weights;
#                         steps/gpt2_none_unfusedattn.so: unconstrained, with
#                         --no-attention-fusion (attention as cuBLASLt GEMMs
#                         and a softmax kernel), to time the fused attention;
#                         steps/gpt2_none_nopad.so: unconstrained, with
#                         --gemm-padding=off (the vocabulary's 50257 unpadded)
#   steps/gpt2_offload_<b>.so  GPT-2 small at 2G and 1536M with --offload=auto
#                         (state in host memory), or gpt2_offload_<b>.err
#   steps/tinyllama_12G.so  TinyLlama-1.1B's shape (bench/export_large.py) at
#                         --mem-budget=12G (master weights and optimizer state
#                         in pinned host memory), with its memory report, or
#                         tinyllama_12G.err
#
# The folder is packed as bench/gpu/payload.tar.xz, which the device call
# carries and run.sh unpacks.
#
# Usage: bash bench/gpu/prepare.sh   (BUILD=build dir, WORK=scratch dir)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD:-$root/build}"
work="${WORK:-/tmp/tcc-gpu-prepare}"
p="$root/bench/gpu/payload"
tcc="$build/bin/tcc"
tccrun="$build/bin/tcc-run"
rm -rf "$p"
mkdir -p "$p/steps" "$p/ref" "$work"
cd "$root"

echo "== test models: CUDA steps and CPU reference gradients"
/usr/bin/python3 test/e2e/check_cuda_build.py --tcc "$tcc" --tcc-run "$tccrun" \
  --workdir "$work/models" --payload "$p"

echo "== demo GPT: CUDA step and the CPU loss curve"
flags="--data examples/data/train.bin --steps 200 --accum 2 --lr 3e-3 --warmup 20 --lr-schedule cosine --min-lr 3e-4 --seed 0 --print-every 50"
echo "$flags" > "$p/train_flags.txt"
"$tcc" examples/tiny_gpt_demo.onnx --target=cuda -o "$p/steps/demo.so"
"$tcc" examples/tiny_gpt_demo.onnx --target=cpu -o "$work/demo-cpu.so"
# shellcheck disable=SC2086
"$tccrun" "$work/demo-cpu.so" $flags --metrics "$p/ref/train_cpu.jsonl"
# The same run with seeds 1-4 (other data windows): run.sh judges the fp16
# curves against the spread of fp32 curves across seeds, since one fp16 run
# and one fp32 run part ways after the warmup (the loss is chaotic in the
# weights at this learning rate) and a single pair says little.
for s in 1 2 3 4; do
  # shellcheck disable=SC2086
  "$tccrun" "$work/demo-cpu.so" ${flags/--seed 0/--seed $s} --quiet --metrics "$p/ref/train_cpu_seed$s.jsonl"
done

echo "== tcc-run --check-numerics: an fp16 overflow and a NaN (test/tcc/Inputs/make_numerics_models.py)"
/usr/bin/python3 test/tcc/Inputs/make_numerics_models.py "$p/numerics"
for m in big nan; do
  "$tcc" "$p/numerics/$m.onnx" --target=cuda -o "$p/steps/numerics_$m.so" 2> /dev/null
done

echo "== demo GPT with an evaluation step (tcc --with-eval): CUDA step and the CPU validation losses"
"$tcc" examples/tiny_gpt_demo.onnx --target=cuda --with-eval -o "$p/steps/demo_eval.so"
"$tcc" examples/tiny_gpt_demo.onnx --target=cpu --with-eval -o "$work/demo_eval-cpu.so"
"$tccrun" "$work/demo_eval-cpu.so" --eval-only --val-data examples/data/train.bin --eval-batches 20 \
  > "$p/ref/eval_initial_cpu.txt"
# shellcheck disable=SC2086
"$tccrun" "$work/demo_eval-cpu.so" ${flags/--steps 200/--steps 40} --quiet --val-data examples/data/train.bin \
  --eval-every 20 --eval-batches 20 --metrics "$p/ref/eval_train_cpu.jsonl"

echo "== GPT-2 small"
# Traced at batch 1 with a dynamic batch (2 minutes here instead of 14);
# every tcc call below fixes it at 8, which plans the step an export at
# batch 8 gives.
if [ ! -f "$work/gpt2-dyn.onnx" ]; then
  /usr/bin/python3 bench/gpu/export_gpt2.py "$work/gpt2-dyn.onnx" --dynamic-batch
fi
gpt2=("$work/gpt2-dyn.onnx" --shape idx=8x1024 --shape targets=8x1024)
"$tcc" "${gpt2[@]}" --target=cuda --no-weights --emit=source -o - |
  /usr/bin/python3 -c '
import re, sys
src = sys.stdin.read()
table = src[src.index("kParams[] = {"):]
table = table[:table.index("};")]
for name, nbytes in re.findall(r"\{\"([^\"]+)\", \d+, \d+, d\d+, \d+ULL, (\d+)ULL\}", table):
    print(name, nbytes)
' > "$p/gpt2.manifest"
for b in none 8G 5G 4G 3G; do
  budget=()
  # --offload=none: this stage measures recomputation against the budget.
  [ "$b" != none ] && budget=(--mem-budget="$b" --offload=none)
  if ! "$tcc" "${gpt2[@]}" --target=cuda --no-weights "${budget[@]}" \
      --memory-report "$p/gpt2_$b.mem.json" -o "$p/steps/gpt2_$b.so" 2> "$work/gpt2_$b.log"; then
    grep -o "error: .*" "$work/gpt2_$b.log" > "$p/gpt2_$b.err" || true
    rm -f "$p/gpt2_$b.mem.json"
  fi
  cat "$work/gpt2_$b.log"
done
# With host memory: budgets below the smallest device-only plan.
for b in 2G 1536M; do
  if ! "$tcc" "${gpt2[@]}" --target=cuda --no-weights --mem-budget="$b" --offload=auto \
      --memory-report "$p/gpt2_offload_$b.mem.json" -o "$p/steps/gpt2_offload_$b.so" 2> "$work/gpt2_offload_$b.log"; then
    grep -o "error: .*" "$work/gpt2_offload_$b.log" > "$p/gpt2_offload_$b.err" || true
    rm -f "$p/gpt2_offload_$b.mem.json"
  fi
  cat "$work/gpt2_offload_$b.log"
done
"$tcc" "${gpt2[@]}" --target=cuda --no-weights --no-attention-fusion \
  --memory-report "$p/gpt2_none_unfusedattn.mem.json" -o "$p/steps/gpt2_none_unfusedattn.so"
"$tcc" "${gpt2[@]}" --target=cuda --no-weights --gemm-padding=off \
  --memory-report "$p/gpt2_none_nopad.mem.json" -o "$p/steps/gpt2_none_nopad.so"
echo "== TinyLlama-1.1B's shape at --mem-budget=12G (issue 46)"
# bench/export_large.py: the graph, its initializers sparse files (only their
# shapes matter to --no-weights); the venv's torch exports it in minutes.
venv_py="${TCC_VENV:-$HOME/.cache/tcc/venv}/bin/python"
[ -x "$venv_py" ] || venv_py=/usr/bin/python3
if [ ! -f "$work/tinyllama/tinyllama.onnx" ]; then
  "$venv_py" bench/export_large.py tinyllama "$work/tinyllama"
fi
rm -f "$p/tinyllama_12G.err"
if ! "$tcc" "$work/tinyllama/tinyllama.onnx" --target=cuda --no-weights --mem-budget=12G --timing \
    --memory-report "$p/tinyllama_12G.mem.json" -o "$p/steps/tinyllama_12G.so" 2> "$work/tinyllama.log"; then
  grep -o "error: .*" "$work/tinyllama.log" > "$p/tinyllama_12G.err" || echo "error: tcc failed" > "$p/tinyllama_12G.err"
fi
grep -v -e "^ " -e "^===" "$work/tinyllama.log" || true
du -sh "$p"
# One device call carries at most 64 MiB; every step links the CUDA fixed
# half, so the steps are alike and the folder packs about 30:1.
tar -C "$root/bench/gpu" -cf - payload | xz -9 -T0 > "$root/bench/gpu/payload.tar.xz"
ls -la "$root/bench/gpu/payload.tar.xz"

#!/bin/bash
# The GPU check of the CUDA target, in one run on the GPU machine (nvcc 13,
# CMake 4, PyTorch; no LLVM, no network). Prepare bench/gpu/payload/ first
# with bench/gpu/prepare.sh on a machine with tcc, then run this from the
# repository root with that folder present:
#
#   OUT=/tmp/out bash bench/gpu/run.sh
#
# 0. the CUDA kernel library and cuBLASLt's epilogues against the CPU kernels
#    (test/runtime/cuda_kernels_test.cu: 1262 checks, 1256 of them passed on
#    an H200 on 2026-12-04; the 6 of the last-axis slice's row copies not yet
#    run on a GPU; its perf lines time them);
# 1. parity: the fp16 CUDA steps of the test models against the CPU target
#    (loss and every gradient, relative error < 1e-2), and a 200-step
#    training run of the demo GPT against the CPU run's loss curve;
# 1b. validation: the demo's evaluation step (tcc --with-eval), a second step
#    library in the same process, on the initial weights and every 20 steps
#    of a 40-step run, against the CPU's validation losses;
# 1c. tcc-run --check-numerics on the GPU (the check hook after each op,
#    the stream synchronized): an fp16 overflow and a NaN named, and the
#    demo's first steps checked without a stop;
# 2. speed and memory: GPT-2 small, tcc at its unconstrained plan (also with
#    --no-attention-fusion, to time the fused attention kernels) and at
#    --mem-budget 8G/5G/3G, beside PyTorch eager and torch.compile (fp16
#    autocast, GradScaler, fused AdamW) in the same run;
# 3. the budget: the measured device peak against --mem-budget; GPT-2 small
#    with host memory (--offload=auto) at 2G and 1536M, below what the device
#    alone meets;
# 3b. NCCL in a world of one process (TCC_NCCL=1): the data-parallel path's
#    real library calls (communicator, buckets on their own stream), whose
#    sums of one rank must leave the demo run's bytes unchanged;
# 3c. TinyLlama-1.1B's shape at --mem-budget=12G (issue 46): 3 steps from
#    drawn weights, the device peak against the budget;
# 4. while time is left: compute-sanitizer racecheck and memcheck on the
#    attention kernels.
# The steps capture the micro-step as a CUDA graph (the default); the demo run
# and the unconstrained GPT-2 step also run without (--no-cuda-graphs), and
# the unconstrained step once more with TCC_CUDA_PROFILE=1 (op by op: the 30
# ops that take the most time).
# Each stage has a time limit, so one failure does not cost the others.
#
# RUN_STAGES="seeds profile" runs only those stages (keys: kernels parity
# train eval numerics seeds nographs nccl gpt2 offload tinyllama profile eager
# compile table sanitizer; tcc-run is always built), for a short rerun.
# What the device call returns: $OUT/run.log (this output, as it is written)
# and $OUT/results.tgz (every stage's files, packed again after each stage,
# so a cut run still returns what finished: a device call brings back only a
# few files).
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
final="${OUT:-/tmp/tcc-gpu-out}"
out=/tmp/tcc-gpu-results
p=bench/gpu/payload
rm -rf "$out" && mkdir -p "$out" "$final"
exec > >(tee -a "$final/run.log") 2>&1
if [ -f bench/gpu/payload.tar.xz ]; then
  rm -rf "$p" && tar -C bench/gpu -xJf bench/gpu/payload.tar.xz
fi
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
py=${PYTHON:-python3}
want() { [ -z "${RUN_STAGES:-}" ] || [[ " machine build $RUN_STAGES " == *" $1 "* ]]; }
pack() { tar -C "$out" -czf "$final/results.tgz.part" . && mv "$final/results.tgz.part" "$final/results.tgz"; }
# stage KEY TITLE: packs what the last stage wrote; prints the title and
# succeeds if KEY is to run.
stage() {
  pack
  want "$1" || return 1
  echo; echo "== $2 ($(date +%T))"
}
start=$(date +%s)
# GPT-2's initial weights (PyTorch's init, in the step's parameter order)
# and a token stream, made once for the stages that train it.
gpt2_inputs() {
  [ -f /tmp/gpt2_tokens.bin ] && return 0
  timeout 120 $py bench/gpu/torch_bench.py weights $p/gpt2.manifest /tmp/gpt2_weights.bin
  $py -c "import numpy as np; np.random.default_rng(0).integers(0, 50257, 4_000_000, dtype=np.uint16).tofile('/tmp/gpt2_tokens.bin')"
}

stage machine "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

# The kernel test builds (nvcc, about 40 s) while tcc-run does.
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
kernels_build=
if want kernels || want sanitizer; then
  ( $nvcc -std=c++17 -arch=sm_90 -O2 -Iruntime test/runtime/cuda_kernels_test.cu -o /tmp/cuda_kernels_test \
      -lcublasLt -lcudart > "$out/cuda_kernels_build.log" 2>&1 ) &
  kernels_build=$!
fi

stage build "build tcc-run (runtime only)"
if ! { cmake -S . -B /tmp/tcc-rt -DTCC_RUNTIME_ONLY=ON -DCMAKE_BUILD_TYPE=Release > "$out/cmake.log" 2>&1 &&
       cmake --build /tmp/tcc-rt -j 16 --target tcc-run >> "$out/cmake.log" 2>&1; }; then
  tail -30 "$out/cmake.log"; exit 1
fi
tr=/tmp/tcc-rt/bin/tcc-run

if stage kernels "the CUDA kernels and cuBLASLt epilogues vs the CPU kernels"; then
  if [ -n "$kernels_build" ] && wait $kernels_build; then
    timeout 120 /tmp/cuda_kernels_test > "$out/cuda_kernels.log" 2>&1
    tail -40 "$out/cuda_kernels.log"
  else
    echo "the kernel test did not build:"; tail -20 "$out/cuda_kernels_build.log"
  fi
fi

if stage parity "parity: fp16 CUDA gradients vs the CPU target"; then
  models=$(cd $p/feeds && ls)
  for m in $models; do
    timeout 30 $tr $p/steps/$m.so --feed $p/feeds/$m --grads-only --dump "$out/parity/$m" > "$out/parity_$m.log" 2>&1 ||
      { echo "$m: tcc-run failed:"; tail -5 "$out/parity_$m.log"; }
  done
  # shellcheck disable=SC2086
  $py bench/gpu/compare.py parity $p/ref "$out/parity" $models
fi

if stage train "training: 200 steps of the demo GPT, CUDA vs CPU"; then
  # shellcheck disable=SC2046
  timeout 120 $tr $p/steps/demo.so $(cat $p/train_flags.txt) --metrics "$out/train_cuda.jsonl" 2>&1 | tail -6
  $py bench/gpu/compare.py curves $p/ref/train_cpu.jsonl "$out/train_cuda.jsonl"
fi

if stage eval "validation: the evaluation step (tcc --with-eval) beside the training step on the GPU, vs the CPU's"; then
  timeout 60 $tr $p/steps/demo_eval.so --eval-only --val-data examples/data/train.bin --eval-batches 20 \
    > "$out/eval_initial_cuda.txt" 2>&1 || { echo "eval-only failed:"; tail -5 "$out/eval_initial_cuda.txt"; }
  flags=$(cat $p/train_flags.txt)
  # shellcheck disable=SC2086
  timeout 60 $tr $p/steps/demo_eval.so ${flags/--steps 200/--steps 40} --quiet --val-data examples/data/train.bin \
    --eval-every 20 --eval-batches 20 --metrics "$out/eval_train_cuda.jsonl" 2>&1 | tail -3
  $py bench/gpu/compare.py eval $p/ref "$out"
fi

if stage numerics "tcc-run --check-numerics: an fp16 overflow and a NaN named on the GPU; the demo's steps checked without a stop"; then
  # check-numerics.test's models: an infinity in the GEMM (exit 1), a NaN
  # in the square root (exit 1), each op named as in the CUDA emulation.
  timeout 30 $tr $p/steps/numerics_big.so --feed $p/numerics/feed-big --steps 2 --check-numerics \
    > "$out/numerics_big.log" 2>&1
  echo "overflow: exit $? (1 expected); named: $(grep -c 'tcc.matmul proj) made an infinity from finite operands' "$out/numerics_big.log") (1 expected)"
  timeout 30 $tr $p/steps/numerics_nan.so --feed $p/numerics/feed --steps 2 --check-numerics \
    > "$out/numerics_nan.log" 2>&1
  echo "NaN: exit $? (1 expected); named: $(grep -c 'root) made a NaN' "$out/numerics_nan.log") (1 expected)"
  flags=$(cat $p/train_flags.txt)
  # shellcheck disable=SC2086
  timeout 60 $tr $p/steps/demo.so ${flags/--steps 200/--steps 4} --check-numerics --quiet > "$out/numerics_demo.log" 2>&1
  echo "demo, 4 steps checked: exit $? (0 expected)"; tail -3 "$out/numerics_demo.log"
fi

if stage seeds "training: seeds 1-4, fp16 CUDA against the spread of the CPU runs across seeds"; then
  flags=$(cat $p/train_flags.txt)
  for s in 1 2 3 4; do
    # shellcheck disable=SC2086
    timeout 60 $tr $p/steps/demo.so ${flags/--seed 0/--seed $s} --quiet --metrics "$out/train_cuda_seed$s.jsonl" > /dev/null 2>&1 ||
      echo "seed $s: tcc-run failed"
  done
  $py bench/gpu/compare.py seeds $p/ref "$out"
fi

if stage nographs "training: the same run without CUDA graphs (--no-cuda-graphs)"; then
  # shellcheck disable=SC2046
  timeout 120 $tr $p/steps/demo.so $(cat $p/train_flags.txt) --no-cuda-graphs --metrics "$out/train_cuda_nographs.jsonl" 2>&1 | tail -6
  $py bench/gpu/compare.py curves $p/ref/train_cpu.jsonl "$out/train_cuda_nographs.jsonl"
fi

if stage nccl "NCCL, a world of one (TCC_NCCL=1): the demo GPT's NCCL path against the plain run"; then
  # The step loads libnccl.so.2 with dlopen: the system's, else PyTorch's wheel's.
  nccl=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  [ -n "$nccl" ] || nccl=$($py -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
  echo "NCCL library: ${nccl:-libnccl.so.2 (not found; the library path decides)}"
  nflags="--data examples/data/train.bin --steps 20 --accum 2 --lr 3e-3 --seed 0 --quiet"
  # shellcheck disable=SC2086
  timeout 60 $tr $p/steps/demo.so $nflags --dump "$out/nccl_plain" > "$out/nccl_plain.log" 2>&1
  # shellcheck disable=SC2086
  TCC_NCCL=1 TCC_DP_BUCKET_MB=0.05 TCC_NCCL_LIB=${nccl:-libnccl.so.2} timeout 60 $tr $p/steps/demo.so $nflags \
    --dump "$out/nccl_world1" > "$out/nccl_world1.log" 2>&1
  tail -3 "$out/nccl_world1.log"
  if (cd "$out/nccl_plain" && find . -type f | sort | while read -r f; do cmp -s "$f" "../nccl_world1/$f" || echo "$f"; done) | grep -q .; then
    echo "NCCL world of one: the dumps DIFFER from the plain run's"
  elif [ -f "$out/nccl_world1/losses.npy" ]; then
    echo "NCCL world of one: losses and parameters equal the plain run's byte for byte"
  else
    echo "NCCL world of one: no dump"
  fi
fi

if stage gpt2 "GPT-2 small: tcc"; then
  gpt2_inputs
  for b in none 8G 5G 4G 3G; do
    if [ -f $p/gpt2_$b.err ]; then
      cp $p/gpt2_$b.err "$out/payload_err_$b.txt"; echo "$b: $(cat $p/gpt2_$b.err)"; continue
    fi
    timeout 120 $tr $p/steps/gpt2_$b.so --init-weights /tmp/gpt2_weights.bin --data /tmp/gpt2_tokens.bin \
      --steps 30 --accum 1 --lr 1e-4 --print-every 10 --metrics "$out/gpt2_$b.jsonl" 2>&1 | tail -4
  done
  echo "none, attention unfused (--no-attention-fusion):"
  timeout 120 $tr $p/steps/gpt2_none_unfusedattn.so --init-weights /tmp/gpt2_weights.bin --data /tmp/gpt2_tokens.bin \
    --steps 30 --accum 1 --lr 1e-4 --print-every 10 --metrics "$out/gpt2_none_unfusedattn.jsonl" 2>&1 | tail -4
  if [ -f $p/steps/gpt2_none_nopad.so ]; then
    echo "none, GEMMs not padded (--gemm-padding=off):"
    timeout 120 $tr $p/steps/gpt2_none_nopad.so --init-weights /tmp/gpt2_weights.bin --data /tmp/gpt2_tokens.bin \
      --steps 30 --accum 1 --lr 1e-4 --print-every 10 --metrics "$out/gpt2_none_nopad.jsonl" 2>&1 | tail -4
  fi
  echo "none, without CUDA graphs:"
  timeout 120 $tr $p/steps/gpt2_none.so --no-cuda-graphs --init-weights /tmp/gpt2_weights.bin --data /tmp/gpt2_tokens.bin \
    --steps 30 --accum 1 --lr 1e-4 --print-every 10 --metrics "$out/gpt2_none_nographs.jsonl" 2>&1 | tail -4
fi

if stage offload "GPT-2 small with host memory (--offload=auto): budgets the device alone cannot meet"; then
  gpt2_inputs
  # Master weights and optimizer state (and at the smaller budget gradient
  # accumulators) in pinned host memory, updated on the host: the device peak
  # against the budget, tokens/s against the unconstrained step above.
  for b in 2G 1536M; do
    if [ -f $p/gpt2_offload_$b.err ]; then
      cp $p/gpt2_offload_$b.err "$out/payload_err_offload_$b.txt"; echo "$b: $(cat $p/gpt2_offload_$b.err)"; continue
    fi
    [ -f $p/steps/gpt2_offload_$b.so ] || { echo "$b: not in this payload"; continue; }
    timeout 150 $tr $p/steps/gpt2_offload_$b.so --init-weights /tmp/gpt2_weights.bin --data /tmp/gpt2_tokens.bin \
      --steps 15 --accum 1 --lr 1e-4 --print-every 5 --metrics "$out/gpt2_offload_$b.jsonl" 2>&1 | tail -4
  done
fi

if stage tinyllama "TinyLlama-1.1B's shape on a 12 GB budget (--mem-budget=12G), drawn weights (--init=normal), 3 steps"; then
  # Issue 46's promise, never run before: the device peak against the
  # budget, the step time, and a loss that moves.
  if [ -f $p/tinyllama_12G.err ]; then
    echo "tcc could not build it: $(cat $p/tinyllama_12G.err)"
  else
    $py -c "import numpy as np; np.random.default_rng(0).integers(0, 32000, 2_000_000, dtype=np.uint16).tofile('/tmp/tl_tokens.bin')"
    timeout 150 $tr $p/steps/tinyllama_12G.so --init=normal --seed 1 --data /tmp/tl_tokens.bin --labels aligned \
      --steps 3 --accum 1 --lr 1e-4 --metrics "$out/tinyllama_12G.jsonl" 2>&1 | tail -6
    $py -c "import json; m = json.load(open('$p/tinyllama_12G.mem.json')); print('planned:', {k: m[k] for k in m if 'bytes' in k and not isinstance(m[k], (list, dict))})" 2>&1 | head -3
  fi
fi

if stage profile "GPT-2 small: where tcc's step spends its time (TCC_CUDA_PROFILE=1, 6 micro-steps, the first a warm-up, event per op)"; then
  gpt2_inputs
  TCC_CUDA_PROFILE=1 timeout 90 $tr $p/steps/gpt2_none.so --init-weights /tmp/gpt2_weights.bin --data /tmp/gpt2_tokens.bin \
    --steps 6 --accum 1 --lr 1e-4 --print-every 6 > "$out/gpt2_profile.log" 2>&1
  grep -A31 "tcc step profile" "$out/gpt2_profile.log" || tail -5 "$out/gpt2_profile.log"
fi

if stage eager "GPT-2 small: PyTorch eager"; then
  timeout 120 $py bench/gpu/torch_bench.py bench --mode eager > "$out/torch_eager.json" 2> "$out/torch_eager.log" || tail -5 "$out/torch_eager.log"
fi

if stage compile "GPT-2 small: torch.compile"; then
  timeout 200 $py bench/gpu/torch_bench.py bench --mode compile > "$out/torch_compile.json" 2> "$out/torch_compile.log" || tail -5 "$out/torch_compile.log"
fi

if stage table "table"; then
  $py bench/gpu/compare.py gpt2 "$out" | tee "$out/table.txt"
fi

if stage sanitizer "compute-sanitizer racecheck and memcheck on the attention kernels (while time is left)"; then
  # The emulation cannot show races between warps or lanes that a GPU has; the
  # sanitizer can. Only with what is left of RUN_BUDGET_S (default 450 s: the device call is given 480).
  san=/usr/local/cuda/bin/compute-sanitizer
  left=$(( ${RUN_BUDGET_S:-450} - ($(date +%s) - start) ))
  if [ -z "$kernels_build" ] || ! wait $kernels_build; then
    echo "the kernel test did not build"
  elif [ ! -x "$san" ]; then
    echo "no compute-sanitizer"
  elif [ "$left" -lt 60 ]; then
    echo "skipped: ${left} s left"
  else
    for tool in racecheck memcheck; do
      timeout $(( left / 2 - 10 )) "$san" --tool $tool /tmp/cuda_kernels_test attention > "$out/sanitizer_$tool.log" 2>&1
      echo "$tool: exit $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, .* failed" "$out/sanitizer_$tool.log" | tail -3
    done
  fi
fi
pack

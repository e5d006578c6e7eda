#!/usr/bin/env bash
# The README's first command: set up, build, and run tcc's main job on the
# bundled demo: compile a tiny GPT (exported from PyTorch) into a training
# step for the CPU, train it character-level on the bundled corpus for 300
# optimizer steps with gradient accumulation 2, and save the trained ONNX.
# Outputs go to out/ (step library, metrics, trained model).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh"
build="${TCC_BUILD_DIR:-$repo/build}"
cd "$repo"
mkdir -p out
run() { echo "\$ $*"; "$@"; }
echo
run "$build/bin/tcc" examples/tiny_gpt_demo.onnx
echo
run "$build/bin/tcc" examples/tiny_gpt_demo.onnx --target=cpu -o out/demo_step.so
echo
run "$build/bin/tcc-run" out/demo_step.so --data examples/data/train.bin \
  --steps 300 --accum 2 --lr 3e-3 --warmup 20 --lr-schedule cosine --min-lr 3e-4 \
  --print-every 25 --metrics out/demo_metrics.jsonl --save out/tiny_gpt_demo.trained.onnx
echo
echo "trained model: out/tiny_gpt_demo.trained.onnx (metrics: out/demo_metrics.jsonl)"

#!/usr/bin/env bash
# The README's first command: set up, build, and run tcc's main job on the
# bundled example (a tiny GPT exported from PyTorch at opset 17): show what
# tcc understood, compile the training step for the CPU, and run one
# micro-step on the bundled batch (loss and gradients).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh"
build="${TCC_BUILD_DIR:-$repo/build}"
cd "$repo"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo
echo "$ tcc examples/tiny_gpt_opset17.onnx"
"$build/bin/tcc" examples/tiny_gpt_opset17.onnx
echo
echo "$ tcc examples/tiny_gpt_opset17.onnx --target=cpu -o step.so"
"$build/bin/tcc" examples/tiny_gpt_opset17.onnx --target=cpu -o "$out/step.so"
echo "$ tcc-run step.so --feed examples/tiny_gpt_opset17.feed --grads-only --dump out"
"$build/bin/tcc-run" "$out/step.so" --feed examples/tiny_gpt_opset17.feed --grads-only --dump "$out/dump"
echo "gradients written for $(ls "$out/dump/grads" | wc -l) parameters"

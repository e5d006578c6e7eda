#!/usr/bin/env bash
# The README's first command: set up, build, and run tcc's main job on the
# bundled example (a tiny GPT exported from PyTorch at opset 17).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$repo/scripts/setup.sh"
build="${TCC_BUILD_DIR:-$repo/build}"
echo
echo "$ tcc examples/tiny_gpt_opset17.onnx"
cd "$repo"
"$build/bin/tcc" examples/tiny_gpt_opset17.onnx

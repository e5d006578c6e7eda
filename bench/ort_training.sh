#!/usr/bin/env bash
# tcc beside ONNX Runtime Training on the Hugging Face models (bench/ort_training.py).
# Needs the build and the main virtual environment (bash scripts/setup.sh). Makes a
# second environment for onnxruntime-training (it needs torch and conflicts with the
# onnxruntime package): Debian's python3 with its torch 1.13, plus
# scripts/requirements-ort-training.txt. Usage: bash bench/ort_training.sh [WORKDIR]
# (default build/bench-ort-training; build/test/hf-models reuses the ctest run's exports)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TCC_BUILD_DIR:-$repo/build}"
venv="${TCC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tcc/venv}"
ort="${TCC_ORT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tcc/ort-training-venv}"
req="$repo/scripts/requirements-ort-training.txt"
work="${1:-$build/bench-ort-training}"
export HF_HUB_OFFLINE=1
if ! cmp -s "$req" "$ort/.tcc-requirements" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$ort"
  "$ort/bin/pip" install -q --disable-pip-version-check -r "$req"
  cp "$req" "$ort/.tcc-requirements"
fi
# The exports, tcc's float64 gradients and the feeds (the models' own check;
# a WORKDIR where it ran already, such as build/test/hf-models, is reused).
if ! ls "$work"/*/grads/loss.npy >/dev/null 2>&1; then
  "$venv/bin/python" "$repo/test/e2e/check_hf_models.py" --tcc "$build/bin/tcc" \
    --tcc-run "$build/bin/tcc-run" --workdir "$work" --no-cuda-emulation | tail -n 3
fi
"$ort/bin/python" "$repo/bench/ort_training.py" --tcc "$build/bin/tcc" \
  --tcc-run "$build/bin/tcc-run" --workdir "$work" 2> "$work/ort.log"

#!/usr/bin/env bash
# Remakes the README's "Looking at a run" screenshots in docs/images/ with
# headless chromium (scripts/setup.sh installs it and TensorBoard):
#   memory_plot.png  tcc --memory-plot of GPT-2 small (micro-batch 1 x 1024,
#                    exported by bench/gpu/export_gpt2.py, no weights needed)
#                    at --mem-budget=2450M beside its unconstrained plan;
#   tensorboard.png  TensorBoard's time series of the demo trained 200 steps
#                    with tcc-run --tensorboard;
#   trace.png        the demo's --trace (CPU step, its 2 traced optimizer steps) drawn by
#                    scripts/trace_timeline.py (Perfetto opens the same file).
# Usage: bash scripts/screenshots.sh [WORKDIR]   (default /tmp/tcc-screenshots)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TCC_BUILD_DIR:-$repo/build}"
venv="${TCC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tcc/venv}"
work="${1:-/tmp/tcc-screenshots}"
out="$repo/docs/images"
mkdir -p "$work" "$out"
shot() { # URL-or-file PNG WIDTHxHEIGHT [extra chromium flags]
  local size="$3"
  timeout 120 chromium --headless --no-sandbox --disable-dev-shm-usage --hide-scrollbars \
    --user-data-dir="$work/chromium" --window-size="${size/x/,}" "${@:4}" \
    --screenshot="$2" "$1" 2>"$work/chromium.log" >/dev/null ||
    { cat "$work/chromium.log"; exit 1; }
}

# The memory plan of GPT-2 small.
[ -f "$work/gpt2.onnx" ] ||
  /usr/bin/python3 "$repo/bench/gpu/export_gpt2.py" "$work/gpt2.onnx" --batch 1 --seq 1024
"$build/bin/tcc" "$work/gpt2.onnx" --target=cuda --no-weights --mem-budget=2450M \
  --memory-plot "$work/memory_plot.html" --memory-plot-compare=none
shot "file://$work/memory_plot.html" "$out/memory_plot.png" 1600x900

# The demo, traced and logged for TensorBoard.
"$build/bin/tcc" "$repo/examples/tiny_gpt_demo.onnx" --target=cpu -o "$work/demo.so"
rm -rf "$work/tb"
"$build/bin/tcc-run" "$work/demo.so" --data "$repo/examples/data/train.bin" --steps 200 --accum 2 \
  --lr 3e-3 --warmup 20 --lr-schedule cosine --min-lr 3e-4 --quiet \
  --trace "$work/trace.json" --tensorboard "$work/tb/tiny_gpt_demo"
/usr/bin/python3 "$repo/scripts/trace_timeline.py" "$work/trace.json" -o "$work/trace.svg"
shot "file://$work/trace.svg" "$out/trace.png" 1600x240

port=$((16000 + RANDOM % 2000))
"$venv/bin/tensorboard" --logdir "$work/tb" --host 127.0.0.1 --port "$port" >"$work/tensorboard.log" 2>&1 &
tb=$!
trap 'kill $tb 2>/dev/null || true' EXIT
for _ in $(seq 60); do
  curl -sf "http://127.0.0.1:$port/" >/dev/null && break
  sleep 0.5
done
shot "http://127.0.0.1:$port/?darkMode=false#timeseries" "$out/tensorboard.png" 1600x1000 \
  --enable-unsafe-swiftshader --virtual-time-budget=25000
echo "screenshots: $out/{memory_plot,trace,tensorboard}.png"

#!/usr/bin/env bash
# The same fine-tuning trial with tcc (README's loop): text to tokens, the
# export, the compile with an evaluation step, training with validation,
# the weights back as safetensors. bench/glue_lines.py counts its lines.
#   bash bench/glue/tcc_loop.sh MODEL_DIR TOKENIZER_DIR corpus.txt OUT [STEPS] [TCC_FLAGS...]
set -euo pipefail
model=$1 tok=$2 text=$3 out=$4 steps=${5:-1000}; shift $(( $# < 5 ? $# : 5 ))
here="$(cd "$(dirname "$0")/../.." && pwd)"
python "$here/python/tcc_hf.py" tokens "$text" --tokenizer "$tok" --out "$out/data"
python "$here/examples/hf_export.py" "$model" --batch 8 --seq 256 --out "$out"
tcc "$out/model.onnx" --mem-budget=12G --with-eval "$@" -o "$out/step.so"
tcc-run "$out/step.so" --data "$out/data/train.bin" --val-data "$out/data/val.bin" --accum 4 \
    --eval-every 100 --steps "$steps" --lr 1e-3 --checkpoint "$out/ck" \
    --save "$out/trained.infer.onnx" --model "$out/model.infer.onnx"
python "$here/python/tcc_hf.py" safetensors "$out/trained.infer.onnx" "$out/hf" --config-from "$out/config"

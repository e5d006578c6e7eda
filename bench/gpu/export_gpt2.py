#!/usr/bin/python3
"""Exports GPT-2 small (124M parameters: 12 layers, width 768, 12 heads,
vocabulary 50257, context 1024) for the GPU benchmark, with the loss inside
the graph, micro-batch B x 1024 tokens.

Usage: /usr/bin/python3 bench/gpu/export_gpt2.py OUT.onnx [--batch 8] [--seq 1024]
           [--dropout P] [--dynamic-batch]

--dropout P gives it GPT-2's dropouts (embeddings, attention probabilities,
residual branches; Hugging Face's GPT-2 has 0.1); the default is none.

The model class is test/models/export_models.py's TinyGPT (tied embeddings,
tanh GELU, GPT-2 init); bench/gpu/torch_bench.py times the same class in
PyTorch. Exported with training=TRAINING, do_constant_folding=False, so the
initializer names are the PyTorch parameter names.

--dynamic-batch traces at batch 1 with the batch dimension of idx and
targets dynamic; `tcc --shape idx=8x1024 --shape targets=8x1024` then plans
the same step as an export at batch 8 (the planned IR is identical but for
the file name), and the export takes about 2 minutes on 2 cores instead of
about 14 (the trace runs the model at the traced batch).
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "test", "models"))
from export_models import TinyGPT  # noqa: E402


def gpt2_small(seq, dropout=0.0):
    return TinyGPT(vocab=50257, block_size=seq, n_embd=768, n_layer=12, n_head=12,
                   gelu_approx="tanh", embd_pdrop=dropout, attn_pdrop=dropout,
                   resid_pdrop=dropout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--dynamic-batch", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = gpt2_small(a.seq, a.dropout)
    model.train()
    idx = torch.zeros(1 if a.dynamic_batch else a.batch, a.seq, dtype=torch.long)
    dynamic = {"idx": {0: "batch"}, "targets": {0: "batch"}} if a.dynamic_batch else None
    # Traced without autograd: the graph is the same, and the trace does not
    # keep 8 x 1024 tokens' activations for a backward pass (with dropout,
    # that ran this 24 GiB machine out of memory).
    with torch.no_grad():
        torch.onnx.export(model, (idx, idx), a.out,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=17,
                          input_names=["idx", "targets"], output_names=["loss"],
                          dynamic_axes=dynamic)
    n = sum(p.numel() for p in model.parameters())
    if a.dynamic_batch:
        print("%s: GPT-2 small, %d parameters, dynamic batch: tcc --shape idx=%dx%d --shape targets=%dx%d"
              % (a.out, n, a.batch, a.seq, a.batch, a.seq))
    else:
        print("%s: GPT-2 small, %d parameters, micro-batch %d x %d" % (a.out, n, a.batch, a.seq))


if __name__ == "__main__":
    main()

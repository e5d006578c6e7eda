#!/usr/bin/python3
"""Exports the large models of bench/offload_plans.py for `tcc --no-weights`
plans: the graph with its initializers as external data files whose bytes
are never written (sparse files of the right size; `--no-weights` checks
sizes and reads none), so a 1.5B-parameter model takes seconds of disk, not
6 GB.

Usage: ~/.cache/tcc/venv/bin/python bench/export_large.py gpt2-xl|tinyllama OUT_DIR [--seq 2048]
           [--layers N]

- gpt2-xl: GPT-2 XL's shape (48 layers, width 1600, 25 heads, vocabulary
  50257, tied embeddings), test/models/export_models.py's TinyGPT, with a
  2048-token context.
- tinyllama: TinyLlama-1.1B's shape (width 2048, 22 layers, 32 heads, 4
  key/value heads, SwiGLU FFN 5632, vocabulary 32000, untied output), the
  llama2.c model written out below (RMSNorm, rotary tables as buffers, an
  additive causal mask buffer, grouped-query attention as llama2.c's
  repeat_kv writes it).

Both with the loss in the graph, micro-batch 1 x SEQ, exported by the
TorchScript exporter (opset 17, training mode, no constant folding) of the
venv's torch 2.x (scripts/setup.sh makes it; Debian's torch 1.13 works too,
forty times slower). The parameters are
zeros: only their shapes matter to the plan.
"""
import argparse
import math
import os
import sys

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "models"))
from export_models import TinyGPT  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


class LlamaBlock(nn.Module):
    def __init__(self, d, n_head, n_kv, hidden):
        super().__init__()
        self.n_head, self.n_kv, self.hs = n_head, n_kv, d // n_head
        self.attention_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, n_kv * self.hs, bias=False)
        self.wv = nn.Linear(d, n_kv * self.hs, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)

    @staticmethod
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.attention_norm(x)
        q = self.rope(self.wq(h).view(B, T, self.n_head, self.hs), cos, sin)
        k = self.rope(self.wk(h).view(B, T, self.n_kv, self.hs), cos, sin)
        v = self.wv(h).view(B, T, self.n_kv, self.hs)
        # Each key/value head serves n_head / n_kv query heads (llama2.c's
        # repeat_kv: expand, then merge the two head axes).
        rep = self.n_head // self.n_kv
        k = k[:, :, :, None, :].expand(B, T, self.n_kv, rep, self.hs).reshape(B, T, self.n_head, self.hs)
        v = v[:, :, :, None, :].expand(B, T, self.n_kv, rep, self.hs).reshape(B, T, self.n_head, self.hs)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs)) + mask
        y = torch.matmul(F.softmax(att, dim=-1), v).transpose(1, 2).reshape(B, T, C)
        x = x + self.wo(y)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, vocab=32000, d=2048, n_layer=22, n_head=32, n_kv=4, hidden=5632,
                 seq=2048):
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaBlock(d, n_head, n_kv, hidden) for _ in range(n_layer)])
        self.norm = RMSNorm(d)
        self.output = nn.Linear(d, vocab, bias=False)
        hs = d // n_head
        freqs = 1.0 / (10000.0 ** (torch.arange(0, hs, 2).float() / hs))
        angles = torch.outer(torch.arange(seq).float(), freqs)
        self.register_buffer("freqs_cos", torch.cos(angles).view(1, seq, 1, hs // 2))
        self.register_buffer("freqs_sin", torch.sin(angles).view(1, seq, 1, hs // 2))
        self.register_buffer("mask", torch.triu(torch.full((1, 1, seq, seq), float("-inf")),
                                                diagonal=1))

    def forward(self, idx, targets):
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x, self.freqs_cos, self.freqs_sin, self.mask)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


def build(name, seq, layers=None):
    if name == "gpt2-xl":
        return TinyGPT(vocab=50257, block_size=seq, n_embd=1600, n_layer=layers or 48,
                       n_head=25, gelu_approx="tanh")
    if name == "tinyllama":
        return Llama(seq=seq, n_layer=layers or 22)
    sys.exit("unknown model %s (gpt2-xl or tinyllama)" % name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out_dir")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=None,
                    help="fewer (or more) layers than the model's own, the rest of its shape kept")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    # Zeros instead of the modules' random init (a memset, where drawing
    # 1.5B random numbers takes minutes); denormal garbage from unset memory
    # would make the trace's forward pass crawl.
    torch.set_flush_denormal(True)
    orig = {f: getattr(nn.init, f) for f in ("normal_", "zeros_", "kaiming_uniform_",
                                             "uniform_", "ones_")}
    for f in orig:
        setattr(nn.init, f, lambda t, *args, **kw: t.data.zero_())
    try:
        model = build(a.model, a.seq, a.layers)
    finally:
        for f, fn in orig.items():
            setattr(nn.init, f, fn)
    model.train()
    idx = torch.zeros(1, a.seq, dtype=torch.long)
    tmp = os.path.join(a.out_dir, "tmp.onnx")
    # The TorchScript exporter (torch 2.x: dynamo=False) runs the forward
    # pass once; torch 2.x's BLAS does it in about a minute, Debian's torch
    # 1.13 (reference BLAS, one thread) in about forty.
    extra = {} if torch.__version__.startswith("1.") else {"dynamo": False}
    with torch.no_grad():
        torch.onnx.export(model, (idx, idx), tmp, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=17,
                          input_names=["idx", "targets"], output_names=["loss"], **extra)
    params = {n for n, _ in model.named_parameters()}
    del model
    # The parameters' bytes go to one external data file and are never
    # written (a sparse file); buffers (the mask, the rotary tables) keep
    # their values, which tcc reads to tell them from parameters and to
    # recognise the causal mask.
    from onnx.external_data_helper import load_external_data_for_tensor
    m = onnx.load(tmp, load_external_data=False)

    def inline(t):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            load_external_data_for_tensor(t, a.out_dir)
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT

    # Constants (GPT-2's causal mask is one) keep their values too.
    for node in m.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                inline(attr.t)
    offset = 0
    data = "weights.bin"
    for t in m.graph.initializer:
        if t.name not in params:
            inline(t)
            continue
        size = None
        for kv in t.external_data:
            if kv.key == "length":
                size = int(kv.value)
            elif kv.key == "location" and size is None:
                size = os.path.getsize(os.path.join(a.out_dir, kv.value))
        if size is None:
            if not t.HasField("raw_data"):
                continue
            size = len(t.raw_data)
            # Small initializers stay inline (their bytes are kept).
            if size < 1 << 20:
                continue
            t.ClearField("raw_data")
        old = [kv.value for kv in t.external_data if kv.key == "location"]
        for path in old:
            p = os.path.join(a.out_dir, path)
            if os.path.exists(p):
                os.remove(p)
        del t.external_data[:]
        for k, v in (("location", data), ("offset", str(offset)), ("length", str(size))):
            e = t.external_data.add()
            e.key, e.value = k, v
        t.data_location = onnx.TensorProto.EXTERNAL
        offset += (size + 4095) // 4096 * 4096
    with open(os.path.join(a.out_dir, data), "wb") as f:
        f.truncate(offset)
    out = os.path.join(a.out_dir, a.model + ".onnx")
    onnx.save(m, out)
    os.remove(tmp)
    for f in os.listdir(a.out_dir):  # any per-tensor files torch left
        if f not in (data, os.path.basename(out)):
            os.remove(os.path.join(a.out_dir, f))
    print("%s: %s, micro-batch 1 x %d, %d bytes of (unwritten) weights"
          % (out, a.model, a.seq, offset))


if __name__ == "__main__":
    main()

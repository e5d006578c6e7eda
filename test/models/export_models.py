#!/usr/bin/python3
"""Export small PyTorch test models to ONNX for tcc tests.

Usage:
    /usr/bin/python3 test/models/export_models.py OUTDIR [--only NAME ...]

For each model this writes
    OUTDIR/<name>.onnx
    OUTDIR/<name>.feed/<input_name>.npy   (one micro-batch sample input)
and prints one line: name, opset, node count, sorted op-type histogram.

All exports use training mode with constant folding disabled so that the ONNX
initializer names equal the PyTorch parameter names (e.g. `wte.weight`).
Requires torch (1.13) and onnx (1.12); run with /usr/bin/python3.
"""

import argparse
import collections
import math
import os
import sys

import numpy as np
import torch
try:  # the model classes are also used where onnx is absent (bench/gpu)
    import onnx
except ImportError:
    onnx = None
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import tcc_export  # noqa: E402  (its objective probe; it imports nothing at load)


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, attn_pdrop=0.0, resid_pdrop=0.0):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.head_size = n_embd // n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        # GPT-2's dropouts (nn.Identity at 0, so the default export is
        # unchanged).
        self.attn_dropout = nn.Dropout(attn_pdrop) if attn_pdrop else nn.Identity()
        self.resid_dropout = nn.Dropout(resid_pdrop) if resid_pdrop else nn.Identity()
        self.register_buffer(
            "mask",
            torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)),
            persistent=False,
        )

    def forward(self, x):
        B, T, C = x.shape  # traced: view shapes export as Unsqueeze/Concat
        hs = self.head_size  # python int, keeps the scale a plain constant
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = torch.matmul(att, v)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class GPTMLP(nn.Module):
    def __init__(self, n_embd, gelu_approx, resid_pdrop=0.0):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.gelu_approx = gelu_approx
        self.dropout = nn.Dropout(resid_pdrop) if resid_pdrop else nn.Identity()

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate=self.gelu_approx)))


class GPTBlock(nn.Module):
    def __init__(self, n_embd, n_head, block_size, gelu_approx, attn_pdrop=0.0,
                 resid_pdrop=0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, attn_pdrop, resid_pdrop)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = GPTMLP(n_embd, gelu_approx, resid_pdrop)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class TinyGPT(nn.Module):
    def __init__(self, vocab=65, block_size=16, n_embd=32, n_layer=2, n_head=4,
                 gelu_approx="none", with_loss=True, embd_pdrop=0.0, attn_pdrop=0.0,
                 resid_pdrop=0.0):
        super().__init__()
        self.vocab = vocab
        self.with_loss = with_loss
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(embd_pdrop) if embd_pdrop else nn.Identity()
        self.h = nn.ModuleList(
            [GPTBlock(n_embd, n_head, block_size, gelu_approx, attn_pdrop, resid_pdrop)
             for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.register_buffer("pos", torch.arange(block_size, dtype=torch.long),
                             persistent=False)
        # GPT-2 style init (std 0.02) so the initial loss is ~ln(vocab) rather
        # than the ~20 that N(0,1) tied embeddings would give.
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, mean=0.0, std=0.02)
                if getattr(mod, "bias", None) is not None:
                    nn.init.zeros_(mod.bias)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.drop(self.wte(idx) + self.wpe(self.pos[:T]))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if not self.with_loss:
            return logits
        return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


class BertLayer(nn.Module):
    def __init__(self, hidden, n_head):
        super().__init__()
        self.n_head = n_head
        self.head_size = hidden // n_head
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, 4 * hidden)
        self.output = nn.Linear(4 * hidden, hidden)
        self.out_ln = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, ext_mask):
        B, T, C = x.shape
        hs = self.head_size

        def heads(t):
            return t.view(B, T, self.n_head, hs).transpose(1, 2)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hs) + ext_mask
        probs = F.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).contiguous().view(B, T, C)
        x = self.attn_ln(x + self.attn_out(ctx))  # post-LN
        x = self.out_ln(x + self.output(F.gelu(self.intermediate(x))))
        return x


class BertMLM(nn.Module):
    def __init__(self, vocab=50, seq=12, hidden=32, n_layer=2, n_head=4):
        super().__init__()
        self.vocab = vocab
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(seq, hidden)
        self.emb_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(hidden, n_head) for _ in range(n_layer)])
        self.mlm_dense = nn.Linear(hidden, hidden)
        self.mlm_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.mlm_decoder = nn.Linear(hidden, vocab)
        self.register_buffer("pos", torch.arange(seq, dtype=torch.long), persistent=False)

    def forward(self, input_ids, attention_mask, labels):
        B, T = input_ids.shape
        x = self.word_embeddings(input_ids) + self.position_embeddings(self.pos[:T])
        x = self.emb_ln(x)
        ext_mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, ext_mask)
        h = self.mlm_ln(F.gelu(self.mlm_dense(x)))
        logits = self.mlm_decoder(h)
        return F.cross_entropy(logits.view(-1, self.vocab), labels.view(-1),
                               ignore_index=-100)


class MLPGemm(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x, target):
        pred = self.fc3(torch.tanh(self.fc2(F.relu(self.fc1(x)))))
        # F.mse_loss has no ONNX symbolic in torch 1.13; spell it out.
        return torch.mean((pred - target) * (pred - target))


class WideRows(nn.Module):
    """LayerNorm and softmax over rows of 1200 features: on the CUDA target
    their backward passes are row fusions with one block per row (rows over
    1024 elements), which the other test models' short rows do not reach."""

    def __init__(self, width=1200):
        super().__init__()
        self.fc = nn.Linear(16, width)
        self.ln = nn.LayerNorm(width)
        self.out = nn.Linear(width, 8)

    def forward(self, x, target):
        h = self.ln(self.fc(x))
        pred = self.out(torch.softmax(h, dim=-1) * h)
        return torch.mean((pred - target) * (pred - target))


class MHADecoder(nn.Module):
    def __init__(self, vocab=40, seq=10, d=32, n_head=4):
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(seq, d)
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(embed_dim=d, num_heads=n_head, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        causal = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        self.register_buffer("causal_mask", causal, persistent=False)
        self.register_buffer("pos", torch.arange(seq, dtype=torch.long), persistent=False)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.tok(idx) + self.pos_emb(self.pos[:T])
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=self.causal_mask[:T, :T], need_weights=False)
        x = x + a
        x = x + self.fc2(F.relu(self.fc1(self.ln2(x))))
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


class EncoderDropout(nn.Module):
    """nn.TransformerEncoder as a user writes it, with its default dropout of
    0.1 (on the attention weights inside nn.MultiheadAttention, after the
    attention, in the feed-forward block and after it: 4 per layer), an
    embedding and a classifier head per token. GELU rather than the default
    ReLU: a pre-activation within fp16 rounding of 0 flips ReLU's gradient
    between the fp16 CUDA target and the CPU one (one element, over the
    parity bound, at this size), which is not what the model checks."""

    def __init__(self, vocab=40, d=32, n_head=4, n_layer=2):
        super().__init__()
        self.vocab = vocab
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, n_head, 2 * d, dropout=0.1, activation="gelu",
                                           batch_first=True)
        self.enc = nn.TransformerEncoder(layer, n_layer)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, targets):
        logits = self.head(self.enc(self.emb(idx)))
        return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


class BufferedGPT(nn.Module):
    """Buffers that an exporter writes as initializers and PyTorch never
    trains, as llama2.c and nanoGPT register them (persistent, so they are in
    the ONNX file): rotary tables `freqs_cos`/`freqs_sin` ([T, head/2],
    llama2.c's precompute_freqs_cis), and per attention either llama2.c's
    additive mask (0 / -inf, mask="additive") or nanoGPT's float tril `bias`
    read through `== 0` (mask="tril"). RMSNorm and a SwiGLU MLP as in
    llama2.c. tcc must keep the buffers fixed and still fuse the attentions."""

    def __init__(self, mask, vocab=48, seq=12, d=32, n_head=4, n_layer=2):
        super().__init__()
        self.vocab, self.n_head, self.mask_kind = vocab, n_head, mask
        hs = d // n_head
        self.tok = nn.Embedding(vocab, d)
        self.qkv = nn.ModuleList([nn.Linear(d, 3 * d, bias=False) for _ in range(n_layer)])
        self.proj = nn.ModuleList([nn.Linear(d, d, bias=False) for _ in range(n_layer)])
        self.w1 = nn.ModuleList([nn.Linear(d, 2 * d, bias=False) for _ in range(n_layer)])
        self.w3 = nn.ModuleList([nn.Linear(d, 2 * d, bias=False) for _ in range(n_layer)])
        self.w2 = nn.ModuleList([nn.Linear(2 * d, d, bias=False) for _ in range(n_layer)])
        self.norm = nn.Parameter(torch.ones(2 * n_layer + 1, d))
        self.head = nn.Linear(d, vocab, bias=False)
        freqs = 1.0 / (10000.0 ** (torch.arange(0, hs, 2).float() / hs))
        angles = torch.outer(torch.arange(seq).float(), freqs)
        self.register_buffer("freqs_cos", torch.cos(angles))
        self.register_buffer("freqs_sin", torch.sin(angles))
        if mask == "additive":
            self.register_buffer("mask", torch.triu(
                torch.full((1, 1, seq, seq), float("-inf")), diagonal=1))
        else:
            self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def rms(self, x, i):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.norm[i]

    def rope(self, x, T):
        half = x.shape[-1] // 2
        cos = self.freqs_cos[:T].view(1, T, 1, half)
        sin = self.freqs_sin[:T].view(1, T, 1, half)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.tok(idx)
        C, H = x.shape[-1], self.n_head
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](self.rms(x, 2 * i)).split(C, dim=2)
            q = self.rope(q.view(B, T, H, C // H), T).transpose(1, 2)
            k = self.rope(k.view(B, T, H, C // H), T).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            if self.mask_kind == "additive":
                att = att + self.mask[:, :, :T, :T]
            else:
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = torch.matmul(F.softmax(att, dim=-1), v).transpose(1, 2).reshape(B, T, C)
            x = x + self.proj[i](y)
            h = self.rms(x, 2 * i + 1)
            x = x + self.w2[i](F.silu(self.w1[i](h)) * self.w3[i](h))
        logits = self.head(self.rms(x, -1))
        return F.cross_entropy(logits.view(-1, self.vocab), targets.view(-1))


# ---------------------------------------------------------------------------
# Model registry: name -> (builder, opset, {input_name: tensor}, [output names])
# ---------------------------------------------------------------------------


def _tokens(gen, shape, vocab):
    return torch.randint(0, vocab, shape, generator=gen, dtype=torch.long)


def spec_tiny_gpt_opset14(gen):
    model = TinyGPT(gelu_approx="none", with_loss=True)
    feed = {"idx": _tokens(gen, (4, 16), 65), "targets": _tokens(gen, (4, 16), 65)}
    return model, 14, feed, ["loss"]


def spec_tiny_gpt_opset17(gen):
    model = TinyGPT(gelu_approx="tanh", with_loss=True)
    feed = {"idx": _tokens(gen, (4, 16), 65), "targets": _tokens(gen, (4, 16), 65)}
    return model, 17, feed, ["loss"]


def spec_bert_mlm(gen):
    model = BertMLM()
    B, T, V = 3, 12, 50
    input_ids = _tokens(gen, (B, T), V)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, 9:] = 0   # padding at the end of sequence 1
    attention_mask[2, 6:] = 0   # more padding in sequence 2
    labels = torch.full((B, T), -100, dtype=torch.long)
    pick = torch.rand((B, T), generator=gen) < 0.3
    pick[:, 0] = True            # at least one predicted token per row
    pick &= attention_mask.bool()
    labels[pick] = _tokens(gen, (B, T), V)[pick]
    feed = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    return model, 14, feed, ["loss"]


def spec_mlp_gemm(gen):
    model = MLPGemm()
    feed = {"x": torch.randn((8, 16), generator=gen),
            "target": torch.randn((8, 4), generator=gen)}
    return model, 13, feed, ["loss"]


def spec_mha_decoder(gen):
    model = MHADecoder()
    feed = {"idx": _tokens(gen, (2, 10), 40), "targets": _tokens(gen, (2, 10), 40)}
    return model, 17, feed, ["loss"]


def spec_wide_rows(gen):
    model = WideRows()
    feed = {"x": torch.randn((6, 16), generator=gen),
            "target": torch.randn((6, 8), generator=gen)}
    return model, 17, feed, ["loss"]


def spec_tiny_gpt_logits(gen):
    model = TinyGPT(gelu_approx="tanh", with_loss=False)
    feed = {"idx": _tokens(gen, (4, 16), 65)}
    return model, 17, feed, ["logits"]


def spec_tiny_gpt_dropout(gen):
    """GPT-2's dropouts (embeddings, attention probabilities, residual
    branches) at 0.1: 7 Dropout nodes. Its vocabulary of 80 covers
    examples/data/train.bin (runtime tests)."""
    model = TinyGPT(vocab=80, gelu_approx="tanh", with_loss=True, embd_pdrop=0.1,
                    attn_pdrop=0.1, resid_pdrop=0.1)
    feed = {"idx": _tokens(gen, (4, 16), 80), "targets": _tokens(gen, (4, 16), 80)}
    return model, 17, feed, ["loss"]


def spec_encoder_dropout(gen):
    model = EncoderDropout()
    feed = {"idx": _tokens(gen, (2, 10), 40), "targets": _tokens(gen, (2, 10), 40)}
    return model, 17, feed, ["loss"]


def spec_llama2c_buffers(gen):
    model = BufferedGPT("additive")
    feed = {"idx": _tokens(gen, (2, 12), 48), "targets": _tokens(gen, (2, 12), 48)}
    return model, 17, feed, ["loss"]


def spec_nanogpt_buffers(gen):
    model = BufferedGPT("tril")
    feed = {"idx": _tokens(gen, (2, 12), 48), "targets": _tokens(gen, (2, 12), 48)}
    return model, 17, feed, ["loss"]


# How each token model's loss reads its labels, which the export's probe must
# find (python/tcc_export.probe_labels_shift): nanoGPT's aligned targets.
OBJECTIVE_SHIFT = {n: "aligned" for n in (
    "tiny_gpt_opset14", "tiny_gpt_opset17", "mha_decoder", "tiny_gpt_dropout",
    "tiny_gpt_dropout_unfused", "llama2c_buffers", "nanogpt_buffers", "bert_mlm")}
OBJECTIVE_TASK = dict({n: "causal-lm" for n in OBJECTIVE_SHIFT}, bert_mlm="masked-lm")


# Float initializers that are buffers, not parameters (export_one checks the
# exported file has exactly the parameters and these).
BUFFERS = {
    "llama2c_buffers": {"freqs_cos", "freqs_sin", "mask"},
    "nanogpt_buffers": {"freqs_cos", "freqs_sin", "bias"},
}

MODELS = collections.OrderedDict([
    ("tiny_gpt_opset14", spec_tiny_gpt_opset14),
    ("tiny_gpt_opset17", spec_tiny_gpt_opset17),
    ("bert_mlm", spec_bert_mlm),
    ("mlp_gemm", spec_mlp_gemm),
    ("mha_decoder", spec_mha_decoder),
    ("tiny_gpt_logits", spec_tiny_gpt_logits),
    ("wide_rows", spec_wide_rows),
    ("tiny_gpt_dropout", spec_tiny_gpt_dropout),
    ("tiny_gpt_dropout_unfused", spec_tiny_gpt_dropout),
    ("encoder_dropout", spec_encoder_dropout),
    # tiny_gpt_opset17 again, for tcc flags of its own (check_gradients.TCC_FLAGS).
    ("tiny_gpt_chunked_loss", spec_tiny_gpt_opset17),
    ("tiny_gpt_unfused_attention", spec_tiny_gpt_opset17),
    ("bert_mlm_chunked_loss", spec_bert_mlm),
    ("llama2c_buffers", spec_llama2c_buffers),
    ("nanogpt_buffers", spec_nanogpt_buffers),
])


# ---------------------------------------------------------------------------
# Export + checks
# ---------------------------------------------------------------------------

FLOAT_TYPES = {1, 11, 10, 16}  # onnx.TensorProto FLOAT, DOUBLE, FLOAT16, BFLOAT16


def _cache_dir(name):
    """Where export_one keeps model `name`'s export: TCC_MODEL_CACHE (default
    ~/.cache/tcc/test-models), under a key of this file's bytes and the
    torch and onnx versions, so that a change to any of them exports anew.
    The export is deterministic (fixed seeds), so the tests that export the
    same model (e2e-gradients, e2e-training, cuda-build, cuda-emulation,
    ...) share one export instead of each paying torch.onnx.export's time."""
    import hashlib
    with open(os.path.abspath(__file__), "rb") as f:
        h = hashlib.sha256(f.read())
    with open(os.path.abspath(tcc_export.__file__), "rb") as f:
        h.update(f.read())  # its objective probe writes the metadata
    h.update(("%s %s %s" % (torch.__version__, getattr(onnx, "__version__", "none"), name)).encode())
    root = os.environ.get("TCC_MODEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "tcc", "test-models")
    return os.path.join(root, "%s-%s" % (name, h.hexdigest()[:16]))


def export_one(name, outdir):
    """Exports model `name` into outdir (NAME.onnx and NAME.feed/), from the
    cache when an earlier export of the same definitions is there; returns
    whether its initializers are the model's parameters."""
    import shutil
    cached = _cache_dir(name)
    summary = os.path.join(cached, "summary.txt")
    if os.path.isfile(summary):
        os.makedirs(outdir, exist_ok=True)
        for entry in os.listdir(cached):
            src = os.path.join(cached, entry)
            if entry == "summary.txt":
                continue
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(outdir, entry), dirs_exist_ok=True)
            else:
                shutil.copyfile(src, os.path.join(outdir, entry))
        with open(summary) as f:
            print(f.read().rstrip() + " (cached export)")
        sys.stdout.flush()
        return True
    os.makedirs(outdir, exist_ok=True)
    ok = _export_one(name, outdir)
    if ok:
        # Filled beside the cache and renamed into place, so that two tests
        # exporting at once never see half an entry.
        tmp = "%s.tmp-%d" % (cached, os.getpid())
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            shutil.copyfile(os.path.join(outdir, name + ".onnx"), os.path.join(tmp, name + ".onnx"))
            shutil.copytree(os.path.join(outdir, name + ".feed"), os.path.join(tmp, name + ".feed"))
            with open(os.path.join(tmp, "summary.txt"), "w") as f:
                f.write(_SUMMARY.get(name, name) + "\n")
            os.rename(tmp, cached)
        except OSError:
            pass  # another process filled it first, or no cache: nothing lost
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return ok


_SUMMARY = {}


def _export_one(name, outdir):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    model, opset, feed, output_names = MODELS[name](gen)
    model.train()
    input_names = list(feed.keys())
    args = tuple(feed[k] for k in input_names)

    # Sanity: the eager model runs on the sample feed.
    with torch.no_grad():
        ref = model(*args)
    if not torch.isfinite(ref).all():
        raise RuntimeError("%s: non-finite eager output" % name)

    path = os.path.join(outdir, name + ".onnx")
    torch.onnx.export(
        model, args, path,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        opset_version=opset,
        input_names=input_names,
        output_names=output_names,
    )

    feed_dir = os.path.join(outdir, name + ".feed")
    os.makedirs(feed_dir, exist_ok=True)
    for k, v in feed.items():
        np.save(os.path.join(feed_dir, k + ".npy"), v.numpy())

    m = onnx.load(path)
    onnx.checker.check_model(m)
    # The objective, as python/tcc_export.py records it (the same probe of
    # the module: which label its loss reads), for tcc-run --data.
    objective = tcc_export.infer_objective(model, args, input_names)
    if objective:
        if name in OBJECTIVE_SHIFT and objective.get("labels-shift") != OBJECTIVE_SHIFT[name]:
            raise RuntimeError("%s: the probe says labels-shift=%s, not %s"
                               % (name, objective.get("labels-shift"), OBJECTIVE_SHIFT[name]))
        if name in OBJECTIVE_TASK and objective.get("task") != OBJECTIVE_TASK[name]:
            raise RuntimeError("%s: the probe says task=%s, not %s"
                               % (name, objective.get("task"), OBJECTIVE_TASK[name]))
        entry = m.metadata_props.add()
        entry.key = tcc_export.OBJECTIVE_KEY
        entry.value = tcc_export.format_objective(objective)
        onnx.save(m, path)

    ok = True
    param_names = {n for n, _ in model.named_parameters()} | BUFFERS.get(name, set())
    float_inits = {i.name for i in m.graph.initializer if i.data_type in FLOAT_TYPES}
    if float_inits != param_names:
        ok = False
        print("%s: initializer/parameter name mismatch" % name, file=sys.stderr)
        print("  only in ONNX initializers: %s" % sorted(float_inits - param_names),
              file=sys.stderr)
        print("  only in named_parameters:  %s" % sorted(param_names - float_inits),
              file=sys.stderr)

    hist = collections.Counter(n.op_type for n in m.graph.node)
    hist_s = " ".join("%s:%d" % (k, hist[k]) for k in sorted(hist))
    _SUMMARY[name] = "%s opset=%d nodes=%d %s" % (name, opset, len(m.graph.node), hist_s)
    print(_SUMMARY[name])
    sys.stdout.flush()
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=list(MODELS),
                    help="export only these models (default: all)")
    a = ap.parse_args(argv)
    os.makedirs(a.outdir, exist_ok=True)
    names = a.only if a.only else list(MODELS)
    ok = True
    for name in names:
        ok = export_one(name, a.outdir) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Hugging Face `transformers` models through tcc, against PyTorch float64.

Usage: VENV/bin/python check_hf_models.py --tcc TCC --tcc-run TCC_RUN --workdir DIR
           [--models gpt2,bert,...] [--exporters dynamo,torchscript] [--no-cuda-emulation]

Models: gpt2, bert, llama, qwen2, mistral (the default set), and neox (GPT-NeoX:
parallel residual, partial rotary) and gemma2 (Gemma-2 without the attention
soft-cap: RMS norms after attention and MLP), whose fp16 gradients were wrong
on the CUDA target until issue 44's fixes (ctest hf-models-more).

Runs under the virtual environment that scripts/setup.sh makes (torch,
transformers, onnx, onnxruntime from PyPI). Each model is a tiny configuration
(2 layers, width 64, random initialisation, no weights downloaded, dropout 0 so
that PyTorch and onnxruntime are deterministic), exported once per exporter
with python/tcc_export.py:

  dynamo       torch.onnx.export(dynamo=True), the torch.export-based exporter
               (PyTorch's default since 2.9), opset 20 as it writes it;
  dynamo23     the same at opset_version=23, where attention is ONNX's
               Attention op;
  torchscript  torch.onnx.export(dynamo=False) at opset 18.

For each, in this one run:
  1. import: `tcc --emit=training` must have fused every layer's attention
     into one tcc.attention op;
  2. gradients: `tcc --target=cpu --cpu-precision=f64`, `tcc-run --grads-only`;
     the loss and every parameter's gradient against PyTorch float64 autograd
     (|tcc - torch| <= 1e-6 + 1e-4 |torch|, elementwise);
  3. training: 3 AdamW steps with accumulation 2 on two micro-batches, every
     micro-step loss and final parameter against the same loop in PyTorch
     float64 (torch.optim.AdamW), within rtol 1e-5 / atol 1e-6;
  4. onnxruntime: the model that `tcc-run --save` wrote, run by onnxruntime on
     a fresh batch, gives the loss that tcc's trained weights give in PyTorch
     (relative 1e-4);
  5. CUDA emulation: `tcc --target=cuda --cuda-emulation`, one fp16 micro-step;
     every gradient's error against the float64 reference, relative to the
     parameter's largest (bench/gpu/compare.py's rule: a gradient that is zero
     in exact arithmetic, an attention key bias, is measured against 1e-2 of
     the model's largest gradient), within 1e-2, or within twice PyTorch's own
     fp16 autocast error on the same batch plus 1e-3 where that is larger
     (OPT's ReLU MLP: PyTorch's fp16 autocast is 0.23 off in fc1 itself);
     and finite at GradScaler's first loss scale, 65536, as PyTorch's are
     (the micro-step runs under --check-numerics). Where one batch's error is
     over the bound, tcc and PyTorch are compared on their worst over 6
     batches (fp16_over_batches: a ReLU that rounding flips is a rare event).
Prints a table and ends with `N passed, M failed`.
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "gpu"))
import compare  # noqa: E402  (the fp16 parity rule the GPU check uses)
import tcc_export  # noqa: E402

B, S, V = 2, 16, 128
LAYERS = 2
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6
# The exported graphs hold float32 constants (RoPE tables, GELU
# coefficients, epsilons) that the float64 reference computes in float64, so
# gradients differ at ~1e-7 relative. AdamW turns that into weight differences
# of up to ~lr/300 on elements whose gradient is near zero (it divides by the
# gradient's own RMS). atol lr/100 stays far below what any error in the
# optimizer's arithmetic gives (each wrong term moves a weight by ~lr).
TRAIN_RTOL, TRAIN_ATOL = 1e-5, 1e-5
ORT_RTOL = 1e-4
CUDA_BOUND = 1e-2
STEPS, ACCUM = 3, 2
ADAMW = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)
# exporter label -> (tcc_export's exporter, opset): the torch.export-based
# exporter at its default (20) and at 23, where it writes the Attention op.
EXPORTERS = {"dynamo": ("dynamo", None), "dynamo23": ("dynamo", 23),
             "torchscript": ("torchscript", 18)}


def build_model(name):
    import transformers as T
    torch.manual_seed(0)
    common = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  intermediate_size=128, vocab_size=V, max_position_embeddings=64)
    if name == "gpt2":
        cfg = T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=V, n_positions=64,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = T.GPT2LMHeadModel(cfg)
    elif name == "bert":
        cfg = T.BertConfig(**common, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model = T.BertForMaskedLM(cfg)
    elif name == "llama":  # RoPE, RMSNorm, SwiGLU, grouped-query attention, untied head
        cfg = T.LlamaConfig(**common, num_key_value_heads=2, tie_word_embeddings=False)
        model = T.LlamaForCausalLM(cfg)
    elif name == "qwen2":  # biases on q/k/v
        cfg = T.Qwen2Config(**common, num_key_value_heads=2, tie_word_embeddings=False)
        model = T.Qwen2ForCausalLM(cfg)
    elif name == "mistral":
        cfg = T.MistralConfig(**common, num_key_value_heads=2, sliding_window=None,
                              tie_word_embeddings=False)
        model = T.MistralForCausalLM(cfg)
    elif name == "neox":  # parallel residual, partial rotary (issue 44's fused-kernel bug)
        cfg = T.GPTNeoXConfig(**common, use_parallel_residual=True, rotary_pct=0.25,
                              hidden_dropout=0.0, attention_dropout=0.0)
        cfg.partial_rotary_factor = 0.25
        model = T.GPTNeoXForCausalLM(cfg)
    elif name == "opt":  # ReLU MLP, learned positions (issue 44: fc1 at 0.12 in fp16)
        cfg = T.OPTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                          vocab_size=V, max_position_embeddings=64, word_embed_proj_dim=64,
                          dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                          layerdrop=0.0)
        model = T.OPTForCausalLM(cfg)
    elif name == "gemma2":  # RMS norms after attention and MLP (issue 44's fp16 NaNs)
        cfg = T.Gemma2Config(**common, num_key_value_heads=2, head_dim=16,
                             attention_dropout=0.0, attn_logit_softcapping=None)
        model = T.Gemma2ForCausalLM(cfg)
    elif name == "gemma2_softcap":  # attention soft-capping fused (issue 43), tanh saturated
        cfg = T.Gemma2Config(**common, num_key_value_heads=2, head_dim=16,
                             attention_dropout=0.0, attn_logit_softcapping=0.5,
                             final_logit_softcapping=5.0, initializer_range=0.2)
        model = T.Gemma2ForCausalLM(cfg)
    elif name in EXTRA_MODELS:  # scripts/model_matrix.py's architectures
        model = EXTRA_MODELS[name](T, common)
    else:
        raise ValueError(name)
    model.train()
    return Loss(model)


# name -> (transformers module, common config kwargs) -> model; filled by
# scripts/model_matrix.py. A masked-LM model's name goes in MASKED_LM too.
EXTRA_MODELS = {}
MASKED_LM = {"bert"}


class Loss(torch.nn.Module):
    """The model with its loss, on token ids and labels (ONNX inputs
    `input_ids`, `labels`, and for a masked LM `attention_mask`, padded
    batches): without a mask it is all ones, as in training on packed token
    streams."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, input_ids, labels, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        if not type(self.m).__name__.endswith("ForMaskedLM"):
            kwargs["use_cache"] = False
        return self.m(**kwargs).loss


def batch(name, seed):
    gen = torch.Generator().manual_seed(seed)
    # Token 0 is BERT's padding_idx, whose embedding row PyTorch never trains.
    ids = torch.randint(1, V, (B, S), generator=gen)
    if name in MASKED_LM:
        labels = torch.full((B, S), -100, dtype=torch.long)
        masked = torch.rand((B, S), generator=gen) < 0.3
        masked[:, 0] = True
        labels[masked] = ids[masked]
        # A padded batch: sequence b ends 3b tokens early; its padding is
        # masked out of attention and of the loss.
        mask = torch.ones((B, S), dtype=torch.long)
        for b in range(B):
            if 3 * b:
                mask[b, S - 3 * b:] = 0
        labels[mask == 0] = -100
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}
    labels = ids.clone()
    return {"input_ids": ids, "labels": labels}


def save_feed(feed, folder):
    os.makedirs(folder, exist_ok=True)
    for k, v in feed.items():
        np.save(os.path.join(folder, k + ".npy"), v.numpy())


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
    return r.stdout


def aliases(module):
    """Each parameter's canonical name and every name it has (tied weights)."""
    by_id = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(n)
    return {names[0]: names for names in by_id.values()}


def dumped(folder, names):
    for n in names:
        path = os.path.join(folder, n.replace("/", "_") + ".npy")
        if os.path.exists(path):
            return np.load(path).astype(np.float64)
    return None


def torch_grads(name, feed):
    model = build_model(name).double()
    loss = model(**feed)
    loss.backward()
    return float(loss), {n: p.grad.detach().numpy() if p.grad is not None else np.zeros(p.shape)
                         for n, p in model.named_parameters()}, aliases(model)


def torch_autocast_grads(name, feed, dtype=torch.float16):
    """PyTorch's own mixed precision on the same model and batch, the bound
    tcc's fp16 gradients are held to (issue 44): float32 parameters,
    torch.autocast("cpu", dtype), the loss scaled as GradScaler does (2^16,
    halved until every gradient is finite; bf16 unscaled), the gradients
    unscaled in float64. Returns {name: gradient}."""
    scale = 2.0 ** 16 if dtype == torch.float16 else 1.0
    while True:
        model = build_model(name)
        with torch.autocast("cpu", dtype=dtype):
            loss = model(**feed)
        (loss.float() * scale).backward()
        grads = {n: (p.grad.double() / scale).numpy() if p.grad is not None else np.zeros(p.shape)
                 for n, p in model.named_parameters()}
        if all(np.isfinite(g).all() for g in grads.values()) or scale < 1:
            return grads
        scale /= 2


def fp16_bound(torch16_rel):
    """The fp16 gradient error tcc may have where PyTorch's fp16 autocast
    (or the model cast to fp16) has `torch16_rel`: CUDA_BOUND, or twice
    PyTorch's plus 1e-3 where that is larger."""
    return max(CUDA_BOUND, 2 * torch16_rel + 1e-3)


def worst_rel(ref, got):
    """The worst per-parameter error of `got` against `ref` (both by torch
    name), as compare_grads measures the fp16 target: (error, parameter)."""
    model_max = max(float(np.max(np.abs(g), initial=0.0)) for g in ref.values())
    return max((compare.rel_error(ref[n], got[n], model_max), n) for n in ref)


# The batches fp16_over_batches adds (1 is the checked one, 2-4 train and
# evaluate).
FP16_SEEDS = (5, 6, 7, 8, 9)


def fp16_over_batches(name, tcc_run, step, work, tcc_first, torch_first):
    """tcc's fp16 step (`step`, CUDA emulation) and PyTorch's fp16 autocast
    on FP16_SEEDS' batches beside the first: each one's worst gradient error
    against float64, as worst_rel measures it. Returns the worst of each over
    all batches: (tcc error, parameter, PyTorch's, parameter)."""
    t_worst, a_worst = tcc_first, torch_first
    for seed in FP16_SEEDS:
        feed = batch(name, seed)
        folder = os.path.join(work, "feed_fp16_%d" % seed)
        save_feed(feed, folder)
        dump = os.path.join(work, "grads_fp16_%d" % seed)
        run([tcc_run, step, "--feed", folder, "--grads-only", "--dump", dump])
        _, ref, names = torch_grads(name, feed)
        got = {n: dumped(os.path.join(dump, "grads"), names[n]) for n in ref}
        t_worst = max(t_worst, worst_rel(ref, got))
        a_worst = max(a_worst, worst_rel(ref, torch_autocast_grads(name, feed)))
    return t_worst + a_worst


def torch_train(name, batches):
    model = build_model(name).double()
    opt = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"],
                            betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"])
    losses = []
    for it in range(STEPS):
        for k in range(ACCUM):
            loss = model(**batches[(it * ACCUM + k) % len(batches)])
            losses.append(float(loss))
            (loss / ACCUM).backward()
        opt.step()
        opt.zero_grad()
    return np.array(losses), {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def compare_grads(ref, names, folder, rtol, atol, problems, label):
    """The worst per-parameter error relative to the parameter's largest
    gradient; elementwise tolerance failures go to `problems`."""
    worst, worst_name = 0.0, ""
    model_max = max(float(np.max(np.abs(g), initial=0.0)) for g in ref.values())
    for pname, want in ref.items():
        got = dumped(folder, names[pname])
        if got is None or got.shape != want.shape:
            problems.append("%s: no gradient for %s" % (label, pname))
            continue
        err = np.abs(got - want)
        if rtol is None:  # fp16: a gradient zero in exact arithmetic has no scale
            rel = compare.rel_error(want, got, model_max)
        else:
            scale = max(float(np.max(np.abs(want), initial=0.0)), atol)
            rel = float(np.max(err, initial=0.0)) / scale
        if rel > worst:
            worst, worst_name = rel, pname
        if rtol is not None:
            bad = err > atol + rtol * np.abs(want)
            if bad.any():
                i = np.unravel_index(np.argmax(err - rtol * np.abs(want)), want.shape)
                problems.append("%s: %s: %d elements out of tolerance, e.g. %s: %.9g vs torch %.9g"
                                % (label, pname, int(bad.sum()), i, got[i], want[i]))
    return worst, worst_name


def ort_loss(onnx_path, feed):
    import onnxruntime as ort
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    out = sess.run(None, {n: feed[n].numpy() for n in names})
    return float(out[0])


def torch_loss_with(name, params, names, feed):
    model = build_model(name).double()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(torch.from_numpy(params[pname]))
        return float(model(**feed))


def check(name, exporter, args, cache):
    work = os.path.join(args.workdir, "%s_%s" % (name, exporter))
    os.makedirs(work, exist_ok=True)
    onnx_path = os.path.join(work, "model.onnx")
    t0 = time.time()
    model = build_model(name)
    example = batch(name, 1)
    inputs = list(example)  # input_ids, labels (, attention_mask)
    trainable = tcc_export.export(model, tuple(example[n] for n in inputs), onnx_path,
                                  input_names=inputs, output_names=["loss"],
                                  exporter=EXPORTERS[exporter][0],
                                  opset_version=EXPORTERS[exporter][1])
    import onnx
    proto = onnx.load(onnx_path)
    opset = max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    r = {"opset": opset, "nodes": len(proto.graph.node), "export_s": time.time() - t0}
    problems = []
    n_params = len(list(model.parameters()))
    if len({n for names in aliases(model).values() for n in names} & set(trainable)) < n_params:
        problems.append("the export lost parameters: %d of %d recorded" % (len(trainable), n_params))

    # 1. import and fusion
    training = run([args.tcc, onnx_path, "--emit=training"])
    r["attention"] = training.count("tcc.attention ")
    if r["attention"] != LAYERS:  # every layer's attention is one fused op
        problems.append("%d of the %d attentions fused" % (r["attention"], LAYERS))
    r["ops"] = sum(1 for line in training.splitlines() if "= tcc." in line)

    # 2. gradients, float64 step
    step = os.path.join(work, "step64.so")
    report = os.path.join(work, "fusion.json")
    run([args.tcc, onnx_path, "--target=cpu", "--cpu-precision=f64", "-o", step,
         "--fusion-report=" + report])
    with open(report) as f:
        fusion = json.load(f)
    r["kernels"], r["step_ops"] = fusion["kernel_count"], fusion["op_count"]
    feed = batch(name, 1)
    save_feed({k: v for k, v in feed.items()}, os.path.join(work, "feed"))
    run([args.tcc_run, step, "--feed", os.path.join(work, "feed"), "--grads-only",
         "--dump", os.path.join(work, "grads")])
    if name not in cache:
        cache[name] = {"grads": torch_grads(name, feed),
                       "train": torch_train(name, [batch(name, 2), batch(name, 3)])}
    ref_loss, ref_grads, names = cache[name]["grads"]
    loss = float(np.load(os.path.join(work, "grads", "loss.npy")))
    r["loss_rel"] = abs(loss - ref_loss) / abs(ref_loss)
    if r["loss_rel"] > GRAD_RTOL:
        problems.append("loss %.9g vs torch %.9g" % (loss, ref_loss))
    r["grad_rel"], r["grad_worst"] = compare_grads(ref_grads, names, os.path.join(work, "grads", "grads"),
                                  GRAD_RTOL, GRAD_ATOL, problems, "gradients")

    # 3. AdamW, 3 steps with accumulation 2
    root = os.path.join(work, "train_feed")
    for k, seed in enumerate([2, 3]):
        save_feed(batch(name, seed), os.path.join(root, "mb%d" % k))
    saved = os.path.join(work, "trained.onnx")
    run([args.tcc_run, step, "--feed", root, "--steps", str(STEPS), "--accum", str(ACCUM),
         "--lr", repr(ADAMW["lr"]), "--beta1", repr(ADAMW["beta1"]), "--beta2",
         repr(ADAMW["beta2"]), "--eps", repr(ADAMW["eps"]), "--weight-decay",
         repr(ADAMW["weight_decay"]), "--lr-schedule", "constant", "--quiet",
         "--dump", os.path.join(work, "train"), "--save", saved])
    ref_losses, ref_params = cache[name]["train"]
    losses = np.load(os.path.join(work, "train", "losses.npy")).astype(np.float64)
    r["train_rel"] = 0.0
    if losses.shape != ref_losses.shape or np.any(
            np.abs(losses - ref_losses) > TRAIN_ATOL + TRAIN_RTOL * np.abs(ref_losses)):
        problems.append("micro-step losses %s vs torch %s" % (losses, ref_losses))
    params = {}
    for pname, want in ref_params.items():
        got = dumped(os.path.join(work, "train", "params"), names[pname])
        if got is None:
            problems.append("training: no final value for %s" % pname)
            continue
        params[pname] = got
        err = np.abs(got - want)
        r["train_rel"] = max(r["train_rel"], float(np.max(err / np.maximum(np.abs(want), 0.1))))
        if np.any(err > TRAIN_ATOL + TRAIN_RTOL * np.abs(want)):
            problems.append("training: %s out of tolerance (max err %.3g)" % (pname, err.max()))

    # 4. onnxruntime on the saved model, against tcc's weights in PyTorch
    fresh = batch(name, 4)
    r["ort_rel"] = float("nan")
    if len(params) == len(ref_params):
        got = ort_loss(saved, fresh)
        want = torch_loss_with(name, params, names, fresh)
        r["ort_rel"] = abs(got - want) / abs(want)
        if r["ort_rel"] > ORT_RTOL:
            problems.append("onnxruntime loss %.9g on the saved model vs %.9g" % (got, want))

    # 5. the CUDA target through the emulation, fp16
    r["cuda_rel"] = r["torch16_rel"] = float("nan")
    if args.cuda_emulation:
        cu = os.path.join(work, "step_cuda.so")
        run([args.tcc, onnx_path, "--target=cuda", "--cuda-emulation", "-o", cu])
        out = run([args.tcc_run, cu, "--feed", os.path.join(work, "feed"), "--grads-only",
                   "--check-numerics", "--dump", os.path.join(work, "grads_cuda")])
        # GradScaler's first scale, 2^16, at which PyTorch's autocast
        # gradients below are finite: tcc's fp16 backward pass must not
        # overflow there either (a dynamic scale would skip steps to find
        # a smaller one; --check-numerics names the op where it did).
        if "loss scale 65536 " not in out:
            problems.append("CUDA emulation: the fp16 gradients are not finite at loss scale "
                            "65536:\n" + out[-3000:])
        r["cuda_rel"], r["cuda_worst"] = compare_grads(ref_grads, names, os.path.join(work, "grads_cuda", "grads"),
                                      None, GRAD_ATOL, problems, "cuda")
        # PyTorch's fp16 autocast on the same batch: the error mixed
        # precision makes on this model. tcc may be within 2x of it + 1e-3,
        # or within CUDA_BOUND where PyTorch's own error is far below that.
        if "autocast" not in cache[name]:
            cache[name]["autocast"] = worst_rel(ref_grads, torch_autocast_grads(name, feed))
        r["torch16_rel"], r["torch16_worst"] = cache[name]["autocast"]
        bound = fp16_bound(r["torch16_rel"])
        if not r["cuda_rel"] <= bound and np.isfinite(r["cuda_rel"]):
            # One batch's worst error can be one rare event: a ReLU whose
            # input fp16 rounding moves across zero (one element of T5's
            # 4096 moves its wi gradient by 7-19%), on a batch where
            # PyTorch's autocast rounds that element the other way. Both
            # are then held to their worst over more batches.
            r["cuda_rel"], r["cuda_worst"], r["torch16_rel"], r["torch16_worst"] = \
                fp16_over_batches(name, args.tcc_run, cu, work, (r["cuda_rel"], r["cuda_worst"]),
                                  (r["torch16_rel"], r["torch16_worst"]))
            r["fp16_batches"] = 1 + len(FP16_SEEDS)
            bound = fp16_bound(r["torch16_rel"])
        if not r["cuda_rel"] <= bound:
            problems.append("CUDA emulation: gradient error %.3g > %.3g (%s; PyTorch fp16 "
                            "autocast's %.3g, %s)" % (r["cuda_rel"], bound, r["cuda_worst"],
                                                      r["torch16_rel"], r["torch16_worst"]))
    r["problems"] = problems
    r["seconds"] = time.time() - t0
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--models", default="gpt2,bert,llama,qwen2,mistral")
    p.add_argument("--exporters", default="dynamo,dynamo23,torchscript")
    p.add_argument("--no-cuda-emulation", dest="cuda_emulation", action="store_false")
    p.add_argument("--json", help="also write the table's rows here")
    args = p.parse_args()
    torch.set_num_threads(1)
    import transformers
    print("torch %s, transformers %s" % (torch.__version__, transformers.__version__))
    hdr = "%-8s %-11s %5s %5s %4s %5s %7s %9s %9s %9s %9s %9s %9s %6s" % (
        "model", "exporter", "opset", "nodes", "attn", "ops", "kernels", "loss rel", "grad rel",
        "train rel", "ort rel", "cuda rel", "torch16", "s")
    print(hdr)
    passed = failed = 0
    rows = []
    cache = {}
    for name in args.models.split(","):
        for exporter in args.exporters.split(","):
            try:
                r = check(name, exporter, args, cache)
            except Exception as e:  # a failed export, compile or run fails the check
                print("%-8s %-11s FAILED: %s" % (name, exporter, e))
                failed += 1
                continue
            print("%-8s %-11s %5d %5d %4d %5d %7s %9.1e %9.1e %9.1e %9.1e %9.1e %9.1e %6.1f" % (
                name, exporter, r["opset"], r["nodes"], r["attention"], r["ops"],
                "%d/%d" % (r["kernels"], r["step_ops"]), r["loss_rel"],
                r["grad_rel"], r["train_rel"], r["ort_rel"], r["cuda_rel"], r["torch16_rel"],
                r["seconds"]))
            for prob in r["problems"]:
                print("    " + prob)
            rows.append(dict(model=name, exporter=exporter, **r))
            if r["problems"]:
                failed += 1
            else:
                passed += 1
    print("nodes: ONNX nodes; attn: tcc.attention ops; ops: tcc ops in the training step; "
          "kernels: kernels/ops of the fused CPU step (--fusion-report)")
    print("grad rel / cuda rel = max |tcc - torch float64| / max |torch| per parameter, worst "
          "parameter; torch16: the same for PyTorch's fp16 autocast (CPU, GradScaler's scale) "
          "on the batch; train rel: final weights after 3 AdamW steps, relative (floor 0.1)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The architecture matrix (issue 43): Hugging Face `transformers` model classes
in tiny random-init configurations (2 layers, width 64, dropout 0; nothing
downloaded), each exported by python/tcc_export.py with the torch.export-based
exporter and run through test/e2e/check_hf_models.py's checks: import and
attention fusion, the float64 CPU step's loss and every gradient against
PyTorch float64 autograd, 3 AdamW steps with accumulation 2 against the same
loop in PyTorch, onnxruntime on the model tcc-run --save wrote, and one fp16
step through the CUDA emulation against float64 beside PyTorch's own fp16
autocast error on the batch. A model tcc refuses is listed with its
diagnostic.

Usage (the project's virtual environment, after a build):
    ~/.cache/tcc/venv/bin/python scripts/model_matrix.py [--models a,b] [--out docs/models.md]
About 10 s a model on 2 cores.
"""
import argparse
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import check_hf_models as hf  # noqa: E402

V = hf.V
NO_DROP = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

def batched_experts(config):
    """A mixture of experts as transformers' "batched_mm" experts: each
    token's chosen experts' weights gathered and multiplied in a batch.
    The default ("grouped_mm") calls a kernel torch.export cannot translate,
    and "eager" loops over the experts a batch hits (a data-dependent
    shape)."""
    config._experts_implementation = "batched_mm"
    return config


# name -> (family, what it exercises, factory(transformers, common kwargs))
MODELS = {
    "gpt2": ("decoder", "learned positions, Conv1D projections", None),
    "llama": ("decoder", "RoPE, RMSNorm, SwiGLU, grouped-query attention", None),
    "qwen2": ("decoder", "q/k/v biases", None),
    "mistral": ("decoder", "sliding-window config (off)", None),
    "mistral_window": ("decoder", "a sliding window of 4 keys", lambda T, c: T.MistralForCausalLM(
        T.MistralConfig(**c, num_key_value_heads=2, sliding_window=4, tie_word_embeddings=False))),
    "neox": ("decoder", "parallel residual, partial rotary", None),
    "gemma2": ("decoder", "post-norms, logit soft-capping off", None),
    "gemma2_softcap": ("decoder", "attention logits soft-capped at 0.5, final at 5", None),
    "opt": ("decoder", "ReLU MLP, learned positions with offset", None),
    "gemma": ("decoder", "GeGLU, scaled embeddings", lambda T, c: T.GemmaForCausalLM(
        T.GemmaConfig(**c, num_key_value_heads=2, head_dim=16))),
    "qwen3": ("decoder", "q/k RMSNorm", lambda T, c: T.Qwen3ForCausalLM(
        T.Qwen3Config(**c, num_key_value_heads=2, head_dim=16))),
    "phi": ("decoder", "parallel block, partial rotary, biases", lambda T, c: T.PhiForCausalLM(
        T.PhiConfig(**c, partial_rotary_factor=0.5, resid_pdrop=0.0, embd_pdrop=0.0,
                    attention_dropout=0.0))),
    "phi3": ("decoder", "fused qkv and gate/up projections", lambda T, c: T.Phi3ForCausalLM(
        T.Phi3Config(**c, pad_token_id=0, bos_token_id=1, eos_token_id=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attention_dropout=0.0))),
    "stablelm": ("decoder", "partial rotary, LayerNorm", lambda T, c: T.StableLmForCausalLM(
        T.StableLmConfig(**c, num_key_value_heads=4, partial_rotary_factor=0.25, hidden_dropout=0.0,
                         attention_dropout=0.0))),
    "starcoder2": ("decoder", "GQA, biases, GELU MLP", lambda T, c: T.Starcoder2ForCausalLM(
        T.Starcoder2Config(**c, num_key_value_heads=2, residual_dropout=0.0,
                           embedding_dropout=0.0, attention_dropout=0.0))),
    "olmo": ("decoder", "LayerNorm without parameters", lambda T, c: T.OlmoForCausalLM(
        T.OlmoConfig(**c))),
    "gptj": ("decoder", "parallel residual, interleaved rotary", lambda T, c: T.GPTJForCausalLM(
        T.GPTJConfig(n_layer=2, n_embd=64, n_head=4, vocab_size=V, n_positions=64, rotary_dim=8,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))),
    "codegen": ("decoder", "fused qkv, rotary", lambda T, c: T.CodeGenForCausalLM(
        T.CodeGenConfig(n_layer=2, n_embd=64, n_head=4, vocab_size=V, n_positions=64, n_ctx=64,
                        rotary_dim=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))),
    "gpt_neo": ("decoder", "global and local attention layers", lambda T, c: T.GPTNeoForCausalLM(
        T.GPTNeoConfig(num_layers=2, hidden_size=64, num_heads=4, vocab_size=V,
                       max_position_embeddings=64, attention_types=[[["global", "local"], 1]],
                       window_size=8, embed_dropout=0.0, attention_dropout=0.0, resid_dropout=0.0))),
    "bloom": ("decoder", "ALiBi", lambda T, c: T.BloomForCausalLM(
        T.BloomConfig(n_layer=2, hidden_size=64, n_head=4, vocab_size=V, hidden_dropout=0.0,
                      attention_dropout=0.0))),
    "falcon": ("decoder", "parallel attention and MLP, rotary", lambda T, c: T.FalconForCausalLM(
        T.FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=V,
                       hidden_dropout=0.0, attention_dropout=0.0))),
    "biogpt": ("decoder", "positions from the attention mask", lambda T, c: T.BioGptForCausalLM(
        T.BioGptConfig(**c, **NO_DROP, layerdrop=0.0))),
    "xglm": ("decoder", "sinusoidal positions", lambda T, c: T.XGLMForCausalLM(
        T.XGLMConfig(num_layers=2, d_model=64, attention_heads=4, ffn_dim=128, vocab_size=V,
                     max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
                     activation_dropout=0.0, layerdrop=0.0))),
    "mixtral": ("decoder, MoE", "top-2 of 4 experts (TopK routing)", lambda T, c: T.MixtralForCausalLM(
        batched_experts(T.MixtralConfig(**c, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2)))),
    "qwen2_moe": ("decoder, MoE", "top-2 of 4 experts and a shared expert", lambda T, c: T.Qwen2MoeForCausalLM(
        batched_experts(T.Qwen2MoeConfig(**c, num_key_value_heads=2, num_experts=4,
                                         num_experts_per_tok=2, moe_intermediate_size=64,
                                         shared_expert_intermediate_size=64)))),
    "bert": ("encoder, masked LM", "absolute positions, GELU", None),
    "roberta": ("encoder, masked LM", "positions from the input ids", lambda T, c: T.RobertaForMaskedLM(
        T.RobertaConfig(**c, **NO_DROP))),
    "distilbert": ("encoder, masked LM", "no token types", lambda T, c: T.DistilBertForMaskedLM(
        T.DistilBertConfig(vocab_size=V, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                           max_position_embeddings=64, dropout=0.0, attention_dropout=0.0))),
    "albert": ("encoder, masked LM", "shared layers, factorised embeddings", lambda T, c: T.AlbertForMaskedLM(
        T.AlbertConfig(vocab_size=V, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
                       **NO_DROP))),
    "electra": ("encoder, masked LM", "factorised embeddings", lambda T, c: T.ElectraForMaskedLM(
        T.ElectraConfig(vocab_size=V, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
                        **NO_DROP))),
    "deberta_v2": ("encoder, masked LM", "disentangled relative attention", lambda T, c: T.DebertaV2ForMaskedLM(
        T.DebertaV2Config(**c, **NO_DROP, relative_attention=True, position_buckets=16,
                          pos_att_type=["p2c", "c2p"]))),
    "mpnet": ("encoder, masked LM", "relative position buckets", lambda T, c: T.MPNetForMaskedLM(
        T.MPNetConfig(**c, **NO_DROP))),
    "t5": ("encoder-decoder", "relative position buckets, labels shifted inside", lambda T, c: T.T5ForConditionalGeneration(
        T.T5Config(vocab_size=V, d_model=64, d_kv=16, d_ff=128, num_layers=1, num_heads=4,
                   dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0))),
    "bart": ("encoder-decoder", "learned positions, labels shifted inside", lambda T, c: T.BartForConditionalGeneration(
        T.BartConfig(vocab_size=V, d_model=64, encoder_layers=1, decoder_layers=1,
                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                     decoder_ffn_dim=128, max_position_embeddings=64, dropout=0.0,
                     attention_dropout=0.0, activation_dropout=0.0))),
}
for _name, (_family, _what, _factory) in MODELS.items():
    if _factory is not None:
        hf.EXTRA_MODELS[_name] = _factory
    if "masked LM" in _family:
        hf.MASKED_LM.add(_name)


# Vision and speech models take features, not token ids: exported with their
# own inputs and labels, then compiled at float64 and checked here, loss and
# every gradient, against PyTorch float64 autograd on the same batch.
def vision_speech():
    import torch
    import transformers as T

    class WithLoss(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x, labels):
            return self.m(x, labels=labels).loss

    torch.manual_seed(0)
    vit = T.ViTForImageClassification(T.ViTConfig(
        image_size=64, patch_size=16, num_channels=3, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=128, num_labels=10, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0))
    w2v = T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, num_labels=4, hidden_dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0))
    resnet = T.ResNetForImageClassification(T.ResNetConfig(
        num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
        layer_type="bottleneck", num_labels=10))
    convnext = T.ConvNextForImageClassification(T.ConvNextConfig(
        num_channels=3, patch_size=4, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10,
        drop_path_rate=0.0))
    mobilenet = T.MobileNetV2ForImageClassification(T.MobileNetV2Config(
        num_channels=3, image_size=64, depth_multiplier=0.25, num_labels=10,
        classifier_dropout_prob=0.0))
    swin = T.SwinForImageClassification(T.SwinConfig(
        image_size=64, patch_size=4, num_channels=3, embed_dim=16, depths=[1, 1],
        num_heads=[2, 2], window_size=4, num_labels=10, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, drop_path_rate=0.0))
    image = (torch.randn(4, 3, 64, 64), torch.tensor([1, 7, 3, 5]))
    return {
        "vit": ("vision", "patch embedding (Conv), [CLS] head", WithLoss(vit), image),
        "resnet": ("vision", "Conv, BatchNorm in training mode, MaxPool, bottlenecks",
                   WithLoss(resnet), image),
        "convnext": ("vision", "depthwise Conv, channels-last LayerNorm, layer scale",
                     WithLoss(convnext), image),
        "mobilenet_v2": ("vision", "depthwise Conv, BatchNorm, ReLU6 (Clip)",
                         WithLoss(mobilenet), image),
        "swin": ("vision", "shifted windows, relative position bias, patch merging",
                 WithLoss(swin), image),
        "wav2vec2": ("speech", "convolutional feature encoder, conv positions", WithLoss(w2v),
                     (torch.randn(2, 1600), torch.tensor([0, 3]))),
    }


def features_batch(example, seed):
    """Another batch shaped as `example`: features ~ N(0, 1), its labels."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(example[0].shape, generator=gen), example[1].roll(seed))


def features_train(module, batches):
    """PyTorch float64's AdamW loop (check_hf_models' STEPS, ACCUM, ADAMW):
    the micro-step losses and the final parameters."""
    import copy

    import numpy as np
    import torch
    model = copy.deepcopy(module).double()
    a = hf.ADAMW
    opt = torch.optim.AdamW(model.parameters(), lr=a["lr"], betas=(a["beta1"], a["beta2"]),
                            eps=a["eps"], weight_decay=a["weight_decay"])
    losses = []
    for it in range(hf.STEPS):
        for k in range(hf.ACCUM):
            x, labels = batches[(it * hf.ACCUM + k) % len(batches)]
            loss = model(x.double(), labels)
            losses.append(float(loss))
            (loss / hf.ACCUM).backward()
        opt.step()
        opt.zero_grad()
    return np.array(losses), {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


def features_torch16(module, example, grads):
    """PyTorch's own fp16 error on the batch: the model cast to float16
    (PyTorch's CPU autocast does not run these convolutions in fp16), the
    loss scaled by 2^10 and halved until every gradient is finite (at most
    10 times), the gradients unscaled, each against the float64 ones by
    bench/gpu/compare.py's rule. inf when no scale gives finite gradients."""
    import copy

    import numpy as np
    model_max = max(float(np.max(np.abs(g), initial=0.0)) for g in grads.values())
    scale = 2.0 ** 10
    for _ in range(10):
        half = copy.deepcopy(module).half().train()
        (half(example[0].half(), example[1]) * scale).backward()
        got = {n: p.grad.double().numpy() / scale if p.grad is not None else np.zeros(p.shape)
               for n, p in half.named_parameters()}
        if all(np.all(np.isfinite(g)) for g in got.values()):
            return max(hf.compare.rel_error(grads[n], got[n], model_max) for n in grads)
        scale /= 2
    return float("inf")


def features_check(name, module, example, args):
    """Exports, compiles at float64 (CPU target) and compares the loss and
    every gradient of one step with PyTorch float64 autograd, then 3 AdamW
    steps with accumulation 2 with PyTorch's loop, then one fp16 step through
    the CUDA emulation with the float64 gradients: within 1e-2 by
    bench/gpu/compare.py's rule, or within twice PyTorch's own fp16 error
    (features_torch16) + 1e-3 where that is larger; returns (status, row,
    notes)."""
    import copy
    import subprocess

    import numpy as np
    import tcc_export
    work = os.path.join(args.workdir, name)
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "model.onnx")
    try:
        tcc_export.export(module.train(), example, path, input_names=["x", "labels"],
                          output_names=["loss"])
    except Exception as e:  # noqa: BLE001
        return "export fails", None, diagnostic(e, args.workdir)
    step = os.path.join(work, "step.so")
    r = subprocess.run([args.tcc, path, "--target=cpu", "--cpu-precision=f64", "-o", step],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        return "refused by tcc", None, diagnostic(r.stdout, args.workdir)
    feed = os.path.join(work, "feed")
    os.makedirs(feed, exist_ok=True)
    np.save(os.path.join(feed, "x.npy"), example[0].double().numpy())
    np.save(os.path.join(feed, "labels.npy"), example[1].numpy())
    r = subprocess.run([args.tcc_run, step, "--feed", feed, "--grads-only", "--dump",
                        os.path.join(work, "grads")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        return "fails in tcc-run", None, diagnostic(r.stdout, args.workdir)
    ref = copy.deepcopy(module).double()
    loss = ref(example[0].double(), example[1])
    loss.backward()
    got_loss = float(np.load(os.path.join(work, "grads", "loss.npy")))
    r = subprocess.run([args.tcc, path, "--target=cpu", "--emit=training"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    row = {"attention": r.stdout.count("tcc.attention ") if r.returncode == 0 else "-",
           "loss_rel": abs(got_loss - float(loss)) / abs(float(loss)), "grad_rel": 0.0}
    missing = []
    grads = {n: p.grad.detach().numpy() if p.grad is not None else np.zeros(p.shape)
             for n, p in ref.named_parameters()}
    # A gradient that is zero in exact arithmetic (attention's key biases:
    # softmax ignores a shift) is measured against the model's largest.
    floor = 1e-6 * max(float(np.max(np.abs(g), initial=0.0)) for g in grads.values())
    for n, want in grads.items():
        f = os.path.join(work, "grads", "grads", n.replace("/", "_") + ".npy")
        if not os.path.exists(f):
            missing.append(n)
            continue
        got = np.load(f).astype(np.float64)
        scale = max(float(np.max(np.abs(want), initial=0.0)), floor, 1e-300)
        row["grad_rel"] = max(row["grad_rel"], float(np.max(np.abs(got - want))) / scale)
    ok = not missing and row["loss_rel"] < 1e-6 and row["grad_rel"] < 1e-4
    problems = ["no gradient for %s" % ", ".join(missing[:3])] if missing else []

    # AdamW, 3 steps with accumulation 2, against PyTorch's loop.
    batches = [features_batch(example, 2), features_batch(example, 3)]
    root = os.path.join(work, "train_feed")
    for k, (x, labels) in enumerate(batches):
        os.makedirs(os.path.join(root, "mb%d" % k), exist_ok=True)
        np.save(os.path.join(root, "mb%d" % k, "x.npy"), x.double().numpy())
        np.save(os.path.join(root, "mb%d" % k, "labels.npy"), labels.numpy())
    a = hf.ADAMW
    r = subprocess.run([args.tcc_run, step, "--feed", root, "--steps", str(hf.STEPS), "--accum",
                        str(hf.ACCUM), "--lr", repr(a["lr"]), "--beta1", repr(a["beta1"]),
                        "--beta2", repr(a["beta2"]), "--eps", repr(a["eps"]), "--weight-decay",
                        repr(a["weight_decay"]), "--lr-schedule", "constant", "--quiet", "--dump",
                        os.path.join(work, "train")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        return "fails in tcc-run", row, diagnostic(r.stdout, args.workdir)
    ref_losses, ref_params = features_train(module, batches)
    losses = np.load(os.path.join(work, "train", "losses.npy")).astype(np.float64)
    row["train_rel"] = 0.0
    if losses.shape != ref_losses.shape or np.any(
            np.abs(losses - ref_losses) > hf.TRAIN_ATOL + hf.TRAIN_RTOL * np.abs(ref_losses)):
        problems.append("micro-step losses %s vs torch %s" % (losses, ref_losses))
    for n, want in ref_params.items():
        f = os.path.join(work, "train", "params", n.replace("/", "_") + ".npy")
        if not os.path.exists(f):
            problems.append("training: no final value for %s" % n)
            continue
        err = np.abs(np.load(f).astype(np.float64) - want)
        row["train_rel"] = max(row["train_rel"], float(np.max(err / np.maximum(np.abs(want), 0.1))))
        if np.any(err > hf.TRAIN_ATOL + hf.TRAIN_RTOL * np.abs(want)):
            problems.append("training: %s out of tolerance (max err %.3g)" % (n, err.max()))

    # One fp16 step through the CUDA emulation.
    cu, feed32 = os.path.join(work, "step_cuda.so"), os.path.join(work, "feed32")
    os.makedirs(feed32, exist_ok=True)
    np.save(os.path.join(feed32, "x.npy"), example[0].float().numpy())
    np.save(os.path.join(feed32, "labels.npy"), example[1].numpy())
    r = subprocess.run([args.tcc, path, "--target=cuda", "--cuda-emulation", "-o", cu],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode == 0:
        r = subprocess.run([args.tcc_run, cu, "--feed", feed32, "--grads-only", "--dump",
                            os.path.join(work, "grads_cuda")], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        problems.append("CUDA emulation: " + diagnostic(r.stdout, args.workdir))
    else:
        model_max = max(float(np.max(np.abs(g), initial=0.0)) for g in grads.values())
        row["cuda_rel"] = 0.0
        for n, want in grads.items():
            f = os.path.join(work, "grads_cuda", "grads", n.replace("/", "_") + ".npy")
            got = np.load(f).astype(np.float64) if os.path.exists(f) else np.full(want.shape, np.nan)
            row["cuda_rel"] = max(row["cuda_rel"], hf.compare.rel_error(want, got, model_max))
        row["torch16_rel"] = features_torch16(module, example, grads)
        bound = hf.fp16_bound(row["torch16_rel"])
        if not row["cuda_rel"] <= bound:
            problems.append("fp16 CUDA gradients %.2g from float64 (bound %.2g)" %
                            (row["cuda_rel"], bound))
    notes = "; ".join(problems)
    if not ok:
        return "wrong against PyTorch", row, notes
    return ("trains" if not problems else "trains, with notes"), row, notes


def diagnostic(text, workdir):
    """The first error line of a failed export, compile or run."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    pick = next((ln for ln in lines if "error:" in ln), None) or \
        next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[0] if lines else "?")
    pick = pick.replace(workdir + "/", "").replace(REPO + "/", "")
    pick = re.sub(r"\(tcc supports: [^)]*\)", "(tcc supports: ...)", pick)
    return pick[:300].replace("|", "\\|")


# The rows that do not train cleanly, with why (--check holds every other
# row to "trains" or "trains (float64 checked)").
KNOWN = {
    # The exporter: a view of a non-contiguous tensor.
    ("t5", "dynamo"): "export fails", ("swin", "dynamo"): "export fails",
    # This harness's float64 reference overflows (sinusoidal positions).
    ("xglm", "dynamo"): "fails before tcc", ("xglm", "torchscript"): "fails before tcc",
    # A relative-position bias a parameter reaches: attention stays unfused.
    ("deberta_v2", "dynamo"): "trains, with notes", ("deberta_v2", "torchscript"): "trains, with notes",
    ("mpnet", "dynamo"): "trains, with notes", ("mpnet", "torchscript"): "trains, with notes",
}


def unexpected(rows):
    """The rows whose status is not the one KNOWN (or training) expects."""
    out = []
    for name, exporter, _, _, status, _, notes in rows:
        want = KNOWN.get((name, exporter))
        ok = status == want if want else status in ("trains", "trains (float64 checked)")
        if not ok:
            out.append("%s (%s): %s%s" % (name, exporter, status, ": " + notes if notes else ""))
    return out


def keras_section(args):
    """The Keras models (test/e2e/check_keras_models.py in TensorFlow's own
    environment), as a section of lines."""
    import subprocess
    if not os.path.exists(args.tf_python):
        return ["## Keras models (tf2onnx)", "",
                "Not run: no TensorFlow environment at %s (scripts/setup.sh makes it)." %
                args.tf_python, ""]
    table = os.path.join(args.workdir, "keras.md")
    t0 = time.time()
    r = subprocess.run([args.tf_python, os.path.join(REPO, "test", "e2e", "check_keras_models.py"),
                        "--tcc", args.tcc, "--tcc-run", args.tcc_run, "--cuda-emulation",
                        "--workdir", os.path.join(args.workdir, "keras"), "--markdown", table],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout[-3000:], flush=True)
    head = ["## Keras models (tf2onnx)", "",
            "Made by `test/e2e/check_keras_models.py --cuda-emulation` in TensorFlow's environment "
            "(%.0f s): each a tf.function of the model's loss in training mode, converted by "
            "tf2onnx 1.17 at opset 17 (no metadata), compiled as the float64 CPU step and compared "
            "with `tf.GradientTape` in float64 on the same weights; `fp16`: the fp16 CUDA step "
            "through the CUDA emulation against that float64 reference, beside TensorFlow's own "
            "`mixed_float16` policy on the same batch (`tf16`)." % (time.time() - t0), ""]
    if not os.path.exists(table):
        return head + ["The Keras check failed before writing its table: " +
                       (r.stdout.strip().splitlines() or ["?"])[-1], ""]
    with open(table) as f:
        return head + f.read().splitlines() + [""]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcc", default=os.path.join(REPO, "build", "bin", "tcc"))
    ap.add_argument("--tcc-run", default=os.path.join(REPO, "build", "bin", "tcc-run"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", help="write the table as markdown here (e.g. docs/models.md)")
    ap.add_argument("--workdir")
    ap.add_argument("--exporters", default="dynamo,torchscript",
                    help="the exporters, each model once per exporter (check_hf_models' names)")
    ap.add_argument("--tf-python",
                    default=os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                         os.path.expanduser("~/.cache"), "tcc", "venv-tf", "bin",
                                         "python"),
                    help="TensorFlow's environment (scripts/setup.sh makes it), for the Keras "
                         "rows; 'none' leaves them out")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when a row's status is not the one expected (KNOWN, else trains)")
    ap.add_argument("--vision", action="store_true",
                    help="also the vision and speech rows when --models is given")
    args = ap.parse_args()
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="tcc-matrix-")
    args.cuda_emulation = True
    import torch
    import transformers
    torch.set_num_threads(1)
    rows, cache = [], {}
    t_all = time.time()
    asked = args.models.split(",")
    for name, exporter in [(n, e) for n in asked if n in MODELS for e in args.exporters.split(",")]:
        family, what, _ = MODELS[name]
        t0 = time.time()
        try:
            r = hf.check(name, exporter, args, cache)
            # check_hf_models expects one attention per layer; an
            # encoder-decoder has more, all fused: not a note.
            r["problems"] = [p for p in r["problems"]
                             if not (re.match(r"(\d+) of the %d attentions fused" % hf.LAYERS, p)
                                     and int(p.split()[0]) > hf.LAYERS)]
            status = "trains" if not r["problems"] else "trains, with notes"
            notes = "; ".join(r["problems"])
            if r.get("fp16_batches"):
                notes = "; ".join(filter(None, [notes, "fp16, torch16: the worst of %d batches "
                                                "(%s, %s)" % (r["fp16_batches"], r["cuda_worst"],
                                                              r["torch16_worst"])]))
        except Exception as e:  # noqa: BLE001  (the row says what failed)
            text = str(e)
            r, notes = None, diagnostic(text, args.workdir)
            status = ("refused by tcc" if re.search(r"\.onnx: .*error:", text)
                      else "export fails" if "onnx" in text.lower() or "export" in text.lower()
                      else "fails before tcc")
        rows.append((name, exporter, family, what, status, r, notes))
        print("%-11s %-11s %-20s %6.1fs %s %s" % (name, exporter, family, time.time() - t0, status,
                                                 notes[:160]), flush=True)
    extra = vision_speech()
    if not (args.models == ",".join(MODELS) or args.vision):
        extra = {n: v for n, v in extra.items() if n in asked}
    for name, (family, what, module, example) in extra.items():
        t0 = time.time()
        status, r, notes = features_check(name, module, example, args)
        rows.append((name, "dynamo", family, what, status, r, notes))
        print("%-11s %-20s %6.1fs %s %s" % (name, family, time.time() - t0, status, notes[:160]),
              flush=True)
    fmt = lambda r, k: "%.1e" % r[k] if r and k in r and r[k] == r[k] else "-"  # noqa: E731
    lines = [
        "# The architecture matrix",
        "",
        "Made by `scripts/model_matrix.py` (torch %s, transformers %s, %d rows, %.0f s on this "
        "machine): each Hugging Face class in a tiny random-init configuration, exported with "
        "`python/tcc_export.py`, once with the torch.export-based exporter (`dynamo`, opset 20) and "
        "once with the TorchScript one (`torchscript`, opset 18), then `test/e2e/check_hf_models.py`'s "
        "checks. Columns: attention ops fused (`tcc.attention`) in the training step; the CPU "
        "step's kernels and its ops before fusion; the float64 "
        "CPU step's loss and worst gradient against PyTorch float64 autograd (relative to each "
        "parameter's largest); the weights after 3 AdamW steps (accumulation 2) against PyTorch's "
        "loop; onnxruntime's loss on the model `tcc-run --save` wrote against PyTorch with those "
        "weights; the fp16 CUDA emulation's worst gradient, and PyTorch's own fp16 autocast's on "
        "the same batch (`torch16`). The vision and speech rows (ViT, ResNet, ConvNeXt, MobileNetV2, Swin, wav2vec2: "
        "features in, not token ids; torch.export-based exporter; images 64 x 64 in batches of 4) have no onnxruntime column, and "
        "their torch16 is PyTorch with the model cast to float16 (its CPU autocast does not run these "
        "convolutions in fp16; `inf`: no loss scale gives finite gradients). Masked LMs train on padded "
        "batches (an attention mask from the batch; the second sequence 3 tokens short). A refused model shows "
        "tcc's (or the exporter's) first error."
        % (torch.__version__, transformers.__version__, len(rows), time.time() - t_all),
        "",
        "| model | exporter | family | what it exercises | status | attn | kernels/ops | loss | grad | AdamW | ORT | fp16 | torch16 | notes |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, exporter, family, what, status, r, notes in rows:
        kernels = ("%d/%d" % (r["kernels"], r["step_ops"]) if r and "kernels" in r else "-")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, exporter, family, what, status, r["attention"] if r else "-", kernels,
            fmt(r, "loss_rel"),
            fmt(r, "grad_rel"), fmt(r, "train_rel"), fmt(r, "ort_rel"), fmt(r, "cuda_rel"),
            fmt(r, "torch16_rel"), notes.replace("|", "\\|")))
    trains = sum(1 for row in rows if row[4].startswith("trains"))
    refused = sum(1 for row in rows if row[4] == "refused by tcc")
    lines += ["", "%d of %d rows train; %d refused by tcc; %d fail before tcc sees them (the exporter, or "
              "PyTorch running the model)." % (trains, len(rows), refused, len(rows) - trains - refused), "",
              "A note 'N of the 2 attentions fused' means the other attentions run as separate ops "
              "(correct, with the S x S scores stored): the attention patterns the fusion pass does not "
              "match (a bias that a trainable parameter reaches: DeBERTa's and MPNet's relative "
              "positions, which the fused op cannot differentiate). "
              "A row that fails before tcc failed in the exporter or in this harness's PyTorch "
              "reference (the model in float64), with that error.", ""]
    if args.tf_python != "none" and args.models == ",".join(MODELS):
        lines += keras_section(args)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.check:
        bad = unexpected(rows)
        for line in bad:
            print("unexpected: " + line)
        print("%d rows as expected, %d not" % (len(rows) - len(bad), len(bad)))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

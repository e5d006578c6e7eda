"""End-to-end gradient check of the CPU target against PyTorch float64 autograd.

Usage: /usr/bin/python3 check_gradients.py --tcc TCC --tcc-run TCC_RUN --workdir DIR [MODEL ...]

For each test model (test/models/export_models.py), in this one run:
  1. export it to ONNX (float32, as a user would) and compile it with
     `tcc --target=cpu -o step.so`;
  2. run one micro-step with `tcc-run --grads-only --dump`;
  3. rebuild the same PyTorch model (same seed), convert it to float64, run
     the same batch forward and backward;
  4. compare: the loss within rtol 1e-5, every parameter's gradient within
     rtol 1e-4 / atol 1e-6 (elementwise |tcc - torch| <= atol + rtol*|torch|).
Prints a table and ends with `N passed, M failed`; exits 1 on any failure.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import export_models  # noqa: E402
import dropout_reference  # noqa: E402

LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
GRAD_ATOL = 1e-6

# Models whose ONNX output is not a loss: the tcc flag that appends one, and
# the PyTorch loss applied to the model's output.
APPENDED_LOSS = {
    "tiny_gpt_logits": ("cross-entropy:logits:targets",
                        lambda out, t: F.cross_entropy(out.reshape(-1, out.shape[-1]),
                                                       t.reshape(-1))),
}

# Models compiled with tcc flags of their own (or none), and what the
# training step must then contain (an op and how many times), so that the
# check cannot pass without the flag (or the default) taking effect: the GPT's
# two attentions, nn.MultiheadAttention's ([B*H, S, D], queries scaled, an
# additive causal mask) and BERT's two (a padding mask from an input as the
# op's bias) as tcc.attention ops (tcc-fuse-attention) or, with
# --no-attention-fusion, as matmuls and a softmax; the loss over 64 rows in
# chunks of 24, 24 and 16 (tcc-chunk-loss), and BERT's (an output projection
# with a bias, labels ignored where not masked) over 36 rows in chunks of 16,
# 16 and 4.
TCC_FLAGS = {
    "tiny_gpt_opset17": ([], "tcc.attention", 2),
    "mha_decoder": ([], "tcc.attention", 1),
    "bert_mlm": ([], "tcc.attention", 2),
    "tiny_gpt_unfused_attention": (["--no-attention-fusion"], "tcc.attention", 0),
    "tiny_gpt_chunked_loss": (["--loss-chunk-rows=24"],
                              "tcc.softmax_cross_entropy_loss_with_grad", 3),
    "bert_mlm_chunked_loss": (["--loss-chunk-rows=16"],
                              "tcc.softmax_cross_entropy_loss_with_grad", 3),
    # Training-mode dropout: the attentions fused with the dropout on their
    # probabilities (the op draws the masks itself), and not fused (their
    # masks random_keep ops, as the other 5 dropouts' are).
    "tiny_gpt_dropout": ([], "tcc.attention", 2),
    "tiny_gpt_dropout_unfused": (["--no-attention-fusion"], "tcc.random_keep", 7),
    # nn.TransformerEncoder (dropout 0.1 by default): both attentions fused
    # with the dropout nn.MultiheadAttention applies to their weights.
    "encoder_dropout": ([], "tcc.attention", 2),
    # Buffers as initializers (llama2.c's additive -inf mask and rotary
    # tables, nanoGPT's float tril): kept fixed, and the attentions still fused.
    "llama2c_buffers": ([], "tcc.attention", 2),
    "nanogpt_buffers": ([], "tcc.attention", 2),
}

# Models with training-mode dropout: the reference drops the elements tcc
# drops (dropout_reference.py, micro-step 0 of seed 0), and must make this
# many dropout calls, one per Dropout node.
DROPOUT_CALLS = {"tiny_gpt_dropout": 7, "tiny_gpt_dropout_unfused": 7, "encoder_dropout": 8}

DEFAULT_MODELS = ["tiny_gpt_opset14", "tiny_gpt_opset17", "bert_mlm", "mlp_gemm",
                  "mha_decoder", "tiny_gpt_logits", "tiny_gpt_chunked_loss",
                  "tiny_gpt_unfused_attention", "bert_mlm_chunked_loss",
                  "tiny_gpt_dropout", "tiny_gpt_dropout_unfused", "encoder_dropout",
                  "llama2c_buffers", "nanogpt_buffers"]


def model_flags(tcc, name, onnx_path, extra):
    """The tcc flags of model `name` (after `extra`), having checked that
    they change the training step as TCC_FLAGS says."""
    if name not in TCC_FLAGS:
        return []
    flags, op, count = TCC_FLAGS[name]
    r = subprocess.run([tcc, onnx_path, "--emit=training"] + extra + flags,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    found = r.stdout.count(op + " ")
    if r.returncode != 0 or found != count:
        raise RuntimeError("%s with %s: %d %s in the training step, expected %d"
                           % (name, " ".join(flags), found, op, count))
    return flags


def build_model(name):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    return export_models.MODELS[name](gen)


def torch_reference(name, feed_dir, counter=0):
    model, _, feed, _ = build_model(name)
    model = model.double()
    model.train()
    args = []
    for k in feed:
        v = torch.from_numpy(np.load(os.path.join(feed_dir, k + ".npy")))
        args.append(v.double() if v.is_floating_point() else v)
    if name in DROPOUT_CALLS:
        with dropout_reference.tcc_masks(seed=0, counter=counter) as calls:
            out = model(*args)
        if len(calls) != DROPOUT_CALLS[name]:
            raise RuntimeError("%d dropout calls in the reference, expected %d"
                               % (len(calls), DROPOUT_CALLS[name]))
        # The masks keep about 1 - p of the elements (a binomial with
        # thousands of draws: within 5 standard deviations).
        for stream, p, kept, n in calls:
            if abs(kept - (1 - p)) > 5 * np.sqrt(p * (1 - p) / n):
                raise RuntimeError("dropout %d keeps %.4f of %d elements, p = %g"
                                   % (stream, kept, n, p))
    else:
        out = model(*args)
    if name in APPENDED_LOSS:
        targets = torch.from_numpy(np.load(os.path.join(feed_dir, "targets.npy")))
        out = APPENDED_LOSS[name][1](out, targets)
    out.backward()
    grads = {n: p.grad.detach().numpy() if p.grad is not None else np.zeros(p.shape)
             for n, p in model.named_parameters()}
    return float(out.detach()), grads


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stdout))
    return r.stdout


def check(name, args):
    work = os.path.join(args.workdir, name)
    os.makedirs(work, exist_ok=True)
    export_models.export_one(name, work)
    onnx_path = os.path.join(work, name + ".onnx")
    feed_dir = os.path.join(work, name + ".feed")
    cmd = [args.tcc, "--target=cpu", onnx_path, "-o", os.path.join(work, "step.so")]
    if name in APPENDED_LOSS:
        cmd.append("--loss=" + APPENDED_LOSS[name][0])
        gen = torch.Generator().manual_seed(99)
        idx = np.load(os.path.join(feed_dir, "idx.npy"))
        np.save(os.path.join(feed_dir, "targets.npy"),
                torch.randint(0, 65, idx.shape, generator=gen).numpy())
    cmd += model_flags(args.tcc, name, onnx_path, cmd[5:])
    run(cmd)
    dump = os.path.join(work, "dump")
    run([args.tcc_run, os.path.join(work, "step.so"), "--feed", feed_dir,
         "--grads-only", "--dump", dump])

    ref_loss, ref_grads = torch_reference(name, feed_dir)
    loss = float(np.load(os.path.join(dump, "loss.npy")))
    problems = []
    loss_rel = abs(loss - ref_loss) / abs(ref_loss)
    if loss_rel > LOSS_RTOL:
        problems.append("loss %.9g vs torch %.9g (rel %.2e)" % (loss, ref_loss, loss_rel))
    max_rel, max_abs, worst = 0.0, 0.0, ""
    for pname, ref in ref_grads.items():
        path = os.path.join(dump, "grads", pname.replace("/", "_") + ".npy")
        if not os.path.exists(path):
            problems.append("no gradient for %s" % pname)
            continue
        got = np.load(path).astype(np.float64)
        if got.shape != ref.shape:
            problems.append("%s: shape %s vs %s" % (pname, got.shape, ref.shape))
            continue
        err = np.abs(got - ref)
        bad = err > GRAD_ATOL + GRAD_RTOL * np.abs(ref)
        # Relative to the gradient's own scale, floored at atol: a gradient
        # that is zero in exact arithmetic (a key bias under softmax) has no
        # meaningful relative error.
        scale = max(float(np.max(np.abs(ref), initial=0.0)), GRAD_ATOL)
        rel = float(np.max(err, initial=0.0)) / scale
        if rel > max_rel:
            max_rel, worst = rel, pname
        max_abs = max(max_abs, float(np.max(err, initial=0.0)))
        if bad.any():
            i = np.unravel_index(np.argmax(err - GRAD_RTOL * np.abs(ref)), ref.shape)
            problems.append("%s: %d elements out of tolerance, e.g. %s: %.9g vs torch %.9g"
                            % (pname, int(bad.sum()), i, got[i], ref[i]))
    # tcc trains exactly what PyTorch trains: no gradient for a buffer.
    trained = {f[:-4] for f in os.listdir(os.path.join(dump, "grads"))}
    extra = trained - {n.replace("/", "_") for n in ref_grads}
    if extra:
        problems.append("tcc trains %s, which PyTorch does not" % ", ".join(sorted(extra)))
    if name in DROPOUT_CALLS:
        problems += check_new_masks(name, args, work, feed_dir)
    return {"loss": loss, "ref_loss": ref_loss, "loss_rel": loss_rel,
            "max_rel": max_rel, "max_abs": max_abs, "worst": worst,
            "params": len(ref_grads), "problems": problems}


def check_new_masks(name, args, work, feed_dir, steps=3):
    """Each micro-step draws new masks: training with learning rate 0 on one
    batch, micro-step k's loss is the reference's with the masks of counter
    k (and they differ)."""
    batch = os.path.join(work, "train_feed", "0")
    os.makedirs(batch, exist_ok=True)
    for f in os.listdir(feed_dir):
        shutil.copy(os.path.join(feed_dir, f), batch)
    dump = os.path.join(work, "train_dump")
    run([args.tcc_run, os.path.join(work, "step.so"), "--feed", os.path.dirname(batch),
         "--steps", str(steps), "--lr", "0", "--quiet", "--dump", dump])
    losses = np.load(os.path.join(dump, "losses.npy")).astype(np.float64)
    problems = []
    if len(set(losses.tolist())) != steps:
        problems.append("micro-steps' losses %s: the masks did not change" % losses)
    for k in range(steps):
        ref, _ = torch_reference(name, feed_dir, counter=k)
        if abs(losses[k] - ref) > LOSS_RTOL * abs(ref):
            problems.append("micro-step %d: loss %.9g vs torch %.9g with that step's masks"
                            % (k, losses[k], ref))
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    args = p.parse_args()
    torch.set_num_threads(1)
    passed = failed = 0
    print("%-18s %14s %14s %10s %6s %14s %12s  %s" % (
        "model", "loss (tcc)", "loss (torch)", "loss rel", "params",
        "max grad rel", "max grad abs", "worst parameter"))
    for name in args.models:
        try:
            r = check(name, args)
        except Exception as e:  # a failed compile or run is a failed check
            print("%-18s FAILED: %s" % (name, e))
            failed += 1
            continue
        print("%-18s %14.9g %14.9g %10.2e %6d %14.2e %12.2e  %s" % (
            name, r["loss"], r["ref_loss"], r["loss_rel"], r["params"], r["max_rel"],
            r["max_abs"], r["worst"]))
        for prob in r["problems"]:
            print("    " + prob)
        if r["problems"]:
            failed += 1
        else:
            passed += 1
    print("max grad rel = max |tcc - torch| / max(max |torch|, 1e-6) per parameter, worst over parameters")
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

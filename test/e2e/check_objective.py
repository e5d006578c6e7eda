"""What a Hugging Face user trains is what PyTorch would: the objective, frozen
parameters, and a plain export.

Usage: VENV/bin/python check_objective.py --tcc TCC --tcc-run TCC_RUN --workdir DIR

Runs under the virtual environment that scripts/setup.sh makes (torch,
transformers, peft, onnx from PyPI), on tiny random-init models (no weights
downloaded, dropout 0), the CPU target in float64:

  objective   GPT-2 in docs/exporting.md's wrapper (input_ids, labels ->
              model(..., labels=labels).loss), exported with
              python/tcc_export.py, records task=causal-lm and
              labels-shift=shifted; `tcc-run --data --data-order sequential`
              then trains the next-token objective: every micro-step loss
              equals PyTorch float64's next-token loss on the same windows
              (cross-entropy of logits[:, :-1] against window[:, 1:], computed
              here from the logits, not by the model's loss), and is far from
              the token-after-next loss that the old feeding trained. The
              same file without the record is refused with --data until
              --labels is given; --labels=shifted gives the same losses, and
              --labels=aligned over the record warns and trains the
              token-after-next loss (so the check can tell them apart).
  same-tensor The wrapper exported with labels=input_ids (one tensor for both
              arguments) has two inputs that both feed the graph, and the
              same record.
  lora        A peft LoRA model (r=4 on c_attn): tcc_export records the
              adapters in tcc.trainable and the base in tcc.frozen; tcc
              trains exactly PyTorch's requires_grad set; the loss and every
              adapter gradient match PyTorch float64 (1e-6 + 1e-4 relative);
              after 2 AdamW steps the frozen base written by --save is byte
              for byte the original.
  safetensors The model `tcc-run --save` wrote, through python/tcc_hf.py, is
              loaded by GPT2LMHeadModel.from_pretrained and gives onnxruntime's
              loss on the saved ONNX (1e-5 relative).
  tokens      python/tcc_hf.py tokens with a local byte-level BPE tokenizer
              (trained here on examples/data/corpus.txt): train.bin and
              val.bin (10%) decode back to the text, and tcc-run --data
              trains on them.
  validation  tcc --with-eval builds the evaluation step into step.so (a
              GPT-2 with dropout 0.1); tcc-run --val-data --eval-every 2
              --eval-batches 3 logs val_loss at steps 2 and 4, the last equal
              to PyTorch float64's eval-mode next-token loss of the trained
              parameters (--dump) on the same windows (1e-9); --eval-only
              gives it again from the checkpoint, and PyTorch's for the
              initial weights on every whole batch; the fp16 CUDA step
              through the CUDA emulation within 5e-3, and its --eval-only
              --resume equal to its run's; a step without one is
              refused with a word about --with-eval.
  inference   An inference export (tcc_export.export_inference of the
              logits wrapper, dynamic batch and length) that `tcc-run --save
              --model` fills with the trained weights, byte for byte those of
              the training model's --save: onnxruntime's greedy tokens and
              logits (1e-4) equal transformers' on the same weights at batch
              1 and 3 and growing lengths. A model with a layer the step does
              not train is refused by export_inference and by --save.
  peft-adapter The LoRA step's trained adapters as a PEFT adapter folder:
              PeftModel.from_pretrained gives onnxruntime's loss.
  plain       torch.onnx.export(dynamo=True) with its default optimizer,
              without the helper: tcc refuses it with one error that names the
              folded initializers and the export call to use;
              --allow-unrecorded imports it.
Prints one line per check and ends with `N passed, M failed`.
"""
import argparse
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import tcc_export  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
# The wrappers docs/exporting.md gives and examples/hf_export.py ships: the
# training one (the model's own loss) and the inference one (the logits).
from hf_export import Logits, WithLoss  # noqa: E402

B, T, V = 2, 16, 320  # V: room for a byte-level tokenizer (check_tokens)
ACCUM = 3


def gpt2():
    import transformers as Tr
    torch.manual_seed(0)
    cfg = Tr.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = Tr.GPT2LMHeadModel(cfg)
    model.train()
    return model


def run(cmd, expect=0):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if (expect == 0) != (r.returncode == 0):
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stdout[-3000:]))
    return r.stdout


def metadata(path):
    import onnx
    return {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}


def windows(data, k):
    """Micro-batch k of --data-order sequential: rows at window (k*B + b) mod n."""
    n = (len(data) - 1) // T
    return np.stack([data[((k * B + b) % n) * T:][:T + 1] for b in range(B)]).astype(np.int64)


def reference_losses(model, data):
    """PyTorch float64 per micro-batch: the next-token loss and the
    token-after-next loss, from the logits."""
    m = model.double().eval()
    nxt, after = [], []
    with torch.no_grad():
        for k in range(ACCUM):
            w = torch.from_numpy(windows(data, k))
            x = w[:, :T]
            logits = m(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits
            nxt.append(float(F.cross_entropy(logits[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1))))
            after.append(float(F.cross_entropy(logits[:, :-1].reshape(-1, V),
                                               w[:, 2:T + 1].reshape(-1))))
    return np.array(nxt), np.array(after)


def check_objective(args, work, data_path, data):
    model = gpt2()
    ids = torch.randint(0, V, (B, T))
    onnx_path = os.path.join(work, "gpt2.onnx")
    tcc_export.export(WithLoss(model), (ids, ids.clone()), onnx_path,
                      input_names=["input_ids", "labels"], output_names=["loss"])
    rec = metadata(onnx_path).get(tcc_export.OBJECTIVE_KEY, "")
    want = "task=causal-lm;ids=input_ids;labels=labels;labels-shift=shifted"
    if rec != want:
        raise RuntimeError("recorded objective %r, not %r" % (rec, want))
    step = os.path.join(work, "gpt2.so")
    summary = run([args.tcc, onnx_path, "--emit=summary"])
    run([args.tcc, onnx_path, "--target=cpu", "--cpu-precision=f64", "-o", step])
    if "labels-shift shifted" not in summary:
        raise RuntimeError("tcc's summary does not show the objective:\n" + summary)
    nxt, after = reference_losses(model, data)
    common = ["--data", data_path, "--data-order", "sequential", "--steps", "1",
              "--accum", str(ACCUM), "--lr", "0", "--quiet"]

    def losses(step_path, extra, tag):
        out = os.path.join(work, "dump_" + tag)
        log = run([args.tcc_run, step_path] + common + extra + ["--dump", out])
        return np.load(os.path.join(out, "losses.npy")).astype(np.float64), log

    got, _ = losses(step, [], "recorded")
    if not np.allclose(got, nxt, rtol=1e-6, atol=0):
        raise RuntimeError("losses %s, PyTorch's next-token losses %s" % (got, nxt))
    gap = float(np.max(np.abs(after - nxt) / nxt))
    if gap < 100 * 1e-6:  # 100 times the tolerance the losses are compared with
        raise RuntimeError("the token-after-next losses %s are too close to tell apart" % after)

    # The same model without the record: refused, then told.
    import onnx
    bare = onnx.load(onnx_path)
    for p in list(bare.metadata_props):
        if p.key == tcc_export.OBJECTIVE_KEY:
            bare.metadata_props.remove(p)
    bare_path = os.path.join(work, "gpt2_bare.onnx")
    onnx.save(bare, bare_path)
    bare_step = os.path.join(work, "gpt2_bare.so")
    run([args.tcc, bare_path, "--target=cpu", "--cpu-precision=f64", "-o", bare_step])
    refused = run([args.tcc_run, bare_step] + common, expect=1)
    if "--labels=shifted" not in refused or refused.count("error:") != 1:
        raise RuntimeError("the unrecorded step's refusal does not say --labels:\n" + refused)
    told, _ = losses(bare_step, ["--labels=shifted"], "told")
    if not np.array_equal(told, got):
        raise RuntimeError("--labels=shifted losses %s differ from the recorded %s" % (told, got))
    wrong, log = losses(step, ["--labels=aligned"], "override")
    if "overrides the step's record" not in log:
        raise RuntimeError("--labels over the record does not warn:\n" + log)
    if not np.allclose(wrong, after, rtol=1e-6, atol=0):
        raise RuntimeError("--labels=aligned losses %s, token-after-next %s" % (wrong, after))
    return "next-token loss rel err %.1e (the token-after-next loss differs by %.2e)" % (
        float(np.max(np.abs(got - nxt) / nxt)), gap)


def ort_loss(onnx_path, ids):
    import onnxruntime as ort
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    return float(sess.run(None, {"input_ids": ids.numpy(), "labels": ids.numpy()})[0])


def check_safetensors(args, work, data_path):
    """The model --save wrote, as safetensors that from_pretrained loads:
    the same loss as onnxruntime on the saved ONNX."""
    import tcc_hf
    import transformers as Tr
    step, onnx_path = os.path.join(work, "gpt2.so"), os.path.join(work, "gpt2.onnx")
    saved = os.path.join(work, "gpt2_trained.onnx")
    run([args.tcc_run, step, "--data", data_path, "--steps", "3", "--lr", "1e-2", "--quiet",
         "--save", saved])
    cfg_dir, out = os.path.join(work, "gpt2_config"), os.path.join(work, "gpt2_hf")
    gpt2().config.save_pretrained(cfg_dir)
    names = tcc_hf.write_safetensors(saved, out, config_from=cfg_dir)
    loaded = Tr.GPT2LMHeadModel.from_pretrained(out).eval()
    trained = tcc_hf.trained_tensors(saved)
    moved = [n for n, v in trained.items()
             if not np.array_equal(v, tcc_hf.trained_tensors(onnx_path)[n])]
    if not moved:
        raise RuntimeError("--save wrote the initial weights")
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        hf = float(loaded(input_ids=ids, labels=ids).loss)
    ref = ort_loss(saved, ids)
    if abs(hf - ref) > 1e-5 * abs(ref):
        raise RuntimeError("from_pretrained's loss %.9g, onnxruntime's %.9g" % (hf, ref))
    return "%d tensors; from_pretrained loss %.6f = onnxruntime %.6f" % (len(names), hf, ref)


def check_validation(args, work, data_path):
    """tcc --with-eval and tcc-run --val-data on a GPT-2 with dropout 0.1:
    the validation loss is PyTorch float64's eval-mode (dropout off)
    next-token loss of the trained parameters on the same windows."""
    import transformers as Tr
    torch.manual_seed(1)
    cfg = Tr.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=64,
                        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    model = Tr.GPT2LMHeadModel(cfg).train()
    ids = torch.randint(0, V, (B, T))
    onnx_path, step = os.path.join(work, "gpt2_dropout.onnx"), os.path.join(work, "gpt2_eval.so")
    tcc_export.export(WithLoss(model), (ids, ids.clone()), onnx_path,
                      input_names=["input_ids", "labels"], output_names=["loss"])
    run([args.tcc, onnx_path, "--target=cpu", "--cpu-precision=f64", "--with-eval", "-o", step])
    val = np.random.default_rng(9).integers(0, V, 1000).astype(np.uint16)
    val_path = os.path.join(work, "val.bin")
    val.tofile(val_path)

    def reference(params, batches, train_mode=False):
        m = Tr.GPT2LMHeadModel(cfg)
        if params is not None:
            m.load_state_dict({k: torch.from_numpy(v) for k, v in params.items()}, strict=False)
        m = m.double().train(train_mode)
        losses = []
        with torch.no_grad():
            for k in range(batches):
                x = torch.from_numpy(np.stack([val[(k * B + b) * T:][:T] for b in range(B)])
                                     .astype(np.int64))
                logits = m(input_ids=x, use_cache=False).logits
                losses.append(float(F.cross_entropy(logits[:, :-1].reshape(-1, V),
                                                    x[:, 1:].reshape(-1))))
        return float(np.mean(losses))

    # The initial weights, without training: every whole batch (31).
    out = run([args.tcc_run, step, "--eval-only", "--val-data", val_path])
    got0 = float(out.split("validation loss ")[1].split(",")[0])
    model.eval()
    with torch.no_grad():
        want0 = reference({k[len("m."):]: v.detach().numpy() for k, v in
                           WithLoss(model).named_parameters()}, (len(val) - 1) // T // B)
    if abs(got0 - want0) > 1e-5 * want0:  # printed to 6 decimals
        raise RuntimeError("--eval-only: %.6f, PyTorch eval mode %.6f" % (got0, want0))

    metrics, dump = os.path.join(work, "val_metrics.jsonl"), os.path.join(work, "val_dump")
    ck = os.path.join(work, "val_ck")
    run([args.tcc_run, step, "--data", data_path, "--val-data", val_path, "--eval-every", "2",
         "--eval-batches", "3", "--steps", "4", "--lr", "1e-2", "--metrics", metrics,
         "--dump", dump, "--checkpoint", ck, "--quiet"])
    import json
    rows = [json.loads(line) for line in open(metrics)]
    evaluated = [r["step"] for r in rows if "val_loss" in r]
    if evaluated != [2, 4]:
        raise RuntimeError("validation at steps %s, not [2, 4]" % evaluated)
    params = {}
    for f in os.listdir(os.path.join(dump, "params")):
        params[f[:-len(".npy")][len("m."):]] = np.load(os.path.join(dump, "params", f))
    want = reference(params, 3)
    got = rows[-1]["val_loss"]
    if abs(got - want) > 1e-9 * want:
        raise RuntimeError("val_loss %.12g, PyTorch eval mode %.12g" % (got, want))
    # With dropout on, the same parameters' loss is another number: the
    # comparison above tells the two apart.
    torch.manual_seed(2)
    dropped = reference(params, 3, train_mode=True)
    if abs(dropped - want) < 1e-4 * want:
        raise RuntimeError("the train-mode loss %.9g is too close to tell apart" % dropped)
    again = run([args.tcc_run, step, "--eval-only", "--val-data", val_path, "--eval-batches",
                 "3", "--resume", ck])
    if "validation loss %.6f" % got not in again or "(step 4)" not in again:
        raise RuntimeError("--eval-only --resume says:\n%s\nthe run logged %.6f" % (again, got))
    # The fp16 CUDA step (through tcc's CUDA emulation): its evaluation step
    # holds fp16 copies of the fp32 master weights.
    emu, emu_dump = os.path.join(work, "gpt2_eval_emu.so"), os.path.join(work, "val_dump_emu")
    emu_metrics = os.path.join(work, "val_metrics_emu.jsonl")
    run([args.tcc, onnx_path, "--cuda-emulation", "--with-eval", "-o", emu])
    emu_ck = os.path.join(work, "val_ck_emu")
    run([args.tcc_run, emu, "--data", data_path, "--val-data", val_path, "--eval-batches", "3",
         "--steps", "2", "--lr", "1e-2", "--metrics", emu_metrics, "--dump", emu_dump,
         "--checkpoint", emu_ck, "--quiet"])
    emu_got = [json.loads(line) for line in open(emu_metrics)][-1]["val_loss"]
    # --eval-only of its checkpoint: the device arena gets the checkpoint's
    # parameters, not the initial ones.
    emu_again = run([args.tcc_run, emu, "--eval-only", "--val-data", val_path, "--eval-batches",
                     "3", "--resume", emu_ck])
    if "validation loss %.6f" % emu_got not in emu_again:
        raise RuntimeError("fp16 --eval-only --resume says:\n%s\nthe run logged %.6f"
                           % (emu_again, emu_got))
    emu_want = reference({f[:-len(".npy")][len("m."):]: np.load(os.path.join(emu_dump, "params", f))
                          for f in os.listdir(os.path.join(emu_dump, "params"))}, 3)
    if abs(emu_got - emu_want) > 5e-3 * emu_want:
        raise RuntimeError("fp16 val_loss %.6f, PyTorch float64 eval mode %.6f" % (emu_got, emu_want))
    refused = run([args.tcc_run, os.path.join(work, "gpt2.so"), "--data", data_path,
                   "--val-data", val_path], expect=1)
    if "--with-eval" not in refused:
        raise RuntimeError("a step without an evaluation step:\n" + refused)
    return ("val loss %.6f = PyTorch eval-mode %.6f (rel %.1e); initial %.6f = %.6f; "
            "fp16 CUDA (emulated) rel %.1e" % (got, want, abs(got - want) / want, got0, want0,
                                               abs(emu_got - emu_want) / emu_want))


def check_inference(args, work, data_path):
    """An inference export that --save --model fills with the trained
    weights: onnxruntime generates from it what transformers generates from
    the same trained weights, at any batch and length."""
    import onnx
    import onnxruntime as ort
    import tcc_hf
    import transformers as Tr
    from onnx import numpy_helper
    step, onnx_path = os.path.join(work, "gpt2.so"), os.path.join(work, "gpt2.onnx")
    infer = os.path.join(work, "gpt2.infer.onnx")
    ids = torch.randint(0, V, (B, T))
    names = tcc_export.export_inference(Logits(gpt2()), (ids,), infer, training_model=onnx_path,
                                        input_names=["input_ids"], output_names=["logits"])
    want = set(metadata(onnx_path)[tcc_export.METADATA_KEY].split(","))
    if set(names) != want:
        raise RuntimeError("the inference export's parameters %s differ from the training "
                           "model's: %s" % (sorted(set(names) ^ want)[:4], len(want)))
    train = [args.tcc_run, step, "--data", data_path, "--steps", "3", "--lr", "1e-2", "--quiet"]
    saved = os.path.join(work, "gpt2_trained_for_infer.onnx")
    saved_infer = os.path.join(work, "gpt2_trained.infer.onnx")
    run(train + ["--save", saved])
    run(train + ["--save", saved_infer, "--model", infer])
    a = {t.name: numpy_helper.to_array(t) for t in onnx.load(saved).graph.initializer}
    b = {t.name: numpy_helper.to_array(t) for t in onnx.load(saved_infer).graph.initializer}
    initial = {t.name: numpy_helper.to_array(t) for t in onnx.load(onnx_path).graph.initializer}
    differ = [n for n in want if not np.array_equal(a[n], b[n])]
    if differ or all(np.array_equal(a[n], initial[n]) for n in want):
        raise RuntimeError("the inference model's weights are not the trained ones: %s" % differ[:4])

    # Greedy generation: onnxruntime on the inference model, transformers on
    # the same trained weights (as safetensors).
    cfg_dir, hf_dir = os.path.join(work, "gpt2_config"), os.path.join(work, "gpt2_hf_infer")
    gpt2().config.save_pretrained(cfg_dir)
    tcc_hf.write_safetensors(saved, hf_dir, config_from=cfg_dir)
    hf = Tr.GPT2LMHeadModel.from_pretrained(hf_dir).eval()
    sess = ort.InferenceSession(saved_infer, providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch, prompt in ((1, 5), (3, 11)):
        x = torch.randint(0, V, (batch, prompt), generator=torch.Generator().manual_seed(batch))
        for _ in range(6):
            got = sess.run(None, {"input_ids": x.numpy()})[0]
            with torch.no_grad():
                ref = hf(input_ids=x, use_cache=False).logits.numpy()
            if got.shape != ref.shape:
                raise RuntimeError("logits %s, transformers %s" % (got.shape, ref.shape))
            worst = max(worst, float(np.abs(got - ref).max()))
            if worst > 1e-4:
                raise RuntimeError("logits at %s off by %.3g" % (tuple(x.shape), worst))
            nxt_ort, nxt_hf = got[:, -1].argmax(-1), ref[:, -1].argmax(-1)
            if not np.array_equal(nxt_ort, nxt_hf):
                raise RuntimeError("onnxruntime generates %s, transformers %s" % (nxt_ort, nxt_hf))
            x = torch.cat([x, torch.from_numpy(nxt_ort)[:, None]], 1)

    # A model for --model with a parameter the step does not train: refused,
    # by export_inference and by --save, and no file written.
    other = Tr.GPT2LMHeadModel(Tr.GPT2Config(n_layer=3, n_embd=32, n_head=4, vocab_size=V,
                                             n_positions=64))
    try:
        tcc_export.export_inference(Logits(other), (ids,), os.path.join(work, "x.onnx"),
                                    training_model=onnx_path, input_names=["input_ids"])
        raise RuntimeError("export_inference took a model with a layer more")
    except ValueError as e:
        if "m.transformer.h.2" not in str(e):
            raise
    bad = os.path.join(work, "gpt2_3layer.infer.onnx")
    tcc_export.export_inference(Logits(other), (ids,), bad, input_names=["input_ids"])
    bad_out = os.path.join(work, "gpt2_3layer_trained.onnx")
    out = run(train + ["--save", bad_out, "--model", bad], expect=1)
    if "m.transformer.h.2" not in out or "tcc.trainable" not in out or os.path.exists(bad_out):
        raise RuntimeError("--save into a model with an untrained layer:\n" + out)
    return "%d trained tensors in the inference model; greedy tokens equal transformers', " \
        "logits within %.1e" % (len(want), worst)


def check_peft_adapter(args, work):
    """The LoRA step's trained adapters as a PEFT adapter folder."""
    import peft
    import tcc_hf
    saved = os.path.join(work, "lora_trained.onnx")  # check_lora's
    adapter_cfg, out = os.path.join(work, "lora_adapter_config"), os.path.join(work, "lora_hf")
    base = gpt2()
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0,
                             fan_in_fan_out=True)
    peft.get_peft_model(gpt2(), config).save_pretrained(adapter_cfg)
    names = tcc_hf.write_safetensors(saved, out, peft=True, adapter_config_from=adapter_cfg)
    model = peft.PeftModel.from_pretrained(base, out).eval()
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        got = float(model(input_ids=ids, labels=ids).loss)
    ref = ort_loss(saved, ids)
    if abs(got - ref) > 1e-5 * abs(ref):
        raise RuntimeError("PeftModel's loss %.9g, onnxruntime's %.9g" % (got, ref))
    return "%d adapter tensors; PeftModel loss %.6f = onnxruntime %.6f" % (len(names), got, ref)


def check_tokens(args, work):
    """python/tcc_hf.py tokens: a local tokenizer's token stream that
    tcc-run --data reads, and that decodes back to the text."""
    import tcc_hf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    corpus = os.path.join(HERE, "..", "..", "examples", "data", "corpus.txt")
    text = open(corpus, encoding="utf-8").read()
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=V, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok_dir = os.path.join(work, "tokenizer")
    PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>").save_pretrained(tok_dir)
    out = os.path.join(work, "tokens")
    counts = tcc_hf.write_tokens(tok_dir, [corpus], out, 0.1)
    train = np.fromfile(os.path.join(out, "train.bin"), dtype=np.uint16)
    val = np.fromfile(os.path.join(out, "val.bin"), dtype=np.uint16)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    ids = np.concatenate([train, val]).tolist()
    if ids[-1] != tok.eos_token_id or tok.decode(ids[:-1]) != text:
        raise RuntimeError("the token stream does not decode to the text")
    if len(val) != counts["val"] or abs(len(val) - 0.1 * len(ids)) > 1:
        raise RuntimeError("val.bin has %d of %d tokens" % (len(val), len(ids)))
    run([args.tcc_run, os.path.join(work, "gpt2.so"), "--data", os.path.join(out, "train.bin"),
         "--steps", "2", "--quiet"])
    return "%d train + %d val tokens (vocab %d), decode round trip exact, trained on" % (
        counts["train"], counts["val"], counts["vocab"])


def check_same_tensor(args, work):
    model = gpt2()
    ids = torch.randint(0, V, (B, T))
    onnx_path = os.path.join(work, "gpt2_same.onnx")
    tcc_export.export(WithLoss(model), (ids, ids), onnx_path,
                      input_names=["input_ids", "labels"], output_names=["loss"])
    import onnx
    g = onnx.load(onnx_path).graph
    read = {i for n in g.node for i in n.input}
    unread = [i.name for i in g.input if i.name not in read]
    if unread:
        raise RuntimeError("graph inputs read by no node: %s" % unread)
    rec = metadata(onnx_path).get(tcc_export.OBJECTIVE_KEY, "")
    if "labels-shift=shifted" not in rec or "ids=input_ids" not in rec:
        raise RuntimeError("recorded objective %r" % rec)
    out = run([args.tcc, onnx_path, "--emit=summary"])
    if "warning" in out:
        raise RuntimeError("tcc warns:\n" + out)
    return "both inputs read, objective recorded"


def check_lora(args, work):
    import peft
    base = gpt2()
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"],
                                                      lora_dropout=0.0, fan_in_fan_out=True))
    # Non-zero adapters (peft starts lora_B at zero, which makes every
    # gradient of lora_A zero).
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    wrapped = WithLoss(model)
    ids = torch.randint(0, V, (B, T))
    onnx_path = os.path.join(work, "lora.onnx")
    trainable = tcc_export.export(wrapped, (ids, ids.clone()), onnx_path,
                                  input_names=["input_ids", "labels"], output_names=["loss"])
    torch_trainable = {n for n, p in wrapped.named_parameters() if p.requires_grad}
    torch_frozen = {n for n, p in wrapped.named_parameters() if not p.requires_grad}
    if set(trainable) != torch_trainable:
        raise RuntimeError("tcc.trainable lists %d tensors, PyTorch trains %d"
                           % (len(trainable), len(torch_trainable)))
    frozen = set(metadata(onnx_path).get(tcc_export.FROZEN_KEY, "").split(","))
    summary = run([args.tcc, onnx_path, "--emit=summary"])
    want = "%d trainable, %d frozen" % (len(torch_trainable), len(frozen))
    if want not in summary:
        raise RuntimeError("tcc's summary does not say %r:\n%s" % (want, summary))

    step = os.path.join(work, "lora.so")
    run([args.tcc, onnx_path, "--target=cpu", "--cpu-precision=f64", "-o", step])
    feed = os.path.join(work, "lora_feed")
    os.makedirs(feed, exist_ok=True)
    x = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(5))
    np.save(os.path.join(feed, "input_ids.npy"), x.numpy())
    np.save(os.path.join(feed, "labels.npy"), x.numpy())
    dump = os.path.join(work, "lora_grads")
    run([args.tcc_run, step, "--feed", feed, "--grads-only", "--dump", dump])
    ref = WithLoss(model).double()
    loss = ref(x, x.clone())
    loss.backward()
    loss = float(loss.detach())
    got_loss = float(np.load(os.path.join(dump, "loss.npy")))
    # The export holds float32 constants that the float64 reference computes
    # in float64: ~1e-8 relative.
    if abs(got_loss - float(loss)) > 1e-6 * abs(float(loss)):
        raise RuntimeError("loss %.12g vs PyTorch %.12g" % (got_loss, loss))
    worst = 0.0
    for n, p in ref.named_parameters():
        path = os.path.join(dump, "grads", n.replace("/", "_") + ".npy")
        if not p.requires_grad:
            if os.path.exists(path):
                raise RuntimeError("a gradient for frozen %s" % n)
            continue
        g = np.load(path).astype(np.float64)
        want_g = p.grad.numpy()
        err = np.abs(g - want_g)
        if np.any(err > 1e-6 + 1e-4 * np.abs(want_g)):
            raise RuntimeError("gradient of %s off by %.3g" % (n, err.max()))
        worst = max(worst, float(err.max() / max(np.abs(want_g).max(), 1e-30)))

    saved = os.path.join(work, "lora_trained.onnx")
    run([args.tcc_run, step, "--feed", feed, "--steps", "2", "--lr", "1e-2", "--quiet",
         "--save", saved])
    import onnx
    from onnx import numpy_helper
    before = {t.name: numpy_helper.to_array(t) for t in onnx.load(onnx_path).graph.initializer}
    after = {t.name: numpy_helper.to_array(t) for t in onnx.load(saved).graph.initializer}
    moved = [n for n in frozen if not np.array_equal(before[n], after[n])]
    if moved:
        raise RuntimeError("--save changed frozen parameters: %s" % moved[:4])
    trained = [n for n in torch_trainable if not np.array_equal(before[n], after[n])]
    if len(trained) != len(torch_trainable):
        raise RuntimeError("only %d of %d adapters changed" % (len(trained), len(torch_trainable)))
    return "%d trained (PyTorch %d), %d frozen; worst adapter grad rel %.1e" % (
        len(trainable), len(torch_trainable), len(frozen), worst)


def check_plain(args, work):
    model = gpt2()
    ids = torch.randint(0, V, (B, T))
    onnx_path = os.path.join(work, "plain.onnx")
    torch.onnx.export(WithLoss(model), (ids, ids.clone()), onnx_path, dynamo=True,
                      input_names=["input_ids", "labels"], output_names=["loss"], verbose=False)
    out = run([args.tcc, onnx_path, "--emit=summary"], expect=1)
    if out.count("error:") != 1 or "tcc_export" not in out or "val_" not in out:
        raise RuntimeError("the plain export's refusal:\n" + out)
    run([args.tcc, onnx_path, "--emit=summary", "--allow-unrecorded"])
    return "refused: " + out.strip().splitlines()[0][:110] + "..."


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--only", help="run only the checks named here (comma-separated; "
                   "later checks use files that earlier ones write)")
    args = p.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.workdir, exist_ok=True)
    data = np.random.default_rng(3).integers(0, V, 4096).astype(np.uint16)
    data_path = os.path.join(args.workdir, "train.bin")
    data.tofile(data_path)
    checks = [("objective", lambda: check_objective(args, args.workdir, data_path, data)),
              ("same-tensor", lambda: check_same_tensor(args, args.workdir)),
              ("safetensors", lambda: check_safetensors(args, args.workdir, data_path)),
              ("inference", lambda: check_inference(args, args.workdir, data_path)),
              ("validation", lambda: check_validation(args, args.workdir, data_path)),
              ("tokens", lambda: check_tokens(args, args.workdir)),
              ("lora", lambda: check_lora(args, args.workdir)),
              ("peft-adapter", lambda: check_peft_adapter(args, args.workdir)),
              ("plain", lambda: check_plain(args, args.workdir))]
    if args.only:
        checks = [c for c in checks if c[0] in args.only.split(",")]
    passed = failed = 0
    for name, fn in checks:
        try:
            print("%-12s ok      %s" % (name, fn()))
            passed += 1
        except Exception as e:  # noqa: BLE001  (each check reports its own failure)
            print("%-12s FAILED  %s" % (name, e))
            failed += 1
        sys.stdout.flush()
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

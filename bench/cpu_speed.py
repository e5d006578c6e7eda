"""CPU step speed: tcc's fp32 CPU step beside PyTorch eager and torch.compile.

Usage (tcc's virtual environment, which has torch and transformers):
  ~/.cache/tcc/venv/bin/python bench/cpu_speed.py --tcc build/bin/tcc \
      [--models demo,gpt6,llama,gpt2] [--threads 1,2] [--workdir DIR]

For each model, in this one run, one training step (forward, backward and
AdamW, no accumulation) on the same batch, median of several steps after a
warm-up, at each thread count:
  tcc (ref)   the step compiled with --cpu-gemm=reference (tcc's own GEMM,
              accumulating in double; what tcc had before it used a BLAS);
  tcc (BLAS)  the default step: its GEMMs on the CBLAS library tcc was built
              with (OpenBLAS; docs/cpu.md);
  eager       PyTorch eager, torch.set_num_threads(N);
  compile     torch.compile (inductor) of the same module, after its compile.
tcc's steps run in a child process that imports only numpy (test/e2e's
step_abi), so that no BLAS of PyTorch's can stand in for tcc's; its thread
count goes to the step through tcc_step_set_threads, as tcc-run --threads
does. The models:
  demo   the bundled demo GPT (2 x 64, context 32, batch 8, vocabulary 65);
  gpt6   a GPT of 6 layers, width 256, context 256, batch 4, vocabulary 65;
  llama  Hugging Face Llama (4 layers, width 256, vocabulary 32000), batch
         2 x 128, exported with python/tcc_export.py;
  gpt2   GPT-2 small's shape (12 x 768, vocabulary 50257) at batch 1 x 256.
ONNX Runtime Training runs in its own environment: bench/ort_training.sh.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


# ---- the child: one tcc step, numpy only -------------------------------------

def worker(so, feed_path, threads, runs):
    import ctypes

    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
    import step_abi

    step = step_abi.Step(so)
    fn = getattr(step.lib, "tcc_step_set_threads", None)
    if fn is None:
        raise SystemExit("%s has no tcc_step_set_threads" % so)
    fn.argtypes = [ctypes.c_int32]
    fn.restype = ctypes.c_int
    if fn(threads) != 0:
        raise SystemExit("tcc_step_set_threads(%d) failed" % threads)
    step.init()
    feed = np.load(feed_path)
    for name in feed.files:
        step.set_input(name, feed[name])
    args = step_abi.OptimArgs(lr=1e-4, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
                              momentum=0.0, nesterov=0, clip_norm=0.0, step=0, decay=None,
                              grad_norm=0.0, loss_scale=0.0)
    times = []
    loss0 = None
    for i in range(runs + 1):
        t0 = time.perf_counter()
        step.zero_grads()
        step.micro_step(1.0)
        if loss0 is None:
            loss0 = float(step.loss())
        args.step = i
        step.apply(args)
        if i:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"ms": statistics.median(times) * 1e3, "loss0": loss0}))


# ---- the parent ---------------------------------------------------------------

def tiny_gpt(c):
    sys.path.insert(0, os.path.join(ROOT, "test", "models"))
    from export_models import TinyGPT
    import torch
    torch.manual_seed(0)
    m = TinyGPT(vocab=c["vocab"], block_size=c["block"], n_embd=c["embd"], n_layer=c["layers"],
                n_head=c["heads"], gelu_approx="tanh")
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, c["vocab"], (c["batch"], c["block"]), generator=gen)
    tgt = torch.randint(0, c["vocab"], (c["batch"], c["block"]), generator=gen)
    return m, {"idx": idx, "targets": tgt}, (lambda mod, f: mod(f["idx"], f["targets"]))


def hf_model(kind, c):
    import torch
    import transformers
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=688,
                                       num_hidden_layers=4, num_attention_heads=8,
                                       num_key_value_heads=8, max_position_embeddings=256)
        m = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024,
                                      vocab_size=50257, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0)
        m = transformers.GPT2LMHeadModel(cfg)
    m.config.use_cache = False
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (c["batch"], c["block"]), generator=gen)

    class Wrapper(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, labels):
            return self.m(input_ids=input_ids, labels=labels, use_cache=False).loss

    return Wrapper(m), {"input_ids": ids, "labels": ids.clone()}, (
        lambda mod, f: mod(f["input_ids"], f["labels"]))


MODELS = {
    "demo": ("demo GPT 2x64, B 8x32", dict(vocab=65, block=32, embd=64, layers=2, heads=4,
                                           batch=8, runs=20)),
    "gpt6": ("GPT 6x256, B 4x256, V 65", dict(vocab=65, block=256, embd=256, layers=6, heads=8,
                                              batch=4, runs=5)),
    "llama": ("HF Llama 4x256, B 2x128, V 32000", dict(batch=2, block=128, runs=5)),
    "gpt2": ("GPT-2 small, B 1x256", dict(batch=1, block=256, runs=3)),
}


def build(key, c, workdir):
    import torch
    if key in ("demo", "gpt6"):
        model, feed, call = tiny_gpt(c)
    else:
        model, feed, call = hf_model(key, c)
    model.train()
    path = os.path.join(workdir, key + ".onnx")
    if not os.path.exists(path):
        sys.path.insert(0, os.path.join(ROOT, "python"))
        from tcc_export import export
        names = list(feed)
        export(model, tuple(feed[n] for n in names), path, input_names=names,
               output_names=["loss"])
    return model, feed, call, path


def tcc_step(tcc, onnx_path, gemm, workdir, key):
    so = os.path.join(workdir, "%s-%s.so" % (key, gemm))
    r = subprocess.run([tcc, "--target=cpu", onnx_path, "-o", so, "--cpu-gemm=" + gemm,
                        "--mem-budget=64G"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("tcc failed on %s:\n%s" % (onnx_path, r.stdout[-2000:]))
    return so


def time_tcc(so, feed_path, threads, runs):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", so, feed_path,
                        str(threads), str(runs)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("timing %s failed:\n%s" % (so, r.stdout[-2000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def time_torch(model, feed, call, runs, compiled):
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    fn = torch.compile(model) if compiled else model
    times = []
    loss0 = None
    for i in range(runs + (2 if compiled else 1)):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = call(fn, feed)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if loss0 is None:
            loss0 = float(loss)
        if i >= (2 if compiled else 1):
            times.append(dt)
    return {"ms": statistics.median(times) * 1e3, "loss0": loss0}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--models", default="demo,gpt6,llama")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the step with tcc's own GEMM (minutes a step on GPT-2 small)")
    p.add_argument("--workdir", default="/tmp/tcc-cpu-speed")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import copy

    import numpy as np
    import torch
    threads = [int(t) for t in args.threads.split(",")]
    rows = []
    for key in args.models.split(","):
        title, c = MODELS[key]
        model, feed, call, path = build(key, c, args.workdir)
        feed_path = os.path.join(args.workdir, key + "-feed.npz")
        np.savez(feed_path, **{k: v.numpy() for k, v in feed.items()})
        gemms = ("blas",) if args.no_reference else ("reference", "blas")
        sos = {g: tcc_step(args.tcc, path, g, args.workdir, key) for g in gemms}
        state = copy.deepcopy(model.state_dict())
        for n in threads:
            torch.set_num_threads(n)
            row = {"model": title, "threads": n}
            for g, so in sos.items():
                row["tcc " + g] = time_tcc(so, feed_path, n, c["runs"])
            model.load_state_dict(state)
            row["eager"] = time_torch(model, feed, call, c["runs"], False)
            if not args.no_compile:
                model.load_state_dict(state)
                torch._dynamo.reset()
                try:
                    row["compile"] = time_torch(model, feed, call, c["runs"], True)
                except Exception as e:  # inductor needs a working C++ toolchain
                    row["compile"] = {"ms": float("nan"), "loss0": float("nan"),
                                      "error": str(e).splitlines()[0][:80]}
            model.load_state_dict(state)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)

    cols = ["tcc reference", "tcc blas", "eager", "compile"]
    print("| model | threads | tcc (ref GEMM) ms | tcc (BLAS) ms | torch eager ms | "
          "torch.compile ms | BLAS / eager | BLAS / compile | loss0 tcc / torch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        get = lambda k: r.get(k, {}).get("ms", float("nan"))
        print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.4f / %.4f |" % (
            r["model"], r["threads"], get("tcc reference"), get("tcc blas"), get("eager"),
            get("compile"), get("tcc blas") / get("eager"), get("tcc blas") / get("compile"),
            r["tcc blas"]["loss0"], r["eager"]["loss0"]))
    print("one step (forward, backward, AdamW), median after a warm-up; lower is faster; "
          "a ratio below 1 means tcc's step is faster")


if __name__ == "__main__":
    main()

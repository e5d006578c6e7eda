#!/usr/bin/python3
"""How long `tcc -o step.so` takes, and whose time it is: tcc's own work
(import, autodiff, fusion, the memory plan, emission) against the host
compiler's or nvcc's, by model size and target.

Usage: /usr/bin/python3 bench/compile_time.py --tcc build/bin/tcc [--work DIR]
           [--models tiny,gpt-mini,gpt2,tinyllama] [--targets cpu,cuda,cuda-emulation]

For each model and target it measures, in the same run:
  tcc only       `tcc --emit=planned` (everything before the compilers);
  cold           `-o step.so` with an empty cache (TCC_CACHE_DIR): the step's
                 generated half and its fixed half (CUDA: runtime/cuda/
                 step_host.cu, step_comm.cu, gemm.cu, and kernels.cu, the prebuilt
                 launchers; CPU: runtime/cpu/kernels.cpp, the prebuilt
                 kernels) are compiled, in parallel, and with GCC the
                 precompiled prelude;
  warm           `-o step.so` again: the fixed half and the prelude come from
                 tcc's cache, only the generated half is compiled (what every
                 build after the first one costs);
  serial         the reference: the --emit=source folder's build.sh, which
                 compiles the generated half and the fixed half's units one
                 after another, uncached (the compiler work of a step build
                 without the cache; the build before the split was one unit
                 of the same code);
  one unit       CPU target: the generated half compiled as one unit with the
                 header-only kernel library, uncached, what every CPU step
                 build compiled before the kernels were prebuilt.
Each time is the best of --repeat runs (wall clock). Models: the bundled
demo GPT (tiny), a 4-layer width-256 GPT (gpt-mini), GPT-2 small (gpt2,
bench/gpu/export_gpt2.py, micro-batch 1 x 1024; exported once into --work;
--no-weights, so embedding 124M parameters does not count), and on request
TinyLlama-1.1B's shape (tinyllama, bench/export_large.py, 1 x 2048, at
--mem-budget=12G on the CUDA targets; `tcc --timing` says which pass takes
the planning time). Prints a table.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "models"))

TARGET_FLAGS = {
    "cpu": ["--target=cpu"],
    "cuda": ["--target=cuda"],
    "cuda-emulation": ["--target=cuda", "--cuda-emulation"],
}


# Models planned within a budget on the CUDA targets (the 1B model does not
# fit a 12 GB card without one: tcc moves state to the host).
BUDGETS = {"tinyllama": "12G"}


def timed(cmd, env=None, cwd=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       universal_newlines=True, env=env, cwd=cwd)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError("`%s` failed: %s" % (" ".join(cmd[:3]), p.stderr[-800:]))
    return dt


def best(n, fn):
    return min(fn() for _ in range(n))


def export_models(work, names):
    paths = {}
    for name in names:
        path = os.path.join(work, name + ".onnx")
        if name == "tiny":
            path = os.path.join(ROOT, "examples", "tiny_gpt_demo.onnx")
        elif not os.path.exists(path):
            if name == "gpt2":
                subprocess.run([sys.executable, os.path.join(HERE, "gpu", "export_gpt2.py"), path,
                                "--batch", "1", "--seq", "1024"], check=True)
            elif name == "tinyllama":
                # TinyLlama-1.1B's shape (1.03B parameters, 1 x 2048),
                # planned within BUDGETS' 12G (host offload chosen by tcc).
                d = os.path.join(work, "tinyllama")
                path = os.path.join(d, "tinyllama.onnx")
                venv = os.path.expanduser("~/.cache/tcc/venv/bin/python")
                if not os.path.exists(path):
                    subprocess.run([venv if os.path.exists(venv) else sys.executable,
                                    os.path.join(HERE, "export_large.py"),
                                    "tinyllama", d], check=True)
            elif name == "gpt-mini":
                import torch
                from export_models import TinyGPT
                torch.manual_seed(0)
                m = TinyGPT(vocab=512, block_size=128, n_embd=256, n_layer=4, n_head=4,
                            gelu_approx="tanh")
                idx = torch.randint(0, 512, (4, 128))
                torch.onnx.export(m, (idx, idx), path, input_names=["idx", "targets"],
                                  output_names=["loss"], opset_version=17,
                                  training=torch.onnx.TrainingMode.TRAINING,
                                  do_constant_folding=False)
            else:
                raise SystemExit("unknown model " + name)
        paths[name] = path
    return paths


def serial_time(tcc, model, flags, env):
    """The reference: build.sh of the --emit=source folder, which compiles
    the generated half and the fixed half's units one after another, with
    no cache (the work every step build did before the fixed half was
    cached)."""
    d = tempfile.mkdtemp(prefix="tcc-serial-")
    try:
        subprocess.run([tcc, model] + flags + ["--no-weights", "--emit=source", "-o", d],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env)
        return timed(["sh", os.path.join(d, "build.sh")],
                     env=dict(env, NVCC="/usr/local/cuda/bin/nvcc"))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def one_unit_time(tcc, model, flags, env):
    """The CPU reference: step.cpp as one unit with the whole header-only
    kernel library (without TCC_CPU_PREBUILT_KERNELS)."""
    d = tempfile.mkdtemp(prefix="tcc-unit-")
    try:
        subprocess.run([tcc, model] + flags + ["--no-weights", "--emit=source", "-o", d],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env)
        cxx = env.get("CXX") or shutil.which("c++") or "g++"
        return timed([cxx, "-std=c++17", "-O3", "-fPIC", "-fvisibility=hidden", "-I", ".",
                      "-shared", "-o", "step.so", "step.cpp"], env=env, cwd=d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "tcc-compile-time"))
    ap.add_argument("--models", default="tiny,gpt-mini,gpt2")
    ap.add_argument("--targets", default="cpu,cuda,cuda-emulation")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    tcc = os.path.abspath(a.tcc)
    os.makedirs(a.work, exist_ok=True)
    models = export_models(a.work, a.models.split(","))
    print("%-9s %-15s %9s %9s %9s %9s %9s   (seconds, best of %d; %d cores)" % (
        "model", "target", "tcc only", "cold", "warm", "serial", "one unit", a.repeat,
        os.cpu_count()))
    for name, path in models.items():
        for target in a.targets.split(","):
            if target == "cuda" and not os.path.exists("/usr/local/cuda/bin/nvcc"):
                continue
            flags = TARGET_FLAGS[target] + ["--no-weights"] + (
                ["--mem-budget=" + BUDGETS[name]] if name in BUDGETS and target != "cpu" else [])
            out = os.path.join(a.work, "%s-%s.so" % (name, target))
            cache = os.path.join(a.work, "cache")
            env = dict(os.environ, TCC_CACHE_DIR=cache)

            def cold():
                shutil.rmtree(cache, ignore_errors=True)
                return timed([tcc, path] + flags + ["-o", out], env=env)
            only = best(a.repeat, lambda: timed([tcc, path] + flags + ["--emit=planned", "-o",
                                                                       os.devnull], env=env))
            c = best(a.repeat, cold)
            w = best(a.repeat, lambda: timed([tcc, path] + flags + ["-o", out], env=env))
            one = best(a.repeat, lambda: serial_time(tcc, path, TARGET_FLAGS[target], env))
            unit = None
            if target == "cpu":
                unit = best(a.repeat, lambda: one_unit_time(tcc, path, TARGET_FLAGS[target], env))
            print("%-9s %-15s %9.2f %9.2f %9.2f %9.2f %9s" % (
                name, target, only, c, w, one, "%.2f" % unit if unit is not None else "-"),
                flush=True)


if __name__ == "__main__":
    main()

"""The CUDA target builds for every test model (no GPU needed).

Usage: /usr/bin/python3 check_cuda_build.py --tcc TCC --tcc-run TCC_RUN --workdir DIR
                                            [--payload DIR] [MODEL ...]

For each test model (test/models/export_models.py, the models
check_gradients.py checks on the CPU target, and wide_rows):
  1. export it and compile it with `tcc --target=cuda -o step.so` (nvcc);
  2. load the library (ctypes) and check its step table: target "cuda", a
     device arena, ABI 9, every parameter with a gradient accumulator;
  3. without a GPU: `tcc-run step.so --grads-only` must fail with exit code 1
     and a message naming the CUDA error (cudaErrorInsufficientDriver or
     cudaErrorNoDevice), never a crash.
Then the bundled tiny GPT with --offload=all (master weights, optimizer state
and accumulators in host memory): it builds with nvcc and its tables say so
(--no-offload leaves it out). With --build-sh, `tcc --emit=source -o DIR`
of the bundled tiny GPT: DIR/build.sh builds a library with the step ABI's
symbols on its own (nvcc compiles the fixed half too: a minute).
With --payload DIR it also prepares what bench/gpu/run.sh checks on the GPU
machine: DIR/steps/<model>.so, DIR/feeds/<model>/ and DIR/ref/<model>/ (the
CPU target's loss and gradients for the same batch, from tcc-run --dump).
Prints a table and ends with `N passed, M failed`.
"""
import argparse
import ctypes
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
sys.path.insert(0, HERE)
import export_models  # noqa: E402
from check_gradients import APPENDED_LOSS, DEFAULT_MODELS, model_flags  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402


def run(cmd, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stdout))
    return r


class Desc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32),
                ("rank", ctypes.c_int32), ("dims", ctypes.POINTER(ctypes.c_int64)),
                ("offset", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("location", ctypes.c_int32)]


class Info(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("model", ctypes.c_char_p),
                ("model_path", ctypes.c_char_p), ("target", ctypes.c_char_p),
                ("arena_bytes", ctypes.c_uint64), ("has_backward", ctypes.c_int32),
                ("num_params", ctypes.c_int32), ("params", ctypes.POINTER(Desc)),
                ("grads", ctypes.POINTER(Desc)), ("num_inputs", ctypes.c_int32),
                ("inputs", ctypes.POINTER(Desc)), ("num_outputs", ctypes.c_int32),
                ("outputs", ctypes.POINTER(Desc)), ("optimizer", ctypes.c_char_p),
                ("num_state", ctypes.c_int32), ("state", ctypes.POINTER(Desc)),
                ("mem_budget", ctypes.c_uint64), ("device_arena", ctypes.c_int32),
                ("weights_embedded", ctypes.c_int32), ("num_ops", ctypes.c_int32),
                ("ops", ctypes.POINTER(ctypes.c_char_p)),
                ("op_live_bytes", ctypes.POINTER(ctypes.c_uint64)),
                ("host_bytes", ctypes.c_uint64), ("objective", ctypes.c_char_p)]


def prepare_model(name, workdir, tcc):
    """Exports test model `name` into workdir/name with its feed (and, for a
    model whose loss tcc appends, its targets); returns (folder, ONNX path,
    feed folder, the tcc flags it needs, checked with `tcc`)."""
    work = os.path.join(workdir, name)
    os.makedirs(work, exist_ok=True)
    export_models.export_one(name, work)
    onnx_path = os.path.join(work, name + ".onnx")
    feed_dir = os.path.join(work, name + ".feed")
    extra = []
    if name in APPENDED_LOSS:
        extra.append("--loss=" + APPENDED_LOSS[name][0])
        gen = torch.Generator().manual_seed(99)
        idx = np.load(os.path.join(feed_dir, "idx.npy"))
        np.save(os.path.join(feed_dir, "targets.npy"),
                torch.randint(0, 65, idx.shape, generator=gen).numpy())
    extra += model_flags(tcc, name, onnx_path, extra)
    return work, onnx_path, feed_dir, extra


def check(name, args, have_gpu):
    work, onnx_path, feed_dir, extra = prepare_model(name, args.workdir, args.tcc)
    so = os.path.join(work, "step-cuda.so")
    out = run([args.tcc, onnx_path, "--target=cuda", "-o", so] + extra).stdout
    problems = []
    lib = ctypes.CDLL(so)
    lib.tcc_step_get_info.restype = ctypes.POINTER(Info)
    info = lib.tcc_step_get_info().contents
    if info.abi_version != 9:
        problems.append("abi_version %d" % info.abi_version)
    ops = [info.ops[k] for k in range(info.num_ops)]
    if not ops or not all(ops) or any(info.op_live_bytes[k] > info.arena_bytes for k in range(info.num_ops)):
        problems.append("op table: %d ops, %r" % (len(ops), ops[:3]))
    if info.target != b"cuda" or info.device_arena != 1 or info.weights_embedded != 1:
        problems.append("step table: target %s, device_arena %d, weights_embedded %d"
                        % (info.target, info.device_arena, info.weights_embedded))
    for i in range(info.num_params):
        if info.grads[i].bytes != info.params[i].bytes:
            problems.append("parameter %s has no fp32 accumulator" % info.params[i].name)
    if not have_gpu:
        r = run([args.tcc_run, so, "--feed", feed_dir, "--grads-only"], check=False)
        if r.returncode != 1 or not any(e in r.stdout for e in
                                        ("cudaErrorInsufficientDriver", "cudaErrorNoDevice")):
            problems.append("tcc-run without a GPU: exit %d, %r" % (r.returncode, r.stdout[-300:]))
    if args.payload:
        cpu = os.path.join(work, "step-cpu.so")
        run([args.tcc, "--target=cpu", onnx_path, "-o", cpu] + extra)
        ref = os.path.join(args.payload, "ref", name)
        shutil.rmtree(ref, ignore_errors=True)
        run([args.tcc_run, cpu, "--feed", feed_dir, "--grads-only", "--dump", ref])
        os.makedirs(os.path.join(args.payload, "steps"), exist_ok=True)
        shutil.copy(so, os.path.join(args.payload, "steps", name + ".so"))
        dst = os.path.join(args.payload, "feeds", name)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(feed_dir, dst)
    return info.arena_bytes, problems


def check_build_sh(args, have_gpu):
    """tcc --emit=source -o DIR, then sh DIR/build.sh: the folder builds
    step.so on its own, with the ABI's entry points. Returns its size."""
    src = os.path.join(args.workdir, "source")
    shutil.rmtree(src, ignore_errors=True)
    run([args.tcc, os.path.join(ROOT, "examples", "tiny_gpt_opset17.onnx"), "--target=cuda",
         "--emit=source", "-o", src])
    r = subprocess.run(["sh", "build.sh"], cwd=src, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    so = os.path.join(src, "step.so")
    if r.returncode != 0 or not os.path.isfile(so):
        return 0, ["build.sh failed (exit %d): %s" % (r.returncode, r.stdout[-600:])]
    syms = subprocess.run(["nm", "-D", "--defined-only", so], stdout=subprocess.PIPE, text=True).stdout
    missing = [f for f in ("tcc_step_get_info", "tcc_step_micro_step", "tcc_step_apply",
                           "tcc_step_device_open") if f not in syms]
    return os.path.getsize(so), (["step.so lacks " + ", ".join(missing)] if missing else [])


def check_offload(args, have_gpu):
    """The bundled tiny GPT built by nvcc with every parameter's master
    weights, optimizer state and gradient accumulator in host memory (tcc
    --offload=all): the host tier's CUDA code (runtime/cuda/host_tier.cuh,
    the micro-step's gradient copies) compiles for a GPU, and the step's
    tables put those tensors in the host buffer."""
    work = os.path.join(args.workdir, "offload")
    os.makedirs(work, exist_ok=True)
    so = os.path.join(work, "step-cuda.so")
    model = os.path.join(ROOT, "examples", "tiny_gpt_opset17.onnx")
    run([args.tcc, model, "--target=cuda", "--offload=all", "--host-budget=1G", "-o", so])
    lib = ctypes.CDLL(so)
    lib.tcc_step_get_info.restype = ctypes.POINTER(Info)
    info = lib.tcc_step_get_info().contents
    problems = []
    if info.abi_version != 9 or info.host_bytes == 0:
        problems.append("abi_version %d, host_bytes %d" % (info.abi_version, info.host_bytes))
    tables = (("parameter", info.params, info.num_params), ("gradient", info.grads, info.num_params),
              ("state", info.state, info.num_state))
    for kind, t, n in tables:
        off = [t[i].name for i in range(n) if t[i].bytes and t[i].location != 1]
        if off:
            problems.append("%s tensors outside the host buffer: %s" % (kind, off[:3]))
    for sym in ("tcc_step_host_copy_in", "tcc_step_host_copy_out"):
        if not hasattr(lib, sym):
            problems.append("no " + sym)
    if not have_gpu:
        r = run([args.tcc_run, so, "--feed", os.path.join(ROOT, "examples", "tiny_gpt_opset17.feed"),
                 "--steps", "1"], check=False)
        if r.returncode != 1 or "cudaErrorInsufficientDriver" not in r.stdout and \
                "cudaErrorNoDevice" not in r.stdout:
            problems.append("tcc-run without a GPU: exit %d, %r" % (r.returncode, r.stdout[-300:]))
    return info.host_bytes, problems


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--tcc-run", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--payload")
    p.add_argument("--no-offload", action="store_true", help="leave out the --offload=all build")
    p.add_argument("--build-sh", action="store_true", help="also run an --emit=source folder's build.sh")
    # wide_rows: rows over 1024 elements (the one-block-per-row kernels).
    p.add_argument("models", nargs="*", default=DEFAULT_MODELS + ["wide_rows"])
    args = p.parse_args()
    torch.set_num_threads(1)
    have_gpu = os.path.exists("/dev/nvidia0")
    passed = failed = 0
    print("%-18s %14s  %s" % ("model", "arena bytes", "result"))
    for name in args.models:
        try:
            arena, problems = check(name, args, have_gpu)
        except Exception as e:  # noqa: BLE001 - report and go on
            arena, problems = 0, [str(e)]
        print("%-18s %14d  %s" % (name, arena, "ok" if not problems else "FAIL"))
        for pr in problems:
            print("    " + pr)
        passed += not problems
        failed += bool(problems)
    extra = [] if args.no_offload else [("offload (host)", check_offload)]
    if args.build_sh:
        extra.append(("build.sh", check_build_sh))
    for label, fn in extra:
        try:
            size, problems = fn(args, have_gpu)
        except Exception as e:  # noqa: BLE001 - report and go on
            size, problems = 0, [str(e)]
        print("%-18s %14s  %s" % (label, "%d" % size, "ok" if not problems else "FAIL"))
        for pr in problems:
            print("    " + pr)
        passed += not problems
        failed += bool(problems)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""tcc-run's device-arena path and loss scaling, without a GPU.

Usage: /usr/bin/python3 check_device_runtime.py --tcc TCC --tcc-run TCC_RUN
           --fake-step FAKE.so --fake-step-nodev FAKE_NODEV.so --workdir DIR

FAKE.so (test/runtime/fake_device_step.c) is a CPU step dressed up as a
device step (tcc_step_info.device_arena = 1, target "cuda"): it forwards to
the CPU step in $TCC_FAKE_DEVICE_STEP, but the arena pointer it hands tcc-run
is an inaccessible (PROT_NONE) reservation, so every byte tcc-run reads or
writes must go through tcc_step_copy_in/copy_out - a missed copy crashes.
It divides the gradients by tcc_optim_args.loss_scale itself, can inject an
inf gradient before chosen apply calls, and logs every micro_step's
grad_scale and apply's step/lr/loss_scale/rc. Compiles
examples/tiny_gpt_demo.onnx and checks, each as a named case:

  device-off-equals-cpu      --loss-scale=off on the fake device: the
                             losses, final parameters, --save model and
                             checkpoint equal the CPU step's byte for byte
  device-dynamic-equals-cpu  the default (dynamic, 65536) with --accum 2:
                             micro_step gets 65536/2, apply loss_scale 65536,
                             and (power-of-two scaling being exact) the
                             results equal the unscaled CPU run's bytes;
                             metrics carry loss_scale/skipped_total/
                             device_peak_bytes; stdout the device peak line
  dynamic-skip               inf gradients at attempts 2 and 3: those steps
                             are skipped without a warning, the scale halves
                             twice, the optimizer step counter does not
                             advance (apply sees steps 1,2,2,2,3,4) while the
                             LR schedule follows the attempts; the progress
                             line counts the skips
  off-skip                   the same with --loss-scale=off: a warning per
                             skipped step, the counter advances (1..6)
  static-scale               --loss-scale=1024: fixed scale, no growth
  dynamic-resume             3 steps + checkpoint + resume to 6 equals 6 steps
                             in one run (losses, parameters, apply log), with
                             a skip before the checkpoint; the checkpoint
                             header holds the scaler state (v2 layout)
  resume-after-failure       a run that fails at step 5 after its step-3 checkpoint
                             (the next micro-batch already staged) resumes to the
                             uninterrupted run's losses and parameters
  checkpoint-v1              a version-1 checkpoint (a CPU run's v2 one
                             rewritten in the v1 layout, checksum recomputed
                             by a port of tcc-run's) still resumes, on the
                             CPU and the device, to the uninterrupted run's
                             bytes; an unknown version is refused
  device-grads-only          --grads-only --dump equals the CPU step's files
                             (with the default loss scale, off and 1024)
  device-errors              no driver (cudaErrorInsufficientDriver), no
                             memory, a failing copy, a step without the
                             device functions, a bad --loss-scale: exit 1, a
                             `tcc-run: error: STEP: cudaError...` message with
                             a hint, and an existing checkpoint and metrics
                             file left byte for byte intact
  budget-warning             a measured peak over the step's --mem-budget
                             warns; under it does not
  cpu-default-off            a CPU step's metrics have no loss_scale and its
                             stdout no device line (behaviour as before)

Prints PASS/FAIL per case and ends with `N passed, M failed`; exits 1 if any
case failed.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEMO = os.path.join(ROOT, "examples", "tiny_gpt_demo.onnx")
TRAIN_BIN = os.path.join(ROOT, "examples", "data", "train.bin")
sys.path.insert(0, HERE)
from case_harness import CaseFailure, case, fresh, read_bytes, require, work  # noqa: E402
import case_harness  # noqa: E402

ARGS = None


def run(cmd, env=None, timeout=180):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("TCC_FAKE_DEVICE_"):
            del e[k]
    e.update(env or {})
    return subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=timeout, env=e)


def tcc_run(step, *args, env=None, check=True):
    p = run([ARGS.tcc_run, step] + list(args), env=env)
    if check and p.returncode != 0:
        raise CaseFailure("tcc-run %s exited %d: %s" % (" ".join(map(str, args[:4])),
                                                        p.returncode, p.stderr.strip()[-800:]))
    return p


def device(*args, log=None, env=None, check=True, step=None):
    """tcc-run on the fake device step forwarding to the CPU step."""
    e = {"TCC_FAKE_DEVICE_STEP": ARGS.cpu_step}
    if log:
        e["TCC_FAKE_DEVICE_LOG"] = log
    e.update(env or {})
    return tcc_run(step or ARGS.fake_step, *args, env=e, check=check)


def read_log(path):
    micro, apply, close = [], [], 0
    for line in open(path).read().splitlines():
        w = line.split()
        if w[0] == "micro":
            micro.append(float(w[1]))
        elif w[0] == "apply":
            apply.append((int(w[1]), float(w[2]), float(w[3]), int(w[4])))
        elif w[0] == "close":
            close += 1
    return micro, apply, close


def same_dump(a, b):
    """None if losses.npy and every params/*.npy are byte-identical."""
    la, lb = (np.load(os.path.join(d, "losses.npy")) for d in (a, b))
    if la.tobytes() != lb.tobytes():
        return "losses differ: %s vs %s" % (la[:4], lb[:4])
    fa = sorted(os.listdir(os.path.join(a, "params")))
    fb = sorted(os.listdir(os.path.join(b, "params")))
    if fa != fb or not fa:
        return "param files differ: %s vs %s" % (fa[:3], fb[:3])
    bad = [f for f in fa if read_bytes(os.path.join(a, "params", f)) !=
           read_bytes(os.path.join(b, "params", f))]
    if bad:
        return "%d/%d params differ (first %s)" % (len(bad), len(fa), bad[0])
    return None


def metrics(path):
    return [json.loads(l) for l in open(path).read().splitlines()]


COMMON = ["--data", TRAIN_BIN, "--accum", "2", "--seed", "7", "--quiet"]


@case("device-off-equals-cpu")
def off_equals_cpu():
    base = fresh("off")
    cpu_args = COMMON + ["--steps", "4"]
    A = os.path.join(base, "cpu")
    tcc_run(ARGS.cpu_step, *cpu_args, "--dump", A, "--save", os.path.join(base, "cpu.onnx"),
            "--checkpoint", os.path.join(base, "ck_cpu"))
    B, log = os.path.join(base, "dev"), os.path.join(base, "log")
    p = device(*cpu_args, "--loss-scale=off", "--dump", B, "--save",
               os.path.join(base, "dev.onnx"), "--checkpoint", os.path.join(base, "ck_dev"),
               log=log)
    msg = same_dump(A, B)
    require(msg is None, msg)
    require(read_bytes(os.path.join(base, "cpu.onnx")) == read_bytes(os.path.join(base, "dev.onnx")),
            "--save models differ")
    require(read_bytes(os.path.join(base, "ck_cpu", "checkpoint.bin")) ==
            read_bytes(os.path.join(base, "ck_dev", "checkpoint.bin")), "checkpoints differ")
    micro, apply, close = read_log(log)
    require(micro == [0.5] * 8, "micro grad_scales %s" % micro)
    require([a[0] for a in apply] == [1, 2, 3, 4], "apply steps %s" % apply)
    require(all(a[2] == 1.0 for a in apply), "apply loss_scale %s (off: 1)" % apply)
    require(close == 1, "tcc_step_device_close called %d times" % close)
    require("device peak " in p.stdout, "no device peak line: %r" % p.stdout)
    require("loss scale" not in p.stdout, "off mode mentions a loss scale: %r" % p.stdout)
    return "losses, params, --save, checkpoint identical; close called once"


@case("device-dynamic-equals-cpu")
def dynamic_equals_cpu():
    base = fresh("dyn")
    args = COMMON + ["--steps", "4"]
    A = os.path.join(base, "cpu")
    tcc_run(ARGS.cpu_step, *args, "--dump", A)
    B, log, m = os.path.join(base, "dev"), os.path.join(base, "log"), os.path.join(base, "m.jsonl")
    p = device(*[a for a in args if a != "--quiet"], "--dump", B, "--metrics", m, log=log)
    msg = same_dump(A, B)
    require(msg is None, msg)
    micro, apply, _ = read_log(log)
    require(micro == [32768.0] * 8, "micro grad_scales %s (65536 / accum 2)" % micro)
    require([a[2] for a in apply] == [65536.0] * 4, "apply loss_scale %s" % apply)
    rows = metrics(m)
    require(len(rows) == 4, "%d metrics lines" % len(rows))
    for r in rows:
        require(r.get("loss_scale") == 65536 and r.get("skipped_total") == 0 and
                r.get("skipped") is False and isinstance(r.get("device_peak_bytes"), int)
                and r["device_peak_bytes"] > 0, "metrics line %s" % r)
    require("loss scale 65536 (0 of 4 steps skipped)" in p.stdout, "summary %r" % p.stdout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("device peak ")]
    require(len(lines) == 1 and "(arena " in lines[0] and "no budget" in lines[0],
            "device line %r" % p.stdout)
    require("scale 65536" in p.stderr, "progress line without the scale: %r" % p.stderr[-300:])
    require("warning" not in p.stderr, "warnings: %r" % p.stderr)
    return "identical to the unscaled CPU run; %s" % lines[0]


@case("dynamic-skip")
def dynamic_skip():
    base = fresh("skip")
    log, m = os.path.join(base, "log"), os.path.join(base, "m.jsonl")
    p = device("--data", TRAIN_BIN, "--steps", "6", "--warmup", "6", "--lr", "6e-3",
               "--metrics", m, log=log, env={"TCC_FAKE_DEVICE_INF": "2,3"})
    _, apply, _ = read_log(log)
    require([a[0] for a in apply] == [1, 2, 2, 2, 3, 4],
            "optimizer steps passed to apply %s (expected 1,2,2,2,3,4)" % [a[0] for a in apply])
    require([a[3] for a in apply] == [0, 2, 2, 0, 0, 0], "apply rcs %s" % [a[3] for a in apply])
    lrs = [a[1] for a in apply]
    want = [6e-3 * (i + 1) / 6 for i in range(6)]
    require(np.allclose(lrs, want, rtol=1e-12, atol=0), "lrs %s, want %s (per attempt)" % (lrs, want))
    require([a[2] for a in apply] == [65536, 65536, 32768, 16384, 16384, 16384],
            "loss scales %s" % [a[2] for a in apply])
    rows = metrics(m)
    require([r["skipped"] for r in rows] == [False, True, True, False, False, False],
            "skipped %s" % [r["skipped"] for r in rows])
    require([r["skipped_total"] for r in rows] == [0, 1, 2, 2, 2, 2],
            "skipped_total %s" % [r["skipped_total"] for r in rows])
    require([r["loss_scale"] for r in rows] == [65536, 65536, 32768, 16384, 16384, 16384],
            "metrics loss_scale %s" % [r["loss_scale"] for r in rows])
    require(rows[1]["grad_norm"] is None, "skipped step's grad_norm %r" % rows[1]["grad_norm"])
    require("warning" not in p.stderr, "dynamic skips warned: %r" % p.stderr)
    require("scale 16384  skipped 2" in p.stderr, "progress lines %r" % p.stderr[-400:])
    require("loss scale 16384 (2 of 6 steps skipped)" in p.stdout, "summary %r" % p.stdout)
    return "apply steps 1,2,2,2,3,4; scale 65536 -> 16384; no warnings"


@case("off-skip")
def off_skip():
    base = fresh("offskip")
    log = os.path.join(base, "log")
    p = device("--data", TRAIN_BIN, "--steps", "6", "--quiet", "--loss-scale", "off", log=log,
               env={"TCC_FAKE_DEVICE_INF": "2,3"})
    _, apply, _ = read_log(log)
    require([a[0] for a in apply] == [1, 2, 3, 4, 5, 6], "apply steps %s" % apply)
    require(p.stderr.count("tcc-run: warning: step ") == 2 and
            "2 of 6 optimizer steps were skipped" in p.stderr, "warnings %r" % p.stderr)
    return "2 warnings, counter 1..6"


@case("static-scale")
def static_scale():
    base = fresh("static")
    log, m = os.path.join(base, "log"), os.path.join(base, "m.jsonl")
    A, B = os.path.join(base, "cpu"), os.path.join(base, "dev")
    tcc_run(ARGS.cpu_step, *COMMON, "--steps", "3", "--dump", A)
    p = device(*COMMON, "--steps", "5", "--loss-scale=1024", "--metrics", m, "--dump", B, log=log,
               env={"TCC_FAKE_DEVICE_INF": "4"})
    micro, apply, _ = read_log(log)
    require(micro == [512.0] * 10, "micro %s" % micro)
    require([a[2] for a in apply] == [1024] * 5, "loss scales %s" % apply)
    require([a[0] for a in apply] == [1, 2, 3, 4, 4], "apply steps %s" % [a[0] for a in apply])
    require([r["loss_scale"] for r in metrics(m)] == [1024] * 5, "metrics")
    require(p.stderr.count("tcc-run: warning: step ") == 1, "warnings %r" % p.stderr)
    la = np.load(os.path.join(A, "losses.npy"))
    lb = np.load(os.path.join(B, "losses.npy"))[:6]
    require(la.tobytes() == lb.tobytes(), "first 3 steps' losses differ from the CPU run's")
    return "scale fixed at 1024; a skip warns and does not advance the counter"


def ck_header(path):
    b = read_bytes(path)
    magic, version, hbytes = b[:8], struct.unpack_from("<I", b, 8)[0], struct.unpack_from("<I", b, 12)[0]
    step = struct.unpack_from("<q", b, 24)[0]
    if version < 2:
        return dict(version=version, header=hbytes, step=step)
    opt, = struct.unpack_from("<q", b, 112)
    mode, = struct.unpack_from("<I", b, 120)
    scale, = struct.unpack_from("<d", b, 128)
    tracker, skipped = struct.unpack_from("<qq", b, 136)
    return dict(version=version, header=hbytes, step=step, opt=opt, mode=mode, scale=scale,
                tracker=tracker, skipped=skipped, magic=magic)


@case("resume-after-failure")
def resume_after_failure():
    """A run that dies after its step-3 checkpoint, mid-run: the next
    micro-batch was already uploading (staged) then, so the checkpoint must
    record the data position of the micro-batches that ran; resumed, the run
    ends exactly as the uninterrupted one."""
    base = fresh("failure")
    A, B, C = (os.path.join(base, x) for x in ("A", "B", "C"))
    device(*COMMON, "--steps", "6", "--dump", A)
    p = device(*COMMON, "--steps", "6", "--checkpoint", C, "--checkpoint-every", "3",
               env={"TCC_FAKE_DEVICE_APPLY_FAIL": "5"}, check=False)
    require(p.returncode == 1 and "step 5/6: the optimizer step failed (code 9)" in p.stderr,
            "the failing run: exit %d, %r" % (p.returncode, p.stderr[-300:]))
    require(ck_header(os.path.join(C, "checkpoint.bin"))["step"] == 3, "the checkpoint is not step 3's")
    device(*COMMON, "--steps", "6", "--resume", C, "--dump", B)
    a, b = np.load(os.path.join(A, "losses.npy")), np.load(os.path.join(B, "losses.npy"))
    require(a[6:].tobytes() == b.tobytes(), "resumed losses %s, uninterrupted %s" % (b, a[6:]))
    bad = [f for f in sorted(os.listdir(os.path.join(A, "params")))
           if read_bytes(os.path.join(A, "params", f)) != read_bytes(os.path.join(B, "params", f))]
    require(not bad, "%d params differ" % len(bad))
    return "steps 4-6 resumed from step 3's checkpoint equal the uninterrupted run's"


@case("dynamic-resume")
def dynamic_resume():
    base = fresh("resume")
    args = COMMON + ["--warmup", "3"]
    A, la = os.path.join(base, "A"), os.path.join(base, "logA")
    device(*args, "--steps", "6", "--dump", A, log=la, env={"TCC_FAKE_DEVICE_INF": "2"})
    B1, B2, C = (os.path.join(base, x) for x in ("B1", "B2", "C"))
    lb = os.path.join(base, "logB")
    device(*args, "--steps", "3", "--checkpoint", C, "--dump", B1, log=lb,
           env={"TCC_FAKE_DEVICE_INF": "2"})
    h = ck_header(os.path.join(C, "checkpoint.bin"))
    require(h == dict(version=2, header=192, step=3, opt=2, mode=2, scale=32768.0, tracker=1,
                      skipped=1, magic=b"TCCCKPT1"), "checkpoint header %s" % h)
    device(*args, "--steps", "6", "--resume", C, "--dump", B2, log=lb)
    _, apply_a, _ = read_log(la)
    _, apply_b, _ = read_log(lb)
    require(apply_a == apply_b, "apply calls differ:\n  one run %s\n  resumed %s" % (apply_a, apply_b))
    cat = np.concatenate([np.load(os.path.join(d, "losses.npy")) for d in (B1, B2)])
    require(cat.tobytes() == np.load(os.path.join(A, "losses.npy")).tobytes(), "losses differ")
    fa = sorted(os.listdir(os.path.join(A, "params")))
    bad = [f for f in fa if read_bytes(os.path.join(A, "params", f)) !=
           read_bytes(os.path.join(B2, "params", f))]
    require(not bad, "%d params differ" % len(bad))
    return "identical; header %s" % {k: h[k] for k in ("opt", "mode", "scale", "tracker", "skipped")}


M64 = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def _block_hash(data):
    """runtime/checkpoint.cpp's blockHash."""
    P1, P2 = 0x9e3779b185ebca87, 0xc2b2ae3d27d4eb4f
    lanes = [P1, P2, 0x165667b19e3779f9, 0x27d4eb2f165667c5]
    n = len(data) // 32 * 32
    for row in np.frombuffer(data[:n], dtype="<u8").reshape(-1, 4).tolist():
        for k in range(4):
            lanes[k] = (_rotl((lanes[k] + row[k] * P2) & M64, 31) * P1) & M64
    a, b, c, d = lanes
    h = _mix(a) ^ _rotl(_mix(b), 17) ^ _rotl(_mix(c), 29) ^ _rotl(_mix(d), 43) ^ len(data)
    t = 0xcbf29ce484222325
    for byte in data[n:]:
        t = ((t ^ byte) * 0x100000001b3) & M64
    return _mix(h ^ t)


def checkpoint_checksum(header, tensors):
    h = 0x74636363686b7331
    for part in [header] + tensors:
        h = (_mix(h ^ _block_hash(part)) + 1) & M64
    return h


def to_v1(v2_bytes, sizes):
    """A version-2 checkpoint (without loss scaling) in the version-1 layout."""
    h = bytearray(v2_bytes[:128])
    struct.pack_into("<II", h, 8, 1, 128)
    h[112:128] = bytes(16)
    payload = v2_bytes[192:-8]
    require(len(payload) == sum(sizes), "payload %d bytes, tensors %d" % (len(payload), sum(sizes)))
    tensors, at = [], 0
    for n in sizes:
        tensors.append(payload[at:at + n])
        at += n
    # The v2 checksum, recomputed here, must match tcc-run's (the port is right).
    h2 = v2_bytes[:192]
    got = checkpoint_checksum(bytes(h2), tensors)
    require(got == struct.unpack_from("<Q", v2_bytes, len(v2_bytes) - 8)[0],
            "the test's port of the checkpoint checksum disagrees with tcc-run's")
    return bytes(h) + payload + struct.pack("<Q", checkpoint_checksum(bytes(h), tensors))


@case("checkpoint-v1")
def checkpoint_v1():
    sys.path.insert(0, HERE)
    import step_abi  # noqa: E402
    info = step_abi.Step(ARGS.cpu_step).info
    sizes = [d.bytes for d in info.params] + [d.bytes for d in info.state]
    base = fresh("v1")
    A, B = os.path.join(base, "A"), os.path.join(base, "B")
    tcc_run(ARGS.cpu_step, *COMMON, "--steps", "6", "--dump", A)
    ck = os.path.join(base, "ck")
    tcc_run(ARGS.cpu_step, *COMMON, "--steps", "3", "--checkpoint", ck)
    v2 = read_bytes(os.path.join(ck, "checkpoint.bin"))
    h = ck_header(os.path.join(ck, "checkpoint.bin"))
    require(h["version"] == 2 and h["opt"] == 3 and h["mode"] == 0 and h["scale"] == 1.0 and
            h["skipped"] == 0, "CPU checkpoint header %s" % h)
    with open(os.path.join(ck, "checkpoint.bin"), "wb") as f:
        f.write(to_v1(v2, sizes))
    ck2 = os.path.join(base, "ck2")
    shutil.copytree(ck, ck2)
    tcc_run(ARGS.cpu_step, *COMMON, "--steps", "6", "--resume", ck, "--dump", B)
    la = np.load(os.path.join(A, "losses.npy"))[6:]
    lb = np.load(os.path.join(B, "losses.npy"))
    require(la.tobytes() == lb.tobytes(), "losses after resuming a v1 checkpoint differ")
    bad = [f for f in os.listdir(os.path.join(A, "params"))
           if read_bytes(os.path.join(A, "params", f)) != read_bytes(os.path.join(B, "params", f))]
    require(not bad, "%d params differ after resuming a v1 checkpoint" % len(bad))
    # The same v1 checkpoint on the (fake) device, default dynamic scaling:
    # starts the scaler afresh without a warning, same result.
    C = os.path.join(base, "C")
    p = device(*COMMON, "--steps", "6", "--resume", ck2, "--dump", C)
    require("warning" not in p.stderr, "warnings %r" % p.stderr)
    bad = [f for f in os.listdir(os.path.join(A, "params"))
           if read_bytes(os.path.join(A, "params", f)) != read_bytes(os.path.join(C, "params", f))]
    require(not bad, "%d params differ after resuming v1 on the device" % len(bad))
    # An unknown version is refused as such.
    b = bytearray(read_bytes(os.path.join(ck2, "checkpoint.bin")))
    struct.pack_into("<I", b, 8, 3)
    with open(os.path.join(ck2, "checkpoint.bin"), "wb") as f:
        f.write(b)
    p = tcc_run(ARGS.cpu_step, *COMMON, "--steps", "6", "--resume", ck2, check=False)
    require(p.returncode == 1 and "format version 3" in p.stderr, "version 3: %r" % p.stderr)
    return "a v1 checkpoint resumes to the uninterrupted run's bytes (CPU and device)"


@case("device-grads-only")
def grads_only():
    base = fresh("grads")
    feed = os.path.join(base, "feed")
    os.makedirs(feed)
    tok = np.fromfile(TRAIN_BIN, dtype=np.uint16)[:8 * 33].astype(np.int64).reshape(8, 33)
    np.save(os.path.join(feed, "idx.npy"), np.ascontiguousarray(tok[:, :32]))
    np.save(os.path.join(feed, "targets.npy"), np.ascontiguousarray(tok[:, 1:]))
    A = os.path.join(base, "cpu")
    pa = tcc_run(ARGS.cpu_step, "--feed", feed, "--grads-only", "--dump", A)
    # A device step runs the backward pass with a loss scale (65536 by
    # default, as training) and divides the gradients by it: a power of two,
    # so the fp32 gradients are the unscaled run's bit for bit.
    for flags, scale in (([], "65536"), (["--loss-scale", "off"], None), (["--loss-scale", "1024"], "1024")):
        B = os.path.join(base, "dev-" + (scale or "off"))
        pb = device("--feed", feed, "--grads-only", "--dump", B, *flags)
        lines = pb.stdout.splitlines()
        want = pa.stdout.splitlines()
        if scale:
            want.insert(1, "loss scale %s (the gradients are divided by it)" % scale)
        require(lines[:len(want)] == want, "stdout %r vs %r" % (pb.stdout, want))
        require("device peak" in lines[-1], "no device line: %r" % pb.stdout)
        files = []
        for dp, _, fn in os.walk(A):
            for f in fn:
                rel = os.path.relpath(os.path.join(dp, f), A)
                files.append(rel)
                require(read_bytes(os.path.join(A, rel)) == read_bytes(os.path.join(B, rel)),
                        "%s differs (loss scale %s)" % (rel, scale))
        require(any(f.startswith("grads") for f in files), "no grads dumped: %s" % files)
    return "%d files identical, with loss scales 65536, off and 1024" % len(files)


def snapshot(d):
    return {os.path.relpath(os.path.join(dp, f), d): read_bytes(os.path.join(dp, f))
            for dp, _, fn in os.walk(d) for f in fn}


@case("device-errors")
def errors():
    base = fresh("errors")
    ck, m = os.path.join(base, "ck"), os.path.join(base, "m.jsonl")
    device(*COMMON, "--steps", "2", "--checkpoint", ck, "--metrics", m)
    before = snapshot(base)
    step_name = os.path.basename(ARGS.fake_step)
    out = []
    for fail, want in (("driver", ["cudaErrorInsufficientDriver", "--target=cuda",
                                   "--target=cpu", "NVIDIA GPU"]),
                       ("memory", ["cudaErrorMemoryAllocation", "--mem-budget"]),
                       ("copy", ["cudaErrorIllegalAddress"])):
        p = device(*COMMON, "--steps", "4", "--resume", ck, "--checkpoint", ck, "--metrics", m,
                   env={"TCC_FAKE_DEVICE_FAIL": fail}, check=False)
        require(p.returncode == 1, "%s: exit %d" % (fail, p.returncode))
        first = p.stderr.strip().splitlines()[0]
        require(first.startswith("tcc-run: error: ") and step_name + ": cuda" in first,
                "%s: %r" % (fail, p.stderr))
        for w in want:
            require(w in p.stderr, "%s: no %r in %r" % (fail, w, p.stderr))
        require(snapshot(base) == before, "%s: files changed" % fail)
        out.append(fail)
    p = device(*COMMON, "--steps", "2", step=ARGS.fake_step_nodev, check=False)
    require(p.returncode == 1 and "does not export tcc_step_device_open" in p.stderr,
            "step without device functions: %r" % p.stderr)
    for bad in ("dynamik", "0", "-2", "nan"):
        p = device(*COMMON, "--loss-scale", bad, check=False)
        require(p.returncode == 1 and "--loss-scale" in p.stderr, "%s: %r" % (bad, p.stderr))
    p = device("--feed", base, "--grads-only", "--lr", "0.1", check=False)
    require(p.returncode == 1 and "cannot be combined with --lr" in p.stderr,
            "--grads-only --lr: %r" % p.stderr)
    for flag in ("--cuda-graphs", "--no-cuda-graphs"):
        p = tcc_run(ARGS.cpu_step, *COMMON, "--steps", "1", flag, check=False)
        require(p.returncode == 1 and flag + " needs a step compiled with --target=cuda"
                in p.stderr, "%s on a CPU step: %r" % (flag, p.stderr))
    return "%s; missing device functions; bad --loss-scale; --cuda-graphs on a CPU step" % ", ".join(out)


@case("budget-warning")
def budget_warning():
    base = fresh("budget")
    so = os.path.join(base, "budget.so")
    p = run([ARGS.tcc, "--target=cpu", DEMO, "-o", so, "--mem-budget=64M"])
    require(p.returncode == 0, "tcc --mem-budget: %s" % p.stderr[-400:])
    env = {"TCC_FAKE_DEVICE_STEP": so}
    over = tcc_run(ARGS.fake_step, *COMMON, "--steps", "1",
                   env=dict(env, TCC_FAKE_DEVICE_PEAK=str(65 << 20)))
    require("budget 64 MiB" in over.stdout and "EXCEEDS THE MEMORY BUDGET" in over.stderr,
            "over: %r %r" % (over.stdout, over.stderr))
    under = tcc_run(ARGS.fake_step, *COMMON, "--steps", "1",
                    env=dict(env, TCC_FAKE_DEVICE_PEAK=str(63 << 20)))
    require("warning" not in under.stderr, "under: %r" % under.stderr)
    return [l for l in over.stdout.splitlines() if l.startswith("device")][0]


@case("cpu-default-off")
def cpu_default_off():
    base = fresh("cpu")
    m = os.path.join(base, "m.jsonl")
    p = tcc_run(ARGS.cpu_step, *COMMON, "--steps", "2", "--metrics", m)
    for r in metrics(m):
        require(set(r) == {"step", "loss", "lr", "grad_norm", "tokens", "elapsed_s", "tokens_per_s", "skipped"},
                "CPU metrics keys %s" % sorted(r))
    require("device" not in p.stdout and "loss scale" not in p.stdout, "stdout %r" % p.stdout)
    h = tcc_run(ARGS.cpu_step, "--help").stdout
    require("--loss-scale dynamic|off|X" in h, "--help lacks --loss-scale")
    return "metrics keys as before"


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--fake-step", required=True)
    ap.add_argument("--fake-step-nodev", required=True)
    ap.add_argument("--workdir", required=True)
    ARGS = ap.parse_args()
    for k in ("tcc", "tcc_run", "fake_step", "fake_step_nodev", "workdir"):
        setattr(ARGS, k, os.path.abspath(getattr(ARGS, k)))
    os.makedirs(ARGS.workdir, exist_ok=True)
    case_harness.WORKDIR = ARGS.workdir
    t0 = time.time()
    ARGS.cpu_step = work("demo_cpu.so")

    @case("compile-demo")
    def compile_demo():
        if os.path.exists(ARGS.cpu_step):
            os.remove(ARGS.cpu_step)
        p = run([ARGS.tcc, "--target=cpu", DEMO, "-o", ARGS.cpu_step], timeout=300)
        require(p.returncode == 0, "tcc: %s" % p.stderr[-600:])
        return "adamw step"

    if compile_demo():
        off_equals_cpu()
        dynamic_equals_cpu()
        dynamic_skip()
        off_skip()
        static_scale()
        dynamic_resume()
        resume_after_failure()
        checkpoint_v1()
        grads_only()
        errors()
        budget_warning()
        cpu_default_off()
    print("total %.1fs" % (time.time() - t0))
    sys.exit(case_harness.summary())


if __name__ == "__main__":
    main()

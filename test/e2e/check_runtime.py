"""tcc-run's training runtime end to end: resume, kills, --save, errors, metrics.

Usage: /usr/bin/python3 check_runtime.py --tcc TCC --tcc-run TCC_RUN --workdir DIR

Compiles examples/tiny_gpt_demo.onnx (and, for the wrong-model checkpoint,
test/models' tiny_gpt_opset17) and checks, each as a named case:

  resume-*        6 optimizer steps (--accum 2 --seed 7) in one run equal 3
                  steps + a checkpoint + --resume to 6, byte for byte (the
                  concatenated losses and every final parameter .npy), for
                  AdamW, SGD with momentum 0.9, and --data-order sequential.
  kill-resume     60 steps with --checkpoint-every 1, killed with SIGKILL at
                  3 random moments (and once more the instant a
                  checkpoint.bin.tmp appears), resumed each time: every
                  resume loads, and the final parameters (and the last
                  run's losses) equal an uninterrupted run's byte for byte.
                  Reports how many kills left a checkpoint.bin.tmp behind
                  (killed mid-write); TCC_TEST_SEED=N replays the kill times.
  save-*          --save writes a model that passes onnx.checker, whose
                  initializers are the dumped final parameters exactly and
                  whose graph (nodes, inputs, outputs, opsets) is the
                  original's; tcc compiles it again and its loss on a fixed
                  batch is the trained parameters' loss, not the initial one.
  error-*         bad input fails with exit code 1 and a `tcc-run: error:`
                  message naming the problem, writes no file, and leaves a
                  pre-existing checkpoint and dump byte for byte intact.
  metrics         --metrics writes one JSON line per step (step, loss, lr,
                  grad_norm), and 200 steps at lr 3e-3 lower the loss
                  (mean of the last 10 < mean of the first 10 - 0.5).
  interrupt-*     SIGINT or SIGTERM mid-run: tcc-run finishes the optimizer
                  step, writes a checkpoint, says so and exits 128 + the
                  signal; resumed, it ends with the parameters of an
                  uninterrupted run, byte for byte. A second signal stops it
                  at once.
  hostile-*       outputs that name the step, the data or another output; a
                  checkpoint folder another run holds; a truncated or
                  foreign step library; a FIFO as the step or the data; a
                  token file that shrinks during the run: each exit 1 with a
                  message, no hang, no crash, the files untouched.

Prints PASS/FAIL per case with details and ends with `N passed, M failed`;
exits 1 if any case failed.
"""
import argparse
import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import step_abi  # noqa: E402
from case_harness import CaseFailure, case, fresh, read_bytes, require, work  # noqa: E402
import case_harness  # noqa: E402

DEMO = os.path.join(ROOT, "examples", "tiny_gpt_demo.onnx")
TRAIN_BIN = os.path.join(ROOT, "examples", "data", "train.bin")
EXPORT_MODELS = os.path.join(ROOT, "test", "models", "export_models.py")
B, T = 8, 32  # the demo's idx/targets shape

ARGS = None


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def run(cmd, timeout=120, check=False):
    p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
    if check and p.returncode != 0:
        raise CaseFailure("`%s` exited %d: %s" % (" ".join(map(str, cmd[:2])) + " ...",
                                                  p.returncode, p.stderr.strip()[-600:]))
    return p


def tcc_run(*args, **kw):
    return run([ARGS.tcc_run] + list(args), **kw)


def npy_data(path):
    """The raw element bytes and dtype of an .npy (header aside)."""
    a = np.load(path)
    return a.dtype, np.ascontiguousarray(a).tobytes()


def param_files(dump):
    d = os.path.join(dump, "params")
    return sorted(f for f in os.listdir(d) if f.endswith(".npy"))


def compare_params(ref_dump, got_dump):
    """None if every params/*.npy is byte-identical, else a message."""
    ref, got = param_files(ref_dump), param_files(got_dump)
    if ref != got:
        return "param files differ: only in ref %s, only in run %s" % (
            sorted(set(ref) - set(got)), sorted(set(got) - set(ref)))
    bad = [f for f in ref if read_bytes(os.path.join(ref_dump, "params", f)) !=
           read_bytes(os.path.join(got_dump, "params", f))]
    if bad:
        f = bad[0]
        a = np.load(os.path.join(ref_dump, "params", f))
        b = np.load(os.path.join(got_dump, "params", f))
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).max() \
            if a.shape == b.shape else "shape %s vs %s" % (a.shape, b.shape)
        return "%d/%d params differ (first %s, max |diff| %s)" % (len(bad), len(ref), f, diff)
    return None


def snapshot(root):
    """{relative path: sha256} of every file, and the set of directories."""
    files, dirs = {}, set()
    for dp, dn, fn in os.walk(root):
        for d in dn:
            dirs.add(os.path.relpath(os.path.join(dp, d), root))
        for f in fn:
            p = os.path.join(dp, f)
            # a FIFO (hostile-fifo-*) is named, not read: opening it would wait
            files[os.path.relpath(p, root)] = (hashlib.sha256(read_bytes(p)).hexdigest()
                                               if os.path.isfile(p) else "not a file")
    return files, dirs


def compile_model(model, out, *flags):
    if not os.path.exists(out):
        run([ARGS.tcc, "--target=cpu", model, "-o", out] + list(flags), timeout=300, check=True)
    return out


def steps_demo(opt):
    return work("demo_%s.so" % opt)


# ---------------------------------------------------------------------------
# 1. resume bit for bit
# ---------------------------------------------------------------------------
def resume_case(name, step, extra):
    @case(name)
    def body():
        base = fresh(name)
        common = ["--data", TRAIN_BIN, "--accum", "2", "--seed", "7", "--quiet"] + extra
        A, B1, B2, C = (os.path.join(base, x) for x in ("A", "B1", "B2", "C"))
        tcc_run(step, *common, "--steps", "6", "--dump", A, check=True)
        tcc_run(step, *common, "--steps", "3", "--checkpoint", C, "--checkpoint-every", "3",
                "--dump", B1, check=True)
        require(os.path.isfile(os.path.join(C, "checkpoint.bin")), "no checkpoint written")
        tcc_run(step, *common, "--steps", "6", "--resume", C, "--dump", B2, check=True)
        la, l1, l2 = (np.load(os.path.join(d, "losses.npy")) for d in (A, B1, B2))
        require(la.dtype == np.float32 and la.shape == (12,),
                "A's losses: %s %s, expected float32 (12,)" % (la.dtype, la.shape))
        require(l1.shape == (6,) and l2.shape == (6,),
                "B1/B2 losses shapes %s %s, expected (6,) each" % (l1.shape, l2.shape))
        cat = np.concatenate([l1, l2])
        if cat.tobytes() != la.tobytes():
            i = int(np.nonzero(cat.view(np.uint32) != la.view(np.uint32))[0][0])
            raise CaseFailure("losses differ from micro-step %d: %r vs %r" % (i, cat[i], la[i]))
        msg = compare_params(A, B2)
        require(msg is None, msg)
        # The resumed run really continued (not just recomputed from scratch):
        # B1's params are not A's.
        require(compare_params(A, B1) is not None, "B1 (3 steps) already equals A (6 steps)?")
        return "12 losses + %d params identical" % len(param_files(A))
    return body()


# ---------------------------------------------------------------------------
# 1b. a resume remembers the training flags (issue 48)
# ---------------------------------------------------------------------------
@case("resume-remembers-flags")
def resume_flags_case(step):
    base = fresh("resume-flags")
    A, B1, B2, C = (os.path.join(base, x) for x in ("A", "B1", "B2", "C"))
    flags = ["--accum", "2", "--lr", "0.01", "--lr-schedule", "cosine", "--warmup", "2",
             "--min-lr", "0.001", "--clip-norm", "0.5", "--no-decay", "*bias*,*ln*"]
    common = ["--data", TRAIN_BIN, "--seed", "7"]
    tcc_run(step, *common, *flags, "--steps", "6", "--quiet", "--dump", A, check=True)
    # --max-steps stops this run at step 3 of a 6-step schedule.
    tcc_run(step, *common, *flags, "--steps", "6", "--max-steps", "3", "--quiet",
            "--checkpoint", C, "--dump", B1, check=True)
    rec = open(os.path.join(C, "training-flags")).read()
    for want in ("--steps 6", "--lr-schedule cosine", "--warmup 2", "--no-decay *bias*,*ln*",
                 "--accum 2"):
        require(want + "\n" in rec, "training-flags lacks %r: %r" % (want, rec))
    require(np.load(os.path.join(B1, "losses.npy")).shape == (6,),
            "--max-steps 3 with --accum 2 ran %s micro-steps" % (
                np.load(os.path.join(B1, "losses.npy")).shape,))
    # The resume is given nothing but the data: the schedule, its horizon,
    # clipping, decay rules and accumulation come from the checkpoint.
    p = tcc_run(step, "--data", TRAIN_BIN, "--resume", C, "--print-every", "100", "--dump", B2,
                check=True)
    require("tcc-run: resumed from step 3/6" in p.stderr, "no `resumed from step 3/6`: %r"
            % p.stderr[-400:])
    require("--lr-schedule cosine" in p.stderr and "resuming with the checkpoint's" in p.stderr,
            "no line naming the flags taken from the checkpoint: %r" % p.stderr[-400:])
    la = np.load(os.path.join(A, "losses.npy"))
    cat = np.concatenate([np.load(os.path.join(B1, "losses.npy")),
                          np.load(os.path.join(B2, "losses.npy"))])
    require(cat.tobytes() == la.tobytes(), "resumed losses differ from the uninterrupted run's")
    msg = compare_params(A, B2)
    require(msg is None, msg)
    # A flag given again overrides the record, with one line saying so.
    p = tcc_run(step, "--data", TRAIN_BIN, "--resume", C, "--lr", "0.02", "--steps", "4",
                "--print-every", "100", check=True)
    require("--lr 0.02 overrides the checkpoint's --lr 0.01" in p.stderr,
            "no override line: %r" % p.stderr[-400:])
    require("--steps 4 overrides the checkpoint's --steps 6" in p.stderr,
            "no --steps override line: %r" % p.stderr[-400:])
    # A recorded flag that the parser refuses names the file and the line.
    bad = os.path.join(base, "bad")
    shutil.copytree(C, bad)
    with open(os.path.join(bad, "training-flags"), "a") as f:
        f.write("--lr -1\n")
    p = tcc_run(step, "--data", TRAIN_BIN, "--resume", bad)
    require(p.returncode == 1 and "training-flags line" in p.stderr and "--lr" in p.stderr,
            "a bad recorded --lr: exit %d, %r" % (p.returncode, p.stderr[-300:]))
    return "stopped at 3/6 with --max-steps, resumed with no flags: 12 losses + %d params " \
        "identical; overrides named" % len(param_files(A))


@case("keep-checkpoints")
def keep_checkpoints_case(step):
    base = fresh("keep-ck")
    A, B, C = (os.path.join(base, x) for x in ("A", "B", "C"))
    common = ["--data", TRAIN_BIN, "--seed", "5", "--steps", "6", "--quiet"]
    tcc_run(step, *common, "--dump", A, check=True)
    tcc_run(step, *common, "--checkpoint", C, "--checkpoint-every", "1", "--keep-checkpoints", "3",
            check=True)
    kept = sorted(n for n in os.listdir(C) if n.startswith("step-"))
    require(kept == ["step-4", "step-5", "step-6"], "kept %s, not the newest 3" % kept)
    newest = os.path.join(C, "step-6", "checkpoint.bin")
    require(os.stat(newest).st_ino == os.stat(os.path.join(C, "checkpoint.bin")).st_ino,
            "step-6/checkpoint.bin is not a link to the newest checkpoint.bin")
    require(os.path.exists(os.path.join(C, "step-4", "training-flags")), "step-4 lacks its training-flags")
    # An older one resumes to the uninterrupted run's bytes.
    p = tcc_run(step, "--data", TRAIN_BIN, "--resume", os.path.join(C, "step-4"), "--print-every", "100",
                "--dump", B, check=True)
    require("resumed from step 4/6" in p.stderr, "no `resumed from step 4/6`: %r" % p.stderr[-300:])
    msg = compare_params(A, B)
    require(msg is None, msg)
    p = tcc_run(step, "--data", TRAIN_BIN, "--keep-checkpoints", "2")
    require(p.returncode == 1 and "--keep-checkpoints needs --checkpoint" in p.stderr,
            "--keep-checkpoints without --checkpoint: exit %d, %r" % (p.returncode, p.stderr[-300:]))
    return "6 steps kept as %s; step-4 resumed to the uninterrupted run's %d params" % (
        ", ".join(kept), len(param_files(A)))


@case("eval-flags")
def eval_flags_case(step):
    """The validation flags' misuses: one error each, before any work."""
    cases = [
        (["--data", TRAIN_BIN, "--eval-every", "5"], "--eval-every needs --val-data"),
        (["--data", TRAIN_BIN, "--eval-batches", "5"], "--eval-batches needs --val-data"),
        (["--eval-only"], "--eval-only evaluates on --val-data"),
        (["--eval-only", "--val-data", TRAIN_BIN, "--steps", "3"],
         "cannot be combined with --steps"),
        (["--eval-only", "--val-data", TRAIN_BIN, "--data", TRAIN_BIN],
         "cannot be combined with --data"),
        (["--data", TRAIN_BIN, "--val-data", TRAIN_BIN], "carries no evaluation step"),
        (["--data", TRAIN_BIN, "--eval-evry", "2"], "did you mean '--eval-every'"),
        (["--grads-only", "--eval-only", "--feed", "x"], "cannot be combined with --eval-only"),
    ]
    for args, want in cases:
        p = tcc_run(step, *args)
        require(p.returncode == 1 and want in p.stderr and p.stderr.count("error:") == 1,
                "%s: exit %d, %r" % (" ".join(args), p.returncode, p.stderr[-300:]))
    return "%d misuses refused with one error each" % len(cases)


# ---------------------------------------------------------------------------
# 2. kill -9 at random moments, resume each time
# ---------------------------------------------------------------------------
KILL_STEPS = 60


def count_lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


@case("kill-resume")
def kill_case(step):
    base = fresh("kill")
    common = ["--data", TRAIN_BIN, "--seed", "3", "--steps", str(KILL_STEPS), "--quiet"]
    ref = os.path.join(base, "ref")
    tcc_run(step, *common, "--dump", ref, check=True)
    ck, out, metrics = (os.path.join(base, x) for x in ("ck", "out", "metrics.jsonl"))
    def tmp_exists():  # the writer's unique temporary, .checkpoint.bin.tmp.XXXXXX
        return os.path.isdir(ck) and any(n.startswith(".checkpoint.bin.tmp.")
                                         for n in os.listdir(ck))
    seed = int(os.environ.get("TCC_TEST_SEED", time.time_ns() % 2**32))
    rng = random.Random(seed)
    log, mid_write, step_s = [], 0, None
    resumes = 0
    # plan: 3 kills at random moments, then one the instant a .tmp appears,
    # then let it finish.
    plan = ["random"] * 3 + ["tmp", "finish"]
    for i, what in enumerate(plan):
        cmd = [ARGS.tcc_run, step] + common + ["--checkpoint", ck, "--checkpoint-every", "1",
                                               "--metrics", metrics, "--dump", out]
        if i > 0:
            cmd += ["--resume", ck]
            resumes += 1
        start_lines = count_lines(metrics)
        t0 = time.time()
        p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True)
        killed = False
        if what == "random":
            # after k (random) steps of this process, plus a random fraction
            # of a step: anywhere in a step, checkpoint writing included
            k = rng.randint(2, 12)
            while p.poll() is None and count_lines(metrics) < start_lines + k:
                time.sleep(0.001)
            if p.poll() is None:
                time.sleep(rng.uniform(0, step_s or 0.03))
                p.kill()
                killed = True
        elif what == "tmp":
            k = rng.randint(2, 8)
            while p.poll() is None and count_lines(metrics) < start_lines + k:
                time.sleep(0.001)
            while p.poll() is None and not tmp_exists():
                pass
            if p.poll() is None:
                p.kill()
                killed = True
        so, se = p.communicate(timeout=120)
        elapsed = time.time() - t0
        n = count_lines(metrics) - start_lines
        if n and step_s is None:
            step_s = elapsed / max(n, 1)
        if what == "finish" or not killed:
            require(p.returncode == 0, "run %d (%s) exited %d: %s"
                    % (i, what, p.returncode, se.strip()[-600:]))
            if what != "finish":
                log.append("%s:finished-before-kill" % what)
            break
        # a process killed with SIGKILL: returncode -9
        if p.returncode not in (-9,):
            raise CaseFailure("run %d: expected SIGKILL (-9), got %d: %s"
                              % (i, p.returncode, se.strip()[-600:]))
        had_tmp = tmp_exists()
        mid_write += had_tmp
        require(os.path.isfile(os.path.join(ck, "checkpoint.bin")),
                "no checkpoint.bin after kill %d (after %d steps)" % (i + 1, n))
        log.append("%s@%d%s" % (what, n, "(tmp)" if had_tmp else ""))
    kills = sum(1 for x in log if "@" in x)
    require(kills >= 3, "only %d kills landed (%s)" % (kills, log))
    msg = compare_params(ref, out)
    require(msg is None, "final params vs uninterrupted: %s" % msg)
    lref, lout = np.load(os.path.join(ref, "losses.npy")), np.load(os.path.join(out, "losses.npy"))
    require(0 < len(lout) <= KILL_STEPS and lout.tobytes() == lref[-len(lout):].tobytes(),
            "the last run's %d losses are not the uninterrupted run's last %d"
            % (len(lout), len(lout)))
    require(not tmp_exists(), "a checkpoint temporary is left after the final run")
    # every step appears in the metrics (redone ones twice), the last is 60
    steps = [json.loads(l)["step"] for l in open(metrics)]
    require(steps and steps[-1] == KILL_STEPS and set(steps) == set(range(1, KILL_STEPS + 1)),
            "metrics steps: %s" % steps[-5:])
    rand_tmp = sum(1 for x in log if x.startswith("random@") and "(tmp)" in x)
    rand_kills = sum(1 for x in log if x.startswith("random@"))
    return ("TCC_TEST_SEED=%d: kills [%s] (@N: steps done by that process), %d resumes "
            "ok; checkpoint.bin.tmp present after %d/%d random kills and %d/%d targeted; "
            "final params identical" % (seed, " ".join(log), resumes, rand_tmp, rand_kills,
                                        mid_write - rand_tmp, kills - rand_kills))


# ---------------------------------------------------------------------------
# 3. --save
# ---------------------------------------------------------------------------
def fixed_batch():
    data = np.fromfile(TRAIN_BIN, dtype="<u2").astype(np.int64)
    starts = [1000 + 517 * b for b in range(B)]
    idx = np.stack([data[s:s + T] for s in starts])
    tgt = np.stack([data[s + 1:s + T + 1] for s in starts])
    return idx, tgt


def step_loss(so, params=None):
    s = step_abi.Step(so)
    s.init()
    if params:
        for name, arr in params.items():
            s.param(name)[...] = arr
    idx, tgt = fixed_batch()
    names = [d.name for d in s.info.inputs]
    s.set_input(names[0], idx)
    s.set_input(names[1], tgt)
    s.micro_step(1.0)
    return s.loss()


def save_cases(step):
    import onnx
    from onnx import numpy_helper

    base = fresh("save")
    dump, saved = os.path.join(base, "dump"), os.path.join(base, "trained.onnx")
    state = {}

    @case("save-run")
    def save_run():
        tcc_run(step, "--data", TRAIN_BIN, "--steps", "5", "--lr", "3e-3", "--quiet",
                "--dump", dump, "--save", saved, check=True)
        require(os.path.isfile(saved), "no %s" % saved)
        onnx.checker.check_model(saved)  # by path: works for any size
        state["m"] = onnx.load(saved)
        return "%d bytes, onnx.checker ok" % os.path.getsize(saved)

    @case("save-initializers")
    def save_inits():
        require("m" in state, "no saved model")
        orig, m = onnx.load(DEMO), state["m"]
        oinit = {i.name: i for i in orig.graph.initializer}
        sinit = {i.name: i for i in m.graph.initializer}
        require(list(oinit) == list(sinit), "initializer names/order differ")
        files = {f[:-4] for f in param_files(dump)}
        pnames = [n for n in oinit if n in files or n.replace("/", "_") in files]
        require(len(pnames) == len(files), "dumped params without an initializer: %s"
                % sorted(files - set(n.replace("/", "_") for n in pnames)))
        changed = 0
        for n in oinit:
            a = numpy_helper.to_array(sinit[n])
            if n in pnames:
                p = np.load(os.path.join(dump, "params", n.replace("/", "_") + ".npy"))
                require(sinit[n].data_type == onnx.TensorProto.FLOAT and a.dtype == np.float32,
                        "%s: saved as %s" % (n, a.dtype))
                require(a.shape == p.shape and a.tobytes() == p.tobytes(),
                        "%s: saved initializer != dumped param" % n)
                o = numpy_helper.to_array(oinit[n])
                changed += o.tobytes() != a.tobytes()
            else:
                o = numpy_helper.to_array(oinit[n])
                require(a.dtype == o.dtype and a.tobytes() == o.tobytes(),
                        "non-parameter initializer %s changed" % n)
        require(changed == len(pnames), "only %d/%d params changed by training"
                % (changed, len(pnames)))
        return "%d params == dump (float32), %d other initializers unchanged" % (
            len(pnames), len(oinit) - len(pnames))

    @case("save-graph")
    def save_graph():
        require("m" in state, "no saved model")
        orig, m = onnx.load(DEMO), state["m"]
        g, o = m.graph, orig.graph
        for what in ("node", "input", "output"):
            require(list(getattr(g, what)) == list(getattr(o, what)), "graph.%s differs" % what)
        require(list(m.opset_import) == list(orig.opset_import), "opset_import differs: %s vs %s"
                % (m.opset_import, orig.opset_import))
        require(m.ir_version == orig.ir_version, "ir_version %d vs %d"
                % (m.ir_version, orig.ir_version))
        return "%d nodes, inputs, outputs, opset %s identical" % (
            len(g.node), [(x.domain, x.version) for x in m.opset_import])

    @case("save-recompile")
    def save_recompile():
        require(os.path.isfile(saved), "no saved model")
        so = os.path.join(base, "trained.so")
        run([ARGS.tcc, "--target=cpu", saved, "-o", so], timeout=300, check=True)
        params = {f[:-4]: np.load(os.path.join(dump, "params", f)) for f in param_files(dump)}
        l_orig = step_loss(step)
        l_saved = step_loss(so)
        l_trained = step_loss(step, params)
        require(l_saved != l_orig, "saved model's loss %r == the original's" % l_saved)
        require(abs(l_saved - l_trained) <= 1e-6 * abs(l_trained),
                "saved model's loss %r != original step with the dumped params %r"
                % (l_saved, l_trained))
        return "loss on fixed batch: original %.6f, saved %.6f (= trained params %.6f)" % (
            l_orig, l_saved, l_trained)

    save_run()
    save_inits()
    save_graph()
    save_recompile()


# ---------------------------------------------------------------------------
# 4. errors
# ---------------------------------------------------------------------------
def error_cases(step, step_sgd):
    base = fresh("errors")
    # pre-existing outputs every failing run is pointed at
    seed_ck, seed_dump = os.path.join(base, "seed_ck"), os.path.join(base, "seed_dump")
    tcc_run(step, "--data", TRAIN_BIN, "--steps", "1", "--quiet", "--checkpoint", seed_ck,
            "--dump", seed_dump, check=True)
    data = np.fromfile(TRAIN_BIN, dtype="<u2")
    files = os.path.join(base, "inputs")
    os.makedirs(files)

    def path(name):
        return os.path.join(files, name)

    with open(path("odd.bin"), "wb") as f:
        f.write(read_bytes(TRAIN_BIN)[:2001])
    data[:32].tofile(path("short.bin"))  # T + 1 = 33 needed
    oov = data[:4000].copy()
    oov[::30] = 500  # every 33-token window holds one (the vocabulary is 80)
    oov.tofile(path("oov.bin"))

    # a checkpoint from another model (tiny_gpt_opset17)
    def other_model_ck():
        mdir = os.path.join(base, "models")
        run(["/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
             EXPORT_MODELS, mdir, "--only", "tiny_gpt_opset17"], timeout=300, check=True)
        so = compile_model(os.path.join(mdir, "tiny_gpt_opset17.onnx"),
                           os.path.join(base, "opset17.so"))
        ck = os.path.join(base, "other_ck")
        feed = os.path.join(mdir, "tiny_gpt_opset17.feed")
        tcc_run(so, "--feed", feed, "--steps", "1", "--quiet", "--checkpoint", ck, check=True)
        return ck

    def corrupt_ck():
        ck = os.path.join(base, "corrupt_ck")
        shutil.copytree(seed_ck, ck)
        p = os.path.join(ck, "checkpoint.bin")
        b = bytearray(read_bytes(p))
        b[len(b) // 2] ^= 0x01
        with open(p, "wb") as f:
            f.write(b)
        return ck

    def sgd_ck():
        ck = os.path.join(base, "sgd_ck")
        tcc_run(step_sgd, "--data", TRAIN_BIN, "--steps", "1", "--quiet", "--checkpoint", ck,
                check=True)
        return ck

    with open(path("regular_file"), "w") as f:
        f.write("x")

    # name: (setup -> (args, uses_default_dump)), required substrings (any of each group)
    cases = [
        ("error-missing-data", lambda: ["--data", path("nope.bin")],
         [["nope.bin"], ["does not exist", "no such file", "cannot open"]]),
        ("error-odd-bin", lambda: ["--data", path("odd.bin")],
         [["odd.bin"], ["odd", "truncated"]]),
        ("error-short-data", lambda: ["--data", path("short.bin")],
         [["short.bin"], ["33", "too short", "at least"]]),
        ("error-token-out-of-vocab", lambda: ["--data", path("oov.bin")],
         [["out of range", "out-of-range"], ["index", "token"]]),
        ("error-resume-other-model",
         lambda: ["--data", TRAIN_BIN, "--resume", other_model_ck(), "--steps", "3"],
         [["different model", "does not match", "mismatch"]]),
        ("error-resume-other-optimizer",
         lambda: ["--data", TRAIN_BIN, "--resume", sgd_ck(), "--steps", "3"],
         [["different model", "optimizer", "does not match", "mismatch"]]),
        ("error-resume-corrupt",
         lambda: ["--data", TRAIN_BIN, "--resume", corrupt_ck(), "--steps", "3"],
         [["corrupt", "checksum"]]),
        ("error-resume-missing",
         lambda: ["--data", TRAIN_BIN, "--resume", os.path.join(base, "no_ck"), "--steps", "3"],
         [["no checkpoint", "does not exist", "no such"]]),
        ("error-dump-unwritable",
         lambda: ["--data", TRAIN_BIN, "--dump", os.path.join(path("regular_file"), "sub")],
         [["dump"], ["not a directory", "not writable", "cannot create"]]),
        ("error-accum-0", lambda: ["--data", TRAIN_BIN, "--accum", "0"],
         [["--accum"], ["at least 1", "must be", "positive"]]),
        ("error-unknown-flag", lambda: ["--data", TRAIN_BIN, "--frobnicate", "3"],
         [["--frobnicate"], ["unknown"]]),
    ]
    for name, setup, needles in cases:
        error_case(name, step, base, seed_ck, seed_dump, setup, needles)


def error_case(name, step, base, seed_ck, seed_dump, setup, needles):
    @case(name)
    def body():
        args = setup()
        d = fresh("errors", "out_" + name)
        ck, dump = os.path.join(d, "ck"), os.path.join(d, "dump")
        shutil.copytree(seed_ck, ck)
        shutil.copytree(seed_dump, dump)
        if "--resume" in args:
            # the checkpoint resumed from is pre-existing output too
            watched = [d, args[args.index("--resume") + 1]]
        else:
            watched = [d]
        extra = ["--steps", "3", "--checkpoint", ck, "--checkpoint-every", "1",
                 "--save", os.path.join(d, "saved.onnx"), "--quiet"]
        if "--steps" in args:
            extra = extra[2:]
        if "--dump" not in args:
            extra += ["--dump", dump]
        # the metrics log is opened before training (so that a resume can
        # append); an out-of-range token only shows in a step, so leave it out
        # there (see the report)
        if name != "error-token-out-of-vocab":
            extra += ["--metrics", os.path.join(d, "metrics.jsonl")]
        before = [snapshot(w) for w in watched]
        p = tcc_run(step, *(args + extra), timeout=60)
        after = [snapshot(w) for w in watched]
        err = p.stderr.strip()
        require(p.returncode == 1, "exit code %d (expected 1); stderr: %s"
                % (p.returncode, err[-400:]))
        lines = [l for l in err.splitlines() if l.startswith("tcc-run: error:")]
        require(len(lines) >= 1, "no `tcc-run: error:` line in stderr: %r" % err[-400:])
        msg = lines[0]
        low = msg.lower()
        for group in needles:
            require(any(n.lower() in low for n in group),
                    "message does not mention any of %s: %s" % (group, msg))
        for (bf, bd), (af, ad), w in zip(before, after, watched):
            new = sorted(set(af) - set(bf))
            require(not new, "new files left in %s: %s" % (w, ", ".join(
                "%s (%d bytes)" % (f, os.path.getsize(os.path.join(w, f))) for f in new)))
            gone = sorted(set(bf) - set(af))
            require(not gone, "files removed from %s: %s" % (w, gone))
            changed = sorted(f for f in bf if bf[f] != af[f])
            require(not changed, "pre-existing files changed in %s: %s" % (w, changed))
            newdirs = sorted(set(ad) - set(bd))
            require(not newdirs, "new directories left in %s: %s" % (w, newdirs))
        return "| " + msg
    return body()


# ---------------------------------------------------------------------------
# 5. metrics and a falling loss
# ---------------------------------------------------------------------------
@case("metrics-loss-falls")
def metrics_case(step):
    base = fresh("metrics")
    m, dump = os.path.join(base, "m.jsonl"), os.path.join(base, "dump")
    n = 200
    tcc_run(step, "--data", TRAIN_BIN, "--steps", str(n), "--lr", "3e-3", "--quiet",
            "--metrics", m, "--dump", dump, timeout=120, check=True)
    raw = open(m).read().splitlines()
    require(len(raw) == n, "%d metrics lines for %d steps" % (len(raw), n))
    rows = [json.loads(l) for l in raw]
    for i, r in enumerate(rows):
        missing = {"step", "loss", "lr", "grad_norm"} - set(r)
        require(not missing, "line %d lacks %s: %s" % (i + 1, sorted(missing), raw[i]))
        require(r["step"] == i + 1, "line %d has step %r" % (i + 1, r["step"]))
        require(isinstance(r["loss"], float) and math.isfinite(r["loss"]), "line %d loss %r"
                % (i + 1, r["loss"]))
        require(r["lr"] == 3e-3, "line %d lr %r" % (i + 1, r["lr"]))
        require(isinstance(r["grad_norm"], float) and r["grad_norm"] > 0,
                "line %d grad_norm %r" % (i + 1, r["grad_norm"]))
    losses = np.array([r["loss"] for r in rows])
    dumped = np.load(os.path.join(dump, "losses.npy")).astype(np.float64)
    require(dumped.shape == (n,) and np.allclose(losses, dumped, rtol=1e-6, atol=0),
            "metrics losses != dumped losses.npy")
    first, last = losses[:10].mean(), losses[-10:].mean()
    require(last < first - 0.5, "loss first-10 mean %.4f, last-10 mean %.4f" % (first, last))
    return "200 lines; loss mean first-10 %.3f -> last-10 %.3f" % (first, last)


# ---------------------------------------------------------------------------
# 6. stopping on a signal
# ---------------------------------------------------------------------------
def interrupt_case(step, sig):
    import signal
    name = "interrupt-" + ("sigint" if sig == signal.SIGINT else "sigterm")

    @case(name)
    def body():
        base = fresh(name)
        C, R, B = (os.path.join(base, x) for x in ("C", "R", "B"))
        common = ["--data", TRAIN_BIN, "--accum", "2", "--seed", "3"]
        S = os.path.join(base, "stopped.onnx")
        p = subprocess.Popen([ARGS.tcc_run, step] + common +
                             ["--steps", "100000", "--print-every", "1", "--checkpoint", C,
                              "--save", S],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        first = p.stderr.readline()  # the first step's progress line
        require(first.startswith("step "), "no progress line: %r" % first)
        p.send_signal(sig)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            raise CaseFailure("still running 60 s after the signal")
        require(p.returncode == 128 + sig, "exit code %d, expected %d; stderr %r"
                % (p.returncode, 128 + sig, err[-300:]))
        import re
        m = re.search(r"tcc-run: stopped by SIG(INT|TERM) after step (\d+)/100000; "
                      r"the checkpoint in (\S+) holds it", err)
        require(m, "no `stopped by ... after step N` message: %r" % err[-300:])
        n = int(m.group(2))
        require(os.path.isfile(os.path.join(C, "checkpoint.bin")), "no checkpoint written")
        # Resumed to step n + 2, it ends where an uninterrupted run does.
        tcc_run(step, *common, "--steps", str(n + 2), "--quiet", "--dump", R, check=True)
        tcc_run(step, *common, "--steps", str(n + 2), "--quiet", "--resume", C, "--dump", B,
                check=True)
        msg = compare_params(R, B)
        require(msg is None, msg)
        # --save holds the model as trained to step n: the parameters of an
        # uninterrupted n-step run.
        require("saved the model as trained to step %d" % n in err, "no `saved` line: %r"
                % err[-300:])
        import onnx
        from onnx import numpy_helper
        N = os.path.join(base, "N")
        tcc_run(step, *common, "--steps", str(n), "--lr-schedule", "constant", "--quiet",
                "--dump", N, check=True)
        saved = {i.name.replace("/", "_"): numpy_helper.to_array(i)
                 for i in onnx.load(S).graph.initializer}
        files = param_files(N)
        for f in files:
            require(saved[f[:-4]].tobytes() == np.load(os.path.join(N, "params", f)).tobytes(),
                    "--save after the stop: %s is not the step-%d value" % (f[:-4], n))
        return "stopped after step %d (--save = the %d-step params), resumed to %d: " \
            "%d params identical" % (n, n, n + 2, len(files))
    return body()


@case("interrupt-twice")
def interrupt_twice_case(step):
    import signal
    p = subprocess.Popen([ARGS.tcc_run, step, "--data", TRAIN_BIN, "--steps", "100000",
                          "--print-every", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True)
    p.stderr.readline()
    p.send_signal(signal.SIGINT)
    p.send_signal(signal.SIGINT)
    try:
        p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        raise CaseFailure("still running 30 s after two SIGINTs")
    require(p.returncode in (-signal.SIGINT, 128 + signal.SIGINT),
            "exit code %d after two SIGINTs" % p.returncode)
    return "exit %d" % p.returncode


# ---------------------------------------------------------------------------
# 7. hostile input and outputs that would overwrite inputs
# ---------------------------------------------------------------------------
def hostile_cases(step):
    import fcntl
    import signal
    base = fresh("hostile")
    step_hash = hashlib.sha256(read_bytes(step)).hexdigest()
    data_copy = os.path.join(base, "data.bin")
    shutil.copy(TRAIN_BIN, data_copy)

    def refused(name, args, needles, timeout=60):
        @case(name)
        def body():
            before = snapshot(base)
            p = tcc_run(*args, timeout=timeout)
            require(p.returncode == 1, "exit code %d (expected 1); stderr: %s"
                    % (p.returncode, p.stderr.strip()[-400:]))
            lines = [l for l in p.stderr.splitlines() if l.startswith("tcc-run: error:")]
            require(lines, "no `tcc-run: error:` line: %r" % p.stderr[-400:])
            for n in needles:
                require(n in lines[0], "message does not say %r: %s" % (n, lines[0]))
            require(snapshot(base) == before, "files in the work folder changed")
            require(hashlib.sha256(read_bytes(step)).hexdigest() == step_hash,
                    "the step library changed")
            return "| " + lines[0]
        return body()

    run_data = [step, "--data", data_copy, "--steps", "2", "--quiet"]
    refused("hostile-save-names-step", run_data + ["--save", step],
            ["--save", "names the step library", "would overwrite"])
    refused("hostile-metrics-names-data", run_data + ["--metrics", data_copy],
            ["--metrics", "names --data"])
    link = os.path.join(base, "link.so")
    os.symlink(step, link)
    refused("hostile-save-link-to-step", run_data + ["--save", link],
            ["names the step library"])
    out = os.path.join(base, "out.json")
    refused("hostile-two-outputs-one-path", run_data + ["--metrics", out, "--save", out],
            ["--save and --metrics name the same path"])
    ck = os.path.join(base, "ck")
    refused("hostile-dump-is-checkpoint", run_data + ["--checkpoint", ck, "--dump", ck],
            ["--checkpoint and --dump name the same path"])

    @case("hostile-checkpoint-locked")
    def locked():
        d = fresh("hostile-locked")
        ckd = os.path.join(d, "ck")
        os.makedirs(ckd)
        with open(os.path.join(ckd, ".tcc-run.lock"), "w") as f:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running tcc-run holds it
            p = tcc_run(step, "--data", TRAIN_BIN, "--steps", "2", "--quiet",
                        "--checkpoint", ckd, timeout=60)
        require(p.returncode == 1, "exit %d; stderr %r" % (p.returncode, p.stderr[-300:]))
        require("is in use by another tcc-run (process %d)" % os.getpid() in p.stderr,
                "message: %r" % p.stderr[-300:])
        require(sorted(os.listdir(ckd)) == [".tcc-run.lock"], "files written: %s"
                % os.listdir(ckd))
        # Free, the same folder works.
        tcc_run(step, "--data", TRAIN_BIN, "--steps", "1", "--quiet", "--checkpoint", ckd,
                check=True)
        return "| " + p.stderr.strip().splitlines()[-1]
    locked()

    trunc = os.path.join(base, "truncated.so")
    with open(trunc, "wb") as f:
        f.write(read_bytes(step)[:len(read_bytes(step)) // 2])
    refused("hostile-truncated-step", [trunc, "--data", TRAIN_BIN, "--steps", "1"],
            ["is truncated", "rebuild it with tcc"])
    text = os.path.join(base, "text.so")
    with open(text, "w") as f:
        f.write("not a library\n" * 10)
    refused("hostile-text-step", [text, "--data", TRAIN_BIN, "--steps", "1"],
            ["is not a step library built by tcc (it is not an ELF file)"])
    fifo = os.path.join(base, "fifo")
    os.mkfifo(fifo)
    refused("hostile-fifo-step", [fifo, "--data", TRAIN_BIN, "--steps", "1"],
            ["is not a regular file"], timeout=20)
    fifo_bin = os.path.join(base, "tokens.bin")
    os.mkfifo(fifo_bin)
    refused("hostile-fifo-data", [step, "--data", fifo_bin, "--steps", "1"],
            ["tokens.bin", "not a regular file"], timeout=20)

    @case("hostile-data-shrinks")
    def shrinks():
        d = fresh("hostile-shrink")
        data = os.path.join(d, "data.bin")
        shutil.copy(TRAIN_BIN, data)
        p = subprocess.Popen([ARGS.tcc_run, step, "--data", data, "--steps", "100000",
                              "--print-every", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True)
        p.stderr.readline()
        os.truncate(data, 0)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            raise CaseFailure("still running 60 s after the data file was emptied")
        require(p.returncode == 1, "exit code %d (a signal is negative); stderr %r"
                % (p.returncode, err[-300:]))
        require("shrank while training" in err, "message: %r" % err[-300:])
        return "| " + [l for l in err.splitlines() if "error" in l][0]
    shrinks()


# ---------------------------------------------------------------------------
def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--workdir", required=True)
    ARGS = ap.parse_args()
    ARGS.tcc, ARGS.tcc_run = os.path.abspath(ARGS.tcc), os.path.abspath(ARGS.tcc_run)
    ARGS.workdir = os.path.abspath(ARGS.workdir)
    os.makedirs(ARGS.workdir, exist_ok=True)
    case_harness.WORKDIR = ARGS.workdir
    t0 = time.time()

    ok = case("compile-demo")(lambda: (
        [os.path.exists(s) and os.remove(s) for s in (steps_demo("adamw"), steps_demo("sgd"))],
        compile_model(DEMO, steps_demo("adamw")),
        compile_model(DEMO, steps_demo("sgd"), "--optimizer=sgd")) and "adamw + sgd steps")()
    if ok:
        step, sgd = steps_demo("adamw"), steps_demo("sgd")
        resume_case("resume-adamw", step, [])
        resume_case("resume-sgd-momentum", sgd, ["--momentum", "0.9"])
        resume_case("resume-sequential", step, ["--data-order", "sequential"])
        resume_flags_case(step)
        keep_checkpoints_case(step)
        eval_flags_case(step)
        kill_case(step)
        save_cases(step)
        error_cases(step, sgd)
        metrics_case(step)
        import signal
        interrupt_case(step, signal.SIGINT)
        interrupt_case(step, signal.SIGTERM)
        interrupt_twice_case(step)
        hostile_cases(step)

    # Dropout's random state is training state: a resumed run draws the
    # masks the uninterrupted run draws (without the state in the
    # checkpoint, the resumed micro-steps would repeat step 0's masks).
    def compile_dropout():
        import export_models
        d = work("dropout_model")
        os.makedirs(d, exist_ok=True)
        export_models.export_one("tiny_gpt_dropout", d)
        if os.path.exists(work("dropout.so")):  # not a previous run's
            os.remove(work("dropout.so"))
        return compile_model(os.path.join(d, "tiny_gpt_dropout.onnx"), work("dropout.so"))
    dropout_step = case("compile-dropout")(compile_dropout)()
    if dropout_step:
        resume_case("resume-dropout", work("dropout.so"), [])

    print("total %.1fs" % (time.time() - t0))
    sys.exit(case_harness.summary())


if __name__ == "__main__":
    main()

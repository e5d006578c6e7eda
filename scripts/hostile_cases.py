#!/usr/bin/python3
"""Issue 23's hostile inputs, replayed against the current tcc and tcc-run:
for each case, what the issue reported then, what happens now, what the run
left behind, and a verdict. One Markdown table on stdout.

Usage: /usr/bin/python3 scripts/hostile_cases.py [--tcc build/bin/tcc]
           [--tcc-run build/bin/tcc-run] [--workdir DIR] [--keep]
           [--timeout 60]

Every hostile input is built here (onnx.helper / numpy_helper, protobuf
fields set by hand where the helpers would refuse; the fuzzer's reproducers
in test/fuzz/regressions/import/ are fed as they are): operands and
attributes missing, tensors that declare 2^40 elements without data or
dimensions whose product overflows int64, an Expand to 2^64 elements, -o
naming the model, external data outside the model's folder, -o on a full
filesystem (a 64 KiB tmpfs, when mount works: run as root), a truncated step
library, a node without inputs run 6 times, --shape of 2^62 rows, Cast to an
unknown type, a Constant with two values, 7 / 0 in constant folding, a token
file emptied mid-run, FIFOs as the model and as a .npy, --save naming the
step, two runs on one checkpoint folder, SIGINT while training, SIGTERM while
the step compiles.

A case is ok when the program exits 1 (or the documented code for a signal:
130 after SIGINT with --checkpoint; tcc raises SIGTERM again once its build
folder and compilers are gone) with a message on stderr that contains
"error" and names the file (and, for the importer, the op), without a
traceback, a crash or a hang (each run has --timeout seconds), and left no
damage: the input byte for byte intact, no partial output, no temporary
folder, no compiler still running. Exits 1 if any case is FAIL. The tcc-run
cases train tiny_gpt_demo (compiled once, --target=cpu) on
examples/data/train.bin; everything runs in --workdir (default: a fresh
temporary folder, removed at the end unless --keep). About 20 s.
"""
import argparse
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
DEMO = os.path.join(ROOT, "examples", "tiny_gpt_demo.onnx")
TINY17 = os.path.join(ROOT, "examples", "tiny_gpt_opset17.onnx")
TRAIN_BIN = os.path.join(ROOT, "examples", "data", "train.bin")
REGRESSIONS = os.path.join(ROOT, "test", "fuzz", "regressions", "import")
B, T = 8, 32  # tiny_gpt_demo's idx/targets shape

ARGS = None
ROWS = []  # (case, before, outcome, damage, verdict)


# ---------------------------------------------------------------------------
# running things
# ---------------------------------------------------------------------------
class Result:
    def __init__(self, rc, out, err, hung, seconds, limit=None):
        self.rc, self.out, self.err, self.hung, self.seconds = rc, out, err, hung, seconds
        self.limit = limit


def run(cmd, timeout=None, env=None, cwd=None):
    """Runs cmd to the end (or the timeout, then kills it); never raises."""
    t0 = time.time()
    full_env = dict(os.environ, **(env or {}))
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=full_env, cwd=cwd,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout or ARGS.timeout)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # its own session: it and its children
        out, err = p.communicate()
        hung = True
    return Result(p.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                  hung, time.time() - t0, timeout or ARGS.timeout)


def signame(rc):
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return "signal %d" % -rc


def first_diagnostic(err):
    lines = [l.strip() for l in err.splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l
    return lines[0] if lines else "(no message)"


def trim(s, n=100):
    """s without the work folder's and the repository's path, cut to n."""
    s = s.replace(ARGS.workdir + "/", "").replace(ROOT + "/", "")
    return s if len(s) <= n else s[:n - 3] + "..."


def outcome(r):
    """'exit 1: <first line of the diagnostic>', 'SIGSEGV: ...', 'hang (timeout)'."""
    if r.hung:
        return "hang (timeout %ds)" % (r.limit or ARGS.timeout)
    code = "exit %d" % r.rc if r.rc >= 0 else signame(r.rc)
    return "%s: %s" % (code, trim(first_diagnostic(r.err)))


def clean_error(r, names=(), code=1):
    """None if r is a clean error: exit `code`, a message with "error" that
    contains each of `names`, no traceback; else why not."""
    if r.hung:
        return "hung"
    if r.rc < 0:
        return "killed by %s" % signame(r.rc)
    if r.rc != code:
        return "exit %d, expected %d" % (r.rc, code)
    if "Traceback" in r.err:
        return "a traceback"
    if "error" not in r.err.lower():
        return "no error message"
    msg = first_diagnostic(r.err)
    missing = [n for n in names if n not in msg]
    if missing:
        return "the message does not name %s" % ", ".join(repr(n) for n in missing)
    return None


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(root):
    """{relative path: sha256 or kind} of everything under root."""
    out = {}
    for dp, dn, fn in os.walk(root):
        for d in dn:
            out[os.path.relpath(os.path.join(dp, d), root) + "/"] = "dir"
        for f in fn:
            p = os.path.join(dp, f)
            out[os.path.relpath(p, root)] = sha(p) if os.path.isfile(p) and \
                not os.path.islink(p) else "special"
    return out


def snapshot_diff(before, after):
    """'' if equal, else what changed (new, gone, modified)."""
    new = sorted(set(after) - set(before))
    gone = sorted(set(before) - set(after))
    changed = sorted(k for k in before if k in after and before[k] != after[k])
    parts = []
    if new:
        parts.append("new: " + ", ".join(new[:4]))
    if gone:
        parts.append("removed: " + ", ".join(gone[:4]))
    if changed:
        parts.append("changed: " + ", ".join(changed[:4]))
    return "; ".join(parts)


def case_dir(name):
    d = os.path.join(ARGS.workdir, "cases", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "tmp"))
    os.makedirs(os.path.join(d, "out"))
    return d


def row(name, before, out, damage, ok, verdict=None):
    ROWS.append((name, before, out, damage, verdict or ("ok" if ok else "FAIL")))
    print("  %-4s %s" % (ROWS[-1][4], name), file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------
def model_of(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="hostile_cases.py")
    m.ir_version = 8
    return m


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def i64(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.INT64, shape)


def const(name, array, **kw):
    return helper.make_node("Constant", [], [name], name=name + "_const",
                            value=numpy_helper.from_array(np.asarray(array), name), **kw)


def huge_tensor(name, dims):
    """A float TensorProto with these dims and no data (the helpers would
    want the data)."""
    t = TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(dims)
    return t


def write_models(d):
    """{name: path} of every hostile model, written into d."""
    os.makedirs(d, exist_ok=True)
    models = {}

    def save(name, m):
        path = os.path.join(d, name + ".onnx")
        with open(path, "wb") as f:  # raw bytes: no checker, no shape inference
            f.write(m.SerializeToString())
        models[name] = path

    x23 = [f32("x", [2, 3])]
    # 1. a missing operand: Relu with none, Add and MatMul with one
    save("relu_no_operand", model_of([helper.make_node("Relu", [], ["y"], name="relu")],
                                     x23, [f32("y", [2, 3])]))
    save("add_one_operand", model_of([helper.make_node("Add", ["x"], ["y"], name="add")],
                                     x23, [f32("y", [2, 3])]))
    save("matmul_one_operand", model_of([helper.make_node("MatMul", ["x"], ["y"], name="mm")],
                                        x23, [f32("y", [2, 3])]))
    # 2. required inputs / attributes left out
    save("unsqueeze13_no_axes", model_of(
        [helper.make_node("Unsqueeze", ["x"], ["y"], name="unsq")], x23,
        [f32("y", [1, 2, 3])], opset=13))
    save("concat_no_axis", model_of(
        [helper.make_node("Concat", ["x", "x"], ["y"], name="concat")], x23, [f32("y", [4, 3])]))
    save("cast_no_to", model_of(
        [helper.make_node("Cast", ["x"], ["y"], name="cast")], x23, [f32("y", [2, 3])]))
    save("reshape_no_shape", model_of(
        [helper.make_node("Reshape", ["x"], ["y"], name="reshape")], x23, [f32("y", [3, 2])]))
    # 3. 2^40 elements declared, no data: an initializer and a Constant
    big = [1 << 20, 1 << 20]
    save("huge_initializer_no_data", model_of(
        [helper.make_node("Add", ["x", "huge"], ["y"], name="add")],
        [f32("x", big)], [f32("y", big)], [huge_tensor("huge", big)]))
    save("huge_constant_no_data", model_of(
        [helper.make_node("Constant", [], ["huge"], name="c", value=huge_tensor("huge", big)),
         helper.make_node("Add", ["x", "huge"], ["y"], name="add")],
        [f32("x", big)], [f32("y", big)]))
    # 4. dimensions whose product overflows int64: an initializer, a graph input
    over = [1 << 31, 1 << 31, 1 << 31]
    save("dims_overflow_initializer", model_of(
        [helper.make_node("Relu", ["over"], ["y"], name="relu")], [], [f32("y", [1])],
        [huge_tensor("over", over)]))
    save("dims_overflow_input", model_of(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [f32("x", [1 << 62, 1 << 62])], [f32("y", [1 << 62, 1 << 62])]))
    # 5. Expand to 2^64 elements
    save("expand_huge", model_of(
        [const("shape", np.array([1 << 32, 1 << 32], np.int64)),
         helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")],
        [f32("x", [1])], [f32("y", [1 << 32, 1 << 32])]))
    # 7. external data outside the model's folder: ../ and absolute
    ext = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "ext_w")
    onnx.save_model(model_of([helper.make_node("MatMul", ["x", "ext_w"], ["y"], name="mm")],
                             [f32("x", [2, 3])], [f32("y", [2, 4])], [ext]),
                    os.path.join(d, "external.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="external.onnx.data",
                    size_threshold=0)
    for name, loc in (("external_dotdot", "../../../../etc/passwd"),
                      ("external_absolute", "/etc/passwd")):
        m = onnx.load(os.path.join(d, "external.onnx"), load_external_data=False)
        for kv in m.graph.initializer[0].external_data:
            if kv.key == "location":
                kv.value = loc
        save(name, m)
    # 8. a small good model (quick to compile) for the full filesystem
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    save("small_good", model_of(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
         helper.make_node("ReduceMean", ["y"], ["loss"], name="mean", keepdims=0)],
        [f32("x", [2, 4])], [f32("loss", [])], [w]))
    # 10. a node with no inputs at all
    save("add_no_inputs", model_of([helper.make_node("Add", [], ["y"], name="add")],
                                   [], [f32("y", [2, 3])]))
    # 11. a dynamic input for --shape
    save("dynamic", model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                             [f32("x", ["batch", 16])], [f32("y", ["batch", 16])]))
    # 12. Cast to an unknown type, a Constant with two values, 7 / 0 folded
    save("cast_to_99", model_of([helper.make_node("Cast", ["x"], ["y"], name="cast", to=99)],
                                x23, [f32("y", [2, 3])]))
    save("constant_two_values", model_of(
        [const("c", np.ones((2, 3), np.float32), value_float=2.0),
         helper.make_node("Add", ["x", "c"], ["y"], name="add")], x23, [f32("y", [2, 3])]))
    save("div_by_zero", model_of(
        [const("seven", np.array([7], np.int64)), const("zero", np.array([0], np.int64)),
         helper.make_node("Div", ["seven", "zero"], ["q"], name="div"),
         helper.make_node("Cast", ["q"], ["qf"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("Add", ["x", "qf"], ["y"], name="add")],
        [f32("x", [1])], [f32("y", [1])]))
    # Issue 47: tcc.trainable metadata that lists nothing.
    m = model_of([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
                  helper.make_node("ReduceMean", ["y"], ["loss"], name="mean", keepdims=0)],
                 [f32("x", [2, 2])], [f32("loss", [])],
                 [numpy_helper.from_array(np.ones((2, 2), np.float32), "w")])
    entry = m.metadata_props.add()
    entry.key, entry.value = "tcc.trainable", ""
    save("empty_trainable", m)
    # Issue 47: names that are not UTF-8 text (proto2 does not check them):
    # a placeholder of the same length replaced in the serialized bytes.
    def raw_bytes(name, m, placeholder, raw):
        data = m.SerializeToString()
        assert data.count(placeholder) == 1 and len(placeholder) == len(raw)
        path = os.path.join(d, name + ".onnx")
        with open(path, "wb") as f:
            f.write(data.replace(placeholder, raw))
        models[name] = path
    m = model_of([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
                  helper.make_node("ReduceMean", ["y"], ["loss"], name="mean", keepdims=0)],
                 [f32("x", [2, 2])], [f32("loss", [])],
                 [numpy_helper.from_array(np.ones((2, 2), np.float32), "w")])
    entry = m.metadata_props.add()
    entry.key, entry.value = "tcc.trainable", "PLACEHOLDER"
    raw_bytes("non_utf8_metadata", m, b"PLACEHOLDER", b"w\xff\x00\x1b[2Jx\xc3(y")
    m = model_of([helper.make_node("Relu", ["x"], ["y"], name="NODENAME")],
                 [f32("x", [2, 3])], [f32("y", [2, 3])])
    raw_bytes("non_utf8_node_name", m, b"NODENAME", b"\x00\xfe\xed\r\nabc")
    # 14. a FIFO as the model
    os.mkfifo(os.path.join(d, "fifo.onnx"))
    models["fifo"] = os.path.join(d, "fifo.onnx")
    return models


# ---------------------------------------------------------------------------
# tcc cases
# ---------------------------------------------------------------------------
def tcc_case(name, before, model, needles, extra=(), timeout=None, repeat=1):
    """tcc MODEL --target=cpu -o OUT/step.so: a clean error naming the model
    file (and needles), the model unchanged, nothing in OUT or TMPDIR."""
    d = case_dir(os.path.basename(model).split(".")[0])
    out, tmp = os.path.join(d, "out"), os.path.join(d, "tmp")
    mdir = os.path.dirname(model)
    before_snap = snapshot(mdir)
    results = []
    for _ in range(repeat):
        results.append(run([ARGS.tcc, model, "--target=cpu", "-o", os.path.join(out, "step.so")]
                           + list(extra), timeout=timeout,
                           env={"TMPDIR": tmp, "TCC_CACHE_DIR": "off"}))
    r = results[0]
    names = [os.path.basename(model)] + list(needles)
    why = [w for w in (clean_error(x, names) for x in results) if w]
    damage = []
    diff = snapshot_diff(before_snap, snapshot(mdir))
    damage.append("input changed (%s)" % diff if diff else "input intact")
    left = os.listdir(out)
    damage.append("left in -o's folder: %s" % ", ".join(left) if left else "no partial file")
    left = os.listdir(tmp)
    damage.append("left in TMPDIR: %s" % ", ".join(left) if left else "no temp left")
    ok = not why and not diff and not os.listdir(out) and not os.listdir(tmp)
    text = outcome(r)
    if repeat > 1:
        kinds = sorted({outcome(x) for x in results})
        same = len(kinds) == 1
        text = ("%d runs, %s: " % (repeat, "all identical" if same else
                                   "%d different outcomes" % len(kinds))) + \
            " / ".join(kinds)
        ok = ok and same
    if why:
        text += " [%s]" % why[0]
    row(name, before, text, ", ".join(damage), ok)


def div_by_zero_case(models):
    """12c. 7 / 0 of two int64 Constants: refused, or (a FAIL) what it becomes."""
    name = "Div of two int64 Constants, 7 / 0 (cast, added to x)"
    before = "folds to 0"
    model = models["div_by_zero"]
    d = case_dir("div_by_zero")
    so = os.path.join(d, "out", "step.so")
    r = run([ARGS.tcc, model, "--target=cpu", "-o", so],
            env={"TMPDIR": os.path.join(d, "tmp"), "TCC_CACHE_DIR": "off"})
    why = clean_error(r, [os.path.basename(model), "Div"])
    text = outcome(r)
    if r.rc == 0 and os.path.isfile(so):
        feed, dump = os.path.join(d, "feed"), os.path.join(d, "dump")
        os.makedirs(feed)
        np.save(os.path.join(feed, "x.npy"), np.ones(1, np.float32))
        rr = run([ARGS.tcc_run, so, "--feed", feed, "--grads-only", "--dump", dump])
        y = os.path.join(dump, "outputs", "y.npy")
        text = "exit 0: compiled; " + (
            "tcc-run: y = x + float(7 / 0) = %r for x = 1" % float(np.load(y)[0])
            if rr.rc == 0 and os.path.isfile(y) else "tcc-run: " + outcome(rr))
        dmg = "a step library (no diagnostic)"
    else:
        if why:
            text += " [%s]" % why
        left = os.listdir(os.path.join(d, "out")) + os.listdir(os.path.join(d, "tmp"))
        dmg = "left: " + ", ".join(left) if left else "no partial file, no temp left"
    row(name, before, text, dmg, not why and dmg.startswith("no partial"))


def self_output_cases():
    """6. -o naming the model, directly and through a symlink."""
    before = "exits 0 and writes the output over the input"
    for name, target in (("tcc m.onnx -o m.onnx", "m.onnx"),
                         ("tcc m.onnx -o link.onnx (a symlink to m.onnx)", "link.onnx")):
        d = case_dir("self_output_" + target.split(".")[0])
        model = os.path.join(d, "m.onnx")
        shutil.copy(TINY17, model)
        os.symlink("m.onnx", os.path.join(d, "link.onnx"))
        h = sha(model)
        tmp = os.path.join(d, "tmp")
        r = run([ARGS.tcc, model, "--target=cpu", "-o", os.path.join(d, target)],
                env={"TMPDIR": tmp, "TCC_CACHE_DIR": "off"})
        why = clean_error(r, ["names the model"])
        intact = sha(model) == h and os.path.islink(os.path.join(d, "link.onnx"))
        extra = sorted(set(os.listdir(d)) - {"m.onnx", "link.onnx", "tmp", "out"})
        dmg = ["input intact" if intact else "INPUT CHANGED",
               "left: " + ", ".join(extra) if extra else "no partial file",
               "no temp left" if not os.listdir(tmp) else "temp left"]
        row(name, before, outcome(r) + (" [%s]" % why if why else ""), ", ".join(dmg),
            not why and intact and not extra and not os.listdir(tmp))


def full_fs_cases(models):
    """8. -o and --emit=source -o DIR on a full filesystem (a 64 KiB tmpfs)."""
    rows = [("-o step.so on a full filesystem (64 KiB tmpfs)", "(no 'before' text given)"),
            ("--emit=source -o DIR on a full filesystem", "(no 'before' text given)")]
    d = case_dir("full_fs")
    mnt = os.path.join(d, "mnt")
    os.makedirs(mnt)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if m.returncode != 0:
        for name, before in rows:
            row(name, before, "skipped (needs a small filesystem): mount: %s"
                % trim(m.stdout.decode(errors="replace").strip(), 60), "-", True, "skipped")
        return
    try:
        # fill it to the last block, so that any write fails
        fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(fd, b"\0" * 4096) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        for (name, before), (emit, target) in zip(rows, (([], "step.so"),
                                                         (["--emit=source"], "src"))):
            tmp = os.path.join(d, "tmp")
            r = run([ARGS.tcc, models["small_good"], "--target=cpu", "-o",
                     os.path.join(mnt, target)] + emit,
                    env={"TMPDIR": tmp, "TCC_CACHE_DIR": "off"})
            why = clean_error(r, [target])
            left = sorted(set(os.listdir(mnt)) - {"filler"})
            tmps = os.listdir(tmp)
            dmg = ["left on the full fs: " + ", ".join(left) if left else
                   ("no folder left" if target == "src" else "no *.partial* left"),
                   "temp left: " + ", ".join(tmps) if tmps else "no temp left"]
            row(name, before, outcome(r) + (" [%s]" % why if why else ""), ", ".join(dmg),
                not why and not left and not tmps)
    finally:
        subprocess.run(["umount", mnt])


def sigterm_compile_case():
    """17. SIGTERM while tcc's host compiler builds the step."""
    name = "SIGTERM to tcc while the step compiles"
    before = "leaves its host compiler running and its temporary folder behind"
    d = case_dir("sigterm_compile")
    tmp, out = os.path.join(d, "tmp"), os.path.join(d, "out", "step.so")
    p = subprocess.Popen([ARGS.tcc, DEMO, "--target=cpu", "-o", out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=dict(os.environ, TMPDIR=tmp, TCC_CACHE_DIR="off"))
    # signal 0.3 s after a compiler started under TMPDIR (waiting at most 20 s)
    t0, compiling = time.time(), False
    while p.poll() is None and time.time() - t0 < 20:
        if procs_under(tmp):
            compiling = True
            time.sleep(0.3)
            break
        time.sleep(0.02)
    if p.poll() is not None:
        err = p.stderr.read().decode(errors="replace")
        row(name, before, "finished (exit %d) before the signal: %s" % (p.returncode, trim(
            first_diagnostic(err))), "-", False)
        return
    p.send_signal(signal.SIGTERM)
    signalled_at = time.time() - t0
    try:
        _, err = p.communicate(timeout=ARGS.timeout)
        hung = False
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        hung = True
    err = err.decode(errors="replace")
    # the compilers get SIGTERM from tcc: give them a moment to go
    deadline = time.time() + 3
    while procs_under(tmp) and time.time() < deadline:
        time.sleep(0.05)
    alive = procs_under(tmp)
    parents = {pid: parent_of(pid) for pid, _ in alive}
    for pid, _ in alive:  # ours (tcc's children): do not leave them running
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    left = os.listdir(tmp)
    if hung:
        text = "hang (timeout %ds)" % ARGS.timeout
    else:
        text = "exit %d" % p.returncode if p.returncode >= 0 else signame(p.returncode)
        text += " (signalled %s)" % ("while the compiler ran" if compiling
                                      else "after %.1f s, no compiler seen" % signalled_at)
        if err.strip():
            text += ": " + trim(first_diagnostic(err))
    dmg = ["folder left in TMPDIR: " + ", ".join(left) if left else "no tcc-step* left",
           "still running after 3 s: " + ", ".join("%s (pid %d, parent %s)" % (
               comm, pid, parents[pid]) for pid, comm in alive) if alive
           else "no compiler left running",
           "output written" if os.path.exists(out) else "no output"]
    # documented: tcc cleans up, then raises the signal again (or exits 143)
    code_ok = not hung and p.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM)
    row(name, before, text, ", ".join(dmg), code_ok and not left and not alive
        and not os.path.exists(out) and "Traceback" not in err)


def parent_of(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return "?"


def procs_under(path):
    """[(pid, comm)] of the processes whose command line or cwd mention path."""
    found = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            try:
                cwd = os.readlink("/proc/%s/cwd" % pid)
            except OSError:
                cwd = ""
            with open("/proc/%s/comm" % pid) as f:
                comm = f.read().strip()
        except OSError:
            continue
        if path in cmd or cwd.startswith(path):
            found.append((int(pid), comm))
    return found


# ---------------------------------------------------------------------------
# tcc-run cases
# ---------------------------------------------------------------------------
def wait_for_line(path, prefix, p, timeout):
    """Waits until the file at path has a line starting with prefix (True),
    or p exits or the timeout passes (False)."""
    t0 = time.time()
    while time.time() - t0 < timeout and p.poll() is None:
        try:
            with open(path, errors="replace") as f:
                if any(l.startswith(prefix) for l in f):
                    return True
        except OSError:
            pass
        time.sleep(0.02)
    return False


def finish(p, timeout):
    """Waits for p; kills it after the timeout. Returns hung."""
    try:
        p.wait(timeout=timeout)
        return False
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return True


def popen_result(p, err_path, hung, t0):
    with open(err_path, errors="replace") as f:
        err = f.read()
    return Result(p.returncode, "", err, hung, time.time() - t0)


def report_flag_cases():
    """Issue 47: tcc's report flags and -o naming the model or each other."""
    before = "exits 0, one file lost"
    for name, flags, needles in (
            ("tcc m.onnx --memory-report=m.onnx", ["--memory-report={m}"], ["names the model"]),
            ("tcc m.onnx --fusion-report=link.onnx (a symlink to m.onnx)",
             ["--fusion-report={link}"], ["names the model"]),
            ("tcc m.onnx -o s.so --memory-report=s.so", ["-o", "{d}/s.so", "--memory-report={d}/s.so"],
             ["name the same path"]),
            ("tcc m.onnx --memory-report=r --memory-plot=r", ["--memory-report={d}/r",
                                                              "--memory-plot={d}/r"],
             ["name the same path"])):
        d = case_dir("report_" + str(abs(hash(name)) % 10**6))
        model = os.path.join(d, "m.onnx")
        shutil.copy(TINY17, model)
        os.symlink("m.onnx", os.path.join(d, "link.onnx"))
        h = sha(model)
        before_snap = snapshot(d)
        args = [f.format(m=model, link=os.path.join(d, "link.onnx"), d=d) for f in flags]
        r = run([ARGS.tcc, model, "--target=cpu"] + args, env={"TCC_CACHE_DIR": "off"})
        why = clean_error(r, needles)
        diff = snapshot_diff(before_snap, snapshot(d))
        intact = sha(model) == h
        row(name, before, outcome(r) + (" [%s]" % why if why else ""),
            ("input intact" if intact else "INPUT CHANGED") +
            (", files changed: " + diff if diff else ", no file written"),
            not why and intact and not diff)


def source_folder_case():
    """Issue 47: --emit=source -o DIR over a user's own files."""
    d = case_dir("source_folder")
    out = os.path.join(d, "src")
    os.makedirs(out)
    mine = os.path.join(out, "build.sh")
    with open(mine, "w") as f:
        f.write("echo my own build\n")
    before_snap = snapshot(d)
    r = run([ARGS.tcc, TINY17, "--target=cpu", "--emit=source", "-o", out])
    why = clean_error(r, ["not empty"])
    diff = snapshot_diff(before_snap, snapshot(d))
    row("tcc --emit=source -o DIR (DIR holds the user's build.sh)", "overwrites build.sh",
        outcome(r) + (" [%s]" % why if why else ""),
        "files changed: " + diff if diff else "build.sh intact", not why and not diff)


def runtime_outputs_cases(step):
    """Issue 47: tcc-run's outputs onto a device, a FIFO, a symlinked
    temporary, and inside another output's folder."""
    d = case_dir("runtime_outputs")
    base = [step, "--data", TRAIN_BIN, "--steps", "2", "--quiet"]
    fifo = os.path.join(d, "trace.fifo")
    os.mkfifo(fifo)
    runtime_refused("tcc-run --trace FIFO", "replaces the FIFO", d,
                    base + ["--trace", fifo], ["FIFO"], timeout=20)
    runtime_refused("tcc-run --metrics FIFO", "hangs in open()", d,
                    base + ["--metrics", fifo], ["FIFO"], timeout=20)
    runtime_refused("tcc-run --trace /dev/null", "replaces /dev/null (as root)", d,
                    base + ["--trace", "/dev/null"], ["character device"])
    ck = os.path.join(d, "ck")
    runtime_refused("tcc-run --checkpoint ck --save ck/checkpoint.bin",
                    "replaces the last checkpoint, exit 0", d,
                    base + ["--checkpoint", ck, "--save", os.path.join(ck, "checkpoint.bin")],
                    ["inside the --checkpoint folder"])
    dump = os.path.join(d, "dump")
    runtime_refused("tcc-run --dump d --metrics d/losses.npy", "the metrics are lost", d,
                    base + ["--dump", dump, "--metrics", os.path.join(dump, "losses.npy")],
                    ["inside the --dump folder"])
    # A symlink where the old fixed temporary name was: the data stays intact.
    d2 = case_dir("runtime_tmp_symlink")
    data = os.path.join(d2, "train.bin")
    shutil.copy(TRAIN_BIN, data)
    ck2 = os.path.join(d2, "ck")
    os.makedirs(ck2)
    os.symlink(data, os.path.join(ck2, "checkpoint.bin.tmp"))
    os.symlink(data, os.path.join(d2, "out.onnx.tmp"))
    h = sha(data)
    r = run([ARGS.tcc_run, step, "--data", data, "--steps", "2", "--quiet", "--checkpoint", ck2,
             "--save", os.path.join(d2, "out.onnx"), "--model", DEMO])
    intact = sha(data) == h
    ok = r.rc == 0 and intact and os.path.isfile(os.path.join(ck2, "checkpoint.bin"))
    row("checkpoint.bin.tmp and out.onnx.tmp symlinks to the training data",
        "the data overwritten, exit 0", outcome(r),
        "data intact" if intact else "DATA CHANGED", ok)


def runtime_refused(name, before, d, args, needles, watched_files=(), timeout=None):
    """tcc-run ARGS: a clean error naming needles, watched files unchanged,
    nothing new in the case folder d."""
    before_snap = snapshot(d)
    hashes = {f: sha(f) for f in watched_files}
    r = run([ARGS.tcc_run] + args, timeout=timeout)
    why = clean_error(r, needles)
    diff = snapshot_diff(before_snap, snapshot(d))
    changed = [os.path.basename(f) for f in watched_files if sha(f) != hashes[f]]
    dmg = []
    if watched_files:
        dmg.append("%s changed" % ", ".join(changed) if changed else
                   "%s intact" % ", ".join(os.path.basename(f) for f in watched_files))
    dmg.append("files changed: " + diff if diff else "no file written")
    row(name, before, outcome(r) + (" [%s]" % why if why else ""), ", ".join(dmg),
        not why and not diff and not changed)


def truncated_step_case(step):
    """9. half a step library."""
    d = case_dir("truncated_step")
    trunc = os.path.join(d, "truncated.so")
    with open(step, "rb") as f:
        data = f.read()
    with open(trunc, "wb") as f:
        f.write(data[:len(data) // 2])
    runtime_refused("tcc-run on a step.so cut to half", "SIGBUS", d,
                    [trunc, "--data", TRAIN_BIN, "--steps", "1"], ["truncated.so"], [trunc])


def data_shrinks_case(step):
    """13. the token file emptied while training."""
    name = "token file truncated to 0 bytes during training"
    before = "SIGBUS, no message"
    d = case_dir("data_shrinks")
    data, err_path = os.path.join(d, "data.bin"), os.path.join(d, "stderr.txt")
    shutil.copy(TRAIN_BIN, data)
    t0 = time.time()
    with open(err_path, "w") as ef:
        p = subprocess.Popen([ARGS.tcc_run, step, "--data", data, "--steps", "1000000",
                              "--print-every", "1", "--dump", os.path.join(d, "out", "dump")],
                             stdout=subprocess.DEVNULL, stderr=ef)
    started = wait_for_line(err_path, "step ", p, 30)
    time.sleep(max(0.0, 1.0 - (time.time() - t0)))  # ~1 s into the run
    if p.poll() is not None:
        r = popen_result(p, err_path, False, t0)
        row(name, before, "ended before the truncation: " + outcome(r), "-", False)
        return
    os.truncate(data, 0)
    hung = finish(p, ARGS.timeout)
    r = popen_result(p, err_path, hung, t0)
    why = clean_error(r, ["data.bin"])
    dump = os.path.join(d, "out", "dump")
    left = [os.path.relpath(os.path.join(dp, f), dump) for dp, _, fn in os.walk(dump)
            for f in fn]
    dmg = ["partial dump: " + ", ".join(left) if left else
           "no partial dump (--dump's folder, made before training, is empty)",
           "training had started" if started else "no progress line seen"]
    row(name, before, outcome(r) + (" [%s]" % why if why else ""), ", ".join(dmg),
        not why and not left)


def fifo_feed_case(step):
    """14. a FIFO named like an input .npy in --feed DIR."""
    d = case_dir("fifo_npy")
    feed = os.path.join(d, "feed")
    os.makedirs(feed)
    np.save(os.path.join(feed, "targets.npy"), np.zeros((B, T), np.int64))
    os.mkfifo(os.path.join(feed, "idx.npy"))
    runtime_refused("tcc-run --feed DIR, DIR/idx.npy a FIFO", "hangs", d,
                    [step, "--feed", feed, "--steps", "1"], ["idx.npy"],
                    [os.path.join(feed, "targets.npy")], timeout=20)


def save_names_step_case(step):
    """15a. --save naming the step library."""
    d = case_dir("save_names_step")
    so = os.path.join(d, "step.so")
    shutil.copy(step, so)
    runtime_refused("tcc-run step.so --save step.so", "overwrites it", d,
                    [so, "--data", TRAIN_BIN, "--steps", "2", "--quiet", "--save", so],
                    ["step.so"], [so])


def start_training(step, ck, err_path, more=()):
    """A long training run with --checkpoint ck in the background, its stderr
    in err_path: (the process, its start time)."""
    t0 = time.time()
    with open(err_path, "w") as ef:
        p = subprocess.Popen([ARGS.tcc_run, step, "--data", TRAIN_BIN, "--steps", "1000000",
                              "--print-every", "1", "--checkpoint", ck] + list(more),
                             stdout=subprocess.DEVNULL, stderr=ef)
    return p, t0


def shared_checkpoint_case(step):
    """15b. a second run on the checkpoint folder a first one holds."""
    name = "two runs sharing one --checkpoint folder"
    before = "collide on one temporary name, confusing rename error"
    d = case_dir("shared_checkpoint")
    ck, err_a = os.path.join(d, "ck"), os.path.join(d, "a.txt")
    a, t0 = start_training(step, ck, err_a, ["--checkpoint-every", "1"])
    try:
        if not wait_for_line(err_a, "step ", a, 30):
            row(name, before, "the first run did not start: " +
                outcome(popen_result(a, err_a, False, t0)), "-", False)
            return
        r = run([ARGS.tcc_run, step, "--data", TRAIN_BIN, "--steps", "3", "--quiet",
                 "--checkpoint", ck, "--checkpoint-every", "1"])
        why = clean_error(r, [ck])
        a_alive = a.poll() is None
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGTERM)
        hung = finish(a, ARGS.timeout)
    ra = popen_result(a, err_a, hung, t0)
    ck_files = sorted(os.listdir(ck)) if os.path.isdir(ck) else []
    tmps = [f for f in ck_files if "tmp" in f]
    a_ok = a_alive and ra.rc == 128 + signal.SIGTERM and "checkpoint.bin" in ck_files
    dmg = ["first run %s" % ("unaffected (SIGTERM then: exit 143, checkpoint written)" if a_ok
                             else "hurt: alive %s, then %s" % (a_alive, outcome(ra))),
           "temp left: " + ", ".join(tmps) if tmps else "no temp left"]
    row(name, before, outcome(r) + (" [%s]" % why if why else ""), ", ".join(dmg),
        not why and a_ok and not tmps)


def sigint_case(step):
    """16. SIGINT while training with --checkpoint."""
    name = "SIGINT during training with --checkpoint"
    before = "killed with no message and no checkpoint"
    d = case_dir("sigint")
    ck, err_path = os.path.join(d, "ck"), os.path.join(d, "stderr.txt")
    p, t0 = start_training(step, ck, err_path)
    if not wait_for_line(err_path, "step ", p, 30):
        row(name, before, "did not start: " + outcome(popen_result(p, err_path, False, t0)),
            "-", False)
        if p.poll() is None:
            p.kill()
            p.wait()
        return
    p.send_signal(signal.SIGINT)
    hung = finish(p, ARGS.timeout)
    r = popen_result(p, err_path, hung, t0)
    msg = [l for l in r.err.splitlines() if "stopped by" in l]
    have_ck = os.path.isfile(os.path.join(ck, "checkpoint.bin"))
    tmps = [f for f in os.listdir(ck) if "tmp" in f] if os.path.isdir(ck) else []
    text = ("hang (timeout %ds)" % ARGS.timeout if hung else
            ("exit %d" % r.rc if r.rc >= 0 else signame(r.rc)) + ": " +
            trim(msg[0] if msg else first_diagnostic(r.err)))
    dmg = ["checkpoint written" if have_ck else "NO CHECKPOINT",
           "temp left: " + ", ".join(tmps) if tmps else "no temp left"]
    row(name, before, text, ", ".join(dmg),
        not hung and r.rc == 128 + signal.SIGINT and have_ck and bool(msg) and not tmps)


# ---------------------------------------------------------------------------
def smaller_runtime_cases(step):
    """Issue 47's smaller tcc-run cases: a watchdog turned off by a bad
    TCC_COMM_TIMEOUT, a negative token id, a run that skipped every step."""
    d = case_dir("smaller_runtime")
    for value in ("abc", "0"):
        before_snap = snapshot(d)
        r = run([ARGS.tcc_run, step, "--data", TRAIN_BIN, "--steps", "1"],
                env={"TCC_COMM_TIMEOUT": value})
        why = clean_error(r, ["TCC_COMM_TIMEOUT=" + value, "positive"])
        diff = snapshot_diff(before_snap, snapshot(d))
        row("TCC_COMM_TIMEOUT=%s" % value, "the watchdog silently off, exit 0",
            outcome(r) + (" [%s]" % why if why else ""),
            "files changed: " + diff if diff else "no file written", not why and not diff)
    neg = os.path.join(d, "neg.npy")
    tokens = np.arange(4096, dtype=np.int32) % 60
    tokens[100] = -5
    np.save(neg, tokens)
    runtime_refused("a token .npy holding the id -5", "read as vocabulary - 5, exit 0", d,
                    [step, "--data", neg, "--steps", "4", "--data-order", "sequential"],
                    ["neg.npy", "-5"], [neg])
    # NaN initial weights: every gradient is NaN, every step skipped.
    nan = os.path.join(d, "nan.bin")
    with open(nan, "wb") as f:
        f.write(b"\0")
    r = run([ARGS.tcc_run, step, "--data", TRAIN_BIN, "--init-weights", nan])
    m = re.search(r"parameters take (\d+)", r.err)
    np.full(int(m.group(1)) // 4 if m else 1, np.nan, np.float32).tofile(nan)
    runtime_refused("every step skipped (NaN initial weights)", "exit 0", d,
                    [step, "--data", TRAIN_BIN, "--steps", "2", "--init-weights", nan],
                    ["every optimizer step", "2 of 2", "not finite"], [nan])


def full_fs_dump_case(step):
    """Issue 47: --dump onto a filesystem that fills up half way: the earlier
    dump is kept whole (no mixture of two runs' files), no staging left."""
    name = "--dump DIR when the disk fills up half way (a 2 MiB tmpfs)"
    before = "a partial dump: some files of this run, some of the last"
    d = case_dir("full_fs_dump")
    mnt = os.path.join(d, "mnt")
    os.makedirs(mnt)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if m.returncode != 0:
        row(name, before, "skipped (needs a small filesystem): mount: %s"
            % trim(m.stdout.decode(errors="replace").strip(), 60), "-", True, "skipped")
        return
    try:
        out = os.path.join(mnt, "dump")
        first = run([ARGS.tcc_run, step, "--data", TRAIN_BIN, "--steps", "1", "--dump", out])
        if first.rc != 0:
            row(name, before, "the first dump failed: " + outcome(first), "-", False)
            return
        kept = snapshot(out)
        # Fill the filesystem but for less than one more dump: the first
        # files of the next one fit, the last do not.
        dump_bytes = sum(os.path.getsize(os.path.join(r, f))
                         for r, _, fs in os.walk(out) for f in fs)
        st = os.statvfs(mnt)
        spare = st.f_bavail * st.f_frsize - dump_bytes // 2
        if spare > 0:
            with open(os.path.join(mnt, "filler"), "wb") as f:
                f.write(b"\0" * spare)
        r = run([ARGS.tcc_run, step, "--data", TRAIN_BIN, "--steps", "2", "--dump", out])
        why = clean_error(r, ["--dump", "not written"])
        diff = snapshot_diff(kept, snapshot(out))
        left = [f for f in os.listdir(out) if f.startswith(".tcc-staging")]
        dmg = ["the first dump " + ("changed: " + diff if diff else "intact"),
               "staging left: " + ", ".join(left) if left else "no staging left"]
        row(name, before, outcome(r) + (" [%s]" % why if why else ""), ", ".join(dmg),
            not why and not diff and not left)
    finally:
        subprocess.run(["umount", mnt])


def markdown(rows):
    def cell(s):
        return str(s).replace("|", "\\|").replace("\n", " ")
    head = ("case", "before (issue 23)", "outcome now", "files left behind / damage", "verdict")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join(cell(c) for c in r) + " |")
    return "\n".join(lines)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tcc", default=os.path.join(ROOT, "build", "bin", "tcc"))
    ap.add_argument("--tcc-run", default=os.path.join(ROOT, "build", "bin", "tcc-run"))
    ap.add_argument("--workdir", help="scratch folder (default: a fresh temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep --workdir's temporary folder")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per run (default 60)")
    ARGS = ap.parse_args()
    ARGS.tcc, ARGS.tcc_run = os.path.abspath(ARGS.tcc), os.path.abspath(ARGS.tcc_run)
    own_workdir = ARGS.workdir is None
    ARGS.workdir = os.path.abspath(ARGS.workdir or tempfile.mkdtemp(prefix="hostile-"))
    os.makedirs(ARGS.workdir, exist_ok=True)
    t0 = time.time()
    try:
        cases(os.path.join(ARGS.workdir, "models"))
    finally:
        if own_workdir and not ARGS.keep:
            shutil.rmtree(ARGS.workdir, ignore_errors=True)
    print(markdown(ROWS))
    failed = [r[0] for r in ROWS if r[4] == "FAIL"]
    print("\n%d cases: %d ok, %d FAIL, %d skipped; %.1fs%s" % (
        len(ROWS), sum(r[4] == "ok" for r in ROWS), len(failed),
        sum(r[4] == "skipped" for r in ROWS), time.time() - t0,
        "" if own_workdir and not ARGS.keep else "; work in " + ARGS.workdir))
    sys.exit(1 if failed else 0)


def guarded(label, fn, *args, **kw):
    """fn(*args, **kw); an exception in it (a bug here) is a FAIL row."""
    try:
        fn(*args, **kw)
    except Exception as e:  # noqa: BLE001
        row(label, "-", "the check itself failed: %s: %s" % (type(e).__name__, trim(str(e))),
            "-", False)


def cases(model_dir):
    shutil.rmtree(model_dir, ignore_errors=True)
    models = write_models(model_dir)

    def importer(label, name, before, needles=(), **kw):
        guarded(label, tcc_case, label, before, models[name], needles, **kw)

    # 1-2: operands and attributes missing
    seg = "SEGV in inferReturnTypes"
    importer("Relu with no operand", "relu_no_operand", seg, ["Relu"])
    importer("Add with one operand", "add_one_operand", seg, ["Add"])
    importer("MatMul with one operand", "matmul_one_operand", seg, ["MatMul"])
    adaptor = "SEGV in the generated adaptor's getter"
    importer("Unsqueeze (opset 13) without its axes input", "unsqueeze13_no_axes", adaptor,
             ["Unsqueeze"])
    importer("Concat without axis", "concat_no_axis", adaptor, ["Concat"])
    importer("Cast without to", "cast_no_to", adaptor, ["Cast"])
    importer("Reshape without its shape input", "reshape_no_shape", adaptor, ["Reshape"])
    for f in sorted(os.listdir(REGRESSIONS)):
        label = "fuzz reproducer " + f
        guarded(label, tcc_case, label, "SEGV in type inference (a fuzz_import find)",
                os.path.join(REGRESSIONS, f), [])
    # 3-5: sizes
    alloc = "tensorAttr allocates 16 GiB and aborts"
    importer("initializer of 2^40 elements, no data", "huge_initializer_no_data", alloc,
             ["huge"])
    importer("Constant of 2^40 elements, no data", "huge_constant_no_data", alloc,
             ["Constant"])
    abort = "std::length_error, then abort"
    importer("initializer dims 2^31 x 2^31 x 2^31 (product overflows int64)",
             "dims_overflow_initializer", abort, ["over"])
    importer("graph input dims 2^62 x 2^62 (product overflows int64)", "dims_overflow_input",
             abort, ["x"])
    importer("Expand to 2^32 x 2^32 = 2^64 elements", "expand_huge",
             "compiles with 'arena 640 B'; tcc-run SIGSEGV", ["Expand"])
    # 6: -o naming the model
    guarded("-o naming the model", self_output_cases)
    # 7: external data outside the model's folder
    leak = "compiles; the file's bytes become a weight"
    importer("external data at ../../../../etc/passwd", "external_dotdot", leak,
             ["ext_w", "../../../../etc/passwd"])
    importer("external data at /etc/passwd (absolute)", "external_absolute", leak,
             ["ext_w", "/etc/passwd"])
    # 8: a full filesystem
    guarded("-o on a full filesystem", full_fs_cases, models)
    # 10-12
    importer("Add with no inputs at all, run 6 times", "add_no_inputs",
             "sometimes crashes, sometimes a wrong diagnostic (uninitialised state)", ["Add"],
             repeat=6)
    importer("--shape x=4611686018427387904x16 (a dynamic input)", "dynamic",
             "a 31.6 KiB arena", ["x"], extra=["--shape", "x=4611686018427387904x16"])
    importer("Cast to=99 (no such dtype)", "cast_to_99", "silently becomes FLOAT", ["Cast"])
    importer("Constant with value and value_float", "constant_two_values", "accepted",
             ["Constant"])
    guarded("Div 7 / 0", div_by_zero_case, models)
    importer("tcc.trainable metadata that lists nothing", "empty_trainable",
             "compiles a step without parameters; tcc-run: 'the step has no loss'",
             ["tcc.trainable", "nothing to train"])
    # Issue 47: names that are not text are refused, escaped, not printed raw
    importer("a tcc.trainable value with bytes that are not UTF-8 (NUL, ESC)",
             "non_utf8_metadata", "printed raw, NUL and terminal escapes included",
             ["tcc.trainable", "not UTF-8", "\\xFF\\x00\\x1B[2Jx\\xC3(y"])
    importer("a node name with bytes that are not UTF-8", "non_utf8_node_name",
             "printed raw, NUL included", ["node 0 (Relu)'s name", "\\x00\\xFE\\xED\\x0D\\x0Aab"])
    # 14: a FIFO as the model
    importer("a FIFO as the model (tcc fifo.onnx)", "fifo", "hangs", timeout=20)
    # 17: SIGTERM during the compile
    guarded("SIGTERM to tcc while the step compiles", sigterm_compile_case)
    # Issue 47: outputs over the model, over each other, over a user's folder
    guarded("report flags naming the model or each other", report_flag_cases)
    guarded("--emit=source over a user's folder", source_folder_case)

    # 9, 13-16: tcc-run, on one compiled step
    step = os.path.join(ARGS.workdir, "demo.so")
    r = run([ARGS.tcc, DEMO, "--target=cpu", "-o", step], timeout=300)
    runtime = [truncated_step_case, data_shrinks_case, fifo_feed_case, save_names_step_case,
               shared_checkpoint_case, sigint_case, runtime_outputs_cases, smaller_runtime_cases,
               full_fs_dump_case]
    if r.rc != 0 or not os.path.isfile(step):
        for fn in runtime:
            row(fn.__name__, "-", "not run: compiling the demo step failed: " + outcome(r),
                "-", False)
        return
    for fn in runtime:
        guarded(fn.__name__, fn, step)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Run the ONNX backend node tests through `tcc --emit=imported`.

Usage:
  /usr/bin/python3 run_node_tests.py --tcc PATH_TO_TCC [--data DIR] [--xfail FILE] [-v]
  /usr/bin/python3 run_node_tests.py --tcc PATH_TO_TCC --numeric --tcc-run PATH_TO_TCC_RUN
                                     [--xfail xfail-numeric.txt] [...]
  /usr/bin/python3 run_node_tests.py --list [--data DIR] [--xfail FILE]

A test directory DIR/<test_name>/model.onnx is selected when every node of its
graph (including nodes of any subgraphs) is in the default ONNX domain and has
an op type in SUPPORTED_OPS below.  For each selected test the script runs

  TCC --emit=imported -o /dev/null DIR/<test_name>/model.onnx

(exit 0 = imported and verified; exit 1 with a diagnostic on stderr = rejected).

tcc needs compile-time constants for some operands (COMPILE_TIME_INPUTS below:
Reshape shape, Slice starts/ends/axes/steps, Unsqueeze/Squeeze axes, ...).  In
the node tests those are graph inputs whose values are in
test_data_set_0/input_<k>.pb (k = index among graph.input).  Before running
tcc, each such graph input is removed from the graph and a `Constant` node
(value = that TensorProto, renamed to the input's name) producing it is
inserted at the front of the graph -- the form torch exports have.  The
rewritten model goes to a temporary directory that is removed afterwards;
other inputs are left untouched, and a test without any such operand is run
on its original model.

Numeric mode (--numeric --tcc-run PATH): after the same Constant rewriting,
each selected test is compiled for the CPU target and run on its data:

  TCC model.onnx -o TMP/step.so
  TCC_RUN TMP/step.so --feed TMP/feed --grads-only --dump TMP/out

Every remaining graph input k is written from test_data_set_0/input_<k>.pb to
TMP/feed/<name>.npy ('/' in a name becomes '_'); floating-point arrays of any
width are converted to float32 (the CPU target computes every float type as
float32), other arrays keep their dtype.  Each graph output k is then read from
TMP/out/outputs/<name>.npy and compared with test_data_set_0/output_<k>.pb:
the shape must match; floats must satisfy |got - expected| <= ATOL +
RTOL*|expected| element-wise (NaN only matches NaN); ints and bools must be
equal, with the same dtype.  Numeric expected failures belong in their own
file (xfail-numeric.txt); --timeout applies to each of the two commands.

xfail file: one test per line, `test_name  # reason`; blank lines and lines
starting with '#' are ignored.

Outcomes (numeric mode: "exit 0" means both commands exit 0 and every output
matches; "exit 1" means tcc or tcc-run exits 1, an output file is missing, or
an output differs -- the worst element is printed):
  PASS   exit 0, not listed
  XFAIL  exit non-zero (1), listed
  FAIL   exit 1, not listed (its stderr is printed)
  XPASS  exit 0 but listed (a failure: keeps the list honest)
  CRASH  exit code other than 0/1, killed by a signal, or timeout (always a
         failure, even if listed); in numeric mode also a harness error

The last line printed is `N passed, M failed` with N = PASS + XFAIL and
M = FAIL + XPASS + CRASH; the exit status is 1 if M > 0, 2 on usage errors.
"""

import argparse
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import tempfile

SUPPORTED_OPS = (
    "Add Sub Mul Div Pow Sqrt Neg Exp Log Erf Tanh Sigmoid Relu MatMul Gemm "
    "Softmax LogSoftmax LayerNormalization ReduceMean ReduceSum Gather Reshape "
    "Transpose Unsqueeze Squeeze Slice Split Concat Expand Where Equal Not Cast "
    "Constant ConstantOfShape Shape Identity Dropout SoftmaxCrossEntropyLoss "
    "Less Greater And Or Reciprocal Abs "
    "Gelu LessOrEqual GreaterOrEqual Max Min Sin Cos IsNaN Pad GatherElements Trilu "
    "Flatten CastLike Range RMSNormalization RotaryEmbedding Attention "
    "Clip LeakyRelu PRelu ThresholdedRelu Elu Selu Celu HardSigmoid HardSwish Softsign "
    "GlobalAveragePool ReduceSumSquare ReduceL1 ReduceL2 Tile CumSum GatherND ScatterND ScatterElements "
    "ReduceMax ReduceMin ReduceLogSumExp Einsum Softplus Mish Conv InstanceNormalization "
    "GlobalMaxPool GroupNormalization BatchNormalization Sign Floor Ceil Round Mod ArgMax ArgMin "
    "OneHot TopK MaxPool AveragePool ConvTranspose ReduceProd"
).split()
SUPPORTED_SET = frozenset(SUPPORTED_OPS)
DEFAULT_DOMAINS = ("", "ai.onnx")
DEFAULT_DATA = "/usr/share/libonnx-testdata/data/node"
DEFAULT_TIMEOUT = 30.0
MAX_STDERR_LINES = 200

# op type -> indices of node inputs that tcc needs as compile-time constants.
COMPILE_TIME_INPUTS = {
    "Reshape": (1,),
    "Unsqueeze": (1,),
    "Squeeze": (1,),
    "Slice": (1, 2, 3, 4),
    "Split": (1,),
    "Expand": (1,),
    "ReduceSum": (1,),
    "ReduceMean": (1,),
    "ReduceSumSquare": (1,),
    "ReduceL1": (1,),
    "ReduceL2": (1,),
    "Tile": (1,),
    "CumSum": (1,),
    "ScatterND": (1,),
    "ScatterElements": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceLogSumExp": (1,),
    "ReduceProd": (1,),
    "Pad": (1, 2, 3),
    "Trilu": (1,),
    "Range": (0, 1, 2),
    "ConstantOfShape": (0,),
    "Dropout": (1, 2),
    "TopK": (1,),
    "OneHot": (1,),
}

# Numeric tolerances.  ONNX's backend tests use rtol 1e-3, atol 1e-7; the atol
# here is 1e-5 because the CPU target computes every floating-point type
# (including the double tests) in float32, so results near zero of float64
# tests carry float32 rounding error well above 1e-7.
NUMERIC_RTOL = 1e-3
NUMERIC_ATOL = 1e-5
# The CUDA target (--target cuda-emulation) stores floats in fp16 (11-bit
# significands: 4.9e-4 relative rounding per stored value) and computes in
# float32, so a few stored intermediates give errors of about 1e-3 relative.
CUDA_RTOL = 5e-3
CUDA_ATOL = 1e-3
TOLERANCES = {"cpu": (NUMERIC_RTOL, NUMERIC_ATOL), "cuda-emulation": (CUDA_RTOL, CUDA_ATOL)}
TARGET_FLAGS = {"cpu": ["--target=cpu"], "cuda-emulation": ["--target=cuda", "--cuda-emulation"]}

try:
    import numpy
    import onnx
    import onnx.numpy_helper
except ImportError:  # pragma: no cover
    sys.stderr.write(
        "error: the 'onnx' and 'numpy' Python packages are required; run this script with "
        "/usr/bin/python3 (Debian's python3-onnx)\n")
    sys.exit(2)


def iter_nodes(graph):
    """All nodes of a graph, recursing into subgraph attributes (If/Loop/...)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from iter_nodes(g)


class NodeTest:
    def __init__(self, name, model_path, ops, opset, constants=()):
        self.name = name
        self.model_path = model_path
        self.ops = ops            # sorted list of distinct op types
        self.opset = opset        # default-domain opset version (or None)
        # [(graph input name, index k in graph.input)] to turn into Constants
        self.constants = list(constants)


def find_constant_inputs(model):
    """Graph inputs feeding a compile-time operand: [(name, index in graph.input)]."""
    index = {vi.name: k for k, vi in enumerate(model.graph.input)}
    found = {}
    for node in iter_nodes(model.graph):
        for i in COMPILE_TIME_INPUTS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i] in index:
                found[node.input[i]] = index[node.input[i]]
    return sorted(found.items(), key=lambda item: item[1])


def rewrite_model(test, out_path):
    """Write test's model with its compile-time graph inputs made Constants."""
    model = onnx.load(test.model_path)
    data_dir = os.path.join(os.path.dirname(test.model_path), "test_data_set_0")
    names = set()
    const_nodes = []
    for name, k in test.constants:
        tensor = onnx.TensorProto()
        with open(os.path.join(data_dir, "input_%d.pb" % k), "rb") as f:
            tensor.ParseFromString(f.read())
        tensor.name = name
        const_nodes.append(onnx.helper.make_node(
            "Constant", [], [name], name="const_input_%d" % k, value=tensor))
        names.add(name)
    kept = [vi for vi in model.graph.input if vi.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    old_nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(const_nodes + old_nodes)
    onnx.save(model, out_path)


def discover(data_dir):
    """Return (selected tests, list of (name, error) for unreadable models)."""
    selected, errors = [], []
    for name in sorted(os.listdir(data_dir)):
        model_path = os.path.join(data_dir, name, "model.onnx")
        if not os.path.isfile(model_path):
            continue
        try:
            # Only the graph structure is needed; skip external data.
            model = onnx.load(model_path, load_external_data=False)
        except Exception as e:  # noqa: BLE001 - report and go on
            errors.append((name, "cannot load model: %s" % e))
            continue
        nodes = list(iter_nodes(model.graph))
        if not nodes:
            continue
        if not all(n.domain in DEFAULT_DOMAINS and n.op_type in SUPPORTED_SET
                   for n in nodes):
            continue
        opset = None
        for imp in model.opset_import:
            if imp.domain in DEFAULT_DOMAINS:
                opset = imp.version
        ops = sorted({n.op_type for n in nodes})
        selected.append(NodeTest(name, model_path, ops, opset,
                                 find_constant_inputs(model)))
    return selected, errors


def read_xfail(path):
    """Parse `test_name  # reason` lines.  Returns ({name: reason}, warnings)."""
    xfail, warnings = {}, []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, reason = line.partition("#")
            name, reason = name.strip(), reason.strip()
            if not re.fullmatch(r"\S+", name):
                warnings.append("%s:%d: malformed line: %r" % (path, lineno, line))
                continue
            if not reason:
                warnings.append("%s:%d: %s has no reason" % (path, lineno, name))
            if name in xfail:
                warnings.append("%s:%d: %s listed twice" % (path, lineno, name))
            xfail[name] = reason
    return xfail, warnings


def run_one(tcc, test, timeout):
    """Run tcc on one test; returns (returncode or None on timeout, stderr)."""
    if not test.constants:
        return run_tcc(tcc, test.model_path, timeout)
    with tempfile.TemporaryDirectory(prefix="tcc_node_") as tmp:
        # Named after the test so that tcc's diagnostics say which one.
        model_path = os.path.join(tmp, test.name + ".onnx")
        try:
            rewrite_model(test, model_path)
        except Exception as e:  # noqa: BLE001 - report as a harness failure
            return -255, "cannot rewrite %s: %s" % (test.model_path, e)
        return run_tcc(tcc, model_path, timeout)


def run_tcc(tcc, model_path, timeout):
    return run_cmd([tcc, "--emit=imported", "-o", os.devnull, model_path], timeout)


def load_tensor(path):
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return onnx.numpy_helper.to_array(tensor)


def as_declared(arr, value_info):
    """arr as the graph declares it.  The bfloat16 node tests store their data
    as UINT16 tensors holding the bfloat16 bit patterns (numpy has no
    bfloat16); such arrays are widened to the float32 values they denote."""
    elem = value_info.type.tensor_type.elem_type
    if elem == onnx.TensorProto.BFLOAT16 and arr.dtype == numpy.uint16:
        return (arr.astype(numpy.uint32) << 16).view(numpy.float32)
    if arr.dtype.name == "bfloat16":  # onnx >= 1.15 reads it as ml_dtypes.bfloat16
        return arr.astype(numpy.float32)
    return arr


def npy_name(name):
    return name.replace("/", "_") + ".npy"


def run_cmd(cmd, timeout):
    """(returncode or None on timeout, stderr) of one command.

    The command runs in a session of its own, and a timeout kills the whole
    process group: tcc's compilers too, which a SIGKILL of tcc alone would
    leave running."""
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        return -255, "failed to execute %s: %s" % (cmd[0], e)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, err = proc.communicate()
        return None, err.decode("utf-8", "replace") if err else ""
    return proc.returncode, err.decode("utf-8", "replace")


def format_index(shape, flat):
    if not shape:
        return "[]"
    return "[%s]" % ",".join(str(i) for i in numpy.unravel_index(flat, shape))


def compare_output(name, got, expected, rtol=NUMERIC_RTOL, atol=NUMERIC_ATOL):
    """None if got matches expected, else a one-line description."""
    if got.shape != expected.shape:
        return "output %s: shape %s, expected %s" % (
            name, list(got.shape), list(expected.shape))
    if expected.dtype.kind == "f":
        if got.dtype.kind != "f":
            return "output %s: dtype %s, expected a float type (%s)" % (
                name, got.dtype, expected.dtype)
        g = got.astype(numpy.float64)
        e = expected.astype(numpy.float64)
        ok = numpy.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        if ok.all():
            return None
        with numpy.errstate(invalid="ignore", over="ignore"):
            diff = numpy.abs(g - e)
            excess = diff - (atol + rtol * numpy.abs(e))
        excess = numpy.where(numpy.isnan(excess), numpy.inf, excess)
        excess = numpy.where(ok, -numpy.inf, excess)
        worst = int(numpy.argmax(excess))
        gw, ew = g.flat[worst], e.flat[worst]
        with numpy.errstate(invalid="ignore", divide="ignore", over="ignore"):
            dw = abs(gw - ew)
            rel = dw / abs(ew) if ew != 0 else float("inf")
        return ("output %s (%s): %d of %d elements differ (rtol %g, atol %g); "
                "worst at %s: got %.9g, expected %.9g (abs diff %.3g, rel diff %.3g)"
                % (name, expected.dtype, int((~ok).sum()), ok.size, rtol,
                   atol, format_index(e.shape, worst), gw, ew, dw, rel))
    if got.dtype != expected.dtype:
        return "output %s: dtype %s, expected %s" % (name, got.dtype, expected.dtype)
    bad = got != expected
    if not bad.any():
        return None
    worst = int(numpy.argmax(bad.reshape(-1)))
    return ("output %s (%s): %d of %d elements differ; first at %s: got %s, "
            "expected %s" % (name, expected.dtype, int(bad.sum()), bad.size,
                             format_index(expected.shape, worst),
                             got.flat[worst], expected.flat[worst]))


def run_numeric(tcc, tcc_run, test, timeout, target="cpu"):
    """Compile, run and compare one test; returns (rc, stderr-like text).

    rc 0: every output matches; 1: tcc/tcc-run exited 1 or an output is
    missing or differs; None (timeout) or any other value: a crash."""
    data_dir = os.path.join(os.path.dirname(test.model_path), "test_data_set_0")
    with tempfile.TemporaryDirectory(prefix="tcc_node_") as tmp:
        try:
            model = onnx.load(test.model_path)
            if test.constants:
                model_path = os.path.join(tmp, test.name + ".onnx")
                rewrite_model(test, model_path)
            else:
                model_path = test.model_path
        except Exception as e:  # noqa: BLE001 - report as a harness failure
            return -255, "harness: cannot rewrite %s: %s" % (test.model_path, e)

        # Compile first: a model tcc rejects (string or sequence inputs, ...)
        # may have test data that numpy_helper cannot read.
        step = os.path.join(tmp, "step.so")
        rc, err = run_cmd([tcc] + TARGET_FLAGS[target] + [model_path, "-o", step], timeout)
        if rc != 0:
            return rc, "tcc (compiling the step): %s\n%s" % (
                describe_rc(rc, timeout), err)

        feed_dir = os.path.join(tmp, "feed")
        try:
            const_names = {n for n, _ in test.constants}
            init_names = {t.name for t in model.graph.initializer}
            os.mkdir(feed_dir)
            for k, vi in enumerate(model.graph.input):
                if vi.name in const_names or vi.name in init_names:
                    continue
                arr = as_declared(
                    load_tensor(os.path.join(data_dir, "input_%d.pb" % k)), vi)
                if arr.dtype.kind == "f":
                    arr = arr.astype(numpy.float32)
                numpy.save(os.path.join(feed_dir, npy_name(vi.name)), arr)
        except Exception as e:  # noqa: BLE001 - report as a harness failure
            return -255, "harness: cannot write the inputs of %s: %s" % (test.name, e)

        out_dir = os.path.join(tmp, "out")
        rc, err = run_cmd([tcc_run, step, "--feed", feed_dir, "--grads-only",
                           "--dump", out_dir], timeout)
        if rc != 0:
            return rc, "tcc-run: %s\n%s" % (describe_rc(rc, timeout), err)

        problems = []
        try:
            for k, vi in enumerate(model.graph.output):
                expected = as_declared(
                    load_tensor(os.path.join(data_dir, "output_%d.pb" % k)), vi)
                path = os.path.join(out_dir, "outputs", npy_name(vi.name))
                if not os.path.isfile(path):
                    problems.append("output %s: tcc-run wrote no %s" % (
                        vi.name, os.path.relpath(path, out_dir)))
                    continue
                msg = compare_output(vi.name, numpy.load(path), expected, *TOLERANCES[target])
                if msg:
                    problems.append(msg)
        except Exception as e:  # noqa: BLE001 - report as a harness failure
            return -255, "harness: cannot compare outputs of %s: %s" % (test.name, e)
        if problems:
            return 1, "\n".join(problems)
        return 0, ""


# Numeric mode compiles tests in batches of up to NUMERIC_BATCH (one step
# library for the tests' graphs side by side, every name prefixed: a build's
# fixed cost dwarfs a node test's); a test its batch does not pass (the
# batch fails to build or run, or the test's outputs differ) runs alone,
# and that run decides. Tests in the xfail file, and tests with
# initializers (which make a step train), always run alone.
NUMERIC_BATCH = 24


def batchable(test, model):
    return not model.graph.initializer and len(model.graph.output) > 0


def run_numeric_batch(tcc, tcc_run, tests, timeout, target="cpu"):
    """Tests compiled and run as one step: {test name: (0, "")} for those
    whose outputs all match; the others are left out."""
    with tempfile.TemporaryDirectory(prefix="tcc_node_batch_") as tmp:
        try:
            models = []
            for k, t in enumerate(tests):
                path = t.model_path
                if t.constants:
                    path = os.path.join(tmp, "%d.onnx" % k)
                    rewrite_model(t, path)
                models.append(onnx.compose.add_prefix(onnx.load(path), "t%d." % k))
            graph = onnx.helper.make_graph(
                [n for m in models for n in m.graph.node], "batch",
                [i for m in models for i in m.graph.input],
                [o for m in models for o in m.graph.output])
            merged = onnx.helper.make_model(graph, opset_imports=list(models[0].opset_import))
            merged.ir_version = max(m.ir_version for m in models)
            model_path = os.path.join(tmp, "batch.onnx")
            onnx.save(merged, model_path)
        except Exception:  # noqa: BLE001 - the tests run alone
            return {}
        step = os.path.join(tmp, "step.so")
        rc, _ = run_cmd([tcc] + TARGET_FLAGS[target] + [model_path, "-o", step], timeout)
        if rc != 0:
            return {}
        feed_dir, out_dir = os.path.join(tmp, "feed"), os.path.join(tmp, "out")
        try:
            os.mkdir(feed_dir)
            for k, t in enumerate(tests):
                data_dir = os.path.join(os.path.dirname(t.model_path), "test_data_set_0")
                const_names = {n for n, _ in t.constants}
                for j, vi in enumerate(onnx.load(t.model_path, load_external_data=False).graph.input):
                    if vi.name in const_names:
                        continue
                    arr = as_declared(load_tensor(os.path.join(data_dir, "input_%d.pb" % j)), vi)
                    if arr.dtype.kind == "f":
                        arr = arr.astype(numpy.float32)
                    numpy.save(os.path.join(feed_dir, npy_name("t%d.%s" % (k, vi.name))), arr)
        except Exception:  # noqa: BLE001
            return {}
        rc, _ = run_cmd([tcc_run, step, "--feed", feed_dir, "--grads-only", "--dump", out_dir], timeout)
        if rc != 0:
            return {}
        passed = {}
        for k, t in enumerate(tests):
            data_dir = os.path.join(os.path.dirname(t.model_path), "test_data_set_0")
            try:
                ok = True
                for j, vi in enumerate(onnx.load(t.model_path, load_external_data=False).graph.output):
                    expected = as_declared(load_tensor(os.path.join(data_dir, "output_%d.pb" % j)), vi)
                    path = os.path.join(out_dir, "outputs", npy_name("t%d.%s" % (k, vi.name)))
                    if not os.path.isfile(path) or compare_output(vi.name, numpy.load(path), expected,
                                                                  *TOLERANCES[target]):
                        ok = False
                        break
            except Exception:  # noqa: BLE001
                ok = False
            if ok:
                passed[t.name] = (0, "")
        return passed


def numeric_batches(tests, xfail):
    """The tests that may share a step, in groups of one opset."""
    groups = {}
    for t in tests:
        if t.name in xfail:
            continue
        try:
            model = onnx.load(t.model_path, load_external_data=False)
        except Exception:  # noqa: BLE001
            continue
        if batchable(t, model):
            groups.setdefault(t.opset, []).append(t)
    out = []
    for g in groups.values():
        out += [g[i:i + NUMERIC_BATCH] for i in range(0, len(g), NUMERIC_BATCH)]
    return [b for b in out if len(b) > 1]


def classify(rc, listed):
    if rc is None or rc not in (0, 1):
        return "CRASH"
    if rc == 0:
        return "XPASS" if listed else "PASS"
    return "XFAIL" if listed else "FAIL"


def describe_rc(rc, timeout):
    if rc is None:
        return "timed out after %gs" % timeout
    if rc == -255:
        return "harness error"
    if rc < 0:
        return "killed by signal %d" % -rc
    return "exit %d" % rc


def indent(text):
    lines = text.rstrip("\n").splitlines()
    if len(lines) > MAX_STDERR_LINES:
        extra = len(lines) - MAX_STDERR_LINES
        lines = lines[:MAX_STDERR_LINES] + ["... (%d more lines)" % extra]
    return "\n".join("    | " + l for l in lines) if lines else "    | (no stderr)"


def parse_part(ap, text):
    """K[,K...]/N of --part, checked: each 0 <= K < N."""
    m = re.fullmatch(r"(\d+(?:,\d+)*)/(\d+)", text)
    ks = [int(k) for k in m.group(1).split(",")] if m else []
    if not m or not all(0 <= k < int(m.group(2)) for k in ks):
        ap.error("--part wants K[,K...]/N with 0 <= K < N, not %r" % text)
    return ks, int(m.group(2))


def main(argv=None):
    # Behave like a normal CLI tool when piped into `head` etc.
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(
        description="Run ONNX backend node tests through tcc --emit=imported "
                    "(or, with --numeric, compile and run them on the CPU target).")
    ap.add_argument("--tcc", help="path to the tcc binary (required unless --list)")
    ap.add_argument("--data", default=DEFAULT_DATA,
                    help="node test directory (default: %(default)s)")
    ap.add_argument("--xfail", help="file of expected failures: `test_name  # reason`")
    ap.add_argument("--numeric", action="store_true",
                    help="compile each test to a CPU step, run it with --tcc-run on "
                         "test_data_set_0 and compare the outputs")
    ap.add_argument("--target", choices=sorted(TARGET_FLAGS), default="cpu",
                    help="with --numeric: the target the steps are compiled for: cpu "
                         "(default), or cuda-emulation (the fp16 CUDA step, run on the CPU "
                         "through tcc's CUDA emulation; tolerances rtol %g, atol %g)"
                         % (CUDA_RTOL, CUDA_ATOL))
    ap.add_argument("--tcc-run", dest="tcc_run",
                    help="path to the tcc-run binary (required with --numeric)")
    ap.add_argument("--list", action="store_true",
                    help="only print the selected tests with their op types and opset")
    ap.add_argument("-k", dest="pattern",
                    help="only tests whose name matches this regular expression")
    ap.add_argument("--part", default=None, metavar="K[,K...]/N",
                    help="run the tests whose index in the sorted selection is K modulo N "
                         "(0-based): the suite's default tier runs one part of a long "
                         "variant, the long tier the others")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print every test's outcome (and stderr of XFAILs)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                    help="parallel tcc invocations (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help="seconds per test before it counts as CRASH (default: %(default)s)")
    args = ap.parse_args(argv)

    if not args.list and not args.tcc:
        ap.error("--tcc is required (unless --list)")
    if not os.path.isdir(args.data):
        ap.error("data directory not found: %s" % args.data)
    if args.jobs < 1:
        ap.error("--jobs must be >= 1")
    if args.tcc and not args.list:
        if not (os.path.isfile(args.tcc) and os.access(args.tcc, os.X_OK)):
            ap.error("tcc binary not found or not executable: %s" % args.tcc)
    if args.numeric and not args.list:
        if not args.tcc_run:
            ap.error("--tcc-run is required with --numeric")
        if not (os.path.isfile(args.tcc_run) and os.access(args.tcc_run, os.X_OK)):
            ap.error("tcc-run binary not found or not executable: %s" % args.tcc_run)
    pattern = None
    if args.pattern:
        try:
            pattern = re.compile(args.pattern)
        except re.error as e:
            ap.error("bad -k pattern: %s" % e)

    xfail, warnings = {}, []
    if args.xfail:
        try:
            xfail, warnings = read_xfail(args.xfail)
        except OSError as e:
            ap.error("cannot read xfail file: %s" % e)

    tests, load_errors = discover(args.data)
    for name, msg in load_errors:
        warnings.append("%s: %s (skipped)" % (name, msg))
    selected_names = {t.name for t in tests}
    for name in sorted(xfail):
        if name not in selected_names:
            warnings.append("xfail entry %s is not a selected test" % name)
    if pattern:
        tests = [t for t in tests if pattern.search(t.name)]
    if args.part:
        ks, n = parse_part(ap, args.part)
        tests = [t for i, t in enumerate(sorted(tests, key=lambda t: t.name)) if i % n in ks]
        selected = {t.name for t in tests}
        xfail = {name: why for name, why in xfail.items() if name in selected}
    for w in warnings:
        print("warning: " + w, file=sys.stderr)

    if args.list:
        width = max((len(t.name) for t in tests), default=0)
        for t in tests:
            mark = "  [xfail: %s]" % xfail[t.name] if t.name in xfail else ""
            if t.constants:
                mark = "  [constants: %s]%s" % (
                    ", ".join("%s=input_%d" % (n, k) for n, k in t.constants), mark)
            print("%-*s  opset=%-3s ops=%s%s" % (width, t.name, t.opset,
                                                 ",".join(t.ops), mark))
        print("%d tests selected" % len(tests))
        return 0

    tcc = os.path.abspath(args.tcc)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        if args.numeric:
            tcc_run = os.path.abspath(args.tcc_run)
            done = {}
            groups = numeric_batches(tests, xfail)
            for found in pool.map(lambda b: run_numeric_batch(tcc, tcc_run, b, args.timeout, args.target),
                                  groups):
                done.update(found)
            alone = [t for t in tests if t.name not in done]
            futures = {t.name: pool.submit(run_numeric, tcc, tcc_run, t, args.timeout, args.target)
                       for t in alone}
            results = [done[t.name] if t.name in done else futures[t.name].result() for t in tests]
            print("numeric: %d tests passed in %d batched steps, %d run alone"
                  % (len(done), len(groups), len(alone)))
        else:
            futures = [pool.submit(run_one, tcc, t, args.timeout) for t in tests]
            results = [f.result() for f in futures]

    counts = {k: 0 for k in ("PASS", "XFAIL", "FAIL", "XPASS", "CRASH")}
    per_op = {op: {"tests": 0, "PASS": 0, "XFAIL": 0, "bad": 0} for op in SUPPORTED_OPS}
    silent_rejects = []
    for t, (rc, err) in zip(tests, results):
        listed = t.name in xfail
        outcome = classify(rc, listed)
        counts[outcome] += 1
        for op in t.ops:
            per_op[op]["tests"] += 1
            if outcome in ("PASS", "XFAIL"):
                per_op[op][outcome] += 1
            else:
                per_op[op]["bad"] += 1
        if rc == 1 and (not err.strip() or (args.numeric and err.startswith(
                "tcc (compiling the step)") and len(err.strip().splitlines()) == 1)):
            silent_rejects.append(t.name)
        header = "%-5s %s  (opset %s; %s)" % (outcome, t.name, t.opset, ",".join(t.ops))
        if args.verbose and t.constants:
            header += "  [constants: %s]" % ", ".join(
                "%s=input_%d" % (n, k) for n, k in t.constants)
        if outcome == "FAIL":
            print(header)
            print(indent(err))
        elif outcome == "XPASS":
            print(header)
            print("    | exit 0 but listed in the xfail file (%s); remove it from the list"
                  % (xfail[t.name] or "no reason given"))
        elif outcome == "CRASH":
            print(header + "  -- " + describe_rc(rc, args.timeout)
                  + ("  [listed as xfail]" if listed else ""))
            print(indent(err))
        elif args.verbose:
            print(header)
            if outcome == "XFAIL":
                lines = err.strip().splitlines()
                # numeric mode: the first line names the stage, the next says why
                first = " / ".join(lines[:2 if args.numeric else 1]) or "(no stderr)"
                print("    | expected: %s" % (xfail[t.name] or "no reason given"))
                print("    | got:      %s" % first)

    print()
    print("Per-op results (tests containing the op):")
    print("  %-24s %5s %5s %5s %5s" % ("op", "tests", "pass", "xfail", "fail"))
    for op in SUPPORTED_OPS:
        c = per_op[op]
        if pattern and not c["tests"]:
            continue  # -k narrowed the run; hide ops it did not touch
        print("  %-24s %5d %5d %5d %5d" % (op, c["tests"], c["PASS"], c["XFAIL"], c["bad"]))
    print()
    print("PASS %(PASS)d  XFAIL %(XFAIL)d  FAIL %(FAIL)d  XPASS %(XPASS)d  CRASH %(CRASH)d"
          % counts)
    if silent_rejects:
        print("note: %d test(s) rejected with exit 1 but no diagnostic on stderr"
              % len(silent_rejects))
    passed = counts["PASS"] + counts["XFAIL"]
    failed = counts["FAIL"] + counts["XPASS"] + counts["CRASH"]
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

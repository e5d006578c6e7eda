"""Test of runtime/onnx_save.{h,cpp} (tcc_save_onnx) through test/runtime/onnx_save_test.cpp.

Usage: /usr/bin/python3 check_onnx_save.py [--bin /tmp/onnx_save_test] [--workdir DIR] [--fuzz N]

Build the driver first:
  g++ -std=c++17 -O2 -fno-exceptions -Wall -Wextra -I/work/main \
      runtime/onnx_save.cpp test/runtime/onnx_save_test.cpp -o /tmp/onnx_save_test

The driver makes a parameter for every floating-point initializer of a model,
holding 2 * original + 1, and calls tcc_save_onnx. This script checks, on
  - a torch-exported MLP (training mode, no constant folding) with a doc_string
    and unknown protobuf fields added,
  - a hand-built model with FLOAT16 / BFLOAT16 / DOUBLE / FLOAT initializers
    stored as raw_data, int32_data, double_data and float_data,
  - the MLP saved with external data (attribute tensors too),
  - a model with an 8 KiB weight, from inline and from external data, saved
    past a lowered inline limit (saveOnnx's; 2 GiB in tcc-run): the weight's
    data in OUT.data at a 4096-aligned offset, named by its file name, the
    small tensors inline, onnx.checker passing, values = 2 * orig + 1,
that the output passes onnx.checker, that every parameter equals 2 * orig + 1
converted to its type (exactly: numpy's round-to-nearest-even for float16, an
exact-arithmetic reference for bfloat16), and that everything else is
unchanged; then the error cases (truncated, garbage, missing parameter, wrong
dims, duplicate initializer, missing external file, unreadable model,
unwritable output), the 16-bit conversions against references, and a fuzz run
on corrupted models. Ends with `N passed, M failed`; exits 1 on any failure.
"""
import argparse
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
from fractions import Fraction

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PASSED = 0
FAILED = 0

DATA_FIELDS = ["raw_data", "float_data", "int32_data", "string_data", "int64_data",
               "double_data", "uint64_data", "external_data"]


def check(name, ok, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"ok    {name}")
    else:
        FAILED += 1
        print(f"FAIL  {name}" + (f": {detail}" if detail else ""))


def run(args, *rest):
    p = subprocess.run([args.bin] + [str(r) for r in rest], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


# --- 16-bit float references --------------------------------------------------

def round_ref(x, man, emin, emax):
    """x (a Python float) rounded to nearest even in a binary format with `man`
    stored mantissa bits, minimum normal exponent `emin` and maximum exponent
    `emax`, in exact arithmetic; returns a Python float (inf on overflow)."""
    if math.isnan(x) or math.isinf(x) or x == 0:
        return x
    a = Fraction(abs(x))
    e = max(math.frexp(abs(x))[1] - 1, emin)
    ulp = Fraction(2) ** (e - man)
    q = a // ulp
    r = a - q * ulp
    if 2 * r > ulp or (2 * r == ulp and q % 2 == 1):
        q += 1
    v = q * ulp
    if v >= Fraction(2) ** (emax + 1):
        return math.copysign(math.inf, x)
    return math.copysign(float(v), x)


def f16_bits_ref(x):
    return int(np.array([round_ref(x, 10, -14, 15)], np.float16).view(np.uint16)[0])


def bf16_bits_ref(x):
    return int(np.array([round_ref(x, 7, -126, 127)], np.float32).view(np.uint32)[0] >> 16)


def bf16_from_f32_bits(a):
    """Round-to-nearest-even float32 -> bfloat16 bits (non-NaN)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def tensor_values(t):
    """The values of a TensorProto as float64 (bfloat16 decoded by hand)."""
    if t.data_type == TensorProto.BFLOAT16:
        if t.raw_data:
            bits = np.frombuffer(t.raw_data, np.uint16)
        else:
            bits = np.array(t.int32_data, np.uint32).astype(np.uint16)
        return bf16_to_f32(bits).astype(np.float64).reshape(tuple(t.dims))
    return numpy_helper.to_array(t).astype(np.float64)


def expected(t, arena):
    """2 * orig + 1 as the driver computes it (in the arena's type), converted
    to the initializer's type, as float64 (bfloat16: as float32 values)."""
    orig = tensor_values(t)
    dt = t.data_type
    if arena == "f64" or (arena == "auto" and dt == TensorProto.DOUBLE):
        v = orig.astype(np.float64) * 2.0 + 1.0
        if dt == TensorProto.FLOAT:
            return v.astype(np.float32).astype(np.float64)
        if dt == TensorProto.FLOAT16:
            return v.astype(np.float16).astype(np.float64)
        if dt == TensorProto.BFLOAT16:
            bits = np.array([bf16_bits_ref(float(x)) for x in v.ravel()], np.uint16)
            return bf16_to_f32(bits).astype(np.float64).reshape(v.shape)
        return v
    v = orig.astype(np.float32) * np.float32(2) + np.float32(1)
    if dt == TensorProto.FLOAT16:
        return v.astype(np.float16).astype(np.float64)
    if dt == TensorProto.BFLOAT16:
        return bf16_to_f32(bf16_from_f32_bits(v)).astype(np.float64).reshape(v.shape)
    return v.astype(np.float64)


def same_values(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


# --- model comparison ---------------------------------------------------------

def all_tensors(graph):
    """Every TensorProto of a graph: initializers, sparse initializers,
    attribute tensors, in subgraphs too."""
    for t in graph.initializer:
        yield t
    for s in graph.sparse_initializer:
        yield s.values
        yield s.indices
    for n in graph.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from all_tensors(a.g)
            for g in a.graphs:
                yield from all_tensors(g)


def normalized(model, params):
    """The model's bytes with the data of the `params` initializers cleared
    (and data_location DEFAULT made implicit: onnx.load sets it explicitly
    when it reads external data)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in all_tensors(m.graph):
        if t.data_location == TensorProto.DEFAULT:
            t.ClearField("data_location")
    for t in m.graph.initializer:
        if t.name in params:
            for f in DATA_FIELDS:
                t.ClearField(f)
            t.ClearField("data_location")
            t.ClearField("segment")
    return m.SerializeToString(deterministic=True)


def float_names(model, skip=()):
    return [t.name for t in model.graph.initializer
            if t.data_type in (1, 10, 11, 16) and t.name not in skip]


def check_saved(label, orig, out_path, arena="auto", skip=()):
    """Checks an output against the original (loaded with its external data)."""
    if not os.path.exists(out_path):
        check(f"{label}: output written", False)
        return None
    check(f"{label}: no temporary left", not os.path.exists(out_path + ".tmp"))
    out = onnx.load(out_path, load_external_data=False)
    try:
        onnx.checker.check_model(out)
        check(f"{label}: onnx.checker", True)
    except Exception as e:  # noqa: BLE001
        check(f"{label}: onnx.checker", False, str(e))
    params = set(float_names(orig, skip))
    byname = {t.name: t for t in out.graph.initializer}
    bad = []
    for t in orig.graph.initializer:
        if t.name not in params:
            continue
        o = byname[t.name]
        if o.data_type != t.data_type or list(o.dims) != list(t.dims):
            bad.append(f"{t.name}: type/dims changed")
        elif not o.raw_data or any(len(getattr(o, f)) for f in DATA_FIELDS[1:]):
            bad.append(f"{t.name}: data not (only) in raw_data")
        elif o.data_location != TensorProto.DEFAULT:
            bad.append(f"{t.name}: data_location {o.data_location}")
        else:
            want, got = expected(t, arena), tensor_values(o)
            if not same_values(want, got):
                bad.append(f"{t.name}: want {want.ravel()[:6]} got {got.ravel()[:6]}")
    check(f"{label}: {len(params)} parameters = 2*orig+1", not bad and params, "; ".join(bad))
    ext = [t.name for t in all_tensors(out.graph)
           if t.data_location == TensorProto.EXTERNAL or len(t.external_data)]
    check(f"{label}: no external data", not ext, str(ext))
    check(f"{label}: everything else unchanged",
          normalized(orig, params) == normalized(out, params))
    return out


# --- models -------------------------------------------------------------------

UNKNOWN_TOP = b"\xa8\x06\x07"      # field 101, varint 7
UNKNOWN_TENSOR = b"\xa0\x06\x2a"   # field 100, varint 42
UNKNOWN_GROUP = b"\xb3\x06\x08\x05\xb4\x06"  # field 102: a group holding field 1 = 5


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def ld_field(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def export_mlp(path):
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    torch.onnx.export(m, (torch.randn(2, 4),), path,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["x"], output_names=["y"])


def make_mlp_extra(src, path):
    """The MLP with a doc_string on one initializer, an unknown field in
    another and an unknown field at the end of the ModelProto."""
    m = onnx.load(src)
    m.graph.initializer[0].doc_string = "first layer weight"
    t = TensorProto()
    t.ParseFromString(m.graph.initializer[1].SerializeToString() + UNKNOWN_TENSOR)
    m.graph.initializer[1].CopyFrom(t)
    with open(path, "wb") as f:
        f.write(m.SerializeToString() + UNKNOWN_GROUP + UNKNOWN_TOP)


def make_typed(path):
    w16 = np.array([[1024, 1025, 1026, 1027], [40000, -40000, 2.0 ** -24, -(2.0 ** -20)],
                    [0.1, -0.3333, 65504, 1000.5]], np.float16)
    b16 = np.array([1.5, -2.25, 2047, 3e-5], np.float16)
    bf_vals = np.array([1.5, 2.25, 1000.0, -3.140625], np.float32)
    bf_bits = bf16_from_f32_bits(bf_vals)
    bfr = np.array([0.1, -7.75, 3.0e38, 1e-39], np.float32)
    bfr_bits = bf16_from_f32_bits(bfr)
    inits = [
        numpy_helper.from_array(w16, "w16"),                         # raw_data
        helper.make_tensor("b16", TensorProto.FLOAT16, [4], b16),  # int32_data
        helper.make_tensor("bf", TensorProto.BFLOAT16, [4], bf_bits.astype(np.int32).tolist(),
                           raw=False),                             # int32_data bits
        helper.make_tensor("bfr", TensorProto.BFLOAT16, [4], bfr_bits.tobytes(), raw=True),
        helper.make_tensor("d64", TensorProto.DOUBLE, [4], [0.5, -1.25, 1e300, 1 / 3]),
        helper.make_tensor("f32", TensorProto.FLOAT, [4], [0.25, -8.5, 3.0e38, 1e-40]),
        helper.make_tensor("shape", TensorProto.INT64, [1], [8]),
    ]
    inits[4].doc_string = "a double"
    # make_tensor(BFLOAT16, raw=False) would convert floats; give it the bits.
    inits[2].ClearField("int32_data")
    inits[2].int32_data.extend(int(b) for b in bf_bits)
    nodes = [
        helper.make_node("Cast", ["w16"], ["c1"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x", "c1"], ["m"]),
        helper.make_node("Cast", ["b16"], ["c2"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["m", "c2"], ["a1"]),
        helper.make_node("Cast", ["bf"], ["c3"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["a1", "c3"], ["a2"]),
        helper.make_node("Cast", ["bfr"], ["c3r"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["a2", "c3r"], ["a2r"]),
        helper.make_node("Cast", ["d64"], ["c4"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["a2r", "c4"], ["a3"]),
        helper.make_node("Add", ["a3", "f32"], ["a4"]),
        helper.make_node("Constant", [], ["k"],
                         value=helper.make_tensor("kv", TensorProto.FLOAT, [8], list(range(8)))),
        helper.make_node("Reshape", ["a4", "shape"], ["r"]),
        helper.make_node("Add", ["r", "k"], ["y"]),
    ]
    g = helper.make_graph(nodes, "typed",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
                          initializer=inits, doc_string="graph doc")
    m = helper.make_model(g, producer_name="check_onnx_save",
                          opset_imports=[helper.make_opsetid("", 14)])
    m.doc_string = "model doc"
    helper.set_model_props(m, {"author": "tcc"})
    onnx.checker.check_model(m)
    onnx.save(m, path)


def make_big(path):
    """y = x @ W + b with W [32, 64] (8 KiB: past the 1 KiB that external
    data output moves) and b [64] (256 bytes: stays inline)."""
    rng = np.random.default_rng(4)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        [numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def make_external(src, dirpath):
    """The MLP plus a Constant node, every tensor (attribute tensors too) in
    one external file weights.bin."""
    m = onnx.load(src)
    m.graph.node.append(helper.make_node(
        "Constant", [], ["unused_k"],
        value=helper.make_tensor("kv", TensorProto.FLOAT, [16], [float(i) / 3 for i in range(16)])))
    os.makedirs(dirpath, exist_ok=True)
    path = os.path.join(dirpath, "model.onnx")
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0, convert_attribute=True)
    return path


# --- tests --------------------------------------------------------------------

def test_conversions(args, wd):
    rng = np.random.default_rng(0)
    special32 = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0,
                          65504, 65519.99, 65520, 65536, -65520, 2.0 ** -24, 2.0 ** -25,
                          -(2.0 ** -25), 3 * 2.0 ** -25, 2.0 ** -25 * 1.0001, 2.0 ** -14,
                          2.0 ** -14 - 2.0 ** -25, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11,
                          1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 3.4028235e38, 1e-45, -1e-45,
                          2.0 ** -126, 2.0 ** -133, 2.0 ** -134, 1.1754942e-38],
                         np.float32)
    bits = rng.integers(0, 2 ** 32, 200000, dtype=np.uint64).astype(np.uint32)
    rand32 = bits.view(np.float32)
    near = (rng.standard_normal(100000) * rng.choice([1e-6, 1e-3, 1, 1e3, 6e4], 100000)
            ).astype(np.float32)
    a32 = np.concatenate([special32, rand32, near])
    # float64: specials, values where rounding through float32 first would be
    # wrong (double rounding), random bit patterns and random normals.
    special64 = [0.0, -0.0, math.inf, -math.inf, math.nan, 1 + 2.0 ** -11 + 2.0 ** -40,
                 1 + 2.0 ** -8 + 2.0 ** -40, -(1 + 2.0 ** -8 + 2.0 ** -40),
                 1 + 2.0 ** -11 - 2.0 ** -40, 65520 - 2.0 ** -30, 65520.0, 1e300, -1e300,
                 5e-324, 2.0 ** -25 + 2.0 ** -60, 2.0 ** -134 + 2.0 ** -170,
                 3.4028235677973366e38, 3.4028235677973366e38 * (1 + 2.0 ** -30),
                 2.0 ** 128 * (1 - 2.0 ** -9), 2.0 ** 128 * (1 - 2.0 ** -9) * (1 - 2.0 ** -40)]
    bits64 = rng.integers(0, 2 ** 63, 20000, dtype=np.uint64)
    bits64[::2] |= np.uint64(1) << np.uint64(63)
    rand64 = bits64.view(np.float64)
    near64 = rng.standard_normal(20000) * rng.choice([1e-40, 1e-7, 1, 1e4, 1e38], 20000)
    a64 = np.concatenate([np.array(special64), rand64, near64])
    a32.tofile(os.path.join(wd, "c32.bin"))
    a64.tofile(os.path.join(wd, "c64.bin"))
    rc, out = run(args, "--convert", os.path.join(wd, "c32.bin"), os.path.join(wd, "c64.bin"), wd)
    check("convert: driver ran", rc == 0, out)
    if rc:
        return
    got = {k: np.fromfile(os.path.join(wd, k + ".bin"), np.uint16)
           for k in ("f32_f16", "f32_bf16", "f64_f16", "f64_bf16")}

    def cmp(label, got_bits, want_bits, src):
        nan_src = np.isnan(src)
        g = got_bits.astype(np.uint32)
        w = np.asarray(want_bits).astype(np.uint32)
        ok = (g == w) | nan_src
        # NaN stays a NaN of the same sign.
        exp_mask, man_mask = (0x7C00, 0x3FF) if "bf16" not in label else (0x7F80, 0x7F)
        nan_ok = ((g & exp_mask) == exp_mask) & ((g & man_mask) != 0) & \
            ((g >> 15) == np.signbit(src).astype(np.uint32))
        ok &= ~nan_src | nan_ok
        bad = np.nonzero(~ok)[0]
        check(f"convert: {label} ({len(src)} values)", len(bad) == 0,
              ", ".join(f"{src[i]!r}: got {g[i]:#06x} want {w[i]:#06x}" for i in bad[:5]))

    with np.errstate(over="ignore"):
        cmp("float32 -> float16 vs numpy", got["f32_f16"], a32.astype(np.float16).view(np.uint16), a32)
        cmp("float32 -> bfloat16 vs bit rounding", got["f32_bf16"], bf16_from_f32_bits(a32), a32)
        cmp("float64 -> float16 vs numpy", got["f64_f16"], a64.astype(np.float16).view(np.uint16), a64)
    # Exact-arithmetic references on a subset (every special, then a sample).
    idx32 = list(range(len(special32))) + random.Random(1).sample(range(len(a32)), 3000)
    idx64 = list(range(len(special64))) + random.Random(2).sample(range(len(a64)), 6000)
    for label, arr, key, ref, idx in (
            ("float32 -> float16 vs exact", a32, "f32_f16", f16_bits_ref, idx32),
            ("float64 -> float16 vs exact", a64, "f64_f16", f16_bits_ref, idx64),
            ("float64 -> bfloat16 vs exact", a64, "f64_bf16", bf16_bits_ref, idx64)):
        sub = arr[idx]
        want = np.array([0 if math.isnan(float(x)) else ref(float(x)) for x in sub])
        cmp(label, got[key][idx], want, sub)


def expect_error(label, rc, out, must_contain, out_path, wd=None):
    check(f"{label}: non-zero exit", rc != 0, out)
    check(f"{label}: message names the problem", all(s in out for s in must_contain),
          out.strip())
    check(f"{label}: no output, no temporary",
          not os.path.exists(out_path) and not os.path.exists(out_path + ".tmp"))


def main():
    np.seterr(over="ignore")  # float16 overflow to inf is part of the test
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="/tmp/onnx_save_test")
    ap.add_argument("--workdir")
    ap.add_argument("--fuzz", type=int, default=1500)
    args = ap.parse_args()
    # A fresh folder every run: some checks look at what a folder holds.
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
    wd = tempfile.mkdtemp(prefix="onnx_save_", dir=args.workdir)
    J = lambda *p: os.path.join(wd, *p)  # noqa: E731

    plain = J("mlp_plain.onnx")
    export_mlp(plain)
    mlp = J("mlp.onnx")
    make_mlp_extra(plain, mlp)
    orig_mlp = onnx.load(mlp)

    # 1. The MLP, float32 arena.
    rc, out = run(args, mlp, J("mlp_out.onnx"))
    check("mlp: saved", rc == 0, out)
    o = check_saved("mlp", orig_mlp, J("mlp_out.onnx"))
    if o is not None:
        t0 = [t for t in o.graph.initializer if t.name == orig_mlp.graph.initializer[0].name][0]
        check("mlp: doc_string kept", t0.doc_string == "first layer weight")
        t1 = [t for t in o.graph.initializer if t.name == orig_mlp.graph.initializer[1].name][0]
        check("mlp: unknown tensor field kept", UNKNOWN_TENSOR in t1.SerializeToString())
        with open(J("mlp_out.onnx"), "rb") as f:
            check("mlp: unknown model fields (a group too) kept byte for byte",
                  f.read().endswith(UNKNOWN_GROUP + UNKNOWN_TOP))
        check("mlp: opset, producer, io unchanged",
              o.opset_import == orig_mlp.opset_import and o.producer_name == orig_mlp.producer_name
              and o.graph.input == orig_mlp.graph.input and o.graph.node == orig_mlp.graph.node)
    # float64 arena -> FLOAT initializers.
    rc, out = run(args, mlp, J("mlp_out64.onnx"), "--arena", "f64")
    check("mlp f64 arena: saved", rc == 0, out)
    check_saved("mlp f64 arena", orig_mlp, J("mlp_out64.onnx"), arena="f64")
    # Some initializers not parameters: copied byte for byte.
    rc, out = run(args, mlp, J("mlp_skip.onnx"), "--skip", "2.bias")
    check("mlp skip: saved", rc == 0, out)
    o = check_saved("mlp skip", orig_mlp, J("mlp_skip.onnx"), skip=("2.bias",))
    if o is not None:
        a = [t for t in orig_mlp.graph.initializer if t.name == "2.bias"][0]
        b = [t for t in o.graph.initializer if t.name == "2.bias"][0]
        check("mlp skip: non-parameter identical", a.SerializeToString() == b.SerializeToString())
    # In place: the output path is the model itself.
    shutil.copy(mlp, J("inplace.onnx"))
    rc, out = run(args, J("inplace.onnx"), J("inplace.onnx"))
    check("in place: saved", rc == 0, out)
    check_saved("in place", orig_mlp, J("inplace.onnx"))

    # 2. FLOAT16 / BFLOAT16 / DOUBLE / FLOAT initializers in various fields.
    typed = J("typed.onnx")
    make_typed(typed)
    orig_typed = onnx.load(typed)
    for arena in ("auto", "f64", "f32"):
        outp = J(f"typed_{arena}.onnx")
        rc, out = run(args, typed, outp, "--arena", arena)
        check(f"typed {arena} arena: saved", rc == 0, out)
        o = check_saved(f"typed {arena} arena", orig_typed, outp, arena=arena)
        if o is not None and arena == "auto":
            by = {t.name: t for t in o.graph.initializer}
            w = tensor_values(by["w16"]).ravel()
            check("typed: float16 ties to even (2049 -> 2048, 2051 -> 2052), overflow -> inf",
                  list(w[:6]) == [2048, 2052, 2052, 2056, np.inf, -np.inf], str(w[:6]))
            check("typed: doc_string of a double kept", by["d64"].doc_string == "a double")
            a = [t for t in orig_typed.graph.initializer if t.name == "shape"][0]
            check("typed: int64 initializer identical",
                  a.SerializeToString() == by["shape"].SerializeToString())

    # 3. External data.
    extdir = J("ext")
    ext = make_external(plain, extdir)
    orig_ext = onnx.load(ext)  # loads the external data
    outdir = J("ext_out")
    os.makedirs(outdir, exist_ok=True)
    rc, out = run(args, ext, os.path.join(outdir, "model.onnx"))
    check("external: saved", rc == 0, out)
    o = check_saved("external", orig_ext, os.path.join(outdir, "model.onnx"))
    if o is not None:
        check("external: output dir holds only the model", os.listdir(outdir) == ["model.onnx"])
        k = [n for n in o.graph.node if n.op_type == "Constant"][0].attribute[0].t
        check("external: attribute tensor inlined and equal",
              np.array_equal(numpy_helper.to_array(k), np.arange(16, dtype=np.float32) / 3))
    rc, out = run(args, ext, os.path.join(outdir, "skip.onnx"), "--skip", "2.bias")
    check("external skip: saved", rc == 0, out)
    check_saved("external skip", orig_ext, os.path.join(outdir, "skip.onnx"), skip=("2.bias",))
    # The external file missing.
    nodata = J("ext_nodata")
    os.makedirs(nodata, exist_ok=True)
    shutil.copy(ext, os.path.join(nodata, "model.onnx"))
    rc, out = run(args, os.path.join(nodata, "model.onnx"), J("nodata_out.onnx"),
                  "--params-from", ext, "--skip", "2.bias")
    expect_error("external file missing", rc, out, ["weights.bin", "2.bias"], J("nodata_out.onnx"))

    # 3b. A model past the inline limit (2 GiB; here lowered): the tensors'
    # data in OUT.data beside it, page-aligned, named by its file name.
    big = make_big(J("big_src.onnx"))
    big_ext = make_external(big, J("big_ext"))
    for label, src, orig_src in (("external out", big, onnx.load(big)),
                                 ("external in and out", big_ext, onnx.load(big_ext))):
        xdir = J(label.replace(" ", "_"))
        os.makedirs(xdir, exist_ok=True)
        xout = os.path.join(xdir, "big.onnx")
        rc, out = run(args, src, xout, "--inline-limit", "2000")
        check(f"{label}: saved", rc == 0, out)
        if rc != 0:
            continue
        check(f"{label}: the model and its data file only",
              sorted(os.listdir(xdir)) == ["big.onnx", "big.onnx.data"], str(os.listdir(xdir)))
        try:
            onnx.checker.check_model(xout)
            check(f"{label}: onnx.checker", True)
        except Exception as e:  # noqa: BLE001
            check(f"{label}: onnx.checker", False, str(e))
        bare = onnx.load(xout, load_external_data=False)
        full = onnx.load(xout)
        params = set(float_names(orig_src))
        byname = {t.name: t for t in full.graph.initializer}
        placed, bad = 0, []
        for t in bare.graph.initializer:
            if t.name not in params:
                continue
            info = {e.key: e.value for e in t.external_data}
            size = int(np.prod(t.dims)) * {TensorProto.FLOAT: 4, TensorProto.DOUBLE: 8,
                                           TensorProto.FLOAT16: 2}[t.data_type]
            if size >= 1024:
                if t.data_location != TensorProto.EXTERNAL or info.get("location") != "big.onnx.data" \
                        or int(info.get("offset", "1")) % 4096:
                    bad.append(f"{t.name}: external_data {info}")
                placed += 1
        for t in orig_src.graph.initializer:
            if t.name in params and not same_values(expected(t, "auto"), tensor_values(byname[t.name])):
                bad.append(f"{t.name}: values")
        check(f"{label}: {placed} of {len(params)} parameters in big.onnx.data, "
              f"all = 2*orig+1", placed > 0 and not bad, "; ".join(bad[:4]))

    # 4. Errors.
    with open(mlp, "rb") as f:
        data = f.read()
    with open(J("trunc.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])
    rc, out = run(args, J("trunc.onnx"), J("trunc_out.onnx"), "--params-from", mlp)
    expect_error("truncated model", rc, out, ["malformed", "trunc.onnx"], J("trunc_out.onnx"))
    with open(J("garbage.onnx"), "wb") as f:
        f.write(bytes(random.Random(3).getrandbits(8) for _ in range(4096)))
    rc, out = run(args, J("garbage.onnx"), J("garbage_out.onnx"), "--params-from", mlp)
    expect_error("garbage model", rc, out, ["garbage.onnx"], J("garbage_out.onnx"))
    rc, out = run(args, mlp, J("missing_out.onnx"), "--missing", "no.such.param")
    expect_error("missing parameter", rc, out, ["no.such.param", "not an initializer"],
                 J("missing_out.onnx"))
    rc, out = run(args, mlp, J("dims_out.onnx"), "--bad-dims", "0.weight")
    expect_error("wrong dims", rc, out, ["0.weight", "[4, 4]", "[3, 4]"], J("dims_out.onnx"))
    dup = onnx.load(mlp)
    dup.graph.initializer.append(dup.graph.initializer[2])
    onnx.save(dup, J("dup.onnx"))
    rc, out = run(args, J("dup.onnx"), J("dup_out.onnx"), "--params-from", mlp)
    expect_error("duplicate initializer", rc, out, ["2.weight", "more than one"], J("dup_out.onnx"))
    # Subgraphs nested 200 deep (Graph.node.attribute.g ...): refused, no crash.
    g = b""
    for _ in range(200):
        g = ld_field(1, ld_field(5, ld_field(6, g)))
    with open(J("deep.onnx"), "wb") as f:
        f.write(data + ld_field(7, g))
    rc, out = run(args, J("deep.onnx"), J("deep_out.onnx"), "--params-from", mlp)
    expect_error("nesting too deep", rc, out, ["nested too deeply"], J("deep_out.onnx"))
    rc, out = run(args, J("nonexistent.onnx"), J("ne_out.onnx"), "--params-from", mlp)
    expect_error("unreadable model", rc, out, ["cannot read", "nonexistent.onnx"], J("ne_out.onnx"))
    rc, out = run(args, mlp, J("no_such_dir", "out.onnx"))
    expect_error("unwritable output", rc, out, ["cannot write", "no_such_dir"],
                 J("no_such_dir", "out.onnx"))
    with open(J("keep.onnx"), "wb") as f:
        f.write(b"old contents")
    rc, out = run(args, mlp, J("keep.onnx"), "--missing", "nope")
    with open(J("keep.onnx"), "rb") as f:
        check("failed save leaves an existing output alone",
              rc != 0 and f.read() == b"old contents" and not os.path.exists(J("keep.onnx.tmp")))
    # Every truncation of the MLP: refused or written whole, never a crash.
    bad = []
    for n in range(0, len(data), max(1, len(data) // 150)):
        with open(J("cut.onnx"), "wb") as f:
            f.write(data[:n])
        if os.path.exists(J("cut_out.onnx")):
            os.unlink(J("cut_out.onnx"))
        rc, out = run(args, J("cut.onnx"), J("cut_out.onnx"), "--params-from", mlp)
        if rc not in (0, 1) or (rc == 0) != os.path.exists(J("cut_out.onnx")) or \
                (rc == 1 and "onnx_save_test: " not in out):
            bad.append((n, rc, out.strip()))
    check("truncations: refused cleanly, never a crash", not bad, str(bad[:3]))

    # 5. 16-bit conversions.
    test_conversions(args, wd)

    # 6. Fuzz.
    for label, model, n in (("mlp", mlp, args.fuzz), ("typed", typed, args.fuzz // 2),
                            ("external", ext, args.fuzz // 2)):
        rc, out = run(args, "--fuzz", model, wd, n, 7)
        check(f"fuzz {label}: {out.strip()}", rc == 0, out[-2000:])

    print(f"{PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())

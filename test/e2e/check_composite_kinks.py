"""The gradients of the ops the importer composes (compiler/Import/Composites.h)
at their kinks (and the rounding ops' steps), against PyTorch's autograd in
float64.

Usage: VENV/bin/python check_composite_kinks.py --tcc TCC --tcc-run TCC_RUN --workdir DIR

Finite differences (check_gradient_rules.py) say nothing at a kink, where a
composition of selects picks one side by how it is written. Here each op is
evaluated with its input at the kinks (and beside them): a float64 CPU step's
gradient (`tcc --cpu-precision=f64`, `tcc-run --grads-only`) must equal
PyTorch's for the same function (torch.nn.functional's), element by element.
Exit 0 when every case holds.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

KINKS = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 0.7, 1.0, 2.0, 3.0, -1e-3, 1e-3, -4.0 / 3], np.float64)

# ONNX's float attributes are float32: PyTorch is given the same values.
A01, A07, A15 = (float(np.float32(v)) for v in (0.1, 0.7, 1.5))
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875  # ONNX's defaults

# name -> (ONNX op, its attributes, extra inputs as {name: value}, opset, PyTorch's function)
CASES = {
    "LeakyRelu": ("LeakyRelu", {"alpha": 0.1}, {}, 17, lambda x: F.leaky_relu(x, A01)),
    "Elu": ("Elu", {"alpha": 0.7}, {}, 17, lambda x: F.elu(x, A07)),
    "Selu": ("Selu", {}, {}, 17, lambda x: SELU_GAMMA * F.elu(x, SELU_ALPHA)),
    "Celu": ("Celu", {"alpha": 1.5}, {}, 17, lambda x: F.celu(x, A15)),
    "ThresholdedRelu": ("ThresholdedRelu", {"alpha": 0.5}, {}, 17, lambda x: F.threshold(x, 0.5, 0.0)),
    "HardSigmoid": ("HardSigmoid", {"alpha": 1.0 / 6, "beta": 0.5}, {}, 17, F.hardsigmoid),
    "HardSwish": ("HardSwish", {}, {}, 14, F.hardswish),
    "Softsign": ("Softsign", {}, {}, 17, F.softsign),
    "Softplus": ("Softplus", {}, {}, 17, F.softplus),
    "Clip": ("Clip", {}, {"lo": np.float64(-0.5), "hi": np.float64(0.7)}, 17,
             lambda x: torch.clamp(x, -0.5, 0.7)),
    # Rounding has gradient 0 everywhere, at the integers too (Discrete.cpp);
    # Mod's is 1 on the dividend, at the multiples of the divisor too.
    "Floor": ("Floor", {}, {}, 17, torch.floor),
    "Ceil": ("Ceil", {}, {}, 17, torch.ceil),
    "Round": ("Round", {}, {}, 17, torch.round),
    "Sign": ("Sign", {}, {}, 17, torch.sign),
    "Mod fmod": ("Mod", {"fmod": 1}, {"b": np.float64(0.75)}, 17, lambda x: torch.fmod(x, 0.75)),
    "Mod": ("Mod", {}, {"b": np.float64(-0.75)}, 17, lambda x: torch.remainder(x, -0.75)),
    "PRelu": ("PRelu", {}, {"slope": np.array([0.25], np.float64)}, 17,
              lambda x: F.prelu(x, torch.tensor([0.25], dtype=torch.float64))),
}


def model(op, attrs, extra, opset):
    x = numpy_helper.from_array(KINKS, "x")
    r = numpy_helper.from_array(np.linspace(0.5, 1.5, KINKS.size), "r")
    consts = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(np.asarray(v), k + "_v"))
              for k, v in extra.items()]
    nodes = consts + [helper.make_node(op, ["x"] + list(extra), ["y"], **attrs),
                      helper.make_node("Mul", ["y", "r_c"], ["yr"]),
                      helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0)]
    nodes.insert(0, helper.make_node("Constant", [], ["r_c"], value=r))
    g = helper.make_graph(nodes, "kinks", [], [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
                          [x])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    entry = m.metadata_props.add()
    entry.key, entry.value = "tcc.trainable", "x"
    return m


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    failed = 0
    weights = np.linspace(0.5, 1.5, KINKS.size)
    for name, (op, attrs, extra, opset, torch_fn) in CASES.items():
        work = os.path.join(args.workdir, name)
        os.makedirs(os.path.join(work, "feed"))
        path = os.path.join(work, "m.onnx")
        onnx.save(model(op, attrs, extra, opset), path)
        try:
            run([args.tcc, path, "--target=cpu", "--cpu-precision=f64", "-o", os.path.join(work, "s.so")])
            run([args.tcc_run, os.path.join(work, "s.so"), "--feed", os.path.join(work, "feed"),
                 "--grads-only", "--dump", os.path.join(work, "out")])
            got = np.load(os.path.join(work, "out", "grads", "x.npy")).astype(np.float64)
        except (RuntimeError, OSError) as e:
            print("FAIL %-16s %s" % (name, e))
            failed += 1
            continue
        x = torch.tensor(KINKS, dtype=torch.float64, requires_grad=True)
        (torch_fn(x) * torch.tensor(weights)).sum().backward()
        want = x.grad.numpy()
        bad = np.abs(got - want) > 1e-12 + 1e-9 * np.abs(want)
        if bad.any():
            failed += 1
            print("FAIL %-16s at x = %s: tcc %s, PyTorch %s" % (
                name, KINKS[bad].tolist(), got[bad].tolist(), want[bad].tolist()))
        else:
            print("PASS %-16s %d points, the kinks included, equal to PyTorch's gradient" % (name, KINKS.size))
    print("%d passed, %d failed" % (len(CASES) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

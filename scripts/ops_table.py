"""Writes docs/ops.md: every ONNX op (the default domain, as the installed
onnx package defines it), whether tcc imports it and how a gradient flows
through it, beside what ONNX Runtime Training's gradient builders cover.

Usage: VENV/bin/python scripts/ops_table.py --tcc build/bin/tcc [-o docs/ops.md] [--check]

--check writes nothing and exits 1 when the page differs from what it
would write (the suite's `ops-table` test: the page follows the importer).

tcc's side comes from `tcc --list-ops` (compiler/Import/OnnxOpTable.cpp:
the importer's own table, so the page cannot drift from the code); ONNX's
from onnx.defs (the latest schema of each op, and which of its inputs ONNX
marks differentiable). ORT_GRADIENT_BUILDERS below is ONNX Runtime
Training's list, read from its source (orttraining/orttraining/core/graph/
gradient_builder_registry.cc, the versioned registry, and the builders of
gradient_builder.cc): the ai.onnx ops it registers a gradient builder for.
It was read once, by hand, and may lag ORT's main branch.
"""
import argparse
import os
import subprocess
import sys

import onnx
from onnx import defs

# ai.onnx ops with a gradient builder in ONNX Runtime Training (its
# com.microsoft ops, such as FastGelu or BiasGelu, left out).
ORT_GRADIENT_BUILDERS = sorted("""
Abs Add AveragePool BatchNormalization Cast Clip Concat Conv ConvTranspose Cos Div Dropout Erf
Exp Expand Flatten GRU Gather GatherElements GatherND Gelu Gemm GlobalAveragePool Identity
LSTM LayerNormalization LeakyRelu Log LogSoftmax MatMul Max MaxPool Min Mul Neg Pad Pow
Reciprocal ReduceL2 ReduceLogSumExp ReduceMean ReduceSum Relu Reshape ScatterElements ScatterND
Sigmoid Sin Slice Softmax SoftmaxCrossEntropyLoss Split Sqrt Squeeze Sub Tanh Tile TopK
Transpose Trilu Unsqueeze Where
""".split())

GRADIENT_WORDS = {
    "rule": "yes (its tcc op's rule)",
    "parts": "yes (the ops it is written as)",
    "lowered": "yes (the ops tcc-legalize writes it as)",
    "none": "no gradient",
}


def tcc_ops(tcc):
    out = subprocess.run([tcc, "--list-ops"], check=True, stdout=subprocess.PIPE, text=True).stdout
    ops = {}
    for line in out.splitlines()[1:]:
        name, since, written, grad = line.split()
        ops[name] = (int(since), written, grad)
    return ops


def differentiable(schema):
    """Whether ONNX marks an input of the op differentiable (Unknown counts
    as yes when an input or output is a float tensor)."""
    cats = [i.differentiation_category for i in schema.inputs]
    if any(c == defs.OpSchema.DifferentiationCategory.Differentiable for c in cats):
        return True
    if cats and all(c == defs.OpSchema.DifferentiationCategory.NonDifferentiable for c in cats):
        return False
    floats = {"tensor(float)", "tensor(float16)", "tensor(double)", "tensor(bfloat16)"}
    return any(floats & set(tc.allowed_type_strs) for tc in schema.type_constraints)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if the page is not what this would write")
    ap.add_argument("-o", "--output", default=os.path.normpath(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "ops.md")))
    args = ap.parse_args()
    tcc = tcc_ops(args.tcc)
    schemas = sorted((s for s in defs.get_all_schemas() if s.domain == ""), key=lambda s: s.name)
    names = {s.name for s in schemas}
    unknown = sorted(set(tcc) - names)
    if unknown:
        sys.exit("tcc knows ops that onnx %s does not: %s" % (onnx.__version__, unknown))
    rows = []
    counts = {"onnx": len(schemas), "tcc": 0, "tcc_grad": 0, "ort": 0, "tcc_not_ort": [],
              "ort_not_tcc": []}
    for s in schemas:
        diff = differentiable(s)
        t = tcc.get(s.name)
        ort = s.name in ORT_GRADIENT_BUILDERS
        counts["ort"] += ort
        if t:
            since, written, grad = t
            counts["tcc"] += 1
            has_grad = grad != "none" and diff
            counts["tcc_grad"] += has_grad
            if has_grad and not ort:
                counts["tcc_not_ort"].append(s.name)
            tcc_cell = "%d (%s)" % (since, "composite" if written == "composite" else "`%s`" % written)
            grad_cell = GRADIENT_WORDS[grad] if diff else "not differentiable"
        else:
            tcc_cell, grad_cell = "refused", ""
            if ort:
                counts["ort_not_tcc"].append(s.name)
        rows.append("| %s | %s | %s | %s | %s |" % (
            s.name, s.since_version, tcc_cell, grad_cell, "yes" if ort else ""))
    lines = [
        "# ONNX ops in tcc",
        "",
        "Written by `scripts/ops_table.py` from `tcc --list-ops` (the importer's own table) and "
        "onnx %s's schemas; do not edit by hand. ONNX Runtime Training's column is its gradient "
        "builders for ai.onnx ops, read from its source (`orttraining/orttraining/core/graph/"
        "gradient_builder_registry.cc` and `gradient_builder.cc`); it may lag ORT's main branch."
        % onnx.__version__,
        "",
        "- ONNX ops (default domain): %d." % counts["onnx"],
        "- tcc imports %d of them, %d with a gradient where ONNX marks the op differentiable."
        % (counts["tcc"], counts["tcc_grad"]),
        "- ONNX Runtime Training has a gradient builder for %d." % counts["ort"],
        "- Differentiated by tcc and not by ORT Training (%d): %s."
        % (len(counts["tcc_not_ort"]), ", ".join(counts["tcc_not_ort"])),
        "- Differentiated by ORT Training and refused by tcc (%d): %s."
        % (len(counts["ort_not_tcc"]), ", ".join(counts["ort_not_tcc"]) or "none"),
        "",
        "\"Since\" is the op's latest ONNX version; tcc's column is the oldest opset whose "
        "semantics tcc implements and the tcc op it becomes (\"composite\": written as several "
        "tcc ops, `compiler/Import/Composites.h`, differentiated through them). A refused op "
        "gets one diagnostic naming the file, node, op and opset. Within an op tcc imports, some "
        "attributes or modes are refused by name (the ONNX backend node tests' xfail lists in "
        "`test/onnx_node/` say which).",
        "",
        "| ONNX op | since | tcc (from opset, as) | tcc gradient | ORT Training gradient |",
        "|---|---|---|---|---|",
    ] + rows
    text = "\n".join(lines) + "\n"
    if args.check:
        try:
            with open(args.output) as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            print("%s is not what scripts/ops_table.py writes from this tcc: rerun it "
                  "(VENV/bin/python scripts/ops_table.py --tcc build/bin/tcc)" % args.output)
            return 1
        print("%s: up to date" % args.output)
        return 0
    with open(args.output, "w") as f:
        f.write(text)
    print("%s: %d ONNX ops, tcc %d (%d with a gradient), ORT Training %d; tcc-only %d, ORT-only %d"
          % (args.output, counts["onnx"], counts["tcc"], counts["tcc_grad"], counts["ort"],
             len(counts["tcc_not_ort"]), len(counts["ort_not_tcc"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

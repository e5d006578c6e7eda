"""Random training steps, fused against unfused, bit for bit (CPU target).

Usage: /usr/bin/python3 check_fusion_fuzz.py --tcc TCC --tcc-run TCC_RUN --workdir DIR
                                             [--models N] [--seed S]

Builds N random ONNX models (opset 17) out of the ops tcc-fuse groups:
unary and broadcasting binary elementwise ops, reductions over random axes
(keepdims, so their results broadcast back into later ops: the row-reduction
and sibling patterns), softmax over the last axis, a few matmuls (GEMM
prologues and epilogues), and attention's head split and merge (split,
reshape, transpose ... transpose, reshape, concat: the copy loops). Every model has float parameters of the loop's
shape and of broadcast shapes and one input, and ends in a scalar loss. For
each, tcc compiles the training step with and without fusion, tcc-run runs
one micro-step of each on the same input, and the loss and every gradient
must be bit-identical. The fusion report's kernel count must also be below
the op count. Each model is also compiled under a budget that leaves 85% of
its activations' and temporaries' bytes:
when tcc finds a plan (or says which smallest budget it would meet), the
plan must be within the budget and the step bit-identical to the
unconstrained one. Prints one line per model and ends with `N passed, M
failed`.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class Builder:
    def __init__(self, rng, shape):
        self.rng = rng
        self.shape = shape
        self.nodes, self.inits, self.pool = [], [], []
        self.n = 0

    def name(self, base):
        self.n += 1
        return "%s_%d" % (base, self.n)

    def param(self, shape):
        v = self.name("w")
        data = self.rng.uniform(-1, 1, shape).astype(np.float32)
        self.inits.append(numpy_helper.from_array(data, v))
        self.pool.append((v, tuple(shape)))

    def const_i64(self, values):
        v = self.name("axes")
        self.inits.append(numpy_helper.from_array(np.array(values, np.int64), v))
        return v

    def node(self, op, inputs, shape, **attrs):
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name="/" + out, **attrs))
        self.pool.append((out, tuple(shape)))
        return out

    def heads(self):
        """Attention's head split and merge: split the last axis in two, give
        each part a head axis moved to the front (reshape, transpose), apply
        tanh, move it back and concat (the data-movement copy loops)."""
        v, s = self.pick(full=True)
        half = s[-1] // 2
        sizes = self.const_i64([half, half])
        parts = [self.name("part"), self.name("part")]
        self.nodes.append(helper.make_node("Split", [v, sizes], parts, name="/" + self.name("split"),
                                           axis=-1))
        r = len(s)
        part_shape = list(s[:-1]) + [half]
        head_shape = list(s[:-1]) + [2, half // 2]
        perm = [r - 1] + list(range(r - 1)) + [r]
        inverse = [perm.index(i) for i in range(r + 1)]
        moved_shape = [head_shape[p] for p in perm]
        moved = []
        for part in parts:
            h = self.node("Reshape", [part, self.const_i64(head_shape)], head_shape)
            moved.append(self.node("Transpose", [h], moved_shape, perm=perm))
        back = []
        # Sometimes each part's first two dimensions are swapped before the
        # concat (and the concat's after): the concat's chains are then not
        # strided views, which exercises the general copy loop.
        swap = r >= 3 and random.random() < 0.5
        swapped_shape = [part_shape[1], part_shape[0]] + part_shape[2:]
        for t in moved:
            a = self.node("Tanh", [t], moved_shape)
            u = self.node("Transpose", [a], head_shape, perm=inverse)
            m = self.node("Reshape", [u, self.const_i64(part_shape)], part_shape)
            if swap:
                m = self.node("Transpose", [m], swapped_shape, perm=[1, 0] + list(range(2, r)))
            back.append(m)
        # The pool keeps the loop's shape only (views and heads are local).
        self.pool = [p for p in self.pool if len(p[1]) == r and
                     all(x in (1, y) for x, y in zip(p[1], s))]
        if swap:
            cat_shape = [s[1], s[0]] + list(s[2:])
            cat = self.node("Concat", back, cat_shape, axis=-1)
            self.pool.pop()  # not of the loop's shape
            return self.node("Transpose", [cat], s, perm=[1, 0] + list(range(2, r)))
        return self.node("Concat", back, s, axis=-1)

    def pick(self, full=False):
        choices = [p for p in self.pool if not full or p[1] == tuple(self.shape)]
        # Prefer recent values so that chains form.
        weights = [1 + i for i in range(len(choices))]
        return random.choices(choices, weights)[0]

    def step(self):
        kind = random.choice(["unary", "unary", "binary", "binary", "binary", "reduce",
                              "reduce", "softmax", "matmul", "heads"])
        if kind == "heads" and self.shape[-1] % 4 == 0:
            return self.heads()
        if kind == "heads":
            kind = "unary"
        if kind == "unary":
            v, s = self.pick()
            op = random.choice(["Tanh", "Sigmoid", "Neg", "Relu", "Abs", "ExpTanh"])
            if op == "ExpTanh":
                t = self.node("Tanh", [v], s)
                return self.node("Exp", [t], s)
            return self.node(op, [v], s)
        if kind == "binary":
            (a, sa), (b, sb) = self.pick(), self.pick()
            s = tuple(max(x, y) for x, y in zip(sa, sb))
            op = random.choice(["Add", "Sub", "Mul", "Div"])
            if op == "Div":
                one = self.name("one")
                self.inits.append(numpy_helper.from_array(np.array(1.0, np.float32), one))
                pos = self.node("Abs", [b], sb)
                b = self.node("Add", [pos, one], sb)
            return self.node(op, [a, b], s)
        if kind == "reduce":
            v, s = self.pick()
            rank = len(s)
            axes = sorted(random.sample(range(rank), random.randint(1, rank)))
            if random.random() < 0.5:
                axes = [rank - 1]  # the row reduction of softmax and LayerNorm
            out = tuple(1 if d in axes else s[d] for d in range(rank))
            if random.random() < 0.5:
                return self.node("ReduceSum", [v, self.const_i64(axes)], out, keepdims=1)
            return self.node("ReduceMean", [v], out, axes=axes, keepdims=1)
        if kind == "softmax":
            v, s = self.pick(full=True)
            return self.node("Softmax", [v], s, axis=-1)
        # A matmul with a square weight keeps the loop's shape.
        v, s = self.pick(full=True)
        w = self.name("mw")
        k = self.shape[-1]
        self.inits.append(numpy_helper.from_array(
            self.rng.uniform(-0.5, 0.5, (k, k)).astype(np.float32), w))
        return self.node("MatMul", [v, w], s)


def make_model(seed, path):
    random.seed(seed)
    rng = np.random.default_rng(seed)
    shape = random.choice([[2, 3, 8], [4, 16], [3, 4, 5], [2, 2, 4, 8]])
    b = Builder(rng, shape)
    b.pool.append(("x", tuple(shape)))
    b.param(shape)
    b.param([shape[-1]])
    b.param([1] * (len(shape) - 1) + [shape[-1]])
    row = list(shape)
    row[-1] = 1
    b.param(row)
    # Residual blocks of random ops, like a transformer's layers: each block
    # reads the running value and the parameters, and adds its last
    # full-size value to the running value (so early blocks' values are
    # saved for a late backward pass, which is what remat recomputes).
    params = list(b.pool[1:])
    cur = "x"
    for _ in range(random.randint(2, 4)):
        b.pool = params + [(cur, tuple(shape))]
        for _ in range(random.randint(4, 9)):
            b.step()
        full = [v for v, s in b.pool[len(params):] if s == tuple(shape)]
        cur = b.node("Add", [cur, full[-1]], shape)
    # The loss: the mean of the sum of the last values (all of them feed it).
    last = [p for p in b.pool[-4:]]
    acc, sacc = last[0]
    for v, s in last[1:]:
        sacc = tuple(max(x, y) for x, y in zip(sacc, s))
        acc = b.node("Add", [acc, v], sacc)
    loss = b.name("loss")
    b.nodes.append(helper.make_node("ReduceMean", [acc], [loss], name="/" + loss, keepdims=0))
    graph = helper.make_graph(
        b.nodes, "fuzz%d" % seed,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(loss, TensorProto.FLOAT, [])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="check_fusion_fuzz.py")
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return shape, len(b.nodes)


def grads(tcc_run, so, feed, out):
    shutil.rmtree(out, ignore_errors=True)  # a dump of an earlier run
    r = run([tcc_run, so, "--feed", feed, "--grads-only", "--dump", out])
    if r.returncode != 0:
        raise RuntimeError("tcc-run failed:\n" + r.stdout[-600:])
    files = {}
    for root, _, names in os.walk(out):
        for n in names:
            p = os.path.join(root, n)
            files[os.path.relpath(p, out)] = np.load(p)
    return files


def check(args, seed):
    work = os.path.join(args.workdir, "m%d" % seed)
    os.makedirs(work, exist_ok=True)
    onnx_path = os.path.join(work, "model.onnx")
    shape, nodes = make_model(seed, onnx_path)
    feed = os.path.join(work, "feed")
    os.makedirs(feed, exist_ok=True)
    np.save(os.path.join(feed, "x.npy"),
            np.random.default_rng(seed + 1000).uniform(-1, 1, shape).astype(np.float32))
    fused, plain = os.path.join(work, "fused.so"), os.path.join(work, "plain.so")
    report, memory = os.path.join(work, "fusion.json"), os.path.join(work, "memory.json")
    for so, extra in ((fused, ["--fusion-report", report, "--memory-report", memory]),
                      (plain, ["--no-fusion"])):
        r = run([args.tcc, "--target=cpu", onnx_path, "-o", so] + extra)
        if r.returncode != 0:
            return "tcc failed: " + r.stdout.strip().splitlines()[-1][:300], None
    stats = json.load(open(report))
    a = grads(args.tcc_run, fused, feed, os.path.join(work, "a"))
    b = grads(args.tcc_run, plain, feed, os.path.join(work, "b"))

    def differs(x, y):
        if x.keys() != y.keys():
            return "different outputs: %s vs %s" % (sorted(x), sorted(y))
        for k in sorted(x):
            if not np.array_equal(x[k], y[k], equal_nan=True):
                diff = np.max(np.abs(x[k].astype(np.float64) - y[k].astype(np.float64)))
                return "%s differs (max |diff| %.3g)" % (k, diff)
        return None

    problem = differs(a, b)
    if problem:
        return problem, stats
    if not all(np.all(np.isfinite(v)) for v in a.values()):
        return "non-finite values", stats
    if stats["kernel_count"] >= stats["op_count"]:
        return "no fusion: %d kernels for %d ops" % (stats["kernel_count"], stats["op_count"]), stats
    # Remat: under a budget that leaves 85% of the activations' and
    # temporaries' bytes, when tcc finds a plan, the step is bit-identical
    # to the unconstrained one and within the budget.
    plan = json.load(open(memory))
    peak = plan["planned_peak_bytes"]
    budget = peak - int(0.15 * plan["categories"]["activations_and_temporaries"])
    tight = os.path.join(work, "tight.so")
    r = run([args.tcc, "--target=cpu", onnx_path, "-o", tight, "--mem-budget=%d" % budget,
             "--memory-report", memory])
    stats["remat"] = "remat: no plan (the error names the smallest)"
    if r.returncode == 0:
        planned = json.load(open(memory))["planned_peak_bytes"]
        if planned > budget:
            return "remat: planned %d over the budget %d" % (planned, budget), stats
        problem = differs(grads(args.tcc_run, tight, feed, os.path.join(work, "c")), a)
        if problem:
            return "remat: " + problem, stats
        stats["remat"] = "remat: same (%d recomputed)" % len(
            json.load(open(memory))["remat_decisions"])
    elif "smallest budget this plan meets" not in r.stdout:
        return "remat: " + r.stdout.strip().splitlines()[-1][:300], stats
    return None, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tcc", required=True)
    ap.add_argument("--tcc-run", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--models", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    passed = failed = 0
    for i in range(args.models):
        seed = args.seed + i
        try:
            problem, stats = check(args, seed)
        except RuntimeError as e:
            problem, stats = str(e).strip().splitlines()[-1][:300], None
        counts = ("%3d ops -> %3d kernels" % (stats["op_count"], stats["kernel_count"])
                  if stats else "")
        print("%-6s model %3d  %-26s %s" % ("FAIL" if problem else "ok", seed, counts,
                                            problem or "loss and gradients bit-identical; " +
                                            stats.get("remat", "")))
        if problem:
            failed += 1
        else:
            passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

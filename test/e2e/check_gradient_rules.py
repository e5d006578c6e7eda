"""Unit tests of tcc's gradient rules against central finite differences (float64).

Usage: /usr/bin/python3 check_gradient_rules.py --tcc TCC --workdir DIR [-k REGEX] [-j N]

Each case is a small ONNX model: one op under test whose differentiable
inputs are FLOAT (or DOUBLE) initializers (tcc's trainable parameters) with
seeded random values, its other inputs Constant nodes, int64 initializers or
fed graph inputs, and the loss ReduceSum(Mul(y, R)) over the op's output(s)
with R a fixed random Constant (for SoftmaxCrossEntropyLoss with a reduction,
the op's own output). The case is compiled with
`tcc --cpu-precision=f64 -o case.so model.onnx`, one micro_step (scale 1)
gives the analytic gradients, and each parameter element (at most
MAX_ELEMS random ones per parameter) is compared with the central difference
(L(p+h) - L(p-h)) / 2h, h = 1e-6:  |analytic - fd| <= ATOL + RTOL*|fd|.

Prints one line per case (elements checked, max abs error, max rel error over
elements with |fd| >= REL_FLOOR, PASS/FAIL) and ends with `N passed, M failed`;
exits 1 on any failure.

With --cuda-emulation, each case is also compiled for the fp16 CUDA target
(`tcc --target=cuda --cuda-emulation`), run once with `tcc-run --grads-only`
(dynamic loss scaling, as training does) and its gradients compared with the
analytic float64 ones just checked: for every parameter,
max |cuda - analytic| <= CUDA_BOUND * max |analytic| (the bound the GPU parity
check applies, bench/gpu/compare.py), so every gradient rule's CUDA lowering
is checked too. The CUDA steps are built in batches of up to CUDA_BATCH
cases of one opset and loss type (one step library each: the cases' graphs
side by side, their losses added, every name prefixed), since a build's
fixed cost dwarfs a case's; a case whose batch fails to build or run, or
misses the bound, is built and checked alone, which decides. Cases with
Dropout always run alone: their masks depend on the graph.
"""
import argparse
import concurrent.futures
import math
import os
import re
import shutil
import subprocess
import sys
import traceback
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from step_abi import Step  # noqa: E402

H = 1e-6
ATOL = 1e-7
RTOL = 1e-5
REL_FLOOR = 1e-6
MAX_ELEMS = 64
OPSET = 17
CUDA_BOUND = 1e-2
CUDA_BATCH = 16

ONNX_TYPE = {np.dtype(np.float32): TensorProto.FLOAT,
             np.dtype(np.float64): TensorProto.DOUBLE,
             np.dtype(np.int64): TensorProto.INT64,
             np.dtype(np.int32): TensorProto.INT32,
             np.dtype(np.bool_): TensorProto.BOOL}


# ---------------------------------------------------------------------------
# Model builder
# ---------------------------------------------------------------------------

class G:
    """Builds one case's graph."""

    def __init__(self, name):
        self.name = name
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))
        self.nodes, self.inits, self.inputs, self.feeds = [], [], [], {}
        self.params = []
        self.opset = OPSET
        self.n = 0

    def fresh(self, prefix):
        self.n += 1
        return "%s%d" % (prefix, self.n)

    # -- values --------------------------------------------------------------
    def rand(self, shape, lo=-1.0, hi=1.0, away=None):
        """Uniform in [lo, hi]; with `away`, magnitudes in [away, hi] with a random sign."""
        if away is not None:
            mag = self.rng.uniform(away, hi, size=shape)
            sign = np.where(self.rng.random(size=shape) < 0.5, -1.0, 1.0)
            return mag * sign
        return self.rng.uniform(lo, hi, size=shape)

    def param(self, shape, dtype=np.float32, **kw):
        """A trainable parameter (floating-point initializer)."""
        arr = np.asarray(self.rand(shape, **kw), dtype=dtype)
        return self.param_value(arr)

    def param_value(self, arr):
        name = self.fresh("p")
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        self.params.append(name)
        return name

    def const(self, arr, dtype=None):
        """A Constant node."""
        arr = np.asarray(arr, dtype=dtype)
        name = self.fresh("c")
        self.nodes.append(helper.make_node(
            "Constant", [], [name], value=numpy_helper.from_array(arr, name + "_value")))
        return name

    def int_init(self, arr):
        """A non-float (int64) initializer: not a parameter."""
        arr = np.asarray(arr, dtype=np.int64)
        name = self.fresh("i")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def input(self, arr):
        """A graph input, fed with `arr`."""
        arr = np.asarray(arr)
        name = self.fresh("x")
        self.inputs.append(helper.make_tensor_value_info(name, ONNX_TYPE[arr.dtype], arr.shape))
        self.feeds[name] = arr
        return name

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs[0] if n_out == 1 else outs

    # -- loss ----------------------------------------------------------------
    def _infer(self):
        g = helper.make_graph(self.nodes, "infer", self.inputs, [], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        types = {}
        for vi in m.graph.value_info:
            t = vi.type.tensor_type
            types[vi.name] = (t.elem_type, tuple(d.dim_value for d in t.shape.dim))
        return types

    def weighted_sum(self, values, shapes=None):
        """ReduceSum(Mul(v, R)) summed over `values`, each R a random Constant.
        `shapes` gives a value's (elem, shape) where the installed onnx's
        shape inference does not (Debian's 1.12 leaves Einsum's dims 0)."""
        types = self._infer()
        types.update(shapes or {})
        terms = []
        for v in values:
            elem, shape = types[v]
            dtype = np.float64 if elem == TensorProto.DOUBLE else np.float32
            r = self.const(self.rng.uniform(-1.0, 1.0, size=shape).astype(dtype))
            terms.append(self.op("ReduceSum", [self.op("Mul", [v, r])], keepdims=0))
        loss = terms[0]
        for t in terms[1:]:
            loss = self.op("Add", [loss, t])
        return loss

    def model(self, loss):
        types = self._infer()
        elem, shape = types[loss]
        assert shape == (), "loss %s has shape %s" % (loss, shape)
        g = helper.make_graph(self.nodes, self.name, self.inputs,
                              [helper.make_tensor_value_info(loss, elem, [])], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)],
                              producer_name="check_gradient_rules")
        # Which initializers are parameters, as python/tcc_export.py records
        # it: a parameter that only feeds Sin would otherwise be taken for
        # what builds a position table (compiler/Import/Trainable.h).
        entry = m.metadata_props.add()
        entry.key, entry.value = "tcc.trainable", ",".join(self.params)
        onnx.checker.check_model(m, full_check=True)
        return m


# ---------------------------------------------------------------------------
# Cases: name -> function(G) returning the loss value's name
# ---------------------------------------------------------------------------

CASES = {}


def case(name, fn):
    assert name not in CASES, name
    CASES[name] = fn


def unary(op_type, shape=(2, 3), **kw):
    def build(g):
        return g.weighted_sum([g.op(op_type, [g.param(shape, **kw)])])
    return build


def binary(op_type, sa, sb, kwa=None, kwb=None):
    def build(g):
        a = g.param(sa, **(kwa or {}))
        b = g.param(sb, **(kwb or {}))
        return g.weighted_sum([g.op(op_type, [a, b])])
    return build


# Elementwise binary, with broadcasting.
BCAST = [("2x3_3", (2, 3), (3,)), ("2x1_1x3", (2, 1), (1, 3)), ("2x3_2x3", (2, 3), (2, 3)),
         ("3_2x3", (3,), (2, 3))]
for op in ["Add", "Sub", "Mul", "Div"]:
    for tag, sa, sb in BCAST:
        kwb = {"lo": 0.5, "hi": 2.0} if op == "Div" else {"away": 0.5, "hi": 2.0}
        case("%s_%s" % (op.lower(), tag), binary(op, sa, sb, kwb=kwb))


def mul_same_operand(g):
    # x * x: both operands' gradients accumulate into one parameter.
    x = g.param((2, 3))
    return g.weighted_sum([g.op("Mul", [x, x])])


def fanout(g):
    # One parameter used by two ops whose results are added.
    x = g.param((2, 3), lo=0.5, hi=2.0)
    return g.weighted_sum([g.op("Add", [g.op("Exp", [x]), g.op("Log", [x])])])


case("mul_same_operand", mul_same_operand)
case("fanout_exp_log", fanout)


# Pow.
def pow_const2(g):
    return g.weighted_sum([g.op("Pow", [g.param((2, 3), lo=0.5, hi=2.0),
                                        g.const(np.float32(2.0))])])


def pow_const_int(g):
    return g.weighted_sum([g.op("Pow", [g.param((2, 3), lo=0.5, hi=2.0),
                                        g.const(np.int64(3))])])


def pow_param_exp(g):
    a = g.param((2, 3), lo=0.5, hi=2.0)
    e = g.param((3,), lo=-1.5, hi=2.5)
    return g.weighted_sum([g.op("Pow", [a, e])])


def pow_param_exp_same(g):
    a = g.param((2, 3), lo=0.5, hi=2.0)
    e = g.param((2, 3), lo=-1.5, hi=2.5)
    return g.weighted_sum([g.op("Pow", [a, e])])


def pow_param_exp_scalar(g):
    a = g.param((2, 3), lo=0.5, hi=2.0)
    e = g.param((), lo=0.5, hi=2.5)
    return g.weighted_sum([g.op("Pow", [a, e])])


case("pow_const_exp_2", pow_const2)
case("pow_const_int_exp_3", pow_const_int)
case("pow_param_exp_bcast", pow_param_exp)
case("pow_param_exp", pow_param_exp_same)
case("pow_param_exp_scalar", pow_param_exp_scalar)

# Unary.
case("sqrt", unary("Sqrt", lo=0.3, hi=2.0))
case("neg", unary("Neg"))
case("exp", unary("Exp"))
case("log", unary("Log", lo=0.3, hi=2.0))
case("erf", unary("Erf", lo=-1.5, hi=1.5))
case("tanh", unary("Tanh", lo=-2.0, hi=2.0))
case("sigmoid", unary("Sigmoid", lo=-3.0, hi=3.0))
case("relu", unary("Relu", shape=(3, 4), away=0.1))
case("reciprocal", unary("Reciprocal", away=0.5, hi=2.0))
case("abs", unary("Abs", shape=(3, 4), away=0.1))
case("identity", unary("Identity"))
case("sin", unary("Sin", lo=-3.0, hi=3.0))
case("cos", unary("Cos", lo=-3.0, hi=3.0))
# Ops that tcc-legalize rewrites into core ops (passes/legalize/LowerOnnxOps.cpp).
case("max_bcast", binary("Max", (2, 3), (3,)))
case("min_bcast", binary("Min", (2, 1), (1, 3)))
case("flatten_axis2", lambda g: g.weighted_sum([g.op("Flatten", [g.param((2, 3, 4))], axis=2)]))
case("trilu_lower_k1", lambda g: g.weighted_sum(
    [g.op("Trilu", [g.param((2, 4, 5)), g.const(np.int64(1))], upper=0)]))
case("trilu_upper", lambda g: g.weighted_sum([g.op("Trilu", [g.param((4, 3))])]))
case("pad_constant", lambda g: g.weighted_sum([g.op("Pad", [
    g.param((2, 3, 4)), g.const(np.array([0, 1, -1, 1, 2, 0], np.int64)),
    g.const(np.float32(0.5))])]))


# Where.
def where_case(sc, sx, sy):
    def build(g):
        cond = g.const(g.rng.random(size=sc) < 0.5)
        return g.weighted_sum([g.op("Where", [cond, g.param(sx), g.param(sy)])])
    return build


case("where", where_case((2, 3), (2, 3), (2, 3)))
case("where_bcast_xy", where_case((2, 3), (3,), (2, 1)))
case("where_bcast_all", where_case((2, 1, 4), (3, 4), (2, 3, 1)))


# Cast.
def cast_case(to, src=np.float32):
    def build(g):
        return g.weighted_sum([g.op("Cast", [g.param((2, 3), dtype=src)], to=to)])
    return build


case("cast_float_to_float", cast_case(TensorProto.FLOAT))
case("cast_float_to_double", cast_case(TensorProto.DOUBLE))


# MatMul.
def matmul_case(sa, sb):
    return binary("MatMul", sa, sb)


case("matmul_2d", matmul_case((3, 4), (4, 5)))
case("matmul_batched_3d_2d", matmul_case((2, 3, 4), (4, 5)))
case("matmul_batched_3d_3d", matmul_case((2, 3, 4), (2, 4, 5)))
case("matmul_bcast_batch", matmul_case((2, 1, 3, 4), (3, 4, 2)))
case("matmul_1d_2d", matmul_case((4,), (4, 5)))
case("matmul_2d_1d", matmul_case((3, 4), (4,)))
case("matmul_1d_1d", matmul_case((4,), (4,)))
case("matmul_1d_3d", matmul_case((4,), (2, 4, 5)))
case("matmul_3d_1d", matmul_case((2, 3, 4), (4,)))


# Gemm: M=3, K=4, N=5.
def gemm_case(ta, tb, c_shape, alpha=0.7, beta=1.3):
    def build(g):
        a = g.param((4, 3) if ta else (3, 4))
        b = g.param((5, 4) if tb else (4, 5))
        ins = [a, b] + ([g.param(c_shape)] if c_shape is not None else [])
        return g.weighted_sum([g.op("Gemm", ins, alpha=alpha, beta=beta,
                                    transA=ta, transB=tb)])
    return build


for ta in (0, 1):
    for tb in (0, 1):
        for ctag, cs in [("cN", (5,)), ("cMN", (3, 5)), ("c11", (1, 1)), ("noC", None)]:
            case("gemm_tA%d_tB%d_%s" % (ta, tb, ctag), gemm_case(ta, tb, cs))
case("gemm_cM1_alpha1_beta1", gemm_case(0, 0, (3, 1), alpha=1.0, beta=1.0))


# Softmax / LogSoftmax.
for op in ["Softmax", "LogSoftmax"]:
    for axis in (1, -1, 0):
        case("%s_axis%s" % (op.lower(), axis if axis >= 0 else "m1"),
             (lambda op, axis: lambda g: g.weighted_sum(
                 [g.op(op, [g.param((2, 3, 4), lo=-2, hi=2)], axis=axis)]))(op, axis))


# LayerNormalization.
def layernorm_case(axis, bias):
    def build(g):
        x = g.param((2, 3, 4), lo=-2, hi=2)
        nshape = (2, 3, 4)[axis:] if axis >= 0 else (2, 3, 4)[axis:]
        ins = [x, g.param(nshape, lo=0.5, hi=1.5)]
        if bias:
            ins.append(g.param(nshape))
        return g.weighted_sum([g.op("LayerNormalization", ins, axis=axis, epsilon=1e-5)])
    return build


for axis in (-1, 1):
    for bias in (True, False):
        case("layernorm_axis%s_%s" % (axis if axis >= 0 else "m1",
                                      "bias" if bias else "nobias"),
             layernorm_case(axis, bias))


# Reductions on [2,3,4].
def reduce_mean_case(axes, keepdims):
    def build(g):
        x = g.param((2, 3, 4))
        kw = {"keepdims": keepdims}
        if axes is not None:
            kw["axes"] = axes
        return g.weighted_sum([g.op("ReduceMean", [x], **kw)])
    return build


def reduce_sum_case(axes, keepdims, axes_as="const", noop=None):
    def build(g):
        x = g.param((2, 3, 4))
        ins = [x]
        if axes is not None:
            ins.append(g.const(np.array(axes, np.int64)) if axes_as == "const"
                       else g.int_init(axes))
        kw = {"keepdims": keepdims}
        if noop is not None:
            kw["noop_with_empty_axes"] = noop
        return g.weighted_sum([g.op("ReduceSum", ins, **kw)])
    return build


for atag, axes in [("axes1", [1]), ("axes0_2", [0, 2]), ("noaxes", None), ("axesm1", [-1])]:
    for kd in (0, 1):
        case("reducemean_%s_keepdims%d" % (atag, kd), reduce_mean_case(axes, kd))
        case("reducesum_%s_keepdims%d" % (atag, kd), reduce_sum_case(axes, kd))
case("reducesum_axes1_int64_initializer", reduce_sum_case([1], 0, axes_as="init"))
case("reducesum_noaxes_noop", reduce_sum_case(None, 1, noop=1))


# Gather.
def gather_case(shape, indices, axis, via="const"):
    def build(g):
        data = g.param(shape)
        idx = np.array(indices, np.int64)
        idx_v = {"const": g.const, "input": g.input, "init": g.int_init}[via](idx)
        return g.weighted_sum([g.op("Gather", [data, idx_v], axis=axis)])
    return build


case("gather_axis0_embedding", gather_case((4, 3), [[0, 2, 0], [1, 2, 2]], 0))
case("gather_axis0_fed_indices", gather_case((4, 3), [[0, 2, 0], [1, 2, 2]], 0, via="input"))
case("gather_axis0_negative_indices", gather_case((4, 3), [[0, -1, 0], [1, -2, 3]], 0))
case("gather_axis1", gather_case((3, 4), [[0, 3, 3], [1, 0, 0]], 1))
case("gather_axis1_3d", gather_case((2, 4, 3), [3, 1, 3], 1, via="init"))
case("gather_scalar_index", gather_case((4, 3), 2, 0))


# Shapes.
def reshape_case(shape_in, target):
    def build(g):
        return g.weighted_sum([g.op("Reshape", [g.param(shape_in),
                                                g.const(np.array(target, np.int64))])])
    return build


case("reshape_minus1", reshape_case((2, 3, 4), [4, -1]))
case("reshape_zero", reshape_case((2, 3, 4), [0, -1, 2]))


def transpose_case(perm):
    def build(g):
        kw = {"perm": perm} if perm is not None else {}
        return g.weighted_sum([g.op("Transpose", [g.param((2, 3, 4))], **kw)])
    return build


case("transpose_120", transpose_case([1, 2, 0]))
case("transpose_default", transpose_case(None))


def unsqueeze(g):
    return g.weighted_sum([g.op("Unsqueeze", [g.param((3, 4)),
                                              g.const(np.array([0, 2], np.int64))])])


def squeeze(g):
    return g.weighted_sum([g.op("Squeeze", [g.param((3, 1, 4)),
                                            g.const(np.array([1], np.int64))])])


def squeeze_all(g):
    return g.weighted_sum([g.op("Squeeze", [g.param((1, 3, 1, 4))])])


case("unsqueeze", unsqueeze)
case("squeeze", squeeze)
case("squeeze_noaxes", squeeze_all)


def slice_case(shape, starts, ends, axes, steps):
    def build(g):
        ins = [g.param(shape), g.const(np.array(starts, np.int64)),
               g.const(np.array(ends, np.int64))]
        if axes is not None:
            ins.append(g.const(np.array(axes, np.int64)))
        if steps is not None:
            ins.append(g.const(np.array(steps, np.int64)))
        return g.weighted_sum([g.op("Slice", ins)])
    return build


INT64_MIN = -(2 ** 63)
case("slice_pos_steps", slice_case((4, 6), [1, 0], [3, 6], [0, 1], [1, 2]))
case("slice_neg_step", slice_case((5, 6), [5], [0], [1], [-2]))
case("slice_neg_steps_to_start", slice_case((5, 6), [-1, 4], [INT64_MIN, -100], [0, 1], [-2, -1]))
case("slice_neg_axes", slice_case((3, 4, 5), [1, -4], [3, -1], [-1, 0], [1, 1]))
case("slice_no_axes_steps", slice_case((4, 6), [1, 2], [3, 5], None, None))


def split_case(split, axis, use, shape=(2, 3), num_outputs=None):
    def build(g):
        ins = [g.param(shape)]
        if split is not None:
            ins.append(g.const(np.array(split, np.int64)))
        n = len(split) if split is not None else num_outputs
        outs = g.op("Split", ins, n_out=n, axis=axis)
        return g.weighted_sum([outs[i] for i in use])
    return build


case("split_1_2_axis1", split_case([1, 2], 1, [0, 1]))
case("split_equal_axis0", split_case(None, 0, [0, 1], shape=(4, 3), num_outputs=2))
case("split_unused_output", split_case([1, 2], 1, [1]))


def concat_case(shapes, axis):
    def build(g):
        return g.weighted_sum([g.op("Concat", [g.param(s) for s in shapes], axis=axis)])
    return build


case("concat_axis1", concat_case([(2, 3), (2, 2)], 1))
case("concat_axism1_three", concat_case([(2, 1, 2), (2, 1, 3), (2, 1, 1)], -1))


def expand_case(shape_in, target):
    def build(g):
        return g.weighted_sum([g.op("Expand", [g.param(shape_in),
                                               g.const(np.array(target, np.int64))])])
    return build


case("expand_3x1_to_2x3x4", expand_case((3, 1), [2, 3, 4]))
case("expand_same_rank", expand_case((1, 3, 1), [2, 3, 4]))


def dropout_case(training, ratio=0.0, shape=(2, 3)):
    def build(g):
        ins = [g.param(shape)]
        if training:
            ins += [g.const(np.float32(ratio)), g.const(np.bool_(True))]
        return g.weighted_sum([g.op("Dropout", ins)])
    return build


case("dropout_ratio0_training", dropout_case(True))
case("dropout_inference", dropout_case(False))
# Random masks: fixed within a micro-step (check() rewinds the random state
# before each one), so finite differences see the same mask.
case("dropout_ratio03_training", dropout_case(True, 0.3, (4, 9)))


# SoftmaxCrossEntropyLoss.
def sce_case(scores_shape, reduction, ignore, weights, log_prob=False):
    def build(g):
        n_cls = scores_shape[1]
        label_shape = (scores_shape[0],) + tuple(scores_shape[2:])
        labels = g.rng.integers(0, n_cls, size=label_shape).astype(np.int64)
        kw = {"reduction": reduction}
        if ignore is not None:
            kw["ignore_index"] = ignore
            flat = labels.reshape(-1)
            flat[::3] = ignore  # some labels ignored
        scores = g.param(scores_shape, lo=-2, hi=2)
        ins = [scores, g.const(labels)]
        if weights:
            ins.append(g.const(g.rng.uniform(0.5, 2.0, size=(n_cls,)).astype(np.float32)))
        if log_prob:
            loss, lp = g.op("SoftmaxCrossEntropyLoss", ins, n_out=2, **kw)
            return g.op("Add", [loss if reduction != "none" else g.weighted_sum([loss]),
                                g.weighted_sum([lp])])
        loss = g.op("SoftmaxCrossEntropyLoss", ins, **kw)
        return loss if reduction != "none" else g.weighted_sum([loss])
    return build


for stag, ss, ign in [("4x5", (4, 5), -100), ("2x5x3", (2, 5, 3), 2)]:
    for red in ("mean", "sum", "none"):
        for ignore in (None, ign):
            for w in (False, True):
                case("sce_%s_%s%s%s" % (stag, red, "_ignore" if ignore is not None else "",
                                        "_weights" if w else ""),
                     sce_case(ss, red, ignore, w))
case("sce_4x5_mean_logprob", sce_case((4, 5), "mean", None, False, log_prob=True))
case("sce_2x5x3_none_ignore_weights_logprob",
     sce_case((2, 5, 3), "none", 2, True, log_prob=True))



# Scaled dot-product attention, as torch.onnx.export writes it (MatMul with
# k^T, a scale, the causal mask as Where(~tril, -inf), Softmax, MatMul):
# tcc-fuse-attention makes it one tcc.attention, whose gradient rule is
# tcc.attention_grad (build_and_compile checks that the fusion happened).
# Shapes cover several key tiles of the CUDA kernels (64 queries, 32 or 64
# keys a tile), head sizes that are not multiples of 16, and Sq != Sk.
def attention_case(b, h, sq, sk, d, dv, causal=False, form="mul", bias=None, order="qkv",
                   dropout=0.0, softcap=0.0):
    """form "mul" / "div": [B, H, S, D] operands, the scores times 1/sqrt(d)
    or divided by sqrt(d), the causal mask as Where(~tril, -inf); "mha":
    nn.MultiheadAttention's [B*H, S, D] operands, q / sqrt(d) before the
    product, the causal mask as an additive -inf constant; "token": [B, S,
    H*D] operands (BERT's projections) reshaped to [B, S, H, D] and
    transposed to heads, the output transposed and reshaped back, the scores
    divided by sqrt(d); "packed": the same, with q, k and v the thirds of one
    [B, S, 3*H*D] parameter (GPT-2's c_attn), split in `order`. bias, added
    after the scale: "padding" (BERT's [B, 1, 1, Sk] mask, 0 or -10000, a fed
    input: no gradient) or "constant" (a [Sq, Sk] position bias). dropout:
    a training-mode Dropout of that ratio on the probabilities (fused into
    the op).

    Forms of other exporters and models: "bloom": [B*H, S, D] operands, the
    scaled scores plus an ALiBi-style [B*H, 1, Sk] input, viewed as [B, H,
    Sq, Sk] for the causal mask (an additive [B, 1, Sq, Sk] constant of
    float32's lowest) and the softmax, the probabilities viewed back;
    "mqa": one key and value head for all query heads (Falcon), the queries
    and the transposed keys each scaled by d^-1/4; "keras": the queries
    scaled before the product, the causal mask as Keras' masked softmax
    (scores * k + (1 - k) * -1e9, constants of [B, H, Sq, Sk]). bias
    "window": a local window (each query sees itself and the 2 keys before
    it) as Where(window, scores, lowest), then the causal mask; "padding
    first": the padding mask added before the scale. softcap: Gemma-2's
    soft cap on the scaled scores, softcap * tanh(s / softcap), before the
    bias and the mask."""
    def heads_of(g, x, s, dh, perm):
        x = g.op("Reshape", [x, g.const(np.array([b, s, h, dh], np.int64))])
        return g.op("Transpose", [x], perm=perm)

    def build(g):
        token = form in ("token", "packed")
        if form == "packed":
            x = g.param((b, sq, 3 * h * d), lo=-1.5, hi=1.5)
            parts = g.op("Split", [x, g.const(np.array([h * d] * 3, np.int64))], n_out=3, axis=2)
            q3, k3, v3 = (parts[order.index(c)] for c in "qkv")
        elif form == "token":
            q3 = g.param((b, sq, h * d), lo=-1.5, hi=1.5)
            k3 = g.param((b, sk, h * d), lo=-1.5, hi=1.5)
            v3 = g.param((b, sk, h * dv))
        else:
            heads = (b * h,) if form in ("mha", "bloom") else (b, h)
            kv_heads = (b, 1) if form == "mqa" else heads
            q = g.param(heads + (sq, d), lo=-1.5, hi=1.5)
            k = g.param(kv_heads + (sk, d), lo=-1.5, hi=1.5)
            v = g.param(kv_heads + (sk, dv))
        root_d = g.const(np.float32(math.sqrt(d)))
        if form == "mha":
            q = g.op("Div", [q, root_d])
        if token:  # k^T straight from [B, S, H, D], as torch exports k.transpose(-2, -1)
            q = heads_of(g, q3, sq, d, [0, 2, 1, 3])
            kt = heads_of(g, k3, sk, d, [0, 2, 3, 1])
            v = heads_of(g, v3, sk, dv, [0, 2, 1, 3])
        else:
            kt = g.op("Transpose", [k], perm=[0, 2, 1] if form in ("mha", "bloom") else [0, 1, 3, 2])
        if form == "mqa":
            quarter = g.const(np.float32(d ** -0.25))
            q, kt = g.op("Mul", [q, quarter]), g.op("Mul", [kt, quarter])
        elif form == "keras":
            q = g.op("Mul", [q, g.const(np.float32(1.0 / math.sqrt(d)))])
        s = g.op("MatMul", [q, kt])
        lowest = np.finfo(np.float32).min
        above = np.triu(np.ones((sq, sk), dtype=np.bool_), k=1)
        if bias == "padding first":
            keep = np.ones((b, 1, 1, sk), dtype=np.float32)
            keep[0, 0, 0, sk // 2:] = 0.0
            s = g.op("Add", [s, g.input((1.0 - keep) * -10000.0)])
        if form == "bloom":
            s = g.op("Mul", [s, g.const(np.float32(1.0 / math.sqrt(d)))])
            slopes = 2.0 ** -np.arange(1, h + 1, dtype=np.float32)
            alibi = np.tile(slopes[:, None, None] * np.arange(sk, dtype=np.float32), (b, 1, 1))
            s = g.op("Add", [s, g.input(alibi.astype(np.float32))])
            s = g.op("Reshape", [s, g.const(np.array([b, h, sq, sk], np.int64))])
            mask = np.tile(np.where(above, lowest, 0.0).astype(np.float32), (b, 1, 1, 1))
            s = g.op("Add", [s, g.const(mask)])
        elif form == "keras":
            k01 = np.tile((~above).astype(np.float32), (b, h, 1, 1))
            s = g.op("Add", [g.op("Mul", [g.const(k01), s]),
                             g.const(((1.0 - k01) * -1e9).astype(np.float32))])
        if bias == "window":
            i, j = np.meshgrid(np.arange(sq), np.arange(sk), indexing="ij")
            window = ((j <= i) & (j > i - 3))[None, None]
            s = g.op("Where", [g.const(window), s, g.const(np.float32(lowest))])
        if form == "mul":
            s = g.op("Mul", [s, g.const(np.float32(1.0 / math.sqrt(d)))])
        elif form in ("div", "token", "packed"):
            s = g.op("Div", [s, root_d])
        if softcap:
            cap = g.const(np.float32(softcap))
            s = g.op("Mul", [g.op("Tanh", [g.op("Div", [s, cap])]), cap])
        if bias == "padding":
            keep = np.ones((b, 1, 1, sk), dtype=np.float32)
            keep[0, 0, 0, 2 * sk // 3:] = 0.0
            keep[-1, 0, 0, 1] = 0.0  # key 0 is always kept: no row is all masked
            s = g.op("Add", [s, g.input((1.0 - keep) * -10000.0)])
        elif bias == "constant":
            s = g.op("Add", [s, g.const(g.rng.normal(size=(sq, sk)).astype(np.float32))])
        if causal:
            above = np.triu(np.ones((sq, sk), dtype=np.bool_), k=1)
            if form == "mha":
                mask = np.where(above[None], -np.inf, 0.0).astype(np.float32)
                s = g.op("Add", [s, g.const(mask)])
            else:
                s = g.op("Where", [g.const(above), g.const(np.float32(-np.inf)), s])
        p = g.op("Softmax", [s], axis=-1)
        if form == "bloom":
            p = g.op("Reshape", [p, g.const(np.array([b * h, sq, sk], np.int64))])
        if dropout:
            p = g.op("Dropout", [p, g.const(np.float32(dropout)), g.const(np.bool_(True))])
        o = g.op("MatMul", [p, v])
        if token:
            o = g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]),
                                 g.const(np.array([b, sq, h * dv], np.int64))])
        return g.weighted_sum([o])
    return build


ATTENTION_CASES = {
    "attention_causal_b2h3_s5_d8": ((2, 3, 5, 5, 8, 8), dict(causal=True)),
    "attention_causal_s70_d24": ((1, 2, 70, 70, 24, 24), dict(causal=True)),
    "attention_s3x7_d5_dv6": ((1, 2, 3, 7, 5, 6), dict(form="div")),
    "attention_s66x40_d16_dv40": ((1, 1, 66, 40, 16, 40), dict()),
    "attention_mha_bh6_s9_d12_additive_mask": ((2, 3, 9, 9, 12, 12), dict(causal=True, form="mha")),
    "attention_padding_mask": ((2, 3, 6, 6, 8, 8), dict(form="div", bias="padding")),
    "attention_padding_mask_causal": ((2, 3, 6, 6, 8, 8), dict(causal=True, form="div", bias="padding")),
    "attention_constant_bias_causal": ((2, 3, 6, 6, 8, 8), dict(causal=True, form="div", bias="constant")),
    "attention_token_major_s3x7_d5_dv6": ((2, 2, 3, 7, 5, 6), dict(form="token")),
    "attention_token_major_padding_causal": ((2, 3, 6, 6, 8, 8), dict(causal=True, form="token", bias="padding")),
    "attention_packed_causal_s70_d24": ((1, 2, 70, 70, 24, 24), dict(causal=True, form="packed")),
    "attention_packed_kvq_padding": ((2, 3, 6, 6, 8, 8), dict(form="packed", order="kvq", bias="padding")),
    "attention_dropout_causal_s70_d24": ((1, 2, 70, 70, 24, 24), dict(causal=True, dropout=0.3)),
    "attention_packed_dropout_padding": ((2, 3, 6, 6, 8, 8),
                                         dict(form="packed", bias="padding", dropout=0.5)),
    "attention_mha_dropout_causal": ((2, 3, 9, 9, 12, 12), dict(causal=True, form="mha", dropout=0.2)),
    "attention_bloom_alibi_views": ((2, 3, 7, 7, 8, 8), dict(form="bloom")),
    "attention_mqa_scaled_keys_causal": ((2, 3, 6, 6, 8, 8), dict(causal=True, form="mqa")),
    "attention_keras_masked_softmax": ((2, 2, 6, 6, 8, 8), dict(form="keras")),
    "attention_local_window_causal": ((2, 3, 9, 9, 8, 8), dict(causal=True, bias="window")),
    "attention_padding_before_scale": ((2, 3, 6, 6, 8, 8), dict(form="div", bias="padding first")),
    # Soft caps small enough that tanh saturates: the slope 1 - tanh^2 is far from 1.
    "attention_softcap_causal_s70_d24": ((1, 2, 70, 70, 24, 24), dict(causal=True, softcap=0.7)),
    "attention_softcap_padding_token": ((2, 3, 6, 6, 8, 8),
                                        dict(form="token", bias="padding", softcap=1.5)),
}
for name, (shape, kw) in ATTENTION_CASES.items():
    case(name, attention_case(*shape, **kw))


# More broadcasting shapes.
case("pow_base_bcast_to_exp", binary("Pow", (3,), (2, 3), kwa={"lo": 0.5, "hi": 2.0},
                                     kwb={"lo": -1.5, "hi": 2.5}))
case("where_bcast_scalar_y", where_case((2, 3), (3,), ()))
case("matmul_bcast_both_batch", matmul_case((2, 1, 3, 4), (1, 3, 4, 2)))
case("gemm_tA1_tB1_cM1", gemm_case(1, 1, (3, 1)))
case("gemm_tA0_tB1_c1", gemm_case(0, 1, (1,)))
case("expand_to_smaller_rank", expand_case((2, 1, 4), [3, 1]))
case("gather_axism1", gather_case((3, 4), [[0, 3], [2, 2]], -1))
case("split_axism1", split_case([2, 1, 1], -1, [0, 1, 2], shape=(2, 4)))


def layernorm_scale_bcast(g):
    # axis 1 of [2,3,4], scale [4] and bias [1,4] broadcast over the normalized [3,4].
    x = g.param((2, 3, 4), lo=-2, hi=2)
    ins = [x, g.param((4,), lo=0.5, hi=1.5), g.param((1, 4))]
    return g.weighted_sum([g.op("LayerNormalization", ins, axis=1, epsilon=1e-5)])


case("layernorm_axis1_scale_bias_bcast", layernorm_scale_bcast)


# Older opsets, where these ops' semantics or signatures differ.
def at_opset(opset, build):
    def wrapped(g):
        g.opset = opset
        return build(g)
    return wrapped


# (Softmax/LogSoftmax below opset 13 are rejected by tcc's importer.)
case("reducesum_opset11_axes_attr", at_opset(11, lambda g: g.weighted_sum(
    [g.op("ReduceSum", [g.param((2, 3, 4))], axes=[0, 2], keepdims=1)])))
case("split_opset11_attr", at_opset(11, lambda g: g.weighted_sum(
    g.op("Split", [g.param((2, 3))], n_out=2, axis=1, split=[1, 2]))))
case("unsqueeze_opset11_attr", at_opset(11, lambda g: g.weighted_sum(
    [g.op("Unsqueeze", [g.param((3, 4))], axes=[0, 2])])))
case("squeeze_opset11_attr", at_opset(11, lambda g: g.weighted_sum(
    [g.op("Squeeze", [g.param((3, 1, 4))], axes=[1])])))
case("sce_opset12_2x5x3_mean_ignore_weights",
     at_opset(12, sce_case((2, 5, 3), "mean", 2, True)))


# ONNX ops the importer writes as several tcc ops (compiler/Import/Composites.h):
# their gradients are their parts', and at the kinks PyTorch's (the values
# here stay away from the kinks, where finite differences say nothing).
def act(op_type, shape=(3, 4), param=None, **attrs):
    def build(g):
        return g.weighted_sum([g.op(op_type, [g.param(shape, **(param or {"away": 0.05, "hi": 2.0}))],
                                    **attrs)])
    return build


def away_from(g, shape, kinks, lo=-2.5, hi=2.5, gap=0.05):
    """A parameter with values in [lo, hi] at least `gap` from each kink."""
    vals = g.rand(shape, lo, hi)
    for k in kinks:
        near = np.abs(vals - k) < gap
        vals = np.where(near, k + np.where(vals >= k, gap, -gap) * 2, vals)
    return g.param_value(np.asarray(vals, np.float32))


case("clip_const_bounds", lambda g: g.weighted_sum([g.op("Clip", [
    away_from(g, (3, 4), [-0.6, 0.7]), g.const(np.float32(-0.6)), g.const(np.float32(0.7))])]))
case("clip_param_bounds", lambda g: g.weighted_sum([g.op("Clip", [
    away_from(g, (3, 4), [-0.5, 0.5]), g.param_value(np.float32(-0.5)),
    g.param_value(np.float32(0.5))])]))
case("clip_max_only", lambda g: g.weighted_sum([g.op("Clip", [
    away_from(g, (3, 4), [0.4]), "", g.const(np.float32(0.4))])]))
case("leakyrelu_alpha0.1", act("LeakyRelu", alpha=0.1))
case("prelu_slope_per_channel", lambda g: g.weighted_sum([g.op("PRelu", [
    g.param((2, 3, 4, 5), away=0.05, hi=2.0), g.param((3, 1, 1), lo=0.1, hi=0.5)])]))
case("thresholdedrelu_alpha0.3", lambda g: g.weighted_sum([g.op(
    "ThresholdedRelu", [away_from(g, (3, 4), [0.3])], alpha=0.3)]))
case("elu_alpha0.7", act("Elu", alpha=0.7))
case("selu", act("Selu"))
case("celu_alpha1.5", act("Celu", alpha=1.5))
case("hardsigmoid", lambda g: g.weighted_sum([g.op(
    "HardSigmoid", [away_from(g, (3, 4), [-4.0 / 3, 2.0], -3.0, 3.0)], alpha=0.3, beta=0.4)]))
case("hardswish", at_opset(14, lambda g: g.weighted_sum([g.op(
    "HardSwish", [away_from(g, (3, 4), [-3.0, 3.0], -4.0, 4.0)])])))
case("softsign", act("Softsign"))
case("softplus", act("Softplus", param={"lo": -25.0, "hi": 25.0}))
case("globalaveragepool", lambda g: g.weighted_sum([g.op(
    "GlobalAveragePool", [g.param((2, 3, 4, 5))])]))
case("reducesumsquare_axes1", lambda g: g.weighted_sum([g.op(
    "ReduceSumSquare", [g.param((2, 3, 4))], axes=[1], keepdims=0)]))
case("reducel1_axes0_2", lambda g: g.weighted_sum([g.op(
    "ReduceL1", [g.param((2, 3, 4), away=0.05)], axes=[0, 2], keepdims=1)]))
# (Opset 18's axes input is the node tests' (onnx-node-tests-opset18): this
# check runs under Debian's onnx 1.12, whose checker stops at opset 17.)
case("reducel2_axesm1", lambda g: g.weighted_sum([g.op(
    "ReduceL2", [g.param((2, 3, 4), away=0.1)], axes=[-1], keepdims=0)]))
case("cumsum_axis1", lambda g: g.weighted_sum([g.op(
    "CumSum", [g.param((2, 5, 3)), g.const(np.int64(1))])]))
case("cumsum_axism1_exclusive_reverse", lambda g: g.weighted_sum([g.op(
    "CumSum", [g.param((3, 4)), g.const(np.int32(-1))], exclusive=1, reverse=1)]))
case("gathernd_k2_negative", lambda g: g.weighted_sum([g.op("GatherND", [
    g.param((3, 4, 5)), g.const(np.array([[[0, 1], [2, -1]], [[-3, 0], [1, 1]]], np.int64))])]))
case("scatternd_rows", lambda g: g.weighted_sum([g.op("ScatterND", [
    g.param((4, 3)), g.const(np.array([[1], [3]], np.int64)), g.param((2, 3))])]))
case("scatterelements_axis1", lambda g: g.weighted_sum([g.op("ScatterElements", [
    g.param((3, 4)), g.const(np.array([[0, 3], [1, -1], [2, 0]], np.int64)), g.param((3, 2))], axis=1)]))
case("reducemax_axis1", lambda g: g.weighted_sum([g.op(
    "ReduceMax", [g.param((2, 5, 3))], axes=[1], keepdims=0)]))
case("reducemin_all_keepdims", lambda g: g.weighted_sum([g.op(
    "ReduceMin", [g.param((3, 4))], keepdims=1)]))
case("reduceprod_axis1", lambda g: g.weighted_sum([g.op(
    "ReduceProd", [g.param((2, 5, 3), away=0.5, hi=1.5)], axes=[1], keepdims=0)]))
case("reducelogsumexp_axes0_2", lambda g: g.weighted_sum([g.op(
    "ReduceLogSumExp", [g.param((3, 2, 5), lo=-3.0, hi=3.0)], axes=[0, 2], keepdims=0)]))
def einsum_case(equation, *shapes):
    def build(g):
        out = g.op("Einsum", [g.param(sh) for sh in shapes], equation=equation)
        shape = np.einsum(equation, *[np.zeros(sh) for sh in shapes]).shape
        return g.weighted_sum([out], shapes={out: (TensorProto.FLOAT, shape)})
    return build


case("einsum_attention_scores", einsum_case("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)))
case("einsum_three_operands", einsum_case("ij,jk,kl->li", (3, 4), (4, 5), (5, 2)))
case("einsum_ellipsis_implicit", einsum_case("...j,jk", (2, 3, 4), (4, 5)))
case("einsum_one_operand_sum", einsum_case("abc->ca", (2, 3, 4)))
case("tile_2x3", lambda g: g.weighted_sum([g.op(
    "Tile", [g.param((2, 3)), g.const(np.array([2, 3], np.int64))])]))


def conv_case(x, w, bias=True, **attrs):
    """Conv of parameters x and w (and a bias); its output shape by ONNX's
    formula, given so that the case does not depend on the installed onnx's
    shape inference."""
    def build(g):
        ins = [g.param(x), g.param(w)] + ([g.param((w[0],))] if bias else [])
        out = g.op("Conv", ins, **attrs)
        k = len(x) - 2
        strides = attrs.get("strides", [1] * k)
        dil = attrs.get("dilations", [1] * k)
        pads = attrs.get("pads", [0] * (2 * k))
        shape = [x[0], w[0]]
        for d in range(k):
            span = (w[2 + d] - 1) * dil[d] + 1
            if attrs.get("auto_pad", "NOTSET").startswith("SAME"):
                shape.append(-(-x[2 + d] // strides[d]))
            else:
                shape.append((x[2 + d] + pads[d] + pads[k + d] - span) // strides[d] + 1)
        return g.weighted_sum([out], shapes={out: (TensorProto.FLOAT, tuple(shape))})
    return build


case("conv2d_pads_strides_bias", conv_case((2, 3, 7, 6), (4, 3, 3, 2), pads=[1, 0, 2, 1],
                                           strides=[2, 1]))
case("conv1d_groups_dilation", conv_case((2, 4, 9), (6, 2, 3), group=2, dilations=[2],
                                         pads=[1, 1]))
case("conv2d_patch_embedding", conv_case((1, 3, 8, 8), (5, 3, 4, 4), strides=[4, 4]))
case("conv2d_same_upper_stride2", conv_case((1, 2, 5, 5), (3, 2, 3, 3), bias=False,
                                            auto_pad="SAME_UPPER", strides=[2, 2]))
case("conv1d_depthwise_same_lower", conv_case((1, 3, 6), (3, 1, 4), group=3,
                                              auto_pad="SAME_LOWER"))
case("convtranspose2d_strides_pads_bias", lambda g: g.weighted_sum([g.op("ConvTranspose", [
    g.param((2, 4, 3, 3)), g.param((4, 3, 3, 2)), g.param((3,))], strides=[2, 1],
    pads=[1, 0, 0, 1], output_padding=[1, 0])], shapes=None))
case("convtranspose1d_groups_dilation", lambda g: g.weighted_sum([g.op("ConvTranspose", [
    g.param((1, 4, 5)), g.param((4, 1, 3))], group=2, dilations=[2], strides=[2])]))
case("instancenorm_2d", lambda g: g.weighted_sum([g.op("InstanceNormalization", [
    g.param((2, 3, 4, 5)), g.param((3,)), g.param((3,))], epsilon=1e-3)]))


def topk_case(shape, k, **attrs):
    """TopK's values (its indices carry no gradient)."""
    def build(g):
        values, _ = g.op("TopK", [g.param(shape), g.const(np.array([k], np.int64))], n_out=2,
                         **attrs)
        return g.weighted_sum([values])
    return build


case("topk_largest_axis1", topk_case((2, 7, 3), 3, axis=1))
case("topk_smallest_last", topk_case((3, 5), 2, largest=0))
case("maxpool_2d_pads_strides", lambda g: g.weighted_sum([g.op("MaxPool", [g.param((2, 3, 6, 5))],
                                                                kernel_shape=[3, 2], strides=[2, 2],
                                                                pads=[1, 0, 1, 1])]))
case("maxpool_1d_ceil_dilated", lambda g: g.weighted_sum([g.op("MaxPool", [g.param((2, 2, 9))],
                                                                kernel_shape=[2], strides=[2],
                                                                dilations=[2], ceil_mode=1)]))
case("averagepool_2d_pads", lambda g: g.weighted_sum([g.op("AveragePool", [g.param((1, 2, 5, 5))],
                                                            kernel_shape=[3, 3], strides=[2, 2],
                                                            pads=[1, 1, 1, 1])]))
case("averagepool_2d_ceil_count_pad", lambda g: g.weighted_sum([g.op(
    "AveragePool", [g.param((1, 2, 6, 5))], kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 0, 1],
    ceil_mode=1, count_include_pad=1)]))
case("globalmaxpool_2d", lambda g: g.weighted_sum([g.op("GlobalMaxPool", [g.param((2, 3, 4, 5))])]))


def batchnorm_case(training):
    def build(g):
        g.opset = 15  # training_mode
        ins = [g.param((4, 3, 5)), g.param((3,)), g.param((3,)), g.param((3,)),
               g.param((3,), lo=0.5, hi=1.5)]
        # In training mode the running mean and variance too (ONNX's
        # shape inference wants all three outputs named there).
        outs = g.op("BatchNormalization", ins, n_out=3 if training else 1,
                    training_mode=int(training), epsilon=1e-3, momentum=0.8)
        return g.weighted_sum(outs if training else [outs])
    return build


case("batchnorm_training", batchnorm_case(True))
case("batchnorm_inference", batchnorm_case(False))

case("mod_fmod_floats", lambda g: g.weighted_sum([g.op("Mod", [
    g.param((3, 4), lo=-5.0, hi=5.0), g.param((3, 4), away=0.5, hi=2.0)], fmod=1)]))
# x * floor(x) and the like: the rounding itself has gradient 0, so each
# product's gradient is the rounded value (a leaked gradient would add x).
case("rounding_times_x", lambda g: (lambda x: g.weighted_sum([
    g.op("Mul", [x, g.op(op, [x])]) for op in ("Floor", "Ceil", "Round", "Sign")]))(
        g.param((4, 5), lo=-3.0, hi=3.0)))
case("onehot_values", lambda g: (lambda out: g.weighted_sum(
    [out], shapes={out: (TensorProto.FLOAT, (2, 4, 2))}))(g.op("OneHot", [
        g.const(np.array([[1, -1], [0, 3]], np.int64)), g.const(np.array(4, np.int64)),
        g.param((2,))], axis=1)))

# ---------------------------------------------------------------------------
# Runner
# ---------------------------------------------------------------------------

def build_and_compile(name, args):
    work = os.path.join(args.workdir, name)
    os.makedirs(work, exist_ok=True)
    g = G(name)
    model = g.model(CASES[name](g))
    path = os.path.join(work, "model.onnx")
    onnx.save(model, path)
    so = os.path.join(work, "case.so")
    if os.path.exists(so):
        os.remove(so)
    r = subprocess.run([args.tcc, "--target=cpu", "--cpu-precision=f64", "-o", so, path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("tcc failed (%d): %s" % (r.returncode, r.stdout.strip()))
    if name in ATTENTION_CASES:
        r = subprocess.run([args.tcc, "--target=cpu", "--emit=training", "-o", "-", path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.stdout.count("tcc.attention_grad ") != 1:
            raise RuntimeError("the attention was not fused into tcc.attention")
        # The layout tcc-fuse-attention chose: token-major for [B, S, H*D]
        # operands, packed for the thirds of one, head-major otherwise.
        if ("dropout = " in r.stdout) != bool(ATTENTION_CASES[name][1].get("dropout")):
            raise RuntimeError("the dropout was %sfused into tcc.attention"
                               % ("not " if "dropout = " not in r.stdout else ""))
        form = ATTENTION_CASES[name][1].get("form", "mul")
        want = {"token": ["heads = "], "packed": ["heads = ", "columns = "]}.get(form, [])
        for attr in ("heads = ", "columns = "):
            if (attr in r.stdout) != (attr in want):
                raise RuntimeError("tcc.attention %s `%s` for the %s form" % (
                    "lacks" if attr in want else "has", attr.strip(" ="), form))
        # The same graph unfused (matmul, softmax, matmul): check() holds the
        # fused step's loss and gradients to it.
        r = subprocess.run([args.tcc, "--target=cpu", "--cpu-precision=f64", "--no-attention-fusion",
                            "-o", os.path.join(work, "unfused.so"), path],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise RuntimeError("tcc --no-attention-fusion failed (%d): %s" % (r.returncode, r.stdout))
    return g, model, so


def unfused_differences(so, feeds, loss, analytic):
    """An attention case's fused step against the unfused one (the model's
    own ops): the relative difference of the losses, and the largest of the
    gradients' relative to each one's largest."""
    step = Step(so)
    step.init()
    for k, v in feeds.items():
        step.set_input(k, v)
    if any(d.name == "rng/dropout" for d in step.info.state):
        step.state("rng/dropout")[1] = 0
    step.micro_step(1.0)
    worst = 0.0
    for i, d in enumerate(step.info.params):
        want = step.grad(i).astype(np.float64)
        worst = max(worst, float(np.max(np.abs(analytic[d.name] - want))) /
                    max(float(np.max(np.abs(want))), 1e-30))
    return abs(loss - step.loss()) / max(abs(step.loss()), 1e-30), worst


def build_cuda(work, model_path):
    """The emulated CUDA step of the model at `model_path`, in `work`."""
    cuda = os.path.join(work, "case-cuda.so")
    r = subprocess.run([ARGS.tcc, "--target=cuda", "--cuda-emulation", "-o", cuda, model_path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("tcc --target=cuda failed (%d): %s" % (r.returncode, r.stdout.strip()))
    return cuda


ARGS = None


def merged_model(names, models):
    """The cases' graphs side by side, names prefixed "c<k>." (onnx.compose),
    their losses summed into the one output."""
    nodes, inits, inputs, losses, params = [], [], [], [], []
    for k, (name, m) in enumerate(zip(names, models)):
        pm = onnx.compose.add_prefix(m, "c%d." % k)
        nodes += pm.graph.node
        inits += pm.graph.initializer
        inputs += pm.graph.input
        losses.append(pm.graph.output[0].name)
        params += ["c%d.%s" % (k, p) for p in
                   next(e.value for e in m.metadata_props if e.key == "tcc.trainable").split(",") if p]
    elem = models[0].graph.output[0].type.tensor_type.elem_type
    total = losses[0]
    for k, l in enumerate(losses[1:]):
        nodes.append(helper.make_node("Add", [total, l], ["batch_loss_%d" % k], name="batch_loss_%d" % k))
        total = "batch_loss_%d" % k
    nodes.append(helper.make_node("Identity", [total], ["loss"], name="batch_loss"))
    g = helper.make_graph(nodes, "batch", inputs, [helper.make_tensor_value_info("loss", elem, [])], inits)
    m = helper.make_model(g, opset_imports=list(models[0].opset_import), producer_name="check_gradient_rules")
    entry = m.metadata_props.add()
    entry.key, entry.value = "tcc.trainable", ",".join(params)
    return m


def run_cuda(work, so, feeds):
    """tcc-run --grads-only on `so` with `feeds`; returns the dump folder."""
    feed, out = os.path.join(work, "feed"), os.path.join(work, "cuda-out")
    for d in (feed, out):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(feed)
    for k, v in feeds.items():
        v = np.asarray(v)
        np.save(os.path.join(feed, k.replace("/", "_") + ".npy"),
                v.astype(np.float32) if v.dtype.kind == "f" else v)
    r = subprocess.run([ARGS.tcc_run, so, "--feed", feed, "--grads-only", "--dump", out],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError("tcc-run on the CUDA step failed (%d): %s"
                           % (r.returncode, r.stdout.strip()[-600:]))
    return out


def check_cuda(name, g, analytic, args):
    """The emulated CUDA step of the case alone, its gradients against the
    analytic float64 ones: returns (worst relative error, its parameter)."""
    work = os.path.join(args.workdir, name)
    so = build_cuda(work, os.path.join(work, "model.onnx"))
    return cuda_errors(run_cuda(work, so, g.feeds), analytic, "")


def cuda_batch(batch, cases, args):
    """The cases of `batch` in one CUDA step: {name: (worst, where)} for the
    cases it checked, {} when the batch failed as a whole."""
    work = os.path.join(args.workdir, "cuda-batch-" + batch[0])
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "model.onnx")
    onnx.save(merged_model(batch, [cases[n][1] for n in batch]), path)
    feeds = {}
    for k, n in enumerate(batch):
        feeds.update({"c%d.%s" % (k, f): v for f, v in cases[n][0].feeds.items()})
    try:
        out = run_cuda(work, build_cuda(work, path), feeds)
    except RuntimeError:
        return {}
    return {n: cuda_errors(out, cases[n][2], "c%d." % k) for k, n in enumerate(batch)}


def batches(names, cases):
    """Groups of up to CUDA_BATCH cases that can share a step."""
    groups = {}
    for n in names:
        m = cases[n][1]
        if any(node.op_type == "Dropout" for node in m.graph.node):
            groups[("alone", n)] = [n]
            continue
        key = (m.opset_import[0].version, m.graph.output[0].type.tensor_type.elem_type)
        groups.setdefault(key, []).append(n)
    out = []
    for group in groups.values():
        out += [group[i:i + CUDA_BATCH] for i in range(0, len(group), CUDA_BATCH)]
    return out


def cuda_errors(out, analytic, prefix):
    """The dumped CUDA gradients in `out` (of parameters `prefix`+name)
    against `analytic`: (worst relative error, its parameter)."""
    worst, where = 0.0, ""
    for pname, a in analytic.items():
        path = os.path.join(out, "grads", (prefix + pname).replace("/", "_") + ".npy")
        if not os.path.isfile(path):
            raise RuntimeError("the CUDA step dumped no gradient for %s" % pname)
        got = np.load(path).astype(np.float64)
        if got.shape != a.shape:
            raise RuntimeError("CUDA gradient of %s has shape %s, expected %s"
                               % (pname, got.shape, a.shape))
        scale = max(float(np.max(np.abs(a), initial=0.0)), 1e-30)
        rel = float(np.max(np.abs(got - a), initial=0.0)) / scale
        if math.isnan(rel):
            return rel, pname
        if rel > worst:
            worst, where = rel, pname
    return worst, where


def check(name, g, model, so):
    step = Step(so)
    info = step.info
    if not info.has_backward:
        raise RuntimeError("step has no backward pass")
    step.init()
    for k, v in g.feeds.items():
        step.set_input(k, v)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    params = [d for d in info.params]
    expected = sorted(n for n, a in inits.items() if a.dtype.kind == "f")
    if sorted(d.name for d in params) != expected:
        raise RuntimeError("params %s, expected %s" % ([d.name for d in params], expected))
    for d in params:
        if not np.allclose(step.param(d.name), inits[d.name]):
            raise RuntimeError("param %s: initial value differs from the initializer" % d.name)

    # Dropout: every micro-step draws new masks; rewound to micro-step 0's
    # before each one, the loss is one function of the parameters.
    rng_state = step.state("rng/dropout") if any(
        d.name == "rng/dropout" for d in info.state) else None

    def micro_step():
        if rng_state is not None:
            rng_state[1] = 0
        step.micro_step(1.0)

    micro_step()
    loss0 = step.loss()
    analytic = {}
    for i, d in enumerate(params):
        gv = step.grad(i)
        if gv is None:
            raise RuntimeError("param %s has no gradient accumulator" % d.name)
        analytic[d.name] = gv.astype(np.float64).copy()

    rng = np.random.default_rng(zlib.crc32(("fd" + name).encode()))
    rows = []  # (param, index, analytic, fd)
    for d in params:
        p = step.param(d.name)
        flat = p.reshape(-1)
        n = flat.size
        idxs = np.arange(n) if n <= MAX_ELEMS else np.sort(rng.choice(n, MAX_ELEMS, replace=False))
        an = analytic[d.name].reshape(-1)
        for i in idxs:
            orig = flat[i]
            flat[i] = orig + H
            micro_step()
            lp = step.loss()
            flat[i] = orig - H
            micro_step()
            lm = step.loss()
            flat[i] = orig
            rows.append((d.name, np.unravel_index(i, p.shape), float(an[i]),
                         (lp - lm) / (2 * H)))
    micro_step()
    if step.loss() != loss0:
        raise RuntimeError("loss not reproducible: %r vs %r" % (step.loss(), loss0))
    unfused = os.path.join(os.path.dirname(so), "unfused.so")
    if name in ATTENTION_CASES:
        loss_rel, grad_rel = unfused_differences(unfused, g.feeds, loss0, analytic)
        # With dropout the unfused graph scales the kept probabilities by
        # 1/(1 - p) as a float32 constant, the op by the exact value.
        bound = 1e-7 if ATTENTION_CASES[name][1].get("dropout") else 1e-9
        if loss_rel > bound or grad_rel > bound:
            raise RuntimeError("the fused attention differs from the unfused step: loss %.1e, "
                               "gradients %.1e" % (loss_rel, grad_rel))
    return loss0, rows, analytic


def summarize(rows):
    an = np.array([r[2] for r in rows])
    fd = np.array([r[3] for r in rows])
    err = np.abs(an - fd)
    bad = err > ATOL + RTOL * np.abs(fd)
    big = np.abs(fd) >= REL_FLOOR
    max_rel = float(np.max(err[big] / np.abs(fd[big]), initial=0.0))
    return err, bad, float(np.max(err, initial=0.0)), max_rel


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tcc", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("-k", dest="pattern", default=None, help="run the cases whose name matches REGEX")
    p.add_argument("-j", dest="jobs", type=int, default=os.cpu_count() or 1,
                   help="parallel compiles")
    p.add_argument("-v", dest="verbose", action="store_true", help="print every failing element")
    p.add_argument("--cuda-emulation", action="store_true",
                   help="also compare the emulated fp16 CUDA step's gradients (needs --tcc-run)")
    p.add_argument("--tcc-run", dest="tcc_run", help="tcc-run, for --cuda-emulation")
    p.add_argument("--part", default=None, metavar="K/N",
                   help="run every N-th case from the K-th (0-based) of those selected")
    p.add_argument("--cuda-part", default=None, metavar="K/N",
                   help="with --cuda-emulation, check the CUDA step of every N-th case from "
                        "the K-th (0-based) of those run only; the float64 CPU check covers "
                        "every case run")
    args = p.parse_args()
    args.tcc = os.path.abspath(args.tcc)
    if args.cuda_emulation and not args.tcc_run:
        p.error("--cuda-emulation needs --tcc-run")
    cuda_k, cuda_n = 0, 1
    if args.cuda_part:
        m = re.fullmatch(r"(\d+)/(\d+)", args.cuda_part)
        if not args.cuda_emulation or not m or not 0 <= int(m.group(1)) < int(m.group(2)):
            p.error("--cuda-part wants K/N with 0 <= K < N, and --cuda-emulation")
        cuda_k, cuda_n = int(m.group(1)), int(m.group(2))
    names = [n for n in CASES if args.pattern is None or re.search(args.pattern, n)]
    if args.part:
        m = re.fullmatch(r"(\d+)/(\d+)", args.part)
        if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
            p.error("--part wants K/N with 0 <= K < N")
        names = names[int(m.group(1))::int(m.group(2))]
    if not names:
        print("no case matches %r" % args.pattern)
        return 1
    os.makedirs(args.workdir, exist_ok=True)

    global ARGS
    ARGS = args
    passed = failed = 0
    # The CPU checks first (each case's analytic gradients), then the CUDA
    # steps in batches; a case its batch did not clear is checked alone.
    results = {}  # name -> (g, model, rows, analytic) or an exception
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {n: pool.submit(build_and_compile, n, args) for n in names}
        for name in names:
            try:
                g, model, so = futures[name].result()
                _, rows, analytic = check(name, g, model, so)
                results[name] = (g, model, rows, analytic)
            except Exception as e:  # a failed build, compile or run is a failure
                results[name] = e
        cuda_results = {}
        if args.cuda_emulation:
            cases = {n: (r[0], r[1], r[3]) for n, r in results.items() if not isinstance(r, Exception)}
            pending = [n for i, n in enumerate(names) if n in cases and i % cuda_n == cuda_k]
            groups = batches(pending, cases)
            for found in pool.map(lambda b: cuda_batch(b, cases, args), [b for b in groups if len(b) > 1]):
                cuda_results.update({n: v for n, v in found.items() if v[0] <= CUDA_BOUND})
            alone = [n for n in pending if n not in cuda_results]

            def single(n):
                try:
                    return check_cuda(n, cases[n][0], cases[n][2], args)
                except Exception as e:
                    return e
            for n, v in zip(alone, pool.map(single, alone)):
                cuda_results[n] = v
            print("CUDA steps: %d cases in %d batched builds, %d alone%s"
                  % (len(pending) - len(alone), sum(1 for b in groups if len(b) > 1), len(alone),
                     "" if cuda_n == 1 else " (part %d of %d: every %d-th case; '-': not in it)"
                     % (cuda_k, cuda_n, cuda_n)))
    print("%-42s %6s %12s %12s  %s" % ("case", "elems", "max abs err", "max rel err",
                                         "cuda rel  result" if args.cuda_emulation else "result"))
    for name in names:
        if True:
            try:
                r = results[name]
                if isinstance(r, Exception):
                    raise r
                g, model, rows, analytic = r
                cuda = cuda_results.get(name) if args.cuda_emulation else None
                if isinstance(cuda, Exception):
                    raise cuda
            except Exception as e:  # a failed build, compile or run is a failure
                msg = str(e) if isinstance(e, RuntimeError) else (
                    traceback.format_exc() if args.verbose else "%s: %s" % (type(e).__name__, e))
                print("%-42s %6s %12s %12s  FAIL  %s" % (name, "-", "-", "-",
                                                         msg.strip().replace("\n", "\n    ")))
                failed += 1
                continue
            err, bad, max_abs, max_rel = summarize(rows)
            cuda_ok = cuda is None or cuda[0] <= CUDA_BOUND
            ok = not bad.any() and cuda_ok
            print("%-42s %6d %12.3e %12.3e  %s%s" % (
                name, len(rows), max_abs, max_rel,
                "%8.2e  " % cuda[0] if cuda is not None else
                ("%8s  " % "-" if args.cuda_emulation else ""), "PASS" if ok else "FAIL"))
            if not cuda_ok:
                print("    CUDA gradient of %s: max |cuda - analytic| is %.3g of its largest "
                      "(bound %g)" % (cuda[1], cuda[0], CUDA_BOUND))
            if ok:
                passed += 1
                continue
            failed += 1
            order = np.argsort(-err)
            shown = [i for i in order if bad[i]]
            for i in shown if args.verbose else shown[:4]:
                pn, idx, a, f = rows[i]
                print("    %s%s: analytic %.10g  fd %.10g  (diff %.3e)"
                      % (pn, list(map(int, idx)), a, f, a - f))
            if not args.verbose and len(shown) > 4:
                print("    ... %d more elements out of tolerance" % (len(shown) - 4))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

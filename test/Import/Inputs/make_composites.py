"""Writes one small ONNX model per op that the importer writes as several tcc
ops (compiler/Import/Composites.h), and the malformed ones it must refuse.

Usage: /usr/bin/python3 make_composites.py OUTDIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(name, nodes, inputs, out_shape, outdir, opset=17, inits=(), out_type=TensorProto.FLOAT):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", out_type, out_shape)],
                              list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="make_composites.py")
    m.ir_version = 8
    onnx.save(m, os.path.join(outdir, name + ".onnx"))


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name + "_const",
                            value=numpy_helper.from_array(np.asarray(array), name))


def unary(outdir, op, shape=(2, 3), opset=17, out_shape=None, **attrs):
    model(op.lower(), [helper.make_node(op, ["x"], ["y"], name="n", **attrs)], [f32("x", shape)],
          out_shape or shape, outdir, opset)


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    unary(outdir, "LeakyRelu", alpha=0.2)
    unary(outdir, "ThresholdedRelu", alpha=0.5)
    unary(outdir, "Elu")
    unary(outdir, "Selu")
    unary(outdir, "Celu", alpha=2.0)
    unary(outdir, "HardSigmoid")
    unary(outdir, "HardSwish", opset=14)
    unary(outdir, "Softsign")
    unary(outdir, "GlobalAveragePool", shape=(2, 3, 4, 5), out_shape=(2, 3, 1, 1))
    unary(outdir, "ReduceSumSquare", shape=(2, 3, 4), out_shape=(2, 4), axes=[1], keepdims=0)
    unary(outdir, "ReduceL1", shape=(2, 3, 4), out_shape=(1, 1, 1))
    model("reducel2_opset18", [const("axes", np.array([-1], np.int64)),
                               helper.make_node("ReduceL2", ["x", "axes"], ["y"], name="n", keepdims=0)],
          [f32("x", (2, 3, 4))], (2, 3), outdir, opset=18)
    model("clip", [const("lo", np.float32(-1)), const("hi", np.float32(2)),
                   helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="n")],
          [f32("x", (2, 3))], (2, 3), outdir)
    model("clip_max_only", [const("hi", np.float32(2)),
                            helper.make_node("Clip", ["x", "", "hi"], ["y"], name="n")],
          [f32("x", (2, 3))], (2, 3), outdir, opset=13)
    model("clip_opset6", [helper.make_node("Clip", ["x"], ["y"], name="n", min=-1.0)],
          [f32("x", (2, 3))], (2, 3), outdir, opset=6)
    model("prelu", [helper.make_node("PRelu", ["x", "slope"], ["y"], name="n")],
          [f32("x", (2, 3, 4, 5))], (2, 3, 4, 5), outdir,
          inits=[numpy_helper.from_array(np.full((3, 1, 1), 0.25, np.float32), "slope")])
    model("tile", [const("reps", np.array([2, 3], np.int64)),
                   helper.make_node("Tile", ["x", "reps"], ["y"], name="n")],
          [f32("x", (2, 3))], (4, 9), outdir)

    model("cumsum", [const("axis", np.int64(1)),
                     helper.make_node("CumSum", ["ids", "axis"], ["y"], name="n", exclusive=1)],
          [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])], (2, 3), outdir,
          out_type=TensorProto.INT64)
    model("bad_cumsum_axis_input", [helper.make_node("CumSum", ["x", "axis"], ["y"], name="n")],
          [f32("x", (2, 3)), helper.make_tensor_value_info("axis", TensorProto.INT64, [])], (2, 3),
          outdir)

    model("gathernd", [helper.make_node("GatherND", ["x", "idx"], ["y"], name="n")],
          [f32("x", (3, 4, 5)), helper.make_tensor_value_info("idx", TensorProto.INT64, [6, 2])],
          (6, 5), outdir)
    model("scatternd", [const("idx", np.array([[0], [2]], np.int64)),
                        helper.make_node("ScatterND", ["x", "idx", "upd"], ["y"], name="n")],
          [f32("x", (3, 4)), f32("upd", (2, 4))], (3, 4), outdir)
    model("bad_scatternd_indices_input", [helper.make_node("ScatterND", ["x", "idx", "upd"], ["y"], name="n")],
          [f32("x", (3, 4)), helper.make_tensor_value_info("idx", TensorProto.INT64, [2, 1]),
           f32("upd", (2, 4))], (3, 4), outdir)
    model("bad_scatternd_add", [const("idx", np.array([[0], [2]], np.int64)),
                                helper.make_node("ScatterND", ["x", "idx", "upd"], ["y"], name="n",
                                                 reduction="add")],
          [f32("x", (3, 4)), f32("upd", (2, 4))], (3, 4), outdir, opset=18)
    model("bad_gathernd_batch_dims", [helper.make_node("GatherND", ["x", "idx"], ["y"], name="n",
                                                       batch_dims=1)],
          [f32("x", (3, 4, 5)), helper.make_tensor_value_info("idx", TensorProto.INT64, [3, 1])],
          (3, 5), outdir)

    model("scatterelements", [const("idx", np.array([[1], [0]], np.int64)),
                              helper.make_node("ScatterElements", ["x", "idx", "upd"], ["y"], name="n",
                                               axis=1)],
          [f32("x", (2, 3)), f32("upd", (2, 1))], (2, 3), outdir)

    unary(outdir, "ReduceMax", shape=(2, 5), out_shape=(2,), axes=[1], keepdims=0)

    model("einsum", [helper.make_node("Einsum", ["q", "k"], ["y"], name="n", equation="bhqd,bhkd->bhqk")],
          [f32("q", (2, 3, 4, 5)), f32("k", (2, 3, 6, 5))], (2, 3, 4, 6), outdir)
    model("bad_einsum_diagonal", [helper.make_node("Einsum", ["x"], ["y"], name="n", equation="ii->i")],
          [f32("x", (3, 3))], (3,), outdir)

    # Refused, each with one diagnostic naming the node.
    model("bad_tile_repeats_input", [helper.make_node("Tile", ["x", "reps"], ["y"], name="n")],
          [f32("x", (2, 3)), helper.make_tensor_value_info("reps", TensorProto.INT64, [2])], (4, 9),
          outdir)
    model("bad_tile_repeats_zero", [const("reps", np.array([0, 3], np.int64)),
                                    helper.make_node("Tile", ["x", "reps"], ["y"], name="n")],
          [f32("x", (2, 3))], (0, 9), outdir)
    model("bad_clip_vector_bound", [const("lo", np.array([0, 1], np.float32)),
                                    helper.make_node("Clip", ["x", "lo"], ["y"], name="n")],
          [f32("x", (2, 2))], (2, 2), outdir)
    model("bad_clip_attr_opset13", [helper.make_node("Clip", ["x"], ["y"], name="n", min=0.0)],
          [f32("x", (2, 3))], (2, 3), outdir, opset=13)
    model("bad_prelu_slope", [helper.make_node("PRelu", ["x", "slope"], ["y"], name="n")],
          [f32("x", (2, 3))], (2, 3), outdir,
          inits=[numpy_helper.from_array(np.ones((4, 2, 3), np.float32), "slope")])
    model("bad_elu_int", [helper.make_node("Elu", ["x"], ["y"], name="n")],
          [helper.make_tensor_value_info("x", TensorProto.INT64, [2])], (2,), outdir,
          out_type=TensorProto.INT64)
    model("bad_gap_rank2", [helper.make_node("GlobalAveragePool", ["x"], ["y"], name="n")],
          [f32("x", (2, 3))], (2, 3), outdir)
    w = lambda shape: numpy_helper.from_array(np.ones(shape, np.float32), "w")  # noqa: E731
    model("conv_pad_groups", [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="n", group=2,
                                               pads=[1, 0, 1, 0], strides=[1, 2])],
          [f32("x", (1, 4, 3, 4))], (1, 6, 5, 2), outdir,
          inits=[w((6, 2, 1, 2)), numpy_helper.from_array(np.zeros(6, np.float32), "b")])
    model("bad_conv_group", [helper.make_node("Conv", ["x", "w"], ["y"], name="n", group=3)],
          [f32("x", (1, 4, 5))], (1, 6, 3), outdir, inits=[w((6, 2, 3))])
    model("bad_conv_kernel", [helper.make_node("Conv", ["x", "w"], ["y"], name="n")],
          [f32("x", (1, 2, 2))], (1, 3, 1), outdir, inits=[w((3, 2, 5))])
    model("bad_conv_autopad", [helper.make_node("Conv", ["x", "w"], ["y"], name="n",
                                                auto_pad="SAME")],
          [f32("x", (1, 2, 6))], (1, 3, 6), outdir, inits=[w((3, 2, 3))])
    model("instancenorm", [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="n",
                                            epsilon=1e-3)],
          [f32("x", (2, 3, 4))], (2, 3, 4), outdir,
          inits=[numpy_helper.from_array(np.ones(3, np.float32), "s"),
                 numpy_helper.from_array(np.zeros(3, np.float32), "b")])


if __name__ == "__main__":
    main(sys.argv[1])

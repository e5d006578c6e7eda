"""Writes small ONNX models of the rounding, index and selection ops, the
pooling and the normalizations that the importer writes as several tcc ops
(compiler/Import/Discrete.cpp, Conv.cpp, Norms.cpp), and the malformed ones
it must refuse.

Usage: /usr/bin/python3 make_discrete.py OUTDIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_composites import const, f32  # noqa: E402


def model(name, nodes, inputs, outputs, outdir, opset=17, inits=()):
    """`outputs`: (name, elem type, shape) each."""
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                              list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="make_discrete.py")
    m.ir_version = 8
    onnx.save(m, os.path.join(outdir, name + ".onnx"))


F, I64 = TensorProto.FLOAT, TensorProto.INT64


def main(outdir):
    node = helper.make_node
    model("topk", [const("k", np.array([2], np.int64)),
                   node("TopK", ["x", "k"], ["v", "i"], name="n", axis=1)],
          [f32("x", (2, 5))], [("v", F, (2, 2)), ("i", I64, (2, 2))], outdir)
    model("bad_topk_k", [const("k", np.array([6], np.int64)),
                         node("TopK", ["x", "k"], ["v", "i"], name="n")],
          [f32("x", (2, 5))], [("v", F, (2, 6)), ("i", I64, (2, 6))], outdir)
    model("floor", [node("Floor", ["x"], ["y"], name="n")], [f32("x", (3,))], [("y", F, (3,))],
          outdir)
    # Mod on constants folds: the shape of a Reshape may be computed with it.
    model("mod_shape", [const("a", np.array([7, -8], np.int64)), const("b", np.array([4, 3], np.int64)),
                        node("Mod", ["a", "b"], ["s"], name="mod"),
                        node("Reshape", ["x", "s"], ["y"], name="reshape")],
          [f32("x", (3, 1))], [("y", F, (3, 1))], outdir)
    model("bad_onehot_depth", [const("v", np.array([0.0, 1.0], np.float32)),
                               node("OneHot", ["x", "d", "v"], ["y"], name="n")],
          [helper.make_tensor_value_info("x", I64, (3,)), helper.make_tensor_value_info("d", I64, ())],
          [("y", F, (3, 4))], outdir)
    model("maxpool", [node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[2], pads=[1, 0])],
          [f32("x", (1, 2, 4))], [("y", F, (1, 2, 4))], outdir)
    model("bad_maxpool_indices", [node("MaxPool", ["x"], ["y", "idx"], name="n", kernel_shape=[2])],
          [f32("x", (1, 2, 4))], [("y", F, (1, 2, 3)), ("idx", I64, (1, 2, 3))], outdir)
    model("convtranspose", [node("ConvTranspose", ["x", "w"], ["y"], name="n", strides=[2])],
          [f32("x", (1, 2, 3))], [("y", F, (1, 4, 7))], outdir,
          inits=[numpy_helper.from_array(np.ones((2, 4, 3), np.float32), "w")])
    ones, zeros = (numpy_helper.from_array(np.full(3, v, np.float32), n) for v, n in ((1, "s"), (0, "b")))
    stats = [numpy_helper.from_array(np.zeros(3, np.float32), "running_mean"),
             numpy_helper.from_array(np.ones(3, np.float32), "running_var")]
    model("batchnorm_training", [node("BatchNormalization", ["x", "s", "b", "running_mean",
                                                             "running_var"],
                                      ["y", "new_mean", "new_var"], name="bn", training_mode=1)],
          [f32("x", (4, 3, 2))], [("y", F, (4, 3, 2)), ("new_mean", F, (3,)), ("new_var", F, (3,))],
          outdir, opset=15, inits=[ones, zeros] + stats)
    model("bad_groupnorm_groups", [node("GroupNormalization", ["x", "s", "b"], ["y"], name="n",
                                        num_groups=2)],
          [f32("x", (1, 3, 4))], [("y", F, (1, 3, 4))], outdir, opset=21, inits=[ones, zeros])


if __name__ == "__main__":
    main(sys.argv[1])

"""Writes the models and feeds of check-numerics.test (tcc-run --check-numerics).

Usage: /usr/bin/python3 make_numerics_models.py OUTDIR

- nan.onnx: loss = mean(sqrt(x @ w - 10)); with the feed (x in [0, 1),
  w in [0, 0.1)) every x @ w is below 10, so the forward pass makes a NaN
  in the op that takes the square root (node "root").
- big.onnx: loss = mean((x @ w)^2) / 1e12 with x in [100, 200) and w = 200:
  x @ w is at least 80000, finite in fp32 but past fp16's 65504, so the
  CUDA target (fp16 storage) makes an infinity in the GEMM (node "proj")
  where the CPU target does not.
- ok.onnx: nan.onnx's graph with a shift of -10 (sqrt(x @ w + 10)): finite.
- sqrtw.onnx: loss = mean(x @ sqrt(w)) with w[0, 0] = 0: the loss is finite,
  the gradient 1 / (2 sqrt(w)) infinite at any loss scale, so every step is
  skipped.
Built with onnx.helper, so each file holds exactly the nodes named here.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model_of(nodes, initializers):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], initializers)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                          producer_name="make_numerics_models.py")
    m.ir_version = 8
    return m


def sqrt_model(shift):
    w = numpy_helper.from_array(
        (np.arange(12, dtype=np.float32).reshape(4, 3) / 120), "w")
    c = numpy_helper.from_array(np.array(shift, np.float32), "c")
    return model_of(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj"),
         helper.make_node("Add", ["y", "c"], ["s"], name="shift"),
         helper.make_node("Sqrt", ["s"], ["r"], name="root"),
         helper.make_node("ReduceMean", ["r"], ["loss"], name="mean", keepdims=0)],
        [w, c])


def big_model():
    w = numpy_helper.from_array(np.full((4, 3), 200, np.float32), "w")
    k = numpy_helper.from_array(np.array(1e-12, np.float32), "k")
    return model_of(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj"),
         helper.make_node("Mul", ["y", "y"], ["sq"], name="square"),
         helper.make_node("ReduceMean", ["sq"], ["m"], name="mean", keepdims=0),
         helper.make_node("Mul", ["m", "k"], ["loss"], name="scale")],
        [w, k])


def sqrtw_model():
    w = numpy_helper.from_array(
        (np.arange(12, dtype=np.float32).reshape(4, 3) / 12), "w")
    return model_of(
        [helper.make_node("Sqrt", ["w"], ["r"], name="root"),
         helper.make_node("MatMul", ["x", "r"], ["y"], name="proj"),
         helper.make_node("ReduceMean", ["y"], ["loss"], name="mean", keepdims=0)],
        [w])


def main(outdir):
    os.makedirs(os.path.join(outdir, "feed"), exist_ok=True)
    os.makedirs(os.path.join(outdir, "feed-big"), exist_ok=True)
    onnx.save(sqrt_model(-10.0), os.path.join(outdir, "nan.onnx"))
    onnx.save(sqrt_model(10.0), os.path.join(outdir, "ok.onnx"))
    onnx.save(big_model(), os.path.join(outdir, "big.onnx"))
    onnx.save(sqrtw_model(), os.path.join(outdir, "sqrtw.onnx"))
    np.save(os.path.join(outdir, "feed", "x.npy"),
            (np.arange(8, dtype=np.float32).reshape(2, 4) / 8))
    np.save(os.path.join(outdir, "feed-big", "x.npy"),
            (100 + np.arange(8, dtype=np.float32).reshape(2, 4) * 12))


if __name__ == "__main__":
    main(sys.argv[1])

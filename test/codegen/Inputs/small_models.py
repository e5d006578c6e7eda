"""Writes small training models for the CUDA codegen tests:
  linear_mean.onnx: loss = mean(x W)            (a GEMM read only by the loss's mean)
  mse.onnx:         loss = mean((x W - t)^2)    (squared errors read only by it)
  bias_tanh.onnx:   loss = mean(tanh(x + b) W)  (a bias broadcast along the rows
                                                 of an elementwise kernel, no GEMM
                                                 epilogue: cuda-vector-loads.test)
  dropout.onnx:     loss = mean(dropout_0.25(x W))  (training-mode dropout:
                                                 dropout-step.test)
Usage: /usr/bin/python3 small_models.py OUTDIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
w = numpy_helper.from_array(np.linspace(-1, 1, 32).reshape(4, 8).astype(np.float32), "w")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
x16 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])
t = helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 8])
loss = helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])


def save(name, nodes, inputs, inits=(w,)):
    g = helper.make_graph(nodes, name, inputs, [loss], list(inits))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(out, name + ".onnx"))


save("linear_mean", [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
                     helper.make_node("ReduceMean", ["y"], ["loss"], name="mean", keepdims=0)], [x])
save("mse", [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("Sub", ["y", "t"], ["d"], name="sub"),
             helper.make_node("Mul", ["d", "d"], ["sq"], name="sq"),
             helper.make_node("ReduceMean", ["sq"], ["loss"], name="mean", keepdims=0)], [x, t])
b = numpy_helper.from_array(np.linspace(-0.5, 0.5, 16).astype(np.float32), "b")
w16 = numpy_helper.from_array(np.linspace(-1, 1, 64).reshape(16, 4).astype(np.float32), "w16")
save("bias_tanh", [helper.make_node("Add", ["x", "b"], ["h"], name="bias"),
                   helper.make_node("Tanh", ["h"], ["a"], name="tanh"),
                   helper.make_node("MatMul", ["a", "w16"], ["y"], name="mm"),
                   helper.make_node("ReduceMean", ["y"], ["loss"], name="mean", keepdims=0)],
     [x16], (b, w16))
ratio = numpy_helper.from_array(np.array(0.25, np.float32))
train = numpy_helper.from_array(np.array(True))
save("dropout", [helper.make_node("Constant", [], ["ratio"], name="r", value=ratio),
                 helper.make_node("Constant", [], ["train"], name="t", value=train),
                 helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
                 helper.make_node("Dropout", ["y", "ratio", "train"], ["d"], name="drop"),
                 helper.make_node("ReduceMean", ["d"], ["loss"], name="mean", keepdims=0)],
     [x])

"""Writes small hand-made ONNX models for the importer's lit tests.

Usage: /usr/bin/python3 make_models.py OUTDIR

Each model exercises one path of the importer: a good one that must import,
or a bad one that must be rejected with one diagnostic. Built with
onnx.helper (not torch), so each file holds exactly the nodes the test names.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(model, outdir, name):
    onnx.save(model, os.path.join(outdir, name + ".onnx"))


def model_of(nodes, inputs, outputs, initializers=(), opset=17, name="g"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="make_models.py")
    m.ir_version = 8
    return m


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def i64(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.INT64, shape)


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name + "_const",
                            value=numpy_helper.from_array(np.asarray(array), name))


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.default_rng(0)

    # A small good model: Gemm + Relu + ReduceMean with an int64 initializer
    # (becomes a constant) and float initializers (become parameters).
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(3, np.float32), "b")
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "shape")
    good = model_of(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="gemm"),
         helper.make_node("Relu", ["y"], ["r"], name="relu"),
         helper.make_node("Reshape", ["r", "shape"], ["rs"], name="reshape"),
         helper.make_node("ReduceMean", ["rs"], ["loss"], name="mean", keepdims=0)],
        [f32("x", [2, 4])], [f32("loss", [])], [w, b, shape])
    save(good, outdir, "good")

    # Dynamic batch dimension: needs --shape.
    dyn = model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                   [f32("x", ["batch", 4])], [f32("y", ["batch", 4])])
    save(dyn, outdir, "dynamic")

    # Not ONNX at all, and a truncated copy of a good model.
    with open(os.path.join(outdir, "not_onnx.onnx"), "w") as f:
        f.write("this is a text file, not a protobuf\n" * 4)
    data = good.SerializeToString()
    with open(os.path.join(outdir, "truncated.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])
    open(os.path.join(outdir, "empty.onnx"), "wb").close()

    # An op tcc does not know.
    save(model_of([helper.make_node("Hardmax", ["x"], ["y"], name="hardmax0")],
                  [f32("x", [2])], [f32("y", [2])]), outdir, "unknown_op")
    # An op from another domain.
    m = model_of([helper.make_node("FusedGemm", ["x"], ["y"], name="fg", domain="com.microsoft")],
                 [f32("x", [2])], [f32("y", [2])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    save(m, outdir, "other_domain")

    # Unsupported attribute values / names.
    save(model_of([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=3)],
                  [f32("x", [2, 5])], [f32("y", [2, 5])]), outdir, "bad_axis")
    save(model_of([helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"],
                                    name="sce", reduction="average")],
                  [f32("x", [2, 5]), i64("t", [2])], [f32("y", [])]), outdir, "bad_reduction")
    save(model_of([helper.make_node("Gemm", ["x", "x"], ["y"], name="gemm", transB=1,
                                    activation="relu")],
                  [f32("x", [2, 5])], [f32("y", [2, 2])]), outdir, "unknown_attr")
    save(model_of([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1.5)],
                  [f32("x", [2, 5])], [f32("y", [2, 5])]), outdir, "attr_wrong_type")
    # An integer Div by a constant zero (ONNX leaves it undefined): refused,
    # not folded or computed as 0.
    save(model_of([const("seven", np.array([7, 8], np.int64)), const("zero", np.array([1, 0], np.int64)),
                   helper.make_node("Div", ["seven", "zero"], ["q"], name="div"),
                   helper.make_node("Cast", ["q"], ["qf"], name="cast", to=TensorProto.FLOAT),
                   helper.make_node("Add", ["x", "qf"], ["y"], name="add")],
                  [f32("x", [2])], [f32("y", [2])]), outdir, "int_div_by_zero")

    # Opsets out of range: Softmax at opset 11 (other semantics), opset 18.
    save(model_of([helper.make_node("Softmax", ["x"], ["y"], name="sm")],
                  [f32("x", [2, 5])], [f32("y", [2, 5])], opset=11), outdir, "opset_old")
    save(model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                  [f32("x", [2, 5])], [f32("y", [2, 5])], opset=29), outdir, "opset_new")

    # Shapes that do not fit.
    save(model_of([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                  [f32("a", [2, 3]), f32("b", [4, 5])], [f32("y", [2, 5])]), outdir, "matmul_mismatch")
    # Reshape whose shape is a graph input (not a compile-time constant).
    save(model_of([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
                  [f32("x", [2, 6]), i64("s", [2])], [f32("y", [3, 4])]), outdir, "runtime_shape")
    # Dropout in training mode: random masks (tcc-legalize).
    save(model_of([const("ratio", np.array(0.1, np.float32)),
                   const("train", np.array(True)),
                   helper.make_node("Dropout", ["x", "ratio", "train"], ["y"], name="drop")],
                  [f32("x", [2, 6])], [f32("y", [2, 6])]), outdir, "dropout_training")
    # Dropout with ratio 1: outside ONNX's [0, 1).
    save(model_of([const("ratio", np.array(1.0, np.float32)),
                   const("train", np.array(True)),
                   helper.make_node("Dropout", ["x", "ratio", "train"], ["y"], name="drop")],
                  [f32("x", [2, 6])], [f32("y", [2, 6])]), outdir, "dropout_ratio_one")
    # An embedding table with one all-zero row (nn.Embedding's padding_idx),
    # and one without.
    for name, zero_row in (("padding_row", 2), ("no_padding_row", None)):
        table = rng.standard_normal((5, 3)).astype(np.float32)
        if zero_row is not None:
            table[zero_row] = 0.0
        save(model_of([helper.make_node("Gather", ["emb", "ids"], ["y"], name="lookup")],
                      [i64("ids", [4])], [f32("y", [4, 3])],
                      [numpy_helper.from_array(table, "emb")]), outdir, name)
    # Dropout with ratio 0 in training: the identity.
    save(model_of([const("ratio", np.array(0.0, np.float32)),
                   const("train", np.array(True)),
                   helper.make_node("Dropout", ["x", "ratio", "train"], ["y", "mask"], name="drop")],
                  [f32("x", [2, 6])], [f32("y", [2, 6])]), outdir, "dropout_zero")
    # A node that uses a value before it is defined.
    save(model_of([helper.make_node("Relu", ["t"], ["y"], name="second"),
                   helper.make_node("Relu", ["x"], ["t"], name="first")],
                  [f32("x", [2])], [f32("y", [2])]), outdir, "unsorted")
    # An output declared with a shape that the op does not produce.
    save(model_of([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                  [f32("x", [2, 3])], [f32("y", [3, 2])]), outdir, "wrong_output_shape")

    # External data: one model with its data file beside it, and one whose
    # data file is missing.
    ext = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "ext_w")
    m = model_of([helper.make_node("MatMul", ["x", "ext_w"], ["y"], name="mm")],
                 [f32("x", [2, 3])], [f32("y", [2, 4])], [ext])
    onnx.save_model(m, os.path.join(outdir, "external.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="external.onnx.data",
                    size_threshold=0)
    m = onnx.load(os.path.join(outdir, "external.onnx"), load_external_data=False)
    for kv in m.graph.initializer[0].external_data:
        if kv.key == "location":
            kv.value = "missing.data"
    onnx.save(m, os.path.join(outdir, "external_missing.onnx"))
    # External data outside the model's folder, or not a file: refused.
    def external_variant(name, **fields):
        v = onnx.load(os.path.join(outdir, "external.onnx"), load_external_data=False)
        kvs = {kv.key: kv for kv in v.graph.initializer[0].external_data}
        for k, val in fields.items():
            if k in kvs:
                kvs[k].value = val
            else:
                e = v.graph.initializer[0].external_data.add()
                e.key, e.value = k, val
        onnx.save(v, os.path.join(outdir, name + ".onnx"))
    external_variant("external_dotdot", location="../../../../etc/passwd")
    external_variant("external_absolute", location="/etc/passwd")
    os.symlink("/etc/passwd", os.path.join(outdir, "passwd_link.data"))
    external_variant("external_link_out", location="passwd_link.data")
    os.mkfifo(os.path.join(outdir, "fifo.data"))
    external_variant("external_fifo", location="fifo.data")
    external_variant("external_offset_overflow", offset="9223372036854775807", length="16")
    external_variant("external_short", length="8")
    # A tensor that declares 2^40 elements and carries no data, and one whose
    # dimensions overflow int64.
    huge = onnx.TensorProto()
    huge.name, huge.data_type = "huge", onnx.TensorProto.FLOAT
    huge.dims.extend([1 << 20, 1 << 20])
    save(model_of([helper.make_node("Add", ["x", "huge"], ["y"], name="add")],
                  [f32("x", [1 << 20, 1 << 20])], [f32("y", [1 << 20, 1 << 20])], [huge]),
         outdir, "huge_no_data")
    save(model_of([helper.make_node("Constant", [], ["huge"], name="c", value=huge),
                   helper.make_node("Add", ["x", "huge"], ["y"], name="add")],
                  [f32("x", [1 << 20, 1 << 20])], [f32("y", [1 << 20, 1 << 20])]),
         outdir, "huge_constant_no_data")
    # An Expand to 2^64 elements (from a shape constant), and a FIFO named
    # as the model.
    save(model_of([const("shape", np.array([1 << 32, 1 << 32], np.int64)),
                   helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")],
                  [f32("x", [1])], [f32("y", [1 << 32, 1 << 32])]), outdir, "expand_huge")
    os.mkfifo(os.path.join(outdir, "fifo.onnx"))
    over = onnx.TensorProto()
    over.name, over.data_type = "over", onnx.TensorProto.FLOAT
    over.dims.extend([1 << 31, 1 << 31, 1 << 31])
    save(model_of([helper.make_node("Relu", ["over"], ["y"], name="relu")],
                  [], [f32("y", [1])], [over]), outdir, "dims_overflow")

    # Shape subgraph: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, the
    # way torch exports x.view(x.size(0), -1); all of it folds.
    save(model_of([helper.make_node("Shape", ["x"], ["s"], name="shape"),
                   const("zero", np.array(0, np.int64)),
                   helper.make_node("Gather", ["s", "zero"], ["d0"], name="gather", axis=0),
                   const("axes", np.array([0], np.int64)),
                   helper.make_node("Unsqueeze", ["d0", "axes"], ["d0u"], name="unsq"),
                   const("minus1", np.array([-1], np.int64)),
                   helper.make_node("Concat", ["d0u", "minus1"], ["newshape"], name="concat", axis=0),
                   helper.make_node("Reshape", ["x", "newshape"], ["y"], name="reshape")],
                  [f32("x", [2, 3, 4])], [f32("y", [2, 12])]), outdir, "shape_subgraph")

    buffers(outdir, rng)
    opset18(outdir)
    exporter_constructs(outdir)


def scores_model(extra_inits, mask_nodes, metadata=None, opset=17, frozen=None,
                 objective=None, w_name="w"):
    """scores = x @ w, then mask_nodes turn `scores` into `masked`, then
    softmax and the mean as the loss. w is a parameter."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), w_name)
    nodes = [helper.make_node("MatMul", ["x", w_name], ["scores"], name="mm")] + mask_nodes + [
        helper.make_node("Softmax", ["masked"], ["p"], name="softmax", axis=-1),
        helper.make_node("ReduceMean", ["p"], ["loss"], name="mean", keepdims=0)]
    m = model_of(nodes, [f32("x", [4, 4])], [f32("loss", [])], [w] + list(extra_inits),
                 opset=opset)
    for key, value in (("tcc.trainable", metadata), ("tcc.frozen", frozen),
                       ("tcc.objective", objective)):
        if value is not None:
            entry = m.metadata_props.add()
            entry.key, entry.value = key, value
    return m


def buffers(outdir, rng):
    """Initializers that are buffers, not parameters (compiler/Import/Trainable.h)."""
    # llama2.c's additive causal mask: 0 / -inf.
    additive = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    save(scores_model([numpy_helper.from_array(additive, "mask")],
                      [helper.make_node("Add", ["scores", "mask"], ["masked"], name="add")]),
         outdir, "buffer_additive_mask")
    # nanoGPT's float tril read through == 0 (only a Where condition).
    tril = np.tril(np.ones((4, 4), np.float32))
    save(scores_model([numpy_helper.from_array(tril, "bias"),
                       numpy_helper.from_array(np.array(0, np.float32), "zero"),
                       numpy_helper.from_array(np.array(-np.inf, np.float32), "fill")],
                      [helper.make_node("Equal", ["bias", "zero"], ["off"], name="eq"),
                       helper.make_node("Where", ["off", "fill", "scores"], ["masked"],
                                        name="where")]),
         outdir, "buffer_tril_mask")
    # A rotary table (row p = cos(p * theta_j)) multiplied into the scores, and
    # a parameter of ones beside it (a LayerNorm weight), which is trained.
    theta = 1.0 / (10000.0 ** (np.arange(0, 4) / 4.0))
    table = np.cos(np.outer(np.arange(4), theta)).astype(np.float32)
    save(scores_model([numpy_helper.from_array(table, "freqs_cos"),
                       numpy_helper.from_array(np.ones((4, 4), np.float32), "gamma")],
                      [helper.make_node("Mul", ["scores", "freqs_cos"], ["rot"], name="rope"),
                       helper.make_node("Mul", ["rot", "gamma"], ["masked"], name="scale")]),
         outdir, "buffer_rope_table")
    # The same additive mask, and a scalar, with tcc.trainable metadata that
    # lists only w: no guessing, no warning. Then a list naming what is not there.
    inits = [numpy_helper.from_array(additive, "mask"),
             numpy_helper.from_array(np.array(2.0, np.float32), "scale")]
    nodes = [helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="mul"),
             helper.make_node("Add", ["scaled", "mask"], ["masked"], name="add")]
    save(scores_model(inits, nodes, metadata="w"), outdir, "buffer_metadata")
    save(scores_model(inits, nodes, metadata="w,scale,w_missing"), outdir,
         "buffer_metadata_missing")
    # Without metadata, the scalar is a constant (with a warning).
    save(scores_model(inits, nodes), outdir, "buffer_scalar")
    # A constant under a name the exporter made up (torch.export's val_N):
    # the summary says which node reads it.
    save(scores_model([numpy_helper.from_array(np.array(2.0, np.float32), "val_94")],
                      [helper.make_node("Mul", ["scores", "val_94"], ["masked"], name="/h.0/attn/Mul")],
                      metadata="w"), outdir, "buffer_generated_name")
    # tcc.frozen (a parameter with requires_grad=False): a frozen argument.
    gamma = [numpy_helper.from_array(np.ones((4, 4), np.float32), "gamma")]
    scale_nodes = [helper.make_node("Mul", ["scores", "gamma"], ["masked"], name="scale")]
    save(scores_model(gamma, scale_nodes, metadata="gamma", frozen="w"), outdir,
         "buffer_frozen_metadata")
    save(scores_model(gamma, scale_nodes, metadata="gamma", frozen="w,nope"), outdir,
         "buffer_frozen_missing")
    # An empty tcc.trainable (a module none of whose parameters requires
    # gradients): nothing to train, refused; also with every one frozen.
    save(scores_model(gamma, scale_nodes, metadata=""), outdir, "buffer_metadata_empty")
    save(scores_model(gamma, scale_nodes, metadata="", frozen="w,gamma"), outdir,
         "buffer_metadata_all_frozen")
    # A mask folded into finite values (torch.finfo(float32).min).
    finite = np.triu(np.full((4, 4), np.finfo(np.float32).min, np.float32), 1)
    save(scores_model([numpy_helper.from_array(finite, "mask")],
                      [helper.make_node("Add", ["scores", "mask"], ["masked"], name="add")]),
         outdir, "buffer_finite_mask")
    # tf2onnx's forms without metadata: a 0/1 mask multiplied into the
    # scores (a buffer), and a tied weight written twice, transposed (named
    # in a warning); a parameter of ones beside them is neither.
    rng1 = np.random.default_rng(5)
    tied = rng1.standard_normal((4, 4)).astype(np.float32)
    save(scores_model([numpy_helper.from_array(np.tril(np.ones((4, 4), np.float32)), "keep"),
                       numpy_helper.from_array(tied, "emb"),
                       numpy_helper.from_array(tied.T.copy(), "head"),
                       numpy_helper.from_array(np.ones((4, 4), np.float32), "gamma")],
                      [helper.make_node("MatMul", ["scores", "emb"], ["e"], name="e"),
                       helper.make_node("MatMul", ["e", "head"], ["h"], name="h"),
                       helper.make_node("Mul", ["h", "gamma"], ["g"], name="scale"),
                       helper.make_node("Mul", ["g", "keep"], ["masked"], name="mask")]),
         outdir, "buffer_keep_mask_tied")
    # What torch.onnx.export's default optimizer writes: a parameter folded
    # into a copy named val_N, no metadata.
    save(scores_model(gamma, scale_nodes, w_name="val_12"), outdir, "folded_names")
    # The objective, well formed and not.
    save(scores_model(gamma, scale_nodes, metadata="w,gamma",
                      objective="task=causal-lm;ids=x"), outdir, "objective_ok")
    for tag, text in (("input", "ids=tokens"), ("field", "ids=x;colour=red"),
                      ("shift", "ids=x;labels=x;labels-shift=sideways"),
                      ("noshift", "ids=x;labels=x")):
        save(scores_model(gamma, scale_nodes, metadata="w,gamma", objective=text), outdir,
             "objective_bad_" + tag)
    # A graph input that no node reads (one tensor exported for two arguments).
    m = scores_model(gamma, scale_nodes, metadata="w,gamma")
    m.graph.input.extend([i64("labels", [4, 4])])
    save(m, outdir, "unread_input")


def exporter_constructs(outdir):
    """What exporters can write that tcc does not read: a model-local
    function (export_modules_as_functions) and sequence values."""
    fn = helper.make_function("pkg.mod", "Block", ["x"], ["y"],
                              [helper.make_node("Relu", ["x"], ["y"])],
                              [helper.make_opsetid("", 17)])
    m = model_of([helper.make_node("Block", ["x"], ["y"], name="block", domain="pkg.mod")],
                 [f32("x", [2, 3])], [f32("y", [2, 3])])
    m.functions.extend([fn])
    m.opset_import.extend([helper.make_opsetid("pkg.mod", 1)])
    save(m, outdir, "local_function")
    save(model_of([helper.make_node("SplitToSequence", ["x"], ["s"], name="seq", axis=0),
                   helper.make_node("SequenceAt", ["s", "zero"], ["y"], name="at")],
                  [f32("x", [2, 3]), i64("zero", [])], [f32("y", [3])]),
         outdir, "sequence_ops")


def opset18(outdir):
    """Opset 18 semantics: ReduceMean's axes as an input, Split's num_outputs."""
    save(model_of([const("axes", np.array([1], np.int64)),
                   helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean"),
                   helper.make_node("Split", ["m"], ["a", "b", "c"], name="split", axis=0,
                                    num_outputs=3),
                   helper.make_node("Gelu", ["c"], ["y"], name="gelu", approximate="tanh")],
                  [f32("x", [5, 3, 2])], [f32("a", [2, 1, 2]), f32("b", [2, 1, 2]),
                                          f32("y", [1, 1, 2])], opset=20),
         outdir, "opset20_reduce_split_gelu")
    # The same ReduceMean node at opset 17 has two inputs, which it did not then.
    save(model_of([const("axes", np.array([1], np.int64)),
                   helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean")],
                  [f32("x", [5, 3, 2])], [f32("m", [5, 1, 2])], opset=17),
         outdir, "opset17_reduce_axes_input")


if __name__ == "__main__":
    main(sys.argv[1])

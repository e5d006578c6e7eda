"""Export a PyTorch module to ONNX for tcc, recording what is trainable.

    from tcc_export import export
    export(model, (input_ids, labels), "model.onnx",
           input_names=["input_ids", "labels"], output_names=["loss"])

What it does that a plain ``torch.onnx.export`` does not:

* It keeps every parameter a parameter. The torch.export-based exporter's
  default optimizer (``optimize=True``) merges initializers with equal values
  (at initialisation every LayerNorm weight is ones, so they become one
  tensor) and folds small weights into transposed copies. Here the same
  optimizer runs without initializer deduplication and never folds a node that
  reads a parameter, so the shape subgraphs and buffers still fold.
* It writes ``tcc.trainable`` into the model's ``metadata_props``: the
  initializer names that are ``named_parameters()`` of the module (every alias
  of a tied weight). tcc trains exactly those, keeps every other initializer
  (buffers such as masks and position tables, the exporter's constants) fixed,
  and reports a listed name the graph lacks. ``tcc --trainable`` and
  ``--frozen`` override it. This is what ONNX Runtime Training's
  ``requires_grad`` list does.

The model should be in ``train()`` mode (dropout is exported as training-mode
Dropout, which tcc compiles) and should compute its loss, or export logits and
let ``tcc --loss=cross-entropy:...`` append one.

``exporter="torchscript"`` uses the TorchScript exporter (``dynamo=False``,
opset 17 unless ``opset_version`` is given, training mode, no constant
folding), which PyTorch deprecates but still ships.
"""

from __future__ import annotations

import os

METADATA_KEY = "tcc.trainable"


def _parameter_names(module) -> set[str]:
    return {name for name, _ in module.named_parameters(remove_duplicate=False)}


def _optimize_keeping_parameters(model_ir, parameters: set[str]) -> None:
    """The constant folding of onnxscript's default optimization, without
    folding any node that reads a parameter, and without the passes that look
    at parameter values: initializer deduplication (which merges parameters
    that are equal at initialisation) and the rewriter (which drops a Gemm
    bias that is zero at initialisation)."""
    import onnx_ir as ir
    from onnx_ir.passes import common as common_passes
    from onnxscript.optimizer import _constant_folding

    def should_fold(node):
        if any(v is not None and v.name in parameters for v in node.inputs):
            return False
        return None

    passes = ir.passes.Sequential(
        common_passes.InlinePass(),
        ir.passes.PassManager(
            [
                _constant_folding.FoldConstantsPass(
                    shape_inference=True,
                    input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                    output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
                    should_fold=should_fold,
                ),
                common_passes.RemoveUnusedNodesPass(),
                common_passes.RemoveUnusedFunctionsPass(),
                common_passes.RemoveUnusedOpsetsPass(),
            ],
            steps=2,
            early_stop=True,
        ),
        common_passes.RemoveUnusedNodesPass(),
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common_passes.LiftSubgraphInitializersToMainGraphPass(),
        common_passes.OutputFixPass(),
        common_passes.NameFixPass(),
    )
    passes(model_ir)


def _record_trainable(model_proto, parameters: set[str]) -> list[str]:
    names = [t.name for t in model_proto.graph.initializer if t.name in parameters]
    for p in list(model_proto.metadata_props):
        if p.key == METADATA_KEY:
            model_proto.metadata_props.remove(p)
    entry = model_proto.metadata_props.add()
    entry.key = METADATA_KEY
    entry.value = ",".join(names)
    return names


def export(module, args, path, *, kwargs=None, input_names=None, output_names=None,
           exporter: str = "dynamo", opset_version: int | None = None) -> list[str]:
    """Exports `module` to `path` and records its trainable initializers.
    Returns their names."""
    import onnx
    import torch

    parameters = _parameter_names(module)
    if exporter == "dynamo":
        program = torch.onnx.export(
            module, tuple(args), kwargs=kwargs, dynamo=True, optimize=False,
            input_names=input_names, output_names=output_names,
            opset_version=opset_version, external_data=False, verbose=False)
        _optimize_keeping_parameters(program.model, parameters)
        import onnx_ir as ir
        proto = ir.serde.serialize_model(program.model)
    elif exporter == "torchscript":
        tmp = str(path) + ".tmp-export"
        torch.onnx.export(
            module, tuple(args), tmp, kwargs=kwargs, dynamo=False,
            input_names=input_names, output_names=output_names,
            opset_version=opset_version or 17,
            training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        proto = onnx.load(tmp)
        os.remove(tmp)
    else:
        raise ValueError(f"exporter must be 'dynamo' or 'torchscript', not {exporter!r}")
    names = _record_trainable(proto, parameters)
    tmp = str(path) + ".tmp"
    onnx.save(proto, tmp)
    os.replace(tmp, path)
    return names

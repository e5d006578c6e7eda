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
  initializer names that are ``named_parameters()`` of the module with
  ``requires_grad`` (every alias of a tied weight). tcc trains exactly those,
  keeps every other initializer (buffers such as masks and position tables,
  the exporter's constants) fixed, and reports a listed name the graph lacks.
  Parameters with ``requires_grad=False`` (a LoRA model's base, a frozen
  embedding) are listed in ``tcc.frozen``: tcc keeps them as fixed step
  arguments, as ``--frozen`` does, so ``--save`` writes them back unchanged.
  ``tcc --trainable`` and ``--frozen`` override both. This is what ONNX
  Runtime Training's ``requires_grad`` list does.
* It writes ``tcc.objective``: which graph input holds the token ids, the
  labels and the attention mask, what task the loss is (``causal-lm`` or
  ``masked-lm``), and whether the model shifts its labels itself
  (``labels-shift=shifted``: Hugging Face causal LMs, whose loss compares
  position t with label t + 1, so labels are the ids) or reads them aligned
  (``aligned``: nanoGPT, whose targets are the next tokens). The shift is
  measured, not guessed: the module is run in PyTorch (eval mode, no
  gradients) with the first label changed, then the last; a loss that does
  not read the first label shifts its labels. ``tcc-run --data`` feeds the
  inputs by these roles; ``objective=`` gives them explicitly.
* One tensor passed for two arguments (``labels=input_ids``, the usual HF
  habit) is exported as two inputs that each feed their own argument
  (otherwise torch.export reads both from one input and leaves the other
  unread).

* A batch norm in ``train()`` mode is exported in training mode: the
  torch.export-based exporter writes it as BatchNormalization that
  normalizes with the running statistics (inference), which would train
  another model than PyTorch's.

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
FROZEN_KEY = "tcc.frozen"
OBJECTIVE_KEY = "tcc.objective"

# Input names that say a role, for models exported without objective=.
ROLE_NAMES = {
    "ids": ("input_ids", "idx", "ids", "tokens", "input", "x"),
    "labels": ("labels", "targets", "target", "label", "y"),
    "mask": ("attention_mask", "mask"),
}


def _parameter_names(module) -> set[str]:
    return {name for name, _ in module.named_parameters(remove_duplicate=False)}


def _split_parameters(module) -> tuple[set[str], set[str]]:
    """(trained, frozen): every name of each parameter, by requires_grad."""
    trained, frozen = set(), set()
    for name, p in module.named_parameters(remove_duplicate=False):
        (trained if p.requires_grad else frozen).add(name)
    return trained, frozen


def _hf_task(module) -> str | None:
    """"causal-lm" or "masked-lm" for a module that holds a Hugging Face
    language model (by its class), else None."""
    for sub in module.modules():
        cls = type(sub).__name__
        if cls.endswith("ForMaskedLM"):
            return "masked-lm"
        if cls.endswith("ForCausalLM") or cls.endswith("LMHeadModel"):
            return "causal-lm"
    return None


def probe_labels_shift(module, args, labels_index, kwargs=None) -> str | None:
    """How the module's loss reads its labels, measured in PyTorch: the
    module runs in eval mode without gradients on `args`, then with the
    labels' first column changed, then with their last column changed.
    Returns "shifted" when the loss does not read the first label but reads
    the last (position t is compared with label t + 1), "aligned" when it
    reads both, None when the module does not return a scalar loss or reads
    neither."""
    import torch

    def loss_with(labels):
        a = [x.clone() if torch.is_tensor(x) else x for x in args]
        a[labels_index] = labels
        out = module(*a, **(kwargs or {}))
        if not (torch.is_tensor(out) and out.numel() == 1 and out.is_floating_point()):
            return None
        return float(out.detach().double())

    labels = args[labels_index]
    if not torch.is_tensor(labels) or labels.dim() < 1 or labels.is_floating_point():
        return None
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            base = loss_with(labels.clone())
            if base is None:
                return None

            def reads(col):
                changed = labels.clone()
                changed[..., col] = torch.where(changed[..., col] == 0, 1, 0)
                return loss_with(changed) != base

            first, last = reads(0), reads(-1)
    finally:
        module.train(was_training)
    if last and not first:
        return "shifted"
    if last and first:
        return "aligned"
    return None


def probe_causal(module, args, ids_index, labels_index, shift, kwargs=None) -> bool | None:
    """Whether the module's loss is a causal LM's, measured in PyTorch: with
    every label ignored (-100, PyTorch's default ignore_index) but the one
    that position 0 is compared with, the loss must not change when the last
    token changes (a bidirectional encoder's does). None when the loss
    cannot be measured so (it does not ignore -100)."""
    import torch

    ids, labels = args[ids_index], args[labels_index]
    if not (torch.is_tensor(ids) and ids.dim() >= 1 and ids.shape[-1] >= 2):
        return None
    keep = 1 if shift == "shifted" else 0
    masked = torch.full_like(labels, -100)
    masked[..., keep] = labels[..., keep]

    def loss_with(new_ids):
        a = [x.clone() if torch.is_tensor(x) else x for x in args]
        a[ids_index] = new_ids
        a[labels_index] = masked.clone()
        out = module(*a, **(kwargs or {}))
        if not (torch.is_tensor(out) and out.numel() == 1 and out.is_floating_point()):
            return None
        return float(out.detach().double())

    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            base = loss_with(ids.clone())
            changed = ids.clone()
            changed[..., -1] = torch.where(changed[..., -1] == 0, 1, 0)
            other = loss_with(changed)
    except (IndexError, RuntimeError):
        return None
    finally:
        module.train(was_training)
    if base is None or other is None or base != base:
        return None
    return other == base


def infer_objective(module, args, input_names, kwargs=None) -> dict | None:
    """The roles of the graph inputs and how the loss reads its labels, from
    the input names (ROLE_NAMES) and a probe of the module."""
    import torch

    if not input_names:
        return None
    objective = {}
    for role, names in ROLE_NAMES.items():
        for i, n in enumerate(input_names[:len(args)]):
            integer = torch.is_tensor(args[i]) and not args[i].is_floating_point()
            if integer and n in names and role not in objective and n not in objective.values():
                objective[role] = n
    if "ids" not in objective:
        return None
    task = _hf_task(module)
    if "labels" in objective:
        li = input_names.index(objective["labels"])
        shift = probe_labels_shift(module, list(args), li, kwargs)
        if shift is None:
            return None
        objective["labels-shift"] = shift
        if task is None:
            causal = probe_causal(module, list(args), input_names.index(objective["ids"]), li,
                                  shift, kwargs)
            if causal is not None:
                task = "causal-lm" if causal else "masked-lm"
    if task:
        objective["task"] = task
    return objective


def format_objective(objective: dict) -> str:
    keys = ("task", "ids", "labels", "mask", "labels-shift")
    unknown = set(objective) - set(keys)
    if unknown:
        raise ValueError("objective: unknown keys %s (known: %s)" % (sorted(unknown), keys))
    if objective.get("labels-shift") not in (None, "shifted", "aligned"):
        raise ValueError("objective: labels-shift is 'shifted' or 'aligned'")
    if objective.get("task") not in (None, "causal-lm", "masked-lm"):
        raise ValueError("objective: task is 'causal-lm' or 'masked-lm'")
    return ";".join("%s=%s" % (k, objective[k]) for k in keys if objective.get(k))


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


def _batchnorm_training_mode(model_proto, module) -> int:
    """Marks the BatchNormalization nodes of batch norms that train in
    training mode; returns how many it marked.

    The torch.export-based exporter writes a batch norm of a module in
    train() mode as BatchNormalization without training_mode, which
    normalizes with the running statistics: tcc would train another model
    than PyTorch's, which normalizes with the batch's. A node is the
    module's when its input_mean is the module's running_mean buffer; it gets
    training_mode=1 and the running mean and variance outputs ONNX then
    wants (tcc computes them; tcc-run does not carry them from step to step,
    and tcc says so)."""
    import torch
    from onnx import helper
    training = {name for name, m in module.named_modules()
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training
                and m.track_running_stats}
    marked = 0
    for node in model_proto.graph.node:
        if node.op_type != "BatchNormalization" or len(node.input) < 5:
            continue
        if not node.input[3].endswith(".running_mean") or \
                node.input[3][:-len(".running_mean")] not in training:
            continue
        mode = [a for a in node.attribute if a.name == "training_mode"]
        if mode and mode[0].i:
            continue
        for a in mode:
            node.attribute.remove(a)
        node.attribute.append(helper.make_attribute("training_mode", 1))
        while len(node.output) < 3:
            node.output.append("%s_running_%s" % (node.output[0], ("mean", "var")[len(node.output) - 1]))
        marked += 1
    return marked


def _set_metadata(model_proto, key: str, value: str | None) -> None:
    for p in list(model_proto.metadata_props):
        if p.key == key:
            model_proto.metadata_props.remove(p)
    if value is not None:
        entry = model_proto.metadata_props.add()
        entry.key = key
        entry.value = value


def _record_trainable(model_proto, parameters: set[str], frozen: set[str] = frozenset()) -> list[str]:
    names = [t.name for t in model_proto.graph.initializer if t.name in parameters]
    _set_metadata(model_proto, METADATA_KEY, ",".join(names))
    frozen_names = [t.name for t in model_proto.graph.initializer if t.name in frozen]
    _set_metadata(model_proto, FROZEN_KEY, ",".join(frozen_names) if frozen_names else None)
    return names


def _distinct_args(args):
    """`args` with a tensor that appears twice cloned, so that each argument
    is its own graph input."""
    import torch
    seen, out = set(), []
    for a in args:
        if torch.is_tensor(a) and id(a) in seen:
            a = a.clone()
        seen.add(id(a))
        out.append(a)
    return tuple(out)


def export(module, args, path, *, kwargs=None, input_names=None, output_names=None,
           exporter: str = "dynamo", opset_version: int | None = None,
           objective: dict | bool | None = None,
           external_data: bool | None = None) -> list[str]:
    """Exports `module` to `path` and records its trainable initializers, its
    frozen parameters and its objective. Returns the trainable names.

    `objective`: None infers it (infer_objective: roles from `input_names`,
    the labels' shift by a probe); a dict gives it ({"ids": NAME, "labels":
    NAME, "mask": NAME, "task": "causal-lm"|"masked-lm", "labels-shift":
    "shifted"|"aligned"}); False records none.

    `external_data`: write the initializers into `path`.data beside the
    model (ONNX external data, which tcc reads): None does it when they pass
    1 GiB (a protobuf cannot hold 2 GiB), True always, False never."""
    import onnx
    import torch

    args = _distinct_args(tuple(args))
    parameters, frozen = _split_parameters(module)
    if objective is None:
        objective = infer_objective(module, args, list(input_names or []), kwargs)
    elif objective is not False:
        objective = dict(objective)
        for role in ("ids", "labels", "mask"):
            if role in objective and objective[role] not in (input_names or []):
                raise ValueError("objective: %s=%r is not one of input_names %s"
                                 % (role, objective[role], input_names))
    objective_text = format_objective(objective) if objective else None
    if exporter == "dynamo":
        program = torch.onnx.export(
            module, tuple(args), kwargs=kwargs, dynamo=True, optimize=False,
            input_names=input_names, output_names=output_names,
            opset_version=opset_version, external_data=False, verbose=False)
        _optimize_keeping_parameters(program.model, parameters | frozen)
        import onnx_ir as ir
        proto = ir.serde.serialize_model(program.model)
    elif exporter == "torchscript":
        import shutil
        import tempfile
        # A folder of its own: past 2 GiB the exporter writes a file per
        # tensor beside the model.
        tmpdir = tempfile.mkdtemp(prefix=".tcc-export-",
                                  dir=os.path.dirname(os.path.abspath(str(path))))
        tmp = os.path.join(tmpdir, "model.onnx")
        torch.onnx.export(
            module, tuple(args), tmp, kwargs=kwargs, dynamo=False,
            input_names=input_names, output_names=output_names,
            opset_version=opset_version or 17,
            training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        try:
            proto = onnx.load(tmp)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
    else:
        raise ValueError(f"exporter must be 'dynamo' or 'torchscript', not {exporter!r}")
    _batchnorm_training_mode(proto, module)
    names = _record_trainable(proto, parameters, frozen)
    _set_metadata(proto, OBJECTIVE_KEY, objective_text)
    _save(proto, str(path), external_data)
    return names


def export_inference(module, args, path, *, training_model=None, kwargs=None,
                     input_names=None, output_names=None, dynamic: bool = True,
                     opset_version: int | None = None,
                     external_data: bool | None = None) -> list[str]:
    """Exports `module` for inference, so that `tcc-run --save OUT --model
    PATH` writes the trained weights into it: an eval-mode graph (dropout
    off, batch norms on their running statistics), whatever `module`
    returns (the logits: no loss, no labels input), and with `dynamic` every
    input's first two dimensions named (batch, sequence) instead of fixed,
    so that onnxruntime runs it on any batch and length (the position table
    still bounds the length). Returns the parameter initializers' names.

    `module` holds the model under the same attribute as the training
    export's wrapper (`self.m`), so that the initializers have the same
    names. With `training_model` (the file `export` wrote), a parameter the
    two exports name differently because it is tied (GPT-2's lm_head and
    wte) is renamed to the training model's name, and a parameter the
    training model lacks, or holds with other dims, is an error: --save
    would leave it at its initial value. The same tcc.trainable and
    tcc.frozen metadata is recorded, which `tcc-run --save` checks."""
    import onnx
    import torch

    args = _distinct_args(tuple(args))
    parameters, frozen = _split_parameters(module)
    dynamic_shapes = None
    if dynamic:
        import inspect
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")

        def dims(a):
            rank = a.dim() if torch.is_tensor(a) else 0
            return {0: batch, 1: seq} if rank >= 2 else {0: batch} if rank == 1 else None
        # Keyed by forward's own argument names, which torch.export wants
        # (input_names only name the ONNX inputs).
        bound = inspect.signature(module.forward).bind(*args, **(kwargs or {}))
        dynamic_shapes = {k: dims(v) for k, v in bound.arguments.items()}
    was_training = module.training
    module.eval()
    try:
        program = torch.onnx.export(
            module, tuple(args), kwargs=kwargs, dynamo=True, optimize=False,
            input_names=input_names, output_names=output_names,
            opset_version=opset_version, dynamic_shapes=dynamic_shapes,
            external_data=False, verbose=False)
    finally:
        module.train(was_training)
    _optimize_keeping_parameters(program.model, parameters | frozen)
    import onnx_ir as ir
    proto = ir.serde.serialize_model(program.model)
    if training_model is not None:
        _match_training_names(proto, module, str(training_model))
        parameters, frozen = _split_parameters(module)
        trained_meta = _metadata(str(training_model))
        parameters = parameters | set(filter(None, trained_meta.get(METADATA_KEY, "").split(",")))
        frozen = frozen | set(filter(None, trained_meta.get(FROZEN_KEY, "").split(",")))
        frozen -= parameters
    names = _record_trainable(proto, parameters, frozen)
    _save(proto, str(path), external_data)
    return names + [t.name for t in proto.graph.initializer if t.name in frozen]


def _metadata(path: str) -> dict:
    import onnx
    proto = onnx.load(path, load_external_data=False)
    return {p.key: p.value for p in proto.metadata_props}


def _match_training_names(proto, module, training_model: str) -> None:
    """Renames each parameter initializer of `proto` that the training model
    holds under another name of the same (tied) parameter, and refuses a
    parameter that the training model lacks or holds with other dims."""
    import onnx
    trained = {t.name: list(t.dims) for t in
               onnx.load(training_model, load_external_data=False).graph.initializer}
    aliases: dict[int, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(name)
    alias_of = {name: names for names in aliases.values() for name in names}
    renames, problems = {}, []
    for t in proto.graph.initializer:
        if t.name not in alias_of:
            continue
        target = t.name if t.name in trained else next(
            (a for a in alias_of[t.name] if a in trained), None)
        if target is None:
            problems.append("%s is not an initializer of %s" % (t.name, training_model))
        elif trained[target] != list(t.dims):
            problems.append("%s has dims %s here but %s in %s" % (
                t.name, list(t.dims), trained[target], training_model))
        elif target != t.name:
            renames[t.name] = target
    if problems:
        raise ValueError("the inference export does not match the training model, so "
                         "tcc-run --save could not write every trained weight into it: "
                         + "; ".join(problems))
    if not renames:
        return

    def rename_graph(graph):
        for t in graph.initializer:
            t.name = renames.get(t.name, t.name)
        for v in list(graph.input) + list(graph.value_info):
            v.name = renames.get(v.name, v.name)
        for node in graph.node:
            for i, name in enumerate(node.input):
                node.input[i] = renames.get(name, name)
            for a in node.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    rename_graph(g)

    rename_graph(proto.graph)


# A protobuf message cannot reach 2 GiB; past this many bytes of
# initializers, export() writes them as external data.
EXTERNAL_DATA_BYTES = 1 << 30


def _save(proto, path: str, external_data: bool | None) -> None:
    """Writes `proto` to `path`, its initializers into `path`.data when
    `external_data` (None: when they pass EXTERNAL_DATA_BYTES), through a
    temporary folder beside it, so that a failed write leaves nothing."""
    import shutil
    import tempfile

    import onnx
    if external_data is None:
        size = sum(len(t.raw_data) + 4 * (len(t.float_data) + len(t.int32_data)) +
                   8 * (len(t.int64_data) + len(t.double_data))
                   for t in proto.graph.initializer)
        external_data = size > EXTERNAL_DATA_BYTES
    folder = os.path.dirname(os.path.abspath(path))
    base = os.path.basename(path)
    tmpdir = tempfile.mkdtemp(prefix="." + base + ".tmp-", dir=folder)
    try:
        tmp = os.path.join(tmpdir, base)
        if external_data:
            onnx.save_model(proto, tmp, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=base + ".data", size_threshold=1024)
            data = os.path.join(tmpdir, base + ".data")
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(data, 0o666 & ~mask)  # as the model file, not the temporary's 0600
            os.replace(data, os.path.join(folder, base + ".data"))
        else:
            onnx.save_model(proto, tmp)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)

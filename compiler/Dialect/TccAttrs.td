//===- TccAttrs.td - tcc dialect attributes ----------------*- tablegen -*-===//
//
// Typed attributes that carry what a pass decided to the passes and emitters
// after it, with accessors instead of string keys.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_DIALECT_TCCATTRS_TD
#define TCC_DIALECT_TCCATTRS_TD

include "compiler/Dialect/TccBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributes.td"

class Tcc_Attr<string name, string attrMnemonic> : AttrDef<Tcc_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Tcc_ShardsAttr : Tcc_Attr<"Shards", "shards"> {
  let summary = "the optimizer state of a data-parallel step, sharded across its ranks (ZeRO-1)";
  let description = [{
    Part of #tcc.layout when tcc-plan-memory plans for `ranks` > 1 ranks
    (tcc --data-parallel=N): every rank holds the whole model and its
    gradient accumulators, but the optimizer state of only 1/N of the
    parameters.

    The trainable parameters lie back to back from `params`, and their
    gradient accumulators from `grads`, in the same order and with the same
    padding, so that element e of one flat space of `flat_elems` elements
    (padded to `ranks` chunks of `chunk_elems`, each 64-byte aligned) is at
    the same index in both. Rank r owns elements [r * chunk_elems,
    (r + 1) * chunk_elems): the gradients are reduce-scattered into its
    `shard_grads` buffer of one chunk, it updates its chunk of the
    parameters with its optimizer state (`state`: one chunk per state kind,
    AdamW's exp_avg and exp_avg_sq, SGD's momentum), and the updated chunks
    are all-gathered in place. `elem_bytes` is the element size of both
    spaces (4, or 8 for the CPU target's f64).

    ```mlir
    shards = #tcc.shards<ranks = 2, elem_bytes = 4, flat_elems = 1024, chunk_elems = 512, params = 0, grads = 4096, shard_grads = 8192, state = array<i64: 10240, 12288>>
    ```
  }];
  let parameters = (ins
    "int64_t":$ranks,
    "int64_t":$elem_bytes,
    "int64_t":$flat_elems,
    "int64_t":$chunk_elems,
    "int64_t":$params,
    "int64_t":$grads,
    "int64_t":$shard_grads,
    "DenseI64ArrayAttr":$state
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let extraClassDeclaration = [{
    /// The bytes of one rank's chunk.
    int64_t getChunkBytes() const { return getChunkElems() * getElemBytes(); }
  }];
}

def Tcc_LayoutAttr : Tcc_Attr<"Layout", "layout"> {
  let summary = "a step's memory plan: arena slots and the byte breakdown";
  let description = [{
    What tcc-plan-memory decided for a training step, on its function as
    `tcc.layout`: the arena's size, the slot (byte offset) of every
    parameter, gradient accumulator, optimizer state tensor, input and
    result, the bytes of each category that `--mem-budget` counts, and
    where the plan peaks. The emitters place buffers from it, the driver's
    `--memory-report` and budget diagnostics read it.

    Slots are in argument order; `seed` and `rng` are -1 when the step has
    no such input. The CUDA target adds the fp16 working copies (`shadows`,
    `shadow_bytes`) and the GEMM workspace (`workspace`, `workspace_bytes`);
    on the CPU target they are empty, 0 and -1.

    Where the function's #tcc.tiers puts state in pinned host memory, the
    device slots of those tensors are -1 and `host_params`, `host_grads`
    and `host_state` give their offsets in the host buffer of `host_bytes`
    (-1 for what stays on the device); the device byte counts
    (`param_bytes`, ...) leave them out and `host_param_bytes`, ... count
    them. Without host tiers these fields are omitted.

    ```mlir
    tcc.layout = #tcc.layout<arena_bytes = 256, planned_bytes = 256, ...>
    ```
  }];
  let parameters = (ins
    "int64_t":$arena_bytes,
    "int64_t":$planned_bytes,
    "int64_t":$device_reserve_bytes,
    "DenseI64ArrayAttr":$params,
    "DenseI64ArrayAttr":$grads,
    "DenseI64ArrayAttr":$state,
    "DenseI64ArrayAttr":$inputs,
    "DenseI64ArrayAttr":$results,
    "int64_t":$param_bytes,
    "int64_t":$grad_bytes,
    "int64_t":$state_bytes,
    "int64_t":$input_bytes,
    "int64_t":$output_bytes,
    "int64_t":$temporary_bytes,
    "int64_t":$temporary_bytes_unshared,
    "int64_t":$saved_activation_bytes,
    "int64_t":$seed,
    "int64_t":$rng,
    "int64_t":$peak_live_bytes,
    StringRefParameter<"the op where the plan peaks">:$peak_op,
    "ArrayAttr":$peak_values,
    "DenseI64ArrayAttr":$shadows,
    "int64_t":$shadow_bytes,
    "int64_t":$workspace,
    "int64_t":$workspace_bytes,
    // Host memory (#tcc.tiers): omitted when the plan keeps everything on
    // the device.
    DefaultValuedParameter<"int64_t", "0">:$host_bytes,
    OptionalParameter<"DenseI64ArrayAttr">:$host_params,
    OptionalParameter<"DenseI64ArrayAttr">:$host_grads,
    OptionalParameter<"DenseI64ArrayAttr">:$host_state,
    DefaultValuedParameter<"int64_t", "0">:$host_param_bytes,
    DefaultValuedParameter<"int64_t", "0">:$host_grad_bytes,
    DefaultValuedParameter<"int64_t", "0">:$host_state_bytes,
    // Sharded optimizer state (tcc --data-parallel=N, ZeRO-1): omitted for
    // one rank.
    OptionalParameter<"ShardsAttr">:$shards
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let extraClassDeclaration = [{
    /// The name of the function attribute that holds it.
    static constexpr ::llvm::StringLiteral kAttrName = "tcc.layout";
    /// The layout on a planned step function, or null before tcc-plan-memory.
    static LayoutAttr of(::mlir::Operation *func) {
      return func->getAttrOfType<LayoutAttr>(kAttrName);
    }
  }];
}

def Tcc_TargetAttr : Tcc_Attr<"Target", "target"> {
  let summary = "the target a module is compiled for";
  let description = [{
    Set on the module (`tcc.target`) by tcc-set-target, the first pass of
    the plan pipeline (the training pipeline before it does not depend on
    the target), so every pass, emitter and build step after it reads one
    typed answer instead of a flag of its own: the target kind, the type floats are stored in (`f16`
    on CUDA, whose master weights, gradients, optimizer state and
    statistics stay f32; `f32` or `f64` on the CPU), and, on CUDA, the GPU
    architecture (compute capability, e.g. 90).

    ```mlir
    module attributes {tcc.target = #tcc.target<kind = cuda, storage = f16, arch = 90>} {...}
    module attributes {tcc.target = #tcc.target<kind = cpu, storage = f32, arch = 0>} {...}
    ```
  }];
  let parameters = (ins "TargetKind":$kind, "Type":$storage, "int64_t":$arch);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The name of the module attribute that holds it.
    static constexpr ::llvm::StringLiteral kAttrName = "tcc.target";
    /// The target of the module that holds `op` (or of `op`, a module),
    /// or null when it has none.
    static TargetAttr of(::mlir::Operation *op);
    bool isCuda() const { return getKind() == TargetKind::Cuda; }
    /// The bytes per floating-point element that the memory plan uses:
    /// 2 for the CUDA target's mixed precision (kMixedPrecision), else the
    /// storage type's width.
    int64_t getFloatBytes() const;
  }];
}

def Tcc_TiersAttr : Tcc_Attr<"Tiers", "tiers"> {
  let summary = "which state a step keeps in pinned host memory";
  let description = [{
    Set on the micro-step function (`tcc.tiers`) by tcc-remat when it may
    offload (`offload` other than `none`, CUDA only): the memory tier of
    each parameter's state, chosen together with recomputation by one cost
    model so that the device plan fits the budget at the least estimated
    time (docs/memory.md).

    - `host_state`: the argument numbers of parameters whose fp32 master
      weights and optimizer state live in pinned host memory and are
      updated on the host; the device keeps their fp16 working copies,
      refreshed after each update.
    - `host_grads`: the argument numbers (each also in `host_state`) whose
      fp32 gradient accumulators live in host memory: the step copies each
      micro-step's gradient to the host as the backward pass makes it.
    - The rates the choice assumed: PCIe and host memory bandwidth (MB/s),
      the device's FLOP rate (GFLOP/s) and memory bandwidth (MB/s), and the
      host memory it could use (bytes).

    tcc-plan-memory reads it: the device arena leaves these tensors out and
    a host buffer holds them (the `host_*` fields of #tcc.layout).

    ```mlir
    tcc.tiers = #tcc.tiers<host_state = [0, 2], host_grads = [], pcie_mbps = 31500, ...>
    ```
  }];
  let parameters = (ins
    "DenseI64ArrayAttr":$host_state,
    "DenseI64ArrayAttr":$host_grads,
    "int64_t":$pcie_mbps,
    "int64_t":$host_mbps,
    "int64_t":$device_gflops,
    "int64_t":$device_mbps,
    "int64_t":$host_budget
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The name of the function attribute that holds it.
    static constexpr ::llvm::StringLiteral kAttrName = "tcc.tiers";
    /// The tiers of a step function, or null when it has none.
    static TiersAttr of(::mlir::Operation *func) {
      return func->getAttrOfType<TiersAttr>(kAttrName);
    }
    /// Whether argument `arg`'s master weights and optimizer state are on the host.
    bool stateOnHost(int64_t arg) const;
    /// Whether argument `arg`'s gradient accumulator is on the host.
    bool gradOnHost(int64_t arg) const;
    /// Whether anything is on the host.
    bool any() const { return !getHostState().empty(); }
  }];
}

#endif // TCC_DIALECT_TCCATTRS_TD

//===- TcckOps.td - the kernel-level dialect ----------------*- tablegen -*-===//
//
// `tcck` is stage 6 of the pipeline (DESIGN.md): the planned step as the
// kernels a target runs, over views of the arena. Every decision the passes
// made is in the IR, typed: where each value lives (a view's offset), how it
// is stored (the view's element type), which library kernel or GEMM runs,
// the loop structure of a fused kernel, where a gradient is added into its
// accumulator, and what the op table says about each op. An emitter
// per target (codegen/cpu/CpuKernels.cpp, codegen/cuda/CudaKernels.cpp: the
// step's body) reads it and writes code.
//
// Kernel ops write into their `outs` (destination-passing style) and return
// nothing; views and globals are the only ops with results.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_KERNEL_TCCKOPS_TD
#define TCC_KERNEL_TCCKOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "compiler/Dialect/TccBase.td"
include "compiler/Kernel/TcckEnums.td"

def Tcck_Dialect : Dialect {
  let name = "tcck";
  let cppNamespace = "::mlir::tcck";
  let summary = "The step as kernels over views of the arena";
  let description = [{
    The output of `tcc-lower-to-kernels`: a step function whose arguments
    and results are memrefs (the arena slots of the parameters, inputs and
    results; their element type is the storage type) and whose body is a
    sequence of kernels. A fused loop (`tcck.loop`) and a `tcck.matmul`'s
    epilogue keep their body as a region of the scalar ops below, with an
    indexing map per operand. A fused data movement (`tcck.copy_loop`) has
    no region: it is a list of copies, each an affine map from its space
    into its source and another into its destination.
  }];
  let dependentDialects = ["::mlir::tcc::TccDialect"];
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let useDefaultAttributePrinterParser = 1;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def Tcck_CublasLtAttr : AttrDef<Tcck_Dialect, "CublasLt"> {
  let mnemonic = "cublaslt";
  let summary = "the epilogue a CUDA GEMM leaves to cuBLASLt";
  let description = [{
    What tcc-lower-to-kernels decided, on the CUDA target, that cuBLASLt's
    epilogue computes for a `tcck.matmul` (runtime/cuda/gemm.cuh's
    matmul_epilogue): `D = product + bias`, a vector along D's rows, then a
    tanh GELU (`gelu`) or `+ residual`, a tensor of D's shape. `bias` and
    `residual` (-1: none) are indices into the matmul's `epilogue_ins`;
    `result` is the output D is written to, and `aux` (-1: none) the one
    the biased value is written to before its GELU. The epilogue region
    says the same computation; the decision is made once, by the same
    matcher tcc-fuse used to build the fusion.

        #tcck.cublaslt<bias = 0, residual = -1, gelu = true, result = 0, aux = 1>
  }];
  let parameters = (ins "int64_t":$bias, "int64_t":$residual, "bool":$gelu, "int64_t":$result,
                        "int64_t":$aux);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Tcck_CopyAttr : AttrDef<Tcck_Dialect, "Copy"> {
  let mnemonic = "copy";
  let summary = "one copy of a tcck.copy_loop: a space and a flat index map on each side";
  let description = [{
    Every point `c` of `shape` copies input `in`'s element at flat index
    `from(c)` into output `out`'s element at flat index `to(c)` (both maps
    have one dimension per dimension of `shape` and one result). A split's
    part or a concat's operand moved through views and transposes is one
    copy: a strided view gives a linear map; a reshape that is not one
    gives the linearise-delinearise form (`floordiv`, `mod`).

        #tcck.copy<in = 0, out = 1, shape = [2, 3],
                   from = (d0, d1) -> (d0 * 6 + d1 + 3), to = (d0, d1) -> (d0 * 3 + d1)>
  }];
  let parameters = (ins "int64_t":$in, "int64_t":$out, "::mlir::DenseI64ArrayAttr":$shape,
                        "::mlir::AffineMap":$from, "::mlir::AffineMap":$to);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Tcck_Buffer : StaticShapeMemRefOf<[AnyType]>;

class Tcck_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tcck_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Where values live
//===----------------------------------------------------------------------===//

def Tcck_ViewOp : Tcck_Op<"view", [Pure]> {
  let summary = "A view of the arena at a byte offset";
  let description = [{
    The bytes of one planned value: `offset` is its slot in the arena
    (tcc-plan-memory's `tcc.offsets`) and the result's element type is how
    it is stored there.

        %0 = tcck.view 1024 : memref<4x64xf32>
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$offset);
  let results = (outs Tcck_Buffer:$result);
  let assemblyFormat = "$offset attr-dict `:` type($result)";
}

def Tcck_GlobalOp : Tcck_Op<"global", [Pure]> {
  let summary = "A constant array in the step's data, outside the arena";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Tcck_Buffer:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tcck_AliasOp : Tcck_Op<"alias", [Pure]> {
  let summary = "The same bytes as another buffer, in another shape";
  let description = [{
    A reshape, squeeze, unsqueeze or identity: no code runs; the result
    names the source's elements in row-major order.
  }];
  let arguments = (ins Tcck_Buffer:$source);
  let results = (outs Tcck_Buffer:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `to` type($result)";
  let hasVerifier = 1;
}

def Tcck_HostViewOp : Tcck_Op<"host_view", [Pure]> {
  let summary = "A view of the step's pinned host buffer at a byte offset (CUDA, offload)";
  let description = [{
    The bytes of a tensor the plan keeps in host memory (`#tcc.tiers`):
    master weights, optimizer state or a gradient accumulator at `offset` in
    the step's pinned host buffer. Only the optimizer's `tcck.update` reads
    such views; kernels never do.

        %0 = tcck.host_view 4096 : memref<64x64xf32>
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$offset);
  let results = (outs Tcck_Buffer:$result);
  let assemblyFormat = "$offset attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// The optimizer (the step's @apply function)
//===----------------------------------------------------------------------===//

def Tcck_UpdateOp : Tcck_Op<"update", [AttrSizedOperandSegments]> {
  let summary = "One trainable parameter's optimizer update";
  let description = [{
    In the step's `@apply` function, which tcc-lower-to-kernels builds from
    the memory plan: the optimizer the runtime names (AdamW with two state
    buffers, SGD with momentum with one) updates `master` from the
    accumulated gradient `grad` and the state, zeroes `grad`, and on CUDA
    writes the new master to its fp16 working copy `half`. A master (and
    its state) made by `tcck.host_view` is updated on the host (tcc
    --offload); a gradient made by `tcck.host_view` was accumulated there.
    `param` is the parameter's index in the step's parameter table (the
    runtime's weight-decay mask is indexed by it).

        tcck.update "wte" param 0 master %0 : memref<64x16xf32>
            grad %1 : memref<64x16xf32>
            state(%2, %3 : memref<64x16xf32>, memref<64x16xf32>)
            half %4 : memref<64x16xf16>
  }];
  let arguments = (ins StrAttr:$name, ConfinedAttr<I64Attr, [IntNonNegative]>:$param,
                       Tcck_Buffer:$master, Tcck_Buffer:$grad, Variadic<Tcck_Buffer>:$state,
                       Optional<Tcck_Buffer>:$half);
  let assemblyFormat = [{
    $name `param` $param `master` $master `:` type($master) `grad` $grad `:` type($grad)
    `state` `(` $state `:` type($state) `)` (`half` $half^ `:` type($half))? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether the master weights and state live in host memory.
    bool onHost();
    /// Whether the gradient was accumulated in host memory.
    bool gradOnHost();
  }];
}

def Tcck_ShardUpdateOp : Tcck_Op<"shard_update"> {
  let summary = "A trainable parameter's place in ZeRO-1's flat space";
  let description = [{
    In a sharded step's `@apply` (`#tcc.shards`, tcc --data-parallel=N):
    the master weights lie at element `flat` of the flat parameter space,
    and the gradient accumulator at the same index of the gradients' flat
    space. Each rank updates the part of the parameter in its chunk, with
    the chunk's state; after the all-gather every rank writes the masters
    to their fp16 working copy `half` (CUDA).

        tcck.shard_update "wte" param 0 master %0 : memref<64x16xf32> flat 0
  }];
  let arguments = (ins StrAttr:$name, ConfinedAttr<I64Attr, [IntNonNegative]>:$param,
                       Tcck_Buffer:$master, ConfinedAttr<I64Attr, [IntNonNegative]>:$flat,
                       Optional<Tcck_Buffer>:$half);
  let assemblyFormat = [{
    $name `param` $param `master` $master `:` type($master) `flat` $flat
    (`half` $half^ `:` type($half))? attr-dict
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Data movement and bookkeeping
//===----------------------------------------------------------------------===//

def Tcck_FillOp : Tcck_Op<"fill"> {
  let summary = "Sets every element to a constant";
  let arguments = (ins Tcck_Buffer:$out, TypedAttrInterface:$value);
  let assemblyFormat = "$out `,` $value attr-dict `:` type($out)";
}

def Tcck_SeedOp : Tcck_Op<"seed"> {
  let summary = "Sets the backward pass's seed, d(loss), to the step's gradient scale";
  let arguments = (ins Tcck_Buffer:$out);
  let assemblyFormat = "$out attr-dict `:` type($out)";
}

def Tcck_CopyOp : Tcck_Op<"copy"> {
  let summary = "Copies a buffer's elements into another of as many";
  let arguments = (ins Tcck_Buffer:$out, Tcck_Buffer:$in);
  let assemblyFormat = "$out `,` $in attr-dict `:` type($out) `,` type($in)";
  let hasVerifier = 1;
}

def Tcck_StoreOp : Tcck_Op<"store"> {
  let summary = "Copies a step result into its result slot";
  let description = [{
    An output of the step (the loss, a model output) is copied, byte for
    byte, into the arena slot the plan gave the function's result.
  }];
  let arguments = (ins Tcck_Buffer:$value, ConfinedAttr<I64Attr, [IntNonNegative]>:$slot);
  let assemblyFormat = "$value `to` `slot` $slot attr-dict `:` type($value)";
}

def Tcck_AccumulateOp : Tcck_Op<"accumulate"> {
  let summary = "Adds a gradient into its accumulator's slot";
  let description = [{
    `acc[i] += value[i]` where `acc` is the gradient accumulator at arena
    offset `slot`, in the value's storage type. tcc-lower-to-kernels places
    it right after the kernel that makes the gradient (or at the end of the
    step), as the plan's liveness assumed.
  }];
  let arguments = (ins Tcck_Buffer:$value, ConfinedAttr<I64Attr, [IntNonNegative]>:$slot);
  let assemblyFormat = "$value `into` `slot` $slot attr-dict `:` type($value)";
}

def Tcck_HostAccumulateOp : Tcck_Op<"host_accumulate"> {
  let summary = "Sends a gradient to its accumulator in host memory (CUDA, offload)";
  let description = [{
    A gradient whose accumulator the plan keeps in pinned host memory
    (`#tcc.tiers` host_grads) at byte offset `host_slot` of the host buffer.
    The CUDA step queues the copy to the host on its copy stream as soon as
    the gradient is made; the fixed half adds each micro-step's copies into
    the host accumulators when the micro-step ends. `copy` numbers the
    copies in the order the step queues them; a later `tcck.wait_host_copy`
    of the same number makes the step's stream wait for the copy before the
    plan reuses the value's buffer.

        tcck.host_accumulate %3 to host_slot 4096 copy 0 : memref<64x64xf16>
  }];
  let arguments = (ins Tcck_Buffer:$value, ConfinedAttr<I64Attr, [IntNonNegative]>:$host_slot,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$copy);
  let assemblyFormat = "$value `to` `host_slot` $host_slot `copy` $copy attr-dict `:` type($value)";
}

def Tcck_WaitHostCopyOp : Tcck_Op<"wait_host_copy"> {
  let summary = "The step's stream waits for a copy to the host";
  let description = [{
    Placed by tcc-lower-to-kernels kHostCopyLagOps ops after the
    `tcck.host_accumulate` numbered `copy`, where the memory plan stops
    keeping its buffer live.
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$copy);
  let assemblyFormat = "$copy attr-dict";
}

def Tcck_SwapOutOp : Tcck_Op<"swap_out"> {
  let summary = "Copies a saved activation to host memory (CUDA, activation swapping)";
  let description = [{
    Queues the copy of `value` to byte offset `host_slot` of the pinned host
    buffer on the step's copy-out stream, after the work queued so far;
    `tcck.wait_swap_out` of the same `swap` makes the step's stream wait for
    it before the plan reuses the buffer. `swap` numbers the swaps in the
    order their copies out are queued (tcc.swap_out).

        tcck.swap_out %3 to host_slot 0 swap 0 : memref<4x64xf16>
  }];
  let arguments = (ins Tcck_Buffer:$value, ConfinedAttr<I64Attr, [IntNonNegative]>:$host_slot,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$swap);
  let assemblyFormat = "$value `to` `host_slot` $host_slot `swap` $swap attr-dict `:` type($value)";
}

def Tcck_SwapInOp : Tcck_Op<"swap_in"> {
  let summary = "Copies a swapped activation back from host memory (CUDA, activation swapping)";
  let description = [{
    Queues the copy of the host bytes at `host_slot` into `value` on the
    step's copy-in stream, after the work queued so far (the buffer's last
    other use); `tcck.wait_swap_in` of the same `swap` makes the step's
    stream wait for it before the first reader.

        tcck.swap_in %7 from host_slot 0 swap 0 : memref<4x64xf16>
  }];
  let arguments = (ins Tcck_Buffer:$value, ConfinedAttr<I64Attr, [IntNonNegative]>:$host_slot,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$swap);
  let assemblyFormat = "$value `from` `host_slot` $host_slot `swap` $swap attr-dict `:` type($value)";
}

def Tcck_WaitSwapOutOp : Tcck_Op<"wait_swap_out"> {
  let summary = "The step's stream waits for a swap's copy to the host";
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$swap);
  let assemblyFormat = "$swap attr-dict";
}

def Tcck_WaitSwapInOp : Tcck_Op<"wait_swap_in"> {
  let summary = "The step's stream waits for a swap's copy back to the device";
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$swap);
  let assemblyFormat = "$swap attr-dict";
}

def Tcck_AwaitWeightsOp : Tcck_Op<"await_weights"> {
  let summary = "The step's stream waits for a parameter's new fp16 copy from the host update (CUDA, offload)";
  let description = [{
    The optimizer update of the parameters whose masters live in host
    memory (`#tcc.tiers`) may still run on the host when the next
    micro-step starts: it goes on, parameter by parameter, while the device
    runs the micro-step's first kernels. Placed by tcc-lower-to-kernels
    before the first op that reads parameter `param`'s fp16 working copy:
    the update runs at least as far as that parameter, and the step's
    stream waits for its upload. Does nothing when no update is in flight.

        tcck.await_weights "wte" param 0
  }];
  let arguments = (ins StrAttr:$name, ConfinedAttr<I64Attr, [IntNonNegative]>:$param);
  let assemblyFormat = "$name `param` $param attr-dict";
}

def Tcck_AwaitUpdateOp : Tcck_Op<"await_update"> {
  let summary = "The step's stream waits for the whole host update (CUDA, offload)";
  let description = [{
    Placed by tcc-lower-to-kernels before the first op that touches a
    gradient accumulator (the update reads and zeroes them): the host
    update in flight, if any, runs to its end, and the step's stream waits
    for its last copies.
  }];
  let assemblyFormat = "attr-dict";
}

def Tcck_GradReadyOp : Tcck_Op<"grad_ready"> {
  let summary = "Hands a finished gradient accumulator to the data-parallel all-reduce (CUDA)";
  let description = [{
    After the last write of the fp32 accumulator at arena offset `slot`
    (`elements` long) in the micro-step: the all-reduce may sum it across
    ranks while the backward pass goes on (runtime/cuda/comm.cuh). With one
    rank it does nothing.
  }];
  let arguments = (ins ConfinedAttr<I64Attr, [IntNonNegative]>:$slot,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$elements);
  let assemblyFormat = "`slot` $slot `elements` $elements attr-dict";
}

def Tcck_AdvanceRngOp : Tcck_Op<"advance_rng"> {
  let summary = "Advances the step's random state (dropout) for the next micro-step";
  let arguments = (ins MemRefOf<[I64]>:$state);
  let assemblyFormat = "$state attr-dict `:` type($state)";
}

def Tcck_MarkOp : Tcck_Op<"mark", [AttrSizedOperandSegments]> {
  let summary = "Ends an entry of the step's op table";
  let description = [{
    The op table (tcc_step_info.ops, `tcc-run --trace`) has one entry per
    tcc op that ran code: `label` says what it is (the op, a fusion's ops,
    the ONNX nodes it came from) and `live` the plan's arena bytes live
    while it runs. The k-th mark ends entry k-1.

    `ins` are the buffers the op read and `outs` those it wrote, as the
    lowering replaced them: the step's value table (tcc_step_op_values,
    `tcc-run --check-numerics`) lists those in the arena, so the runtime can
    look at an op's results, and at its operands, right after it ran. The
    mark only names them: it reads and writes nothing.
  }];
  let arguments = (ins StrAttr:$label, I64Attr:$live, Variadic<Tcck_Buffer>:$ins,
                       Variadic<Tcck_Buffer>:$outs);
  let assemblyFormat = [{
    $label `live` $live (`ins` `(` $ins^ `:` type($ins) `)`)?
    (`outs` `(` $outs^ `:` type($outs) `)`)? attr-dict
  }];
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

def Tcck_ElementwiseOp : Tcck_Op<"ew"> {
  let summary = "An unfused elementwise kernel with NumPy broadcasting";
  let description = [{
    `kind` names the computation (tcc's EwKind: "Add", "Sqrt", ...), as the
    runtime's `binary` and `unary` kernels take it.
  }];
  let arguments = (ins StrAttr:$kind, Tcck_Buffer:$out, Variadic<Tcck_Buffer>:$ins);
  let assemblyFormat = "$kind $out `,` $ins attr-dict `:` type($out) `,` type($ins)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The computation (the verifier checks that `kind` names one).
    ::mlir::tcc::EwKind getEwKind() { return *::mlir::tcc::symbolizeEwKind(getKind()); }
  }];
}


def Tcck_CallOp : Tcck_Op<"call", [AttrSizedOperandSegments]> {
  let summary = "A library kernel";
  let description = [{
    One call of a runtime library kernel: `outs` are written, `ins` read,
    and `options` hold what the kernel needs besides its buffers (an axis,
    a reduction mask, epsilon, ...), as the lowering resolved them.

        tcck.call softmax outs(%1 : memref<4x8xf32>) ins(%0 : memref<4x8xf32>)
            {axis = 1 : i64, log = false}
  }];
  let arguments = (ins Tcck_LibraryCall:$callee, Variadic<Tcck_Buffer>:$outs,
                       Variadic<Tcck_Buffer>:$ins, DictionaryAttr:$options);
  let assemblyFormat = [{
    $callee (`outs` `(` $outs^ `:` type($outs) `)`)? (`ins` `(` $ins^ `:` type($ins) `)`)?
    $options attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether the kernel returns an error code (an index out of range).
    bool canFail();
  }];
}

def Tcck_YieldOp : Tcck_Op<"yield", [Pure, Terminator, ReturnLike]> {
  let summary = "The element values a fused kernel writes, one per output";
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

def Tcck_MatMulOp : Tcck_Op<"matmul", [AttrSizedOperandSegments]> {
  let summary = "A GEMM, with an optional elementwise epilogue";
  let description = [{
    `outs[0] = op(lhs) x op(rhs)` with NumPy matmul batching. With an
    epilogue, the region computes each output element from the product's
    (its first argument, a scalar) and one element of each of
    `epilogue_ins` (the next arguments), read through its map in
    `epilogue_maps` from the outputs' space (their common shape), with the
    scalar ops of tcck.loop's body; it yields one scalar per output. On the
    CUDA target `cublaslt` records what cuBLASLt's epilogue computes. With
    `accumulate` (CUDA: a weight's gradient, accumulatedInPlace), the
    product is added into `outs[0]`, the gradient's fp32 accumulator.

        tcck.matmul outs(%y : memref<4x8xf16>) ins(%x, %w : memref<4x16xf16>, memref<16x8xf16>)
            epilogue(%b : memref<8xf16>) maps [affine_map<(d0, d1) -> (d1)>] {
        ^bb0(%p: f32, %c: f32):
          %s = tcck.scalar "Add" %p, %c : (f32, f32) -> f32
          tcck.yield %s : f32
        } {trans_lhs = false, trans_rhs = false}
  }];
  let arguments = (ins Variadic<Tcck_Buffer>:$outs, Tcck_Buffer:$lhs, Tcck_Buffer:$rhs,
                       Variadic<Tcck_Buffer>:$epilogue_ins,
                       BoolAttr:$trans_lhs, BoolAttr:$trans_rhs, UnitAttr:$accumulate,
                       OptionalAttr<AffineMapArrayAttr>:$epilogue_maps,
                       OptionalAttr<Tcck_CublasLtAttr>:$cublaslt);
  let regions = (region AnyRegion:$epilogue);
  let assemblyFormat = [{
    `outs` `(` $outs `:` type($outs) `)` `ins` `(` $lhs `,` $rhs `:` type($lhs) `,` type($rhs) `)`
    (`epilogue` `(` $epilogue_ins^ `:` type($epilogue_ins) `)` `maps` $epilogue_maps $epilogue)?
    attr-dict
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The map of epilogue input `k`.
    ::mlir::AffineMap getEpilogueMap(unsigned k) {
      return ::llvm::cast<::mlir::AffineMapAttr>((*getEpilogueMaps())[k]).getValue();
    }
  }];
}

def Tcck_LoopOp : Tcck_Op<"loop", [AttrSizedOperandSegments]> {
  let summary = "A fused elementwise or reduction kernel";
  let description = [{
    One loop nest over `space`, with a scalar body. `indexing_maps` has one
    map per input and then one per output, from a point of the space to the
    element of that buffer it reads or writes (as linalg.generic's): a
    result of a map is a dimension of the space, or 0 for a dimension of
    size 1 (a broadcast). An output's map may drop dimensions: a reduction
    across rows writes each element once per reduced point. The body gets
    one scalar per input, computes with the scalar ops of this dialect
    (tcck.scalar, tcck.select, tcck.convert, tcck.gelu, tcck.gelu_grad,
    tcck.reduce) and yields one scalar per output.

    tcc-lower-to-kernels records the loop's structure: `rows` when the nest
    is a loop over rows of the last dimension with `passes` passes over each
    row, and on every body op `tcck.role` (an element of the space, a row
    value, a row reduction or a reduction across rows) and `tcck.stage` (the
    pass that computes it; a reduction's, the pass that reads its operand).

        tcck.loop ins(%x, %b : memref<4x8xf16>, memref<8xf16>) outs(%y : memref<4x8xf16>)
            space [4, 8] rows false passes 0
            maps [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>,
                  affine_map<(d0, d1) -> (d0, d1)>] {
        ^bb0(%a: f32, %c: f32):
          %s = tcck.scalar "Add" %a, %c {tcck.role = "element", tcck.stage = 0 : i64} : (f32, f32) -> f32
          tcck.yield %s : f32
        }
  }];
  let arguments = (ins Variadic<Tcck_Buffer>:$ins, Variadic<Tcck_Buffer>:$outs,
                       DenseI64ArrayAttr:$space, BoolAttr:$rows, I64Attr:$passes,
                       AffineMapArrayAttr:$indexing_maps);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `ins` `(` ($ins^ `:` type($ins))? `)` `outs` `(` $outs `:` type($outs) `)`
    `space` $space `rows` $rows `passes` $passes `maps` $indexing_maps $body attr-dict
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The map of input `k` (k < number of inputs) or of output
    /// `k - number of inputs`.
    ::mlir::AffineMap getMap(unsigned k) {
      return ::llvm::cast<::mlir::AffineMapAttr>(getIndexingMaps()[k]).getValue();
    }
    ::mlir::AffineMap getInputMap(unsigned k) { return getMap(k); }
    ::mlir::AffineMap getOutputMap(unsigned k) { return getMap(getIns().size() + k); }
  }];
}

//===----------------------------------------------------------------------===//
// The scalar body of a fused loop
//===----------------------------------------------------------------------===//

def Tcck_Scalar : AnyTypeOf<[AnyFloat, AnyInteger]>;

// An op of a tcck.loop's body or a tcck.matmul's epilogue: it computes one
// element (or one row value) from scalars.
class Tcck_ScalarOp<string mnemonic, list<Trait> traits = []>
    : Tcck_Op<mnemonic, !listconcat([Pure, ParentOneOf<["LoopOp", "MatMulOp"]>], traits)>;

def Tcck_ScalarEwOp : Tcck_ScalarOp<"scalar"> {
  let summary = "An elementwise computation on scalars";
  let description = [{
    `kind` names the computation (tcc's EwKind: "Add", "Exp", ...); binary
    kinds take two operands, the others one. "Identity" is its operand.

        %s = tcck.scalar "Mul" %a, %b : (f32, f32) -> f32
  }];
  let arguments = (ins StrAttr:$kind, Variadic<Tcck_Scalar>:$operands);
  let results = (outs Tcck_Scalar:$result);
  let assemblyFormat = "$kind $operands attr-dict `:` functional-type($operands, $result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The computation (the verifier checks that `kind` names one).
    ::mlir::tcc::EwKind getEwKind() { return *::mlir::tcc::symbolizeEwKind(getKind()); }
  }];
}

def Tcck_SelectOp : Tcck_ScalarOp<"select", [AllTypesMatch<["x", "y", "result"]>]> {
  let summary = "`condition ? x : y` (ONNX Where, on one element)";
  let arguments = (ins I1:$condition, Tcck_Scalar:$x, Tcck_Scalar:$y);
  let results = (outs Tcck_Scalar:$result);
  let assemblyFormat = "$condition `,` $x `,` $y attr-dict `:` type($result)";
}

def Tcck_ConvertOp : Tcck_ScalarOp<"convert"> {
  let summary = "A scalar in another type (ONNX Cast, on one element)";
  let description = [{
    Floats to integers truncate toward zero; anything to `i1` tests for
    non-zero.
  }];
  let arguments = (ins Tcck_Scalar:$input);
  let results = (outs Tcck_Scalar:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
}

def Tcck_GeluOp : Tcck_ScalarOp<"gelu", [SameOperandsAndResultType]> {
  let summary = "GELU of a scalar: exact (erf), or the tanh approximation with `tanh`";
  let arguments = (ins AnyFloat:$input, UnitAttr:$tanh);
  let results = (outs AnyFloat:$result);
  let assemblyFormat = "$input (`tanh` $tanh^)? attr-dict `:` type($result)";
}

def Tcck_GeluGradOp : Tcck_ScalarOp<"gelu_grad", [SameOperandsAndResultType]> {
  let summary = "The gradient through GELU: `grad * gelu'(input)`";
  let arguments = (ins AnyFloat:$grad, AnyFloat:$input, UnitAttr:$tanh);
  let results = (outs AnyFloat:$result);
  let assemblyFormat = "$grad `,` $input (`tanh` $tanh^)? attr-dict `:` type($result)";
}

def Tcck_ReduceOp : Tcck_ScalarOp<"reduce", [SameOperandsAndResultType]> {
  let summary = "A sum or mean of the loop's values over dimensions of its space";
  let description = [{
    Sums (or averages, with `mean`) `input` over the dimensions `dims` of
    the loop's space. A row reduction (`tcck.role = "row_reduction"`)
    reduces the last dimension, and its result is a row value the next
    pass reads; a reduction across rows (`"reduction"`) is yielded, and its
    output's map drops or zeroes the reduced dimensions.

        %m = tcck.reduce %x dims [1] mean {tcck.role = "row_reduction", tcck.stage = 0 : i64} : f32
  }];
  let arguments = (ins AnyFloat:$input, DenseI64ArrayAttr:$dims, UnitAttr:$mean);
  let results = (outs AnyFloat:$result);
  let assemblyFormat = "$input `dims` $dims (`mean` $mean^)? attr-dict `:` type($result)";
}

def Tcck_CopyLoopOp : Tcck_Op<"copy_loop", [AttrSizedOperandSegments]> {
  let summary = "A fused data-movement kernel: a split or a concat through views and transposes";
  let description = [{
    Copies elements of `ins` into `outs`, one `#tcck.copy` at a time; the
    copies together write every element of every output once. The head
    split of attention (a split into Q, K and V, each reshaped and
    transposed) is one copy per part; a concat is one copy per operand.
    The maps are what tcc-lower-to-kernels worked out from the fusion's
    views: a strided view where the chain is one (the CPU emitter writes a
    loop nest of strided reads and writes), the general form otherwise.

        tcck.copy_loop ins(%x : memref<2x6xf32>) outs(%a, %b : memref<2x3xf32>, memref<2x3xf32>)
          [#tcck.copy<in = 0, out = 0, shape = [2, 3],
                      from = (d0, d1) -> (d0 * 6 + d1), to = (d0, d1) -> (d0 * 3 + d1)>,
           #tcck.copy<in = 0, out = 1, shape = [2, 3],
                      from = (d0, d1) -> (d0 * 6 + d1 + 3), to = (d0, d1) -> (d0 * 3 + d1)>]
  }];
  let arguments = (ins Variadic<Tcck_Buffer>:$ins, Variadic<Tcck_Buffer>:$outs,
                       TypedArrayAttrBase<Tcck_CopyAttr, "copies">:$copies);
  let assemblyFormat = [{
    `ins` `(` $ins `:` type($ins) `)` `outs` `(` $outs `:` type($outs) `)` $copies attr-dict
  }];
  let hasVerifier = 1;
}

#endif // TCC_KERNEL_TCCKOPS_TD

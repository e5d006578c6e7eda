//===- TccSwapOps.td - activation swapping ops of the tcc dialect -*- tablegen -*-===//
//
// Included by TccOps.td (one op library); their verifiers are in
// TccSwapOps.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_DIALECT_TCCSWAPOPS_TD
#define TCC_DIALECT_TCCSWAPOPS_TD

//===----------------------------------------------------------------------===//
// Activation swapping (CUDA): a saved activation copied to host memory after
// the forward pass makes it and back before the backward pass reads it,
// instead of being recomputed (tcc-swap-activations)
//===----------------------------------------------------------------------===//

def Tcc_SwapOutOp : Op<Tcc_Dialect, "swap_out",
                       [MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["value", "host"]>]> {
  let summary = "Copies a forward value to host memory (CUDA, activation swapping)";
  let description = [{
    Queues the copy of `value`'s bytes to the pinned host buffer, on a copy
    stream, as soon as the op that makes it is queued. `host` is the value
    as it lies in host memory: the memory plan gives it no device buffer
    but a place in the host buffer (`tcc.host_offset`), and only
    `tcc.swap_in` ops of the same `swap` read it. A `tcc.swap_wait` of
    `value` later in the step marks where the copy must be done: `value`'s
    device buffer lives until there.

    ```mlir
    %h = tcc.swap_out %x swap 0 : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$value, ConfinedAttr<I64Attr, [IntNonNegative]>:$swap);
  let results = (outs Tcc_Tensor:$host);
  let assemblyFormat = "$value `swap` $swap attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Tcc_SwapInOp : Op<Tcc_Dialect, "swap_in",
                      [MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["host", "value"]>]> {
  let summary = "Copies a swapped value back from host memory (CUDA, activation swapping)";
  let description = [{
    Queues the copy of the host bytes `tcc.swap_out` of the same `swap`
    made back into a device buffer of its own, on a copy stream; a
    `tcc.swap_wait` of the result before its first reader makes the step
    wait for it.

    ```mlir
    %y = tcc.swap_in %h swap 0 : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$host, ConfinedAttr<I64Attr, [IntNonNegative]>:$swap);
  let results = (outs Tcc_Tensor:$value);
  let assemblyFormat = "$host `swap` $swap attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Tcc_SwapWaitOp : Op<Tcc_Dialect, "swap_wait", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "The step waits for a swap's copy (CUDA, activation swapping)";
  let description = [{
    With the operand of the `tcc.swap_out` numbered `swap`: the copy to the
    host must be done here (the value's device buffer may be reused after).
    With the result of the `tcc.swap_in` numbered `swap`: the copy back
    must be done here, before the value's first reader.

    ```mlir
    tcc.swap_wait %x swap 0 : tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Tcc_Tensor:$value, ConfinedAttr<I64Attr, [IntNonNegative]>:$swap);
  let assemblyFormat = "$value `swap` $swap attr-dict `:` type($value)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether this waits for the copy back (tcc.swap_in), not the copy out.
    bool isSwapIn() { return isa_and_nonnull<SwapInOp>(getValue().getDefiningOp()); }
  }];
}

#endif // TCC_DIALECT_TCCSWAPOPS_TD

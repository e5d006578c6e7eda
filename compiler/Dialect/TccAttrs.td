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
    "int64_t":$workspace_bytes
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let extraClassDeclaration = [{
    /// The layout on a planned step function, or null before tcc-plan-memory.
    static LayoutAttr of(::mlir::Operation *func) {
      return func->getAttrOfType<LayoutAttr>("tcc.layout");
    }
  }];
}

#endif // TCC_DIALECT_TCCATTRS_TD

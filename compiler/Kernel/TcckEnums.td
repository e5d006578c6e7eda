//===- TcckEnums.td - enums of the kernel-level dialect ----*- tablegen -*-===//
//
// Kept apart from TcckOps.td, which includes tcc's enums (EwKind), so that
// the enum generator emits only these.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_KERNEL_TCCKENUMS_TD
#define TCC_KERNEL_TCCKENUMS_TD

include "mlir/IR/EnumAttr.td"

// The library kernels of the runtime (runtime/cpu/kernels.h and the CUDA
// library), by name. Each has a fixed number of inputs and outputs and the
// options it needs (TcckOps.cpp, `libraryCallSignature`).
def Tcck_LibraryCall : I32EnumAttr<"LibraryCall", "a runtime library kernel", [
    I32EnumAttrCase<"Gelu", 0, "gelu">,
    I32EnumAttrCase<"GeluGrad", 1, "gelu_grad">,
    I32EnumAttrCase<"Cast", 2, "cast">,
    I32EnumAttrCase<"Where", 3, "where">,
    I32EnumAttrCase<"Softmax", 4, "softmax">,
    I32EnumAttrCase<"LayerNorm", 5, "layer_norm">,
    I32EnumAttrCase<"Reduce", 6, "reduce">,
    I32EnumAttrCase<"Gather", 7, "gather">,
    I32EnumAttrCase<"GatherGrad", 8, "gather_grad">,
    I32EnumAttrCase<"Transpose", 9, "transpose">,
    I32EnumAttrCase<"Slice", 10, "slice">,
    I32EnumAttrCase<"SliceGrad", 11, "slice_grad">,
    I32EnumAttrCase<"Concat", 12, "concat">,
    I32EnumAttrCase<"BroadcastTo", 13, "broadcast_to">,
    I32EnumAttrCase<"RandomKeep", 14, "random_keep">,
    I32EnumAttrCase<"Gemm", 15, "gemm">,
    I32EnumAttrCase<"SceLoss", 16, "sce_loss">,
    I32EnumAttrCase<"SceLossWithGrad", 17, "sce_loss_with_grad">,
    I32EnumAttrCase<"SceLossGrad", 18, "sce_loss_grad">,
    I32EnumAttrCase<"AttentionForward", 19, "attention_forward">,
    I32EnumAttrCase<"AttentionBackward", 20, "attention_backward">
  ]> {
  let cppNamespace = "::mlir::tcck";
}

def Tcck_LoopRole : I32EnumAttr<"LoopRole", "what a fused loop's body op computes", [
    I32EnumAttrCase<"Element", 0, "element">,
    I32EnumAttrCase<"Row", 1, "row">,
    I32EnumAttrCase<"RowReduction", 2, "row_reduction">,
    I32EnumAttrCase<"Reduction", 3, "reduction">
  ]> {
  let cppNamespace = "::mlir::tcck";
}

#endif // TCC_KERNEL_TCCKENUMS_TD

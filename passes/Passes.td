//===- Passes.td - tcc passes ----------------------------*- tablegen -*-===//

#ifndef TCC_PASSES_PASSES_TD
#define TCC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def CheckImportContract : Pass<"tcc-check-import-contract", "ModuleOp"> {
  let summary = "Checks that a module is what the importer promises later stages";
  let description = [{
    The contract between the importer and the rest of the pipeline; it runs
    right after import (the `tcc` driver runs it) and can run on any
    hand-written module in tests. It holds when:

    - the module has exactly one `func.func` (the model) with a body;
    - every argument carries exactly one of `tcc.param = "<name>"` (a
      floating-point tensor) or `tcc.input = "<name>"`, and the names are
      unique across both; every result carries `tcc.output = "<name>"`;
    - every op in the body is a `tcc` op or the terminator, and every tensor
      has a static shape.

    It changes nothing. A module that breaks the contract gets one error per
    problem, on the offending op or function, and the pass fails:

    ```mlir
    // error: argument 0 of @main has neither tcc.param nor tcc.input
    func.func @main(%arg0: tensor<4xf32>) -> (tensor<4xf32> {tcc.output = "y"})
    ```
  }];
  let dependentDialects = ["::mlir::tcc::TccDialect", "::mlir::func::FuncDialect"];
}

#endif // TCC_PASSES_PASSES_TD

//===- FusedLoopWriter.h - one walk of a fused loop, each target's text -*- C++ -*-===//
//
// A fused loop (tcck.loop) with row reductions runs in stages: pass k over
// the row computes what the row reductions of stage k need, each row
// statistic is complete after its pass, and the ops that read it run in a
// later pass (LoopFusion, passes/fusion/LoopStructure.h). The order in
// which values are computed, loaded, accumulated and stored is the same on
// every target; only the text differs (a loop nest on the CPU, a warp or a
// block per row on CUDA, with 8-wide loads and stores). FusedLoopWriter
// walks that structure once, and each target's emitter derives from it and
// writes the text: CpuEmitter::LoopWriter, CudaEmitter::RowLoopWriter.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_CODEGEN_FUSEDLOOPWRITER_H
#define TCC_CODEGEN_FUSEDLOOPWRITER_H

#include "compiler/Kernel/TcckOps.h"
#include "passes/fusion/LoopStructure.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir::tcc::codegen {

class FusedLoopWriter {
public:
  using Kind = LoopFusion::Kind;
  virtual ~FusedLoopWriter() = default;

  /// The passes over the loop's space (over each row, with row reductions):
  /// the row values of stage 0, each pass and the row values it completes.
  /// Written inside the target's loop over rows (or, without row
  /// reductions, alone).
  LogicalResult writePasses();

protected:
  FusedLoopWriter(tcck::LoopOp loop, const LoopFusion &lf, llvm::raw_ostream &out);

  // ---- The target's text. ----
  /// A new local's name: `prefix` and a number.
  virtual std::string fresh(StringRef prefix) = 0;
  /// The C++ type fused code computes `elt` in.
  virtual std::string computeType(Type elt) = 0;
  /// `op` as the local `name`, over the scalars in `scalar`, which gets its
  /// result (Emitter::scalarLocal).
  virtual LogicalResult local(Operation &op, llvm::DenseMap<Value, std::string> &scalar,
                              const std::string &name, StringRef indent) = 0;
  /// The row statistic of row reduction `op` (typed `ty`) from its
  /// accumulator `acc`: a sum, or a mean over the row.
  virtual std::string rowStatistic(Operation &op, const std::string &acc,
                                   const std::string &ty) = 0;
  /// The element of body argument `arg` at index `at` (a C++ expression).
  virtual std::string load(Value arg, const std::string &at) = 0;
  /// Stores the row value `x` of `r`, a result of the loop.
  virtual void storeRow(Value r, const std::string &x) = 0;
  /// Declares the accumulator `acc` of a row reduction of this pass.
  virtual void declareRowAccumulator(const std::string &acc) = 0;
  /// Opens the loop over the pass's elements (a row's columns) and loads the
  /// body arguments it reads (`needed`) into `scalar`; returns the indent
  /// of the loop's body.
  virtual std::string openElements(const llvm::DenseSet<Value> &needed,
                                   llvm::DenseMap<Value, std::string> &scalar) = 0;
  /// Stores the element `x` of `r`, a result of the loop computed in this
  /// pass.
  virtual void storeElement(Value r, const std::string &x, StringRef indent) = 0;
  /// Adds `x` into the accumulator of reduction `op` (a row reduction's
  /// rowAcc, or a reduction across the whole loop).
  virtual void accumulate(Operation &op, const std::string &x, StringRef indent) = 0;
  /// Closes the loop over the pass's elements; `reductions`: the row
  /// reductions whose accumulators it added into.
  virtual void closeElements(ArrayRef<Operation *> reductions) = 0;

  // ---- For the targets. ----
  /// Where an element of body argument `v` is read (its input's indexing
  /// map): without row reductions its index at `i`; else its row start
  /// (declared once, named per argument) plus the column `c` when it is
  /// read along the row.
  std::string elementIndex(Value v);
  /// Whether body argument `arg` is read along the row (else once per row).
  bool alongRow(Value arg);
  /// `op`'s value as a new local, from the scalars in `scalar`.
  LogicalResult compute(Operation &op, llvm::DenseMap<Value, std::string> &scalar,
                        StringRef indent);
  bool isResult(Value v) const { return resultIndex.count(v) != 0; }
  Kind kindOf(Operation &op) const { return lf.kind.lookup(&op); }
  int64_t stageOf(Value v) const { return lf.stage.lookup(v); }

  tcck::LoopOp loop;
  Block &body;
  const LoopFusion &lf;
  llvm::raw_ostream &out;
  ArrayRef<int64_t> shape;
  SmallVector<int64_t> outStrides;
  int64_t elements, rowLength, rowCount;
  /// The loop result each yielded value is stored into.
  llvm::DenseMap<Value, unsigned> resultIndex;
  /// The pass being written.
  int64_t pass = 0;
  llvm::DenseMap<Value, std::string> rowScalar; // this row's row values
  llvm::DenseMap<Operation *, std::string> rowAcc;
  llvm::DenseMap<Value, std::string> rowBase;

private:
  /// The row values of stage `k`: the row reductions that complete at `k`
  /// and the row ops over them.
  LogicalResult rowValues(int64_t k);
  LogicalResult writePass();
};

} // namespace mlir::tcc::codegen

#endif // TCC_CODEGEN_FUSEDLOOPWRITER_H

//===- FusedLoopWriter.cpp - one walk of a fused loop ---------------------===//

#include "codegen/FusedLoopWriter.h"
#include "codegen/EmitterImpl.h"

using namespace mlir;
using namespace mlir::tcc;
using namespace mlir::tcc::codegen;

FusedLoopWriter::FusedLoopWriter(tcck::LoopOp loop, const LoopFusion &lf, llvm::raw_ostream &out)
    : loop(loop), body(loop.getBody().front()), lf(lf), out(out), shape(lf.shape) {
  elements = ShapedType::getNumElements(shape);
  rowLength = lf.rows ? shape.back() : elements;
  rowCount = lf.rows ? elements / std::max<int64_t>(rowLength, 1) : 1;
  outStrides.assign(shape.size(), 1);
  for (int64_t d = (int64_t)shape.size() - 2; d >= 0; --d)
    outStrides[d] = outStrides[d + 1] * shape[d + 1];
  for (auto [k, v] : llvm::enumerate(body.getTerminator()->getOperands()))
    resultIndex[v] = k;
}

std::string FusedLoopWriter::elementIndex(Value v) {
  unsigned k = cast<BlockArgument>(v).getArgNumber();
  if (!lf.rows)
    return loopInputIndex(loop, k, outStrides);
  std::string &base = rowBase[v];
  if (base.empty()) {
    base = fresh("b");
    auto buffer = cast<MemRefType>(loop.getIns()[k].getType());
    out << "    const int64_t " << base << " = "
        << mapIndexOf(loop.getInputMap(k), buffer.getShape(), shape, outStrides, "row0")
        << ";\n";
  }
  return alongRow(v) ? base + " + c" : base;
}

bool FusedLoopWriter::alongRow(Value arg) {
  return readsAlongLast(loop.getInputMap(cast<BlockArgument>(arg).getArgNumber()), shape);
}

LogicalResult FusedLoopWriter::compute(Operation &op, llvm::DenseMap<Value, std::string> &scalar,
                                       StringRef indent) {
  return local(op, scalar, fresh("e"), indent);
}

LogicalResult FusedLoopWriter::rowValues(int64_t k) {
  for (Operation &op : body.without_terminator()) {
    Kind kd = kindOf(op);
    Value r = op.getResult(0);
    if ((kd != Kind::Row && kd != Kind::RowReduction) || stageOf(r) != k)
      continue;
    if (kd == Kind::RowReduction) {
      std::string ty = computeType(r.getType());
      std::string name = fresh("s");
      out << "    const " << ty << " " << name << " = " << rowStatistic(op, rowAcc[&op], ty)
          << ";\n";
      rowScalar[r] = name;
    } else {
      // The body arguments a row op reads are read once per row.
      llvm::DenseMap<Value, std::string> scalar = rowScalar;
      for (Value v : op.getOperands())
        if (isa<BlockArgument>(v) && !scalar.count(v)) {
          std::string name = fresh("e");
          std::string at = elementIndex(v);
          out << "    const " << computeType(v.getType()) << " " << name
              << " = " << load(v, at) << ";\n";
          rowScalar[v] = name;
          scalar[v] = name;
        }
      if (failed(compute(op, scalar, "    ")))
        return failure();
      rowScalar[r] = scalar[r];
    }
    if (isResult(r))
      storeRow(r, rowScalar[r]);
  }
  return success();
}

LogicalResult FusedLoopWriter::writePass() {
  // Values of earlier passes are recomputed: nothing is kept between passes
  // but the row values, so the fusion writes only its results.
  llvm::DenseSet<Value> needed =
      passValues(body, lf, pass, [&](Value v) { return isResult(v); });
  if (needed.empty())
    return success();
  SmallVector<Operation *> reductions;
  for (Operation &op : body.without_terminator())
    if (kindOf(op) == Kind::RowReduction && stageOf(op.getOperand(0)) == pass) {
      rowAcc[&op] = fresh("r");
      declareRowAccumulator(rowAcc[&op]);
      reductions.push_back(&op);
    }
  // Row starts of the arguments read in this pass, before the loop.
  if (lf.rows)
    for (Value arg : body.getArguments())
      if (needed.contains(arg))
        (void)elementIndex(arg);
  llvm::DenseMap<Value, std::string> scalar = rowScalar;
  std::string indent = openElements(needed, scalar);
  for (Operation &op : body.without_terminator()) {
    Kind kd = kindOf(op);
    Value r = op.getResult(0);
    if (kd == Kind::Element && needed.contains(r)) {
      if (failed(compute(op, scalar, indent)))
        return failure();
      if (stageOf(r) == pass && isResult(r))
        storeElement(r, scalar[r], indent);
    } else if ((kd == Kind::RowReduction || kd == Kind::Reduction) &&
               stageOf(op.getOperand(0)) == pass) {
      accumulate(op, scalar.lookup(op.getOperand(0)), indent);
    }
  }
  closeElements(reductions);
  return success();
}

LogicalResult FusedLoopWriter::writePasses() {
  if (failed(rowValues(0)))
    return failure();
  for (pass = 0; pass <= lf.lastPass; ++pass) {
    if (pass > 0 && failed(rowValues(pass)))
      return failure();
    if (failed(writePass()))
      return failure();
  }
  return rowValues(lf.lastPass + 1);
}

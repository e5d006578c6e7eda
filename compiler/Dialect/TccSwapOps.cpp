//===- TccSwapOps.cpp - verifiers of the activation swapping ops ----------===//
//
// tcc.swap_out, tcc.swap_in and tcc.swap_wait (TccSwapOps.td), which
// tcc-swap-activations places and tcc-plan-memory gives host memory.
//
//===----------------------------------------------------------------------===//

#include "compiler/Dialect/TccOps.h"

using namespace mlir;
using namespace mlir::tcc;

LogicalResult SwapOutOp::verify() {
  for (Operation *user : getHost().getUsers()) {
    auto in = dyn_cast<SwapInOp>(user);
    if (!in || in.getSwap() != getSwap())
      return emitOpError("swap ") << getSwap() << " is read by " << user->getName()
                                  << "; only tcc.swap_in ops of the same swap may read it";
  }
  return success();
}

LogicalResult SwapInOp::verify() {
  auto out = getHost().getDefiningOp<SwapOutOp>();
  if (!out || out.getSwap() != getSwap())
    return emitOpError("swap ") << getSwap()
                                << " reads a value that no tcc.swap_out of the same swap made";
  // The copy back reads what the copy out wrote: its wait comes first.
  for (Operation *user : out.getValue().getUsers())
    if (auto wait = dyn_cast<SwapWaitOp>(user);
        wait && wait.getSwap() == getSwap() && wait->getBlock() == (*this)->getBlock() &&
        wait->isBeforeInBlock(*this))
      return success();
  return emitOpError("swap ") << getSwap()
                              << " is copied back before a tcc.swap_wait of its copy out";
}

LogicalResult SwapWaitOp::verify() {
  if (auto in = getValue().getDefiningOp<SwapInOp>()) {
    if (in.getSwap() != getSwap())
      return emitOpError("waits for swap ") << getSwap() << " on the result of swap " << in.getSwap();
    return success();
  }
  for (Operation *user : getValue().getUsers())
    if (auto out = dyn_cast<SwapOutOp>(user); out && out.getSwap() == getSwap())
      return success();
  return emitOpError("swap ") << getSwap()
                              << ": the value is neither copied out by a tcc.swap_out nor copied "
                                 "back by a tcc.swap_in of that swap";
}

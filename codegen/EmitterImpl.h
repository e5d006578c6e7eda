//===- EmitterImpl.h - the step emitter's class, for its per-target files -*- C++ -*-===//
//
// The emitters behind emitStep (StepEmitter.h): the target-neutral base,
// Emitter (StepEmitter.cpp: the frame, tables and buffers; LibraryCalls.cpp:
// the library calls both targets make; Translate.cpp: tcc-translate's
// body), from which each target's emitter derives: CpuEmitter
// (codegen/cpu/) and CudaEmitter (codegen/cuda/). Not an interface of the
// library.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_CODEGEN_EMITTERIMPL_H
#define TCC_CODEGEN_EMITTERIMPL_H

#include "codegen/StepEmitter.h"
#include "passes/fusion/LoopStructure.h"
#include "passes/PlanMemory.h"
#include "runtime/tcc_random.h"

#include "compiler/Dialect/TccOps.h"
#include "compiler/Kernel/TcckOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir::tcc::codegen {

/// An arena slot or a constant array that holds a value.
struct Buffer {
  std::string name;  // the C++ expression of its pointer
  std::string type;  // its element type in C++ (the storage type)
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool inArena = true;
};

/// What run() gathers for the step's frame from the kernel function's
/// signature, its #tcc.layout and @apply: the tables (descriptors of the
/// parameters, accumulators, inputs, outputs and optimizer state) and the
/// text the ABI's functions wrap around the body.
struct Frame {
  LayoutAttr layout;
  ShardsAttr shards; // ZeRO-1, or null
  bool training = false, adam = false;
  std::vector<std::string> params, grads, inputs, outputs, state;
  /// Each parameter argument and its master's bytes, in kParams order.
  SmallVector<std::pair<Value, uint64_t>> paramBytes;
  std::string rngState; // dropout's random state's descriptor, or ""
  int64_t rngOffset = -1;
  std::string zero;                 // zeroes the arena's accumulators
  std::string applyRows, shardRows; // the optimizer's rows
  int numTrainable = 0;
};

/// One row of the optimizer's table (kApply): a tcck.update's offsets.
struct ApplyRowFields {
  int64_t param;
  int64_t master, grad, state0, state1;
  std::string half; // the fp16 working copy's offset, or "~0"
  int64_t elements;
  int location;     // 0: all on the device; 1: master and state on the host; 2: the gradient too
};

/// One row of ZeRO-1's table (kShardRows): a tcck.shard_update.
struct ShardRowFields {
  int64_t param, master;
  std::string half;
  int64_t flat, elements;
};

/// The step emitter's target-neutral half: the frame (tables, init, the
/// optimizer's rows, from the kernel function's signature, #tcc.layout and
/// @apply), the buffers, the library calls and the scalar expressions both
/// targets share. Each target's emitter (CpuEmitter in codegen/cpu/,
/// CudaEmitter in codegen/cuda/) derives from it and supplies the hooks
/// below: its kernels, the text of a mark and of zeroing bytes, the buffers'
/// C++ types, and the assembled source. Nothing here asks which target it
/// is.
class Emitter {
public:
  /// The emitter for `target` over `kernels`: the step lowered to kernels
  /// (tcc-lower-to-kernels). The emitter reads nothing else: its body is the
  /// step's code; its signature (the parameters, inputs, outputs and
  /// accumulators, named by their tcc.param, tcc.input, tcc.output and
  /// tcc.grad attributes) and its typed memory plan (#tcc.layout) give the
  /// frame (the step's tables, init); @apply beside it (tcck.apply) the
  /// optimizer.
  static std::unique_ptr<Emitter> create(func::FuncOp kernels, TargetAttr target,
                                         const StepEmitOptions &options);
  virtual ~Emitter() = default;

  FailureOr<EmittedStep> run();
  /// tcc-translate: the kernels of `kernels` alone, as a function over the
  /// arena and the function's arguments (no frame).
  virtual FailureOr<std::string> translate() = 0;

protected:
  Emitter(func::FuncOp kernels, TargetAttr target, const StepEmitOptions &options)
      : kernelFunc(kernels), options(options), useDouble(target.getStorage().isF64()) {}

  // ---- The target's hooks. ----
  /// One op of the kernel function.
  virtual LogicalResult emitKernel(Operation *op) = 0;
  /// The step's source around `body`, from the frame; may also set
  /// step.kernelSource and step.target.
  virtual std::string assemble(const Frame &f) = 0;
  /// The statement of mark `k` (mark k ends op k-1 of the op table).
  virtual std::string markText(size_t k) const = 0;
  /// A statement that zeroes `bytes` (a C++ expression) at arena + `offset`.
  virtual std::string zeroText(uint64_t offset, const std::string &bytes) const = 0;
  /// The C++ storage type of the kernel-IR buffer `v`: its element type.
  virtual std::string storageType(Value v) const { return ctype(tensor(v).getElementType()); }
  /// The type and bytes of the arena slot that holds `v` (define): its
  /// buffer's, or an argument's #tcck.slot.
  std::pair<std::string, uint64_t> slotOf(Value v) const;
  /// The type fused code computes `elt` in.
  virtual std::string computeType(Type elt) const { return ctype(elt); }
  /// The conversion of `x` to `ty` in fused code.
  virtual std::string convert(const std::string &ty, const std::string &x) const = 0;
  /// "CPU" or "CUDA", for diagnostics.
  virtual StringRef targetName() const = 0;
  /// A library call that can fail on an index: the statement that makes it.
  virtual std::string checkedCall(const std::string &call) const = 0;
  /// The C++ type a library call's float operand is stored in: the working
  /// type (`working`: activations, an attention's bias) or that of fp32
  /// data (a loss's weights).
  virtual std::string floatType(bool working) const = 0;
  /// The loss-with-gradient call's last arguments (", g_scratch" on CUDA).
  virtual std::string lossScratch() const { return ""; }
  /// The attention launchers' template arguments (on CUDA, so that the step
  /// compiles only the kernels it runs), or "".
  virtual std::string attentionKernel(const AttentionShape &, Value, bool) { return ""; }
  /// After argument `i`'s buffer is defined: its working copy, if the
  /// target keeps one (the body then reads that).
  virtual LogicalResult bindWorkingCopy(Frame &f, unsigned i, Value arg) = 0;
  /// A parameter whose master weights are in the host buffer: the buffer
  /// the body reads (its working copy), or failure.
  virtual FailureOr<Buffer> hostParamBuffer(Frame &f, unsigned i, Value arg) = 0;
  /// The optimizer's table rows (kApply, kShardRows) of the target's ABI.
  virtual std::string applyRow(const ApplyRowFields &r) const = 0;
  virtual std::string shardRow(const ShardRowFields &r) const = 0;

  // ---- Shared by both targets. ----
  /// For both translations: the kernel function's arguments as buffers
  /// named arg0, arg1, ... and every op emitted by the target's emitter into
  /// the body (after mark 0); returns the parameter list (", T *arg0, ...")
  /// or fails with a diagnostic.
  FailureOr<std::string> translateBody();

  // Types.
  std::string ctype(Type elt) const;
  int dtypeCode(Type elt) const;
  uint64_t elementBytes(Type elt) const;
  /// A value's shape and element type: a tensor of the planned IR or a
  /// buffer (memref) of the kernel IR.
  static ShapedType tensor(Value v) {
    return cast<ShapedType>(v.getType());
  }
  static std::string shape(Value v);
  static std::string numel(Value v) {
    return std::to_string(tensor(v).getNumElements());
  }
  static std::string i64List(ArrayRef<int64_t> values);
  /// An attention tensor argument: "pointer, AttentionStrides{b, h, s}" for
  /// `v` (`ptr`, or v's buffer) in the op's layout; a token-major [B, S, C]
  /// tensor holds its heads of `headSize` columns from column `column` on.
  std::string attentionArg(Value v, const AttentionShape &s, int64_t column, int64_t headSize,
                           std::string ptr = "");
  /// An attention's bias argument and its strides (0 along broadcast
  /// dimensions), or a null pointer.
  std::string attentionBias(Value bias);

  // Buffers.
  /// The arena offset tcc-plan-memory gave `v` (-1 if none).
  int64_t plannedOffset(Value v);
  const Buffer &define(Value v);
  std::string ref(Value v) { return buffers.lookup(v).name; }

  // Kernels both targets emit alike.
  /// A runtime library kernel (codegen/LibraryCalls.cpp).
  LogicalResult emitLibraryCall(tcck::CallOp call);
  /// An unfused elementwise kernel (the library's binary or unary).
  LogicalResult emitElementwise(tcck::ElementwiseOp e);
  LogicalResult emitAttentionCall(tcck::CallOp call);
  /// An op of a fused loop's body as a C++ expression over its operands'
  /// scalars (`arg(k)`), computed in `ty`.
  FailureOr<std::string> scalarExpr(Operation &op,
                                    llvm::function_ref<std::string(unsigned)> arg,
                                    const std::string &ty);
  /// `op` of a fused body as the local `name` (computed in computeType),
  /// written to `out` at `indent`, over the scalars in `scalar`, which gets
  /// its result.
  LogicalResult scalarLocal(Operation &op, llvm::DenseMap<Value, std::string> &scalar,
                            const std::string &name, StringRef indent, llvm::raw_ostream &out);

  // The frame, in the order run() builds it (the ids of the tables' dims
  // arrays follow it).
  LogicalResult bindSlots(const Frame &f);
  LogicalResult bindArguments(Frame &f);
  LogicalResult bindResults(Frame &f);
  LogicalResult optimizerTables(Frame &f);
  std::string descriptor(StringRef name, Value v, uint64_t offset, uint64_t bytes,
                         bool onHost);
  std::string descriptor(StringRef name, Value v, uint64_t offset,
                         uint64_t bytes);
  /// The tables both targets' sources hold: kParams, kGrads, kInputs,
  /// kOutputs, kState, kOps, kOpLive.
  void writeTables(llvm::raw_ostream &s, const Frame &f) const;

  func::FuncOp kernelFunc; // the step's kernel IR
  const StepEmitOptions &options;
  /// The CPU's storage in double (gradient checks against finite
  /// differences).
  bool useDouble;
  unsigned nextKernel = 0;
  std::string rngInit;            // init: zeroes dropout's random state
  /// The step's op table (tcc_step_info.ops): what each op that runs code
  /// is, and the plan's arena bytes live while it runs; mark k ends op k-1.
  std::vector<std::string> opLabels;
  std::vector<uint64_t> opLive;
  /// The step's value table (tcc_step_op_values, tcc-run
  /// --check-numerics): per op of the op table, the arena buffers it read
  /// and wrote, as tcc_op_value initializers; and the dims arrays they
  /// share, by shape.
  std::vector<std::string> opValues;
  llvm::StringMap<std::string> dimsArrays;
  bool valueTable = true; // tcc-translate has no frame, and no value table
  /// Ends an entry of the op table at `m`: its label (`label`: the mark's,
  /// or what the target prefixes it with), live bytes and values.
  void recordMark(tcck::MarkOp m, std::string label);
  llvm::DenseMap<Value, Buffer> buffers;
  llvm::DenseMap<Value, int64_t> argOffsets;
  /// Parameters whose master weights are in the host buffer: their offsets there.
  llvm::DenseMap<Value, int64_t> hostOffsets;
  bool planError = false;
  uint64_t arena = 0;
  unsigned nextId = 0;
  std::string globals;  // constant arrays and dims tables
  std::string body;     // the micro_step body
  llvm::raw_string_ostream g{globals}, os{body};
  EmittedStep step;
};


/// The loop structure tcc-lower-to-kernels recorded on a tcck.loop: each
/// body op's role and the pass that computes it (a reduction's, the pass
/// reading its operand; a row reduction's result is complete after that
/// pass). Both targets' loop emitters read it.
LoopFusion loopStructure(tcck::LoopOp loop);
/// A C++ literal for one element.
std::string literal(Attribute a, Type elt);
/// A C string literal of `text`.
std::string cstring(StringRef text);
/// The definition of a constant array `name` of `value`'s elements, typed
/// `ctype` after `qualifiers` ("static const ", ...), 16 to a line.
std::string constantArray(StringRef qualifiers, StringRef ctype, StringRef name,
                          DenseElementsAttr value);
/// The element of a buffer of `shape` that `map` (a tcck.loop's indexing
/// map) names at index `var` of the loop's space `space` (row-major
/// strides `outStrides`), as a C++ expression.
std::string mapIndexOf(AffineMap map, ArrayRef<int64_t> shape, ArrayRef<int64_t> space,
                       ArrayRef<int64_t> outStrides, StringRef var);
/// The element of a buffer of `shape` that `map` names at index `i` of a
/// space `space`: `i` itself when the buffer is laid out as the space, `0`
/// when it is one element read everywhere, else mapIndexOf's expression.
std::string readIndex(AffineMap map, ArrayRef<int64_t> shape, ArrayRef<int64_t> space,
                      ArrayRef<int64_t> outStrides);
/// readIndex of input `k` of `loop`.
std::string loopInputIndex(tcck::LoopOp loop, unsigned k, ArrayRef<int64_t> outStrides);
/// Whether `map` reads consecutive elements along the last dimension of
/// `space`, a dimension longer than 1 (along a row, rather than once per
/// row).
bool readsAlongLast(AffineMap map, ArrayRef<int64_t> space);
/// The one result of `map` (a #tcck.copy's flat index) as a C++ expression
/// over the loop variables `dims` (floordiv and mod of non-negative values
/// are C++'s / and %).
std::string flatIndex(AffineMap map, ArrayRef<std::string> dims);

} // namespace mlir::tcc::codegen

#endif // TCC_CODEGEN_EMITTERIMPL_H

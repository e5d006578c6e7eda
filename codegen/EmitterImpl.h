//===- EmitterImpl.h - the step emitter's class, for its per-target files -*- C++ -*-===//
//
// The emitter behind emitStep (StepEmitter.h), shared by its files:
// StepEmitter.cpp (the frame: tables, init, apply), codegen/cpu/CpuKernels.cpp
// and codegen/cuda/CudaKernels.cpp (each target's kernels, from the tcck
// dialect) and codegen/LibraryCalls.cpp (the library calls both targets
// make). Not an interface of the library.
//
//===----------------------------------------------------------------------===//

#ifndef TCC_CODEGEN_EMITTERIMPL_H
#define TCC_CODEGEN_EMITTERIMPL_H

#include "codegen/StepEmitter.h"
#include "passes/fusion/CublasLtEpilogue.h"
#include "passes/fusion/LoopStructure.h"
#include "passes/PlanMemory.h"
#include "runtime/tcc_random.h"

#include "compiler/Dialect/TccOps.h"
#include "compiler/Kernel/TcckOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace mlir::tcc::codegen {

/// The CUDA units' launch-size helper, in step.cu and in tcc-translate's unit.
inline constexpr const char *kCudaGridFor =
    "inline unsigned grid_for(int64_t n) {\n"
    "  return (unsigned)std::min<int64_t>(std::max<int64_t>((n + 255) / 256, 1), 65535LL * 32);\n"
    "}\n\n";

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

class Emitter {
public:
  /// `kernels`: the step lowered to kernels (tcc-lower-to-kernels). The
  /// emitter reads nothing else: its body is the step's code; its
  /// signature (the parameters, inputs, outputs and accumulators, named by
  /// their tcc.param, tcc.input, tcc.output and tcc.grad attributes) and
  /// its typed memory plan (#tcc.layout) give the frame (the step's tables,
  /// init); @apply beside it (tcck.apply) the optimizer.
  Emitter(func::FuncOp kernels, TargetAttr target, const StepEmitOptions &options)
      : kernelFunc(kernels), options(options), cuda(target.isCuda()),
        useDouble(target.getStorage().isF64()) {}

  FailureOr<EmittedStep> run();
  /// The kernels of `kernels` alone, as a C++ function (tcc-translate).
  FailureOr<std::string> translateKernels();
  /// The same for the cuda target: a CUDA unit with the generated kernels
  /// and the micro-step body as a function (codegen/cuda/CudaKernels.cpp).
  FailureOr<std::string> translateCudaKernels();

private:
  /// For both translations: the kernel function's arguments as buffers
  /// named arg0, arg1, ... and every op emitted by the target's emitter into
  /// the body (after mark 0 on CUDA); returns the parameter list
  /// (", T *arg0, ...") or fails with a diagnostic.
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
                           std::string ptr = "") {
    if (ptr.empty())
      ptr = ref(v);
    ArrayRef<int64_t> d = tensor(v).getShape();
    if (!s.tokenMajor)
      return llvm::formatv("{0}, AttentionStrides{{{1}LL, {2}LL, {3}LL}", ptr, d[1] * d[2] * d[3],
                           d[2] * d[3], d[3])
          .str();
    if (column)
      ptr = "(" + ptr + " + " + std::to_string(column) + ")";
    return llvm::formatv("{0}, AttentionStrides{{{1}LL, {2}LL, {3}LL}", ptr, d[1] * d[2],
                         headSize, d[2])
        .str();
  }
  /// Query, key and value (operands 0, 1, 2 of both attention ops).
  std::string attentionOperands(Operation *op, const AttentionShape &s) {
    return llvm::formatv("{0}, {1}, {2}", attentionArg(op->getOperand(0), s, s.columns[0], s.d),
                         attentionArg(op->getOperand(1), s, s.columns[1], s.d),
                         attentionArg(op->getOperand(2), s, s.columns[2], s.dv))
        .str();
  }
  /// An attention's bias argument and its strides (0 along broadcast
  /// dimensions), or a null pointer.
  std::string attentionBias(Value bias) {
    if (!bias)
      return std::string("(const ") + (cuda ? "__half" : "F") +
             " *)nullptr, AttentionStrides{0LL, 0LL, 0LL}";
    ArrayRef<int64_t> d = tensor(bias).getShape();
    auto stride = [&](int dim, int64_t s) { return d[dim] == 1 ? int64_t(0) : s; };
    return llvm::formatv("{0}, AttentionStrides{{{1}LL, {2}LL, {3}LL}", ref(bias),
                         stride(0, d[1] * d[2] * d[3]), stride(1, d[2] * d[3]), stride(2, d[3]))
        .str();
  }
  /// On CUDA, the attention launchers' template arguments: the padded head
  /// size / 16 and whether there is a bias, so that the step compiles only
  /// the kernels it runs (runtime/cuda/attention.cuh).
  std::string attentionKernel(const AttentionShape &s, Value bias) {
    if (!cuda)
      return "";
    return llvm::formatv("<{0}, {1}>", (std::max(s.d, s.dv) + 15) / 16, bias ? 1 : 0).str();
  }
  /// The attention launchers' last arguments: ", bias, its strides,
  /// AttentionDims{B, H, Sq, Sk, D, Dv}, scale, causal);".
  std::string attentionTail(const AttentionShape &s, Value bias, APFloat scale, bool causal,
                            Operation *op) {
    return llvm::formatv(", {0}, AttentionDims{{{1}LL, {2}LL, {3}LL, {4}LL, {5}LL, {6}LL}, "
                         "{7:e17}, {8}{9});\n",
                         attentionBias(bias), s.b, s.h, s.sq, s.sk, s.d, s.dv,
                         scale.convertToDouble(), causal ? "true" : "false",
                         attentionDropout(op))
        .str();
  }
  /// ", AttentionDropout{rng, stream, threshold, 1 / (1 - ratio)}" for an
  /// attention with dropout on its probabilities, else "".
  std::string attentionDropout(Operation *op) {
    auto ratio = op->getAttrOfType<FloatAttr>("dropout");
    auto stream = op->getAttrOfType<IntegerAttr>("dropout_stream");
    Value rng = isa<AttentionOp>(op) ? cast<AttentionOp>(op).getRng()
                                     : cast<AttentionGradOp>(op).getRng();
    if (!ratio || !stream || !rng)
      return "";
    double p = ratio.getValueAsDouble();
    return llvm::formatv(", AttentionDropout{{(const int64_t *){0}, {1}ULL, {2}u, {3:e17}}",
                         ref(rng), stream.getInt(), ::tcc::random::threshold(p),
                         1.0 / (1.0 - p))
        .str();
  }

  // Buffers.
  /// The arena offset tcc-plan-memory gave `v` (-1 if none).
  int64_t plannedOffset(Value v);
  const Buffer &define(Value v);
  /// "__restrict__ " for a kernel pointer to `v`, one of a kernel's `ins`
  /// or `outs`, unless an input and an output share their bytes there (a
  /// result the plan writes over a dying operand, tcc::inPlaceOperand).
  std::string restrictFor(ValueRange ins, ValueRange outs, Value v);
  std::string ref(Value v) { return buffers.lookup(v).name; }

  // Kernels: the step's kernel IR (the tcck dialect), by target.
  /// A kernel of the CPU step (codegen/cpu/CpuKernels.cpp).
  LogicalResult emitKernel(Operation *op);
  /// A kernel of the CUDA step (codegen/cuda/CudaKernels.cpp).
  LogicalResult emitCudaKernel(Operation *op);
  /// A runtime library kernel, on either target (codegen/LibraryCalls.cpp).
  LogicalResult emitLibraryCall(tcck::CallOp call);
  /// An unfused elementwise kernel (the library's binary or unary), on
  /// either target.
  LogicalResult emitElementwise(tcck::ElementwiseOp e);
  LogicalResult emitAttentionCall(tcck::CallOp call);
  /// A fused loop kernel (CPU target): one loop nest over its space.
  LogicalResult emitLoop(tcck::LoopOp loop);
  /// A fused elementwise loop on CUDA: one grid-stride kernel.
  LogicalResult emitCudaLoop(tcck::LoopOp loop);
  /// A fused loop with row reductions (softmax, LayerNorm and their
  /// backward passes) on CUDA: one warp per row (one block for rows over
  /// 1024); `lf`, its structure as the lowering recorded it.
  LogicalResult emitCudaRowLoop(tcck::LoopOp loop, const LoopFusion &lf);
  /// A split or concat with the views and transposes of its parts: one
  /// copy loop (CPU target).
  LogicalResult emitCopyLoop(tcck::CopyLoopOp loop);
  /// The general copy loop (index arithmetic per element) of a copy loop's
  /// body: inline on the CPU, a kernel on CUDA.
  LogicalResult emitMoveLoop(Operation *op, Block &body, ValueRange inputs, ValueRange results);
  FailureOr<std::string> scalarExpr(Operation &op,
                                    llvm::function_ref<std::string(unsigned)> arg,
                                    const std::string &ty);
  /// A GEMM whose elementwise epilogue runs on each product element as it
  /// is stored (CPU target).
  LogicalResult emitGemmEpilogue(tcck::MatMulOp mm);
  /// The same on CUDA, as one cuBLASLt matmul with an epilogue (bias, then
  /// a tanh GELU or a residual; tcc-fuse's cublaslt-epilogues).
  LogicalResult emitCublasLtEpilogue(tcck::MatMulOp mm);
  /// A GEMM on CUDA: cuBLASLt (into fp16, or added into an fp32
  /// accumulator), or a dot product for two vectors.
  LogicalResult emitCudaMatMul(tcck::MatMulOp mm);
  /// The C++ storage type of the kernel-IR buffer `v`: its element type.
  std::string storageType(Value v) const;
  /// The type fused code computes `elt` in (float for any float on CUDA).
  std::string computeType(Type elt) const {
    return cuda && isa<FloatType>(elt) ? "float" : ctype(elt);
  }
  /// The CUDA step's profile mode (TCC_CUDA_PROFILE=1): globals and the
  /// functions that record, collect and report per-op times.
  std::string assembleCuda(bool training, const std::vector<std::string> &params,
                           const std::vector<std::string> &grads,
                           const std::vector<std::string> &inputs,
                           const std::vector<std::string> &outputs,
                           const std::vector<std::string> &state,
                           const std::string &applyRows, int numTrainable,
                           const std::string &zero);
  // The frame, in the order run() builds it (the ids of the tables' dims
  // arrays follow it).
  LogicalResult bindSlots(const Frame &f);
  LogicalResult bindArguments(Frame &f);
  LogicalResult bindResults(Frame &f);
  LogicalResult optimizerTables(Frame &f);
  void cudaShardTables(const Frame &f);
  std::string assembleCpu(const Frame &f);
  std::string descriptor(StringRef name, Value v, uint64_t offset, uint64_t bytes,
                         bool onHost);
  std::string descriptor(StringRef name, Value v, uint64_t offset,
                         uint64_t bytes);

  func::FuncOp kernelFunc; // the step's kernel IR
  const StepEmitOptions &options;
  /// The module's #tcc.target: CUDA, or the CPU in float or double.
  bool cuda;
  bool useDouble;
  unsigned nextKernel = 0, nextGemm = 0;
  uint64_t constBytes = 0;        // CUDA: static constants, after the arena
  std::string constTable;         // CUDA: {host array, bytes, device offset}
  std::string kernels;            // CUDA: __global__ functions (step_kernels.cu)
  std::string kernelDecls;        // CUDA: their declarations, in step.cu
  /// Appends a generated kernel's text (CUDA) and declares it.
  void addKernel(const std::string &text);
  std::string shadowRefresh;      // CUDA: fp16 copies of the parameters
  std::string inputShadows;       // CUDA: fp16 copies of float inputs
  std::string seedFill;           // CUDA: sets the backward seed (outside the graph)
  std::string rngInit;            // init: zeroes dropout's random state
  /// The step's op table (tcc_step_info.ops): what each op that runs code
  /// is, and the plan's arena bytes live while it runs; mark k ends op k-1.
  std::vector<std::string> opLabels;
  std::vector<uint64_t> opLive;
  /// CUDA: the kernel or library call launched since the last mark (the op
  /// table names it).
  std::string launched;
  llvm::DenseMap<Value, Buffer> buffers;
  llvm::DenseMap<Value, int64_t> argOffsets;
  /// Parameters whose master weights are in the host buffer: their offsets there.
  llvm::DenseMap<Value, int64_t> hostOffsets;
  /// The CUDA step's copies of gradients to host accumulators (HostGradRow
  /// initializers, in the order the micro-step queues them).
  std::string hostGradTable;
  int hostGradCount = 0;
  llvm::DenseMap<Value, int64_t> shadowOffsets;  // CUDA: fp16 working copies
  // CUDA, ZeRO-1: the shard tables, and their part of the StepDesc.
  std::string cudaShards, cudaShardDesc;
  bool planError = false;
  uint64_t arena = 0;
  unsigned nextId = 0;
  std::string globals;  // constant arrays and dims tables
  std::string body;     // the micro_step body
  llvm::raw_string_ostream g{globals}, os{body};
  EmittedStep step;
};


/// A value read as a strided view of a buffer: element `c` of `shape` is at
/// `offset + sum c[i] * strides[i]`.
struct StridedView {
  SmallVector<int64_t> shape, strides;
  int64_t offset = 0;

  static StridedView contiguous(ArrayRef<int64_t> shape) {
    StridedView v;
    v.shape.assign(shape.begin(), shape.end());
    v.strides.assign(shape.size(), 1);
    for (int64_t d = (int64_t)shape.size() - 2; d >= 0; --d)
      v.strides[d] = v.strides[d + 1] * shape[d + 1];
    return v;
  }

  /// The same elements in `to`'s shape, without a copy (numpy's rule: each
  /// group of dimensions that is merged or split must be contiguous).
  bool reshape(ArrayRef<int64_t> to) {
    SmallVector<int64_t> os, ost;
    for (auto [d, st] : llvm::zip(shape, strides))
      if (d != 1) {
        os.push_back(d);
        ost.push_back(st);
      }
    SmallVector<int64_t> ns(to.begin(), to.end()), nst(to.size(), 0);
    SmallVector<size_t> big;
    for (size_t i = 0; i < ns.size(); ++i)
      if (ns[i] != 1)
        big.push_back(i);
    size_t oi = 0, bi = 0;
    while (oi < os.size() && bi < big.size()) {
      int64_t op = os[oi], np = ns[big[bi]];
      size_t oj = oi + 1, bj = bi + 1;
      while (op != np) {
        if (np < op) {
          if (bj >= big.size())
            return false;
          np *= ns[big[bj++]];
        } else {
          if (oj >= os.size())
            return false;
          op *= os[oj++];
        }
      }
      for (size_t k = oi; k + 1 < oj; ++k)
        if (ost[k] != os[k + 1] * ost[k + 1])
          return false;
      nst[big[bj - 1]] = ost[oj - 1];
      for (size_t k = bj - 1; k > bi; --k)
        nst[big[k - 1]] = nst[big[k]] * ns[big[k]];
      oi = oj;
      bi = bj;
    }
    if (oi != os.size() || bi != big.size())
      return false;
    shape = ns;
    strides = nst;
    return true;
  }

  /// Through `op` (a view or a transpose) from its operand to its result.
  bool through(Operation *op) {
    auto out = cast<RankedTensorType>(op->getResult(0).getType()).getShape();
    if (auto t = dyn_cast<TransposeOp>(op)) {
      SmallVector<int64_t> sh, st;
      for (int64_t p : t.getPermutation()) {
        sh.push_back(shape[p]);
        st.push_back(strides[p]);
      }
      shape = sh;
      strides = st;
      return true;
    }
    return reshape(out);
  }
};

/// The loop structure tcc-lower-to-kernels recorded on a tcck.loop: each
/// body op's role and the pass that computes it (a reduction's, the pass
/// reading its operand; a row reduction's result is complete after that
/// pass). Both targets' loop emitters read it.
LoopFusion loopStructure(tcck::LoopOp loop);
/// A C++ literal for one element.
std::string literal(Attribute a, Type elt);
/// The definition of a constant array `name` of `value`'s elements, typed
/// `ctype` after `qualifiers` ("static const ", ...), 16 to a line.
std::string constantArray(StringRef qualifiers, StringRef ctype, StringRef name,
                          DenseElementsAttr value);
/// The element of a tensor of `t` shape (rank <= the loop's, numpy
/// broadcasting) read at output index `var` of a loop over `shape`.
std::string broadcastIndexOf(ArrayRef<int64_t> t, ArrayRef<int64_t> shape,
                             ArrayRef<int64_t> outStrides, StringRef var = "i");
/// The element of fused input `v` read at output index `i` of a loop over
/// `shape` (numpy broadcasting), as a C++ expression.
std::string broadcastIndex(Value v, ArrayRef<int64_t> shape, ArrayRef<int64_t> outStrides,
                           int64_t n);
/// Whether a value of shape `t`, read in a row loop whose rows are
/// `rowLength` long, is read along the row (its last dimension is the
/// row's), rather than once per row.
bool readAlongRow(ArrayRef<int64_t> t, int64_t rowLength);
/// A loop nest that copies `from` (a strided view of `src`) into `to` (one of
/// `dst`), both of the same shape.
std::string stridedCopy(const std::string &dst, const StridedView &to, const std::string &src,
                        const StridedView &from);

} // namespace mlir::tcc::codegen

#endif // TCC_CODEGEN_EMITTERIMPL_H

//===- OnnxImporter.cpp - ONNX protobuf to the tcc dialect ----------------===//

#include "compiler/Import/OnnxImporter.h"

#include "compiler/Dialect/TccOps.h"
#include "compiler/Import/Composites.h"
#include "compiler/Import/ModelText.h"
#include "compiler/Import/OnnxLocation.h"
#include "compiler/Import/OnnxOpTable.h"
#include "compiler/Import/Trainable.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::tcc;
using namespace mlir::tcc::onnx_ops;

/// What to tell a user whose --frozen, --trainable or --shape names no
/// `what` of the model: the name they most likely meant (the same name under
/// a prefix an exporter added, such as tcc_export's "m.", or the closest
/// spelling), else a few of the names there are.
static std::string suggestName(StringRef wanted, ArrayRef<std::string> names, StringRef what) {
  std::string best;
  unsigned bestDistance = std::max<unsigned>(2, wanted.size() / 4) + 1;
  for (const std::string &n : names) {
    StringRef name(n);
    if (name.ends_with(wanted) && name.size() > wanted.size() &&
        name.drop_back(wanted.size()).ends_with("."))
      return "; did you mean \"" + n + "\"?";
    unsigned d = name.edit_distance(wanted, /*AllowReplacements=*/true, bestDistance);
    if (d < bestDistance) {
      bestDistance = d;
      best = n;
    }
  }
  if (!best.empty())
    return "; did you mean \"" + best + "\"?";
  if (names.empty())
    return "; it has none";
  std::string list;
  for (size_t i = 0; i < names.size() && i < 4; ++i)
    list += (i ? ", \"" : "\"") + names[i] + "\"";
  return "; its " + what.str() + (names.size() > 4 ? " include " : " are ") + list +
         (names.size() > 4 ? " (" + std::to_string(names.size()) + " in all)" : "");
}

//===----------------------------------------------------------------------===//
// Tensors and types
//===----------------------------------------------------------------------===//

static StringRef dataTypeName(int32_t t) {
  if (onnx::TensorProto_DataType_IsValid(t))
    return onnx::TensorProto_DataType_Name(
        static_cast<onnx::TensorProto_DataType>(t));
  // Types newer than the onnx.proto tcc is built with (onnx 1.14 to 1.23).
  static const char *const newer[] = {
      "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",
      "INT4",         "FLOAT4E2M1",     "FLOAT8E8M0", "UINT2",          "INT2"};
  if (t >= 17 && t < 17 + (int32_t)std::size(newer))
    return newer[t - 17];
  return "<invalid>";
}

/// The MLIR element type of an ONNX data type; null for strings, complex and
/// other types tcc has no use for.
static Type elementType(MLIRContext *ctx, int32_t t) {
  Builder b(ctx);
  switch (t) {
  case onnx::TensorProto::FLOAT: return b.getF32Type();
  case onnx::TensorProto::DOUBLE: return b.getF64Type();
  case onnx::TensorProto::FLOAT16: return b.getF16Type();
  case onnx::TensorProto::BFLOAT16: return b.getBF16Type();
  case onnx::TensorProto::BOOL: return b.getI1Type();
  case onnx::TensorProto::INT8: return b.getIntegerType(8);
  case onnx::TensorProto::INT16: return b.getIntegerType(16);
  case onnx::TensorProto::INT32: return b.getI32Type();
  case onnx::TensorProto::INT64: return b.getI64Type();
  case onnx::TensorProto::UINT8: return b.getIntegerType(8, /*isSigned=*/false);
  case onnx::TensorProto::UINT16: return b.getIntegerType(16, false);
  case onnx::TensorProto::UINT32: return b.getIntegerType(32, false);
  case onnx::TensorProto::UINT64: return b.getIntegerType(64, false);
  default: return nullptr;
  }
}

namespace {

/// The part of the importer that knows the model file: where it is (for
/// external data) and how to report problems in it.
class Importer {
public:
  Importer(MLIRContext *ctx, StringRef path, const ImportOptions &options)
      : ctx(ctx), builder(ctx), path(path.str()), options(options),
        fileLoc(fileLocation(ctx, path)) {}

  OwningOpRef<ModuleOp> run(ImportStats *stats);
  LogicalResult readParameters(ArrayRef<std::string> names, bool asDouble,
                               std::string &blob);

private:
  LogicalResult load();
  LogicalResult checkOpset();
  LogicalResult importSignature(func::FuncOp &func);
  LogicalResult importNode(const onnx::NodeProto &node, int index);
  LogicalResult importRewritten(const onnx::NodeProto &node,
                                ArrayRef<Value> operands, Location loc);
  LogicalResult importOutputs(func::FuncOp func);
  void warnPaddingRows();

  FailureOr<SmallVector<int64_t>> tensorShape(const onnx::TensorProto &t,
                                              Location loc);
  FailureOr<DenseElementsAttr> tensorAttr(const onnx::TensorProto &t,
                                          Location loc);
  FailureOr<std::string> externalData(const onnx::TensorProto &t,
                                      Location loc, bool read,
                                      int64_t expectBytes = -1);
  LogicalResult checkTensorData(const onnx::TensorProto &t, Location loc,
                                int64_t count, unsigned width);
  FailureOr<Attribute> convertAttribute(const onnx::AttributeProto &attr,
                                        Location loc, StringRef opType);
  FailureOr<Attribute> constInputAttr(Value v, const ConstInput &ci,
                                      StringRef inputName, Location loc,
                                      StringRef opType);
  InFlightDiagnostic error(Location loc) { return emitError(loc); }
  FailureOr<DictionaryAttr> importObjective();
  void warnUnreadInputs();
  std::string readerOf(StringRef name) const;

  MLIRContext *ctx;
  OpBuilder builder;
  std::string path;
  const ImportOptions &options;
  Location fileLoc;
  onnx::ModelProto model;
  int64_t opset = 0;
  llvm::StringMap<Value> values;
  int64_t numFolded = 0;
  std::optional<Location> trainingBatchNorm;
  SmallVector<Value> foldIfConstant(Operation *op, Location loc);
  std::vector<std::pair<std::string, std::string>> constantInits;
  bool hasTrainableMetadata = false;
};

} // namespace

LogicalResult Importer::load() {
  if (llvm::sys::fs::is_directory(path))
    return error(fileLoc) << "is a directory, not an ONNX model file";
  // A FIFO or a device would block the read, or never end.
  llvm::sys::fs::file_status st;
  if (!llvm::sys::fs::status(path, st) &&
      st.type() != llvm::sys::fs::file_type::regular_file)
    return error(fileLoc) << "is not a regular file, so not an ONNX model file";
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return error(fileLoc) << "cannot open the model: "
                          << buffer.getError().message();
  StringRef bytes = (*buffer)->getBuffer();
  if (bytes.size() > (size_t)INT32_MAX)
    return error(fileLoc) << "model file is larger than 2 GiB; save the "
                             "weights as external data";
  if (!model.ParseFromArray(bytes.data(), (int)bytes.size()))
    return error(fileLoc) << "not a valid ONNX model: the protobuf does not "
                             "parse (a truncated file, or not a .onnx file)";
  if (model.ir_version() <= 0 || !model.has_graph() ||
      model.opset_import_size() == 0)
    return error(fileLoc)
           << "not a valid ONNX model: it has no "
           << (model.ir_version() <= 0 ? "ir_version"
               : !model.has_graph()   ? "graph"
                                      : "opset_import")
           << " (a truncated file, or not a .onnx file?)";
  return success();
}

LogicalResult Importer::checkOpset() {
  for (const auto &imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  if (opset == 0)
    return error(fileLoc) << "the model imports no opset of the default ONNX "
                             "domain";
  if (opset > kMaxOpset)
    return error(fileLoc) << "opset " << opset
                          << " is newer than tcc supports (up to "
                          << kMaxOpset << ", the newest onnx 1.23 defines)";
  return success();
}

FailureOr<SmallVector<int64_t>> Importer::tensorShape(const onnx::TensorProto &t,
                                                      Location loc) {
  SmallVector<int64_t> shape;
  // Element counts and byte sizes are checked for overflow before anything
  // is allocated (a tensor's 8-byte elements must fit in int64 bytes).
  int64_t bytes = 8;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return error(loc) << "tensor \"" << t.name()
                        << "\" has a negative dimension";
    std::optional<int64_t> b = llvm::checkedMul(bytes, d);
    if (!b)
      return error(loc) << "tensor \"" << t.name() << "\" has dimensions whose "
                        << "product overflows (more than 2^60 elements)";
    bytes = *b;
    shape.push_back(d);
  }
  return shape;
}

FailureOr<std::string> Importer::externalData(const onnx::TensorProto &t,
                                              Location loc, bool read,
                                              int64_t expectBytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset" || kv.key() == "length") {
      int64_t v;
      if (StringRef(kv.value()).getAsInteger(10, v) || v < 0)
        return error(loc) << "tensor \"" << t.name() << "\": external data "
                          << kv.key() << " \"" << kv.value()
                          << "\" is not a non-negative integer";
      (kv.key() == "offset" ? offset : length) = v;
    }
  }
  if (location.empty())
    return error(loc) << "tensor \"" << t.name()
                      << "\" has external data without a location";
  // As onnx's checker requires: a relative path inside the model's folder,
  // with no "..", and (through links too) a regular file there.
  auto outside = [&](StringRef why) {
    return error(loc) << "tensor \"" << t.name() << "\": external data location \""
                      << location << "\" " << why
                      << " (external data must be a file in the model's folder)";
  };
  if (llvm::sys::path::is_absolute(location) || StringRef(location).starts_with("~"))
    return outside("is an absolute path");
  for (auto it = llvm::sys::path::begin(location), e = llvm::sys::path::end(location);
       it != e; ++it)
    if (*it == "..")
      return outside("leaves the model's folder (\"..\")");
  SmallString<256> dir(llvm::sys::path::parent_path(path));
  if (dir.empty())
    dir = ".";
  SmallString<256> full(dir);
  llvm::sys::path::append(full, location);
  SmallString<256> realDir, realFull;
  if (std::error_code ec = llvm::sys::fs::real_path(full, realFull))
    return error(loc) << "tensor \"" << t.name() << "\": external data file \""
                      << full << "\" cannot be read: " << ec.message()
                      << " (it must be beside the model)";
  if (llvm::sys::fs::real_path(dir, realDir) ||
      !StringRef(realFull).starts_with((realDir + llvm::sys::path::get_separator()).str()))
    return outside("is a link that leads out of the model's folder");
  llvm::sys::fs::file_status st;
  if (std::error_code ec = llvm::sys::fs::status(realFull, st))
    return error(loc) << "tensor \"" << t.name() << "\": external data file \""
                      << full << "\" cannot be read: " << ec.message();
  if (st.type() != llvm::sys::fs::file_type::regular_file)
    return outside("is not a regular file");
  const int64_t size = (int64_t)st.getSize();
  if (offset > size)
    return error(loc) << "tensor \"" << t.name() << "\": external data file \""
                      << full << "\" has " << size << " bytes, but the tensor's "
                      << "data starts at byte " << offset;
  if (length < 0)
    length = size - offset;
  if (length > size - offset)
    return error(loc) << "tensor \"" << t.name() << "\": external data file \""
                      << full << "\" has " << size << " bytes, but the tensor "
                      << "needs bytes " << offset << " to " << offset << " + " << length;
  if (expectBytes >= 0 && length != expectBytes)
    return error(loc) << "tensor \"" << t.name() << "\" has " << length
                      << " bytes of external data; its shape and type need "
                      << expectBytes;
  if (!read)
    return std::string();
  auto buffer = llvm::MemoryBuffer::getFileSlice(realFull, length, offset);
  if (!buffer)
    return error(loc) << "tensor \"" << t.name() << "\": cannot read \"" << full
                      << "\": " << buffer.getError().message();
  return (*buffer)->getBuffer().str();
}

/// How many values a tensor's typed data field (not raw_data) holds.
static int64_t typedFieldSize(const onnx::TensorProto &t) {
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT: return t.float_data_size();
  case onnx::TensorProto::DOUBLE: return t.double_data_size();
  case onnx::TensorProto::INT64: return t.int64_data_size();
  case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT64: return t.uint64_data_size();
  default: return t.int32_data_size();
  }
}

/// Checks that the data a tensor carries (inline, raw or external) is what
/// its shape and type need, without reading external data.
LogicalResult Importer::checkTensorData(const onnx::TensorProto &t, Location loc,
                                        int64_t count, unsigned width) {
  const int64_t bytes = width == 1 ? 1 : width / 8;
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return failure(failed(externalData(t, loc, /*read=*/false, count * bytes)));
  const bool raw = t.has_raw_data();
  const int64_t present = raw ? (int64_t)t.raw_data().size() : typedFieldSize(t);
  const int64_t needed = raw ? count * bytes : count;
  if (present != needed)
    return error(loc) << "tensor \"" << t.name() << "\" has " << present
                      << (raw ? " bytes of data" : " values") << "; its shape "
                      << (raw ? "and type need " : "needs ") << needed;
  return success();
}

FailureOr<DenseElementsAttr> Importer::tensorAttr(const onnx::TensorProto &t,
                                                  Location loc) {
  Type elt = elementType(ctx, t.data_type());
  if (!elt)
    return error(loc) << "tensor \"" << t.name() << "\" has data type "
                      << dataTypeName(t.data_type())
                      << ", which tcc does not support";
  FailureOr<SmallVector<int64_t>> shape = tensorShape(t, loc);
  if (failed(shape))
    return failure();
  auto type = RankedTensorType::get(*shape, elt);
  int64_t count = type.getNumElements(); // no overflow: tensorShape checked it
  unsigned width = elt.getIntOrFloatBitWidth();
  const int64_t bytes = width == 1 ? 1 : width / 8;
  // The data present must match the shape before anything is allocated.
  if (failed(checkTensorData(t, loc, count, width)))
    return failure();
  std::string external;
  const std::string *raw = nullptr;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    FailureOr<std::string> data = externalData(t, loc, /*read=*/true, count * bytes);
    if (failed(data))
      return failure();
    external = std::move(*data);
    raw = &external;
  } else if (t.has_raw_data()) {
    raw = &t.raw_data();
  }
  // Element bit patterns, from raw_data or from the typed field ONNX uses for
  // this data type.
  std::vector<uint64_t> bits;
  bits.reserve(count);
  if (raw) {
    for (int64_t i = 0; i < count; ++i) {
      uint64_t v = 0;
      std::memcpy(&v, raw->data() + i * bytes, bytes); // little-endian host
      bits.push_back(width == 1 ? (v != 0) : v);
    }
  } else {
    auto take = [&](auto &field) { for (auto v : field) bits.push_back((uint64_t)v); };
    switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      for (float f : t.float_data()) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        bits.push_back(u);
      }
      break;
    case onnx::TensorProto::DOUBLE:
      for (double d : t.double_data()) {
        uint64_t u;
        std::memcpy(&u, &d, 8);
        bits.push_back(u);
      }
      break;
    case onnx::TensorProto::INT64: take(t.int64_data()); break;
    case onnx::TensorProto::UINT32:
    case onnx::TensorProto::UINT64: take(t.uint64_data()); break;
    default: take(t.int32_data()); break;
    }
  }
  if (auto ft = dyn_cast<FloatType>(elt)) {
    SmallVector<APFloat> values;
    values.reserve(count);
    for (uint64_t b : bits)
      values.emplace_back(ft.getFloatSemantics(), APInt(width, b));
    return DenseElementsAttr::get(type, values);
  }
  SmallVector<APInt> values;
  values.reserve(count);
  for (uint64_t b : bits)
    values.emplace_back(width, width == 1 ? (b != 0) : b);
  return DenseElementsAttr::get(type, values);
}

/// For an initializer whose name the exporter made up (torch.export's
/// "val_94", "_val_12"), "read by node \"NAME\" (OP); ": the first node
/// that reads it, which the user can place; "" for other names.
std::string Importer::readerOf(StringRef name) const {
  StringRef digits = name;
  digits.consume_front("_");
  if (!digits.consume_front("val_") || digits.empty() ||
      !llvm::all_of(digits, llvm::isDigit))
    return "";
  for (const onnx::NodeProto &node : model.graph().node())
    if (llvm::is_contained(node.input(), name.str()))
      return "read by node \"" + node.name() + "\" (" + node.op_type() + "); ";
  return "";
}

LogicalResult Importer::importSignature(func::FuncOp &func) {
  const onnx::GraphProto &graph = model.graph();
  Location loc = fileLoc;
  if (graph.sparse_initializer_size() > 0)
    return error(loc) << "sparse initializers are not supported";

  SmallVector<Type> argTypes;
  SmallVector<NamedAttribute> argAttrs;
  SmallVector<std::pair<std::string, DenseElementsAttr>> constants;
  llvm::StringSet<> initNames, frozenSeen;

  // Floating-point initializers are trainable parameters unless the model's
  // metadata or their evident role says otherwise (Trainable.h); the rest
  // (integer and boolean tables, buffers) are constants.
  bool hasMetadata = false;
  llvm::StringSet<> metadataNames, metadataFrozen;
  llvm::StringMap<InitializerRole> roles = classifyInitializers(
      model, options.trainable, hasMetadata, metadataNames, metadataFrozen);
  hasTrainableMetadata = hasMetadata;
  for (const auto &n : metadataFrozen)
    if (!roles.count(n.getKey()))
      return error(loc) << "the model's " << kFrozenMetadataKey
                        << " metadata names \"" << n.getKey()
                        << "\", which is not a floating-point initializer of "
                           "the graph (was it folded or renamed at export?)";
  // An empty tcc.trainable would compile a step that trains nothing (its
  // users then meet "the step has no loss" at run time, or train nothing).
  if (hasMetadata && metadataNames.empty() && options.trainable.empty())
    return error(loc) << "the model's " << kTrainableMetadataKey
                      << " metadata lists no parameter, so there is nothing to train"
                      << (metadataFrozen.empty() ? "" : " (every parameter is in tcc.frozen)")
                      << ": export from a module with parameters that require gradients, "
                         "or name the ones to train with --trainable=NAME";
  // A model exported without tcc_export by an exporter that folds
  // parameters (torch.onnx.export's default optimizer, TorchScript's
  // do_constant_folding) holds copies of parameters under names the
  // exporter made up: training them would not train the module's.
  if (!hasMetadata && !options.allowUnrecorded) {
    SmallVector<StringRef> folded;
    int64_t trained = 0;
    for (const onnx::TensorProto &t : graph.initializer()) {
      auto r = roles.find(t.name());
      if (r == roles.end() || !r->second.parameter || options.trainable.contains(t.name()))
        continue;
      ++trained;
      if (isExporterFoldedName(t.name()))
        folded.push_back(t.name());
    }
    if (!folded.empty()) {
      std::string list;
      for (size_t i = 0; i < folded.size() && i < 6; ++i)
        list += (i ? ", \"" : "\"") + folded[i].str() + "\"";
      if (folded.size() > 6)
        list += " and " + std::to_string(folded.size() - 6) + " more";
      return error(loc)
             << folded.size() << " of the " << trained
             << " initializers tcc would train have names the exporter made up (" << list
             << "), and the model has no tcc.trainable metadata: this is what "
                "torch.onnx.export's default optimizer (optimize=True) or "
                "do_constant_folding=True writes, with parameters folded into "
                "transposed or merged copies, so training them would not train "
                "the module's parameters. Export with python/tcc_export.py "
                "(export(model, args, path, input_names=..., output_names=...)), or "
                "torch.onnx.export(..., dynamo=True, optimize=False); "
                "--allow-unrecorded trains the initializers as they are";
    }
  }
  std::vector<std::string> floatInitializers;
  for (const onnx::TensorProto &t : graph.initializer())
    if (roles.count(t.name()))
      floatInitializers.push_back(t.name());
  for (const auto &n : options.trainable)
    if (!roles.count(n.getKey()))
      return error(loc) << "--trainable: the model has no floating-point "
                           "initializer named \""
                        << n.getKey() << "\""
                        << suggestName(n.getKey(), floatInitializers, "floating-point initializers");
  for (const auto &n : metadataNames)
    if (!roles.count(n.getKey()))
      return error(loc) << "the model's " << kTrainableMetadataKey
                        << " metadata names \"" << n.getKey()
                        << "\", which is not a floating-point initializer of "
                           "the graph (was it folded or renamed at export?)";
  std::map<std::string, std::vector<std::string>> guessedByReason;
  for (const onnx::TensorProto &t : graph.initializer()) {
    initNames.insert(t.name());
    Type elt = elementType(ctx, t.data_type());
    auto role = roles.find(t.name());
    if (role != roles.end() && !role->second.parameter) {
      if (options.frozen.contains(t.name()))
        frozenSeen.insert(t.name());
      else if (role->second.guessed)
        guessedByReason[role->second.reason].push_back(t.name());
      constantInits.emplace_back(t.name(), readerOf(t.name()) + role->second.reason);
    } else if (elt && isa<FloatType>(elt)) {
      if (role != roles.end() && !role->second.copyOf.empty() &&
          !options.frozen.contains(t.name()))
        emitWarning(loc) << "initializer \"" << t.name() << "\" holds the values of \""
                         << role->second.copyOf << "\""
                         << (role->second.copyTransposed ? ", transposed" : "")
                         << ": if they are one tied weight written twice (as tf2onnx writes "
                            "tied embeddings), tcc does not tie them and trains two parameters "
                            "that drift apart where PyTorch and Keras train one; "
                            "python/tcc_export.py writes a tied weight once, and "
                            "--trainable="
                         << t.name() << " says they are two";
      FailureOr<SmallVector<int64_t>> shape = tensorShape(t, loc);
      if (failed(shape))
        return failure();
      auto type = RankedTensorType::get(*shape, elt);
      if (failed(checkTensorData(t, loc, type.getNumElements(), elt.getIntOrFloatBitWidth())))
        return failure();
      argTypes.push_back(type);
      bool frozen = options.frozen.contains(t.name()) ||
                    (metadataFrozen.contains(t.name()) && !options.trainable.contains(t.name()));
      if (options.frozen.contains(t.name()))
        frozenSeen.insert(t.name());
      SmallVector<NamedAttribute> attrs{
          builder.getNamedAttr(kParamAttr, builder.getStringAttr(t.name()))};
      if (frozen)
        attrs.push_back(builder.getNamedAttr(kFrozenAttr, builder.getUnitAttr()));
      argAttrs.push_back(builder.getNamedAttr("", builder.getDictionaryAttr(attrs)));
      continue;
    }
    FailureOr<DenseElementsAttr> value = tensorAttr(t, loc);
    if (failed(value))
      return failure();
    constants.emplace_back(t.name(), *value);
  }
  for (auto &[reason, names] : guessedByReason) {
    std::string list;
    for (size_t i = 0; i < names.size() && i < 8; ++i)
      list += (i ? ", \"" : "\"") + names[i] + "\"";
    if (names.size() > 8)
      list += " and " + std::to_string(names.size() - 8) + " more";
    emitWarning(loc) << "tcc keeps " << names.size() << " floating-point "
                     << (names.size() == 1 ? "initializer" : "initializers")
                     << " fixed, as PyTorch keeps a buffer, because " << reason
                     << ": " << list << "; pass --trainable=NAME to train one, "
                     << "or export with python/tcc_export.py, which records "
                        "the module's parameters";
  }
  for (const auto &f : options.frozen)
    if (!frozenSeen.contains(f.getKey()))
      return error(loc) << "--frozen: the model has no floating-point "
                           "initializer named \""
                        << f.getKey() << "\""
                        << suggestName(f.getKey(), floatInitializers, "floating-point initializers");

  // Graph inputs that are not initializers are the step's data inputs.
  llvm::StringSet<> inputNames;
  std::vector<std::string> inputList;
  for (const onnx::ValueInfoProto &in : graph.input())
    if (!initNames.contains(in.name()) && inputNames.insert(in.name()).second)
      inputList.push_back(in.name());
  for (const auto &s : options.inputShapes)
    if (!inputNames.contains(s.getKey()))
      return error(loc) << "--shape: the model has no graph input named \""
                        << s.getKey() << "\"" << suggestName(s.getKey(), inputList, "inputs");
  for (const onnx::ValueInfoProto &in : graph.input()) {
    if (initNames.contains(in.name()))
      continue;
    if (!in.type().has_tensor_type())
      return error(loc) << "graph input \"" << in.name()
                        << "\" is not a tensor; tcc supports tensor inputs only";
    const auto &tt = in.type().tensor_type();
    Type elt = elementType(ctx, tt.elem_type());
    if (!elt)
      return error(loc) << "graph input \"" << in.name() << "\" has data type "
                        << dataTypeName(tt.elem_type())
                        << ", which tcc does not support";
    if (!tt.has_shape())
      return error(loc) << "graph input \"" << in.name()
                        << "\" has no shape; pass --shape " << in.name()
                        << "=DxDx... (e.g. --shape " << in.name() << "=8x1024)";
    SmallVector<int64_t> shape;
    bool dynamic = false;
    for (const auto &d : tt.shape().dim()) {
      if (d.has_dim_value() && d.dim_value() >= 0)
        shape.push_back(d.dim_value());
      else {
        shape.push_back(ShapedType::kDynamic);
        dynamic = true;
      }
    }
    auto given = options.inputShapes.find(in.name());
    if (given != options.inputShapes.end()) {
      const std::vector<int64_t> &g = given->second;
      if (g.size() != shape.size())
        return error(loc) << "--shape " << in.name() << ": the input has rank "
                          << shape.size() << ", the flag gives " << g.size()
                          << " dimensions";
      for (size_t i = 0; i < g.size(); ++i)
        if (shape[i] != ShapedType::kDynamic && shape[i] != g[i])
          return error(loc) << "--shape " << in.name() << ": dimension " << i
                            << " is " << shape[i] << " in the model, not "
                            << g[i];
      shape.assign(g.begin(), g.end());
    } else if (dynamic) {
      // Show the shape with its named dimensions, and an example flag with
      // the dynamic ones filled in.
      std::string dims, example;
      for (const auto &d : tt.shape().dim()) {
        if (!dims.empty()) {
          dims += "x";
          example += "x";
        }
        bool known = d.has_dim_value() && d.dim_value() >= 0;
        dims += known ? std::to_string(d.dim_value())
                : d.has_dim_param() ? "<" + d.dim_param() + ">"
                                    : std::string("?");
        example += known ? std::to_string(d.dim_value()) : std::string("8");
      }
      return error(loc) << "graph input \"" << in.name()
                        << "\" has dynamic shape " << dims
                        << "; tcc compiles static shapes: pass --shape "
                        << in.name() << "=DIMS, e.g. --shape " << in.name()
                        << "=" << example;
    }
    argTypes.push_back(RankedTensorType::get(shape, elt));
    argAttrs.push_back(builder.getNamedAttr(
        "", builder.getDictionaryAttr({builder.getNamedAttr(
                kInputAttr, builder.getStringAttr(in.name()))})));
  }

  func = builder.create<func::FuncOp>(loc, "main",
                                      builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (auto [i, a] : llvm::enumerate(argAttrs)) {
    func.setArgAttrs(i, cast<DictionaryAttr>(a.getValue()));
    StringRef name = cast<DictionaryAttr>(a.getValue()).contains(kParamAttr)
                         ? func.getArgAttrOfType<StringAttr>(i, kParamAttr)
                         : func.getArgAttrOfType<StringAttr>(i, kInputAttr);
    values[name] = entry->getArgument(i);
  }
  builder.setInsertionPointToStart(entry);
  for (auto &[name, value] : constants)
    values[name] = builder.create<ConstantOp>(
        NameLoc::get(builder.getStringAttr(name), loc), value.getType(), value);
  return success();
}

FailureOr<Attribute> Importer::convertAttribute(const onnx::AttributeProto &a,
                                                Location loc,
                                                StringRef opType) {
  switch (a.type()) {
  case onnx::AttributeProto::INT:
    return Attribute(builder.getI64IntegerAttr(a.i()));
  case onnx::AttributeProto::FLOAT:
    return Attribute(builder.getF32FloatAttr(a.f()));
  case onnx::AttributeProto::STRING:
    return Attribute(builder.getStringAttr(a.s()));
  case onnx::AttributeProto::INTS:
    return Attribute(builder.getDenseI64ArrayAttr(
        SmallVector<int64_t>(a.ints().begin(), a.ints().end())));
  case onnx::AttributeProto::FLOATS:
    return Attribute(builder.getDenseF32ArrayAttr(
        SmallVector<float>(a.floats().begin(), a.floats().end())));
  case onnx::AttributeProto::TENSOR: {
    FailureOr<DenseElementsAttr> t = tensorAttr(a.t(), loc);
    if (failed(t))
      return failure();
    return Attribute(*t);
  }
  default:
    return error(loc) << "attribute \"" << a.name() << "\" of " << opType
                      << " has type "
                      << onnx::AttributeProto_AttributeType_Name(a.type())
                      << ", which tcc does not support";
  }
}

FailureOr<Attribute> Importer::constInputAttr(Value v, const ConstInput &ci,
                                              StringRef inputName, Location loc,
                                              StringRef opType) {
  DenseElementsAttr value;
  if (!matchPattern(v, m_Constant(&value))) {
    std::string what = "a value computed at run time";
    if (auto arg = dyn_cast<BlockArgument>(v))
      what = "a graph input";
    return error(loc) << "input " << ci.index << " (\"" << inputName
                      << "\", the " << ci.attr << ") of " << opType
                      << " must be a compile-time constant, but it is " << what
                      << "; tcc compiles static shapes";
  }
  Type elt = value.getElementType();
  switch (ci.kind) {
  case ConstKind::Ints: {
    if (!isa<IntegerType>(elt) || value.getType().getRank() > 1)
      return error(loc) << "input " << ci.index << " (the " << ci.attr
                        << ") of " << opType
                        << " must be a 1-D integer tensor";
    SmallVector<int64_t> ints;
    for (const APInt &i : value.getValues<APInt>())
      ints.push_back(i.getSExtValue());
    return Attribute(builder.getDenseI64ArrayAttr(ints));
  }
  case ConstKind::Int: {
    if (!isa<IntegerType>(elt) || value.getNumElements() != 1)
      return error(loc) << "input " << ci.index << " (the " << ci.attr
                        << ") of " << opType << " must be an integer scalar";
    return Attribute(builder.getI64IntegerAttr(
        (*value.getValues<APInt>().begin()).getSExtValue()));
  }
  case ConstKind::Tensor:
    return Attribute(value);
  case ConstKind::Float: {
    if (!isa<FloatType>(elt) || value.getNumElements() != 1)
      return error(loc) << "input " << ci.index << " (the " << ci.attr
                        << ") of " << opType << " must be a float scalar";
    return Attribute(builder.getF32FloatAttr(
        (float)(*value.getValues<APFloat>().begin()).convertToDouble()));
  }
  case ConstKind::Bool: {
    if (!elt.isInteger(1) || value.getNumElements() != 1)
      return error(loc) << "input " << ci.index << " (the " << ci.attr
                        << ") of " << opType << " must be a bool scalar";
    return Attribute(builder.getBoolAttr(*value.getValues<bool>().begin()));
  }
  }
  return failure();
}

LogicalResult Importer::importNode(const onnx::NodeProto &node, int index) {
  std::string name = node.name().empty() ? "#" + std::to_string(index)
                                         : node.name();
  Location loc = nodeLocation(ctx, path, name, node.op_type(), opset);
  StringRef opType = node.op_type();
  for (const onnx::FunctionProto &f : model.functions())
    if (f.name() == opType && f.domain() == node.domain())
      return error(loc) << "the node calls " << node.domain() << "." << opType
                        << ", a function local to the model, which tcc does "
                           "not inline; export without "
                           "export_modules_as_functions (python/tcc_export.py "
                           "inlines them)";
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    return error(loc) << "op " << node.domain() << "." << opType
                      << " is from a domain tcc does not support";
  const OpSpec *spec = lookupOp(opType);
  if (!spec)
    return error(loc) << "unsupported op " << opType << " (tcc supports: "
                      << llvm::join(supportedOnnxOps(), ", ") << ")";
  if (opset < spec->minOpset)
    return error(loc) << opType << " at opset " << opset
                      << " is not supported: tcc implements its semantics "
                         "from opset "
                      << spec->minOpset;

  // The node's shape against the op's schema, before anything is built.
  int numIn = node.input_size(), numOut = node.output_size();
  while (numIn > 0 && node.input(numIn - 1).empty())
    --numIn;
  while (numOut > 0 && node.output(numOut - 1).empty())
    --numOut;
  const Arity *arity = nullptr;
  for (const Arity &a : arityOf(opType))
    if (opset >= a.since)
      arity = &a;
  if (arity) {
    auto range = [](int lo, int hi) {
      return hi >= kMany   ? std::to_string(lo) + " or more"
             : lo == hi ? std::to_string(lo)
                        : std::to_string(lo) + " to " + std::to_string(hi);
    };
    if (numIn < arity->minIn || numIn > arity->maxIn)
      return error(loc) << opType << " takes " << range(arity->minIn, arity->maxIn)
                        << (arity->maxIn == 1 ? " input" : " inputs") << " at opset "
                        << opset << "; this node has " << numIn;
    for (int i = 0; i < arity->minIn; ++i)
      if (node.input(i).empty())
        return error(loc) << "input " << i << " of " << opType
                          << " is required, but the node leaves it empty";
    if (numOut < arity->minOut || numOut > arity->maxOut)
      return error(loc) << opType << " has " << range(arity->minOut, arity->maxOut)
                        << (arity->maxOut == 1 ? " output" : " outputs") << " at opset "
                        << opset << "; this node has " << numOut;
  }
  if (opType == "Attention")
    for (int i = 4; i < numIn; ++i)
      if (!node.input(i).empty())
        return error(loc) << "input " << i << " of Attention ("
                          << (i == 4 ? "past_key" : i == 5 ? "past_value" : "nonpad_kv_seqlen")
                          << ") is not supported: tcc compiles training steps without a "
                             "key/value cache";
  if (StringRef required; requiresAttribute(opType, opset, required) &&
                          llvm::none_of(node.attribute(), [&](const auto &a) {
                            return a.name() == required;
                          }))
    return error(loc) << opType << " needs its \"" << required << "\" attribute";

  if (opType == "BatchNormalization" && !trainingBatchNorm &&
      llvm::any_of(node.attribute(), [](const onnx::AttributeProto &a) {
        return a.name() == "training_mode" && a.i() != 0;
      }))
    trainingBatchNorm = loc;

  // Ops written as several tcc ops (Composites.h); an omitted optional input
  // is a null operand.
  if (isCompositeOp(opType)) {
    SmallVector<Value> operands;
    for (const std::string &in : node.input()) {
      auto it = in.empty() ? values.end() : values.find(in);
      if (!in.empty() && it == values.end())
        return error(loc) << "input \"" << in << "\" is not defined before this "
                          << "node (the graph must be topologically sorted)";
      operands.push_back(in.empty() ? Value() : it->second);
    }
    FailureOr<SmallVector<Value>> results = buildComposite(builder, loc, node, opset, operands);
    if (failed(results))
      return failure();
    for (auto [name, v] : llvm::zip(node.output(), *results))
      if (!name.empty())
        values[name] = v;
    return success();
  }

  // Operands, with the compile-time inputs turned into attributes.
  SmallVector<Value> operands;
  SmallVector<NamedAttribute> attrs;
  for (int i = 0; i < node.input_size(); ++i) {
    const std::string &in = node.input(i);
    const ConstInput *ci = nullptr;
    for (const ConstInput &c : spec->constInputs)
      if (c.index == (unsigned)i && opset >= c.sinceOpset)
        ci = &c;
    if (in.empty()) {
      if (!ci && i + 1 < node.input_size())
        return error(loc) << "an omitted optional input before input " << i + 1
                          << " is not supported";
      continue;
    }
    auto it = values.find(in);
    if (it == values.end())
      return error(loc) << "input \"" << in << "\" is not defined before this "
                        << "node (the graph must be topologically sorted)";
    if (!ci) {
      operands.push_back(it->second);
      continue;
    }
    FailureOr<Attribute> attr = constInputAttr(it->second, *ci, in, loc, opType);
    if (failed(attr))
      return failure();
    attrs.push_back(builder.getNamedAttr(ci->attr, *attr));
  }

  if (opType == "Flatten" || opType == "CastLike" || opType == "Range")
    return importRewritten(node, operands, loc);
  if ((opType == "Max" || opType == "Min") && operands.size() != 2) {
    // Variadic: one input is itself, more are folded pairwise from the left.
    if (operands.empty() || node.output_size() != 1 || node.attribute_size() != 0)
      return error(loc) << opType << " needs at least one input, one output and "
                        << "no attributes";
    Value acc = operands[0];
    for (Value next : ArrayRef<Value>(operands).drop_front()) {
      auto a = cast<RankedTensorType>(acc.getType());
      auto b = cast<RankedTensorType>(next.getType());
      SmallVector<int64_t> shape;
      if (a.getElementType() != b.getElementType() ||
          !broadcastShapes(a.getShape(), b.getShape(), shape))
        return error(loc) << opType << "'s inputs " << a << " and " << b
                          << " do not broadcast to one type";
      Operation *op = opType == "Max" ? builder.create<MaxOp>(loc, acc, next).getOperation()
                                      : builder.create<MinOp>(loc, acc, next).getOperation();
      if (failed(verify(op))) {
        op->erase();
        return failure();
      }
      acc = op->getResult(0);
    }
    values[node.output(0)] = acc;
    return success();
  }

  // Attributes: each must be one the op knows; a few need translating.
  OperationName opName(spec->tcc, ctx);
  std::optional<int64_t> numOutputs; // Split's, from opset 18
  ArrayRef<StringAttr> known = opName.getAttributeNames();
  for (const onnx::AttributeProto &a : node.attribute()) {
    StringRef attrName = a.name();
    if (opType == "Cast" && attrName == "to") {
      Type to = elementType(ctx, (int32_t)a.i());
      if (!to)
        return error(loc) << "Cast to " << dataTypeName((int32_t)a.i())
                          << " is not supported";
      attrs.push_back(builder.getNamedAttr("to", TypeAttr::get(to)));
      continue;
    }
    if (opType == "Cast" && (attrName == "saturate" || attrName == "round_mode"))
      continue; // only change conversions to float8, which tcc refuses
    if (opType == "Split" && attrName == "num_outputs" && opset >= 18) {
      numOutputs = a.i();
      continue;
    }
    if (opType == "Constant") {
      FailureOr<Attribute> v = convertAttribute(a, loc, opType);
      if (failed(v))
        return failure();
      Attribute value;
      if (attrName == "value")
        value = *v;
      else if (attrName == "value_float")
        value = DenseElementsAttr::get(
            RankedTensorType::get({}, builder.getF32Type()), a.f());
      else if (attrName == "value_int")
        value = DenseElementsAttr::get(
            RankedTensorType::get({}, builder.getI64Type()), (int64_t)a.i());
      else if (attrName == "value_floats")
        value = DenseElementsAttr::get(
            RankedTensorType::get({a.floats_size()}, builder.getF32Type()),
            ArrayRef<float>(SmallVector<float>(a.floats().begin(), a.floats().end())));
      else if (attrName == "value_ints")
        value = DenseElementsAttr::get(
            RankedTensorType::get({a.ints_size()}, builder.getI64Type()),
            ArrayRef<int64_t>(SmallVector<int64_t>(a.ints().begin(), a.ints().end())));
      else
        return error(loc) << "Constant with attribute \"" << attrName
                          << "\" is not supported";
      attrs.push_back(builder.getNamedAttr("value", value));
      continue;
    }
    if (!llvm::is_contained(known, builder.getStringAttr(attrName)))
      return error(loc) << "attribute \"" << attrName << "\" of " << opType
                        << " is not supported";
    FailureOr<Attribute> v = convertAttribute(a, loc, opType);
    if (failed(v))
      return failure();
    attrs.push_back(builder.getNamedAttr(attrName, *v));
  }
  NamedAttrList attrList(attrs);
  if (opType == "Constant" && !attrList.get("value"))
    return error(loc) << "Constant has no value";
  if (opType == "Constant" && node.attribute_size() > 1)
    return error(loc) << "Constant has " << node.attribute_size()
                      << " attributes; it must have exactly one value";
  if (opType == "ConstantOfShape" && !attrList.get("value"))
    attrList.set("value", DenseElementsAttr::get(
                              RankedTensorType::get({1}, builder.getF32Type()),
                              0.0f));
  if (opType == "Dropout") {
    // Training-mode dropout draws tcc's own random masks (tcc-legalize,
    // runtime/tcc_random.h); ONNX's optional `seed` is not used.
    auto ratio = dyn_cast_or_null<FloatAttr>(attrList.get("ratio"));
    if (ratio && !(ratio.getValueAsDouble() >= 0.0 && ratio.getValueAsDouble() < 1.0))
      return error(loc) << "Dropout ratio " << ratio.getValueAsDouble()
                        << " is outside [0, 1)";
    if (!ratio)
      attrList.set("ratio", builder.getF32FloatAttr(0.5f));
  }
  if (opType == "Split" && !attrList.get("split")) {
    // An even split into as many pieces as the node has outputs.
    if (operands.empty())
      return error(loc) << "Split has no input";
    auto t = cast<RankedTensorType>(operands[0].getType());
    int64_t axis = 0;
    if (auto a = dyn_cast_or_null<IntegerAttr>(attrList.get("axis")))
      axis = a.getInt();
    std::optional<int64_t> ax = normalizeAxis(axis, t.getRank());
    int64_t parts = node.output_size();
    if (numOutputs) {
      // Opset 18: pieces of ceil(dim / num_outputs), the last one smaller.
      int64_t dim = ax ? t.getDimSize(*ax) : 0;
      int64_t n = *numOutputs;
      int64_t chunk = n > 0 ? (dim + n - 1) / n : 0;
      if (!ax || n != parts || n <= 0 || chunk * (n - 1) >= dim + (dim == 0))
        return error(loc) << "Split cannot split axis " << axis << " of " << t
                          << " into num_outputs = " << n << " pieces for its "
                          << parts << " outputs";
      SmallVector<int64_t> sizes(n - 1, chunk);
      sizes.push_back(dim - chunk * (n - 1));
      attrList.set("split", builder.getDenseI64ArrayAttr(sizes));
    } else {
      if (!ax || parts == 0 || t.getDimSize(*ax) % parts != 0)
        return error(loc) << "Split cannot split axis " << axis << " of "
                          << t << " evenly into " << parts << " outputs";
      attrList.set("split", builder.getDenseI64ArrayAttr(SmallVector<int64_t>(
                                parts, t.getDimSize(*ax) / parts)));
    }
  }

  int numResults = spec->numResults < 0 ? node.output_size() : spec->numResults;
  if (node.output_size() > numResults)
    return error(loc) << opType << " with " << node.output_size()
                      << " outputs is not supported (tcc implements "
                      << numResults << ")";

  // Create the op with placeholder result types, check that every attribute
  // landed (a wrongly typed one would silently become the default), then let
  // the op infer its result types and verify itself.
  OperationState state(loc, opName);
  state.addOperands(operands);
  state.addAttributes(attrList);
  state.addTypes(SmallVector<Type>(numResults, builder.getNoneType()));
  Operation *op = builder.create(state);
  auto eraseAndFail = [&]() {
    op->erase();
    return failure();
  };
  for (const NamedAttribute &a : attrList)
    if (op->getInherentAttr(a.getName()) != std::optional<Attribute>(a.getValue())) {
      error(loc) << "attribute \"" << a.getName().getValue() << "\" of "
                 << opType << " has an unsupported type or value";
      return eraseAndFail();
    }
  SmallVector<Type> types;
  auto infer = cast<InferTypeOpInterface>(op);
  if (failed(infer.inferReturnTypes(ctx, loc, op->getOperands(),
                                    op->getRawDictionaryAttrs(),
                                    op->getPropertiesStorage(),
                                    op->getRegions(), types)))
    return eraseAndFail();
  for (auto [r, t] : llvm::zip(op->getResults(), types))
    r.setType(t);
  if (failed(verify(op)))
    return eraseAndFail();

  SmallVector<Value> results = foldIfConstant(op, loc);
  for (int i = 0; i < node.output_size(); ++i)
    if (!node.output(i).empty())
      values[node.output(i)] = results[i];
  return success();
}

/// `op`'s results, or, when every operand is a constant (or the op is the
/// identity) and it folds, what it folds to (`op` erased).
SmallVector<Value> Importer::foldIfConstant(Operation *op, Location loc) {
  SmallVector<Value> results(op->getResults());
  SmallVector<Attribute> constOperands;
  for (Value v : op->getOperands()) {
    Attribute a;
    matchPattern(v, m_Constant(&a));
    constOperands.push_back(a);
  }
  SmallVector<OpFoldResult> folded;
  if (isa<ConstantOp>(op) || failed(op->fold(constOperands, folded)) || folded.empty())
    return results;
  auto *dialect = op->getContext()->getLoadedDialect<TccDialect>();
  SmallVector<Value> replacement;
  for (auto [res, fr] : llvm::zip(op->getResults(), folded)) {
    if (auto v = dyn_cast<Value>(fr)) {
      replacement.push_back(v);
      continue;
    }
    Operation *c = dialect->materializeConstant(builder, cast<Attribute>(fr), res.getType(), loc);
    if (!c)
      return results;
    replacement.push_back(c->getResult(0));
  }
  op->erase();
  ++numFolded;
  return replacement;
}

/// The ONNX ops that become another tcc op with attributes worked out here:
/// Flatten (a reshape to two dimensions), CastLike (a cast to the second
/// operand's element type) and Range (a constant: its bounds must be).
LogicalResult Importer::importRewritten(const onnx::NodeProto &node,
                                        ArrayRef<Value> operands, Location loc) {
  StringRef opType = node.op_type();
  auto attrInt = [&](StringRef name, int64_t dflt) {
    for (const onnx::AttributeProto &a : node.attribute())
      if (a.name() == name)
        return (int64_t)a.i();
    return dflt;
  };
  for (const onnx::AttributeProto &a : node.attribute()) {
    bool known = (opType == "Flatten" && a.name() == "axis") ||
                 (opType == "CastLike" && a.name() == "saturate");
    if (!known)
      return error(loc) << "attribute \"" << a.name() << "\" of " << opType
                        << " is not supported";
  }
  size_t arity = opType == "Flatten" ? 1 : opType == "CastLike" ? 2 : 3;
  if (operands.size() != arity || node.output_size() != 1)
    return error(loc) << opType << " needs " << arity << " inputs and 1 output, "
                      << "this node has " << operands.size() << " and "
                      << node.output_size();
  auto input = cast<RankedTensorType>(operands[0].getType());
  Operation *op = nullptr;
  if (opType == "Flatten") {
    int64_t rank = input.getRank(), axis = attrInt("axis", 1);
    if (axis < -rank || axis > rank)
      return error(loc) << "Flatten axis " << axis << " is out of range for rank "
                        << rank;
    if (axis < 0)
      axis += rank;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < axis ? outer : inner) *= input.getDimSize(d);
    op = builder.create<ReshapeOp>(
        loc, TypeRange{RankedTensorType::get({outer, inner}, input.getElementType())},
        ValueRange{operands[0]},
        ArrayRef<NamedAttribute>{builder.getNamedAttr(
            "shape", builder.getDenseI64ArrayAttr({outer, inner}))});
  } else if (opType == "CastLike") {
    Type to = cast<RankedTensorType>(operands[1].getType()).getElementType();
    op = builder.create<CastOp>(
        loc, TypeRange{RankedTensorType::get(input.getShape(), to)},
        ValueRange{operands[0]},
        ArrayRef<NamedAttribute>{builder.getNamedAttr("to", TypeAttr::get(to))});
  } else { // Range
    SmallVector<double> bounds;
    for (Value v : operands) {
      DenseElementsAttr c;
      if (!matchPattern(v, m_Constant(&c)) || c.getNumElements() != 1 ||
          c.getElementType() != input.getElementType())
        return error(loc) << "Range's start, limit and delta must be "
                             "compile-time scalars of one type; tcc compiles "
                             "static shapes";
      bounds.push_back(isa<FloatType>(c.getElementType())
                           ? (*c.getValues<APFloat>().begin()).convertToDouble()
                           : (double)(*c.getValues<APInt>().begin()).getSExtValue());
    }
    double start = bounds[0], limit = bounds[1], delta = bounds[2];
    double count = delta == 0 ? -1 : std::ceil((limit - start) / delta);
    if (!(count >= 0 && count <= (double)(1 << 24)))
      return error(loc) << "Range from " << start << " to " << limit << " by "
                        << delta << " has no valid length (at most 2^24)";
    auto type = RankedTensorType::get({(int64_t)count}, input.getElementType());
    DenseElementsAttr value;
    if (auto ft = dyn_cast<FloatType>(type.getElementType())) {
      SmallVector<APFloat> vals;
      for (int64_t i = 0; i < (int64_t)count; ++i) {
        APFloat v(start + (double)i * delta);
        bool lost;
        v.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
        vals.push_back(v);
      }
      value = DenseElementsAttr::get(type, vals);
    } else {
      unsigned width = type.getElementType().getIntOrFloatBitWidth();
      SmallVector<APInt> vals;
      for (int64_t i = 0; i < (int64_t)count; ++i)
        vals.push_back(APInt(width, (uint64_t)((int64_t)start + i * (int64_t)delta),
                             /*isSigned=*/true));
      value = DenseElementsAttr::get(type, vals);
    }
    op = builder.create<ConstantOp>(loc, type, value);
    ++numFolded;
  }
  if (failed(verify(op))) {
    op->erase();
    return failure();
  }
  values[node.output(0)] = foldIfConstant(op, loc)[0];
  return success();
}

LogicalResult Importer::importOutputs(func::FuncOp func) {
  SmallVector<Value> results;
  SmallVector<Type> types;
  for (const onnx::ValueInfoProto &out : model.graph().output()) {
    auto it = values.find(out.name());
    if (it == values.end())
      return error(fileLoc) << "graph output \"" << out.name()
                            << "\" is not produced by any node";
    Value v = it->second;
    auto type = cast<RankedTensorType>(v.getType());
    // Where the model declares the output's type, tcc's inference must agree.
    if (out.type().has_tensor_type()) {
      const auto &tt = out.type().tensor_type();
      Type elt = elementType(ctx, tt.elem_type());
      bool mismatch = elt && elt != type.getElementType();
      if (tt.has_shape()) {
        if (tt.shape().dim_size() != type.getRank())
          mismatch = true;
        else
          for (int i = 0; i < type.getRank(); ++i)
            if (tt.shape().dim(i).has_dim_value() &&
                tt.shape().dim(i).dim_value() != type.getDimSize(i))
              mismatch = true;
      }
      if (mismatch)
        return error(fileLoc) << "graph output \"" << out.name()
                              << "\": the model declares a type that differs "
                                 "from what tcc infers ("
                              << type << ")";
    }
    results.push_back(v);
    types.push_back(type);
  }
  builder.create<func::ReturnOp>(fileLoc, results);
  func.setFunctionType(
      builder.getFunctionType(func.getArgumentTypes(), types));
  for (auto [i, out] : llvm::enumerate(model.graph().output()))
    func.setResultAttr(i, kOutputAttr, builder.getStringAttr(out.name()));
  return success();
}

OwningOpRef<ModuleOp> Importer::run(ImportStats *stats) {
  ctx->loadDialect<TccDialect, func::FuncDialect>();
  if (failed(load()) || failed(checkModelText(model, fileLoc)) || failed(checkOpset()))
    return nullptr;
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  builder.setInsertionPointToEnd(module->getBody());
  func::FuncOp func;
  if (failed(importSignature(func)))
    return nullptr;
  for (int i = 0; i < model.graph().node_size(); ++i)
    if (failed(importNode(model.graph().node(i), i)))
      return nullptr;
  if (failed(importOutputs(func)))
    return nullptr;
  warnPaddingRows();

  // Constants that only fed attributes, and folded-away subgraphs, are dead.
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front().without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (isOpTriviallyDead(op))
      op->erase();

  Builder b(ctx);
  (*module)->setAttr("tcc.opset", b.getI64IntegerAttr(opset));
  (*module)->setAttr("tcc.source",
                     b.getStringAttr(llvm::sys::path::filename(path)));
  std::string producer = model.producer_name();
  if (!model.producer_version().empty())
    producer += " " + model.producer_version();
  if (!producer.empty())
    (*module)->setAttr("tcc.producer", b.getStringAttr(producer));
  FailureOr<DictionaryAttr> objective = importObjective();
  if (failed(objective))
    return nullptr;
  if (*objective)
    (*module)->setAttr(kObjectiveAttr, *objective);
  warnUnreadInputs();
  if (failed(verify(*module)))
    return nullptr;
  if (stats) {
    stats->opset = opset;
    stats->producer = producer;
    stats->numNodes = model.graph().node_size();
    stats->numFolded = numFolded;
    stats->constants = constantInits;
    stats->hasTrainableMetadata = hasTrainableMetadata;
    stats->trainingBatchNorm = trainingBatchNorm;
  }
  return module;
}

/// The model's tcc.objective metadata (python/tcc_export.py writes it:
/// `task=causal-lm;ids=input_ids;labels=labels;mask=attention_mask;
/// labels-shift=shifted`) as the module's tcc.objective dictionary, each
/// input name checked against the graph's data inputs. Null without it.
FailureOr<DictionaryAttr> Importer::importObjective() {
  const onnx::StringStringEntryProto *entry = nullptr;
  for (const onnx::StringStringEntryProto &p : model.metadata_props())
    if (p.key() == kObjectiveMetadataKey)
      entry = &p;
  if (!entry)
    return DictionaryAttr();
  llvm::StringSet<> initNames, inputs;
  for (const onnx::TensorProto &t : model.graph().initializer())
    initNames.insert(t.name());
  for (const onnx::ValueInfoProto &in : model.graph().input())
    if (!initNames.contains(in.name()))
      inputs.insert(in.name());
  auto bad = [&](const Twine &why) {
    return error(fileLoc) << "the model's " << kObjectiveMetadataKey << " metadata (\""
                          << entry->value() << "\") " << why;
  };
  SmallVector<StringRef> fields;
  StringRef(entry->value()).split(fields, ';', -1, /*KeepEmpty=*/false);
  SmallVector<NamedAttribute> attrs;
  llvm::StringSet<> seen;
  for (StringRef f : fields) {
    auto [key, value] = f.split('=');
    key = key.trim();
    value = value.trim();
    if (!f.contains('=') || value.empty())
      return bad("has a field without a value: \"" + f + "\"");
    if (!seen.insert(key).second)
      return bad("gives " + key + " twice");
    if (key == "ids" || key == "labels" || key == "mask") {
      if (!inputs.contains(value))
        return bad("says the " + key + " are graph input \"" + value +
                   "\", which the graph does not have as a data input");
    } else if (key == "task") {
      if (value != "causal-lm" && value != "masked-lm")
        return bad("has task \"" + value + "\" (known: causal-lm, masked-lm)");
    } else if (key == "labels-shift") {
      if (value != "shifted" && value != "aligned")
        return bad("has labels-shift \"" + value + "\" (shifted or aligned)");
    } else {
      return bad("has an unknown field \"" + key +
                 "\" (known: task, ids, labels, mask, labels-shift)");
    }
    attrs.push_back(builder.getNamedAttr(key, builder.getStringAttr(value)));
  }
  if (seen.contains("labels") != seen.contains("labels-shift"))
    return bad(seen.contains("labels") ? "names the labels but not their labels-shift"
                                       : "gives a labels-shift without the labels");
  return builder.getDictionaryAttr(attrs);
}

/// A graph input that no node reads: torch.export gives one tensor passed
/// as two arguments (`labels=input_ids`) to the graph once, through one of
/// its inputs, and keeps the other unread. Training feeds both, so say so.
void Importer::warnUnreadInputs() {
  llvm::StringSet<> read, initNames;
  for (const onnx::NodeProto &n : model.graph().node())
    for (const std::string &in : n.input())
      read.insert(in);
  for (const onnx::ValueInfoProto &out : model.graph().output())
    read.insert(out.name());
  for (const onnx::TensorProto &t : model.graph().initializer())
    initNames.insert(t.name());
  for (const onnx::ValueInfoProto &in : model.graph().input())
    if (!initNames.contains(in.name()) && !read.contains(in.name()))
      emitWarning(fileLoc) << "graph input \"" << in.name()
                           << "\" is read by no node of the model, so what is fed to it "
                              "does not matter (an exporter given one tensor for two "
                              "arguments, as labels=input_ids, reads it through one "
                              "input only; python/tcc_export.py exports such arguments "
                              "as two inputs)";
}

/// nn.Embedding(padding_idx=k) starts row k of its table at zero, and
/// PyTorch never updates that row; ONNX does not record padding_idx, so tcc
/// trains it like the others. Where a trainable float32 table that a Gather
/// reads along axis 0 has exactly one all-zero row, say so rather than
/// silently train differently from PyTorch.
void Importer::warnPaddingRows() {
  llvm::StringMap<const onnx::TensorProto *> tables;
  for (const onnx::TensorProto &t : model.graph().initializer())
    if (t.data_type() == onnx::TensorProto::FLOAT && t.dims_size() == 2 && t.dims(0) > 1 &&
        t.dims(1) > 0 && t.has_raw_data() && !options.frozen.contains(t.name()) &&
        t.raw_data().size() == static_cast<size_t>(t.dims(0) * t.dims(1)) * 4)
      tables[t.name()] = &t;
  llvm::StringSet<> warned;
  for (const onnx::NodeProto &node : model.graph().node()) {
    if (node.op_type() != "Gather" || node.input_size() < 1 || !tables.count(node.input(0)) ||
        warned.contains(node.input(0)))
      continue;
    bool axis0 = true;
    for (const onnx::AttributeProto &a : node.attribute())
      if (a.name() == "axis")
        axis0 = a.i() == 0 || a.i() == -2;
    if (!axis0)
      continue;
    const onnx::TensorProto &t = *tables.lookup(node.input(0));
    const std::string &raw = t.raw_data();
    size_t rowBytes = static_cast<size_t>(t.dims(1)) * 4;
    int64_t zeroRow = -1, zeroRows = 0;
    for (int64_t r = 0; r < t.dims(0); ++r) {
      const char *row = raw.data() + r * rowBytes;
      if (std::all_of(row, row + rowBytes, [](char c) { return c == 0; })) {
        zeroRow = r;
        ++zeroRows;
      }
    }
    if (zeroRows != 1)
      continue;
    warned.insert(node.input(0));
    emitWarning(nodeLocation(ctx, path, node.name(), node.op_type(), opset))
        << "row " << zeroRow << " of \"" << t.name()
        << "\" (the table this Gather reads) is all zeros, as nn.Embedding(padding_idx="
        << zeroRow << ") starts it; PyTorch keeps a padding_idx row fixed, but ONNX "
           "does not record padding_idx, so tcc trains that row like the others";
  }
}

LogicalResult Importer::readParameters(ArrayRef<std::string> names,
                                       bool asDouble, std::string &blob) {
  if (failed(load()))
    return failure();
  llvm::StringMap<const onnx::TensorProto *> byName;
  for (const onnx::TensorProto &t : model.graph().initializer())
    byName[t.name()] = &t;
  for (const std::string &name : names) {
    auto it = byName.find(name);
    if (it == byName.end())
      return error(fileLoc) << "initializer \"" << name << "\" is missing";
    FailureOr<DenseElementsAttr> value = tensorAttr(*it->second, fileLoc);
    if (failed(value))
      return failure();
    for (const APFloat &v : value->getValues<APFloat>()) {
      bool lost;
      APFloat d = v;
      d.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
      if (asDouble) {
        double x = d.convertToDouble();
        blob.append(reinterpret_cast<const char *>(&x), sizeof(x));
      } else {
        float x = (float)d.convertToDouble();
        blob.append(reinterpret_cast<const char *>(&x), sizeof(x));
      }
    }
  }
  return success();
}

LogicalResult mlir::tcc::readParameterValues(MLIRContext *context,
                                             StringRef path,
                                             ArrayRef<std::string> names,
                                             bool asDouble, std::string &blob) {
  ImportOptions options;
  Importer importer(context, path, options);
  return importer.readParameters(names, asDouble, blob);
}

OwningOpRef<ModuleOp> mlir::tcc::importOnnxFile(MLIRContext *context,
                                                StringRef path,
                                                const ImportOptions &options,
                                                ImportStats *stats) {
  Importer importer(context, path, options);
  return importer.run(stats);
}

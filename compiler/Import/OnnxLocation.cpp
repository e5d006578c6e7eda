//===- OnnxLocation.cpp - locations that name ONNX nodes ------------------===//

#include "compiler/Import/OnnxLocation.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

Location mlir::tcc::fileLocation(MLIRContext *context, StringRef file) {
  return FileLineColLoc::get(context, file, 0, 0);
}

Location mlir::tcc::nodeLocation(MLIRContext *context, StringRef file,
                                 StringRef name, StringRef opType,
                                 int64_t opset) {
  Builder b(context);
  Attribute meta = b.getArrayAttr({b.getStringAttr(opType), b.getI64IntegerAttr(opset)});
  Location parts[] = {NameLoc::get(b.getStringAttr(name)),
                      fileLocation(context, file)};
  return FusedLoc::get(parts, meta, context);
}

std::string mlir::tcc::describeLocation(Location loc) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (auto fused = dyn_cast<FusedLoc>(loc)) {
    auto meta = dyn_cast_or_null<ArrayAttr>(fused.getMetadata());
    if (meta && meta.size() == 2 && isa<StringAttr>(meta[0]) &&
        isa<IntegerAttr>(meta[1])) {
      StringRef file, name;
      for (Location l : fused.getLocations()) {
        if (auto f = dyn_cast<FileLineColLoc>(l))
          file = f.getFilename().getValue();
        else if (auto n = dyn_cast<NameLoc>(l))
          name = n.getName();
      }
      os << file << ": node \"" << name << "\" ("
         << cast<StringAttr>(meta[0]).getValue() << ", opset "
         << cast<IntegerAttr>(meta[1]).getInt() << ")";
      return out;
    }
  }
  if (auto f = dyn_cast<FileLineColLoc>(loc)) {
    os << f.getFilename().getValue();
    if (f.getLine() != 0)
      os << ":" << f.getLine() << ":" << f.getColumn();
    return out;
  }
  if (auto n = dyn_cast<NameLoc>(loc))
    return describeLocation(n.getChildLoc());
  loc.print(os);
  return out;
}

mlir::tcc::OnnxDiagnosticHandler::OnnxDiagnosticHandler(MLIRContext *context)
    : ScopedDiagnosticHandler(context) {
  setHandler([](Diagnostic &diag) {
    auto print = [](Diagnostic &d) {
      llvm::errs() << describeLocation(d.getLocation()) << ": ";
      switch (d.getSeverity()) {
      case DiagnosticSeverity::Error: llvm::errs() << "error: "; break;
      case DiagnosticSeverity::Warning: llvm::errs() << "warning: "; break;
      case DiagnosticSeverity::Note: llvm::errs() << "note: "; break;
      case DiagnosticSeverity::Remark: llvm::errs() << "remark: "; break;
      }
      llvm::errs() << d.str() << "\n";
    };
    print(diag);
    for (Diagnostic &note : diag.getNotes())
      print(note);
    return success();
  });
}

//===- ModelText.cpp - the model's names are text -------------------------===//

#include "compiler/Import/ModelText.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <onnx/onnx_pb.h>

#include <functional>

using namespace mlir;

/// Bytes of the UTF-8 sequence that starts at `s[i]`, when it is a legal one
/// and not a control character; 0 otherwise.
static unsigned textChar(llvm::StringRef s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80)
    return (c >= 0x20 && c != 0x7f) || c == '\t' ? 1 : 0;
  unsigned n = llvm::getNumBytesForUTF8(c);
  if (n < 2 || i + n > s.size())
    return 0;
  auto *p = reinterpret_cast<const llvm::UTF8 *>(s.data() + i);
  if (!llvm::isLegalUTF8Sequence(p, p + n))
    return 0;
  // C1 controls (U+0080..U+009F) are two bytes, 0xC2 0x80..0x9F.
  if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0)
    return 0;
  return n;
}

bool mlir::tcc::isNameText(llvm::StringRef s) {
  for (size_t i = 0; i < s.size();) {
    unsigned n = textChar(s, i);
    if (!n)
      return false;
    i += n;
  }
  return true;
}

std::string mlir::tcc::escapeName(llvm::StringRef s) {
  std::string out;
  llvm::raw_string_ostream os(out);
  for (size_t i = 0; i < s.size();) {
    unsigned n = s[i] == '\\' ? 0 : textChar(s, i);
    if (n) {
      os << s.substr(i, n);
      i += n;
    } else {
      os << "\\x" << llvm::format_hex_no_prefix(static_cast<unsigned char>(s[i]), 2, true);
      ++i;
    }
  }
  return out;
}

LogicalResult mlir::tcc::checkModelText(const onnx::ModelProto &model, Location fileLoc) {
  // Each string with what it is, until one is not text.
  std::string bad, what;
  auto check = [&](const std::string &s, const std::function<std::string()> &describe) {
    if (!bad.empty() || isNameText(s))
      return;
    bad = s;
    what = describe();
  };
  for (int i = 0; i < model.metadata_props_size(); ++i) {
    const auto &p = model.metadata_props(i);
    check(p.key(), [&] { return "metadata key " + std::to_string(i); });
    check(p.value(), [&] {
      return "metadata \"" + escapeName(p.key()) + "\"'s value";
    });
  }
  const onnx::GraphProto &g = model.graph();
  auto values = [&](const auto &list, const char *kind) {
    for (int i = 0; i < list.size(); ++i)
      check(list.Get(i).name(), [&] { return std::string(kind) + " " + std::to_string(i) + "'s name"; });
  };
  values(g.input(), "graph input");
  values(g.output(), "graph output");
  values(g.initializer(), "initializer");
  values(g.value_info(), "value_info entry");
  for (int i = 0; i < model.opset_import_size(); ++i)
    check(model.opset_import(i).domain(), [&] { return "opset import " + std::to_string(i) + "'s domain"; });
  for (int n = 0; n < g.node_size(); ++n) {
    const onnx::NodeProto &node = g.node(n);
    auto where = [&] {
      return "node " + std::to_string(n) +
             (isNameText(node.op_type()) ? " (" + node.op_type() + ")" : std::string()) + "'s ";
    };
    check(node.op_type(), [&] { return where() + "op type"; });
    check(node.domain(), [&] { return where() + "domain"; });
    check(node.name(), [&] { return where() + "name"; });
    for (int k = 0; k < node.input_size(); ++k)
      check(node.input(k), [&] { return where() + "input " + std::to_string(k); });
    for (int k = 0; k < node.output_size(); ++k)
      check(node.output(k), [&] { return where() + "output " + std::to_string(k); });
    for (int k = 0; k < node.attribute_size(); ++k)
      check(node.attribute(k).name(), [&] { return where() + "attribute " + std::to_string(k) + "'s name"; });
  }
  if (bad.empty())
    return success();
  return emitError(fileLoc) << "the model's " << what << " \"" << escapeName(bad)
                            << "\" is not UTF-8 text (bytes that are not are shown as \\xHH): "
                               "ONNX names are UTF-8 strings; the file is damaged or was "
                               "not written by an ONNX exporter";
}

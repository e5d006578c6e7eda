//===- Trainable.cpp - which initializers are trained ---------------------===//

#include "compiler/Import/Trainable.h"

#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

using namespace mlir::tcc;

namespace {

/// The float values of a float32/float64 initializer stored inline, or none
/// (external data and other types are not looked at).
bool readFloats(const onnx::TensorProto &t, std::vector<double> &out) {
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && count > (int64_t(1) << 40) / d))
      return false;
    count *= d;
  }
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return false;
  if (t.data_type() == onnx::TensorProto::FLOAT) {
    if (t.has_raw_data()) {
      if ((int64_t)t.raw_data().size() != count * 4)
        return false;
      out.resize(count);
      for (int64_t i = 0; i < count; ++i) {
        float f;
        std::memcpy(&f, t.raw_data().data() + 4 * i, 4);
        out[i] = f;
      }
      return true;
    }
    if (t.float_data_size() != count)
      return false;
    out.assign(t.float_data().begin(), t.float_data().end());
    return true;
  }
  if (t.data_type() == onnx::TensorProto::DOUBLE) {
    if (t.has_raw_data()) {
      if ((int64_t)t.raw_data().size() != count * 8)
        return false;
      out.resize(count);
      std::memcpy(out.data(), t.raw_data().data(), count * 8);
      return true;
    }
    if (t.double_data_size() != count)
      return false;
    out.assign(t.double_data().begin(), t.double_data().end());
    return true;
  }
  return false;
}

/// Whether `values`, as a [rows, cols] table (the last axis is cols), holds
/// cos(p * theta_j) or sin(p * theta_j) in row p of every column j: the
/// precomputed tables of sinusoidal and rotary position encodings. Every
/// column must vary (theta > 0), so a table of ones or zeros, as a LayerNorm
/// weight or a bias starts, is not one.
bool isSinusoidalTable(const onnx::TensorProto &t, const std::vector<double> &v) {
  if (t.dims_size() < 2)
    return false;
  int64_t cols = t.dims(t.dims_size() - 1);
  if (cols <= 0 || (int64_t)v.size() % cols != 0)
    return false;
  int64_t rows = (int64_t)v.size() / cols;
  if (rows < 3)
    return false;
  auto fits = [&](bool isCos) {
    for (int64_t j = 0; j < cols; ++j) {
      double first = v[j], second = v[cols + j];
      if (std::fabs(first - (isCos ? 1.0 : 0.0)) > 1e-6 || std::fabs(second) > 1.0)
        return false;
      double theta = isCos ? std::acos(second) : std::asin(second);
      if (!(theta > 1e-6)) // a constant column: ones or zeros, as parameters start
        return false;
      for (int64_t p = 2; p < rows; ++p) {
        double want = isCos ? std::cos(p * theta) : std::sin(p * theta);
        if (std::fabs(v[p * cols + j] - want) > 1e-4)
          return false;
      }
    }
    return true;
  };
  return fits(true) || fits(false);
}

/// How a value reaches the graph's outputs.
struct Reach {
  bool differentiable = false; // through ops that carry a gradient
  bool mask = false;           // into a comparison or a Where condition
  bool position = false;       // into Sin/Cos
};

bool isComparisonOp(llvm::StringRef op) {
  return op == "Equal" || op == "Less" || op == "Greater" ||
         op == "LessOrEqual" || op == "GreaterOrEqual" || op == "Not" ||
         op == "And" || op == "Or" || op == "Xor" || op == "IsNaN" ||
         op == "IsInf";
}

bool castsToNonFloat(const onnx::NodeProto &node) {
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == "to") {
      int64_t to = a.i();
      return to != onnx::TensorProto::FLOAT && to != onnx::TensorProto::DOUBLE &&
             to != onnx::TensorProto::FLOAT16 && to != onnx::TensorProto::BFLOAT16;
    }
  return false;
}

class ReachAnalysis {
public:
  explicit ReachAnalysis(const onnx::GraphProto &graph) : graph(graph) {
    for (int n = 0; n < graph.node_size(); ++n)
      for (int i = 0; i < graph.node(n).input_size(); ++i)
        users[graph.node(n).input(i)].push_back({n, i});
    for (const onnx::ValueInfoProto &o : graph.output())
      outputs.insert(o.name());
  }

  Reach of(llvm::StringRef value) {
    Reach r;
    llvm::StringSet<> seen;
    llvm::SmallVector<std::string> work{value.str()};
    while (!work.empty() && !r.differentiable) {
      std::string v = work.pop_back_val();
      if (!seen.insert(v).second)
        continue;
      if (outputs.contains(v)) {
        r.differentiable = true;
        break;
      }
      for (auto [n, i] : users.lookup(v)) {
        const onnx::NodeProto &node = graph.node(n);
        llvm::StringRef op = node.op_type();
        if (op == "Shape" || op == "Size" || isComparisonOp(op) ||
            (op == "Where" && i == 0) ||
            ((op == "Cast" || op == "CastLike") && castsToNonFloat(node))) {
          r.mask = true;
          continue;
        }
        if (op == "Sin" || op == "Cos") {
          r.position = true;
          continue;
        }
        for (const std::string &out : node.output())
          if (!out.empty())
            work.push_back(out);
      }
    }
    return r;
  }

private:
  const onnx::GraphProto &graph;
  llvm::StringMap<llvm::SmallVector<std::pair<int, int>, 2>> users;
  llvm::StringSet<> outputs;
};

/// Whether `value` reaches a Softmax input through elementwise ops and
/// moves alone (no MatMul, no reduction): what an additive or
/// multiplicative attention mask does.
bool reachesSoftmaxElementwise(const onnx::GraphProto &graph, llvm::StringRef value) {
  static const llvm::StringSet<> passes = {"Add", "Sub", "Mul", "Div", "Neg", "Where", "Cast",
                                           "CastLike", "Expand", "Reshape", "Unsqueeze",
                                           "Squeeze", "Slice", "Identity", "Transpose"};
  llvm::StringSet<> seen;
  llvm::SmallVector<std::string> work{value.str()};
  while (!work.empty()) {
    std::string v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    for (const onnx::NodeProto &node : graph.node()) {
      if (std::find(node.input().begin(), node.input().end(), v) == node.input().end())
        continue;
      if (node.op_type() == "Softmax")
        return true;
      if (passes.contains(node.op_type()))
        for (const std::string &out : node.output())
          work.push_back(out);
    }
  }
  return false;
}

/// Whether `a` holds `b`'s values, as `b` or as b's 2-D transpose (exactly).
bool sameValues(const onnx::TensorProto &ta, const std::vector<double> &a,
                const onnx::TensorProto &tb, const std::vector<double> &b, bool &transposed) {
  if (a.size() != b.size())
    return false;
  transposed = false;
  bool sameShape = ta.dims_size() == tb.dims_size() &&
                   std::equal(ta.dims().begin(), ta.dims().end(), tb.dims().begin());
  if (sameShape && a == b)
    return true;
  if (ta.dims_size() != 2 || tb.dims_size() != 2 || ta.dims(0) != tb.dims(1) ||
      ta.dims(1) != tb.dims(0))
    return false;
  const int64_t rows = ta.dims(0), cols = ta.dims(1);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (a[i * cols + j] != b[j * rows + i])
        return false;
  transposed = true;
  return true;
}

bool isFloatType(int32_t t) {
  return t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::DOUBLE ||
         t == onnx::TensorProto::FLOAT16 || t == onnx::TensorProto::BFLOAT16;
}

} // namespace

llvm::StringMap<InitializerRole>
mlir::tcc::classifyInitializers(const onnx::ModelProto &model,
                                const llvm::StringSet<> &trainable,
                                bool &hasMetadata,
                                llvm::StringSet<> &metadataNames,
                                llvm::StringSet<> &frozenNames) {
  hasMetadata = false;
  for (const onnx::StringStringEntryProto &p : model.metadata_props()) {
    bool trainableKey = p.key() == kTrainableMetadataKey;
    if (!trainableKey && p.key() != kFrozenMetadataKey)
      continue;
    hasMetadata |= trainableKey;
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(p.value()).split(names, ',', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef n : names)
      (trainableKey ? metadataNames : frozenNames).insert(n.trim());
  }

  const onnx::GraphProto &graph = model.graph();
  ReachAnalysis reach(graph);
  llvm::StringMap<InitializerRole> roles;
  for (const onnx::TensorProto &t : graph.initializer()) {
    if (!isFloatType(t.data_type()))
      continue;
    InitializerRole &role = roles[t.name()];
    if (trainable.contains(t.name()))
      continue;
    if (hasMetadata) {
      if (!metadataNames.contains(t.name()) && !frozenNames.contains(t.name())) {
        role.parameter = false;
        role.reason = "not a parameter in the model's tcc.trainable metadata";
      }
      continue;
    }
    int64_t count = 1; // saturating: the importer diagnoses an overflow later
    for (int64_t d : t.dims())
      count = d <= 0 ? 0 : llvm::checkedMul(count, d).value_or(INT64_MAX);
    std::vector<double> values;
    bool known = readFloats(t, values);
    role.guessed = true;
    if (known && std::any_of(values.begin(), values.end(), [](double x) { return !std::isfinite(x); })) {
      role.parameter = false;
      role.reason = "it holds non-finite values (an additive mask)";
      continue;
    }
    // A mask folded into a float initializer: a finite "minus infinity"
    // (torch.finfo(float32).min, TensorFlow's -2.37e38 adders). No weight
    // holds such a value.
    if (known && std::any_of(values.begin(), values.end(), [](double x) { return x <= -1e30; })) {
      role.parameter = false;
      role.reason = "it holds values below -1e30 (an additive mask)";
      continue;
    }
    Reach r = reach.of(t.name());
    if (!r.differentiable && (r.mask || r.position)) {
      role.parameter = false;
      role.reason = r.position ? "it only feeds Sin/Cos (what builds a position table)"
                               : "it only feeds a mask (comparisons, Where conditions, shapes)";
      continue;
    }
    if (known && isSinusoidalTable(t, values)) {
      role.parameter = false;
      role.reason = "it is a sinusoidal position table (row p holds cos or sin of p * theta)";
      continue;
    }
    if (count == 1) {
      role.parameter = false;
      role.reason = "it has one element (a scalar constant: the torch.export-based "
                    "exporter and tf2onnx store theirs as initializers)";
      continue;
    }
    // An attention mask folded into a float initializer: only 0 and 1 (both),
    // moved into a Softmax by elementwise ops alone.
    if (known && t.dims_size() >= 2 &&
        std::all_of(values.begin(), values.end(), [](double x) { return x == 0.0 || x == 1.0; }) &&
        std::count(values.begin(), values.end(), 0.0) != 0 &&
        std::count(values.begin(), values.end(), 1.0) != 0 &&
        reachesSoftmaxElementwise(graph, t.name())) {
      role.parameter = false;
      role.reason = "it holds 0s and 1s that reach a Softmax through elementwise ops (an "
                    "attention mask)";
      continue;
    }
    role.guessed = false;
  }
  if (!hasMetadata) {
    // Value-identical copies among the parameters (not uniform: at
    // initialisation every LayerNorm weight is ones).
    struct Candidate {
      const onnx::TensorProto *t;
      std::vector<double> values;
    };
    std::vector<Candidate> seen;
    for (const onnx::TensorProto &t : graph.initializer()) {
      auto it = roles.find(t.name());
      if (it == roles.end() || !it->second.parameter || trainable.contains(t.name()))
        continue;
      Candidate c{&t, {}};
      if (!readFloats(t, c.values) || c.values.size() < 2 ||
          std::all_of(c.values.begin(), c.values.end(),
                      [&](double x) { return x == c.values.front(); }))
        continue;
      for (const Candidate &earlier : seen) {
        bool transposed = false;
        if (sameValues(t, c.values, *earlier.t, earlier.values, transposed)) {
          it->second.copyOf = earlier.t->name();
          it->second.copyTransposed = transposed;
          break;
        }
      }
      if (it->second.copyOf.empty())
        seen.push_back(std::move(c));
    }
  }
  return roles;
}

bool mlir::tcc::isExporterFoldedName(llvm::StringRef name) {
  if (name.starts_with("onnx::"))
    return true;
  llvm::StringRef rest = name;
  if (!rest.consume_front("val_"))
    return false;
  llvm::StringRef digits = rest.take_while([](char c) { return c >= '0' && c <= '9'; });
  return !digits.empty();
}

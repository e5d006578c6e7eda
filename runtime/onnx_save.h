//===- onnx_save.h - writing trained parameters back into an ONNX model --*- C++ -*-===//
//
// `tcc_save_onnx` copies the ONNX model a step was compiled from, replacing
// the initializer of every parameter with its current value in the arena. It
// rewrites the protobuf wire format directly (no protobuf library): every
// field it does not need to change is copied byte for byte, unknown fields
// included. Built with -fno-exceptions and only the C++ standard library and
// POSIX: every failure is a returned message, never an exception or an abort
// (short of running out of memory).
//
// Only little-endian hosts are supported (checked at compile time).
//
//===----------------------------------------------------------------------===//

#ifndef TCC_RUNTIME_ONNX_SAVE_H
#define TCC_RUNTIME_ONNX_SAVE_H

#include "runtime/tcc_step.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

/// Writes `out_path`: the ONNX model at `model_path` with the initializer
/// (ModelProto.graph.initializer) of every parameter in `info->params`
/// replaced by its current value in `arena` (at params[i].offset, of
/// params[i].dtype). Returns 0 on success; otherwise non-zero with a
/// NUL-terminated message in `err` (truncated to `err_len`; `err` may be NULL).
///
/// - Each parameter must be the name of exactly one initializer, whose dims
///   equal the descriptor's. The new TensorProto keeps the original's fields
///   (dims, data_type, name, doc_string, unknown fields) and holds the values
///   in `raw_data`, converted to the original data_type: FLOAT, DOUBLE,
///   FLOAT16 and BFLOAT16 from a float32/float64/float16 arena (round to
///   nearest even), any other type only from the same type. float_data,
///   int32_data, double_data, ..., external_data, data_location and segment
///   are dropped.
/// - External data: every tensor of the model stored in an external file
///   (initializers, sparse initializers, attribute tensors, in subgraphs,
///   functions and training_info too) is written inline, so that the output
///   stands alone wherever it is put. Locations are resolved against the
///   directory of `model_path`; absolute ones and ones with a ".." component
///   are refused. A model that would pass protobuf's 2 GiB limit with its
///   tensors inline is written with the data of every tensor the rewrite
///   writes (the parameters, and what the model held externally) of at least
///   1 KiB in `out_path` + ".data" instead, each at a 4096-byte-aligned
///   offset, as ONNX external data that names it by its file name (so the
///   two files move together); what is still over 2 GiB is an error.
/// - The file is written atomically: to `out_path` + ".tmp", fsync, rename
///   (terminating signals are held back meanwhile). On failure neither the
///   output nor the temporary is left behind. `out_path` may equal
///   `model_path`.
int tcc_save_onnx(const char *model_path, const char *out_path,
                  const tcc_step_info *info, const void *arena, char *err,
                  size_t err_len);

namespace tcc::onnx {

/// Saving into `model_path` other than the step's own model (`tcc-run
/// --model`): "" when every parameter it declares trainable (its
/// tcc.trainable metadata) is one of the step's, or one the step's own model
/// holds without training it too; otherwise what would be written untrained.
/// tcc_save_onnx checks the same; tcc-run calls this before training.
std::string checkSaveModel(const std::string &modelPath,
                           const tcc_step_info *info);

/// tcc_save_onnx with the size past which the tensors' data goes to
/// `out_path` + ".data" (tcc_save_onnx: protobuf's 2 GiB limit; tests pass
/// less).
int saveOnnx(const char *model_path, const char *out_path, const tcc_step_info *info,
             const void *arena, char *err, size_t err_len, uint64_t inline_limit);

/// One initializer of ModelProto.graph, as `listInitializers` reads it.
struct Initializer {
  std::string name;
  int32_t dataType = 0;       // TensorProto.DataType
  std::vector<int64_t> dims;
  bool external = false;      // data_location == EXTERNAL in the file
  bool haveData = false;      // `data` holds the elements
  std::string data;           // the elements, little-endian, fixed width, as
                              // raw_data would hold them (decoded from
                              // float_data/int32_data/... or external data
                              // if the tensor keeps them there)
};

/// Reads the initializers of the main graph of the model at `modelPath`,
/// in order (external data is read too). Returns "" on success.
std::string listInitializers(const std::string &modelPath,
                             std::vector<Initializer> &out);

/// Round-to-nearest-even conversions to 16-bit floats (bit patterns); NaN
/// stays NaN (quiet), overflow gives infinity.
uint16_t toFloat16(double v);
uint16_t toBFloat16(double v);
double fromFloat16(uint16_t h);
double fromBFloat16(uint16_t h);

} // namespace tcc::onnx

#endif // TCC_RUNTIME_ONNX_SAVE_H

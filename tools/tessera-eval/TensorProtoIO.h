//===- TensorProtoIO.h - ONNX TensorProto files for tessera-eval -*- C++
//-*-===//
//
// The libonnx side of tessera-eval (the only part that includes protobuf
// headers; built with exceptions, which it catches): reads and writes
// TensorProto files (the `input_<k>.pb` / `output_<k>.pb` of ONNX's backend
// test data sets) as HostTensors, and rewrites a ModelProto so that chosen
// graph inputs become constants. Every error is a one-line message naming
// the file or tensor.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TOOLS_TESSERA_EVAL_TENSORPROTOIO_H
#define TESSERA_TOOLS_TESSERA_EVAL_TENSORPROTOIO_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include "compiler/import/ConstTensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::eval {

/// ONNX TensorProto::DataType numbers (the importer's, ConstTensor.h).
using import::kBFloat16;
using import::kBool;
using import::kDouble;
using import::kFloat;
using import::kFloat16;
using import::kInt16;
using import::kInt32;
using import::kInt64;
using import::kInt8;
using import::kString;
using import::kUInt16;
using import::kUInt32;
using import::kUInt64;
using import::kUInt8;

/// ONNX's name of a data type ("FLOAT", "INT64", ...; "DTYPE<n>" if unknown).
std::string onnxDTypeName(int32_t dtype);
/// Whether `dtype` is one of the integer types (INT8..INT64, UINT8..UINT64);
/// BOOL is not.
bool isOnnxInteger(int32_t dtype);

/// A tensor read from a TensorProto: floating-point values (FLOAT, DOUBLE,
/// FLOAT16, BFLOAT16; 16-bit values converted exactly) as doubles, integer
/// and bool values as int64 (UINT64 bit patterns as int64).
struct HostTensor {
  std::string name;
  int32_t dtype = kFloat;
  std::vector<int64_t> dims;
  std::vector<double> f;  ///< floating-point dtypes
  std::vector<int64_t> i; ///< integer and bool dtypes

  bool isFloat() const;
  int64_t numel() const;
};

/// Reads a serialized TensorProto. Errors: unreadable file, not a
/// TensorProto, a data type HostTensor cannot hold (STRING, complex, 8-bit
/// and 4-bit floats, ...), external data, or a data size that does not match
/// the dims.
llvm::Expected<HostTensor> readTensorProto(llvm::StringRef path);

/// Writes `t` as a TensorProto (raw_data, little-endian) named `t.name`.
/// Supported dtypes: FLOAT, FLOAT16, BFLOAT16, INT64, BOOL.
llvm::Error writeTensorProto(const HostTensor &t, llvm::StringRef path);

/// One graph input of a model (inputs that have an initializer are not
/// listed): its name, element type (0 when it is not a tensor) and what
/// kind of value it is ("tensor", "sequence", "optional", "map",
/// "sparse_tensor", ...).
struct GraphInput {
  std::string name;
  std::string kind;
  int32_t dtype = 0;
};

/// A model being prepared for import: its serialized bytes, its graph
/// inputs (without initializers) and outputs, in graph order.
struct PreparedModel {
  std::string bytes;
  std::vector<GraphInput> inputs;
  std::vector<GraphInput> outputs;
};

/// ONNX 1.12's backend tests store BFLOAT16 tensors as UINT16 tensors of
/// their bits (numpy has no bfloat16). When `declared` is BFLOAT16 and `t`
/// is UINT16, reinterprets `t` as BFLOAT16 (exactly); otherwise leaves it.
void adoptBFloat16Bits(HostTensor &t, int32_t declared);

/// Reads MODEL.onnx and lists its graph inputs and outputs.
llvm::Expected<PreparedModel> readModel(llvm::StringRef path);

/// Gives the graph inputs their concrete dims and binds some as constants:
/// `values[k]` is the value of `model.inputs[k]`. An input whose declared
/// shape has symbolic or missing dims gets `values[k].dims` (a declared
/// static dim that differs is an error); when `asConstant[k]` is set the
/// input is removed from the graph and a Constant node holding the value,
/// named after it, is put first in the graph (the importer folds it).
/// Rewrites `model.bytes` and drops the bound inputs from `model.inputs`.
llvm::Error bindInputs(PreparedModel &model, llvm::ArrayRef<HostTensor> values,
                       llvm::ArrayRef<bool> asConstant);

} // namespace tessera::eval

#endif // TESSERA_TOOLS_TESSERA_EVAL_TENSORPROTOIO_H

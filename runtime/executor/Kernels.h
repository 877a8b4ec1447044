//===- Kernels.h - resolving tsrt kernel and collective ops -----*- C++ -*-===//
//
// Internal to the executor library (used by Program.cpp and the unit tests):
// maps a `tsrt.kernel` name + attributes + operand/result types to a closure
// over the CPU kernel, and a collective op to a closure over the MPI
// collective. All checks the kernels leave to assertions (shapes, dtypes,
// attribute ranges) are done here, so a bad program is a load error.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_KERNELS_H
#define TESSERA_RUNTIME_EXECUTOR_KERNELS_H

#include "runtime/executor/Program.h"

#include "mlir/IR/BuiltinAttributes.h"

namespace tessera {
namespace runtime {
namespace exec {

/// Resolves kernel `name` with `attrs` for the given operand and result
/// types: fills `inst.fn` and `inst.allocateResults`. The error message says
/// what is wrong but not where (the caller prefixes the location and kernel).
llvm::Error resolveKernel(llvm::StringRef name, mlir::DictionaryAttr attrs,
                          llvm::ArrayRef<TensorType> operands,
                          llvm::ArrayRef<TensorType> results,
                          const CompileOptions &options, Instruction &inst);

/// An optimizer hyper-parameter: the manifest's value for `key` when it
/// rounds to the same f32 as the op's attribute (the kernel then gets the
/// double, as torch.optim does with Python floats), else the attribute.
double hyperParameter(const CompileOptions &options, llvm::StringRef key,
                      double attrValue);

/// The types a kernel with bf16/f16 operands or results runs on under the
/// 16-bit adapter (both backends): every bf16/f16 type widened to f32, and
/// which operands / results were widened.
struct WidenedTypes {
  std::vector<TensorType> ins, outs;
  std::vector<bool> narrowIn, narrowOut;
};
WidenedTypes widenFloat16(llvm::ArrayRef<TensorType> ins,
                          llvm::ArrayRef<TensorType> outs);

/// Collective kinds of the tsrt dialect.
/// AllSlice keeps the rank's block along `dim` (no communication).
enum class CollectiveOp {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  AllSlice
};

/// Resolves a collective over communicator `commIndex` whose grid axes have
/// `n` ranks in all. `dim`/`dim2`: gather/scatter dim, or split/concat dims;
/// `max` selects the max reduction for all_reduce.
llvm::Error resolveCollective(CollectiveOp op, int commIndex, int64_t n,
                              int64_t dim, int64_t dim2, bool max,
                              const TensorType &operand,
                              const TensorType &result, Instruction &inst);

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_KERNELS_H

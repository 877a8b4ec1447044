//===- Program.h - a tsrt runtime program resolved to instructions -*- C++ -*-//
//
// `Program::compile` turns the straight-line body of a `tsrt` function into a
// flat instruction list, once, at load time:
//   - every SSA value gets a slot; function arguments are slots 0..N-1;
//   - every `tsrt.kernel` is resolved to a closure over the CPU kernel with its
//     attributes already decoded and its operand/result shapes checked;
//   - `tsrt.constant` values are materialised once;
//   - collectives refer to an index into the program's list of distinct
//     grid-axes sets (`commAxes`), bound to communicators by the executor;
//   - each slot is released right after its last use.
// Anything wrong with the program (unknown kernel, bad attribute, unsupported
// dtype, inconsistent shapes) is an llvm::Error naming the op's location and
// kernel. `run` then executes the list without string lookups.
//
// The program itself knows nothing of ranks: the same Program runs on every
// rank, with an ExecContext holding that rank's communicators.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_PROGRAM_H
#define TESSERA_RUNTIME_EXECUTOR_PROGRAM_H

#include "runtime/Tensor.h"
#include "runtime/collectives/mpi/MpiCollectives.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <functional>
#include <string>
#include <vector>

namespace mlir {
class ModuleOp;
}

namespace tessera {
namespace runtime {
namespace exec {

/// Static type of a program value.
struct TensorType {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;

  bool operator==(const TensorType &o) const {
    return dtype == o.dtype && shape == o.shape;
  }
  bool operator!=(const TensorType &o) const { return !(*this == o); }
  /// "tensor<4x64xf32>".
  std::string str() const;
};

/// What the instructions of one rank run with.
struct ExecContext {
  /// Communicator for each entry of Program::commAxes (same order).
  std::vector<mpi::Communicator> comms;
  /// Collective volumes are recorded here when set.
  mpi::TrafficCounter *traffic = nullptr;
};

/// A resolved kernel: reads `in` (the operands) and writes `out` (the
/// results). When the instruction's `allocateResults` is set, `out` holds
/// freshly allocated tensors of the result types; otherwise the function
/// sets them itself.
using KernelFn = std::function<llvm::Error(const ExecContext &,
                                           llvm::ArrayRef<const Tensor *> in,
                                           llvm::MutableArrayRef<Tensor> out)>;

/// One step of the program.
struct Instruction {
  std::string kernel; ///< "matmul", "all_reduce", ... (diagnostics)
  std::string where;  ///< the op's location (diagnostics)
  KernelFn fn;
  std::vector<int> operands; ///< slots read
  std::vector<int> results;  ///< slots written
  std::vector<TensorType> resultTypes;
  bool allocateResults = true;
  std::vector<int> release; ///< slots whose last use this is
};

/// Options for Program::compile.
struct CompileOptions {
  /// Sizes of the device grid's axes (collective axes are checked against
  /// it and collective result shapes derived from it).
  std::vector<int64_t> gridShape = {1};
  /// The manifest's "optimizer" object, or null. Optimizer attributes are
  /// f32 in the IR; where the manifest holds a double that rounds to the same
  /// f32 (e.g. lr 0.1), the kernel gets the double, as torch.optim does with
  /// Python floats.
  const llvm::json::Object *optimizer = nullptr;
};

/// A straight-line program resolved to instructions.
class Program {
public:
  /// Compiles function `function` of `module` (func.func whose body holds only
  /// tsrt ops and func.return). `source` prefixes error messages (e.g. the
  /// artifact path).
  static llvm::Expected<Program> compile(mlir::ModuleOp module,
                                         llvm::StringRef function,
                                         const CompileOptions &options,
                                         llvm::StringRef source);

  /// Runs the program once on `args` (one per argument, types as
  /// argTypes()); returns the results. Errors (data-dependent kernel
  /// failures, MPI failures) name the op's location and kernel.
  llvm::Expected<std::vector<Tensor>> run(const ExecContext &ctx,
                                          std::vector<Tensor> args) const;

  const std::vector<TensorType> &argTypes() const { return argTys; }
  const std::vector<TensorType> &resultTypes() const { return resultTys; }
  /// Distinct grid-axes sets used by collectives, in order of first use.
  /// Communicators must be created for them in this order on every rank.
  const std::vector<std::vector<int64_t>> &commAxes() const { return axesSets; }
  const std::vector<Instruction> &instructions() const { return insts; }
  int numSlots() const { return slots; }

private:
  int slots = 0;
  std::vector<TensorType> argTys, resultTys;
  std::vector<int> resultSlots;
  std::vector<std::pair<int, Tensor>> constants; ///< slot, value
  std::vector<std::vector<int64_t>> axesSets;
  std::vector<Instruction> insts;
  std::vector<int> releaseArgsEarly; ///< arg slots never read
  size_t maxResults = 0, maxOperands = 0;
};

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_PROGRAM_H

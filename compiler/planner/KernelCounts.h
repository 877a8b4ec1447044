//===- KernelCounts.h - kernels and non-GEMM bytes of one step --*- C++ -*-===//
//
// Machine-independent counts of a partitioned training step (issue 25),
// the figures that show what kernel fusion saves:
//
//   kernels per step        every tsr op of the step but tsr.constant: each
//                           lowers to one tsrt.kernel, one instruction the
//                           runtime dispatches per step (LowerToRuntime);
//   non-GEMM bytes per step Σ over the kernels that are not GEMM-like of the
//                           bytes of their operands and results (LOCAL
//                           shapes, as the kernel reads and writes them
//                           once each; none for a view, an op whose
//                           CostOpInterface::getBytesAccessed() is 0, e.g.
//                           tsr.reshape): the memory traffic of the
//                           memory-bound kernels that fusion removes.
//
// GEMM-like is the op's own answer (tsr::CostOpInterface::getGemmShapes()
// not empty: matmul, attention, attention_grad and any fused op whose
// kernel is a GEMM with an epilogue); nothing here switches on op names.
// Counted on the module after the partition stages (fusion included) and
// before lowering, so the counts are per rank. A non-pipelined plan counts
// @train_step; a pipelined one counts every chunk function once (one
// micro-batch of each), and says so (`pipelined`).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_KERNELCOUNTS_H
#define TESSERA_COMPILER_PLANNER_KERNELCOUNTS_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <map>
#include <string>

namespace tessera::planner {

/// The kernels of one step, in all and per kernel name (the tsr op's
/// mnemonic, which is the tsrt.kernel's name).
struct KernelCounts {
  struct Kind {
    int64_t kernels = 0;
    /// Operand + result bytes of all its kernels (static shapes).
    int64_t bytes = 0;
    bool gemm = false;
  };
  int64_t kernels = 0;
  int64_t gemmKernels = 0;
  int64_t nonGemmBytes = 0;
  /// Pipelined plan: the chunk functions, each once.
  bool pipelined = false;
  std::map<std::string, Kind> kinds;
};

/// Counts the kernels of the partitioned module's training step (see the
/// file comment). A module without @train_step and without pipeline chunk
/// functions yields all zeros.
KernelCounts countKernels(mlir::ModuleOp partitioned);

/// {"kernels_per_step", "gemm_kernels_per_step", "non_gemm_bytes_per_step",
///  "pipelined", "kinds": {name: {"kernels", "bytes", "gemm"}}}.
llvm::json::Object toJSON(const KernelCounts &counts);

/// The --explain lines: "kernels per step: N (G GEMM); non-GEMM bytes per
/// step: B" and one line per kind, most bytes first.
void explainKernelCounts(const KernelCounts &counts, llvm::raw_ostream &os);

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_KERNELCOUNTS_H

//===- KernelCounts.cpp - kernels and non-GEMM bytes of one step ----------===//

#include "compiler/planner/KernelCounts.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <vector>

using namespace mlir;
using namespace tessera;
using namespace tessera::planner;

/// Bytes of a statically shaped tensor (i1 as one byte, as the runtime
/// stores it); 0 otherwise.
static int64_t tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape() ||
      !tensor.getElementType().isIntOrFloat())
    return 0;
  int64_t bits = tensor.getElementType().getIntOrFloatBitWidth();
  return tensor.getNumElements() * ((bits + 7) / 8);
}

KernelCounts planner::countKernels(ModuleOp partitioned) {
  KernelCounts counts;
  std::vector<func::FuncOp> fns;
  for (auto fn : partitioned.getOps<func::FuncOp>())
    if (!fn.isExternal() && !fn.isPrivate() && fn.getName() == "train_step")
      fns.push_back(fn);
  if (fns.empty()) {
    // A pipelined plan: the chunks' forward / backward / apply functions.
    for (auto fn : partitioned.getOps<func::FuncOp>())
      if (!fn.isExternal() && !fn.isPrivate())
        fns.push_back(fn);
    counts.pipelined = !fns.empty();
  }
  for (func::FuncOp fn : fns)
    fn.walk([&](Operation *op) {
      if (!isa_and_nonnull<tsr::TsrDialect>(op->getDialect()) ||
          isa<tsr::ConstantOp>(op))
        return;
      auto cost = dyn_cast<tsr::CostOpInterface>(op);
      bool gemm = cost && !cost.getGemmShapes().empty();
      // A view (the op's cost moves no bytes: tsr.reshape) reads and
      // writes nothing, though it is one dispatched instruction.
      bool view = cost && cost.getBytesAccessed() == 0;
      int64_t bytes = 0;
      if (!view) {
        for (Type t : op->getOperandTypes())
          bytes += tensorBytes(t);
        for (Type t : op->getResultTypes())
          bytes += tensorBytes(t);
      }
      KernelCounts::Kind &kind =
          counts.kinds[op->getName().stripDialect().str()];
      ++kind.kernels;
      kind.bytes += bytes;
      kind.gemm = gemm;
      ++counts.kernels;
      if (gemm)
        ++counts.gemmKernels;
      else
        counts.nonGemmBytes += bytes;
    });
  return counts;
}

llvm::json::Object planner::toJSON(const KernelCounts &counts) {
  llvm::json::Object kinds;
  for (const auto &[name, k] : counts.kinds)
    kinds[name] = llvm::json::Object{
        {"kernels", k.kernels}, {"bytes", k.bytes}, {"gemm", k.gemm}};
  return llvm::json::Object{{"kernels_per_step", counts.kernels},
                            {"gemm_kernels_per_step", counts.gemmKernels},
                            {"non_gemm_bytes_per_step", counts.nonGemmBytes},
                            {"pipelined", counts.pipelined},
                            {"kinds", std::move(kinds)}};
}

void planner::explainKernelCounts(const KernelCounts &counts,
                                  llvm::raw_ostream &os) {
  os << llvm::formatv("kernels per step: {0} ({1} GEMM); non-GEMM bytes per "
                      "step: {2}{3}\n",
                      counts.kernels, counts.gemmKernels, counts.nonGemmBytes,
                      counts.pipelined ? " (pipelined: each chunk function "
                                         "once, one micro-batch)"
                                       : "");
  std::vector<std::pair<std::string, KernelCounts::Kind>> kinds(
      counts.kinds.begin(), counts.kinds.end());
  llvm::stable_sort(kinds, [](const auto &a, const auto &b) {
    return a.second.bytes > b.second.bytes;
  });
  os << "  kernel                      calls  operand+result bytes\n";
  for (const auto &[name, k] : kinds)
    os << llvm::formatv("  {0,-26} {1,6}  {2,14}{3}\n", name, k.kernels,
                        k.bytes, k.gemm ? "  (GEMM)" : "");
}

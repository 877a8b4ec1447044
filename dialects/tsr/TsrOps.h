//===- TsrOps.h - Tessera tensor ops ----------------------------*- C++ -*-===//

#ifndef TESSERA_DIALECTS_TSR_TSROPS_H
#define TESSERA_DIALECTS_TSR_TSROPS_H

#include "common/fusion/ElementwiseProgram.h"
#include "dialects/tsr/ShardingRule.h"
#include "dialects/tsr/TsrDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SmallVector.h"

namespace tessera::tsr {
/// `batch` GEMMs C[m, n] = A[m, k] · B[k, n] of one shape
/// (CostOpInterface::getGemmShapes).
struct GemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  /// 2·batch·m·n·k.
  int64_t flops() const { return 2 * batch * m * n * k; }
  bool operator==(const GemmShape &o) const {
    return batch == o.batch && m == o.m && n == o.n && k == o.k;
  }
};

/// A message an op's kernel itself exchanges with other ranks
/// (CostOpInterface::getKernelMessages): ring attention's K/V rotations, the
/// vocab-parallel cross-entropy's row statistics.
struct KernelMessage {
  enum class Kind { AllReduce, SendRecv };
  Kind kind = Kind::AllReduce;
  /// Grid axes the message runs over (the op's `grid_axes`).
  llvm::SmallVector<int16_t> gridAxes;
  /// Size as nccl-tests counts it (an all-reduce's buffer, one send/recv
  /// message), bytes.
  int64_t bytes = 0;
  bool operator==(const KernelMessage &o) const {
    return kind == o.kind && gridAxes == o.gridAxes && bytes == o.bytes;
  }
};

/// Tsr_SelectiveRecompute (TsrInterfaces.td): `tsr-recompute
/// mode=selective` recomputes the op in the backward.
template <typename ConcreteType>
class SelectiveRecompute
    : public mlir::OpTrait::TraitBase<ConcreteType, SelectiveRecompute> {};

/// Tsr_IdentityInInference (TsrInterfaces.td): in a forward-only
/// (evaluation) program the op is the identity on operand 0 (tsr.dropout).
template <typename ConcreteType>
class IdentityInInference
    : public mlir::OpTrait::TraitBase<ConcreteType, IdentityInInference> {};
} // namespace tessera::tsr

namespace tessera::tsr::detail {
/// Default cost: one FLOP per result element; bytes = all operands + results.
int64_t defaultFlops(mlir::Operation *op);
int64_t defaultBytesAccessed(mlir::Operation *op);
/// Default transcendentals: one per result element for exp, log, tanh, erf,
/// pow, gelu and softmax, two for gelu_grad (erf and exp); one per logit for
/// cross_entropy and two for cross_entropy_grad (log-sum-exp, then the
/// probabilities); 0 otherwise.
int64_t defaultTranscendentals(mlir::Operation *op);
/// Default CostOpInterface::getMeasuredUnits: elements of operand 0 (0 when
/// not statically shaped) for ops that are not GEMM-like, -1 for GEMM-like
/// ops and ops without operands.
int64_t defaultMeasuredUnits(mlir::Operation *op);
} // namespace tessera::tsr::detail

#include "dialects/tsr/TsrInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/tsr/TsrOps.h.inc"

namespace tessera::tsr {
/// Bytes of a statically shaped tensor type (i1 counts as one byte).
int64_t getTensorBytes(mlir::Type type);
} // namespace tessera::tsr

#endif // TESSERA_DIALECTS_TSR_TSROPS_H

//===- TsrInterfaces.td - facts every tsr op answers -------*- tablegen -*-===//
//
// The op contract (DESIGN.md): gradient rule, sharding rule and cost are
// asked of the op through these interfaces; passes never switch on op names.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TSR_INTERFACES
#define TESSERA_TSR_INTERFACES

include "mlir/IR/OpBase.td"

def Tsr_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::tessera::tsr";
  let description = [{
    Reverse-mode gradient rule used by `tsr-build-train-step`.
    `buildGradient` is called with the builder positioned after the op (in the
    backward region) and one cotangent per result (null when no gradient flows
    into that result). It appends one value per operand to `operandGrads`:
    that operand's cotangent, or null for a non-differentiable operand (token
    ids, masks, labels) or an operand that receives no gradient.
  }];
  let methods = [
    InterfaceMethod<"Builds the operands' cotangents from the results'.",
      "::mlir::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

def Tsr_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::tessera::tsr";
  let description = [{
    Factor-based sharding rule (as in Shardy's OpShardingRule): the op's
    iteration space is a list of factors; every operand and result dimension
    is a product of factors (major to minor). A factor that appears in the
    operands but in no result is a reduction: splitting it makes the result
    *partial* (summed by an all-reduce or reduce-scatter). A factor marked
    `needReplication` (softmax's axis, layer_norm's normalized dims) must not
    be split. See `dialects/tsr/ShardingRule.h`.
  }];
  let methods = [
    InterfaceMethod<"Returns the op's factor-based sharding rule.",
      "::tessera::tsr::ShardingRule", "getShardingRule", (ins)>,
  ];
}

def Tsr_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::tessera::tsr";
  let description = [{
    Cost of one execution of the op on the shapes it has (local shapes after
    partition, global before): floating-point operations (FLOP; a
    multiply-add is 2), bytes read plus written, and the GEMM shapes the
    kernel runs (GEMM-like ops only). Used by the planner.
  }];
  let methods = [
    InterfaceMethod<"FLOPs of one execution.", "int64_t", "getFlops", (ins),
      [{}], [{ return ::tessera::tsr::detail::defaultFlops($_op); }]>,
    InterfaceMethod<"Bytes read and written by one execution.", "int64_t",
      "getBytesAccessed", (ins), [{}],
      [{ return ::tessera::tsr::detail::defaultBytesAccessed($_op); }]>,
    InterfaceMethod<[{
        Transcendental function evaluations (exp, log, tanh, erf, pow) of one
        execution, counted apart from getFlops() as XLA's HloCostAnalysis
        does: on a CPU each is a libm call costing tens of FLOPs.
      }], "int64_t", "getTranscendentals", (ins), [{}],
      [{ return ::tessera::tsr::detail::defaultTranscendentals($_op); }]>,
    InterfaceMethod<[{
        The GEMMs C[m, n] = A[m, k] · B[k, n] one execution runs, as the
        kernel blocks them: each entry is `batch` GEMMs of one (m, n, k)
        shape. Empty (the default) for ops that are not GEMM-like. Their
        2·batch·m·n·k FLOPs are part of getFlops(); the planner times them
        with the cluster's measured GEMM table.
      }], "::llvm::SmallVector<::tessera::tsr::GemmShape>", "getGemmShapes",
      (ins), [{}], [{ return {}; }]>,
  ];
}

#endif // TESSERA_TSR_INTERFACES

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
    multiply-add is 2) and bytes read plus written. Used by the planner.
  }];
  let methods = [
    InterfaceMethod<"FLOPs of one execution.", "int64_t", "getFlops", (ins),
      [{}], [{ return ::tessera::tsr::detail::defaultFlops($_op); }]>,
    InterfaceMethod<"Bytes read and written by one execution.", "int64_t",
      "getBytesAccessed", (ins), [{}],
      [{ return ::tessera::tsr::detail::defaultBytesAccessed($_op); }]>,
  ];
}

#endif // TESSERA_TSR_INTERFACES

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
    InterfaceMethod<[{
        The count in which a cluster calibration measures this op's kernel
        (Cluster::kernelSecondsPerElement, `tessera-run --calibrate`): the
        planner takes the kernel's time as this count × the measured seconds
        per unit when the cluster has a figure for the op. Default: the
        elements of operand 0 (0 when it has no static shape) for ops that
        are not GEMM-like; -1 (never timed per unit: the GEMM table or the
        roofline times them) for GEMM-like ops and ops without operands.
        `tsr.attention` and `tsr.attention_grad` answer the scores their
        fused kernel forms (getTranscendentals()).
      }], "int64_t", "getMeasuredUnits", (ins), [{}],
      [{ return ::tessera::tsr::detail::defaultMeasuredUnits($_op); }]>,
    InterfaceMethod<[{
        The messages one execution's kernel itself exchanges with other
        ranks, in order: each is a collective over the op's `grid_axes`
        that the planner times with the cluster's links like a `shard`
        collective (bytes as nccl-tests counts them: an all-reduce's
        buffer, one send/recv message). None by default. A ring
        `tsr.attention` (`grid_axes`, `ring_size` K > 1) sends its local K
        and V blocks around the ring K − 1 times (fp32, 4 bytes per element,
        as runtime/backends/cpu/Attention.cpp rotates them);
        `tsr.attention_grad` sends K, V, dK and dV K − 1 times, then dK and
        dV once more. A vocab-parallel `tsr.cross_entropy` (`grid_axes`)
        all-reduces its N rows' max (8·N bytes, f64), then their sums of
        exponentials and target logits (16·N bytes);
        `tsr.cross_entropy_grad` the max and the sums (8·N bytes each).
      }], "::llvm::SmallVector<::tessera::tsr::KernelMessage>",
      "getKernelMessages", (ins), [{}], [{ return {}; }]>,
  ];
}

def Tsr_MixedPrecisionOpInterface : OpInterface<"MixedPrecisionOpInterface"> {
  let cppNamespace = "::tessera::tsr";
  let description = [{
    The op's precision policy, used by `tsr-mixed-precision`: which float
    operands and results stay f32 when the op runs in bf16/f16 (every other
    float operand and result is then low precision), and which operand, if
    any, is the loss's f32 cotangent seed that fp16 loss scaling multiplies
    by S (Micikevicius et al., 2018, "Mixed Precision Training"). The
    defaults keep nothing in f32 and have no seed. Indices are operand /
    result numbers; an index out of range answers false.
  }];
  let methods = [
    InterfaceMethod<[{
        True when float operand `index` stays f32 in a low-precision op
        (attention_grad's log-sum-exp, cross_entropy_grad's seed).
      }], "bool", "keepsF32Operand", (ins "unsigned":$index), [{}],
      [{ return false; }]>,
    InterfaceMethod<[{
        True when float result `index` stays f32 in a low-precision op
        (attention's log-sum-exp, cross_entropy's summed loss).
      }], "bool", "keepsF32Result", (ins "unsigned":$index), [{}],
      [{ return false; }]>,
    InterfaceMethod<[{
        The operand holding the f32 scalar cotangent seed of the loss
        (cross_entropy_grad's `grad`), or std::nullopt.
      }], "std::optional<unsigned>", "getLossSeedOperand", (ins), [{}],
      [{ return std::nullopt; }]>,
  ];
}

def Tsr_OptimizerUpdateOpInterface
    : OpInterface<"OptimizerUpdateOpInterface"> {
  let cppNamespace = "::tessera::tsr";
  let description = [{
    A fused optimizer step for one parameter (`tsr.sgd_update`,
    `tsr.adamw_update`), as `tsr-mixed-precision` (the update reads the f32
    master weight and an f32 gradient) and `tsr-zero-sharding` (ZeRO
    shards the parameter, its gradient and its optimizer state over dp)
    see it. Contract: result 0 is the updated parameter and results 1... the
    updated optimizer state, in the order of getOptimizerState(); every
    result has the parameter's type. Other operands (AdamW's step count)
    are scalars the update only reads.
  }];
  let methods = [
    InterfaceMethod<[{
        The parameter operand (read, then replaced by result 0).
      }], "::mlir::OpOperand &", "getParamOperand">,
    InterfaceMethod<"The gradient operand (the parameter's shape).",
      "::mlir::OpOperand &", "getGradOperand">,
    InterfaceMethod<[{
        The optimizer-state operands, each the parameter's shape (AdamW:
        exp_avg, exp_avg_sq; SGD without momentum: none).
      }], "::llvm::SmallVector<::mlir::Value>", "getOptimizerState">,
    InterfaceMethod<"The updated parameter (result 0).", "::mlir::Value",
      "getUpdatedParam", (ins), [{}], [{ return $_op->getResult(0); }]>,
    InterfaceMethod<[{
        The updated optimizer state (results 1...), one per
        getOptimizerState() entry, in its order.
      }], "::mlir::ResultRange", "getUpdatedOptimizerState", (ins), [{}],
      [{ return $_op->getResults().drop_front(); }]>,
  ];
}

// Selective activation recomputation (Korthikanti et al. 2022, "Reducing
// Activation Recomputation in Large Transformer Models"): the op's results
// are large next to the work of remaking them, so `tsr-recompute
// mode=selective` recomputes it (and the ops that only relayout its
// results) in the backward instead of keeping its results. C++:
// `op->hasTrait<tessera::tsr::SelectiveRecompute>()`.
def Tsr_SelectiveRecompute : NativeOpTrait<"SelectiveRecompute"> {
  let cppNamespace = "::tessera::tsr";
}

// The op is the identity on operand 0 in an inference (forward-only)
// program: a training-time regulariser such as `tsr.dropout`. A pass that
// builds an evaluation program replaces result 0 by operand 0 for every op
// with this trait, without knowing the op. C++:
// `op->hasTrait<tessera::tsr::IdentityInInference>()`.
def Tsr_IdentityInInference : NativeOpTrait<"IdentityInInference"> {
  let cppNamespace = "::tessera::tsr";
}

#endif // TESSERA_TSR_INTERFACES

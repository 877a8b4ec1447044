//===- Passes.td - fusion passes --------------------------------*- tablegen -*-===//
//
// Fusions of the partitioned train step: each groups memory-bound ops that a
// step would otherwise run as separate kernels into one tsr op with the full
// op contract (shape, sharding rule, cost, CPU and CUDA kernels), so the
// IR-level step model (compiler/planner/StepCost.h) prices the fused kernel.
// They run after tsr-sharding-partition, tsr-zero-sharding and
// tsr-pipeline-split, on local shapes, in the order linear, norm,
// elementwise, optimizer (compiler/pipeline/Pipeline.cpp); `tessera-partition
// --fusion` selects them. No fusion changes a result beyond fp32
// reassociation inside a kernel.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_PASSES_FUSION_PASSES
#define TESSERA_PASSES_FUSION_PASSES

include "mlir/Pass/PassBase.td"

def FuseLinear
    : InterfacePass<"tsr-fuse-linear", "::mlir::FunctionOpInterface"> {
  let summary = "Fold bias + activation into the GEMM's epilogue and "
                "transposes into GEMM flags.";
  let description = [{
    Not implemented yet: changes nothing.
  }];
}

def FuseNorm
    : InterfacePass<"tsr-fuse-norm", "::mlir::FunctionOpInterface"> {
  let summary = "Fuse a residual add into the LayerNorm/RMSNorm that reads it.";
  let description = [{
    Not implemented yet: changes nothing.
  }];
}

def FuseElementwise
    : InterfacePass<"tsr-fuse-elementwise", "::mlir::FunctionOpInterface"> {
  let summary = "Fuse chains of elementwise ops into one kernel.";
  let description = [{
    Not implemented yet: changes nothing.
  }];
}

def FuseOptimizer
    : InterfacePass<"tsr-fuse-optimizer", "::mlir::FunctionOpInterface"> {
  let summary = "Fuse every parameter's optimizer update into one "
                "multi-tensor update.";
  let description = [{
    Not implemented yet: changes nothing.
  }];
}

#endif // TESSERA_PASSES_FUSION_PASSES

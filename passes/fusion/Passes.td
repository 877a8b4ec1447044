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
    The `tsr.sgd_update`s (`tsr.adamw_update`s) of a block that share their
    hyper-parameters (the op's attributes: weight decay, betas, eps) and
    their learning-rate (and step) operands become one
    `tsr.multi_sgd_update` (`tsr.multi_adamw_update`): one kernel call per
    group instead of one per parameter, as NVIDIA apex's
    `multi_tensor_apply` and PyTorch's `foreach` optimizers run them. With
    `exclude-weight-decay` there are two groups (decayed and not). Results
    are bit for bit those of the separate updates. A group of one is left
    alone; so are non-f32 updates, updates stamped by `tsr-trace-values`
    (tessera-check attributes their outputs to them), and updates whose old
    parameter or state is read after them: fp16 dynamic loss scaling's
    `select(ok, new, old)` keeps the old value on a skipped step, so the
    new value cannot take its buffer, and fused, every parameter's new
    value and state would be alive at once (its updates stay one kernel
    per parameter).

    The fused op takes the place of the group's last update; ops between
    the first and the last update that read an earlier update's results
    (ZeRO-3's all-gather of a new parameter shard) move, in order, right
    after it. Each pipeline stage function gets its own fused update. The
    tensors stay separate buffers (the memory plan writes every result in
    place of the operand it replaces); they are not packed into one flat
    buffer.

    Before:
    ```mlir
    %w1 = tsr.sgd_update %w, %dw, %lr {weight_decay = 0.0 : f32}
        : tensor<8x4xf32>
    %b1 = tsr.sgd_update %b, %db, %lr {weight_decay = 0.0 : f32}
        : tensor<4xf32>
    ```
    After:
    ```mlir
    %r:2 = tsr.multi_sgd_update [%w, %b, %dw, %db], %lr
        {weight_decay = 0.0 : f32}
        : tensor<8x4xf32>, tensor<4xf32>, tensor<8x4xf32>, tensor<4xf32>
          -> tensor<8x4xf32>, tensor<4xf32>
    ```
  }];
}

#endif // TESSERA_PASSES_FUSION_PASSES

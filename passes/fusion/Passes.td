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
  let summary = "Fold bias + activation into the GEMM's epilogue, and the "
                "bias gradient into the activation gradient.";
  let description = [{
    Forward: `tsr.add` of a `tsr.matmul` (used only there) and a
    `tsr.broadcast` of a bias of shape [N] or [1, ..., 1, N] (how the
    importer lowers ONNX Gemm and MatMul + Add, i.e. torch.nn.Linear and
    HF GPT-2's Conv1D) becomes one `tsr.linear`; an activation reading the
    sum (`tsr.gelu` in either form, `tsr.relu`, `tsr.silu`) is fused too,
    and when the sum has other readers (the backward's gelu_grad reads the
    activation's input) the op also returns the preactivation. The GEMM's
    output is then never written and read back for the broadcast, add and
    activation kernels (cuBLASLt's GELU_AUX_BIAS epilogue; on the CPU the
    epilogue runs on each block of rows right after its sgemm).

    Backward: `tsr.reduce_sum` over every dimension but the last (the bias
    gradient) of a `tsr.gelu_grad`, `tsr.relu_grad` or `tsr.silu_grad`
    becomes one `tsr.bias_activation_grad` returning both (one pass over x
    and dy instead of two).

    ```mlir
    // Before
    %mm = tsr.matmul %x, %w {transpose_rhs = true}
        : tensor<8x64x64xf32>, tensor<256x64xf32> -> tensor<8x64x256xf32>
    %b3 = tsr.reshape %b : tensor<256xf32> -> tensor<1x1x256xf32>
    %bb = tsr.broadcast %b3 : tensor<1x1x256xf32> -> tensor<8x64x256xf32>
    %h = tsr.add %bb, %mm : tensor<8x64x256xf32>
    %a = tsr.gelu %h : tensor<8x64x256xf32>
    ...
    %dh = tsr.gelu_grad %h, %da : tensor<8x64x256xf32>
    %db = tsr.reduce_sum %dh {axes = array<i64: 0, 1>}
        : tensor<8x64x256xf32> -> tensor<256xf32>
    // After
    %a, %h = tsr.linear %x, %w, %b {activation = "gelu",
                                    transpose_rhs = true}
        : tensor<8x64x64xf32>, tensor<256x64xf32>, tensor<256xf32>
        -> tensor<8x64x256xf32>, tensor<8x64x256xf32>
    ...
    %dh, %db = tsr.bias_activation_grad %h, %da {activation = "gelu"}
        : tensor<8x64x256xf32> -> tensor<256xf32>
    ```

    Not fused: a matmul with other readers; an add whose other operand is
    not a broadcast along the last dimension only (a position embedding,
    a residual); a partial matmul (a row-parallel linear's product is
    all-reduced before its bias is added, so the add reads the
    all-reduce); f16/bf16 (the fused kernels are f32); a reduce_sum that
    keeps dimensions or leaves out a leading one; an op whose values
    tessera-check traces (`tsr.trace`).

    Transposes and reshapes: `tsr.reshape` is already a view on both
    backends (no kernel, no bytes). The transposes of the example GPT
    (PyTorch's nn.MultiheadAttention in [S, B, D] layout) permute batch
    dimensions around the attention, not a GEMM's last two, so they are
    not GEMM flags and are left alone.
  }];
}

def FuseNorm
    : InterfacePass<"tsr-fuse-norm", "::mlir::FunctionOpInterface"> {
  let summary = "Fuse a residual add into the LayerNorm/RMSNorm that reads it.";
  let description = [{
    Pre-norm transformers (GPT-2, LLaMA) add each sub-layer's output to the
    residual stream and normalize the sum for the next sub-layer:
    `h = x + f(x)`, `y = norm(h)`; the backward sums the norm's input
    gradient with the residual stream's cotangent. Each pair runs as two
    memory-bound kernels, the second re-reading what the first wrote. This
    pass fuses them (as ONNX Runtime's SkipLayerNormalization and apex's
    fused add + LayerNorm):

    * `tsr.add` whose result is the input of a `tsr.layer_norm` /
      `tsr.rms_norm` → `tsr.add_layer_norm` / `tsr.add_rms_norm`, which
      reads both addends once and writes the sum (still read by the next
      residual add and by the norm's gradient) and the normalized rows;
    * `tsr.add` of a `tsr.layer_norm_grad` / `tsr.rms_norm_grad` input
      gradient (read by nothing else) and another cotangent →
      `tsr.layer_norm_grad_add` / `tsr.rms_norm_grad_add`, which writes the
      sum instead of the input gradient.

    Before:
    ```mlir
    %h = tsr.add %x, %r : tensor<8x16x64xf32>
    %y = tsr.layer_norm %h, %g, %b {axis = 2 : i64, epsilon = 1.0e-05 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    %dx, %dg, %db = tsr.layer_norm_grad %h, %g, %dy
        {axis = 2 : i64, epsilon = 1.0e-05 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    %s = tsr.add %dres, %dx : tensor<8x16x64xf32>
    ```
    After:
    ```mlir
    %h, %y = tsr.add_layer_norm %x, %r, %g, %b
        {axis = 2 : i64, epsilon = 1.0e-05 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    %s, %dg, %db = tsr.layer_norm_grad_add %h, %g, %dy, %dres
        {axis = 2 : i64, epsilon = 1.0e-05 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    ```

    Runs on the partitioned step (local shapes): under tensor parallelism
    the residual add follows the row-parallel layer's all-reduce, under
    Megatron sequence parallelism its reduce-scatter, so the pair is still
    adjacent. Left alone: a pair in two blocks; a pair that cannot be
    placed at one point (the norm's scale or bias, or the other cotangent,
    defined after the first op while the first op's results are read
    before the second); an input gradient with another reader; ops stamped
    by `tsr-trace-values` (tessera-check compares every traced value). The
    bias add of a linear layer before the residual add is not folded here:
    `tsr-fuse-linear` puts it in the GEMM's epilogue. Results are those of
    the unfused ops up to the order of the kernels' f64 row sums.
  }];
}

def FuseElementwise
    : InterfacePass<"tsr-fuse-elementwise", "::mlir::FunctionOpInterface"> {
  let summary = "Fuse chains of elementwise ops into one kernel.";
  let description = [{
    Groups elementwise ops of one shape that feed each other (add, sub, mul,
    div, pow, max, neg, exp, log, sqrt, rsqrt, tanh, erf, relu, sigmoid,
    silu, gelu, select and the gradients relu_grad, gelu_grad, silu_grad,
    on f32 values: whatever `tsr::FusedElementwiseOp::opcodeOf` accepts)
    into one `tsr.fused_elementwise`, whose kernel reads each operand and
    writes each result once (XLA's loop fusion, TorchInductor's pointwise
    fusion). A `tsr.broadcast` whose every reader is in the group is taken
    in: the kernel broadcasts the smaller operand (a bias, a scalar). The
    fused op's results are the group's values read outside it.

    Grouping is greedy in block order: an op joins the groups of its
    operands' producers (all of them when that stays legal, else the first
    that does). A group is rewritten only if it replaces at least two
    kernels (ops plus taken-in broadcasts) and the fused op can be placed
    after every value it reads and before every outside reader of its
    values (checked on the IR as the earlier rewrites left it, so fused ops
    never depend on each other in a cycle). Not fused: reductions,
    matmuls, collectives, layout ops, converts and comparisons, ops on
    bf16/f16/i64 values, ops tagged with a `tsr.trace` id (tessera-check
    dumps their results), groups past the kernel's limits (16 inputs, 48
    instructions, 16 results). Runs after tsr-fuse-linear and
    tsr-fuse-norm, so the epilogues and residual adds they take are gone.
    The values are unchanged bit for bit: each opcode computes what the
    unfused kernel computes.

    Before:
    ```mlir
    %b = tsr.broadcast %bias : tensor<64xf32> -> tensor<8x64xf32>
    %s = tsr.add %x, %b : tensor<8x64xf32>
    %y = tsr.gelu %s {approximate = "tanh"} : tensor<8x64xf32>
    %z = tsr.mul %y, %r : tensor<8x64xf32>
    ```
    After:
    ```mlir
    %z = tsr.fused_elementwise %x, %bias, %r
        {args = array<i64: 0, 1, 3, 4, 2>, ops = ["add", "gelu_tanh", "mul"],
         outputs = array<i64: 5>}
        : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>)
          -> tensor<8x64xf32>
    ```
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

//===- Passes.td - value tracing passes --------------------*- tablegen -*-===//

#ifndef TESSERA_PASSES_TRACE_PASSES
#define TESSERA_PASSES_TRACE_PASSES

include "mlir/Pass/PassBase.td"

def TraceValues : Pass<"tsr-trace-values", "::mlir::ModuleOp"> {
  let summary = "Stamp every op of @train_step with a stable trace id.";
  let description = [{
    Numbers the ops of `func.func @train_step` in program order: every op
    with results except constants and the terminator gets `tsr.trace = i`
    (i64, from 0). `tessera-check` runs it right after
    `tsr-build-train-step`, before any sharding pass, on the serial and on
    the partitioned program alike, so that one id names the same value in
    both: the sharding passes rewrite ops in place and keep the attribute,
    `tsr-sharding-partition` records the layout of a traced op's local
    results as `tsr.trace_shardings` (one `#tsr.sharding` per result;
    `tsr-zero-sharding` adds the dp axis where it shards an update), and
    `tsr-lower-to-runtime` turns the id into `tsrt.trace` on the op's
    `tsrt.kernel`, whose results `tessera-run --dump-tensors DIR` writes.
    Collectives inserted by the partitioner carry no id. Ops cloned later
    (`tsr-recompute`) keep their original's id: a value may then occur
    more than once per step.

    The normal `tessera-partition` pipeline does not run this pass; its
    output is unchanged.

    Before:
    ```mlir
    func.func @train_step(...) {
      %c = tsr.constant dense<1.0> : tensor<f32>
      %0 = tsr.matmul %x, %w : ...
      %1 = tsr.gelu %0 : ...
      return ...
    }
    ```
    After:
    ```mlir
      %c = tsr.constant dense<1.0> : tensor<f32>
      %0 = tsr.matmul %x, %w {tsr.trace = 0 : i64} : ...
      %1 = tsr.gelu %0 {tsr.trace = 1 : i64} : ...
    ```
    Fails when the module has no `func.func @train_step` (run it after
    `tsr-build-train-step`).
  }];
}

#endif // TESSERA_PASSES_TRACE_PASSES

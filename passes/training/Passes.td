//===- Passes.td - training passes -------------------------*- tablegen -*-===//

#ifndef TESSERA_PASSES_TRAINING_PASSES
#define TESSERA_PASSES_TRAINING_PASSES

include "mlir/Pass/PassBase.td"

def BuildTrainStep : Pass<"tsr-build-train-step", "::mlir::ModuleOp"> {
  let summary = "Turn @forward into @train_step: loss, backward, optimizer.";
  let description = [{
    Replaces `func.func @forward` (arguments with `tsr.role` = "param",
    "frozen" or "input"; result: the logits, [B, S, V] or [N, V] float) by
    `func.func @train_step`:

    - arguments: the trainable params, the frozen params (both keep
      `tsr.role`, `tsr.name` and `tsr.init`), the optimizer state
      (`tsr.role = "opt_state"`, zero-initialised by the runtime: per param
      `<name>.exp_avg` and `<name>.exp_avg_sq`, then one scalar `step`, for
      AdamW; nothing for SGD), the token ids (the first integer input,
      `tsr.role = "tokens"`; other inputs keep "input") and the `labels`
      (i64, the tokens' shape, `tsr.role = "labels"`);
    - results: the loss (`tsr.role = "loss"`, `tensor<f32>`), the updated
      params (`tsr.role = "param"`, `tsr.name`) and the updated optimizer
      state (same names as the arguments; `step' = step + 1`).

    The loss is the mean cross-entropy over all N = B·S tokens, kept as the
    sum times a separate constant 1/N (`tsr.mul`), so that data-parallel
    partitioning can make the sum partial while the constant stays the
    global count. The backward pass walks the forward ops in reverse and asks
    each op for its cotangents through `GradientOpInterface` (seed
    dloss = 1; values used several times accumulate with `tsr.add`); only
    values that depend on a trainable param are differentiated. Each param is
    updated by one `tsr.sgd_update` or `tsr.adamw_update` (torch.optim
    semantics; a param the loss does not depend on is returned unchanged).
    The new function is cleaned up by folding, dead-code elimination and CSE.

    Before:
    ```mlir
    func.func @forward(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.init = ...},
                       %tok: tensor<2x3xi64> {tsr.name = "tokens", tsr.role = "input"})
        -> (tensor<2x3x4xf32> {tsr.name = "logits"}) {
      %x = tsr.gather %w, %tok : tensor<8x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
      return %x : tensor<2x3x4xf32>
    }
    ```
    After (`optimizer=sgd`):
    ```mlir
    func.func @train_step(%w: tensor<8x4xf32> {tsr.name = "w", tsr.role = "param", tsr.init = ...},
                          %tok: tensor<2x3xi64> {tsr.name = "tokens", tsr.role = "tokens"},
                          %lab: tensor<2x3xi64> {tsr.name = "labels", tsr.role = "labels"})
        -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss"},
            tensor<8x4xf32> {tsr.name = "w", tsr.role = "param"}) {
      %x = tsr.gather %w, %tok : ...
      %l2 = tsr.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
      %y = tsr.reshape %lab : tensor<2x3xi64> -> tensor<6xi64>
      %sum = tsr.cross_entropy %l2, %y : tensor<6x4xf32>, tensor<6xi64> -> tensor<f32>
      %inv = tsr.constant dense<0.166666672> : tensor<f32>
      %loss = tsr.mul %sum, %inv : tensor<f32>
      %dsum = tsr.mul %one, %inv : tensor<f32>
      %dl2 = tsr.cross_entropy_grad %l2, %y, %dsum : ...
      %dx = tsr.reshape %dl2 : tensor<6x4xf32> -> tensor<2x3x4xf32>
      %dw = tsr.gather_grad %tok, %dx : ... -> tensor<8x4xf32>
      %w1 = tsr.sgd_update %w, %dw {lr = 1.0e-03 : f32, weight_decay = 0.0 : f32} : tensor<8x4xf32>
      return %loss, %w1 : tensor<f32>, tensor<8x4xf32>
    }
    ```
    Errors (no crash) when there is no `@forward` (or `@train_step` already
    exists), the forward returns nothing or non-float logits, an argument has
    an unknown role, or an op's gradient rule fails (the rule names the op
    and its location).
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "Optimizer: sgd or adamw (torch.optim semantics)">,
    Option<"lr", "lr", "double", /*default=*/"1e-3", "Learning rate">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"-1.0",
           "Weight decay; negative means the optimizer's default (adamw "
           "0.01, sgd 0)">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
  ];
  let dependentDialects = ["::tessera::tsr::TsrDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // TESSERA_PASSES_TRAINING_PASSES

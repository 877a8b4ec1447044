// RUN: tessera-opt --tsr-build-train-step %s -split-input-file -verify-diagnostics
// RUN: not tessera-opt --tsr-build-train-step="optimizer=lamb" %s -split-input-file 2>&1 | FileCheck %s --check-prefix=OPT

// OPT: unknown optimizer 'lamb'; expected 'sgd' or 'adamw'

// expected-error @+1 {{no func.func @forward to differentiate}}
module {
  func.func @predict(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    return %x : tensor<2x4xf32>
  }
}

// -----

// expected-error @+1 {{@forward has no logits result}}
func.func @forward(%x: tensor<2x4xf32> {tsr.name = "x", tsr.role = "param"}) {
  return
}

// -----

// expected-error @+1 {{logits result must be a statically shaped float tensor}}
func.func @forward(%t: tensor<2x3xi64> {tsr.name = "tokens", tsr.role = "input"}) -> tensor<2x3xi64> {
  return %t : tensor<2x3xi64>
}

// -----

// expected-error @+1 {{argument 0 has unknown tsr.role 'weight'}}
func.func @forward(%w: tensor<4x5xf32> {tsr.name = "w", tsr.role = "weight"}) -> tensor<4x5xf32> {
  return %w : tensor<4x5xf32>
}

// -----

// A gradient op in the forward: no second-order rule.
func.func @forward(%w: tensor<4x5xf32> {tsr.name = "w", tsr.role = "param"},
                   %x: tensor<4x5xf32> {tsr.name = "x", tsr.role = "input"}) -> tensor<4x5xf32> {
  // expected-error @+1 {{'tsr.relu_grad' op has no gradient rule: second-order differentiation is not supported}}
  %0 = tsr.relu_grad %w, %x : tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// An op of another dialect on the differentiated path.
func.func private @helper(tensor<4x5xf32>) -> tensor<4x5xf32>
func.func @forward(%w: tensor<4x5xf32> {tsr.name = "w", tsr.role = "param"}) -> tensor<4x5xf32> {
  // expected-error @+1 {{'func.call' op has no gradient rule}}
  %0 = func.call @helper(%w) : (tensor<4x5xf32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// expected-error @+1 {{the module already has a @train_step}}
func.func @forward(%w: tensor<4x5xf32> {tsr.name = "w", tsr.role = "param"}) -> tensor<4x5xf32> {
  return %w : tensor<4x5xf32>
}
func.func @train_step() {
  return
}

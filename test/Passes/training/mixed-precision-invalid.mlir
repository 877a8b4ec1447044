// RUN: tessera-opt --tsr-mixed-precision %s -split-input-file -verify-diagnostics
// RUN: not tessera-opt --tsr-mixed-precision="precision=int8" %s 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: error: tsr-mixed-precision: precision must be fp32, bf16 or fp16, got 'int8'

// No @train_step: tsr-build-train-step has not run.
// expected-error@below {{tsr-mixed-precision needs a @train_step with a body (run tsr-build-train-step first)}}
module {
  func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}

// -----

// The pass runs once, on an f32 step.
module {
  // expected-error@below {{tsr-mixed-precision: @train_step already holds bf16 values (the pass runs once, on an f32 step)}}
  func.func @train_step(%x: tensor<2xf32> {tsr.role = "param"}) -> tensor<2xf32> {
    %y = tsr.convert %x : tensor<2xf32> -> tensor<2xbf16>
    %z = tsr.convert %y : tensor<2xbf16> -> tensor<2xf32>
    return %z : tensor<2xf32>
  }
}

// -----

// A non-tsr op cannot be retyped.
module {
  func.func private @ext(tensor<2xf32>) -> tensor<2xf32>
  func.func @train_step(%x: tensor<2xf32> {tsr.role = "param"}) -> tensor<2xf32> {
    // expected-error@below {{'func.call' op tsr-mixed-precision: cannot run a non-tsr op in bf16}}
    %y = func.call @ext(%x) : (tensor<2xf32>) -> tensor<2xf32>
    return %y : tensor<2xf32>
  }
}

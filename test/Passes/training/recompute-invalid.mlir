// RUN: tessera-opt --tsr-recompute="mode=full" %s -split-input-file -verify-diagnostics
// RUN: not tessera-opt --tsr-recompute="mode=sometimes" %s 2>&1 | FileCheck %s --check-prefix=MODE
// MODE: error: tsr-recompute: mode must be none, selective or full, got 'sometimes'

// No @train_step: tsr-build-train-step has not run.
// expected-error@below {{tsr-recompute needs a @train_step with a body (run tsr-build-train-step first)}}
module {
  func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}

// -----

// A @train_step without backward ops tagged tsr.bwd.
module {
  // expected-error@below {{tsr-recompute: @train_step has no backward ops tagged tsr.bwd (run tsr-build-train-step first)}}
  func.func @train_step(%x: tensor<2xf32>) -> tensor<2xf32> {
    %y = tsr.gelu %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
}

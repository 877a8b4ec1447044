// fp16 loss-scale checks of tsr-mixed-precision: the scale must be a power
// of two > 0 (so scaling is exact) and is only meaningful with fp16.
// RUN: not tessera-opt --tsr-mixed-precision="precision=fp16 loss-scale=1000" %s 2>&1 | FileCheck %s --check-prefix=NOTPOW2
// RUN: not tessera-opt --tsr-mixed-precision="precision=fp16 loss-scale=0" %s 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not tessera-opt --tsr-mixed-precision="precision=fp16 loss-scale=-4" %s 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not tessera-opt --tsr-mixed-precision="precision=bf16 loss-scale=1024" %s 2>&1 | FileCheck %s --check-prefix=BF16
// Dynamic loss scaling's options (the default for fp16 without loss-scale).
// RUN: not tessera-opt --tsr-mixed-precision="precision=fp16 initial-loss-scale=1000" %s 2>&1 | FileCheck %s --check-prefix=INITPOW2
// RUN: not tessera-opt --tsr-mixed-precision="precision=fp16 initial-loss-scale=0" %s 2>&1 | FileCheck %s --check-prefix=INITZERO
// RUN: not tessera-opt --tsr-mixed-precision="precision=fp16 loss-scale-window=0" %s 2>&1 | FileCheck %s --check-prefix=WINDOW
// RUN: not tessera-opt --tsr-mixed-precision="precision=fp16 min-loss-scale=3" %s 2>&1 | FileCheck %s --check-prefix=MINPOW2
// RUN: not tessera-opt --tsr-mixed-precision="precision=fp16 initial-loss-scale=256 min-loss-scale=512" %s 2>&1 | FileCheck %s --check-prefix=MINGTINIT
// RUN: not tessera-opt --tsr-mixed-precision="precision=fp16 loss-scale=256 loss-scale-window=10" %s 2>&1 | FileCheck %s --check-prefix=STATIC
// RUN: not tessera-opt --tsr-mixed-precision="precision=bf16 initial-loss-scale=1024" %s 2>&1 | FileCheck %s --check-prefix=DYNBF16
// INITPOW2: error: tsr-mixed-precision: initial-loss-scale must be a power of two > 0 (so scaling is exact), got 1.000000e+03
// INITZERO: error: tsr-mixed-precision: initial-loss-scale must be a power of two > 0 (so scaling is exact), got 0.000000e+00
// WINDOW: error: tsr-mixed-precision: loss-scale-window must be >= 1, got 0
// MINPOW2: error: tsr-mixed-precision: min-loss-scale must be a power of two > 0, got 3.000000e+00
// MINGTINIT: error: tsr-mixed-precision: min-loss-scale (5.120000e+02) must not exceed initial-loss-scale (2.560000e+02)
// STATIC: error: tsr-mixed-precision: initial-loss-scale, loss-scale-window and min-loss-scale set dynamic loss scaling; they conflict with the static loss-scale
// DYNBF16: error: tsr-mixed-precision: initial-loss-scale, loss-scale-window and min-loss-scale are only meaningful with precision=fp16
// RUN: tessera-opt --tsr-mixed-precision="precision=fp16" %s -split-input-file -verify-diagnostics
// RUN: tessera-opt --tsr-mixed-precision="precision=fp16 loss-scale=1024" %s -split-input-file -verify-diagnostics
// NOTPOW2: error: tsr-mixed-precision: loss-scale must be a power of two > 0 (so scaling is exact), got 1.000000e+03
// ZERO: error: tsr-mixed-precision: loss-scale must be a power of two > 0 (so scaling is exact), got 0.000000e+00
// NEG: error: tsr-mixed-precision: loss-scale must be a power of two > 0 (so scaling is exact), got -4.000000e+00
// BF16: error: tsr-mixed-precision: loss-scale is only meaningful with precision=fp16

// fp16 needs a cross-entropy gradient seed to scale.
module {
  // expected-error@below {{tsr-mixed-precision: precision=fp16 needs a tsr.cross_entropy_grad seed to apply the loss scale to}}
  func.func @train_step(%x: tensor<2xf32> {tsr.role = "param"}) -> tensor<2xf32> {
    %y = tsr.neg %x : tensor<2xf32>
    return %y : tensor<2xf32>
  }
}

// -----

// The pass runs once, on an f32 step.
module {
  // expected-error@below {{tsr-mixed-precision: @train_step already holds f16 values (the pass runs once, on an f32 step)}}
  func.func @train_step(%x: tensor<2xf32> {tsr.role = "param"}) -> tensor<2xf32> {
    %y = tsr.convert %x : tensor<2xf32> -> tensor<2xf16>
    %z = tsr.convert %y : tensor<2xf16> -> tensor<2xf32>
    return %z : tensor<2xf32>
  }
}

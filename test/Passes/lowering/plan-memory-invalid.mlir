// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-plan-memory))' %s -split-input-file -verify-diagnostics

// The pass runs after tsr-lower-to-runtime: a tsr op is an error.
func.func @not_lowered(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{is not a tsrt runtime instruction; tsr-plan-memory runs after tsr-lower-to-runtime}}
  %0 = tsr.mul %x, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument #0 has type 'tensor<?xf32>', which the runtime cannot hold}}
func.func @dynamic(%x: tensor<?xf32>) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}

// -----

func.func @f64(%x: tensor<4xf32>) -> tensor<4xf64> {
  // expected-error @+1 {{result type 'tensor<4xf64>' is not one the runtime can hold}}
  %0 = tsrt.kernel "convert"(%x) {attrs = {}} : (tensor<4xf32>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}

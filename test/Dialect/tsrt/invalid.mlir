// RUN: tessera-opt %s -split-input-file -verify-diagnostics

func.func @no_axes(%a: tensor<4xf32>) {
  // expected-error @+1 {{needs at least one grid axis}}
  %0 = tsrt.all_reduce %a {grid_axes = array<i16>} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @bad_reduction(%a: tensor<4xf32>) {
  // expected-error @+1 {{reduction must be "sum" or "max"}}
  %0 = tsrt.all_reduce %a {grid_axes = array<i16: 0>, reduction = "prod"} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @gather_dim(%a: tensor<4xf32>) {
  // expected-error @+1 {{dimension 1 out of range for rank 1}}
  %0 = tsrt.all_gather %a {grid_axes = array<i16: 0>, dim = 1 : i64} : tensor<4xf32> -> tensor<8xf32>
  return
}

// -----

func.func @repeated_axis(%a: tensor<4xf32>) {
  // expected-error @+1 {{grid axis 0 repeated}}
  %0 = tsrt.all_reduce %a {grid_axes = array<i16: 0, 0>} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @slice_dim(%a: tensor<4xf32>) {
  // expected-error @+1 {{dimension -1 out of range for rank 1}}
  %0 = tsrt.all_slice %a {grid_axes = array<i16: 0>, dim = -1 : i64} : tensor<4xf32> -> tensor<2xf32>
  return
}

// -----

func.func @wait_not_started(%a: tensor<4xf32>) {
  %0 = tsrt.all_reduce %a {grid_axes = array<i16: 0>} : tensor<4xf32> -> tensor<4xf32>
  // expected-error @+1 {{pending value must be made by tsrt.all_reduce_start}}
  %1 = tsrt.wait %0, %a : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @wait_wrong_input(%a: tensor<4xf32>, %b: tensor<4xf32>) {
  %0 = tsrt.all_reduce_start %a {grid_axes = array<i16: 0>} : tensor<4xf32> -> tensor<4xf32>
  // expected-error @+1 {{input must be the input of the tsrt.all_reduce_start being waited for}}
  %1 = tsrt.wait %0, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @start_type(%a: tensor<4xf32>) {
  // expected-error @+1 {{result type must equal input type}}
  %0 = tsrt.all_reduce_start %a {grid_axes = array<i16: 0>} : tensor<4xf32> -> tensor<2xf32>
  return
}

// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-fuse-norm))' %s -split-input-file | FileCheck %s

// A pre-norm block: the residual add feeds the norm and the next residual
// add; the backward adds the norm's input gradient to the residual
// cotangent (in either operand order).
// CHECK-LABEL: func.func @pre_norm
// CHECK-NEXT: %[[H:.*]], %[[Y:.*]] = tsr.add_layer_norm %arg0, %arg1, %arg2, %arg3 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32, tsr.fwd = 1 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[N:.*]] = tsr.add %[[H]], %[[Y]] : tensor<2x4x8xf32>
// CHECK-NEXT: %[[S:.*]], %[[DG:.*]], %[[DB:.*]] = tsr.layer_norm_grad_add %[[H]], %arg2, %arg4, %arg5 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32, tsr.bwd = 1 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[S2:.*]], %[[DG2:.*]], %[[DB2:.*]] = tsr.layer_norm_grad_add %[[N]], %arg2, %[[S]], %[[S]]
// CHECK-NEXT: return %[[N]], %[[S2]], %[[DG]], %[[DB]], %[[DG2]], %[[DB2]]
func.func @pre_norm(%x: tensor<2x4x8xf32>, %r: tensor<2x4x8xf32>,
                    %g: tensor<8xf32>, %b: tensor<8xf32>,
                    %dy: tensor<2x4x8xf32>, %dres: tensor<2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>,
        tensor<8xf32>, tensor<8xf32>) {
  %h = tsr.add %x, %r {tsr.fwd = 0 : i64} : tensor<2x4x8xf32>
  %y = tsr.layer_norm %h, %g, %b {axis = 2 : i64, epsilon = 1.0e-05 : f32, tsr.fwd = 1 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
  %next = tsr.add %h, %y : tensor<2x4x8xf32>
  %dx, %dg, %db = tsr.layer_norm_grad %h, %g, %dy {axis = 2 : i64, epsilon = 1.0e-05 : f32, tsr.bwd = 1 : i64} : tensor<2x4x8xf32>, tensor<8xf32>
  %s = tsr.add %dres, %dx : tensor<2x4x8xf32>
  %dx2, %dg2, %db2 = tsr.layer_norm_grad %next, %g, %s {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  %s2 = tsr.add %dx2, %s : tensor<2x4x8xf32>
  return %next, %s2, %dg, %db, %dg2, %db2 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// RMSNorm (LLaMA), forward and backward.
// CHECK-LABEL: func.func @rms
// CHECK-NEXT: %[[H:.*]], %[[Y:.*]] = tsr.add_rms_norm %arg0, %arg1, %arg2 {axis = 1 : i64, epsilon = 9.99999997E-7 : f32} : tensor<4x8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[S:.*]], %[[DW:.*]] = tsr.rms_norm_grad_add %[[H]], %arg2, %arg3, %arg4 {axis = 1 : i64, epsilon = 9.99999997E-7 : f32} : tensor<4x8xf32>, tensor<8xf32>
// CHECK-NEXT: return %[[H]], %[[Y]], %[[S]], %[[DW]]
func.func @rms(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>, %w: tensor<8xf32>,
               %dy: tensor<4x8xf32>, %dres: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) {
  %h = tsr.add %x, %r : tensor<4x8xf32>
  %y = tsr.rms_norm %h, %w {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x8xf32>, tensor<8xf32>
  %dx, %dw = tsr.rms_norm_grad %h, %w, %dy {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x8xf32>, tensor<8xf32>
  %s = tsr.add %dx, %dres : tensor<4x8xf32>
  return %h, %y, %s, %dw : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
}

// -----

// The norm's scale is produced after the add (a ZeRO-3 all-gather) and the
// sum is read in between: the fused op goes at the norm when nothing reads
// the sum before it, and the pair stays apart otherwise.
// CHECK-LABEL: func.func @late_scale
// CHECK-NEXT: %[[G:.*]] = tsr.add %arg2, %arg2
// CHECK-NEXT: %{{.*}}, %{{.*}} = tsr.add_layer_norm %arg0, %arg1, %[[G]], %arg3
// CHECK-LABEL: func.func @late_scale_read_between
// CHECK-NEXT: %[[H:.*]] = tsr.add %arg0, %arg1
// CHECK-NEXT: tsr.mul %[[H]], %[[H]]
// CHECK-NEXT: tsr.add %arg2, %arg2
// CHECK-NEXT: tsr.layer_norm %[[H]]
// CHECK-NOT: add_layer_norm
func.func @late_scale(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>,
                      %g0: tensor<8xf32>, %b: tensor<8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %h = tsr.add %x, %r : tensor<4x8xf32>
  %g = tsr.add %g0, %g0 : tensor<8xf32>
  %y = tsr.layer_norm %h, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
  return %h, %y : tensor<4x8xf32>, tensor<4x8xf32>
}
func.func @late_scale_read_between(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>,
                                   %g0: tensor<8xf32>, %b: tensor<8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %h = tsr.add %x, %r : tensor<4x8xf32>
  %m = tsr.mul %h, %h : tensor<4x8xf32>
  %g = tsr.add %g0, %g0 : tensor<8xf32>
  %y = tsr.layer_norm %h, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
  return %m, %y : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Must not fuse: a norm whose input is not an add; an input gradient with
// another reader; an add of two values none of which is a norm's input
// gradient; traced ops (tsr-trace-values).
// CHECK-LABEL: func.func @not_fused
// CHECK-NEXT: tsr.sub
// CHECK-NEXT: tsr.layer_norm %
// CHECK-NEXT: tsr.layer_norm_grad %
// CHECK-NEXT: tsr.add
// CHECK-NEXT: tsr.mul
// CHECK-NEXT: tsr.add {{.*}}tsr.trace = 7
// CHECK-NEXT: tsr.layer_norm %
// CHECK-NEXT: return
func.func @not_fused(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>,
                     %g: tensor<8xf32>, %dy: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %d = tsr.sub %x, %r : tensor<4x8xf32>
  %y = tsr.layer_norm %d, %g, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
  %dx, %dg, %db = tsr.layer_norm_grad %x, %g, %dy {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
  %s = tsr.add %dx, %dy : tensor<4x8xf32>
  %t = tsr.mul %dx, %s : tensor<4x8xf32>
  %h = tsr.add %x, %r {tsr.trace = 7 : i64} : tensor<4x8xf32>
  %z = tsr.layer_norm %h, %g, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
  return %y, %t, %z, %h : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Must not fuse: the residual cotangent is produced after the gradient and
// the gradient's scale_grad is read in between (the sp all-reduce case
// where the cotangent comes late).
// CHECK-LABEL: func.func @late_addend
// CHECK-NEXT: tsr.layer_norm_grad %arg0
// CHECK-NEXT: tsr.add
// CHECK-NEXT: tsr.mul
// CHECK-NEXT: tsr.add
// CHECK-NEXT: return
func.func @late_addend(%x: tensor<4x8xf32>, %g: tensor<8xf32>,
                       %dy: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<8xf32>) {
  %dx, %dg, %db = tsr.layer_norm_grad %x, %g, %dy {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
  %dg2 = tsr.add %dg, %db : tensor<8xf32>
  %late = tsr.mul %dy, %dy : tensor<4x8xf32>
  %s = tsr.add %late, %dx : tensor<4x8xf32>
  return %s, %dg2 : tensor<4x8xf32>, tensor<8xf32>
}

// -----

// The late cotangent with nothing reading the gradient's other results
// before the add: fused at the add.
// CHECK-LABEL: func.func @late_addend_fused
// CHECK-NEXT: %[[L:.*]] = tsr.mul %arg2, %arg2
// CHECK-NEXT: %[[S:.*]], %[[DG:.*]], %[[DB:.*]] = tsr.layer_norm_grad_add %arg0, %arg1, %arg2, %[[L]]
// CHECK-NEXT: %[[D:.*]] = tsr.add %[[DG]], %[[DB]]
// CHECK-NEXT: return %[[S]], %[[D]]
func.func @late_addend_fused(%x: tensor<4x8xf32>, %g: tensor<8xf32>,
                             %dy: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<8xf32>) {
  %dx, %dg, %db = tsr.layer_norm_grad %x, %g, %dy {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x8xf32>, tensor<8xf32>
  %late = tsr.mul %dy, %dy : tensor<4x8xf32>
  %s = tsr.add %late, %dx : tensor<4x8xf32>
  %dg2 = tsr.add %dg, %db : tensor<8xf32>
  return %s, %dg2 : tensor<4x8xf32>, tensor<8xf32>
}

// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %s | FileCheck %s
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition),tsr-lower-to-runtime,func.func(tsr-plan-memory))' %s | FileCheck %s --check-prefix=RT
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %s | FileCheck %s --check-prefix=BLOCK
// Numerics (simulate.py: each ring op equals the op on the interleaved,
// gathered sequence), on a 1x2x2 grid with the heads over tp as well:
// RUN: tessera-opt %S/Inputs/ring_attention.mlir --mlir-print-op-generic > %t.serial.mlir
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/ring_attention.mlir --mlir-print-op-generic > %t.part.mlir
// RUN: FileCheck %s --check-prefix=SIMIR --implicit-check-not=shard.all_gather < %t.part.mlir
// RUN: %python %S/Inputs/simulate.py %t.serial.mlir %t.part.mlir | FileCheck %s --check-prefix=SIM
// SIMIR: "tsr.attention"({{.*}}) <{causal = true, ring_size = 2 : i64, scale = 5.000000e-01 : f32}> {grid_axes = array<i16: 2>} : (tensor<2x4x3xf32>, tensor<2x4x3xf32>, tensor<2x4x5xf32>) -> (tensor<2x4x5xf32>, tensor<2x4xf32>)
// SIMIR: "tsr.attention_grad"({{.*}}) <{causal = true, ring_size = 2 : i64, scale = 5.000000e-01 : f32}> {grid_axes = array<i16: 2>}
// SIM: OK: 5 results on 4 ranks match the serial run

// Ring attention (context parallelism) over sp = 2 with the striped layout:
// Q, K and V [B·H, S, Dh] = [4, 8, 4] are sharded {S/2, 2 : [sp]} on the
// sequence, so rank r holds global positions 2·i + r. attention's rule with
// ring_size = 2 models the sequence of queries AND keys as the factors
// [S/2, 2] with the minor (ring) factor split: the partitioned ops keep
// local [4, 4, 4] stripes, carry the ring axis as grid_axes and need no
// collective (the kernel rotates K/V itself and its results are complete).
module attributes {tsr.grid_axes = ["dp", "tp", "sp"]} {
  shard.grid @grid(shape = 1x1x2)
  // CHECK-LABEL: func.func @ring
  // CHECK-SAME: %arg0: tensor<4x4x4xf32>
  // CHECK-SAME: %arg1: tensor<4x4x4xf32>
  // CHECK-SAME: %arg2: tensor<4x4x4xf32>
  // CHECK-SAME: %arg3: tensor<4x4x4xf32>
  // CHECK-SAME: -> (tensor<4x4x4xf32> {{.*}}, tensor<4x4x4xf32> {{.*}}, tensor<4x4x4xf32> {{.*}}, tensor<4x4x4xf32> {{.*}})
  func.func @ring(%q: tensor<4x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {4, 2 : [2]}, []]>},
                  %k: tensor<4x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {4, 2 : [2]}, []]>},
                  %v: tensor<4x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {4, 2 : [2]}, []]>},
                  %do: tensor<4x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {4, 2 : [2]}, []]>})
      -> (tensor<4x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {4, 2 : [2]}, []]>}, tensor<4x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {4, 2 : [2]}, []]>}, tensor<4x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {4, 2 : [2]}, []]>}, tensor<4x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], {4, 2 : [2]}, []]>}) {
    // CHECK-NOT: shard.
    // CHECK: %[[O:.*]], %[[L:.*]] = tsr.attention %arg0, %arg1, %arg2 {causal = true, grid_axes = array<i16: 2>, ring_size = 2 : i64, scale = 5.000000e-01 : f32} : tensor<4x4x4xf32>, tensor<4x4x4xf32>, tensor<4x4x4xf32> -> tensor<4x4x4xf32>, tensor<4x4xf32>
    %o, %l = tsr.attention %q, %k, %v {causal = true, ring_size = 2 : i64, scale = 0.5 : f32} : tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32> -> tensor<4x8x4xf32>, tensor<4x8xf32>
    // CHECK-NOT: shard.
    // CHECK: tsr.attention_grad %arg0, %arg1, %arg2, %[[O]], %[[L]], %arg3 {causal = true, grid_axes = array<i16: 2>, ring_size = 2 : i64, scale = 5.000000e-01 : f32} : tensor<4x4x4xf32>, tensor<4x4x4xf32>, tensor<4x4x4xf32>, tensor<4x4x4xf32>, tensor<4x4xf32>
    %dq, %dk, %dv = tsr.attention_grad %q, %k, %v, %o, %l, %do {causal = true, ring_size = 2 : i64, scale = 0.5 : f32} : tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8xf32>
    // CHECK-NOT: shard.
    // CHECK: return
    // CHECK-NEXT: }
    return %o, %dq, %dk, %dv : tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32>
  }
  // A contiguous (block) split of the sequence splits the major S/2 factor,
  // which must stay whole: the operands are all-gathered and the op runs as
  // plain attention on the whole sequence (ring_size kept, no grid_axes).
  // BLOCK-LABEL: func.func @block
  // BLOCK: shard.all_gather
  // BLOCK: tsr.attention %{{.*}}, %{{.*}}, %{{.*}} {causal = true, ring_size = 2 : i64, scale = 5.000000e-01 : f32} : tensor<4x8x4xf32>
  func.func @block(%q: tensor<4x8x4xf32> {tsr.sharding = #tsr.sharding<@grid, [[], [2], []]>})
      -> tensor<4x8x4xf32> {
    %o, %l = tsr.attention %q, %q, %q {causal = true, ring_size = 2 : i64, scale = 0.5 : f32} : tensor<4x8x4xf32>, tensor<4x8x4xf32>, tensor<4x8x4xf32> -> tensor<4x8x4xf32>, tensor<4x8xf32>
    return %o : tensor<4x8x4xf32>
  }
}

// The runtime kernels keep ring_size and grid_axes, and the memory plan
// predicts the ring backward's scratch (dialects/tsrt/AttentionWorkspace.h:
// 2·4·4·(4+4) rotating [K|V|dK|dV] + 4·4 delta + 2·4·4 P/dS, dP = 304
// floats = 1216 bytes) as the workspace at the peak.
// RT: tsrt.peak_bytes = {{{.*}}workspace = 1216 : i64}
// RT: tsrt.kernel "attention"({{.*}}) {attrs = {causal = true, grid_axes = array<i16: 2>, ring_size = 2 : i64, scale = 5.000000e-01 : f32}
// RT: tsrt.kernel "attention_grad"({{.*}}) {attrs = {causal = true, grid_axes = array<i16: 2>, ring_size = 2 : i64, scale = 5.000000e-01 : f32}

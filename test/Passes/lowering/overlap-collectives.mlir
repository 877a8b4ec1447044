// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-overlap-gradient-collectives{bucket-mb=0}))' %s | FileCheck %s --check-prefix=ALONE
// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-overlap-gradient-collectives{bucket-mb=1}))' %s | FileCheck %s --check-prefix=BUCKET
// RUN: not tessera-opt --pass-pipeline='builtin.module(func.func(tsr-overlap-gradient-collectives{bucket-mb=-1}))' %s 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: error: tsr-overlap-gradient-collectives: bucket-mb must be >= 0, got -1

// Two all-reduces over dp (axis 0) and one over tp (axis 1, left alone).
// bucket-mb=0: each dp all-reduce starts right after its input is made and
// is waited for right before its first use, so the tp work in between
// overlaps with it. bucket-mb=1: both fit one bucket, started after the
// later input: flattened, concatenated, one start, one wait, sliced back.
module attributes {tsrt.grid_axes = ["dp", "tp"], tsrt.grid_shape = array<i64: 2, 1>} {
  func.func @train_step(%x: tensor<64xf32>, %w: tensor<8x8xf32>) -> (tensor<64xf32>, tensor<8x8xf32>, tensor<64xf32>) {
    %a = tsrt.kernel "exp"(%x) {attrs = {}} : (tensor<64xf32>) -> tensor<64xf32>
    %b = tsrt.kernel "exp"(%w) {attrs = {}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    %c = tsrt.kernel "exp"(%a) {attrs = {}} : (tensor<64xf32>) -> tensor<64xf32>
    %ra = tsrt.all_reduce %a {grid_axes = array<i16: 0>} : tensor<64xf32> -> tensor<64xf32>
    %rb = tsrt.all_reduce %b {grid_axes = array<i16: 0>} : tensor<8x8xf32> -> tensor<8x8xf32>
    %rt = tsrt.all_reduce %c {grid_axes = array<i16: 1>} : tensor<64xf32> -> tensor<64xf32>
    %d = tsrt.kernel "exp"(%rt) {attrs = {}} : (tensor<64xf32>) -> tensor<64xf32>
    %e = tsrt.kernel "exp"(%rb) {attrs = {}} : (tensor<8x8xf32>) -> tensor<8x8xf32>
    return %ra, %e, %d : tensor<64xf32>, tensor<8x8xf32>, tensor<64xf32>
  }
}

// ALONE-LABEL: func.func @train_step(
// ALONE: %[[A:.*]] = tsrt.kernel "exp"(%arg0)
// ALONE-NEXT: %[[SA:.*]] = tsrt.all_reduce_start %[[A]] {grid_axes = array<i16: 0>} : tensor<64xf32> -> tensor<64xf32>
// ALONE-NEXT: %[[B:.*]] = tsrt.kernel "exp"(%arg1)
// ALONE-NEXT: %[[SB:.*]] = tsrt.all_reduce_start %[[B]] {grid_axes = array<i16: 0>} : tensor<8x8xf32> -> tensor<8x8xf32>
// ALONE: tsrt.all_reduce %{{.*}} {grid_axes = array<i16: 1>}
// ALONE: %[[WB:.*]] = tsrt.wait %[[SB]], %[[B]] : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
// ALONE-NEXT: %[[E:.*]] = tsrt.kernel "exp"(%[[WB]])
// ALONE-NEXT: %[[WA:.*]] = tsrt.wait %[[SA]], %[[A]]
// ALONE-NEXT: return %[[WA]], %[[E]]

// BUCKET-LABEL: func.func @train_step(
// BUCKET: %[[A:.*]] = tsrt.kernel "exp"(%arg0)
// BUCKET-NEXT: %[[B:.*]] = tsrt.kernel "exp"(%arg1)
// BUCKET-NEXT: %[[FB:.*]] = tsrt.kernel "reshape"(%[[B]]) {attrs = {}} : (tensor<8x8xf32>) -> tensor<64xf32>
// BUCKET-NEXT: %[[CAT:.*]] = tsrt.kernel "concat"(%[[A]], %[[FB]]) {attrs = {axis = 0 : i64}} : (tensor<64xf32>, tensor<64xf32>) -> tensor<128xf32>
// BUCKET-NEXT: %[[S:.*]] = tsrt.all_reduce_start %[[CAT]] {grid_axes = array<i16: 0>} : tensor<128xf32> -> tensor<128xf32>
// BUCKET: tsrt.all_reduce %{{.*}} {grid_axes = array<i16: 1>}
// BUCKET: %[[W:.*]] = tsrt.wait %[[S]], %[[CAT]]
// BUCKET-NEXT: %[[PA:.*]] = tsrt.kernel "slice"(%[[W]]) {attrs = {limit_indices = array<i64: 64>, start_indices = array<i64: 0>, strides = array<i64: 1>}}
// BUCKET-NEXT: %[[PB:.*]] = tsrt.kernel "slice"(%[[W]]) {attrs = {limit_indices = array<i64: 128>, start_indices = array<i64: 64>, strides = array<i64: 1>}}
// BUCKET-NEXT: %[[RB:.*]] = tsrt.kernel "reshape"(%[[PB]]) {attrs = {}} : (tensor<64xf32>) -> tensor<8x8xf32>
// BUCKET-NEXT: %[[E:.*]] = tsrt.kernel "exp"(%[[RB]])
// BUCKET-NEXT: return %[[PA]], %[[E]]

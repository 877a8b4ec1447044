// RUN: tessera-opt --pass-pipeline='builtin.module(func.func(tsr-plan-memory))' %s -split-input-file | FileCheck %s

// Freed space is reused: %c's lifetime starts after %a's last use, so it
// takes %a's offset; %b overlaps both and sits above them. The reshape is a
// view (-1) and extends %c's buffer to the reduce_sum. The returned value is
// not in the arena (-1: heap, it outlives the step). Constants and arguments
// get no offsets. The arena is the largest end offset: 2 x 1024 bytes.

// CHECK-LABEL: func.func @reuse
// CHECK-SAME: tsrt.arena_bytes = 2048 : i64, tsrt.arena_live_bytes = 2048 : i64
// CHECK-SAME: tsrt.peak_bytes = {arena = 2048 : i64, batch = 0 : i64, constants = 1024 : i64, optimizer_state = 0 : i64, other_arguments = 0 : i64, parameters = 1024 : i64, peak = 4160 : i64, updated_state = 64 : i64, workspace = 0 : i64}
func.func @reuse(%x: tensor<256xf32> {tsrt.role = "param"}) -> (tensor<f32> {tsrt.role = "loss"}) {
  // CHECK: tsrt.constant
  // CHECK-NOT: tsrt.offsets
  %k = tsrt.constant dense<1.0> : tensor<256xf32>
  // CHECK: %[[A:.*]] = tsrt.kernel "add"(%arg0, %{{.*}}) {attrs = {}, tsrt.offsets = array<i64: 0>}
  %a = tsrt.kernel "add"(%x, %k) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  // CHECK: %[[B:.*]] = tsrt.kernel "exp"(%[[A]]) {attrs = {}, tsrt.offsets = array<i64: 1024>}
  %b = tsrt.kernel "exp"(%a) {attrs = {}} : (tensor<256xf32>) -> tensor<256xf32>
  // CHECK: %[[C:.*]] = tsrt.kernel "exp"(%[[B]]) {attrs = {}, tsrt.offsets = array<i64: 0>}
  %c = tsrt.kernel "exp"(%b) {attrs = {}} : (tensor<256xf32>) -> tensor<256xf32>
  // CHECK: %[[R:.*]] = tsrt.kernel "reshape"(%[[C]]) {attrs = {}, tsrt.offsets = array<i64: -1>}
  %r = tsrt.kernel "reshape"(%c) {attrs = {}} : (tensor<256xf32>) -> tensor<16x16xf32>
  // CHECK: tsrt.kernel "reduce_sum"(%[[R]]) {attrs = {axes = [0, 1]}, tsrt.offsets = array<i64: -1>}
  %s = tsrt.kernel "reduce_sum"(%r) {attrs = {axes = [0, 1]}} : (tensor<16x16xf32>) -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Views keep their operand's buffer alive: %a is read last through its
// views %v and %w at instruction 5, so its buffer lives over [0, 5] and %c
// (defined at 2) goes above it. The largest buffer is placed first: %big
// (2048 bytes, live over [1, 2]) takes offset 0, and %d (defined at 5, after
// %big's last use) reuses that space.

// CHECK-LABEL: func.func @views_and_sizes
// CHECK-SAME: tsrt.arena_bytes = 4096 : i64
func.func @views_and_sizes(%x: tensor<256xf32> {tsrt.role = "tokens"}) -> (tensor<256xf32>) {
  // CHECK: tsrt.kernel "exp"(%arg0) {attrs = {}, tsrt.offsets = array<i64: 2048>}
  %a = tsrt.kernel "exp"(%x) {attrs = {}} : (tensor<256xf32>) -> tensor<256xf32>
  // CHECK: tsrt.kernel "concat"{{.*}}tsrt.offsets = array<i64: 0>
  %big = tsrt.kernel "concat"(%a, %a) {attrs = {axis = 0}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<512xf32>
  // CHECK: tsrt.kernel "slice"{{.*}}tsrt.offsets = array<i64: 3072>
  %c = tsrt.kernel "slice"(%big) {attrs = {starts = [0], limits = [256]}} : (tensor<512xf32>) -> tensor<256xf32>
  // CHECK: tsrt.kernel "reshape"{{.*}}tsrt.offsets = array<i64: -1>
  %v = tsrt.kernel "reshape"(%a) {attrs = {}} : (tensor<256xf32>) -> tensor<16x16xf32>
  // CHECK: tsrt.kernel "reshape"{{.*}}tsrt.offsets = array<i64: -1>
  %w = tsrt.kernel "reshape"(%v) {attrs = {}} : (tensor<16x16xf32>) -> tensor<256xf32>
  // CHECK: tsrt.kernel "add"{{.*}}tsrt.offsets = array<i64: 0>
  %d = tsrt.kernel "add"(%w, %c) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  // CHECK: tsrt.kernel "exp"{{.*}}tsrt.offsets = array<i64: -1>
  %e = tsrt.kernel "exp"(%d) {attrs = {}} : (tensor<256xf32>) -> tensor<256xf32>
  return %e : tensor<256xf32>
}

// -----

// Updated params and optimizer state (result roles "param"/"opt_state") live
// in the arena until the end of the program: the executor copies them into
// the arguments they replace right after it. %x (defined after %g's last
// use) reuses %g's space but not %n's. Other returned values (the loss) are
// on the heap. The tokens argument (batch) is held from the step's start to
// its last use: 1024 bytes at the heap's peak, at instruction 0.

// CHECK-LABEL: func.func @carried
// CHECK-SAME: tsrt.arena_bytes = 2048 : i64
// CHECK-SAME: tsrt.peak_bytes = {arena = 2048 : i64, batch = 1024 : i64, constants = 0 : i64, optimizer_state = 0 : i64, other_arguments = 0 : i64, parameters = 1024 : i64, peak = 4096 : i64, updated_state = 0 : i64, workspace = 0 : i64}
func.func @carried(%w: tensor<256xf32> {tsrt.role = "param"}, %t: tensor<256xf32> {tsrt.role = "tokens"}) -> (tensor<f32> {tsrt.role = "loss"}, tensor<256xf32> {tsrt.role = "param"}) {
  // CHECK: tsrt.kernel "mul"{{.*}}tsrt.offsets = array<i64: 0>
  %g = tsrt.kernel "mul"(%w, %t) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  // CHECK: tsrt.kernel "reduce_sum"{{.*}}tsrt.offsets = array<i64: -1>
  %l = tsrt.kernel "reduce_sum"(%g) {attrs = {axes = [0]}} : (tensor<256xf32>) -> tensor<f32>
  // CHECK: tsrt.kernel "sub"{{.*}}tsrt.offsets = array<i64: 1024>
  %n = tsrt.kernel "sub"(%w, %g) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  // CHECK: tsrt.kernel "exp"{{.*}}tsrt.offsets = array<i64: 0>
  %x = tsrt.kernel "exp"(%w) {attrs = {}} : (tensor<256xf32>) -> tensor<256xf32>
  return %l, %n : tensor<f32>, tensor<256xf32>
}

// -----

// A pipeline plan (a module with tsrt.pipeline_schedule) keeps its values on
// the heap: no offsets and no arena, but each function's heap profile.
// @forward_0: %a (returned, 1024 B) and %b (sent, held by the pending send
// to the end of the run: 1024 B, `sent`) -> peak 2048. @backward_0: the
// receive buffer is allocated before the first instruction and released
// after the mul; peak 2048 = the buffer + %d, then %d + %e. @backward_1
// sends an argument (no bytes of its own); @apply_1 returns an accumulator
// and an argument, which it did not allocate (result_bytes 0).

// CHECK-LABEL: func.func @forward_0
// CHECK-SAME: tsrt.heap_profile = {constants = 0 : i64, peak = 2048 : i64, sent = 1024 : i64}, tsrt.result_bytes = array<i64: 1024>
// CHECK-NOT: tsrt.offsets
// CHECK-LABEL: func.func @backward_0
// CHECK-SAME: tsrt.heap_profile = {constants = 1024 : i64, peak = 2048 : i64, sent = 0 : i64}, tsrt.result_bytes = array<i64: 1024>
// CHECK-LABEL: func.func @apply_0
// CHECK-SAME: tsrt.heap_profile = {constants = 0 : i64, peak = 1024 : i64, sent = 0 : i64}, tsrt.result_bytes = array<i64: 1024>
// CHECK-LABEL: func.func @forward_1
// CHECK-SAME: tsrt.heap_profile = {constants = 0 : i64, peak = 2048 : i64, sent = 0 : i64}, tsrt.result_bytes = array<i64: 64>
// CHECK-LABEL: func.func @backward_1
// CHECK-SAME: tsrt.heap_profile = {constants = 0 : i64, peak = 0 : i64, sent = 0 : i64}, tsrt.result_bytes = array<i64>
// CHECK-LABEL: func.func @apply_1
// CHECK-SAME: tsrt.heap_profile = {constants = 0 : i64, peak = 0 : i64, sent = 0 : i64}, tsrt.result_bytes = array<i64: 0, 0>
// CHECK-NOT: tsrt.arena_bytes
  func.func @forward_0(%x: tensor<256xf32> {tsrt.arg = 0 : i64}) -> (tensor<256xf32> {tsrt.saved = 0 : i64}) {
    %a = tsrt.kernel "exp"(%x) {attrs = {}} : (tensor<256xf32>) -> tensor<256xf32>
    %b = tsrt.kernel "exp"(%a) {attrs = {}} : (tensor<256xf32>) -> tensor<256xf32>
    tsrt.send %b to chunk 1 channel 0 : tensor<256xf32>
    return %a : tensor<256xf32>
  }
  func.func @backward_0(%a: tensor<256xf32> {tsrt.saved = 0 : i64}) -> (tensor<256xf32> {tsrt.acc = 0 : i64}) {
    %g = tsrt.recv from chunk 1 channel 1 : tensor<256xf32>
    %k = tsrt.constant dense<1.0> : tensor<256xf32>
    %d = tsrt.kernel "mul"(%g, %a) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
    %e = tsrt.kernel "add"(%d, %k) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
    return %e : tensor<256xf32>
  }
  func.func @apply_0(%x: tensor<256xf32> {tsrt.arg = 0 : i64}, %g: tensor<256xf32> {tsrt.acc = 0 : i64}) -> (tensor<256xf32> {tsrt.result = 1 : i64}) {
    %n = tsrt.kernel "sub"(%x, %g) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
    return %n : tensor<256xf32>
  }
  func.func @forward_1(%y: tensor<256xf32> {tsrt.arg = 1 : i64}) -> (tensor<f32> {tsrt.acc = 1 : i64}) {
    %r = tsrt.recv from chunk 0 channel 0 : tensor<256xf32>
    %m = tsrt.kernel "mul"(%r, %y) {attrs = {}} : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
    %l = tsrt.kernel "reduce_sum"(%m) {attrs = {axes = [0]}} : (tensor<256xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
  func.func @backward_1(%y: tensor<256xf32> {tsrt.arg = 1 : i64}) -> () {
    tsrt.send %y to chunk 0 channel 1 : tensor<256xf32>
    return
  }
  func.func @apply_1(%y: tensor<256xf32> {tsrt.arg = 1 : i64}, %l: tensor<f32> {tsrt.acc = 1 : i64}) -> (tensor<f32> {tsrt.result = 0 : i64}, tensor<256xf32> {tsrt.result = 2 : i64}) {
    return %l, %y : tensor<f32>, tensor<256xf32>
  }
  tsrt.pipeline_schedule {kind = "gpipe", stages = 2 : i64, virtual_stages = 1 : i64, micro_batches = 2 : i64, forward = [@forward_0, @forward_1], backward = [@backward_0, @backward_1], apply = [@apply_0, @apply_1], actions = ["F0.0 F0.1 B0.0 B0.1", "F1.0 F1.1 B1.0 B1.1"]}

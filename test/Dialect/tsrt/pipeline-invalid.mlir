// RUN: tessera-opt %s -split-input-file -verify-diagnostics

// Hand-broken pipeline schedules are rejected by tsrt.pipeline_schedule's
// verifier, naming the stage, chunk and micro-batch.

// A missing recv: chunk 1's forward never receives channel 0.
func.func @forward_0(%x: tensor<4xf32>) {
  // expected-error @below {{channel 0 (chunk 0 to chunk 1) has no matching recv}}
  tsrt.send %x to chunk 1 channel 0 : tensor<4xf32>
  return
}
func.func @forward_1() { return }
func.func @backward_0() { return }
func.func @backward_1() { return }
func.func @apply_0() { return }
func.func @apply_1() { return }
tsrt.pipeline_schedule {kind = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64, micro_batches = 2 : i64, forward = [@forward_0, @forward_1], backward = [@backward_0, @backward_1], apply = [@apply_0, @apply_1], actions = ["F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 F1.1 B1.1"]}

// -----

// A crossed order: stage 1 runs B1.1 before F1.1; B1.1 needs F1.1 first.
func.func @forward_0(%x: tensor<4xf32>) {
  tsrt.send %x to chunk 1 channel 0 : tensor<4xf32>
  return
}
func.func @forward_1() {
  %x = tsrt.recv from chunk 0 channel 0 : tensor<4xf32>
  return
}
func.func @backward_0() {
  %g = tsrt.recv from chunk 1 channel 1 : tensor<4xf32>
  return
}
func.func @backward_1(%g: tensor<4xf32>) {
  tsrt.send %g to chunk 0 channel 1 : tensor<4xf32>
  return
}
func.func @apply_0() { return }
func.func @apply_1() { return }
// expected-error @below {{stage 1 runs B1.1 (chunk 1, micro-batch 1) before F1.1}}
tsrt.pipeline_schedule {kind = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64, micro_batches = 2 : i64, forward = [@forward_0, @forward_1], backward = [@backward_0, @backward_1], apply = [@apply_0, @apply_1], actions = ["F0.0 F0.1 B0.0 B0.1", "F1.0 B1.0 B1.1 F1.1"]}

// -----

// A deadlock: stage 0 waits for micro-batch 0's gradient before sending
// micro-batch 1's activation, which stage 1 needs before it sends that
// gradient.
func.func @forward_0(%x: tensor<4xf32>) {
  tsrt.send %x to chunk 1 channel 0 : tensor<4xf32>
  return
}
func.func @forward_1() {
  %x = tsrt.recv from chunk 0 channel 0 : tensor<4xf32>
  return
}
func.func @backward_0() {
  %g = tsrt.recv from chunk 1 channel 1 : tensor<4xf32>
  return
}
func.func @backward_1(%g: tensor<4xf32>) {
  tsrt.send %g to chunk 0 channel 1 : tensor<4xf32>
  return
}
func.func @apply_0() { return }
func.func @apply_1() { return }
// expected-error @below {{stage 0 (chunk 0) deadlocks at B0.0 (chunk 0, micro-batch 0): it waits for channel 1 from chunk 1, micro-batch 0, which stage 1 sends only later, at B1.0}}
tsrt.pipeline_schedule {kind = "gpipe", stages = 2 : i64, virtual_stages = 1 : i64, micro_batches = 2 : i64, forward = [@forward_0, @forward_1], backward = [@backward_0, @backward_1], apply = [@apply_0, @apply_1], actions = ["F0.0 B0.0 F0.1 B0.1", "F1.0 F1.1 B1.0 B1.1"]}

// -----

// More activation sets in flight than 1F1B allows (stage 0 of 2: 2).
func.func @f() { return }
// expected-error @below {{stage 0 holds 3 activation sets after F0.2 (chunk 0, micro-batch 2), but 1f1b allows at most 2 on that stage}}
tsrt.pipeline_schedule {kind = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64, micro_batches = 3 : i64, forward = [@f, @f], backward = [@f, @f], apply = [@f, @f], actions = ["F0.0 F0.1 F0.2 B0.0 B0.1 B0.2", "F1.0 B1.0 F1.1 B1.1 F1.2 B1.2"]}

// -----

// Received with a different type than sent.
func.func @forward_0(%x: tensor<4xf32>) {
  tsrt.send %x to chunk 1 channel 0 : tensor<4xf32>
  return
}
func.func @forward_1() {
  // expected-error @below {{channel 0 receives 'tensor<8xf32>' but 'tensor<4xf32>' is sent}}
  %x = tsrt.recv from chunk 0 channel 0 : tensor<8xf32>
  return
}
func.func @f() { return }
tsrt.pipeline_schedule {kind = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64, micro_batches = 1 : i64, forward = [@forward_0, @forward_1], backward = [@f, @f], apply = [@f, @f], actions = ["F0.0 B0.0", "F1.0 B1.0"]}

// -----

func.func @f() { return }
// expected-error @below {{unknown schedule kind 'zigzag'}}
tsrt.pipeline_schedule {kind = "zigzag", stages = 1 : i64, virtual_stages = 1 : i64, micro_batches = 1 : i64, forward = [@f], backward = [@f], apply = [@f], actions = ["F0.0 B0.0"]}

// -----

func.func @f() { return }
// expected-error @below {{stage 0: bad action 'Q0.0'}}
tsrt.pipeline_schedule {kind = "1f1b", stages = 1 : i64, virtual_stages = 1 : i64, micro_batches = 1 : i64, forward = [@f], backward = [@f], apply = [@f], actions = ["F0.0 Q0.0"]}

// Errors of tsr-sharding-annotate's sequence-parallel modes that the
// exported models cannot reach (tessera-partition-sp.test covers the rest).
// RUN: tessera-opt --tsr-sharding-annotate="tp=2 sp=megatron" %S/annotate-sp-errors.mlir -split-input-file -verify-diagnostics
// RUN: not tessera-opt --tsr-sharding-annotate="tp=2 sp=megatron" %S/Inputs/sp-odd-seq.mlir 2>&1 | FileCheck %s --check-prefix=SEQ
// RUN: not tessera-opt --tsr-sharding-annotate="sp=ulysses sp-size=2" %S/Inputs/sp-bad-heads.mlir 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: not tessera-opt --tsr-sharding-annotate="sp=sideways" %S/Inputs/sp-odd-seq.mlir 2>&1 | FileCheck %s --check-prefix=KIND
// SEQ: sp=megatron: tp=2 does not divide the sequence length 3
// HEADS: sp=ulysses: cannot find the heads of 'tensor<5x4x2xf32>'
// KIND: sp must be none, megatron, ulysses or ring, got 'sideways'

// No [batch, sequence] tokens argument.
// expected-error @+1 {{sp=megatron needs a [batch, sequence] tokens argument}}
func.func @train_step(
    %x: tensor<2x4x8xf32> {tsr.role = "frozen", tsr.name = "x"},
    %labels: tensor<2x4xi64> {tsr.role = "labels", tsr.name = "labels"}) -> tensor<2x4x8xf32> {
  %y = tsr.relu %x : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

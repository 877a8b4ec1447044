// The real GPT example's train step (importer + autodiff output), dp=2 tp=2:
// per layer two tp all-reduces forward and two backward, plus (vocab
// parallelism, on by default) one after the embedding lookup and one for the
// LM head's input gradient; one dp all-reduce per parameter (30) plus the
// loss, no all-gather/all-slice (the logits are never gathered), and every
// rank reproduces its piece of the serial step, with vocab parallelism on
// and off.
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/gpt_train_step.mlir | FileCheck %s --check-prefix=TP --implicit-check-not=shard.all_gather --implicit-check-not=shard.all_slice --implicit-check-not=tsr.shardings
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/gpt_train_step.mlir | FileCheck %s --check-prefix=DP
// RUN: tessera-opt %S/Inputs/gpt_train_step.mlir --mlir-print-op-generic > %t.serial.mlir
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/gpt_train_step.mlir --mlir-print-op-generic > %t.2x2.mlir
// RUN: %python %S/Inputs/simulate.py %t.serial.mlir %t.2x2.mlir | FileCheck %s --check-prefix=SIM
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=1 tp=4},func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/gpt_train_step.mlir --mlir-print-op-generic > %t.1x4.mlir
// RUN: %python %S/Inputs/simulate.py %t.serial.mlir %t.1x4.mlir | FileCheck %s --check-prefix=SIM
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2 vocab-parallel=false},func.func(tsr-sharding-propagate,tsr-sharding-partition))' %S/Inputs/gpt_train_step.mlir --mlir-print-op-generic > %t.2x2.novocab.mlir
// RUN: %python %S/Inputs/simulate.py %t.serial.mlir %t.2x2.novocab.mlir | FileCheck %s --check-prefix=SIM

// TP-LABEL: func.func @train_step
// TP-SAME: tsr.name = "encoder.layers.0.self_attn.in_proj_weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [{3, 64 : [1]}, []]>
// TP-COUNT-10: shard.all_reduce {{.*}} grid_axes = [1]
// TP-NOT: grid_axes = [1]
// DP-COUNT-31: shard.all_reduce {{.*}} grid_axes = [0]
// DP-NOT: grid_axes = [0]
// SIM: OK: 31 results on 4 ranks match the serial run

// tsr.trace survives the sharding passes; tsr-sharding-partition records each
// traced op's local layout (partial axes included), tsr-zero-sharding adds the
// dp axis to a sharded update's, and tsr-lower-to-runtime keeps the id as
// tsrt.trace on the kernel. Without tsr-trace-values nothing is added.
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-trace-values,tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=1}))' %S/../sharding/Inputs/mlp.mlir | FileCheck %s
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-trace-values,tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=1}),tsr-lower-to-runtime)' %S/../sharding/Inputs/mlp.mlir | FileCheck %s --check-prefix=LOWERED --implicit-check-not=tsr.trace_shardings
// RUN: tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate,tsr-sharding-partition,tsr-zero-sharding{stage=1}),tsr-lower-to-runtime)' %S/../sharding/Inputs/mlp.mlir | FileCheck %s --check-prefix=PLAIN --implicit-check-not=trace

// The vocab-parallel lookup: batch over dp, a partial sum over tp.
// CHECK: tsr.gather {{.*}}tsr.trace = 0 : i64, tsr.trace_shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], []] partial = [1]>]
// The row-parallel matmul (fc2) is partial over tp.
// CHECK: tsr.matmul {{.*}}tsr.trace = 5 : i64, tsr.trace_shardings = [#tsr.sharding<@grid, {{\[\[}}0], [], []] partial = [1]>]
// A weight gradient: partial over dp before its all-reduce.
// CHECK: tsr.matmul {{.*}}transpose_lhs = true, tsr.trace = 16 : i64, tsr.trace_shardings = [#tsr.sharding<@grid, {{\[\[}}1], []] partial = [0]>]
// ZeRO-1: the column-split fc1 weight's update works on its dp shard.
// CHECK: tsr.sgd_update {{.*}}tsr.trace = 30 : i64, tsr.trace_shardings = [#tsr.sharding<@grid, {{\[\[}}1, 0], []]>]
// CHECK-NEXT: shard.all_gather

// LOWERED: tsrt.kernel "gather"({{.*}}) {attrs = {grid_axes = array<i16: 1>}, tsrt.trace = 0 : i64}
// LOWERED: tsrt.kernel "sgd_update"({{.*}}tsrt.trace = 30 : i64}

// PLAIN: tsrt.kernel "gather"

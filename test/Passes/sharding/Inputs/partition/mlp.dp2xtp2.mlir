// Inputs/mlp.mlir annotated for tsr-sharding-partition on dp=2 tp=2: every
// argument and result carries tsr.sharding and every op tsr.shardings. Made by
//   tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=2 tp=2},func.func(tsr-sharding-propagate))' Inputs/mlp.mlir
// (regenerate it if the annotate or propagate rules change on purpose).
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 2x2)
  func.func @train_step(%arg0: tensor<64x16xf32> {tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[1], []]>, tsr.vocab_parallel}, %arg1: tensor<32x16xf32> {tsr.name = "fc1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[1], []]>}, %arg2: tensor<32xf32> {tsr.name = "fc1.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[1]]>}, %arg3: tensor<16x32xf32> {tsr.name = "fc2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], [1]]>}, %arg4: tensor<16xf32> {tsr.name = "fc2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, %arg5: tensor<64x16xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[1], []]>, tsr.vocab_parallel}, %arg6: tensor<4x8xi64> {tsr.name = "tokens", tsr.role = "tokens", tsr.sharding = #tsr.sharding<@grid, [[0], []]>}, %arg7: tensor<4x8xi64> {tsr.name = "labels", tsr.role = "labels", tsr.sharding = #tsr.sharding<@grid, [[0], []]>}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper", tsr.sharding = #tsr.sharding<@grid, []>}) -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss", tsr.sharding = #tsr.sharding<@grid, []>}, tensor<64x16xf32> {tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[1], []]>}, tensor<32x16xf32> {tsr.name = "fc1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[1], []]>}, tensor<32xf32> {tsr.name = "fc1.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[1]]>}, tensor<16x32xf32> {tsr.name = "fc2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], [1]]>}, tensor<16xf32> {tsr.name = "fc2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, tensor<64x16xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[1], []]>}) {
    %0 = tsr.gather %arg0, %arg6 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []] partial = [1]>]} : tensor<64x16xf32>, tensor<4x8xi64> -> tensor<4x8x16xf32>
    %1 = tsr.matmul %0, %arg1 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [], [1]]>]} : tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x32xf32>
    %2 = tsr.broadcast %arg2 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], [1]]>]} : tensor<32xf32> -> tensor<4x8x32xf32>
    %3 = tsr.add %1, %2 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], [1]]>]} : tensor<4x8x32xf32>
    %4 = tsr.gelu %3 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], [1]]>]} : tensor<4x8x32xf32>
    %5 = tsr.matmul %4, %arg3 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []] partial = [1]>]} : tensor<4x8x32xf32>, tensor<16x32xf32> -> tensor<4x8x16xf32>
    %6 = tsr.broadcast %arg4 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16xf32> -> tensor<4x8x16xf32>
    %7 = tsr.add %5, %6 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x8x16xf32>
    %8 = tsr.add %7, %0 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x8x16xf32>
    %9 = tsr.reshape %8 {tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<4x8x16xf32> -> tensor<32x16xf32>
    %10 = tsr.matmul %9, %arg5 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [1]]>]} : tensor<32x16xf32>, tensor<64x16xf32> -> tensor<32x64xf32>
    %11 = tsr.reshape %arg7 {tsr.shardings = [#tsr.sharding<@grid, [[0]]>]} : tensor<4x8xi64> -> tensor<32xi64>
    %12 = tsr.cross_entropy %10, %11 {tsr.shardings = [#tsr.sharding<@grid, [] partial = [0]>]} : tensor<32x64xf32>, tensor<32xi64> -> tensor<f32>
    %13 = tsr.constant {tsr.shardings = [#tsr.sharding<@grid, []>]} dense<3.125000e-02> : tensor<f32>
    %14 = tsr.mul %12, %13 {tsr.shardings = [#tsr.sharding<@grid, [] partial = [0]>]} : tensor<f32>
    %15 = tsr.cross_entropy_grad %10, %11, %13 {tsr.shardings = [#tsr.sharding<@grid, [[0], [1]]>]} : tensor<32x64xf32>, tensor<32xi64>, tensor<f32>
    %16 = tsr.matmul %15, %arg5 {tsr.shardings = [#tsr.sharding<@grid, [[0], []] partial = [1]>]} : tensor<32x64xf32>, tensor<64x16xf32> -> tensor<32x16xf32>
    %17 = tsr.matmul %15, %9 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[1], []] partial = [0]>]} : tensor<32x64xf32>, tensor<32x16xf32> -> tensor<64x16xf32>
    %18 = tsr.reshape %16 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []] partial = [1]>]} : tensor<32x16xf32> -> tensor<4x8x16xf32>
    %19 = tsr.reduce_sum %18 {axes = array<i64: 0, 1>, tsr.shardings = [#tsr.sharding<@grid, [[]] partial = [0, 1]>]} : tensor<4x8x16xf32> -> tensor<16xf32>
    %20 = tsr.matmul %18, %arg3 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], [1]]>]} : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
    %21 = tsr.reshape %4 {tsr.shardings = [#tsr.sharding<@grid, [[0], [1]]>]} : tensor<4x8x32xf32> -> tensor<32x32xf32>
    %22 = tsr.matmul %16, %21 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[], [1]] partial = [0]>]} : tensor<32x16xf32>, tensor<32x32xf32> -> tensor<16x32xf32>
    %23 = tsr.gelu_grad %3, %20 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], [1]]>]} : tensor<4x8x32xf32>
    %24 = tsr.reduce_sum %23 {axes = array<i64: 0, 1>, tsr.shardings = [#tsr.sharding<@grid, [[1]] partial = [0]>]} : tensor<4x8x32xf32> -> tensor<32xf32>
    %25 = tsr.matmul %23, %arg1 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []] partial = [1]>]} : tensor<4x8x32xf32>, tensor<32x16xf32> -> tensor<4x8x16xf32>
    %26 = tsr.reshape %23 {tsr.shardings = [#tsr.sharding<@grid, [[0], [1]]>]} : tensor<4x8x32xf32> -> tensor<32x32xf32>
    %27 = tsr.reshape %0 {tsr.shardings = [#tsr.sharding<@grid, [[0], []] partial = [1]>]} : tensor<4x8x16xf32> -> tensor<32x16xf32>
    %28 = tsr.matmul %26, %27 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[1], []] partial = [0]>]} : tensor<32x32xf32>, tensor<32x16xf32> -> tensor<32x16xf32>
    %29 = tsr.add %25, %18 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []] partial = [1]>]} : tensor<4x8x16xf32>
    %30 = tsr.gather_grad %arg6, %29 {tsr.shardings = [#tsr.sharding<@grid, [[1], []] partial = [0]>]} : tensor<4x8xi64>, tensor<4x8x16xf32> -> tensor<64x16xf32>
    %31 = tsr.sgd_update %arg0, %30, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[1], []]>], weight_decay = 0.000000e+00 : f32} : tensor<64x16xf32>
    %32 = tsr.sgd_update %arg1, %28, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[1], []]>], weight_decay = 0.000000e+00 : f32} : tensor<32x16xf32>
    %33 = tsr.sgd_update %arg2, %24, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[1]]>], weight_decay = 0.000000e+00 : f32} : tensor<32xf32>
    %34 = tsr.sgd_update %arg3, %22, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[], [1]]>], weight_decay = 0.000000e+00 : f32} : tensor<16x32xf32>
    %35 = tsr.sgd_update %arg4, %19, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[]]>], weight_decay = 0.000000e+00 : f32} : tensor<16xf32>
    %36 = tsr.sgd_update %arg5, %17, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[1], []]>], weight_decay = 0.000000e+00 : f32} : tensor<64x16xf32>
    return %14, %31, %32, %33, %34, %35, %36 : tensor<f32>, tensor<64x16xf32>, tensor<32x16xf32>, tensor<32xf32>, tensor<16x32xf32>, tensor<16xf32>, tensor<64x16xf32>
  }
}


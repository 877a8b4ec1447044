// Inputs/mha_block.mlir annotated for tsr-sharding-partition on dp=4 tp=1: every
// argument and result carries tsr.sharding and every op tsr.shardings. Made by
//   tessera-opt --pass-pipeline='builtin.module(tsr-sharding-annotate{dp=4 tp=1},func.func(tsr-sharding-propagate))' Inputs/mha_block.mlir
// (regenerate it if the annotate or propagate rules change on purpose).
module attributes {tsr.grid_axes = ["dp", "tp"]} {
  shard.grid @grid(shape = 4x1)
  func.func @train_step(%arg0: tensor<32x16xf32> {tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, %arg1: tensor<4x16xf32> {tsr.name = "pos_emb", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, %arg2: tensor<16xf32> {tsr.name = "norm1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, %arg3: tensor<16xf32> {tsr.name = "norm1.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, %arg4: tensor<48x16xf32> {tsr.name = "self_attn.in_proj_weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, %arg5: tensor<48xf32> {tsr.name = "self_attn.in_proj_bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, %arg6: tensor<16x16xf32> {tsr.name = "self_attn.out_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, %arg7: tensor<16xf32> {tsr.name = "self_attn.out_proj.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, %arg8: tensor<16xf32> {tsr.name = "norm2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, %arg9: tensor<16xf32> {tsr.name = "norm2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, %arg10: tensor<32x16xf32> {tsr.name = "linear1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, %arg11: tensor<32xf32> {tsr.name = "linear1.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, %arg12: tensor<16x32xf32> {tsr.name = "linear2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, %arg13: tensor<16xf32> {tsr.name = "linear2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, %arg14: tensor<32x16xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, %arg15: tensor<4x4xi64> {tsr.name = "tokens", tsr.role = "tokens", tsr.sharding = #tsr.sharding<@grid, [[0], []]>}, %arg16: tensor<4x4xi64> {tsr.name = "labels", tsr.role = "labels", tsr.sharding = #tsr.sharding<@grid, [[0], []]>}, %hlr: tensor<f32> {tsr.name = "lr", tsr.role = "hyper", tsr.sharding = #tsr.sharding<@grid, []>}) -> (tensor<f32> {tsr.name = "loss", tsr.role = "loss", tsr.sharding = #tsr.sharding<@grid, []>}, tensor<48x16xf32> {tsr.name = "self_attn.in_proj_weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, tensor<48xf32> {tsr.name = "self_attn.in_proj_bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, tensor<16x16xf32> {tsr.name = "self_attn.out_proj.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, tensor<16xf32> {tsr.name = "self_attn.out_proj.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, tensor<32x16xf32> {tsr.name = "linear1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, tensor<16x32xf32> {tsr.name = "linear2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, tensor<32x16xf32> {tsr.name = "tok_emb.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, tensor<4x16xf32> {tsr.name = "pos_emb", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}, tensor<16xf32> {tsr.name = "norm1.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, tensor<16xf32> {tsr.name = "norm1.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, tensor<16xf32> {tsr.name = "norm2.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, tensor<16xf32> {tsr.name = "norm2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, tensor<32xf32> {tsr.name = "linear1.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, tensor<16xf32> {tsr.name = "linear2.bias", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[]]>}, tensor<32x16xf32> {tsr.name = "head.weight", tsr.role = "param", tsr.sharding = #tsr.sharding<@grid, [[], []]>}) {
    %0 = tsr.gather %arg0, %arg15 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<32x16xf32>, tensor<4x4xi64> -> tensor<4x4x16xf32>
    %1 = tsr.broadcast %arg1 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x16xf32> -> tensor<4x4x16xf32>
    %2 = tsr.add %0, %1 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>
    %3 = tsr.layer_norm %2, %arg2, %arg3 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>, tensor<16xf32>
    %4 = tsr.transpose %3 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x16xf32> -> tensor<4x4x16xf32>
    %5 = tsr.transpose %arg4 {permutation = array<i64: 1, 0>, tsr.shardings = [#tsr.sharding<@grid, [[], []]>]} : tensor<48x16xf32> -> tensor<16x48xf32>
    %6 = tsr.matmul %4, %5 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x16xf32>, tensor<16x48xf32> -> tensor<4x4x48xf32>
    %7 = tsr.broadcast %arg5 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<48xf32> -> tensor<4x4x48xf32>
    %8 = tsr.add %6, %7 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x48xf32>
    %9 = tsr.slice %8 {limit_indices = array<i64: 4, 4, 16>, start_indices = array<i64: 0, 0, 0>, strides = array<i64: 1, 1, 1>, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x48xf32> -> tensor<4x4x16xf32>
    %10 = tsr.slice %8 {limit_indices = array<i64: 4, 4, 32>, start_indices = array<i64: 0, 0, 16>, strides = array<i64: 1, 1, 1>, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x48xf32> -> tensor<4x4x16xf32>
    %11 = tsr.slice %8 {limit_indices = array<i64: 4, 4, 48>, start_indices = array<i64: 0, 0, 32>, strides = array<i64: 1, 1, 1>, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x48xf32> -> tensor<4x4x16xf32>
    %12 = tsr.reshape %9 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x16xf32> -> tensor<4x16x4xf32>
    %13 = tsr.reshape %10 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x16xf32> -> tensor<4x16x4xf32>
    %14 = tsr.reshape %11 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x16xf32> -> tensor<4x16x4xf32>
    %15 = tsr.transpose %12 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x16x4xf32> -> tensor<16x4x4xf32>
    %16 = tsr.transpose %13 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x16x4xf32> -> tensor<16x4x4xf32>
    %17 = tsr.transpose %14 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x16x4xf32> -> tensor<16x4x4xf32>
    %18 = tsr.constant {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} dense<2.000000e+00> : tensor<16x4x4xf32>
    %19 = tsr.div %15, %18 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>
    %20 = tsr.transpose %16 {permutation = array<i64: 0, 2, 1>, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32> -> tensor<16x4x4xf32>
    %21 = tsr.matmul %19, %20 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
    %22 = tsr.constant {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} dense<1.000000e+00> : tensor<16x4x4xf32>
    %23 = tsr.mul %21, %22 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>
    %24 = tsr.constant {tsr.shardings = [#tsr.sharding<@grid, [[], []]>]} dense<[[0.000000e+00, 0xFF800000, 0xFF800000, 0xFF800000], [0.000000e+00, 0.000000e+00, 0xFF800000, 0xFF800000], [0.000000e+00, 0.000000e+00, 0.000000e+00, 0xFF800000], [0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<4x4xf32>
    %25 = tsr.broadcast %24 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4xf32> -> tensor<16x4x4xf32>
    %26 = tsr.add %23, %25 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>
    %27 = tsr.softmax %26 {axis = 2 : i64, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>
    %28 = tsr.matmul %27, %17 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
    %29 = tsr.transpose %28 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<16x4x4xf32> -> tensor<4x16x4xf32>
    %30 = tsr.reshape %29 {tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, []]>]} : tensor<4x16x4xf32> -> tensor<16x16xf32>
    %31 = tsr.matmul %30, %arg6 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, []]>]} : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
    %32 = tsr.broadcast %arg7 {tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, []]>]} : tensor<16xf32> -> tensor<16x16xf32>
    %33 = tsr.add %31, %32 {tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, []]>]} : tensor<16x16xf32>
    %34 = tsr.reshape %33 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<16x16xf32> -> tensor<4x4x16xf32>
    %35 = tsr.transpose %34 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32> -> tensor<4x4x16xf32>
    %36 = tsr.add %2, %35 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>
    %37 = tsr.layer_norm %36, %arg8, %arg9 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>, tensor<16xf32>
    %38 = tsr.matmul %37, %arg10 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>, tensor<32x16xf32> -> tensor<4x4x32xf32>
    %39 = tsr.broadcast %arg11 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<32xf32> -> tensor<4x4x32xf32>
    %40 = tsr.add %38, %39 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x32xf32>
    %41 = tsr.gelu %40 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x32xf32>
    %42 = tsr.matmul %41, %arg12 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x32xf32>, tensor<16x32xf32> -> tensor<4x4x16xf32>
    %43 = tsr.broadcast %arg13 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16xf32> -> tensor<4x4x16xf32>
    %44 = tsr.add %42, %43 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>
    %45 = tsr.add %36, %44 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>
    %46 = tsr.reshape %45 {tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<4x4x16xf32> -> tensor<16x16xf32>
    %47 = tsr.matmul %46, %arg14 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<16x16xf32>, tensor<32x16xf32> -> tensor<16x32xf32>
    %48 = tsr.reshape %arg16 {tsr.shardings = [#tsr.sharding<@grid, [[0]]>]} : tensor<4x4xi64> -> tensor<16xi64>
    %49 = tsr.cross_entropy %47, %48 {tsr.shardings = [#tsr.sharding<@grid, [] partial = [0]>]} : tensor<16x32xf32>, tensor<16xi64> -> tensor<f32>
    %50 = tsr.constant {tsr.shardings = [#tsr.sharding<@grid, []>]} dense<6.250000e-02> : tensor<f32>
    %51 = tsr.mul %49, %50 {tsr.shardings = [#tsr.sharding<@grid, [] partial = [0]>]} : tensor<f32>
    %52 = tsr.cross_entropy_grad %47, %48, %50 {tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<16x32xf32>, tensor<16xi64>, tensor<f32>
    %53 = tsr.matmul %52, %arg14 {tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<16x32xf32>, tensor<32x16xf32> -> tensor<16x16xf32>
    %54 = tsr.matmul %52, %46 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[], []] partial = [0]>]} : tensor<16x32xf32>, tensor<16x16xf32> -> tensor<32x16xf32>
    %55 = tsr.reshape %53 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x16xf32> -> tensor<4x4x16xf32>
    %56 = tsr.reduce_sum %55 {axes = array<i64: 0, 1>, tsr.shardings = [#tsr.sharding<@grid, [[]] partial = [0]>]} : tensor<4x4x16xf32> -> tensor<16xf32>
    %57 = tsr.matmul %55, %arg12 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>, tensor<16x32xf32> -> tensor<4x4x32xf32>
    %58 = tsr.reshape %41 {tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<4x4x32xf32> -> tensor<16x32xf32>
    %59 = tsr.matmul %53, %58 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[], []] partial = [0]>]} : tensor<16x16xf32>, tensor<16x32xf32> -> tensor<16x32xf32>
    %60 = tsr.gelu_grad %40, %57 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x32xf32>
    %61 = tsr.reduce_sum %60 {axes = array<i64: 0, 1>, tsr.shardings = [#tsr.sharding<@grid, [[]] partial = [0]>]} : tensor<4x4x32xf32> -> tensor<32xf32>
    %62 = tsr.matmul %60, %arg10 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x32xf32>, tensor<32x16xf32> -> tensor<4x4x16xf32>
    %63 = tsr.reshape %60 {tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<4x4x32xf32> -> tensor<16x32xf32>
    %64 = tsr.reshape %37 {tsr.shardings = [#tsr.sharding<@grid, [[0], []]>]} : tensor<4x4x16xf32> -> tensor<16x16xf32>
    %65 = tsr.matmul %63, %64 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[], []] partial = [0]>]} : tensor<16x32xf32>, tensor<16x16xf32> -> tensor<32x16xf32>
    %input_grad, %scale_grad, %bias_grad = tsr.layer_norm_grad %36, %arg8, %62 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>, #tsr.sharding<@grid, [[]] partial = [0]>, #tsr.sharding<@grid, [[]] partial = [0]>]} : tensor<4x4x16xf32>, tensor<16xf32>
    %66 = tsr.add %55, %input_grad {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>
    %67 = tsr.transpose %66 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x16xf32> -> tensor<4x4x16xf32>
    %68 = tsr.reshape %67 {tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, []]>]} : tensor<4x4x16xf32> -> tensor<16x16xf32>
    %69 = tsr.reduce_sum %68 {axes = array<i64: 0>, tsr.shardings = [#tsr.sharding<@grid, [[]] partial = [0]>]} : tensor<16x16xf32> -> tensor<16xf32>
    %70 = tsr.matmul %68, %arg6 {tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, []]>]} : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
    %71 = tsr.matmul %68, %30 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[], []] partial = [0]>]} : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
    %72 = tsr.reshape %70 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<16x16xf32> -> tensor<4x16x4xf32>
    %73 = tsr.transpose %72 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x16x4xf32> -> tensor<16x4x4xf32>
    %74 = tsr.matmul %73, %17 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
    %75 = tsr.matmul %27, %73 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
    %76 = tsr.softmax_grad %27, %74 {axis = 2 : i64, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>
    %77 = tsr.mul %76, %22 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>
    %78 = tsr.matmul %77, %20 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
    %79 = tsr.matmul %19, %77 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>, tensor<16x4x4xf32> -> tensor<16x4x4xf32>
    %80 = tsr.transpose %79 {permutation = array<i64: 0, 2, 1>, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32> -> tensor<16x4x4xf32>
    %81 = tsr.div %78, %18 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<16x4x4xf32>
    %82 = tsr.transpose %81 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<16x4x4xf32> -> tensor<4x16x4xf32>
    %83 = tsr.transpose %80 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<16x4x4xf32> -> tensor<4x16x4xf32>
    %84 = tsr.transpose %75 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<16x4x4xf32> -> tensor<4x16x4xf32>
    %85 = tsr.reshape %82 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x16x4xf32> -> tensor<4x4x16xf32>
    %86 = tsr.reshape %83 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x16x4xf32> -> tensor<4x4x16xf32>
    %87 = tsr.reshape %84 {tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x16x4xf32> -> tensor<4x4x16xf32>
    %88 = tsr.concat %85, %86, %87 {axis = 2 : i64, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : (tensor<4x4x16xf32>, tensor<4x4x16xf32>, tensor<4x4x16xf32>) -> tensor<4x4x48xf32>
    %89 = tsr.reduce_sum %88 {axes = array<i64: 0, 1>, tsr.shardings = [#tsr.sharding<@grid, [[]] partial = [0]>]} : tensor<4x4x48xf32> -> tensor<48xf32>
    %90 = tsr.matmul %88, %5 {transpose_rhs = true, tsr.shardings = [#tsr.sharding<@grid, [[], [0], []]>]} : tensor<4x4x48xf32>, tensor<16x48xf32> -> tensor<4x4x16xf32>
    %91 = tsr.reshape %4 {tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, []]>]} : tensor<4x4x16xf32> -> tensor<16x16xf32>
    %92 = tsr.reshape %88 {tsr.shardings = [#tsr.sharding<@grid, [{4, 4 : [0]}, []]>]} : tensor<4x4x48xf32> -> tensor<16x48xf32>
    %93 = tsr.matmul %91, %92 {transpose_lhs = true, tsr.shardings = [#tsr.sharding<@grid, [[], []] partial = [0]>]} : tensor<16x16xf32>, tensor<16x48xf32> -> tensor<16x48xf32>
    %94 = tsr.transpose %93 {permutation = array<i64: 1, 0>, tsr.shardings = [#tsr.sharding<@grid, [[], []] partial = [0]>]} : tensor<16x48xf32> -> tensor<48x16xf32>
    %95 = tsr.transpose %90 {permutation = array<i64: 1, 0, 2>, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32> -> tensor<4x4x16xf32>
    %input_grad_0, %scale_grad_1, %bias_grad_2 = tsr.layer_norm_grad %2, %arg2, %95 {axis = 2 : i64, epsilon = 9.99999974E-6 : f32, tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>, #tsr.sharding<@grid, [[]] partial = [0]>, #tsr.sharding<@grid, [[]] partial = [0]>]} : tensor<4x4x16xf32>, tensor<16xf32>
    %96 = tsr.add %66, %input_grad_0 {tsr.shardings = [#tsr.sharding<@grid, [[0], [], []]>]} : tensor<4x4x16xf32>
    %97 = tsr.reduce_sum %96 {axes = array<i64: 0>, tsr.shardings = [#tsr.sharding<@grid, [[], []] partial = [0]>]} : tensor<4x4x16xf32> -> tensor<4x16xf32>
    %98 = tsr.gather_grad %arg15, %96 {tsr.shardings = [#tsr.sharding<@grid, [[], []] partial = [0]>]} : tensor<4x4xi64>, tensor<4x4x16xf32> -> tensor<32x16xf32>
    %99 = tsr.sgd_update %arg4, %94, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[], []]>], weight_decay = 0.000000e+00 : f32} : tensor<48x16xf32>
    %100 = tsr.sgd_update %arg5, %89, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[]]>], weight_decay = 0.000000e+00 : f32} : tensor<48xf32>
    %101 = tsr.sgd_update %arg6, %71, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[], []]>], weight_decay = 0.000000e+00 : f32} : tensor<16x16xf32>
    %102 = tsr.sgd_update %arg7, %69, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[]]>], weight_decay = 0.000000e+00 : f32} : tensor<16xf32>
    %103 = tsr.sgd_update %arg10, %65, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[], []]>], weight_decay = 0.000000e+00 : f32} : tensor<32x16xf32>
    %104 = tsr.sgd_update %arg12, %59, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[], []]>], weight_decay = 0.000000e+00 : f32} : tensor<16x32xf32>
    %105 = tsr.sgd_update %arg0, %98, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[], []]>], weight_decay = 0.000000e+00 : f32} : tensor<32x16xf32>
    %106 = tsr.sgd_update %arg1, %97, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[], []]>], weight_decay = 0.000000e+00 : f32} : tensor<4x16xf32>
    %107 = tsr.sgd_update %arg2, %scale_grad_1, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[]]>], weight_decay = 0.000000e+00 : f32} : tensor<16xf32>
    %108 = tsr.sgd_update %arg3, %bias_grad_2, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[]]>], weight_decay = 0.000000e+00 : f32} : tensor<16xf32>
    %109 = tsr.sgd_update %arg8, %scale_grad, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[]]>], weight_decay = 0.000000e+00 : f32} : tensor<16xf32>
    %110 = tsr.sgd_update %arg9, %bias_grad, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[]]>], weight_decay = 0.000000e+00 : f32} : tensor<16xf32>
    %111 = tsr.sgd_update %arg11, %61, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[]]>], weight_decay = 0.000000e+00 : f32} : tensor<32xf32>
    %112 = tsr.sgd_update %arg13, %56, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[]]>], weight_decay = 0.000000e+00 : f32} : tensor<16xf32>
    %113 = tsr.sgd_update %arg14, %54, %hlr {tsr.shardings = [#tsr.sharding<@grid, [[], []]>], weight_decay = 0.000000e+00 : f32} : tensor<32x16xf32>
    return %51, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113 : tensor<f32>, tensor<48x16xf32>, tensor<48xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<32x16xf32>, tensor<16x32xf32>, tensor<32x16xf32>, tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<32xf32>, tensor<16xf32>, tensor<32x16xf32>
  }
}


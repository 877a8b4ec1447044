//===- TsrOps.td - Tessera tensor ops ----------------------*- tablegen -*-===//
//
// Families (one C++ file each holds verifiers and shape inference):
//   ElementwiseOps.cpp  constant, unary/binary elementwise, compare, select,
//                       convert, broadcast, reductions
//   LinalgOps.cpp       matmul and the fused linear layer (linear,
//                       bias_activation_grad)
//   ShapeOps.cpp        reshape, transpose, slice, concat
//   NNOps.cpp           gather, layer_norm, rms_norm, softmax, attention,
//                       cross_entropy and the gradient ops (gelu_grad,
//                       silu_grad, ...)
//   OptimizerOps.cpp    sgd_update, adamw_update, multi_sgd_update,
//                       multi_adamw_update
// Gradient rules live in GradientRules.cpp, sharding rules in
// ShardingRules.cpp and costs in CostRules.cpp, each grouped by family.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TSR_OPS
#define TESSERA_TSR_OPS

include "dialects/tsr/TsrDialect.td"
include "dialects/tsr/TsrAttrs.td"
include "dialects/tsr/TsrInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

// Traits every tsr op carries: pure, and answers the contract's interfaces
// (gradient, sharding rule, cost, precision policy).
defvar TsrContract = [Pure,
  DeclareOpInterfaceMethods<Tsr_GradientOpInterface>,
  DeclareOpInterfaceMethods<Tsr_ShardingRuleOpInterface>,
  Tsr_CostOpInterface, Tsr_MixedPrecisionOpInterface];

class Tsr_ContractOp<string mnemonic, list<Trait> traits = []>
    : Tsr_Op<mnemonic, !listconcat(TsrContract, traits)> {
  let hasVerifier = 1;
}

def Tsr_StaticTensor : Type<
    And<[AnyRankedTensor.predicate,
         CPred<"::llvm::cast<::mlir::RankedTensorType>($_self).hasStaticShape()">]>,
    "statically shaped tensor", "::mlir::RankedTensorType">;

// An f32 0-D tensor (a runtime scalar such as the learning rate); buildable,
// so assembly formats need not spell its type.
def Tsr_F32Scalar : Type<
    And<[AnyRankedTensor.predicate,
         CPred<"::llvm::cast<::mlir::RankedTensorType>($_self).getRank() == 0">,
         CPred<"::llvm::cast<::mlir::RankedTensorType>($_self)"
               ".getElementType().isF32()">]>,
    "0-D f32 tensor", "::mlir::RankedTensorType">,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def Tsr_ConstantOp : Tsr_ContractOp<"constant", [ConstantLike,
    AllTypesMatch<["value", "result"]>]> {
  let summary = "Constant tensor.";
  let description = [{
    A compile-time constant (ONNX `Constant` nodes and folded shape
    subgraphs). Constants are never trainable.

    ```mlir
    %c = tsr.constant dense<1.0> : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
  let hasVerifier = 0;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Tsr_BinaryOp<string mnemonic, string doc>
    : Tsr_ContractOp<mnemonic, [Elementwise, SameOperandsAndResultType]> {
  let summary = "Elementwise " # doc # ".";
  let description = [{
    Operands and result have one shape and element type; broadcasting is
    explicit (`tsr.broadcast`).

    ```mlir
    %r = tsr.}] # mnemonic # [{ %a, %b : tensor<8x64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$lhs, Tsr_StaticTensor:$rhs);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
  let hasVerifier = 0;
}

def Tsr_AddOp : Tsr_BinaryOp<"add", "addition">;
def Tsr_SubOp : Tsr_BinaryOp<"sub", "subtraction">;
def Tsr_MulOp : Tsr_BinaryOp<"mul", "multiplication">;
def Tsr_DivOp : Tsr_BinaryOp<"div", "division">;
def Tsr_PowOp : Tsr_BinaryOp<"pow", "power (lhs ** rhs)">;
def Tsr_MaxOp : Tsr_BinaryOp<"max", "maximum">;

def Tsr_EqualOp : Tsr_ContractOp<"equal", [Elementwise,
    SameOperandsAndResultShape, SameTypeOperands]> {
  let summary = "Elementwise equality, producing an i1 mask.";
  let description = [{
    ```mlir
    %m = tsr.equal %a, %b : tensor<16x16xf32> -> tensor<16x16xi1>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$lhs, Tsr_StaticTensor:$rhs);
  let results = (outs TensorOf<[I1]>:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` type($lhs) `->` type($result)";
  let hasVerifier = 0;
}

def Tsr_SelectOp : Tsr_ContractOp<"select", [Elementwise,
    AllTypesMatch<["true_value", "false_value", "result"]>,
    AllShapesMatch<["condition", "result"]>]> {
  let summary = "Elementwise select (ONNX Where).";
  let description = [{
    `result[i] = condition[i] ? true_value[i] : false_value[i]`; all one shape.

    ```mlir
    %r = tsr.select %m, %a, %b : tensor<16x16xi1>, tensor<16x16xf32>
    ```
  }];
  let arguments = (ins TensorOf<[I1]>:$condition, Tsr_StaticTensor:$true_value,
                       Tsr_StaticTensor:$false_value);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = [{
    $condition `,` $true_value `,` $false_value attr-dict `:`
    type($condition) `,` type($result)
  }];
  let hasVerifier = 0;
}

class Tsr_UnaryOp<string mnemonic, string doc, dag extraArgs = (ins)>
    : Tsr_ContractOp<mnemonic, [Elementwise, SameOperandsAndResultType]> {
  let summary = "Elementwise " # doc # ".";
  let description = [{
    ```mlir
    %r = tsr.}] # mnemonic # [{ %x : tensor<8x64xf32>
    ```
  }];
  let arguments = !con((ins Tsr_StaticTensor:$input), extraArgs);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 0;
}

def Tsr_NegOp : Tsr_UnaryOp<"neg", "negation">;
def Tsr_ExpOp : Tsr_UnaryOp<"exp", "exponential">;
def Tsr_LogOp : Tsr_UnaryOp<"log", "natural logarithm">;
def Tsr_SqrtOp : Tsr_UnaryOp<"sqrt", "square root">;
def Tsr_RsqrtOp : Tsr_UnaryOp<"rsqrt", "reciprocal square root">;
def Tsr_TanhOp : Tsr_UnaryOp<"tanh", "hyperbolic tangent">;
def Tsr_ErfOp : Tsr_UnaryOp<"erf", "Gauss error function">;
def Tsr_ReluOp : Tsr_UnaryOp<"relu", "rectified linear unit, max(x, 0)">;
def Tsr_GeluOp : Tsr_UnaryOp<"gelu",
    "GELU (Hendrycks & Gimpel, 2016): x·Φ(x) when approximate = \"none\", "
    "PyTorch's tanh form when \"tanh\"",
    (ins DefaultValuedStrAttr<StrAttr, "none">:$approximate)> {
  let hasVerifier = 1;
}

/// A float elementwise activation with its own cost (FLOPs and
/// transcendentals per element, CostRules.cpp) and a verifier that the
/// element type is a float.
class Tsr_ActivationOp<string mnemonic>
    : Tsr_ContractOp<mnemonic, [Elementwise, SameOperandsAndResultType,
        DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                                  ["getFlops", "getTranscendentals"]>]> {
  let arguments = (ins Tsr_StaticTensor:$input);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Tsr_SigmoidOp : Tsr_ActivationOp<"sigmoid"> {
  let summary = "Elementwise logistic sigmoid, 1 / (1 + exp(-x)).";
  let description = [{
    ONNX Sigmoid. The kernels evaluate 1 / (1 + exp(-x)), which saturates
    without overflowing to NaN: where exp(-x) is +inf (x < -88 in f32) the
    result is exactly 0, sigmoid(-inf) = 0, sigmoid(+inf) = 1, NaN
    propagates (PyTorch's values). The gradient is dy · y · (1 − y) from
    the result y (tsr.mul and tsr.sub), finite for every x; the gradient of
    the decomposition 1 / (1 + exp(-x)) that the importer used to emit is
    NaN wherever exp(-x) overflows (x < -88 in f32, x < -11 in f16).
    `x · sigmoid(x)` is raised to `tsr.silu`. Cost: 3 FLOP and one exp per
    element. Errors: a non-float element type.

    ```mlir
    %s = tsr.sigmoid %x : tensor<8x64xf32>
    ```
  }];
}

def Tsr_SiluOp : Tsr_ActivationOp<"silu"> {
  let summary = "Elementwise SiLU (swish), x · sigmoid(x).";
  let description = [{
    The sigmoid-weighted linear unit (Elfwing et al., 2018; Hendrycks &
    Gimpel, 2016, "GELUs", who named it SiLU; "swish" in Ramachandran et
    al., 2017), PyTorch's `torch.nn.functional.silu`: the gate activation
    of SwiGLU MLPs (Shazeer, 2020, "GLU Variants Improve Transformer":
    `down(silu(gate(x)) * up(x))` in LLaMA, Mistral, Qwen2). Raised by the
    importer from Mul(x, Sigmoid(x)) in either operand order.

    Numerics: the kernels evaluate x / (1 + exp(-x)) in f32, which never
    overflows to NaN for finite x (for x < -88, exp(-x) = +inf and the
    result is -0, as in PyTorch); silu(+inf) = +inf; silu(-inf) = -0, the
    limit (PyTorch 1.13 and 2.x return NaN there); NaN propagates. The
    gradient is `tsr.silu_grad`. Cost: 4 FLOP and one exp per element.
    Errors: a non-float element type.

    ```mlir
    %a = tsr.silu %gate : tensor<8x16x256xf32>
    ```
  }];
}

def Tsr_ConvertOp : Tsr_ContractOp<"convert", [Elementwise,
    SameOperandsAndResultShape]> {
  let summary = "Elementwise element-type conversion (ONNX Cast).";
  let description = [{
    ```mlir
    %r = tsr.convert %ids : tensor<4x16xi64> -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 0;
}

def Tsr_BroadcastOp : Tsr_ContractOp<"broadcast"> {
  let summary = "Numpy-style broadcast to a larger shape (ONNX Expand).";
  let description = [{
    The input's dimensions align with the result's trailing dimensions; each
    is 1 (broadcast) or equal to the result's. Its gradient sums over the
    broadcast dimensions.

    ```mlir
    %b = tsr.broadcast %bias : tensor<64xf32> -> tensor<8x16x64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

class Tsr_ReduceOp<string mnemonic, string doc>
    : Tsr_ContractOp<mnemonic, [DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = doc # " over `axes`.";
  let description = [{
    `axes` are sorted, distinct and in [0, rank). With `keepdim` the reduced
    dimensions stay as size 1.

    ```mlir
    %m = tsr.}] # mnemonic # [{ %x {axes = array<i64: 2>, keepdim = true}
        : tensor<8x16x64xf32> -> tensor<8x16x1xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "false">:$keepdim);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Tsr_ReduceSumOp : Tsr_ReduceOp<"reduce_sum", "Sum">;
def Tsr_ReduceMeanOp : Tsr_ReduceOp<"reduce_mean", "Mean">;
def Tsr_ReduceMaxOp : Tsr_ReduceOp<"reduce_max", "Maximum">;

def Tsr_SumSquaresOp : Tsr_ContractOp<"sum_squares",
    [DeclareOpInterfaceMethods<Tsr_CostOpInterface, ["getFlops"]>]> {
  let summary = "Sum of the squares of every element, as an f32 scalar.";
  let description = [{
    `result = Σ_i input_i²` over every element of an f32 tensor of any rank
    (the kernels accumulate in f64 and round once). The squared L2 norm of
    one gradient: gradient clipping by the global norm (tsr-clip-grad, as
    torch.nn.utils.clip_grad_norm_ and Megatron-LM's `--clip-grad`) sums
    one per parameter.

    Sharding rule: every input dimension is a reduction factor, so an input
    split over grid axes gives a result that is partial over exactly those
    axes (the partitioner all-reduces the scalar over them); an input
    replicated over an axis gives a result replicated over it, which is
    what counts a replicated parameter's term once. The op is not linear:
    a partial input is all-reduced before it. Gradient: 2·input·g. Cost:
    2 FLOPs per input element.

    ```mlir
    %n2 = tsr.sum_squares %grad : tensor<64x256xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input);
  let results = (outs 0DTensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Tsr_FusedElementwiseOp : Tsr_ContractOp<"fused_elementwise",
    [DeclareOpInterfaceMethods<Tsr_CostOpInterface,
        ["getFlops", "getTranscendentals", "getMeasuredUnits"]>]> {
  let summary = "A chain of elementwise ops run as one kernel.";
  let description = [{
    Made by `tsr-fuse-elementwise` after partition (on local shapes): a
    group of elementwise ops (and the `tsr.broadcast`s that feed them an
    operand) as one kernel that reads each operand and writes each result
    once, keeping the intermediates in cache (CPU: tiles of 512 elements)
    or in registers (CUDA: one thread per element), as XLA's loop fusion
    and TorchInductor's pointwise fusion do.

    The program is a register bytecode (common/fusion/ElementwiseProgram.h).
    Slots 0 .. N-1 are the N `inputs`, each broadcast numpy-style to the
    result shape (trailing dimensions aligned, each 1 or equal: a bias
    [64] or a scalar [] against [8, 16, 64]). Instruction k, `ops[k]`,
    writes slot N + k from the next arity(ops[k]) entries of `args`, each an
    earlier slot. The results are the slots in `outputs`, in order, all of
    one shape (the iteration shape) and f32. Opcodes, with their operands:
    add, sub, mul, div, pow, max (a, b); neg, exp, log, sqrt, rsqrt, tanh,
    erf, relu, sigmoid, silu, gelu, gelu_tanh (x; gelu is approximate =
    "none", gelu_tanh "tanh"); select (condition, a, b), whose condition
    must be an i1 input; relu_grad, gelu_grad, gelu_tanh_grad, silu_grad
    (input, grad). Every other slot is f32. Each opcode computes what the
    unfused op's kernel computes, operation by operation in f32, so the
    fused results equal the unfused ones bit for bit.

    Shape: the results' shape is the iteration shape; each input broadcasts
    to it. Sharding rule: one factor per result dimension shared by every
    result; an input's dimension of the result's size takes that factor,
    a broadcast (size-1) dimension none; no linear groups (a partial
    input is reduced before the op). Gradient: none: the op is made after
    autodiff (its `buildGradient` fails). Cost: the sum over instructions
    of the unfused ops' FLOPs and transcendentals per element times the
    result's elements; bytes are the inputs and results only, since the
    intermediates never reach memory (the saving over the unfused ops).
    Limits: at most 16 inputs, 48 instructions, 16 results, rank 8.
    Errors (verifier): an unknown opcode, a wrong `args` count, an
    argument that is not an earlier slot, a condition that is not an i1
    input (or an i1 input used as a value), outputs that are not distinct
    computed slots or differ in number from the results, results of
    different shapes or not f32, an input that does not broadcast.

    ```mlir
    // gelu_tanh(x * s + b) and x * s, with the bias [64] and the scale []
    // broadcast in the kernel.
    %y, %xs = tsr.fused_elementwise %x, %s, %b
        {ops = ["mul", "add", "gelu_tanh"],
         args = array<i64: 0, 1, 3, 2, 4>, outputs = array<i64: 5, 3>}
        : (tensor<8x16x64xf32>, tensor<f32>, tensor<64xf32>)
          -> (tensor<8x16x64xf32>, tensor<8x16x64xf32>)
    ```
  }];
  let arguments = (ins Variadic<Tsr_StaticTensor>:$inputs,
                       StrArrayAttr:$ops, DenseI64ArrayAttr:$args,
                       DenseI64ArrayAttr:$outputs);
  let results = (outs Variadic<Tsr_StaticTensor>:$results);
  let assemblyFormat =
      "$inputs attr-dict `:` functional-type($inputs, $results)";
  let extraClassDeclaration = [{
    /// The validated program (common/fusion/ElementwiseProgram.h), or the
    /// verifier's message.
    std::string buildProgram(::tessera::fusion::ElementwiseProgram &p);
    /// The opcode that computes `op` inside a fused program, or nothing
    /// when the kernel cannot run it (not an elementwise op it knows, or
    /// not on f32 values).
    static std::optional<::tessera::fusion::ElemOp>
    opcodeOf(::mlir::Operation *op);
  }];
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

def Tsr_MatmulOp : Tsr_ContractOp<"matmul",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getGemmShapes"]>]> {
  let summary = "Batched matrix product.";
  let description = [{
    `lhs` is [..., M, K] ([..., K, M] with `transpose_lhs`), `rhs` is
    [..., K, N] ([..., N, K] with `transpose_rhs`); the result is [..., M, N].
    Either both have the same batch dimensions, or `rhs` is rank 2 and shared
    by every batch (a Linear layer's weight). Cost: 2·batch·M·N·K FLOP.
    Sharding: M, N and batch dims split freely; a split K makes the result
    partial (Megatron row parallelism).

    ```mlir
    %y = tsr.matmul %x, %w {transpose_rhs = true}
        : tensor<8x16x64xf32>, tensor<256x64xf32> -> tensor<8x16x256xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$lhs, Tsr_StaticTensor:$rhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

def Tsr_ShardingConstraintOp : Tsr_ContractOp<"sharding_constraint",
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "Identity that fixes its result's sharding.";
  let description = [{
    The value of `input`, laid out as `sharding` (a `#tsr.sharding` of the
    same rank, without partial axes). `tsr-sharding-propagate` treats the
    result's sharding as given, like a step argument's: its proposals win
    over every derived one, so one constraint steers the layout of
    everything around it. `tsr-sharding-partition` reshards `input` to the
    constraint and removes the op: no `tsr.sharding_constraint` remains
    after partition (the lowering rejects one). As JAX's
    `with_sharding_constraint` and Shardy's `sdy.sharding_constraint`.

    `tsr-sharding-annotate` places them on the residual stream for
    Megatron-style sequence parallelism (Korthikanti et al., 2022):

    ```mlir
    %x1 = tsr.sharding_constraint %x
        {sharding = #tsr.sharding<@grid, [[0], [1], []]>} : tensor<8x256x64xf32>
    ```

    Errors: a sharding whose rank differs from the tensor's, or that is
    partial.
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_ShardingAttr:$sharding);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Tsr_ReshapeOp : Tsr_ContractOp<"reshape",
    [DeclareOpInterfaceMethods<Tsr_CostOpInterface, ["getBytesAccessed"]>]> {
  let summary = "Reshape to a shape with the same number of elements.";
  let description = [{
    Row-major reinterpretation (ONNX Reshape, Squeeze, Unsqueeze, Flatten).

    ```mlir
    %r = tsr.reshape %x : tensor<8x16x64xf32> -> tensor<8x16x4x16xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
}

def Tsr_TransposeOp : Tsr_ContractOp<"transpose",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Permute dimensions.";
  let description = [{
    `result.shape[i] = input.shape[permutation[i]]`.

    ```mlir
    %t = tsr.transpose %x {permutation = array<i64: 0, 2, 1, 3>}
        : tensor<8x16x4x16xf32> -> tensor<8x4x16x16xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input,
                       DenseI64ArrayAttr:$permutation);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Tsr_SliceOp : Tsr_ContractOp<"slice",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Static strided slice.";
  let description = [{
    For each dimension d: elements start[d], start[d] + stride[d], ... below
    limit[d]. Strides are positive; ONNX negative indices are resolved by the
    importer.

    ```mlir
    %q = tsr.slice %qkv {start_indices = array<i64: 0, 0, 0>,
                         limit_indices = array<i64: 8, 16, 64>,
                         strides = array<i64: 1, 1, 1>}
        : tensor<8x16x192xf32> -> tensor<8x16x64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input,
                       DenseI64ArrayAttr:$start_indices,
                       DenseI64ArrayAttr:$limit_indices,
                       DenseI64ArrayAttr:$strides);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Tsr_ConcatOp : Tsr_ContractOp<"concat",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Concatenate along `axis`.";
  let description = [{
    ```mlir
    %c = tsr.concat %a, %b {axis = 0 : i64}
        : (tensor<2x8xf32>, tensor<3x8xf32>) -> tensor<5x8xf32>
    ```
  }];
  let arguments = (ins Variadic<Tsr_StaticTensor>:$inputs, I64Attr:$axis);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat =
      "$inputs attr-dict `:` functional-type($inputs, $result)";
}

//===----------------------------------------------------------------------===//
// Neural-network ops
//===----------------------------------------------------------------------===//

def Tsr_GatherOp : Tsr_ContractOp<"gather",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Row lookup (embedding; ONNX Gather on axis 0).";
  let description = [{
    `table` is [V, D...], `indices` any shape of i64 in [0, V); the result is
    indices.shape ++ [D...]. An out-of-range id is a runtime error naming it.

    Vocab parallelism (Megatron-LM, Shoeybi et al. 2019): after
    partitioning, a local op whose table is split over the vocabulary
    carries `grid_axes` (array<i16>, the split's grid axes). Its table holds
    rows [r·V_local, (r+1)·V_local) of the V = n·V_local rows, r being the
    rank along those axes: ids in that range are looked up, the others give
    zero rows, so the result is a partial sum over the axes (all-reduced by
    the partitioner). Ids are still checked against [0, V).

    ```mlir
    %e = tsr.gather %wte, %tokens
        : tensor<256x64xf32>, tensor<8x16xi64> -> tensor<8x16x64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$table, TensorOf<[I64]>:$indices);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = [{
    $table `,` $indices attr-dict `:` type($table) `,` type($indices) `->`
    type($result)
  }];
}

def Tsr_GatherGradOp : Tsr_ContractOp<"gather_grad"> {
  let summary = "Gradient of `tsr.gather`: scatter-add rows into a table.";
  let description = [{
    `result` ([V, D...], zero-initialised) gets `grad[i]` added to row
    `indices[i]` for every index position i. With `grid_axes` (vocab
    parallelism, see `tsr.gather`) the result is the rank's V_local rows and
    only the ids in its range are added.

    ```mlir
    %g = tsr.gather_grad %tokens, %dy
        : tensor<8x16xi64>, tensor<8x16x64xf32> -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins TensorOf<[I64]>:$indices, Tsr_StaticTensor:$grad);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = [{
    $indices `,` $grad attr-dict `:` type($indices) `,` type($grad) `->`
    type($result)
  }];
}

def Tsr_LayerNormOp : Tsr_ContractOp<"layer_norm",
    [AllTypesMatch<["input", "result"]>, AllTypesMatch<["scale", "bias"]>]> {
  let summary = "Layer normalization (Ba et al., 2016).";
  let description = [{
    Normalizes `input` over dimensions [axis, rank) with biased variance,
    then applies `scale` and `bias` (shape input.shape[axis:]):
    `(x - mean) / sqrt(var + epsilon) * scale + bias`. Raised by the importer
    from ONNX LayerNormalization or its decomposed ReduceMean/Sub/Pow/Sqrt/Div
    form.

    ```mlir
    %y = tsr.layer_norm %x, %g, %b {axis = 2 : i64, epsilon = 1.0e-05 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$scale,
                       Tsr_StaticTensor:$bias, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale `,` $bias attr-dict `:` type($input) `,` type($scale)
  }];
}

def Tsr_LayerNormGradOp : Tsr_ContractOp<"layer_norm_grad",
    [AllTypesMatch<["input", "grad", "input_grad"]>,
     AllTypesMatch<["scale", "scale_grad", "bias_grad"]>]> {
  let summary = "Gradient of `tsr.layer_norm` (recomputes mean and rstd).";
  let description = [{
    ```mlir
    %dx, %dg, %db = tsr.layer_norm_grad %x, %g, %dy
        {axis = 2 : i64, epsilon = 1.0e-05 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$scale,
                       Tsr_StaticTensor:$grad, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs Tsr_StaticTensor:$input_grad,
                      Tsr_StaticTensor:$scale_grad,
                      Tsr_StaticTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $scale `,` $grad attr-dict `:` type($input) `,` type($scale)
  }];
}

def Tsr_RmsNormOp : Tsr_ContractOp<"rms_norm",
    [AllTypesMatch<["input", "result"]>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getTranscendentals"]>]> {
  let summary = "RMS layer normalization (Zhang & Sennrich, 2019).";
  let description = [{
    Root-mean-square normalization ("Root Mean Square Layer
    Normalization", Zhang & Sennrich 2019) over dimensions [axis, rank),
    without centring and without bias, as LLaMA, Mistral, Qwen2 and Gemma
    use it (HF `LlamaRMSNorm`):
    `y = x / sqrt(mean(x², over [axis, rank)) + epsilon) * scale`, `scale`
    of shape input.shape[axis:] and the input's element type. The
    statistics are computed in f32 or wider whatever the element type (the
    kernels accumulate in f64; on bf16/f16 data, after tsr-mixed-precision,
    they widen to f32 first), as HF computes in f32 and casts back.

    Gemma's variant `x_normed * (1 + w)` is not an attribute: `scale` is the
    multiplier itself, and `1 + w` stays the tsr.add that feeds it (or the
    initializer the exporter folded it into). The add's gradient is the
    identity and its sharding rule elementwise, so autodiff, sharding (w
    follows the normalized dims through the add) and the kernels need no
    variant, for the price of one [H]-sized add per norm.

    Raised by the importer from the exporters' decomposition Pow(x, 2) →
    ReduceMean(trailing axes, keepdims) → Add ε → Sqrt → Div(1, ·) or
    Reciprocal → Mul x (TorchScript and dynamo exports of HF LLaMA), also
    x · rsqrt(·) and x / sqrt(·), with a following Mul by the weight (either
    operand order) absorbed as `scale` (otherwise `scale` is ones).

    Sharding: as `tsr.layer_norm`: the leading dims split freely; the
    normalized dims, and `scale` with them, stay whole. Cost: 4 FLOP per
    element (square, sum, the two products) plus 2 per row, and one rsqrt
    per row (a transcendental).

    Errors: `axis` outside [0, rank); `scale` not of shape
    input.shape[axis:] or not of the input's element type; a non-float
    element type.

    ```mlir
    %y = tsr.rms_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-06 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$scale,
                       I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale attr-dict `:` type($input) `,` type($scale)
  }];
}

def Tsr_RmsNormGradOp : Tsr_ContractOp<"rms_norm_grad",
    [AllTypesMatch<["input", "grad", "input_grad"]>,
     AllTypesMatch<["scale", "scale_grad"]>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getTranscendentals"]>]> {
  let summary = "Gradient of `tsr.rms_norm` (recomputes rstd).";
  let description = [{
    With r = 1 / sqrt(mean(x²) + epsilon) per row recomputed from `input`
    x, x̂ = x · r and g = `grad` · `scale`:
    `input_grad = r · (g − x̂ · mean(g · x̂))` (means over the normalized
    dims) and `scale_grad = Σ_rows grad · x̂`. Same shape rules and errors
    as `tsr.rms_norm`. Sharding: the leading dims split freely (then
    `scale_grad` is a partial sum over them); the normalized dims stay
    whole. Cost: 11 FLOP per element plus 3 per row, one rsqrt per row.

    ```mlir
    %dx, %dw = tsr.rms_norm_grad %x, %w, %dy
        {axis = 2 : i64, epsilon = 1.0e-06 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$scale,
                       Tsr_StaticTensor:$grad, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs Tsr_StaticTensor:$input_grad,
                      Tsr_StaticTensor:$scale_grad);
  let assemblyFormat = [{
    $input `,` $scale `,` $grad attr-dict `:` type($input) `,` type($scale)
  }];
}

//===----------------------------------------------------------------------===//
// Residual add fused with a normalization (tsr-fuse-norm)
//===----------------------------------------------------------------------===//

def Tsr_AddLayerNormOp : Tsr_ContractOp<"add_layer_norm",
    [AllTypesMatch<["input", "residual", "sum", "result"]>,
     AllTypesMatch<["scale", "bias"]>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getTranscendentals"]>]> {
  let summary = "Residual add fused with the `tsr.layer_norm` of its sum.";
  let description = [{
    `sum = input + residual` and `result = layer_norm(sum, scale, bias)`
    over dimensions [axis, rank) (as `tsr.layer_norm`: biased variance,
    `(h - mean) / sqrt(var + epsilon) * scale + bias`), in one kernel that
    reads `input` and `residual` once and writes both the sum (the residual
    stream of a pre-norm transformer, read again by the next residual add
    and by the norm's gradient) and the normalized rows. This is ONNX
    Runtime's SkipLayerNormalization and the fused "add + LayerNorm" of
    Megatron-LM/apex, without the bias and dropout. Created by
    `tsr-fuse-norm` from `tsr.add` + `tsr.layer_norm` on the partitioned
    step, after autodiff, so it has no gradient rule (its gradient is
    `tsr.layer_norm_grad` and the identity).

    Sharding: as `tsr.layer_norm` for all of `input`, `residual`, `sum` and
    `result`: the leading dims split freely; the normalized dims, and
    `scale` and `bias` with them, stay whole. Cost: 9 FLOP per element (the
    add, the two row sums, the centring, the square and the affine
    normalization) plus 3 per row, one square root per row; bytes: the
    operands and results once each, one tensor read fewer than the add and
    the norm apart.

    Errors: `axis` outside [0, rank); `scale` not of shape
    input.shape[axis:].

    ```mlir
    %h, %y = tsr.add_layer_norm %x, %r, %g, %b
        {axis = 2 : i64, epsilon = 1.0e-05 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$residual,
                       Tsr_StaticTensor:$scale, Tsr_StaticTensor:$bias,
                       I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Tsr_StaticTensor:$sum, Tsr_StaticTensor:$result);
  let assemblyFormat = [{
    $input `,` $residual `,` $scale `,` $bias attr-dict `:` type($input) `,`
    type($scale)
  }];
}

def Tsr_AddRmsNormOp : Tsr_ContractOp<"add_rms_norm",
    [AllTypesMatch<["input", "residual", "sum", "result"]>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getTranscendentals"]>]> {
  let summary = "Residual add fused with the `tsr.rms_norm` of its sum.";
  let description = [{
    `sum = input + residual` and `result = rms_norm(sum, scale)` over
    dimensions [axis, rank) (as `tsr.rms_norm`, Zhang & Sennrich 2019:
    `h / sqrt(mean(h²) + epsilon) * scale`), in one kernel that reads
    `input` and `residual` once and writes the sum and the normalized rows:
    the residual stream and the pre-norm of LLaMA-style blocks (ONNX
    Runtime's SkipSimplifiedLayerNormalization). Created by `tsr-fuse-norm`
    from `tsr.add` + `tsr.rms_norm` after autodiff; no gradient rule.

    Sharding: as `tsr.rms_norm`: the leading dims split freely; the
    normalized dims and `scale` stay whole. Cost: 5 FLOP per element (the
    add and `tsr.rms_norm`'s 4) plus 2 per row, one rsqrt per row; bytes:
    one tensor read fewer than the add and the norm apart.

    Errors: as `tsr.rms_norm`.

    ```mlir
    %h, %y = tsr.add_rms_norm %x, %r, %w
        {axis = 2 : i64, epsilon = 1.0e-06 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$residual,
                       Tsr_StaticTensor:$scale, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs Tsr_StaticTensor:$sum, Tsr_StaticTensor:$result);
  let assemblyFormat = [{
    $input `,` $residual `,` $scale attr-dict `:` type($input) `,`
    type($scale)
  }];
}

def Tsr_LayerNormGradAddOp : Tsr_ContractOp<"layer_norm_grad_add",
    [AllTypesMatch<["input", "grad", "addend", "input_grad"]>,
     AllTypesMatch<["scale", "scale_grad", "bias_grad"]>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getTranscendentals"]>]> {
  let summary = "`tsr.layer_norm_grad` whose input gradient is added to "
                "another cotangent.";
  let description = [{
    As `tsr.layer_norm_grad` (mean and rstd recomputed from `input`), with
    `input_grad = layer_norm_grad(input, scale, grad).input_grad + addend`
    written in the same pass: the backward of a pre-norm residual block,
    where the residual stream's cotangent `addend` (from the next block)
    and the norm's input gradient are summed by autodiff's `tsr.add`.
    `scale_grad` and `bias_grad` are the norm's, unchanged. Created by
    `tsr-fuse-norm` after autodiff; no gradient rule.

    Sharding: as `tsr.layer_norm_grad`, `addend` as `grad`: the leading
    dims split freely (then `scale_grad` and `bias_grad` are partial sums
    over them); the normalized dims stay whole. Cost: 18 FLOP per element
    plus 4 per row, one square root per row; bytes: the operands and
    results once each, two tensor accesses fewer than the gradient and the
    add apart.

    Errors: as `tsr.layer_norm_grad`.

    ```mlir
    %dx, %dg, %db = tsr.layer_norm_grad_add %x, %g, %dy, %dres
        {axis = 2 : i64, epsilon = 1.0e-05 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$scale,
                       Tsr_StaticTensor:$grad, Tsr_StaticTensor:$addend,
                       I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Tsr_StaticTensor:$input_grad,
                      Tsr_StaticTensor:$scale_grad,
                      Tsr_StaticTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $scale `,` $grad `,` $addend attr-dict `:` type($input) `,`
    type($scale)
  }];
}

def Tsr_RmsNormGradAddOp : Tsr_ContractOp<"rms_norm_grad_add",
    [AllTypesMatch<["input", "grad", "addend", "input_grad"]>,
     AllTypesMatch<["scale", "scale_grad"]>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getTranscendentals"]>]> {
  let summary = "`tsr.rms_norm_grad` whose input gradient is added to "
                "another cotangent.";
  let description = [{
    As `tsr.rms_norm_grad` (rstd recomputed from `input`), with
    `input_grad = rms_norm_grad(input, scale, grad).input_grad + addend`
    written in the same pass (the residual stream's cotangent of a
    LLaMA-style block). `scale_grad` is the norm's. Created by
    `tsr-fuse-norm` after autodiff; no gradient rule.

    Sharding: as `tsr.rms_norm_grad`, `addend` as `grad`. Cost: 12 FLOP per
    element plus 3 per row, one rsqrt per row; bytes: two tensor accesses
    fewer than the gradient and the add apart.

    Errors: as `tsr.rms_norm_grad`.

    ```mlir
    %dx, %dw = tsr.rms_norm_grad_add %x, %w, %dy, %dres
        {axis = 2 : i64, epsilon = 1.0e-06 : f32}
        : tensor<8x16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$scale,
                       Tsr_StaticTensor:$grad, Tsr_StaticTensor:$addend,
                       I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Tsr_StaticTensor:$input_grad,
                      Tsr_StaticTensor:$scale_grad);
  let assemblyFormat = [{
    $input `,` $scale `,` $grad `,` $addend attr-dict `:` type($input) `,`
    type($scale)
  }];
}

def Tsr_SoftmaxOp : Tsr_ContractOp<"softmax",
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "Numerically stable softmax along `axis`.";
  let description = [{
    ```mlir
    %p = tsr.softmax %s {axis = 3 : i64} : tensor<8x4x16x16xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, I64Attr:$axis);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Tsr_SoftmaxGradOp : Tsr_ContractOp<"softmax_grad",
    [AllTypesMatch<["output", "grad", "result"]>]> {
  let summary = "Gradient of `tsr.softmax` from its output y: y·(dy − Σ dy·y).";
  let description = [{
    ```mlir
    %dx = tsr.softmax_grad %p, %dp {axis = 3 : i64} : tensor<8x4x16x16xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$output, Tsr_StaticTensor:$grad,
                       I64Attr:$axis);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$output `,` $grad attr-dict `:` type($result)";
}

def Tsr_AttentionOp : Tsr_ContractOp<"attention",
    [DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getGemmShapes",
                                "getTranscendentals", "getMeasuredUnits",
                                "getKernelMessages"]>,
     DeclareOpInterfaceMethods<Tsr_MixedPrecisionOpInterface,
                               ["keepsF32Result"]>,
     Tsr_SelectiveRecompute]> {
  let summary = "Fused scaled dot-product attention with its log-sum-exp.";
  let description = [{
    `output = softmax(scale · query · keyᵀ + mask) · value` over the last
    axis of the scores, computed blockwise with an online softmax so that no
    [Sq, Sk] tensor is materialised (FlashAttention, Dao et al. 2022;
    memory-efficient attention, Rabe & Staats 2021).

    Shapes: `query` [b..., Sq, Dh], `key` [b..., Sk, Dh], `value`
    [b..., Sk, Dv] (rank >= 3, the same leading dims b..., one float element
    type). `mask`, optional, is an additive [Sq, Sk] tensor of the query's
    element type broadcast over b....

    Grouped-query attention (GQA, Ainslie et al. 2023, arXiv:2305.13245;
    multi-query attention, MQA, Shazeer 2019, arXiv:1911.02150, is Hkv = 1):
    with rank >= 4 the dim just before the sequence dim (rank − 3) is the
    head dim. `query` is [a..., H, Sq, Dh] and `key`/`value` may be
    [a..., Hkv, Sk, Dh] / [a..., Hkv, Sk, Dv] with Hkv dividing H (the other
    leading dims a... equal). Query head h attends with key/value head
    h / (H / Hkv): each run of n_rep = H / Hkv consecutive query heads shares
    one K/V head, the layout of Hugging Face's `repeat_kv`, whose copies the
    op never makes. The output and lse follow the query ([a..., H, Sq, Dv],
    [a..., H, Sq]). Errors: key and value with different leading dims, a
    leading dim other than the head dim that differs from the query's, or
    Hkv not dividing H. With rank 3 the leading dim is a flat batch (B·H)
    and must match exactly. Ring attention (`ring_size`) works with GQA:
    the rotating K/V blocks are Hkv heads wide.

    With `causal`, key j is excluded from
    query row i when j > i (requires Sq == Sk); a mask may be given as well.
    Results: `output` [b..., Sq, Dv] (the query's type) and `lse` [b..., Sq],
    always f32: the natural-log log-sum-exp of each row of the masked,
    scaled scores, which `tsr.attention_grad` uses to recompute the
    probabilities instead of storing them. A row whose keys are all masked
    out has lse = -inf and output 0.

    Raised by the importer from the exporter's MatMul → (Div|Mul) → Add mask
    (or Where) → Softmax → MatMul chains (PyTorch MultiheadAttention,
    hand-written causal self-attention, Hugging Face's eager attention with
    repeat_kv for GQA; compiler/import/RaisePatterns.h); `scale` is the
    product of the constant factors applied to Q or to the scores. Sharding: the leading dims split freely;
    without `ring_size`, Sq, Sk, Dh and Dv stay whole. Under GQA the query's
    head dim is two factors, Hkv (major, shared with the K/V head dim) and
    n_rep (minor): heads split over tp split Hkv, so tp must divide Hkv
    (Megatron-LM's rule); a layout that does not (tp not dividing Hkv)
    leaves the heads whole. A split n_rep (K/V replicated) makes the
    gradient's dK/dV partial sums.

    Ring attention (context parallelism): `ring_size` = K > 1 (absent means
    1) lets the sequence be split over K ranks (Liu et al. 2023, "Ring
    Attention with Blockwise Transformers", arXiv:2310.01889). It needs no
    mask, Sq == Sk = S and, before partitioning (no `grid_axes`), S
    divisible by K. The sharding rule then models
    the sequence dim of every operand and result as two factors shared by
    queries and keys: `S/K` (major, never split) times `K` (minor, the ring
    factor). Splitting the ring factor over grid axes of K ranks in all,
    i.e. the sequence dim sharded `{S/K, K : [axes]}`, is the striped layout
    (Brandon et al. 2023, "Striped Attention", arXiv:2311.09431): local row
    i of ring rank r is global position i·K + r, so with `causal` every
    rank has the same share of unmasked scores. (Megatron-LM's context
    parallelism balances causal work with a zig-zag split into 2·K chunks;
    the striped split balances it too and keeps every local block the same
    shape.) The partitioned op has local Q, K, V [b..., S/K, Dh], keeps
    `ring_size` and carries the ring's grid axes as `grid_axes`; its kernel
    keeps Q and rotates the K/V blocks around the ring with send/recv
    (K − 1 rotations), folding each into an online softmax, so no rank
    holds the S × S scores and the results are complete (not partial) on
    every rank. With the ring factor not split (no `grid_axes`) the op is
    plain attention over the whole sequence in natural order.

    ```mlir
    %o, %lse = tsr.attention %q, %k, %v {causal = true, scale = 0.125 : f32}
        : tensor<16x16x8xf32>, tensor<16x16x8xf32>, tensor<16x16x8xf32>
        -> tensor<16x16x8xf32>, tensor<16x16xf32>
    // GQA: 8 query heads share 2 K/V heads (n_rep = 4).
    %og, %lg = tsr.attention %qg, %kg, %vg {causal = true, scale = 0.125 : f32}
        : tensor<2x8x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>
        -> tensor<2x8x16x8xf32>, tensor<2x8x16xf32>
    // Ring attention over 2 ranks, as partitioned: the local stripe.
    %o2, %lse2 = tsr.attention %q2, %k2, %v2
        {causal = true, ring_size = 2 : i64, scale = 0.125 : f32,
         grid_axes = array<i16: 2>}
        : tensor<16x8x8xf32>, tensor<16x8x8xf32>, tensor<16x8x8xf32>
        -> tensor<16x8x8xf32>, tensor<16x8xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$query, Tsr_StaticTensor:$key,
                       Tsr_StaticTensor:$value,
                       Optional<Tsr_StaticTensor>:$mask, F32Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "false">:$causal,
                       OptionalAttr<I64Attr>:$ring_size);
  let results = (outs Tsr_StaticTensor:$output, Tsr_StaticTensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`,` $mask^)? attr-dict `:` type($query) `,`
    type($key) `,` type($value) (`,` type($mask)^)? `->` type($output) `,`
    type($lse)
  }];
}

def Tsr_AttentionGradOp : Tsr_ContractOp<"attention_grad",
    [DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getGemmShapes",
                                "getTranscendentals", "getMeasuredUnits",
                                "getKernelMessages"]>,
     DeclareOpInterfaceMethods<Tsr_MixedPrecisionOpInterface,
                               ["keepsF32Operand"]>,
     AllTypesMatch<["query", "query_grad"]>,
     AllTypesMatch<["output", "grad"]>,
     AllTypesMatch<["key", "key_grad"]>,
     AllTypesMatch<["value", "value_grad"]>]> {
  let summary = "Gradient of `tsr.attention`, recomputing the probabilities.";
  let description = [{
    Operands are the forward's `query`, `key`, `value`, its results `output`
    and `lse`, the output's cotangent `grad` and the forward's `mask` (if
    any); `scale` and `causal` are the forward's. Results are the cotangents
    of query, key and value (their types). The probabilities are recomputed
    blockwise as exp(scale·q·kᵀ + mask − lse), and
    dS = P ∘ (dP − rowsum(grad ∘ output)), so memory stays O(S) per row
    rather than O(Sq·Sk) (FlashAttention backward, Dao et al. 2022). The mask
    is not differentiated. Same shape rules and errors as `tsr.attention`,
    GQA included: with Hkv < H, `key_grad` and `value_grad` are
    [a..., Hkv, Sk, ·] and each K/V head's gradient is the sum over the
    n_rep query heads that share it.
    `ring_size` (and, once partitioned, `grid_axes`) is the forward's: the
    ring backward rotates each K/V block together with its dK/dV
    accumulators (K rotations in all) so that every block's gradients end
    on its owner; dQ, dK and dV are complete on every rank.

    ```mlir
    %dq, %dk, %dv = tsr.attention_grad %q, %k, %v, %o, %lse, %do
        {causal = true, scale = 0.125 : f32}
        : tensor<16x16x8xf32>, tensor<16x16x8xf32>, tensor<16x16x8xf32>,
          tensor<16x16x8xf32>, tensor<16x16xf32>
    // GQA: 8 query heads, 2 K/V heads; dK and dV are [2, 2, 16, 8].
    %gq, %gk, %gv = tsr.attention_grad %q4, %k4, %v4, %o4, %lse4, %do4
        {causal = true, scale = 0.125 : f32}
        : tensor<2x8x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>,
          tensor<2x8x16x8xf32>, tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$query, Tsr_StaticTensor:$key,
                       Tsr_StaticTensor:$value, Tsr_StaticTensor:$output,
                       Tsr_StaticTensor:$lse, Tsr_StaticTensor:$grad,
                       Optional<Tsr_StaticTensor>:$mask, F32Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "false">:$causal,
                       OptionalAttr<I64Attr>:$ring_size);
  let results = (outs Tsr_StaticTensor:$query_grad, Tsr_StaticTensor:$key_grad,
                      Tsr_StaticTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $output `,` $lse `,` $grad (`,` $mask^)?
    attr-dict `:` type($query) `,` type($key) `,` type($value) `,`
    type($output) `,` type($lse) (`,` type($mask)^)?
  }];
}

def Tsr_DropoutOp : Tsr_ContractOp<"dropout", [Tsr_IdentityInInference,
    AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<Tsr_CostOpInterface, ["getFlops"]>,
    DeclareOpInterfaceMethods<Tsr_MixedPrecisionOpInterface,
                              ["keepsF32Operand"]>]> {
  let summary = "Training-mode dropout with a counter-based (Philox) mask.";
  let description = [{
    Inverted dropout (Srivastava et al., 2014, as `torch.nn.Dropout` in
    training mode and ONNX `Dropout` with `training_mode` true): every
    element is zeroed with probability `ratio` and the kept ones are scaled
    by 1/(1 − ratio). The mask is not stored: element i of the GLOBAL tensor
    (its row-major index, whatever the plan) is kept when the 24-bit uniform
    from Philox-4x32-10 (Salmon et al., SC'11, "Parallel Random Numbers: As
    Easy as 1, 2, 3"; cuRAND's and PyTorch's CUDA generator) is at least
    ceil(ratio · 2^24), with

        counter = {lo32(i/4), hi32(i/4), step, op_id},
        key     = {lo32(seed), hi32(seed)},

    and word i mod 4 of the output (common/random/Philox.h). `seed` is the
    run's `tessera-partition --seed`, `op_id` numbers the model's dropout
    nodes in import order, and `step` (a 0-D f32 tensor, an integer value
    below 2^24) is the training step: the replicated optimizer state
    "rng.step" that the step increments. So every dp, tp, sp (Megatron-SP,
    Ulysses, ring) and pp/micro-batch plan draws exactly the serial run's
    mask: each rank computes the global index of each local element.

    `layout` is set by `tsr-sharding-partition` (the op's sharding rule
    records it) and absent before: the operand's split as the kernel walks
    it. Per dimension: the number n of its sub-factors, then per sub-factor
    its global size, the number of grid axes splitting it and those axes
    (major to minor); the rank holds the block `c·size/|axes|` of each
    sub-factor (c its coordinates on the axes, row-major), and the
    micro-batch axis of a pipelined program is the last grid axis, whose
    coordinate is the running micro-batch. Absent: the operand is global.

    Gradient: `tsr.dropout` of the cotangent with the same `step`, `seed` and
    `op_id`, i.e. the same mask and the same 1/(1 − ratio) scale, recomputed
    rather than saved (no mask tensor is kept between forward and
    backward). Sharding rule: elementwise (any split passes through; linear
    in `input`, so a partial sum passes through unreduced). Cost: 2 FLOP per
    element plus the Philox rounds (about 1 integer multiply-add per element
    per round; counted as 12 FLOP per element). In an evaluation program the
    op is the identity (trait `IdentityInInference`). Mixed precision: the
    input and result follow the plan's precision, `step` stays f32.

    Errors: `ratio` outside [0, 1); `step` not a 0-D f32 tensor; a non-float
    `input`; `op_id` outside [0, 2^32); a malformed `layout` (not one entry
    per dimension, a sub-factor size < 1, a negative grid axis, a list that
    ends early or has entries left over).

    ```mlir
    %y = tsr.dropout %x, %step {ratio = 1.000000e-01 : f32, seed = 1234,
                                op_id = 0} : tensor<8x16x64xf32>, tensor<f32>
    // After partition, batch over axis 0 (dp, 2 ranks), micro-batches over
    // the last axis 2 (4), the sequence striped over axis 1 (2 stripes):
    %y = tsr.dropout %x, %step {ratio = 1.000000e-01 : f32, seed = 1234,
        op_id = 0, layout = array<i64: 1, 8, 2, 0, 2,
                                      2, 8, 0, 2, 1, 1,
                                      1, 64, 0>}
        : tensor<1x8x64xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$step,
                       F32Attr:$ratio, I64Attr:$seed, I64Attr:$op_id,
                       OptionalAttr<DenseI64ArrayAttr>:$layout);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat =
      "$input `,` $step attr-dict `:` type($input) `,` type($step)";
}

def Tsr_ReluGradOp : Tsr_ContractOp<"relu_grad",
    [AllTypesMatch<["input", "grad", "result"]>]> {
  let summary = "Gradient of `tsr.relu`: grad where input > 0, else 0.";
  let description = [{
    ```mlir
    %dx = tsr.relu_grad %x, %dy : tensor<8x16x256xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$grad);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input `,` $grad attr-dict `:` type($result)";
}

def Tsr_GeluGradOp : Tsr_ContractOp<"gelu_grad",
    [AllTypesMatch<["input", "grad", "result"]>]> {
  let summary = "Gradient of `tsr.gelu` (same `approximate`).";
  let description = [{
    ```mlir
    %dx = tsr.gelu_grad %x, %dy {approximate = "none"} : tensor<8x16x256xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$grad,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input `,` $grad attr-dict `:` type($result)";
}

def Tsr_SiluGradOp : Tsr_ContractOp<"silu_grad",
    [AllTypesMatch<["input", "grad", "result"]>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getTranscendentals"]>]> {
  let summary = "Gradient of `tsr.silu`: grad · s · (1 + x · (1 − s)).";
  let description = [{
    With s = sigmoid(x) of the forward's input x: `result = grad · s ·
    (1 + x · (1 − s))`, PyTorch's silu_backward formula. Finite for every
    finite x (no overflow: s saturates to 0 or 1); at x = +inf and -inf the
    kernels return the limits grad · 1 and grad · 0 (PyTorch: NaN). Cost:
    7 FLOP and one exp per element. Errors: a non-float element type.

    ```mlir
    %dx = tsr.silu_grad %x, %dy : tensor<8x16x256xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$grad);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = "$input `,` $grad attr-dict `:` type($result)";
}

def Tsr_CrossEntropyOp : Tsr_ContractOp<"cross_entropy",
    [DeclareOpInterfaceMethods<Tsr_CostOpInterface, ["getKernelMessages"]>,
     DeclareOpInterfaceMethods<Tsr_MixedPrecisionOpInterface,
                               ["keepsF32Result"]>]> {
  let summary = "Summed softmax cross-entropy (natural log).";
  let description = [{
    `logits` is [N, V] f32, `labels` [N] i64; the result is the f32 scalar
    Σ_n −log softmax(logits_n)[labels_n]. The training step divides by the
    global token count to get the mean loss. Sharding: N splits into a
    partial sum. V may be split (Megatron-LM's vocab-parallel cross-entropy,
    Shoeybi et al. 2019): the local op then carries `grid_axes` and its
    kernel all-reduces over them the row max (MAX) and the sums of
    exponentials and target logits (SUM), so the loss is complete over those
    axes and the [N, V] logits are never gathered. Labels index the full
    vocabulary.

    ```mlir
    %l = tsr.cross_entropy %logits, %labels
        : tensor<128x256xf32>, tensor<128xi64> -> tensor<f32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$logits, TensorOf<[I64]>:$labels);
  let results = (outs 0DTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels) `->`
    type($result)
  }];
}

def Tsr_CrossEntropyGradOp : Tsr_ContractOp<"cross_entropy_grad",
    [AllTypesMatch<["logits", "result"]>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface, ["getKernelMessages"]>,
     DeclareOpInterfaceMethods<Tsr_MixedPrecisionOpInterface,
                               ["keepsF32Operand", "getLossSeedOperand"]>]> {
  let summary = "Gradient of `tsr.cross_entropy`: (softmax − onehot)·grad.";
  let description = [{
    With `grid_axes` (vocab parallelism, see `tsr.cross_entropy`) the
    logits and the result are the rank's vocabulary columns; the kernel
    recomputes the row max and sum of exponentials with the same
    all-reduces.

    ```mlir
    %d = tsr.cross_entropy_grad %logits, %labels, %dl
        : tensor<128x256xf32>, tensor<128xi64>, tensor<f32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$logits, TensorOf<[I64]>:$labels,
                       0DTensorOf<[F32]>:$grad);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad attr-dict `:` type($logits) `,`
    type($labels) `,` type($grad)
  }];
}

//===----------------------------------------------------------------------===//
// Optimizer updates (fused: one kernel per parameter)
//===----------------------------------------------------------------------===//

def Tsr_SgdUpdateOp : Tsr_ContractOp<"sgd_update",
    [AllTypesMatch<["param", "grad", "result"]>,
     DeclareOpInterfaceMethods<Tsr_OptimizerUpdateOpInterface>]> {
  let summary = "torch.optim.SGD step without momentum.";
  let description = [{
    `g' = grad + weight_decay·param; result = param − lr·g'`, exactly
    torch.optim.SGD (momentum 0). `lr` is this step's learning rate, an f32
    0-D tensor read at run time (normally the @train_step argument with
    `tsr.role = "hyper"`, `tsr.name = "lr"`, which the runtime sets before
    every step from the LR schedule), so a schedule needs no recompilation;
    its sharding is replicated. `weight_decay` (>= 0) is per parameter:
    `tsr-build-train-step exclude-weight-decay=1` sets 0 for biases and 1-D
    parameters (Megatron-LM's no-weight-decay group).

    ```mlir
    %p1 = tsr.sgd_update %p, %g, %lr {weight_decay = 0.0 : f32}
        : tensor<64x64xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$param, Tsr_StaticTensor:$grad,
                       Tsr_F32Scalar:$lr, F32Attr:$weight_decay);
  let results = (outs Tsr_StaticTensor:$result);
  let assemblyFormat =
      "$param `,` $grad `,` $lr attr-dict `:` type($result)";
}

def Tsr_AdamwUpdateOp : Tsr_ContractOp<"adamw_update",
    [AllTypesMatch<["param", "grad", "exp_avg", "exp_avg_sq", "new_param",
                    "new_exp_avg", "new_exp_avg_sq"]>,
     DeclareOpInterfaceMethods<Tsr_OptimizerUpdateOpInterface>]> {
  let summary = "torch.optim.AdamW step (Loshchilov & Hutter, 2019).";
  let description = [{
    With t = `step` (f32 scalar, already incremented): p ← p·(1 − lr·wd);
    m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²; p ← p − lr/(1−β1^t) ·
    m / (sqrt(v)/sqrt(1−β2^t) + eps). Exactly torch.optim.AdamW
    (amsgrad=False). `lr` is this step's learning rate, an f32 0-D tensor
    read at run time (as for `tsr.sgd_update`: the "hyper" argument "lr",
    replicated); `weight_decay` is per parameter (0 for Megatron-LM's
    no-weight-decay group).

    ```mlir
    %p1, %m1, %v1 = tsr.adamw_update %p, %g, %m, %v, %t, %lr
        {beta1 = 0.9 : f32, beta2 = 0.999 : f32,
         eps = 1.0e-08 : f32, weight_decay = 0.01 : f32}
        : tensor<64x64xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$param, Tsr_StaticTensor:$grad,
                       Tsr_StaticTensor:$exp_avg, Tsr_StaticTensor:$exp_avg_sq,
                       0DTensorOf<[F32]>:$step, Tsr_F32Scalar:$lr,
                       F32Attr:$beta1,
                       F32Attr:$beta2, F32Attr:$eps, F32Attr:$weight_decay);
  let results = (outs Tsr_StaticTensor:$new_param,
                      Tsr_StaticTensor:$new_exp_avg,
                      Tsr_StaticTensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $step `,` $lr attr-dict
    `:`
    type($param) `,` type($step)
  }];
}

//===----------------------------------------------------------------------===//
// Fused linear layers (tsr-fuse-linear; appear only after autodiff)
//===----------------------------------------------------------------------===//

def Tsr_LinearOp : Tsr_ContractOp<"linear",
    [DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getGemmShapes",
                                "getTranscendentals"]>]> {
  let summary = "GEMM with its bias and activation applied in the epilogue.";
  let description = [{
    `preactivation = lhs · rhs + bias` (the product exactly as `tsr.matmul`
    with the same `transpose_lhs` / `transpose_rhs`, `bias` of shape [N]
    added to every row) and `result = activation(preactivation)`, in one
    kernel: the bias and the activation are applied to each block of the
    GEMM's output while it is in cache (CPU: OpenBLAS sgemm on a block of
    rows whose output fits in L2, then the epilogue on that block; CUDA:
    cuBLASLt's BIAS / GELU_BIAS / GELU_AUX_BIAS epilogues), instead of
    writing the product and reading it back for a broadcast, an add and an
    activation kernel. The cuBLASLt / Megatron-LM "fused bias-GeLU".

    `activation` is "none", "gelu" (x·Φ(x), erf form), "gelu_tanh"
    (PyTorch's approximate="tanh"), "relu" or "silu", with exactly the
    numerics of `tsr.gelu`, `tsr.relu` and `tsr.silu`. The optional second
    result `preactivation` is returned when the backward reads the
    activation's input (gelu_grad, relu_grad and silu_grad take it); it
    needs an activation other than "none".

    Created by `tsr-fuse-linear` from `tsr.add(tsr.matmul, tsr.broadcast
    (bias))` and an optional following activation, after autodiff, so it
    has no gradient rule (asking for one is an error).

    Sharding: as `tsr.matmul` (batch, M and N split freely; `bias` follows
    N), except that K must stay whole: the bias and the activation are not
    linear, so the op never produces a partial sum. Cost: the GEMM's
    2·batch·M·N·K FLOP plus the epilogue's per element (1 for the bias;
    the activation's: gelu 4, gelu_tanh 8, relu 1, silu 4, and one
    transcendental for gelu, gelu_tanh and silu); bytes are the operands
    and results once: the product is never written and read back.

    Errors: the matmul shape errors of `tsr.matmul`; `bias` not of shape
    [N] or of another element type; an unknown `activation`; a
    `preactivation` result without an activation or not of the result's
    type; a non-float element type.

    ```mlir
    %y, %pre = tsr.linear %x, %w, %b {activation = "gelu_tanh",
                                      transpose_rhs = true}
        : tensor<8x64x64xf32>, tensor<256x64xf32>, tensor<256xf32>
        -> tensor<8x64x256xf32>, tensor<8x64x256xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$lhs, Tsr_StaticTensor:$rhs,
                       Tsr_StaticTensor:$bias,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs,
                       DefaultValuedStrAttr<StrAttr, "none">:$activation);
  let results = (outs Tsr_StaticTensor:$result,
                      Optional<Tsr_StaticTensor>:$preactivation);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $bias attr-dict `:` type($lhs) `,` type($rhs) `,`
    type($bias) `->` type($result) (`,` type($preactivation)^)?
  }];
  let extraClassDeclaration = [{
    /// The result type of `lhs · rhs` (the matmul rules of tsr.matmul), or
    /// failure with a diagnostic at `loc` when given.
    static ::mlir::FailureOr<::mlir::RankedTensorType>
    inferResultType(std::optional<::mlir::Location> loc, ::mlir::Type lhs,
                    ::mlir::Type rhs, bool transposeLhs, bool transposeRhs);
    /// True for the activations the kernels know ("none", "gelu",
    /// "gelu_tanh", "relu", "silu").
    static bool isKnownActivation(::llvm::StringRef activation);
  }];
}

def Tsr_BiasActivationGradOp : Tsr_ContractOp<"bias_activation_grad",
    [AllTypesMatch<["input", "grad", "input_grad"]>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface,
                               ["getFlops", "getTranscendentals"]>]> {
  let summary = "Activation gradient and bias gradient of a linear layer in "
                "one pass.";
  let description = [{
    With x = `input` (the activation's input, `tsr.linear`'s
    `preactivation`) and dy = `grad` of shape [..., N]:
    `input_grad = dy · activation'(x)` (exactly `tsr.gelu_grad`,
    `tsr.relu_grad` or `tsr.silu_grad`) and `bias_grad[n] = Σ over every
    leading index of input_grad[..., n]` (the `tsr.reduce_sum` over all
    dimensions but the last), computed in one pass over dy and x: each
    element's gradient is added to the column sum while it is in a
    register (the kernels accumulate the sums in f64 on the CPU). The
    backward half of the fused bias-activation epilogue (cuBLASLt's
    DGELU_BGRAD).

    `activation` is "gelu", "gelu_tanh", "relu" or "silu". Created by
    `tsr-fuse-linear` from a gradient op followed by that reduce_sum, after
    autodiff, so it has no gradient rule.

    Sharding: every dimension splits freely (the elementwise rule); the
    leading dimensions are reductions for `bias_grad`, which is then a
    partial sum over their axes (as layer_norm_grad's bias gradient).
    Cost: the activation gradient's FLOP per element (gelu 9, gelu_tanh
    14, relu 1, silu 7) plus 1 for the sum, and its transcendentals per
    element (gelu 2: erf and exp; gelu_tanh 1; relu 0; silu 1); bytes are x, dy, input_grad
    and bias_grad once.

    Errors: an unknown activation (or "none"); rank 0; `bias_grad` not of
    shape [N] and the input's element type; a non-float element type.

    ```mlir
    %dx, %db = tsr.bias_activation_grad %x, %dy {activation = "gelu_tanh"}
        : tensor<8x64x256xf32> -> tensor<256xf32>
    ```
  }];
  let arguments = (ins Tsr_StaticTensor:$input, Tsr_StaticTensor:$grad,
                       StrAttr:$activation);
  let results = (outs Tsr_StaticTensor:$input_grad,
                      Tsr_StaticTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $grad attr-dict `:` type($input) `->` type($bias_grad)
  }];
}

//===----------------------------------------------------------------------===//
// Multi-tensor optimizer updates (tsr-fuse-optimizer): one kernel for the
// updates of many parameters that share their hyper-parameters
//===----------------------------------------------------------------------===//

def Tsr_MultiSgdUpdateOp : Tsr_ContractOp<"multi_sgd_update",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface, ["getMeasuredUnits"]>]> {
  let summary = "`tsr.sgd_update` of N parameters in one kernel.";
  let description = [{
    N `tsr.sgd_update`s with the same `weight_decay` and learning-rate
    operand as one op, as `tsr-fuse-optimizer` forms it on the partitioned
    step (local shapes): `tensors` holds the N parameters, then their N
    gradients (gradient i has parameter i's type); result i is parameter i
    updated exactly as `tsr.sgd_update` updates it (bit for bit: the kernel
    runs the per-tensor arithmetic over each tensor in turn, in one call, as
    NVIDIA apex's `multi_tensor_apply` and PyTorch's `foreach`/`fused`
    optimizers do). N >= 1; the parameters may differ in shape. The memory
    plan writes result i in place of parameter i. The result types are
    inferred (result i: parameter i's type).

    It appears only after autodiff, so it has no gradient rule. Sharding:
    parameter i, gradient i and result i share their factors, each kept
    whole (the factor model cannot express that result i does not depend
    on parameter j: a split parameter would make the other results
    partial), and `lr` is a replicated scalar; the op is formed after
    partition, on local shapes, so nothing normally propagates through it.
    Cost: the sum of the N updates' (every operand and result once); a
    calibration measures it per parameter element (getMeasuredUnits: the
    N parameters' elements).

    ```mlir
    %p0n, %p1n = tsr.multi_sgd_update [%p0, %p1, %g0, %g1], %lr
        {weight_decay = 0.0 : f32}
        : tensor<64x64xf32>, tensor<64xf32>, tensor<64x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Variadic<Tsr_StaticTensor>:$tensors, Tsr_F32Scalar:$lr,
                       F32Attr:$weight_decay);
  let results = (outs Variadic<Tsr_StaticTensor>:$results);
  let assemblyFormat = [{
    `[` $tensors `]` `,` $lr attr-dict `:` type($tensors)
  }];
  let extraClassDeclaration = [{
    /// N, the number of parameters.
    unsigned getNumParams() { return getNumResults(); }
    ::mlir::OperandRange getParams() {
      return getTensors().take_front(getNumParams());
    }
    ::mlir::OperandRange getGrads() {
      return getTensors().drop_front(getNumParams());
    }
  }];
}

def Tsr_MultiAdamwUpdateOp : Tsr_ContractOp<"multi_adamw_update",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>,
     DeclareOpInterfaceMethods<Tsr_CostOpInterface, ["getMeasuredUnits"]>]> {
  let summary = "`tsr.adamw_update` of N parameters in one kernel.";
  let description = [{
    N `tsr.adamw_update`s with the same `beta1`, `beta2`, `eps`,
    `weight_decay`, step operand and learning-rate operand as one op, as
    `tsr-fuse-optimizer` forms it on the partitioned step (local shapes):
    `tensors` holds the N parameters, their N gradients, N `exp_avg` and N
    `exp_avg_sq` (entry i of each group has parameter i's type); the
    results are the N updated parameters, then the N updated `exp_avg`,
    then the N updated `exp_avg_sq`, each exactly what `tsr.adamw_update`
    computes for parameter i (bit for bit: the bias corrections are
    computed once and the per-tensor loop runs over each tensor in turn, as
    NVIDIA apex's `multi_tensor_apply` and PyTorch's `foreach`/`fused`
    AdamW do). N >= 1; the parameters may differ in shape. The memory plan
    writes each result in place of the operand it replaces. The result
    types are inferred (parameter i's type for results i, N + i, 2N + i).

    It appears only after autodiff, so it has no gradient rule. Sharding:
    the four operands and three results of parameter i share their
    factors, each kept whole (as for `tsr.multi_sgd_update`: formed after
    partition, on local shapes); `step` and `lr` are replicated scalars.
    Cost: the sum of the N updates' (every operand and result once; the
    two scalars once instead of N times); a calibration measures it per
    parameter element (getMeasuredUnits).

    ```mlir
    %p, %m, %v = tsr.multi_adamw_update [%p0, %g0, %m0, %v0], %t, %lr
        {beta1 = 0.9 : f32, beta2 = 0.999 : f32,
         eps = 1.0e-08 : f32, weight_decay = 0.01 : f32}
        : tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Variadic<Tsr_StaticTensor>:$tensors, Tsr_F32Scalar:$step,
                       Tsr_F32Scalar:$lr, F32Attr:$beta1, F32Attr:$beta2,
                       F32Attr:$eps, F32Attr:$weight_decay);
  let results = (outs Variadic<Tsr_StaticTensor>:$results);
  let assemblyFormat = [{
    `[` $tensors `]` `,` $step `,` $lr attr-dict `:` type($tensors)
  }];
  let extraClassDeclaration = [{
    /// N, the number of parameters.
    unsigned getNumParams() { return getNumResults() / 3; }
    /// Operand group `k` (0 params, 1 grads, 2 exp_avg, 3 exp_avg_sq).
    ::mlir::OperandRange getGroup(unsigned k) {
      return getTensors().slice(k * getNumParams(), getNumParams());
    }
  }];
}

#endif // TESSERA_TSR_OPS

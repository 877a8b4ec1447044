//===- ElementwiseProgram.h - tsr.fused_elementwise's program --*- C++ -*-===//
//
// The program of a fused elementwise kernel (`tsr.fused_elementwise`, made
// by tsr-fuse-elementwise; the `fused_elementwise` kernel of every backend):
// a register bytecode over "slots". Slots 0 .. numInputs-1 hold the
// kernel's operands (each broadcast to the iteration shape, numpy-style,
// trailing dimensions aligned); instruction k writes slot numInputs + k
// from up to three earlier slots. The kernel's results are the slots listed
// in `outputs`. Every slot but a `select` condition is f32; a condition is
// an i1 operand.
//
// Each opcode is the named tsr op's (or its kernel's) arithmetic, element by
// element, in the same f32 operation order, so a fused chain gives the
// unfused kernels' values bit for bit.
//
// Shared by the tsr dialect (verifier, cost), the runtime's kernel decoder
// and the CPU and CUDA kernels: plain C++, no LLVM, usable in device code
// for the enum and the small tables.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMMON_FUSION_ELEMENTWISEPROGRAM_H
#define TESSERA_COMMON_FUSION_ELEMENTWISEPROGRAM_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {
namespace fusion {

/// The opcodes; their names are the tsr ops' mnemonics (gelu with
/// approximate = "tanh" is "gelu_tanh", its gradient "gelu_tanh_grad").
enum class ElemOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Tanh,
  Erf,
  Relu,
  Sigmoid,
  Silu,
  Gelu,
  GeluTanh,
  Select,       ///< (condition: i1 operand, true value, false value)
  ReluGrad,     ///< (input, grad)
  GeluGrad,     ///< (input, grad)
  GeluTanhGrad, ///< (input, grad)
  SiluGrad,     ///< (input, grad)
};

/// Facts about one opcode: its name, operand count, and its cost per
/// element as the unfused op's CostOpInterface counts it (FLOPs and
/// transcendental evaluations; dialects/tsr/CostRules.cpp).
struct ElemOpInfo {
  std::string_view name;
  int arity;
  int flops;
  int transcendentals;
};

inline constexpr ElemOpInfo kElemOpInfo[] = {
    {"add", 2, 1, 0},       {"sub", 2, 1, 0},
    {"mul", 2, 1, 0},       {"div", 2, 1, 0},
    {"pow", 2, 1, 1},       {"max", 2, 1, 0},
    {"neg", 1, 1, 0},       {"exp", 1, 1, 1},
    {"log", 1, 1, 1},       {"sqrt", 1, 1, 0},
    {"rsqrt", 1, 1, 0},     {"tanh", 1, 1, 1},
    {"erf", 1, 1, 1},       {"relu", 1, 1, 0},
    {"sigmoid", 1, 3, 1},   {"silu", 1, 4, 1},
    {"gelu", 1, 1, 1},      {"gelu_tanh", 1, 1, 1},
    {"select", 3, 1, 0},    {"relu_grad", 2, 1, 0},
    {"gelu_grad", 2, 1, 2}, {"gelu_tanh_grad", 2, 1, 2},
    {"silu_grad", 2, 7, 1},
};

inline constexpr int kNumElemOps =
    static_cast<int>(sizeof(kElemOpInfo) / sizeof(kElemOpInfo[0]));

inline const ElemOpInfo &elemOpInfo(ElemOp op) {
  return kElemOpInfo[static_cast<int>(op)];
}

/// The opcode called `name`, or nothing.
inline std::optional<ElemOp> elemOpNamed(std::string_view name) {
  for (int i = 0; i < kNumElemOps; ++i)
    if (kElemOpInfo[i].name == name)
      return static_cast<ElemOp>(i);
  return std::nullopt;
}

/// Limits of one program (what the CUDA kernel keeps in registers and
/// kernel parameters): operands, instructions, results, iteration rank.
inline constexpr int kMaxFusedInputs = 16;
inline constexpr int kMaxFusedInstrs = 48;
inline constexpr int kMaxFusedOutputs = 16;
inline constexpr int kMaxFusedRank = 8;

/// One instruction: `op` of the slots `args[0 .. arity)`.
struct ElemInstr {
  ElemOp op = ElemOp::Add;
  int32_t args[3] = {0, 0, 0};
};

/// A decoded, validated program with its operands' index maps.
struct ElementwiseProgram {
  int32_t numInputs = 0;
  std::vector<ElemInstr> instrs;
  std::vector<int32_t> outputs;
  /// The iteration shape (every result's shape).
  std::vector<int64_t> shape;
  /// Per operand: its element stride along each iteration dimension (0
  /// where the operand is broadcast), and its element count.
  std::vector<std::vector<int64_t>> inputStrides;
  std::vector<int64_t> inputNumel;
  /// Per operand: true for an i1 `select` condition.
  std::vector<bool> inputIsMask;

  int32_t numSlots() const {
    return numInputs + static_cast<int32_t>(instrs.size());
  }
};

/// Builds and validates a program: `ops` (opcode names), `args` (each
/// instruction's slots, arity by arity, concatenated), `outputs` (the
/// result slots), the operands' shapes and whether each is an i1 mask, and
/// the iteration shape. Returns the first problem as one line, or an empty
/// string with `p` filled. Checked: known opcodes, len(args) = the sum of
/// the arities, every argument an earlier slot, a `select` condition an i1
/// operand and every other argument an f32 slot, outputs distinct computed
/// slots, operands broadcastable to the shape (trailing dimensions aligned,
/// each 1 or equal), and the limits above.
inline std::string buildElementwiseProgram(
    const std::vector<std::string_view> &ops, const std::vector<int64_t> &args,
    const std::vector<int64_t> &outputs,
    const std::vector<std::vector<int64_t>> &inputShapes,
    const std::vector<bool> &inputIsMask, const std::vector<int64_t> &shape,
    ElementwiseProgram &p) {
  auto str = [](int64_t v) { return std::to_string(v); };
  p = ElementwiseProgram();
  int64_t nIn = static_cast<int64_t>(inputShapes.size());
  if (nIn > kMaxFusedInputs)
    return "has " + str(nIn) + " operands, more than " + str(kMaxFusedInputs);
  if (ops.empty())
    return "has an empty program";
  if (static_cast<int64_t>(ops.size()) > kMaxFusedInstrs)
    return "has " + str(ops.size()) + " instructions, more than " +
           str(kMaxFusedInstrs);
  if (outputs.empty() ||
      static_cast<int64_t>(outputs.size()) > kMaxFusedOutputs)
    return "must have 1 to " + str(kMaxFusedOutputs) + " results, got " +
           str(outputs.size());
  if (static_cast<int64_t>(shape.size()) > kMaxFusedRank)
    return "has rank " + str(shape.size()) + ", more than " +
           str(kMaxFusedRank);
  p.numInputs = static_cast<int32_t>(nIn);
  p.shape = shape;
  size_t at = 0;
  for (size_t k = 0; k < ops.size(); ++k) {
    std::optional<ElemOp> op = elemOpNamed(ops[k]);
    if (!op)
      return "instruction " + str(k) + " has unknown opcode '" +
             std::string(ops[k]) + "'";
    ElemInstr instr;
    instr.op = *op;
    int arity = elemOpInfo(*op).arity;
    if (at + arity > args.size())
      return "'args' has " + str(args.size()) +
             " entries, too few for the instructions";
    for (int j = 0; j < arity; ++j) {
      int64_t slot = args[at++];
      int64_t self = nIn + static_cast<int64_t>(k);
      if (slot < 0 || slot >= self)
        return "instruction " + str(k) + " ('" + std::string(ops[k]) +
               "') reads slot " + str(slot) + ", not an earlier slot in [0, " +
               str(self) + ")";
      bool mask = slot < nIn && inputIsMask[slot];
      bool wantMask = *op == ElemOp::Select && j == 0;
      if (mask != wantMask)
        return "instruction " + str(k) + " ('" + std::string(ops[k]) +
               "') argument " + str(j) + " (slot " + str(slot) + ") must be " +
               (wantMask ? "an i1 operand" : "an f32 value");
      instr.args[j] = static_cast<int32_t>(slot);
    }
    p.instrs.push_back(instr);
  }
  if (at != args.size())
    return "'args' has " + str(args.size()) + " entries, expected " + str(at);
  for (size_t i = 0; i < outputs.size(); ++i) {
    int64_t slot = outputs[i];
    if (slot < nIn || slot >= p.numSlots())
      return "output " + str(i) + " is slot " + str(slot) +
             ", not a computed slot in [" + str(nIn) + ", " +
             str(p.numSlots()) + ")";
    for (size_t j = 0; j < i; ++j)
      if (outputs[j] == slot)
        return "slot " + str(slot) + " is output twice";
    p.outputs.push_back(static_cast<int32_t>(slot));
  }
  size_t rank = shape.size();
  for (int64_t i = 0; i < nIn; ++i) {
    const std::vector<int64_t> &in = inputShapes[i];
    std::vector<int64_t> strides(rank, 0);
    bool ok = in.size() <= rank;
    int64_t stride = 1, numel = 1;
    for (size_t d = 0; ok && d < in.size(); ++d) {
      size_t od = rank - 1 - d;
      int64_t size = in[in.size() - 1 - d];
      ok = size == 1 || size == shape[od];
      if (size != 1)
        strides[od] = stride;
      stride *= size;
      numel *= size;
    }
    if (!ok)
      return "operand " + str(i) + " does not broadcast to the result shape";
    p.inputStrides.push_back(strides);
    p.inputNumel.push_back(numel);
    p.inputIsMask.push_back(inputIsMask[i]);
  }
  return std::string();
}

} // namespace fusion
} // namespace tessera

#endif // TESSERA_COMMON_FUSION_ELEMENTWISEPROGRAM_H

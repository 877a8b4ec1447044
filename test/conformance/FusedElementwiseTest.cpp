//===- FusedElementwiseTest.cpp - fused_elementwise on every backend ------===//
//
// The fused kernel against the unfused composition ON THE SAME BACKEND:
// every opcode, broadcast operands (a bias, a scalar, a broadcast i1
// condition), several results, and sizes past one CPU tile (512) with a
// remainder; f32 results must be bitwise equal to the unfused kernels'
// (same per-element operation order). Load errors with the text both
// backends must give.
//
//===----------------------------------------------------------------------===//

#include "Harness.h"

#include <functional>
#include <string>
#include <vector>

using namespace tessera::conformance;

namespace {

TESSERA_CONFORMANCE_FAMILY(FusedElementwiseTest, "fused_elementwise",
                           "fused_elementwise");

/// One instruction of a test program: the opcode, the unfused kernel that
/// computes it (with its attributes), and its argument slots.
struct Step {
  const char *opcode;
  const char *kernel;
  const char *attrs;
  std::vector<int64_t> args;
};

std::string fusedAttrs(const std::vector<Step> &steps,
                       const std::vector<int64_t> &outputs) {
  std::string ops, args, outs;
  for (const Step &s : steps) {
    ops += std::string(ops.empty() ? "" : ", ") + "\"" + s.opcode + "\"";
    for (int64_t a : s.args)
      args += (args.empty() ? "" : ", ") + std::to_string(a);
  }
  for (int64_t o : outputs)
    outs += (outs.empty() ? "" : ", ") + std::to_string(o);
  return "ops = [" + ops + "], args = array<i64: " + args +
         ">, outputs = array<i64: " + outs + ">";
}

/// Runs `steps` fused, and one kernel at a time (operands broadcast first
/// by the `broadcast` kernel), and expects every output bitwise equal.
void checkAgainstUnfused(
    const std::vector<Tensor> &inputs, const std::vector<int64_t> &shape,
    const std::vector<Step> &steps, const std::vector<int64_t> &outputs,
    const std::function<std::vector<Tensor>(
        const char *, const std::string &, const std::vector<Tensor> &,
        const std::vector<TensorType> &)> &run) {
  size_t nIn = inputs.size();
  std::vector<TensorType> outTypes(outputs.size(),
                                   TensorType{DType::F32, shape});
  std::vector<Tensor> fused =
      run("fused_elementwise", fusedAttrs(steps, outputs), inputs, outTypes);
  ASSERT_EQ(fused.size(), outputs.size());
  // The unfused composition.
  std::vector<Tensor> slots;
  for (const Tensor &in : inputs) {
    if (in.shape() == shape) {
      slots.push_back(in);
      continue;
    }
    std::vector<Tensor> b =
        run("broadcast", "", {in}, {TensorType{in.dtype(), shape}});
    ASSERT_EQ(b.size(), 1u);
    slots.push_back(b[0]);
  }
  for (const Step &s : steps) {
    SCOPED_TRACE(s.opcode);
    std::vector<Tensor> operands;
    for (int64_t a : s.args)
      operands.push_back(slots[a]);
    std::vector<Tensor> r =
        run(s.kernel, s.attrs, operands, {TensorType{DType::F32, shape}});
    ASSERT_EQ(r.size(), 1u);
    slots.push_back(r[0]);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i) + " (slot " +
                 std::to_string(outputs[i]) + ", " +
                 steps[outputs[i] - nIn].opcode + ")");
    expectBitEqual(fused[i], slots[outputs[i]]);
  }
}

#define RUN_FN                                                                 \
  [this](const char *k, const std::string &a, const std::vector<Tensor> &in,   \
         const std::vector<TensorType> &out) { return run(k, a, in, out); }

// The common case: a scale and a bias broadcast into a chain, with an
// intermediate that is also a result. 3·7·37 = 777 elements: one full CPU
// tile and a remainder.
TEST_P(FusedElementwiseTest, BiasScaleChainEqualsUnfused) {
  std::vector<int64_t> shape = {3, 7, 37};
  Tensor x = randomF32(shape, 11, -3.0f, 3.0f);
  Tensor scale = randomF32({}, 12, 0.5f, 2.0f);
  Tensor bias = randomF32({37}, 13);
  Tensor r = randomF32(shape, 14);
  // slots: 0 x, 1 scale, 2 bias, 3 r
  std::vector<Step> steps = {
      {"mul", "mul", "", {0, 1}},                           // 4
      {"add", "add", "", {4, 2}},                           // 5
      {"gelu_tanh", "gelu", "approximate = \"tanh\"", {5}}, // 6
      {"add", "add", "", {6, 3}},                           // 7
  };
  checkAgainstUnfused({x, scale, bias, r}, shape, steps, {7, 4}, RUN_FN);
}

// Every opcode once, on operands in their domains (positive where log,
// sqrt, rsqrt and pow need it), a [1, 300] row and a broadcast [2, 1] i1
// condition.
TEST_P(FusedElementwiseTest, EveryOpcodeEqualsUnfused) {
  std::vector<int64_t> shape = {2, 300};
  Tensor pos = randomF32(shape, 21, 0.2f, 2.5f);
  Tensor x = randomF32(shape, 22, -4.0f, 4.0f);
  Tensor row = randomF32({1, 300}, 23, -1.5f, 1.5f);
  Tensor cond = i1({2, 1}, {1, 0});
  // slots: 0 pos, 1 x, 2 row, 3 cond
  std::vector<Step> steps = {
      {"add", "add", "", {1, 2}},                                        // 4
      {"sub", "sub", "", {4, 0}},                                        // 5
      {"mul", "mul", "", {5, 2}},                                        // 6
      {"div", "div", "", {6, 0}},                                        // 7
      {"pow", "pow", "", {0, 2}},                                        // 8
      {"max", "max", "", {7, 1}},                                        // 9
      {"neg", "neg", "", {9}},                                           // 10
      {"exp", "exp", "", {2}},                                           // 11
      {"log", "log", "", {0}},                                           // 12
      {"sqrt", "sqrt", "", {0}},                                         // 13
      {"rsqrt", "rsqrt", "", {0}},                                       // 14
      {"tanh", "tanh", "", {1}},                                         // 15
      {"erf", "erf", "", {1}},                                           // 16
      {"relu", "relu", "", {1}},                                         // 17
      {"sigmoid", "sigmoid", "", {1}},                                   // 18
      {"silu", "silu", "", {1}},                                         // 19
      {"gelu", "gelu", "", {1}},                                         // 20
      {"gelu_tanh", "gelu", "approximate = \"tanh\"", {1}},              // 21
      {"select", "select", "", {3, 1, 10}},                              // 22
      {"relu_grad", "relu_grad", "", {1, 2}},                            // 23
      {"gelu_grad", "gelu_grad", "", {1, 4}},                            // 24
      {"gelu_tanh_grad", "gelu_grad", "approximate = \"tanh\"", {1, 4}}, // 25
      {"silu_grad", "silu_grad", "", {1, 22}},                           // 26
  };
  // Every intermediate is a result, in two runs (at most 16 results each).
  std::vector<int64_t> first, second;
  for (int64_t s = 4; s <= 26; ++s)
    (s < 16 ? first : second).push_back(s);
  checkAgainstUnfused({pos, x, row, cond}, shape, steps, first, RUN_FN);
  checkAgainstUnfused({pos, x, row, cond}, shape, steps, second, RUN_FN);
}

// A size far past one tile and a full-shape i1 condition.
TEST_P(FusedElementwiseTest, LargeWithFullMask) {
  std::vector<int64_t> shape = {4099};
  Tensor x = randomF32(shape, 31, -2.0f, 2.0f);
  std::vector<uint8_t> bits(4099);
  for (size_t i = 0; i < bits.size(); ++i)
    bits[i] = (i * 7919) % 3 == 0;
  Tensor cond = i1(shape, bits);
  Tensor minusInf = f32({}, {-3.0e38f});
  // slots: 0 x, 1 cond, 2 -big
  std::vector<Step> steps = {
      {"select", "select", "", {1, 0, 2}}, // 3
      {"exp", "exp", "", {3}},             // 4
      {"mul", "mul", "", {4, 0}},          // 5
  };
  checkAgainstUnfused({x, cond, minusInf}, shape, steps, {5}, RUN_FN);
}

TEST_P(FusedElementwiseTest, LoadErrors) {
  TensorType f{DType::F32, {4}}, m{DType::I1, {4}};
  EXPECT_EQ(loadError("fused_elementwise",
                      "ops = [\"cosh\"], args = array<i64: 0>, outputs = "
                      "array<i64: 1>",
                      {f}, {f}),
            "instruction 0 has unknown opcode 'cosh'");
  EXPECT_EQ(loadError("fused_elementwise",
                      "ops = [\"add\"], args = array<i64: 0>, outputs = "
                      "array<i64: 1>",
                      {f}, {f}),
            "'args' has 1 entries, too few for the instructions");
  EXPECT_EQ(loadError("fused_elementwise",
                      "ops = [\"neg\"], args = array<i64: 1>, outputs = "
                      "array<i64: 1>",
                      {f}, {f}),
            "instruction 0 ('neg') reads slot 1, not an earlier slot in [0, "
            "1)");
  EXPECT_EQ(loadError("fused_elementwise",
                      "ops = [\"select\"], args = array<i64: 0, 0, 0>, "
                      "outputs = array<i64: 1>",
                      {f}, {f}),
            "instruction 0 ('select') argument 0 (slot 0) must be an i1 "
            "operand");
  EXPECT_EQ(loadError("fused_elementwise",
                      "ops = [\"neg\"], args = array<i64: 0>, outputs = "
                      "array<i64: 1>",
                      {m}, {f}),
            "instruction 0 ('neg') argument 0 (slot 0) must be an f32 value");
  EXPECT_EQ(loadError("fused_elementwise",
                      "ops = [\"neg\"], args = array<i64: 0>, outputs = "
                      "array<i64: 0>",
                      {f}, {f}),
            "output 0 is slot 0, not a computed slot in [1, 2)");
  EXPECT_EQ(loadError("fused_elementwise",
                      "ops = [\"neg\"], args = array<i64: 0>, outputs = "
                      "array<i64: 1>",
                      {TensorType{DType::F32, {3}}}, {f}),
            "operand 0 does not broadcast to the result shape");
  EXPECT_EQ(loadError("fused_elementwise",
                      "ops = [\"neg\"], args = array<i64: 0>, outputs = "
                      "array<i64: 1, 1>",
                      {f}, {f}),
            "has 1 result(s) but 2 outputs");
  EXPECT_EQ(loadError("fused_elementwise",
                      "ops = [\"neg\"], args = array<i64: 0>", {f}, {f}),
            "missing attribute 'outputs'");
}

} // namespace

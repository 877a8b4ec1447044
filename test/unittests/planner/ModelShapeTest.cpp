//===- ModelShapeTest.cpp - the transformer shape of an imported model ----===//

#include "compiler/planner/ModelShape.h"
#include "dialects/tsr/TsrDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include <gtest/gtest.h>

using namespace mlir;
using namespace tessera;
using namespace tessera::planner;

namespace {

class ModelShapeTest : public ::testing::Test {
protected:
  ModelShapeTest() {
    context.loadDialect<tsr::TsrDialect, func::FuncDialect>();
  }
  /// The error of transformerShapeOf on `text`, which must fail.
  std::string errorOf(llvm::StringRef text) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
    EXPECT_TRUE(module);
    if (!module)
      return "";
    llvm::Expected<TransformerShape> shape = transformerShapeOf(*module);
    EXPECT_FALSE(static_cast<bool>(shape));
    return shape ? "" : llvm::toString(shape.takeError());
  }
  MLIRContext context;
};

TEST_F(ModelShapeTest, ErrorsNameWhatIsMissing) {
  EXPECT_NE(errorOf("module {}").find("model shape: no func @forward"),
            std::string::npos);
  // A float input only: no [batch, sequence] tokens.
  EXPECT_NE(errorOf(R"mlir(
module {
  func.func @forward(%x: tensor<4x8xf32> {tsr.role = "input"}) -> tensor<4x8xf32> {
    return %x : tensor<4x8xf32>
  }
})mlir")
                .find("no integer [batch, sequence] token input"),
            std::string::npos);
  // Tokens but no attention: not a transformer the model can cost.
  EXPECT_NE(errorOf(R"mlir(
module {
  func.func @forward(%t: tensor<4x8xi64> {tsr.role = "input"}, %e: tensor<16x8xf32> {tsr.role = "param"}) -> tensor<4x8x8xf32> {
    %0 = tsr.gather %e, %t : tensor<16x8xf32>, tensor<4x8xi64> -> tensor<4x8x8xf32>
    return %0 : tensor<4x8x8xf32>
  }
})mlir")
                .find("no tsr.attention"),
            std::string::npos);
}

// Grouped-query attention: the key/value heads come from the K operand
// (4 query heads over 2 K/V heads), and tp must divide them.
TEST_F(ModelShapeTest, GroupedQueryAttentionKeyValueHeads) {
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(R"mlir(
module {
  func.func @forward(%t: tensor<2x8xi64> {tsr.role = "input"}, %e: tensor<32x16xf32> {tsr.role = "param"}, %wq: tensor<16x16xf32> {tsr.role = "param"}, %wk: tensor<16x8xf32> {tsr.role = "param"}, %wv: tensor<16x8xf32> {tsr.role = "param"}, %wo: tensor<16x16xf32> {tsr.role = "param"}, %w1: tensor<16x64xf32> {tsr.role = "param"}, %w2: tensor<64x16xf32> {tsr.role = "param"}, %wh: tensor<16x32xf32> {tsr.role = "param"}) -> tensor<2x8x32xf32> {
    %x = tsr.gather %e, %t : tensor<32x16xf32>, tensor<2x8xi64> -> tensor<2x8x16xf32>
    %q0 = tsr.matmul %x, %wq : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
    %k0 = tsr.matmul %x, %wk : tensor<2x8x16xf32>, tensor<16x8xf32> -> tensor<2x8x8xf32>
    %v0 = tsr.matmul %x, %wv : tensor<2x8x16xf32>, tensor<16x8xf32> -> tensor<2x8x8xf32>
    %q1 = tsr.reshape %q0 : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
    %k1 = tsr.reshape %k0 : tensor<2x8x8xf32> -> tensor<2x8x2x4xf32>
    %v1 = tsr.reshape %v0 : tensor<2x8x8xf32> -> tensor<2x8x2x4xf32>
    %q = tsr.transpose %q1 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
    %k = tsr.transpose %k1 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x8x2x4xf32> -> tensor<2x2x8x4xf32>
    %v = tsr.transpose %v1 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x8x2x4xf32> -> tensor<2x2x8x4xf32>
    %o, %l = tsr.attention %q, %k, %v {causal = true, scale = 0.5 : f32} : tensor<2x4x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32> -> tensor<2x4x8x4xf32>, tensor<2x4x8xf32>
    %o1 = tsr.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x4xf32> -> tensor<2x8x4x4xf32>
    %o2 = tsr.reshape %o1 : tensor<2x8x4x4xf32> -> tensor<2x8x16xf32>
    %a = tsr.matmul %o2, %wo : tensor<2x8x16xf32>, tensor<16x16xf32> -> tensor<2x8x16xf32>
    %r = tsr.add %x, %a : tensor<2x8x16xf32>
    %h = tsr.matmul %r, %w1 : tensor<2x8x16xf32>, tensor<16x64xf32> -> tensor<2x8x64xf32>
    %g = tsr.gelu %h : tensor<2x8x64xf32>
    %m = tsr.matmul %g, %w2 : tensor<2x8x64xf32>, tensor<64x16xf32> -> tensor<2x8x16xf32>
    %y = tsr.add %r, %m : tensor<2x8x16xf32>
    %z = tsr.matmul %y, %wh : tensor<2x8x16xf32>, tensor<16x32xf32> -> tensor<2x8x32xf32>
    return %z : tensor<2x8x32xf32>
  }
})mlir",
                                                             &context);
  ASSERT_TRUE(module);
  llvm::Expected<TransformerShape> shape = transformerShapeOf(*module);
  ASSERT_TRUE(static_cast<bool>(shape)) << llvm::toString(shape.takeError());
  EXPECT_EQ(shape->heads, 4);
  EXPECT_EQ(shape->kvHeads, 2);
  EXPECT_EQ(shape->keyValueHeads(), 2);
  EXPECT_EQ(shape->hidden, 16);
  Candidate c;
  c.tp = 2;
  EXPECT_EQ(divisibilityProblem(*shape, c), "");
  c.tp = 4; // divides the 4 query heads, not the 2 K/V heads
  EXPECT_EQ(divisibilityProblem(*shape, c),
            "tp=4 does not divide the 2 key/value heads (grouped-query "
            "attention)");
}

TEST(TransformerShape, ValidateNamesTheField) {
  TransformerShape s = TransformerShape::gpt(2, 64, 4, 16, 100, 8);
  EXPECT_FALSE(llvm::errorToBool(s.validate()));
  s.layers = 0;
  llvm::Error e = s.validate();
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(llvm::toString(std::move(e)),
            "model shape: layers must be >= 1, got 0");
  s = TransformerShape::gpt(2, 64, 5, 16, 100, 8);
  e = s.validate();
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(llvm::toString(std::move(e)),
            "model shape: 5 heads do not divide the hidden size 64");
  s = TransformerShape::gpt(2, 64, 4, 16, 100, 8);
  s.kvHeads = 3;
  e = s.validate();
  ASSERT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(llvm::toString(std::move(e)),
            "model shape: 3 key/value heads do not divide the 4 heads");
}

} // namespace

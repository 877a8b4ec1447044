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
}

} // namespace

//===- GradientRulesTest.cpp - gradient rules vs finite differences -------===//
//
// For every differentiable tsr op: f(x) = sum(w ⊙ op(x)) with random inputs
// and weights w. The analytic gradient comes from the op's gradient rule
// (through training::buildBackward, which calls GradientOpInterface), the
// numerical one from central differences; both are evaluated by the
// double-precision reference interpreter (RefEval), so the tolerance is tight.
// The last tests run `tsr-build-train-step` on a tiny transformer and check
// the whole backward pass the same way.
//
//===----------------------------------------------------------------------===//

#include "RefEval.h"

#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsr/TsrOps.h"
#include "passes/training/Autodiff.h"
#include "passes/training/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>

using namespace mlir;
using namespace tessera;
using tessera::test::RefTensor;

namespace {

/// How to draw the random arguments of one case.
struct Inputs {
  double lo = -1.0, hi = 1.0; ///< float arguments: uniform in [lo, hi)
  double minAbs = 0.0;        ///< keep |x| >= minAbs (kinks at 0)
  int64_t intHi = 1;          ///< i64 arguments: uniform in [0, intHi)
  unsigned seed = 1234;
};

std::string print(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

class GradientRules : public ::testing::Test {
protected:
  GradientRules() {
    ctx.loadDialect<tsr::TsrDialect, func::FuncDialect>();
    // Surface diagnostics in the test log.
    handler = std::make_unique<ScopedDiagnosticHandler>(
        &ctx, [this](Diagnostic &diag) {
          diagnostics += diag.str() + "\n";
          return success();
        });
  }

  OwningOpRef<ModuleOp> parse(const std::string &text) {
    auto module = parseSourceString<ModuleOp>(text, &ctx);
    EXPECT_TRUE(module) << "cannot parse:\n" << text << "\n" << diagnostics;
    return module;
  }

  std::vector<RefTensor> randomArgs(func::FuncOp f, const Inputs &in,
                                    std::mt19937_64 &rng) {
    std::vector<RefTensor> args;
    for (Type t : f.getArgumentTypes()) {
      auto tt = cast<RankedTensorType>(t);
      RefTensor r(
          std::vector<int64_t>(tt.getShape().begin(), tt.getShape().end()));
      Type elem = tt.getElementType();
      for (double &v : r.data) {
        if (elem.isInteger(1)) {
          v = std::uniform_int_distribution<int>(0, 1)(rng);
        } else if (isa<IntegerType>(elem)) {
          v = std::uniform_int_distribution<int64_t>(0, in.intHi - 1)(rng);
        } else {
          std::uniform_real_distribution<double> u(in.lo, in.hi);
          do
            v = u(rng);
          while (std::abs(v) < in.minAbs);
        }
      }
      args.push_back(std::move(r));
    }
    return args;
  }

  /// Adds `func.func @grad(args..., %w) -> (d/d float args)` for the
  /// single-result `f` to the module, built by buildBackward.
  func::FuncOp buildGradFunc(ModuleOp module, func::FuncOp f,
                             std::vector<unsigned> &wrtIndices) {
    OpBuilder b(&ctx);
    b.setInsertionPointToEnd(module.getBody());
    SmallVector<Type> argTypes(f.getArgumentTypes());
    Type resultType = f.getResultTypes()[0];
    argTypes.push_back(resultType);
    SmallVector<Type> resultTypes;
    for (auto [i, t] : llvm::enumerate(f.getArgumentTypes()))
      if (isa<FloatType>(cast<RankedTensorType>(t).getElementType())) {
        wrtIndices.push_back(i);
        resultTypes.push_back(t);
      }
    auto g = func::FuncOp::create(b, f.getLoc(), "grad",
                                  b.getFunctionType(argTypes, resultTypes));
    Block *entry = g.addEntryBlock();
    IRMapping map;
    for (unsigned i = 0; i < f.getNumArguments(); ++i)
      map.map(f.getArgument(i), entry->getArgument(i));
    b.setInsertionPointToEnd(entry);
    SmallVector<Operation *> ops;
    Value out;
    for (Operation &op : f.front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        out = map.lookup(ret.getOperand(0));
        break;
      }
      ops.push_back(b.clone(op, map));
    }
    SmallVector<Value> wrt;
    for (unsigned i : wrtIndices)
      wrt.push_back(entry->getArgument(i));
    auto grads = training::buildBackward(
        b, ops, {{out, entry->getArgument(f.getNumArguments())}}, wrt);
    EXPECT_TRUE(succeeded(grads)) << diagnostics;
    SmallVector<Value> results;
    for (auto [k, v] : llvm::enumerate(wrt)) {
      Value gv = succeeded(grads) ? (*grads)[k] : Value();
      if (!gv) {
        auto type = cast<RankedTensorType>(v.getType());
        auto zero = DenseElementsAttr::get(
            type, FloatAttr::get(type.getElementType(), 0.0));
        gv = tsr::ConstantOp::create(b, f.getLoc(), type,
                                     cast<ElementsAttr>(zero));
      }
      results.push_back(gv);
    }
    func::ReturnOp::create(b, f.getLoc(), results);
    return g;
  }

  /// Checks the gradient of sum(w ⊙ @f(args)) against central differences.
  void check(const std::string &funcText, Inputs in = {}) {
    auto module = parse(funcText);
    if (!module)
      return;
    auto f = module->lookupSymbol<func::FuncOp>("f");
    ASSERT_TRUE(f) << "no @f";
    ASSERT_EQ(f.getNumResults(), 1u);
    std::vector<unsigned> wrtIndices;
    func::FuncOp g = buildGradFunc(*module, f, wrtIndices);
    ASSERT_TRUE(succeeded(verify(*module))) << diagnostics << "\n"
                                            << print(*module);

    std::mt19937_64 rng(in.seed);
    std::vector<RefTensor> args = randomArgs(f, in, rng);
    auto rt = cast<RankedTensorType>(f.getResultTypes()[0]);
    RefTensor w(
        std::vector<int64_t>(rt.getShape().begin(), rt.getShape().end()));
    std::uniform_real_distribution<double> uw(-1.0, 1.0);
    for (double &v : w.data)
      v = uw(rng);

    std::string error;
    std::vector<RefTensor> analytic, out;
    std::vector<RefTensor> gArgs = args;
    gArgs.push_back(w);
    ASSERT_TRUE(test::evaluate(g, gArgs, analytic, error)) << error << "\n"
                                                           << print(g);
    auto objective = [&](const std::vector<RefTensor> &a) {
      std::vector<RefTensor> res;
      bool ok = test::evaluate(f, a, res, error);
      EXPECT_TRUE(ok) << error;
      double s = 0;
      for (int64_t i = 0; ok && i < w.numel(); ++i)
        s += w.data[i] * res[0].data[i];
      return s;
    };

    const double h = 1e-6;
    for (auto [k, argIndex] : llvm::enumerate(wrtIndices)) {
      ASSERT_EQ(analytic[k].shape, args[argIndex].shape);
      for (int64_t e = 0; e < args[argIndex].numel(); ++e) {
        std::vector<RefTensor> plus = args, minus = args;
        plus[argIndex].data[e] += h;
        minus[argIndex].data[e] -= h;
        double fd = (objective(plus) - objective(minus)) / (2 * h);
        double an = analytic[k].data[e];
        EXPECT_NEAR(an, fd, 2e-7 * (1.0 + std::abs(fd)))
            << "d/d arg " << argIndex << " element " << e << "\n"
            << print(g);
      }
    }
  }

  MLIRContext ctx;
  std::string diagnostics;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
};

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

TEST_F(GradientRules, Add) {
  check(
      R"(func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = tsr.add %a, %b : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })");
}

TEST_F(GradientRules, AddSameOperandTwice) {
  check(R"(func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = tsr.add %a, %a : tensor<2x3xf32>
    %1 = tsr.mul %0, %a : tensor<2x3xf32>
    return %1 : tensor<2x3xf32>
  })");
}

TEST_F(GradientRules, Sub) {
  check(
      R"(func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = tsr.sub %a, %b : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })");
}

TEST_F(GradientRules, Mul) {
  check(
      R"(func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = tsr.mul %a, %b : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })");
}

TEST_F(GradientRules, Div) {
  Inputs in;
  in.minAbs = 0.3;
  check(
      R"(func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = tsr.div %a, %b : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })",
      in);
}

TEST_F(GradientRules, DivByConstant) {
  check(R"(func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %c = tsr.constant dense<[[1.5, -2.0, 4.0], [0.5, 3.0, -1.0]]> : tensor<2x3xf32>
    %0 = tsr.div %a, %c : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })");
}

TEST_F(GradientRules, Pow) {
  Inputs in;
  in.lo = 0.5;
  in.hi = 2.0;
  check(
      R"(func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = tsr.pow %a, %b : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })",
      in);
}

TEST_F(GradientRules, PowConstantExponents) {
  // x² (special-cased), x³ and x^-0.5 with x of both signs where defined.
  check(R"(func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %two = tsr.constant dense<2.0> : tensor<2x3xf32>
    %three = tsr.constant dense<3.0> : tensor<2x3xf32>
    %0 = tsr.pow %a, %two : tensor<2x3xf32>
    %1 = tsr.pow %a, %three : tensor<2x3xf32>
    %2 = tsr.add %0, %1 : tensor<2x3xf32>
    return %2 : tensor<2x3xf32>
  })");
  Inputs in;
  in.lo = 0.5;
  in.hi = 2.0;
  check(R"(func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %e = tsr.constant dense<-0.5> : tensor<2x3xf32>
    %0 = tsr.pow %a, %e : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })",
        in);
}

TEST_F(GradientRules, Max) {
  check(
      R"(func.func @f(%a: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
    %0 = tsr.max %a, %b : tensor<3x4xf32>
    return %0 : tensor<3x4xf32>
  })");
}

TEST_F(GradientRules, MaxTieSplitsGradientLikeTorch) {
  // torch.maximum gives each operand half the gradient on a tie.
  auto module = parse(
      R"(func.func @f(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
    %0 = tsr.max %a, %b : tensor<3xf32>
    return %0 : tensor<3xf32>
  })");
  ASSERT_TRUE(module);
  auto f = module->lookupSymbol<func::FuncOp>("f");
  std::vector<unsigned> wrt;
  func::FuncOp g = buildGradFunc(*module, f, wrt);
  ASSERT_TRUE(succeeded(verify(*module))) << diagnostics;
  RefTensor a({3}), b({3}), w({3});
  a.data = {1.0, 2.0, 3.0};
  b.data = {1.0, 5.0, -1.0};
  w.data = {4.0, 8.0, 16.0};
  std::vector<RefTensor> grads;
  std::string error;
  ASSERT_TRUE(test::evaluate(g, {a, b, w}, grads, error)) << error;
  EXPECT_EQ(grads[0].data, (std::vector<double>{2.0, 0.0, 16.0}));
  EXPECT_EQ(grads[1].data, (std::vector<double>{2.0, 8.0, 0.0}));
}

TEST_F(GradientRules, Select) {
  check(
      R"(func.func @f(%c: tensor<3x4xi1>, %a: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<3x4xf32> {
    %0 = tsr.select %c, %a, %b : tensor<3x4xi1>, tensor<3x4xf32>
    return %0 : tensor<3x4xf32>
  })");
}

TEST_F(GradientRules, SelectFromEqualMask) {
  // The mask comes from tsr.equal (no gradient through the comparison).
  check(
      R"(func.func @f(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %m = tsr.equal %a, %a : tensor<2x3xf32> -> tensor<2x3xi1>
    %0 = tsr.select %m, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })");
}

#define UNARY_CASE(NAME, OP, ATTRS, LO, HI, MINABS)                            \
  TEST_F(GradientRules, NAME) {                                                \
    Inputs in;                                                                 \
    in.lo = LO;                                                                \
    in.hi = HI;                                                                \
    in.minAbs = MINABS;                                                        \
    check("func.func @f(%a: tensor<3x4xf32>) -> tensor<3x4xf32> {\n"           \
          "  %0 = " OP " %a " ATTRS " : tensor<3x4xf32>\n"                     \
          "  return %0 : tensor<3x4xf32>\n}",                                  \
          in);                                                                 \
  }

UNARY_CASE(Neg, "tsr.neg", "", -1.0, 1.0, 0.0)
UNARY_CASE(Exp, "tsr.exp", "", -2.0, 2.0, 0.0)
UNARY_CASE(Log, "tsr.log", "", 0.2, 3.0, 0.0)
UNARY_CASE(Sqrt, "tsr.sqrt", "", 0.2, 3.0, 0.0)
UNARY_CASE(Rsqrt, "tsr.rsqrt", "", 0.2, 3.0, 0.0)
UNARY_CASE(Tanh, "tsr.tanh", "", -2.0, 2.0, 0.0)
UNARY_CASE(Erf, "tsr.erf", "", -2.0, 2.0, 0.0)
UNARY_CASE(Relu, "tsr.relu", "", -2.0, 2.0, 0.01)
UNARY_CASE(GeluExact, "tsr.gelu", "", -3.0, 3.0, 0.0)
UNARY_CASE(GeluTanh, "tsr.gelu", "{approximate = \"tanh\"}", -3.0, 3.0, 0.0)
UNARY_CASE(Sigmoid, "tsr.sigmoid", "", -4.0, 4.0, 0.0)
UNARY_CASE(Silu, "tsr.silu", "", -4.0, 4.0, 0.0)
#undef UNARY_CASE

TEST_F(GradientRules, ConvertFloatToFloat) {
  check(R"(func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf64> {
    %0 = tsr.convert %a : tensor<2x3xf32> -> tensor<2x3xf64>
    %1 = tsr.mul %0, %0 : tensor<2x3xf64>
    return %1 : tensor<2x3xf64>
  })");
}

TEST_F(GradientRules, ConvertFromIntegerHasNoGradient) {
  Inputs in;
  in.intHi = 5;
  check(
      R"(func.func @f(%i: tensor<2x3xi64>, %a: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = tsr.convert %i : tensor<2x3xi64> -> tensor<2x3xf32>
    %1 = tsr.mul %0, %a : tensor<2x3xf32>
    return %1 : tensor<2x3xf32>
  })",
      in);
}

TEST_F(GradientRules, Broadcast) {
  // Leading dims added and a size-1 dim expanded.
  check(R"(func.func @f(%a: tensor<3x1x4xf32>) -> tensor<2x3x5x4xf32> {
    %0 = tsr.broadcast %a : tensor<3x1x4xf32> -> tensor<2x3x5x4xf32>
    return %0 : tensor<2x3x5x4xf32>
  })");
  check(R"(func.func @f(%a: tensor<4xf32>) -> tensor<2x3x4xf32> {
    %0 = tsr.broadcast %a : tensor<4xf32> -> tensor<2x3x4xf32>
    return %0 : tensor<2x3x4xf32>
  })");
  check(R"(func.func @f(%a: tensor<2x1xf32>) -> tensor<2x1xf32> {
    %0 = tsr.broadcast %a : tensor<2x1xf32> -> tensor<2x1xf32>
    return %0 : tensor<2x1xf32>
  })");
}

TEST_F(GradientRules, ReduceSum) {
  check(R"(func.func @f(%a: tensor<2x3x4xf32>) -> tensor<3xf32> {
    %0 = tsr.reduce_sum %a {axes = array<i64: 0, 2>} : tensor<2x3x4xf32> -> tensor<3xf32>
    return %0 : tensor<3xf32>
  })");
  check(R"(func.func @f(%a: tensor<2x3x4xf32>) -> tensor<2x3x1xf32> {
    %0 = tsr.reduce_sum %a {axes = array<i64: 2>, keepdim = true} : tensor<2x3x4xf32> -> tensor<2x3x1xf32>
    return %0 : tensor<2x3x1xf32>
  })");
  check(R"(func.func @f(%a: tensor<2x3xf32>) -> tensor<f32> {
    %0 = tsr.reduce_sum %a {axes = array<i64: 0, 1>} : tensor<2x3xf32> -> tensor<f32>
    return %0 : tensor<f32>
  })");
}

TEST_F(GradientRules, ReduceMean) {
  check(R"(func.func @f(%a: tensor<2x3x4xf32>) -> tensor<2x4xf32> {
    %0 = tsr.reduce_mean %a {axes = array<i64: 1>} : tensor<2x3x4xf32> -> tensor<2x4xf32>
    return %0 : tensor<2x4xf32>
  })");
  check(R"(func.func @f(%a: tensor<2x3x4xf32>) -> tensor<1x3x1xf32> {
    %0 = tsr.reduce_mean %a {axes = array<i64: 0, 2>, keepdim = true} : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
    return %0 : tensor<1x3x1xf32>
  })");
}

TEST_F(GradientRules, ReduceMax) {
  check(R"(func.func @f(%a: tensor<2x3x4xf32>) -> tensor<2x3xf32> {
    %0 = tsr.reduce_max %a {axes = array<i64: 2>} : tensor<2x3x4xf32> -> tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })");
  check(R"(func.func @f(%a: tensor<2x3x4xf32>) -> tensor<1x3x1xf32> {
    %0 = tsr.reduce_max %a {axes = array<i64: 0, 2>, keepdim = true} : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
    return %0 : tensor<1x3x1xf32>
  })");
}

//===----------------------------------------------------------------------===//
// Matmul: every transpose combination, rank 2, batched and shared weight
//===----------------------------------------------------------------------===//

std::string matmulCase(std::vector<int64_t> batch, bool sharedRhs, bool ta,
                       bool tb) {
  const int64_t m = 3, k = 4, n = 2;
  auto shape = [](std::vector<int64_t> dims) {
    std::string s;
    for (int64_t d : dims)
      s += std::to_string(d) + "x";
    return s + "f32";
  };
  std::vector<int64_t> a = batch,
                       b = sharedRhs ? std::vector<int64_t>{} : batch,
                       c = batch;
  a.push_back(ta ? k : m);
  a.push_back(ta ? m : k);
  b.push_back(tb ? n : k);
  b.push_back(tb ? k : n);
  c.push_back(m);
  c.push_back(n);
  std::string attrs = std::string("{transpose_lhs = ") +
                      (ta ? "true" : "false") +
                      ", transpose_rhs = " + (tb ? "true" : "false") + "}";
  return "func.func @f(%a: tensor<" + shape(a) + ">, %b: tensor<" + shape(b) +
         ">) -> tensor<" + shape(c) + "> {\n  %0 = tsr.matmul %a, %b " + attrs +
         " : tensor<" + shape(a) + ">, tensor<" + shape(b) + "> -> tensor<" +
         shape(c) + ">\n  return %0 : tensor<" + shape(c) + ">\n}";
}

TEST_F(GradientRules, MatmulRank2) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(matmulCase({}, false, ta, tb));
      check(matmulCase({}, false, ta, tb));
    }
}

TEST_F(GradientRules, MatmulBatched) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(matmulCase({2, 2}, false, ta, tb));
      check(matmulCase({2, 2}, false, ta, tb));
    }
}

TEST_F(GradientRules, MatmulSharedWeight) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(matmulCase({2, 2}, true, ta, tb));
      check(matmulCase({2, 2}, true, ta, tb));
    }
}

TEST_F(GradientRules, MatmulSharedWeightGradIsOne2DMatmul) {
  // dW of a Linear layer: one rank-2 matmul over the flattened rows, no
  // transpose op.
  auto module = parse(matmulCase({2, 3}, true, false, true));
  ASSERT_TRUE(module);
  std::vector<unsigned> wrt;
  func::FuncOp g =
      buildGradFunc(*module, module->lookupSymbol<func::FuncOp>("f"), wrt);
  int matmuls = 0, transposes = 0;
  g.walk([&](Operation *op) {
    matmuls += isa<tsr::MatmulOp>(op);
    transposes += isa<tsr::TransposeOp>(op);
  });
  EXPECT_EQ(matmuls, 3); // forward, dA, dW
  EXPECT_EQ(transposes, 0);
  auto ret = cast<func::ReturnOp>(g.front().getTerminator());
  auto dw = ret.getOperand(1).getDefiningOp<tsr::MatmulOp>();
  ASSERT_TRUE(dw);
  EXPECT_EQ(dw.getLhs().getType().getRank(), 2);
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

TEST_F(GradientRules, Reshape) {
  check(R"(func.func @f(%a: tensor<2x3x4xf32>) -> tensor<6x2x2xf32> {
    %0 = tsr.reshape %a : tensor<2x3x4xf32> -> tensor<6x2x2xf32>
    return %0 : tensor<6x2x2xf32>
  })");
}

TEST_F(GradientRules, Transpose) {
  check(R"(func.func @f(%a: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
    %0 = tsr.transpose %a {permutation = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
    return %0 : tensor<4x2x3xf32>
  })");
}

TEST_F(GradientRules, Slice) {
  check(R"(func.func @f(%a: tensor<4x6xf32>) -> tensor<2x3xf32> {
    %0 = tsr.slice %a {start_indices = array<i64: 1, 2>, limit_indices = array<i64: 3, 5>, strides = array<i64: 1, 1>} : tensor<4x6xf32> -> tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })");
  check(R"(func.func @f(%a: tensor<4x6xf32>) -> tensor<4x2xf32> {
    %0 = tsr.slice %a {start_indices = array<i64: 0, 0>, limit_indices = array<i64: 4, 2>, strides = array<i64: 1, 1>} : tensor<4x6xf32> -> tensor<4x2xf32>
    return %0 : tensor<4x2xf32>
  })");
}

TEST_F(GradientRules, SliceStrided) {
  check(R"(func.func @f(%a: tensor<5x7xf32>) -> tensor<2x3xf32> {
    %0 = tsr.slice %a {start_indices = array<i64: 1, 0>, limit_indices = array<i64: 5, 7>, strides = array<i64: 2, 3>} : tensor<5x7xf32> -> tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  })");
  check(R"(func.func @f(%a: tensor<6x3xf32>) -> tensor<3x3xf32> {
    %0 = tsr.slice %a {start_indices = array<i64: 1, 0>, limit_indices = array<i64: 6, 3>, strides = array<i64: 2, 1>} : tensor<6x3xf32> -> tensor<3x3xf32>
    return %0 : tensor<3x3xf32>
  })");
}

TEST_F(GradientRules, Concat) {
  check(
      R"(func.func @f(%a: tensor<2x1xf32>, %b: tensor<2x3xf32>, %c: tensor<2x2xf32>) -> tensor<2x6xf32> {
    %0 = tsr.concat %a, %b, %c {axis = 1 : i64} : (tensor<2x1xf32>, tensor<2x3xf32>, tensor<2x2xf32>) -> tensor<2x6xf32>
    return %0 : tensor<2x6xf32>
  })");
  check(R"(func.func @f(%a: tensor<2x3xf32>) -> tensor<4x3xf32> {
    %0 = tsr.concat %a, %a {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    return %0 : tensor<4x3xf32>
  })");
}

//===----------------------------------------------------------------------===//
// Neural-network ops
//===----------------------------------------------------------------------===//

TEST_F(GradientRules, Gather) {
  Inputs in;
  in.intHi = 3; // 8 ids into 5 rows, with repeats and unused rows
  check(
      R"(func.func @f(%t: tensor<5x4xf32>, %ids: tensor<2x4xi64>) -> tensor<2x4x4xf32> {
    %0 = tsr.gather %t, %ids : tensor<5x4xf32>, tensor<2x4xi64> -> tensor<2x4x4xf32>
    return %0 : tensor<2x4x4xf32>
  })",
      in);
}

TEST_F(GradientRules, LayerNorm) {
  check(
      R"(func.func @f(%x: tensor<2x3x4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<2x3x4xf32> {
    %0 = tsr.layer_norm %x, %g, %b {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
    return %0 : tensor<2x3x4xf32>
  })");
  check(
      R"(func.func @f(%x: tensor<2x3x4xf32>, %g: tensor<3x4xf32>, %b: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
    %0 = tsr.layer_norm %x, %g, %b {axis = 1 : i64, epsilon = 1.0e-02 : f32} : tensor<2x3x4xf32>, tensor<3x4xf32>
    return %0 : tensor<2x3x4xf32>
  })");
}

TEST_F(GradientRules, RmsNorm) {
  check(
      R"(func.func @f(%x: tensor<2x3x4xf32>, %g: tensor<4xf32>) -> tensor<2x3x4xf32> {
    %0 = tsr.rms_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
    return %0 : tensor<2x3x4xf32>
  })");
  check(
      R"(func.func @f(%x: tensor<2x3x4xf32>, %g: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
    %0 = tsr.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-02 : f32} : tensor<2x3x4xf32>, tensor<3x4xf32>
    return %0 : tensor<2x3x4xf32>
  })");
}

TEST_F(GradientRules, RmsNormGemmaScaleAndSwiGlu) {
  // Gemma's x_normed · (1 + w) through the add, then a SwiGLU gate.
  check(
      R"(func.func @f(%x: tensor<3x4xf32>, %w: tensor<4xf32>, %u: tensor<3x4xf32>) -> tensor<3x4xf32> {
    %one = tsr.constant dense<1.0> : tensor<4xf32>
    %s = tsr.add %one, %w : tensor<4xf32>
    %n = tsr.rms_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<3x4xf32>, tensor<4xf32>
    %a = tsr.silu %n : tensor<3x4xf32>
    %y = tsr.mul %a, %u : tensor<3x4xf32>
    return %y : tensor<3x4xf32>
  })");
}

TEST_F(GradientRules, Softmax) {
  check(R"(func.func @f(%x: tensor<2x5xf32>) -> tensor<2x5xf32> {
    %0 = tsr.softmax %x {axis = 1 : i64} : tensor<2x5xf32>
    return %0 : tensor<2x5xf32>
  })");
  check(R"(func.func @f(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
    %0 = tsr.softmax %x {axis = 1 : i64} : tensor<2x3x4xf32>
    return %0 : tensor<2x3x4xf32>
  })");
}

// One attention_grad; the lse result carries no cotangent and the mask
// none either. Dv != Dh, causal, an additive mask, and rank 4.
TEST_F(GradientRules, Attention) {
  check(
      R"(func.func @f(%q: tensor<2x3x4xf32>, %k: tensor<2x3x4xf32>, %v: tensor<2x3x2xf32>) -> tensor<2x3x2xf32> {
    %o, %l = tsr.attention %q, %k, %v {scale = 0.5 : f32} : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x2xf32> -> tensor<2x3x2xf32>, tensor<2x3xf32>
    return %o : tensor<2x3x2xf32>
  })");
  check(
      R"(func.func @f(%q: tensor<1x2x3x2xf32>, %k: tensor<1x2x3x2xf32>, %v: tensor<1x2x3x2xf32>) -> tensor<1x2x3x2xf32> {
    %m = tsr.constant dense<[[0.5, -1.0, 0.0], [0.25, 0.0, 0xFF800000], [0.0, 1.0, -0.5]]> : tensor<3x3xf32>
    %o, %l = tsr.attention %q, %k, %v, %m {causal = true, scale = 0.75 : f32} : tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>, tensor<3x3xf32> -> tensor<1x2x3x2xf32>, tensor<1x2x3xf32>
    return %o : tensor<1x2x3x2xf32>
  })");
}

// Grouped-query attention: 6 query heads over 2 K/V heads (n_rep 3), so
// each K/V head's gradient sums three query heads' contributions; and MQA.
TEST_F(GradientRules, GroupedQueryAttention) {
  check(
      R"(func.func @f(%q: tensor<1x6x3x2xf32>, %k: tensor<1x2x3x2xf32>, %v: tensor<1x2x3x3xf32>) -> tensor<1x6x3x3xf32> {
    %o, %l = tsr.attention %q, %k, %v {causal = true, scale = 0.75 : f32} : tensor<1x6x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x3xf32> -> tensor<1x6x3x3xf32>, tensor<1x6x3xf32>
    return %o : tensor<1x6x3x3xf32>
  })");
  check(
      R"(func.func @f(%q: tensor<2x4x3x2xf32>, %k: tensor<2x1x4x2xf32>, %v: tensor<2x1x4x2xf32>) -> tensor<2x4x3x2xf32> {
    %m = tsr.constant dense<[[0.5, -1.0, 0.0, 0.3], [0.25, 0.0, 0xFF800000, 1.0], [0.0, 1.0, -0.5, 0.0]]> : tensor<3x4xf32>
    %o, %l = tsr.attention %q, %k, %v, %m {scale = 0.5 : f32} : tensor<2x4x3x2xf32>, tensor<2x1x4x2xf32>, tensor<2x1x4x2xf32>, tensor<3x4xf32> -> tensor<2x4x3x2xf32>, tensor<2x4x3xf32>
    return %o : tensor<2x4x3x2xf32>
  })");
}

TEST_F(GradientRules, CrossEntropy) {
  Inputs in;
  in.lo = -2.0;
  in.hi = 2.0;
  in.intHi = 5;
  check(R"(func.func @f(%x: tensor<6x5xf32>, %l: tensor<6xi64>) -> tensor<f32> {
    %0 = tsr.cross_entropy %x, %l : tensor<6x5xf32>, tensor<6xi64> -> tensor<f32>
    return %0 : tensor<f32>
  })",
        in);
}

//===----------------------------------------------------------------------===//
// Ops without a rule fail with a clear error
//===----------------------------------------------------------------------===//

TEST_F(GradientRules, GradOpsAndOptimizersHaveNoRule) {
  auto module = parse(
      R"(func.func @f(%x: tensor<4xf32>, %dy: tensor<4xf32>, %lr: tensor<f32>) -> tensor<4xf32> {
    %0 = tsr.relu_grad %x, %dy : tensor<4xf32>
    %1 = tsr.sgd_update %x, %0, %lr {weight_decay = 0.0 : f32} : tensor<4xf32>
    return %1 : tensor<4xf32>
  })");
  ASSERT_TRUE(module);
  auto f = module->lookupSymbol<func::FuncOp>("f");
  for (Operation &op : f.front().without_terminator()) {
    diagnostics.clear();
    OpBuilder b(&ctx);
    b.setInsertionPointAfter(&op);
    SmallVector<Value> grads;
    auto rule = cast<tsr::GradientOpInterface>(op);
    EXPECT_TRUE(failed(rule.buildGradient(b, {op.getResult(0)}, grads)));
    EXPECT_NE(diagnostics.find("has no gradient rule"), std::string::npos)
        << diagnostics;
    EXPECT_NE(diagnostics.find(op.getName().getStringRef().str()),
              std::string::npos)
        << diagnostics;
  }
}

TEST_F(GradientRules, NullResultGradGivesNullOperandGrads) {
  auto module = parse(
      R"(func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xf32> {
    %0 = tsr.matmul %a, %b : tensor<2x3xf32>, tensor<3x2xf32> -> tensor<2x2xf32>
    return %0 : tensor<2x2xf32>
  })");
  ASSERT_TRUE(module);
  auto f = module->lookupSymbol<func::FuncOp>("f");
  Operation &op = f.front().front();
  OpBuilder b(&ctx);
  b.setInsertionPointAfter(&op);
  SmallVector<Value> grads;
  ASSERT_TRUE(succeeded(
      cast<tsr::GradientOpInterface>(op).buildGradient(b, {Value()}, grads)));
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_FALSE(grads[0]);
  EXPECT_FALSE(grads[1]);
}

//===----------------------------------------------------------------------===//
// The whole pass on a tiny transformer: gradients through the train step
//===----------------------------------------------------------------------===//

const char *kTinyForward = R"(
func.func @forward(
    %wte: tensor<5x4xf32> {tsr.name = "wte", tsr.role = "param", tsr.init = dense<0.0> : tensor<5x4xf32>},
    %wpe: tensor<3x4xf32> {tsr.name = "wpe", tsr.role = "param", tsr.init = dense<0.0> : tensor<3x4xf32>},
    %ln_g: tensor<4xf32> {tsr.name = "ln.weight", tsr.role = "param", tsr.init = dense<1.0> : tensor<4xf32>},
    %ln_b: tensor<4xf32> {tsr.name = "ln.bias", tsr.role = "param", tsr.init = dense<0.0> : tensor<4xf32>},
    %w_qkv: tensor<12x4xf32> {tsr.name = "attn.qkv.weight", tsr.role = "param", tsr.init = dense<0.0> : tensor<12x4xf32>},
    %b_qkv: tensor<12xf32> {tsr.name = "attn.qkv.bias", tsr.role = "param", tsr.init = dense<0.0> : tensor<12xf32>},
    %w_fc: tensor<8x4xf32> {tsr.name = "mlp.fc.weight", tsr.role = "param", tsr.init = dense<0.0> : tensor<8x4xf32>},
    %w_proj: tensor<4x8xf32> {tsr.name = "mlp.proj.weight", tsr.role = "param", tsr.init = dense<0.0> : tensor<4x8xf32>},
    %fscale: tensor<4xf32> {tsr.name = "frozen.scale", tsr.role = "frozen", tsr.init = dense<1.0> : tensor<4xf32>},
    %tokens: tensor<2x3xi64> {tsr.name = "input_ids", tsr.role = "input"})
    -> (tensor<2x3x5xf32> {tsr.name = "logits"}) {
  %e = tsr.gather %wte, %tokens : tensor<5x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  %p = tsr.broadcast %wpe : tensor<3x4xf32> -> tensor<2x3x4xf32>
  %h = tsr.add %e, %p : tensor<2x3x4xf32>
  %n = tsr.layer_norm %h, %ln_g, %ln_b {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x3x4xf32>, tensor<4xf32>
  %qkv0 = tsr.matmul %n, %w_qkv {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<12x4xf32> -> tensor<2x3x12xf32>
  %bq = tsr.broadcast %b_qkv : tensor<12xf32> -> tensor<2x3x12xf32>
  %qkv = tsr.add %qkv0, %bq : tensor<2x3x12xf32>
  %q = tsr.slice %qkv {start_indices = array<i64: 0, 0, 0>, limit_indices = array<i64: 2, 3, 4>, strides = array<i64: 1, 1, 1>} : tensor<2x3x12xf32> -> tensor<2x3x4xf32>
  %k = tsr.slice %qkv {start_indices = array<i64: 0, 0, 4>, limit_indices = array<i64: 2, 3, 8>, strides = array<i64: 1, 1, 1>} : tensor<2x3x12xf32> -> tensor<2x3x4xf32>
  %v = tsr.slice %qkv {start_indices = array<i64: 0, 0, 8>, limit_indices = array<i64: 2, 3, 12>, strides = array<i64: 1, 1, 1>} : tensor<2x3x12xf32> -> tensor<2x3x4xf32>
  %q4 = tsr.reshape %q : tensor<2x3x4xf32> -> tensor<2x3x2x2xf32>
  %k4 = tsr.reshape %k : tensor<2x3x4xf32> -> tensor<2x3x2x2xf32>
  %v4 = tsr.reshape %v : tensor<2x3x4xf32> -> tensor<2x3x2x2xf32>
  %qt = tsr.transpose %q4 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x3x2x2xf32> -> tensor<2x2x3x2xf32>
  %kt = tsr.transpose %k4 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x3x2x2xf32> -> tensor<2x2x3x2xf32>
  %vt = tsr.transpose %v4 {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x3x2x2xf32> -> tensor<2x2x3x2xf32>
  %s = tsr.matmul %qt, %kt {transpose_rhs = true} : tensor<2x2x3x2xf32>, tensor<2x2x3x2xf32> -> tensor<2x2x3x3xf32>
  %scale = tsr.constant dense<0.707106769> : tensor<2x2x3x3xf32>
  %sc = tsr.mul %s, %scale : tensor<2x2x3x3xf32>
  %mask = tsr.constant dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>
  %maskb = tsr.broadcast %mask : tensor<3x3xi1> -> tensor<2x2x3x3xi1>
  %ninf = tsr.constant dense<-1.0e+09> : tensor<2x2x3x3xf32>
  %sm = tsr.select %maskb, %sc, %ninf : tensor<2x2x3x3xi1>, tensor<2x2x3x3xf32>
  %a = tsr.softmax %sm {axis = 3 : i64} : tensor<2x2x3x3xf32>
  %o = tsr.matmul %a, %vt : tensor<2x2x3x3xf32>, tensor<2x2x3x2xf32> -> tensor<2x2x3x2xf32>
  %ot = tsr.transpose %o {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x2x3x2xf32> -> tensor<2x3x2x2xf32>
  %o3 = tsr.reshape %ot : tensor<2x3x2x2xf32> -> tensor<2x3x4xf32>
  %h2 = tsr.add %h, %o3 : tensor<2x3x4xf32>
  %f = tsr.matmul %h2, %w_fc {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<8x4xf32> -> tensor<2x3x8xf32>
  %ga = tsr.gelu %f {approximate = "tanh"} : tensor<2x3x8xf32>
  %m = tsr.matmul %ga, %w_proj {transpose_rhs = true} : tensor<2x3x8xf32>, tensor<4x8xf32> -> tensor<2x3x4xf32>
  %h3 = tsr.add %h2, %m : tensor<2x3x4xf32>
  %fs = tsr.broadcast %fscale : tensor<4xf32> -> tensor<2x3x4xf32>
  %h4 = tsr.mul %h3, %fs : tensor<2x3x4xf32>
  %logits = tsr.matmul %h4, %wte {transpose_rhs = true} : tensor<2x3x4xf32>, tensor<5x4xf32> -> tensor<2x3x5xf32>
  return %logits : tensor<2x3x5xf32>
}
)";

class TrainStep : public GradientRules {
protected:
  /// Runs the pass; returns @train_step (null on failure).
  func::FuncOp build(ModuleOp module, const std::string &options) {
    PassManager pm(&ctx, ModuleOp::getOperationName());
    std::string pipeline = "tsr-build-train-step{" + options + "}";
    std::string errors;
    llvm::raw_string_ostream os(errors);
    if (failed(parsePassPipeline(pipeline, pm, os))) {
      ADD_FAILURE() << errors;
      return {};
    }
    if (failed(pm.run(module))) {
      ADD_FAILURE() << diagnostics;
      return {};
    }
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    EXPECT_TRUE(step) << print(module);
    return step;
  }

  static void SetUpTestSuite() { training::registerTrainingPasses(); }

  /// Sets @train_step's "hyper" argument "lr" (the learning rate the step
  /// reads at run time) in `args` to `lr`.
  static void setLr(func::FuncOp step, std::vector<RefTensor> &args,
                    double lr) {
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      auto role = step.getArgAttrOfType<StringAttr>(i, "tsr.role");
      if (role && role.getValue() == "hyper")
        args[i] = RefTensor({}, lr);
    }
  }
};

TEST_F(TrainStep, SgdGradientsMatchFiniteDifferences) {
  auto module = parse(kTinyForward);
  ASSERT_TRUE(module);
  // SGD with lr 1 and no weight decay: param' = param - grad.
  func::FuncOp step = build(*module, "optimizer=sgd lr=1.0 weight-decay=0");
  ASSERT_TRUE(step);
  ASSERT_TRUE(succeeded(verify(*module)));
  unsigned numParams = 8;
  // params, frozen, tokens, labels, lr.
  ASSERT_EQ(step.getNumArguments(), numParams + 1 + 2 + 1);
  auto lrRole = step.getArgAttrOfType<StringAttr>(numParams + 3, "tsr.role");
  ASSERT_TRUE(lrRole && lrRole.getValue() == "hyper");
  ASSERT_EQ(step.getNumResults(), 1 + numParams);

  std::mt19937_64 rng(7);
  std::vector<RefTensor> args;
  std::normal_distribution<double> normal(0.0, 0.5);
  for (auto [i, t] : llvm::enumerate(step.getArgumentTypes())) {
    auto tt = cast<RankedTensorType>(t);
    RefTensor r(
        std::vector<int64_t>(tt.getShape().begin(), tt.getShape().end()));
    for (double &v : r.data)
      v = isa<IntegerType>(tt.getElementType())
              ? std::uniform_int_distribution<int>(0, 4)(rng)
              : normal(rng);
    args.push_back(std::move(r));
  }
  setLr(step, args, 1.0);
  std::vector<RefTensor> out;
  std::string error;
  ASSERT_TRUE(test::evaluate(step, args, out, error)) << error;
  auto loss = [&](const std::vector<RefTensor> &a) {
    std::vector<RefTensor> res;
    EXPECT_TRUE(test::evaluate(step, a, res, error)) << error;
    return res[0].data[0];
  };
  const double h = 1e-6;
  for (unsigned p = 0; p < numParams; ++p) {
    for (int64_t e = 0; e < args[p].numel(); ++e) {
      double grad = args[p].data[e] - out[1 + p].data[e];
      std::vector<RefTensor> plus = args, minus = args;
      plus[p].data[e] += h;
      minus[p].data[e] -= h;
      double fd = (loss(plus) - loss(minus)) / (2 * h);
      EXPECT_NEAR(grad, fd, 1e-7 * (1.0 + std::abs(fd)))
          << "param " << p << " element " << e;
    }
  }
}

TEST_F(TrainStep, AdamwFirstStepAndStateWiring) {
  auto module = parse(kTinyForward);
  ASSERT_TRUE(module);
  func::FuncOp sgd = build(*module, "optimizer=sgd lr=1.0 weight-decay=0");
  ASSERT_TRUE(sgd);
  auto module2 = parse(kTinyForward);
  ASSERT_TRUE(module2);
  func::FuncOp step =
      build(*module2, "optimizer=adamw lr=0.01 weight-decay=0.1");
  ASSERT_TRUE(step);
  unsigned numParams = 8;
  // params, frozen, 2 states per param + step, tokens, labels, lr.
  ASSERT_EQ(step.getNumArguments(), numParams + 1 + 2 * numParams + 1 + 1 + 2);
  ASSERT_EQ(step.getNumResults(), 1 + numParams + 2 * numParams + 1);

  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 0.5);
  std::vector<RefTensor> sgdArgs;
  for (Type t : sgd.getArgumentTypes()) {
    auto tt = cast<RankedTensorType>(t);
    RefTensor r(
        std::vector<int64_t>(tt.getShape().begin(), tt.getShape().end()));
    for (double &v : r.data)
      v = isa<IntegerType>(tt.getElementType())
              ? std::uniform_int_distribution<int>(0, 4)(rng)
              : normal(rng);
    sgdArgs.push_back(std::move(r));
  }
  setLr(sgd, sgdArgs, 1.0);
  std::vector<RefTensor> adamArgs(sgdArgs.begin(),
                                  sgdArgs.begin() + numParams + 1);
  for (unsigned p = 0; p < numParams; ++p) {
    adamArgs.push_back(RefTensor(sgdArgs[p].shape)); // exp_avg
    adamArgs.push_back(RefTensor(sgdArgs[p].shape)); // exp_avg_sq
  }
  adamArgs.push_back(RefTensor({}, 0.0)); // step
  adamArgs.push_back(sgdArgs[numParams + 1]);
  adamArgs.push_back(sgdArgs[numParams + 2]);
  adamArgs.push_back(RefTensor({}, double(0.01f))); // lr

  std::vector<RefTensor> sgdOut, adamOut;
  std::string error;
  ASSERT_TRUE(test::evaluate(sgd, sgdArgs, sgdOut, error)) << error;
  ASSERT_TRUE(test::evaluate(step, adamArgs, adamOut, error)) << error;
  EXPECT_DOUBLE_EQ(sgdOut[0].data[0], adamOut[0].data[0]); // same loss
  EXPECT_EQ(adamOut.back().data[0], 1.0);                  // step' = 1
  double lr = double(0.01f), wd = double(0.1f), eps = double(1e-8f);
  for (unsigned p = 0; p < numParams; ++p)
    for (int64_t e = 0; e < sgdArgs[p].numel(); ++e) {
      double w = sgdArgs[p].data[e];
      double g = w - sgdOut[1 + p].data[e];
      // First AdamW step: m̂ = g, v̂ = g².
      double expect = w * (1 - lr * wd) - lr * g / (std::abs(g) + eps);
      EXPECT_NEAR(adamOut[1 + p].data[e], expect, 1e-9) << p << " " << e;
      double b1 = double(0.9f), b2 = double(0.999f);
      EXPECT_NEAR(adamOut[1 + numParams + 2 * p].data[e], (1 - b1) * g, 1e-12);
      EXPECT_NEAR(adamOut[2 + numParams + 2 * p].data[e], (1 - b2) * g * g,
                  1e-12);
    }
}

TEST_F(TrainStep, ImportedModelFromEnvironment) {
  // Optional: TESSERA_TRAIN_FD_MODEL=imported.mlir (tessera-import output)
  // checks a few random elements of every param's gradient of a real model.
  const char *path = std::getenv("TESSERA_TRAIN_FD_MODEL");
  if (!path)
    GTEST_SKIP() << "set TESSERA_TRAIN_FD_MODEL to an imported @forward";
  std::string text;
  {
    std::string err;
    auto file = openInputFile(path, &err);
    ASSERT_TRUE(file) << err;
    text = file->getBuffer().str();
  }
  auto module = parse(text);
  ASSERT_TRUE(module);
  func::FuncOp step = build(*module, "optimizer=sgd lr=1.0 weight-decay=0");
  ASSERT_TRUE(step);
  int64_t vocab = 0;
  std::vector<unsigned> params;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto role = step.getArgAttrOfType<StringAttr>(i, "tsr.role");
    if (role && role.getValue() == "param")
      params.push_back(i);
  }
  step.walk([&](tsr::CrossEntropyOp ce) {
    vocab = ce.getLogits().getType().getDimSize(1);
  });
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 0.3);
  std::vector<RefTensor> args;
  for (auto [i, t] : llvm::enumerate(step.getArgumentTypes())) {
    auto tt = cast<RankedTensorType>(t);
    RefTensor r(
        std::vector<int64_t>(tt.getShape().begin(), tt.getShape().end()));
    auto name = step.getArgAttrOfType<StringAttr>(i, "tsr.name");
    bool isNormWeight = name && name.getValue().contains("norm") &&
                        name.getValue().ends_with("weight");
    for (double &v : r.data)
      v = isa<IntegerType>(tt.getElementType())
              ? std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng)
              : (isNormWeight ? 1.0 : 0.0) + normal(rng);
    args.push_back(std::move(r));
  }
  setLr(step, args, 1.0);
  std::vector<RefTensor> out;
  std::string error;
  ASSERT_TRUE(test::evaluate(step, args, out, error)) << error;
  auto loss = [&](const std::vector<RefTensor> &a) {
    std::vector<RefTensor> res;
    EXPECT_TRUE(test::evaluate(step, a, res, error)) << error;
    return res[0].data[0];
  };
  const double h = 1e-6;
  for (auto [k, p] : llvm::enumerate(params)) {
    for (int trial = 0; trial < 3; ++trial) {
      int64_t e =
          std::uniform_int_distribution<int64_t>(0, args[p].numel() - 1)(rng);
      double grad = args[p].data[e] - out[1 + k].data[e];
      std::vector<RefTensor> plus = args, minus = args;
      plus[p].data[e] += h;
      minus[p].data[e] -= h;
      double fd = (loss(plus) - loss(minus)) / (2 * h);
      EXPECT_NEAR(grad, fd, 1e-7 * (1.0 + std::abs(fd)))
          << step.getArgAttrOfType<StringAttr>(p, "tsr.name").str()
          << " element " << e;
    }
  }
}

} // namespace

//===- TestDropCollective.cpp - plant a missing all-reduce (testing) ------===//
//
// TESTING ONLY. `tsr-test-drop-collective{index=N}` removes the N-th
// (0-based, module order) `shard.all_reduce` and replaces its result by its
// operand, so the program goes on with a partial sum where the full value
// was meant: the fault a wrong sharding rule or partitioner would plant. The
// equivalence gate's test (test/Tools/tessera-check) runs tessera-check on
// the result and expects it to name the first traced tensor computed from
// that operand.
//
// Errors: N is negative or the module has no N-th shard.all_reduce (the
// message gives how many it has).
//
//===----------------------------------------------------------------------===//

#include "TestPasses.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace {

struct TestDropCollectivePass
    : public PassWrapper<TestDropCollectivePass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestDropCollectivePass)

  TestDropCollectivePass() = default;
  TestDropCollectivePass(const TestDropCollectivePass &other)
      : PassWrapper(other) {}

  StringRef getArgument() const final { return "tsr-test-drop-collective"; }
  StringRef getDescription() const final {
    return "TESTING ONLY: remove the index-th shard.all_reduce (module "
           "order, from 0), using its operand in place of its result";
  }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<shard::ShardDialect>();
  }

  Option<int64_t> index{*this, "index",
                        llvm::cl::desc("Which shard.all_reduce to drop "
                                       "(0-based, in module order)"),
                        llvm::cl::init(0)};

  void runOnOperation() override {
    SmallVector<shard::AllReduceOp> reduces;
    getOperation().walk([&](shard::AllReduceOp op) { reduces.push_back(op); });
    if (index < 0 || index >= static_cast<int64_t>(reduces.size())) {
      getOperation().emitError("tsr-test-drop-collective: index ")
          << static_cast<int64_t>(index) << " out of range: the module has "
          << reduces.size() << " shard.all_reduce ops";
      return signalPassFailure();
    }
    shard::AllReduceOp op = reduces[static_cast<int64_t>(index)];
    op.getResult().replaceAllUsesWith(op.getInput());
    op.erase();
  }
};

} // namespace

void tessera::test::registerTestPasses() {
  PassRegistration<TestDropCollectivePass>();
}

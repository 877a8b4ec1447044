//===- OverlapCollectives.cpp - gradient buckets, non-blocking all-reduce -===//
//
// Implements `tsr-overlap-gradient-collectives` (see Passes.td): groups the
// data-parallel all-reduces of a runtime program into buckets in the order
// their inputs become ready, and turns each bucket into one
// tsrt.all_reduce_start right after its last input and one tsrt.wait right
// before the first use of a result.
//
//===----------------------------------------------------------------------===//

#include "passes/lowering/Passes.h"

#include "dialects/tsrt/TsrtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

namespace tessera::lowering {
#define GEN_PASS_DEF_OVERLAPGRADIENTCOLLECTIVES
#include "passes/lowering/Passes.h.inc"
} // namespace tessera::lowering

using namespace mlir;
using namespace tessera;

namespace {

/// One data-parallel all-reduce and where its input becomes ready.
struct Candidate {
  mutable tsrt::AllReduceOp op; // op handles are cheap values
  int64_t ready = -1;   ///< position of the input's maker (-1: argument)
  int64_t firstUse = 0; ///< position of the first user of the result
  int64_t bytes = 0;
};

int64_t tensorBytes(Type type) {
  auto t = cast<RankedTensorType>(type);
  return t.getNumElements() *
         std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
}

struct OverlapGradientCollectivesPass
    : lowering::impl::OverlapGradientCollectivesBase<
          OverlapGradientCollectivesPass> {
  using OverlapGradientCollectivesBase::OverlapGradientCollectivesBase;

  void runOnOperation() override {
    FunctionOpInterface func = getOperation();
    if (bucketMb < 0) {
      func.emitError("tsr-overlap-gradient-collectives: bucket-mb must be "
                     ">= 0, got ")
          << bucketMb;
      return signalPassFailure();
    }
    // Pipeline programs and the grid's axis names are facts of the enclosing
    // module (its tsrt.pipeline_schedule and tsrt.grid_axes, which no
    // function pass changes).
    auto module = func->getParentOfType<ModuleOp>();
    if (!module || !module.getOps<tsrt::PipelineScheduleOp>().empty())
      return;
    int16_t dpAxis = -1;
    if (auto names = module->getAttrOfType<ArrayAttr>("tsrt.grid_axes"))
      for (auto [i, name] : llvm::enumerate(names))
        if (cast<StringAttr>(name).getValue() == "dp")
          dpAxis = static_cast<int16_t>(i);
    if (dpAxis < 0)
      return;
    if (!func.isExternal())
      runOnFunction(func, dpAxis);
  }

  void runOnFunction(FunctionOpInterface func, int16_t dpAxis) {
    Block &body = func.getFunctionBody().front();
    DenseMap<Operation *, int64_t> position;
    for (auto [i, op] : llvm::enumerate(body))
      position[&op] = i;
    SmallVector<Candidate> candidates;
    for (auto ar : body.getOps<tsrt::AllReduceOp>()) {
      if (!llvm::is_contained(ar.getGridAxes(), dpAxis) ||
          ar.getResult().use_empty())
        continue;
      Candidate c{ar, -1, INT64_MAX, tensorBytes(ar.getInput().getType())};
      if (Operation *def = ar.getInput().getDefiningOp())
        c.ready = position[def];
      for (Operation *user : ar.getResult().getUsers())
        c.firstUse = std::min(c.firstUse, position[user]);
      candidates.push_back(c);
    }
    llvm::stable_sort(candidates, [](const Candidate &a, const Candidate &b) {
      return a.ready < b.ready;
    });

    // Buckets, in order of readiness.
    int64_t cap = static_cast<int64_t>(bucketMb * (1 << 20));
    SmallVector<SmallVector<Candidate>> buckets;
    int64_t bucketBytes = 0, bucketFirstUse = INT64_MAX;
    for (const Candidate &c : candidates) {
      bool fits = false;
      if (!buckets.empty() && !buckets.back().empty() && bucketBytes < cap) {
        tsrt::AllReduceOp head = buckets.back().front().op;
        fits = head.getGridAxes() == c.op.getGridAxes() &&
               head.getReduction() == c.op.getReduction() &&
               getElementTypeOrSelf(head.getInput().getType()) ==
                   getElementTypeOrSelf(c.op.getInput().getType()) &&
               c.ready < bucketFirstUse;
      }
      if (!fits) {
        buckets.emplace_back();
        bucketBytes = 0;
        bucketFirstUse = INT64_MAX;
      }
      buckets.back().push_back(c);
      bucketBytes += c.bytes;
      bucketFirstUse = std::min(bucketFirstUse, c.firstUse);
    }

    OpBuilder b(func.getContext());
    for (ArrayRef<Candidate> bucket : buckets)
      rewriteBucket(b, body, bucket);
  }

  /// Start after the last input is made, wait before the first use.
  void rewriteBucket(OpBuilder &b, Block &body, ArrayRef<Candidate> bucket) {
    const Candidate *last = &bucket.front();
    for (const Candidate &c : bucket)
      if (c.ready > last->ready)
        last = &c;
    if (Operation *def = last->op.getInput().getDefiningOp())
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(&body);
    tsrt::AllReduceOp head = bucket.front().op;
    Location loc = head.getLoc();
    auto attrs = [&](ArrayRef<NamedAttribute> entries) {
      return b.getDictionaryAttr(entries);
    };
    Value input = head.getInput();
    Type element = getElementTypeOrSelf(input.getType());
    SmallVector<int64_t> sizes;
    if (bucket.size() > 1) {
      SmallVector<Value> flat;
      int64_t total = 0;
      for (const Candidate &c : bucket) {
        auto type = cast<RankedTensorType>(c.op.getInput().getType());
        sizes.push_back(type.getNumElements());
        total += type.getNumElements();
        if (type.getRank() == 1) {
          flat.push_back(c.op.getInput());
          continue;
        }
        flat.push_back(tsrt::KernelOp::create(
                           b, c.op.getLoc(),
                           TypeRange{RankedTensorType::get(
                               {type.getNumElements()}, element)},
                           "reshape", ValueRange{c.op.getInput()}, attrs({}))
                           .getResult(0));
      }
      input = tsrt::KernelOp::create(
                  b, loc, TypeRange{RankedTensorType::get({total}, element)},
                  "concat", flat,
                  attrs({b.getNamedAttr("axis", b.getI64IntegerAttr(0))}))
                  .getResult(0);
    }
    auto start = tsrt::AllReduceStartOp::create(b, loc, input.getType(), input,
                                                head.getGridAxesAttr(),
                                                head.getReductionAttr());

    // The first user of any member's result, in block order.
    Operation *first = nullptr;
    for (const Candidate &c : bucket)
      for (Operation *user : c.op.getResult().getUsers())
        if (!first || user->isBeforeInBlock(first))
          first = user;
    b.setInsertionPoint(first);
    Value done =
        tsrt::WaitOp::create(b, loc, input.getType(), start.getResult(), input)
            .getResult();
    int64_t offset = 0;
    for (auto [i, c] : llvm::enumerate(bucket)) {
      Value result = done;
      if (bucket.size() > 1) {
        int64_t n = sizes[i];
        Value piece =
            tsrt::KernelOp::create(
                b, c.op.getLoc(),
                TypeRange{RankedTensorType::get({n}, element)}, "slice",
                ValueRange{done},
                attrs({b.getNamedAttr("limit_indices",
                                      b.getDenseI64ArrayAttr({offset + n})),
                       b.getNamedAttr("start_indices",
                                      b.getDenseI64ArrayAttr({offset})),
                       b.getNamedAttr("strides", b.getDenseI64ArrayAttr({1}))}))
                .getResult(0);
        result = piece;
        if (piece.getType() != c.op.getResult().getType())
          result = tsrt::KernelOp::create(
                       b, c.op.getLoc(), TypeRange{c.op.getResult().getType()},
                       "reshape", ValueRange{piece}, attrs({}))
                       .getResult(0);
        offset += n;
      }
      c.op.getResult().replaceAllUsesWith(result);
      c.op.erase();
    }
  }
};

} // namespace

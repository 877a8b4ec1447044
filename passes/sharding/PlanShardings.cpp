//===- PlanShardings.cpp - the Plan's parameter shardings as IR -----------===//

#include "passes/sharding/PlanShardings.h"

#include "dialects/tsr/DiscardableAttrs.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace tessera;

tsr::ShardingAttr sharding::shardingOf(const planner::TensorLayout &layout,
                                       const planner::GridSpec &grid,
                                       FlatSymbolRefAttr gridRef) {
  SmallVector<tsr::ShardingAttr::DimFactors> dims;
  for (const std::vector<planner::LayoutFactor> &dim : layout.dims) {
    tsr::ShardingAttr::DimFactors factors;
    for (const planner::LayoutFactor &f : dim) {
      tsr::ShardingAttr::SubFactor sub{f.size, {}};
      for (const std::string &axis : f.axes) {
        std::optional<size_t> index = grid.axisIndex(axis);
        assert(index && "layout axis not in the grid (parse with the grid)");
        sub.axes.push_back(static_cast<int16_t>(*index));
      }
      factors.push_back(std::move(sub));
    }
    dims.push_back(std::move(factors));
  }
  return tsr::ShardingAttr::getFactored(gridRef.getContext(), gridRef, dims,
                                        /*partial=*/{}, grid.shape);
}

planner::TensorLayout sharding::layoutOf(tsr::ShardingAttr sharding,
                                         ArrayRef<int64_t> shape,
                                         const planner::GridSpec &grid) {
  planner::TensorLayout layout;
  for (auto [d, size] : llvm::enumerate(shape)) {
    std::vector<planner::LayoutFactor> factors;
    for (const tsr::ShardingAttr::SubFactor &sub :
         sharding.getDimFactors(d, size)) {
      planner::LayoutFactor f{sub.size, {}};
      for (int16_t a : sub.axes)
        f.axes.push_back(a >= 0 && static_cast<size_t>(a) < grid.names.size()
                             ? grid.names[a]
                             : std::to_string(a));
      factors.push_back(std::move(f));
    }
    layout.dims.push_back(std::move(factors));
  }
  return layout;
}

FailureOr<llvm::StringMap<tsr::ShardingAttr>>
sharding::parsePlanShardings(ArrayRef<std::string> entries, func::FuncOp func,
                             const planner::GridSpec &grid,
                             FlatSymbolRefAttr gridRef) {
  llvm::StringMap<RankedTensorType> arguments;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto name = tsr::getArgName(func, i))
      if (auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[i]))
        arguments[name.getValue()] = type;
  llvm::StringMap<tsr::ShardingAttr> out;
  for (const std::string &entry : entries) {
    auto [name, text] = StringRef(entry).rsplit('=');
    if (name.size() == entry.size())
      return func.emitError("shardings: '") << entry << "' is not NAME=LAYOUT";
    auto it = arguments.find(name);
    if (it == arguments.end())
      return func.emitError("shardings: '")
             << name << "' is not an argument of @" << func.getSymName();
    llvm::Expected<planner::TensorLayout> layout =
        planner::parseLayoutText(text, it->second.getShape(), &grid);
    if (!layout)
      return func.emitError("shardings: '")
             << name << "': '" << text
             << "': " << llvm::toString(layout.takeError());
    out[name] = shardingOf(*layout, grid, gridRef);
  }
  return out;
}

//===- ShardingRule.cpp - factor-based sharding rules ---------------------===//

#include "dialects/tsr/ShardingRule.h"
#include "dialects/tsr/TsrDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace tessera::tsr;

bool ShardingRule::isReduction(int64_t f) const {
  if (factors[f].needReplication || factors[f].reducedByOp)
    return false;
  for (const TensorFactors &result : results)
    for (const DimFactors &dim : result)
      if (llvm::is_contained(dim, f))
        return false;
  return true;
}

bool ShardingRule::isReductionFor(int64_t f, unsigned result) const {
  if (factors[f].needReplication || factors[f].reducedByOp)
    return false;
  for (const DimFactors &dim : results[result])
    if (llvm::is_contained(dim, f))
      return false;
  for (const TensorFactors &operand : operands)
    for (const DimFactors &dim : operand)
      if (llvm::is_contained(dim, f))
        return true;
  return false;
}

static LogicalResult verifyTensor(Operation *op, const ShardingRule &rule,
                                  Type type,
                                  const ShardingRule::TensorFactors &dims,
                                  StringRef what, unsigned index) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return op->emitOpError("sharding rule: ")
           << what << " " << index << " is not a ranked tensor";
  if (static_cast<int64_t>(dims.size()) != tensor.getRank())
    return op->emitOpError("sharding rule: ")
           << what << " " << index << " has " << dims.size()
           << " factor lists for rank " << tensor.getRank();
  for (auto [d, factors] : llvm::enumerate(dims)) {
    int64_t product = 1;
    for (int64_t f : factors) {
      if (f < 0 || f >= static_cast<int64_t>(rule.factors.size()))
        return op->emitOpError("sharding rule: bad factor index ") << f;
      product *= rule.factors[f].size;
    }
    if (product != tensor.getDimSize(d))
      return op->emitOpError("sharding rule: ")
             << what << " " << index << " dim " << d << " has size "
             << tensor.getDimSize(d) << " but its factors multiply to "
             << product;
  }
  return success();
}

LogicalResult ShardingRule::verify(Operation *op) const {
  if (operands.size() != op->getNumOperands() ||
      results.size() != op->getNumResults())
    return op->emitOpError("sharding rule covers ")
           << operands.size() << " operands and " << results.size()
           << " results";
  for (auto [i, type] : llvm::enumerate(op->getOperandTypes()))
    if (failed(verifyTensor(op, *this, type, operands[i], "operand", i)))
      return failure();
  for (auto [i, type] : llvm::enumerate(op->getResultTypes()))
    if (failed(verifyTensor(op, *this, type, results[i], "result", i)))
      return failure();
  return success();
}

ShardingRule ShardingRule::elementwise(Operation *op) {
  ShardingRule rule;
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  TensorFactors dims;
  for (int64_t size : type.getShape())
    dims.push_back({rule.addFactor(size)});
  rule.operands.assign(op->getNumOperands(), dims);
  rule.results.assign(op->getNumResults(), dims);
  return rule;
}

ShardingRule ShardingRule::replicated(Operation *op) {
  ShardingRule rule;
  auto addTensor = [&](Type type) {
    TensorFactors dims;
    for (int64_t size : cast<RankedTensorType>(type).getShape())
      dims.push_back({rule.addFactor(size, /*needReplication=*/true)});
    return dims;
  };
  for (Type t : op->getOperandTypes())
    rule.operands.push_back(addTensor(t));
  for (Type t : op->getResultTypes())
    rule.results.push_back(addTensor(t));
  return rule;
}

//===----------------------------------------------------------------------===//
// #tsr.sharding
//===----------------------------------------------------------------------===//

static int64_t axesSize(ArrayRef<int16_t> axes, ArrayRef<int64_t> gridShape) {
  int64_t n = 1;
  for (int16_t a : axes)
    if (a >= 0 && a < static_cast<int64_t>(gridShape.size()))
      n *= gridShape[a];
  return n;
}

void ShardingAttr::canonicalize(DimFactors &dim, ArrayRef<int64_t> gridShape) {
  // Unit sub-factors carry nothing.
  llvm::erase_if(dim, [&](const SubFactor &f) {
    return f.size == 1 && f.axes.empty() && dim.size() > 1;
  });
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t i = 0; i + 1 < dim.size(); ++i) {
      SubFactor &a = dim[i];
      const SubFactor &b = dim[i + 1];
      int64_t ka = axesSize(a.axes, gridShape);
      int64_t kb = axesSize(b.axes, gridShape);
      bool merge = false;
      if (b.axes.empty() && a.size % ka == 0) {
        merge = true; // {s : [a], t} == block split of s*t over a
      } else if (ka == a.size && b.size % kb == 0) {
        merge = true; // one row of s per rank: {s : [a], t : [b]} == [a, b]
        a.axes.append(b.axes.begin(), b.axes.end());
      }
      if (merge) {
        a.size *= b.size;
        dim.erase(dim.begin() + i + 1);
        changed = true;
        break;
      }
    }
  }
}

ShardingAttr ShardingAttr::getFactored(MLIRContext *ctx, FlatSymbolRefAttr grid,
                                       ArrayRef<DimFactors> dims,
                                       ArrayRef<int16_t> partial,
                                       ArrayRef<int64_t> gridShape) {
  SmallVector<shard::GridAxesAttr> split;
  SmallVector<int64_t> enc;
  bool anyFactored = false;
  for (const DimFactors &original : dims) {
    DimFactors dim = original;
    canonicalize(dim, gridShape);
    SmallVector<int16_t> all;
    for (const SubFactor &f : dim)
      all.append(f.axes.begin(), f.axes.end());
    split.push_back(DenseI16ArrayAttr::get(ctx, all));
    if (dim.size() <= 1) {
      enc.push_back(0);
      continue;
    }
    anyFactored = true;
    enc.push_back(dim.size());
    for (const SubFactor &f : dim) {
      enc.push_back(f.size);
      enc.push_back(f.axes.size());
    }
  }
  if (!anyFactored)
    enc.clear();
  SmallVector<int16_t> sortedPartial(partial.begin(), partial.end());
  llvm::sort(sortedPartial);
  return ShardingAttr::get(ctx, grid, shard::GridAxesArrayAttr::get(ctx, split),
                           sortedPartial, enc);
}

ShardingAttr ShardingAttr::getReplicated(MLIRContext *ctx,
                                         FlatSymbolRefAttr grid,
                                         unsigned rank) {
  SmallVector<shard::GridAxesAttr> split(rank, DenseI16ArrayAttr::get(ctx, {}));
  return ShardingAttr::get(ctx, grid, shard::GridAxesArrayAttr::get(ctx, split),
                           {}, {});
}

bool ShardingAttr::isReplicated() const {
  if (!getPartialAxes().empty())
    return false;
  for (auto axes : getSplitAxes())
    if (!axes.empty())
      return false;
  return true;
}

ArrayRef<int16_t> ShardingAttr::getDimAxes(unsigned dim) const {
  if (dim >= getSplitAxes().size())
    return {};
  return getSplitAxes().getAxes()[dim].asArrayRef();
}

/// Offset of dim `dim`'s run in the `factors` encoding, or -1 when plain.
static int64_t factorRun(ArrayRef<int64_t> enc, unsigned dim) {
  if (enc.empty())
    return -1;
  size_t pos = 0;
  for (unsigned d = 0; d < dim && pos < enc.size(); ++d)
    pos += 1 + 2 * enc[pos];
  if (pos >= enc.size() || enc[pos] == 0)
    return -1;
  return pos;
}

bool ShardingAttr::isDimFactored(unsigned dim) const {
  return factorRun(getFactors(), dim) >= 0;
}

ShardingAttr::DimFactors ShardingAttr::getDimFactors(unsigned dim,
                                                     int64_t dimSize) const {
  ArrayRef<int16_t> axes = getDimAxes(dim);
  int64_t pos = factorRun(getFactors(), dim);
  if (pos < 0)
    return {SubFactor{dimSize, SmallVector<int16_t, 2>(axes)}};
  ArrayRef<int64_t> enc = getFactors();
  DimFactors result;
  size_t next = 0;
  for (int64_t i = 0; i < enc[pos]; ++i) {
    int64_t size = enc[pos + 1 + 2 * i], count = enc[pos + 2 + 2 * i];
    SubFactor f{size, {}};
    for (int64_t j = 0; j < count && next < axes.size(); ++j)
      f.axes.push_back(axes[next++]);
    result.push_back(f);
  }
  return result;
}

int64_t ShardingAttr::getDimChunks(unsigned dim) const {
  int64_t pos = factorRun(getFactors(), dim);
  if (pos < 0)
    return 1;
  ArrayRef<int64_t> enc = getFactors();
  if (enc[pos] == 2 && enc[pos + 2] == 0)
    return enc[pos + 1];
  return 1;
}

static void printAxes(AsmPrinter &printer, ArrayRef<int16_t> axes) {
  printer << "[";
  llvm::interleaveComma(axes, printer);
  printer << "]";
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printAttributeWithoutType(getGrid());
  printer << ", [";
  for (unsigned d = 0; d < getRank(); ++d) {
    if (d)
      printer << ", ";
    if (!isDimFactored(d)) {
      printAxes(printer, getDimAxes(d));
      continue;
    }
    printer << "{";
    DimFactors subs = getDimFactors(d, 0);
    llvm::interleaveComma(subs, printer, [&](const SubFactor &f) {
      printer << f.size;
      if (!f.axes.empty()) {
        printer << " : ";
        printAxes(printer, f.axes);
      }
    });
    printer << "}";
  }
  printer << "]";
  if (!getPartialAxes().empty()) {
    printer << " partial = ";
    printAxes(printer, getPartialAxes());
  }
  printer << ">";
}

static ParseResult parseAxes(AsmParser &parser,
                             SmallVectorImpl<int16_t> &axes) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square,
                                        [&]() -> ParseResult {
                                          int16_t a;
                                          if (parser.parseInteger(a))
                                            return failure();
                                          axes.push_back(a);
                                          return success();
                                        });
}

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  MLIRContext *ctx = parser.getContext();
  FlatSymbolRefAttr grid;
  if (parser.parseLess() || parser.parseAttribute(grid) || parser.parseComma())
    return {};
  SmallVector<shard::GridAxesAttr> split;
  SmallVector<int64_t> enc;
  bool anyFactored = false;
  auto parseDim = [&]() -> ParseResult {
    SmallVector<int16_t> all;
    if (succeeded(parser.parseOptionalLBrace())) {
      SmallVector<int64_t> run;
      if (parser.parseCommaSeparatedList([&]() -> ParseResult {
            int64_t size;
            SmallVector<int16_t> axes;
            if (parser.parseInteger(size))
              return failure();
            if (succeeded(parser.parseOptionalColon()) &&
                parseAxes(parser, axes))
              return failure();
            if (size <= 0)
              return parser.emitError(parser.getCurrentLocation(),
                                      "sub-factor sizes must be positive");
            run.push_back(size);
            run.push_back(axes.size());
            all.append(axes.begin(), axes.end());
            return success();
          }) ||
          parser.parseRBrace())
        return failure();
      enc.push_back(run.size() / 2);
      enc.append(run.begin(), run.end());
      anyFactored = true;
    } else {
      if (parseAxes(parser, all))
        return failure();
      enc.push_back(0);
    }
    split.push_back(DenseI16ArrayAttr::get(ctx, all));
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseDim))
    return {};
  SmallVector<int16_t> partial;
  if (succeeded(parser.parseOptionalKeyword("partial")))
    if (parser.parseEqual() || parseAxes(parser, partial))
      return {};
  if (parser.parseGreater())
    return {};
  // A grid axis splits at most one dimension, and a partial axis splits
  // none: every rank holds one block of the tensor.
  SmallVector<int16_t> seen;
  for (shard::GridAxesAttr dim : split)
    for (int16_t a : dim.asArrayRef()) {
      if (llvm::is_contained(seen, a)) {
        parser.emitError(parser.getNameLoc(), "grid axis ")
            << a << " splits more than one dimension";
        return {};
      }
      seen.push_back(a);
    }
  for (auto [k, a] : llvm::enumerate(partial))
    if (llvm::is_contained(seen, a) ||
        llvm::is_contained(ArrayRef<int16_t>(partial).take_front(k), a)) {
      parser.emitError(parser.getNameLoc(), "grid axis ")
          << a << " is partial and also splits a dimension or is repeated";
      return {};
    }
  if (!anyFactored)
    enc.clear();
  return ShardingAttr::get(ctx, grid, shard::GridAxesArrayAttr::get(ctx, split),
                           partial, enc);
}

//===- ShardingRules.cpp - ShardingRuleOpInterface for every tsr op -------===//
//
// Grouped by op family, in TsrOps.td order. See ShardingRule.h for the model.
//
//===----------------------------------------------------------------------===//

#include "dialects/tsr/TsrOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/Sequence.h"
#include <numeric>

using namespace mlir;
using namespace tessera::tsr;

using TensorFactors = ShardingRule::TensorFactors;

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

/// Adds one factor per dimension of `shape`.
static TensorFactors addFactors(ShardingRule &rule, ArrayRef<int64_t> shape,
                                bool needReplication = false) {
  TensorFactors dims;
  for (int64_t size : shape)
    dims.push_back({rule.addFactor(size, needReplication)});
  return dims;
}

//===----------------------------------------------------------------------===//
// Constants and elementwise
//===----------------------------------------------------------------------===//

ShardingRule ConstantOp::getShardingRule() {
  return ShardingRule::elementwise(*this);
}

/// Elementwise ops linear in some operand groups (partial sums pass through).
static ShardingRule
linearElementwise(Operation *op, ArrayRef<SmallVector<unsigned, 2>> groups) {
  ShardingRule rule = ShardingRule::elementwise(op);
  rule.linearGroups.assign(groups.begin(), groups.end());
  return rule;
}

ShardingRule AddOp::getShardingRule() {
  return linearElementwise(*this, {{0, 1}});
}
ShardingRule SubOp::getShardingRule() {
  return linearElementwise(*this, {{0, 1}});
}
ShardingRule MulOp::getShardingRule() {
  return linearElementwise(*this, {{0}, {1}});
}
ShardingRule DivOp::getShardingRule() {
  return linearElementwise(*this, {{0}});
}
ShardingRule NegOp::getShardingRule() {
  return linearElementwise(*this, {{0}});
}
ShardingRule SelectOp::getShardingRule() {
  return linearElementwise(*this, {{1, 2}});
}

#define TSR_ELEMENTWISE_RULE(OP)                                               \
  ShardingRule OP::getShardingRule() {                                         \
    return ShardingRule::elementwise(*this);                                   \
  }
TSR_ELEMENTWISE_RULE(PowOp)
TSR_ELEMENTWISE_RULE(MaxOp)
TSR_ELEMENTWISE_RULE(EqualOp)
TSR_ELEMENTWISE_RULE(ExpOp)
TSR_ELEMENTWISE_RULE(LogOp)
TSR_ELEMENTWISE_RULE(SqrtOp)
TSR_ELEMENTWISE_RULE(RsqrtOp)
TSR_ELEMENTWISE_RULE(TanhOp)
TSR_ELEMENTWISE_RULE(ErfOp)
TSR_ELEMENTWISE_RULE(ReluOp)
TSR_ELEMENTWISE_RULE(GeluOp)
TSR_ELEMENTWISE_RULE(SigmoidOp)
TSR_ELEMENTWISE_RULE(SiluOp)
TSR_ELEMENTWISE_RULE(ConvertOp)
TSR_ELEMENTWISE_RULE(ShardingConstraintOp)
TSR_ELEMENTWISE_RULE(ReluGradOp)
TSR_ELEMENTWISE_RULE(GeluGradOp)
TSR_ELEMENTWISE_RULE(SiluGradOp)
#undef TSR_ELEMENTWISE_RULE

ShardingRule BroadcastOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> out = shapeOf(getResult()), in = shapeOf(getInput());
  TensorFactors result = addFactors(rule, out);
  TensorFactors input;
  int64_t offset = out.size() - in.size();
  for (auto [d, size] : llvm::enumerate(in)) {
    if (size == out[d + offset])
      input.push_back(result[d + offset]);
    else
      input.push_back({rule.addFactor(size)});
  }
  rule.operands = {input};
  rule.results = {result};
  rule.linearGroups = {{0}};
  return rule;
}

/// One factor per result dimension, shared by every result; an input's
/// dimension of the result's size (trailing-aligned) takes its factor, a
/// broadcast dimension of size 1 a factor of its own (size 1, never split).
ShardingRule FusedElementwiseOp::getShardingRule() {
  ShardingRule rule;
  if (getNumResults() == 0)
    return rule;
  ArrayRef<int64_t> out = shapeOf(getResult(0));
  TensorFactors result = addFactors(rule, out);
  for (Value in : getInputs()) {
    ArrayRef<int64_t> shape = shapeOf(in);
    TensorFactors input;
    int64_t offset = out.size() - shape.size();
    for (auto [d, size] : llvm::enumerate(shape)) {
      if (offset >= 0 && size == out[d + offset])
        input.push_back(result[d + offset]);
      else
        input.push_back({rule.addFactor(size)});
    }
    rule.operands.push_back(input);
  }
  rule.results.assign(getNumResults(), result);
  return rule;
}

/// Reductions: kept dims share factors. A reduced dim's factor is a
/// reduction (partial result) for sum; mean and max need it whole.
static ShardingRule reduceRule(Operation *op, ArrayRef<int64_t> axes,
                               bool keepdim, bool reducedIsPartial) {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  TensorFactors input, result;
  for (auto [d, size] : llvm::enumerate(in)) {
    bool reduced = llvm::is_contained(axes, (int64_t)d);
    int64_t f = rule.addFactor(size, reduced && !reducedIsPartial);
    input.push_back({f});
    if (!reduced)
      result.push_back({f});
    else if (keepdim)
      result.push_back({rule.addFactor(1)});
  }
  rule.operands = {input};
  rule.results = {result};
  return rule;
}

ShardingRule ReduceSumOp::getShardingRule() {
  ShardingRule rule =
      reduceRule(*this, getAxes(), getKeepdim(), /*reducedIsPartial=*/true);
  rule.linearGroups = {{0}};
  return rule;
}
/// Every input dimension is a reduction: a split input gives a result
/// partial over its axes. Not linear (no linearGroups): a partial input is
/// reduced first.
ShardingRule SumSquaresOp::getShardingRule() {
  auto rank = static_cast<int64_t>(shapeOf(getInput()).size());
  return reduceRule(*this, llvm::to_vector(llvm::seq<int64_t>(0, rank)),
                    /*keepdim=*/false, /*reducedIsPartial=*/true);
}
ShardingRule ReduceMeanOp::getShardingRule() {
  return reduceRule(*this, getAxes(), getKeepdim(), false);
}
ShardingRule ReduceMaxOp::getShardingRule() {
  return reduceRule(*this, getAxes(), getKeepdim(), false);
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

ShardingRule MatmulOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  int64_t lr = lhs.size(), rr = rhs.size();
  TensorFactors batch = addFactors(rule, lhs.drop_back(2));
  int64_t m = rule.addFactor(lhs[getTransposeLhs() ? lr - 1 : lr - 2]);
  int64_t k = rule.addFactor(lhs[getTransposeLhs() ? lr - 2 : lr - 1]);
  int64_t n = rule.addFactor(rhs[getTransposeRhs() ? rr - 2 : rr - 1]);
  TensorFactors l = batch, r, res = batch;
  if (getTransposeLhs())
    l.append({{k}, {m}});
  else
    l.append({{m}, {k}});
  if (rr != 2)
    r = batch;
  if (getTransposeRhs())
    r.append({{n}, {k}});
  else
    r.append({{k}, {n}});
  res.append({{m}, {n}});
  rule.operands = {l, r};
  rule.results = {res};
  rule.linearGroups = {{0}, {1}};
  return rule;
}

/// tsr.linear: matmul's factors with `bias` following N, but K needs
/// replication: the bias and the activation are applied to the complete
/// product, so the op never yields a partial sum (and has no linearGroups).
ShardingRule LinearOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  int64_t lr = lhs.size(), rr = rhs.size();
  TensorFactors batch = addFactors(rule, lhs.drop_back(2));
  int64_t m = rule.addFactor(lhs[getTransposeLhs() ? lr - 1 : lr - 2]);
  int64_t k = rule.addFactor(lhs[getTransposeLhs() ? lr - 2 : lr - 1],
                             /*needReplication=*/true);
  int64_t n = rule.addFactor(rhs[getTransposeRhs() ? rr - 2 : rr - 1]);
  TensorFactors l = batch, r, res = batch;
  if (getTransposeLhs())
    l.append({{k}, {m}});
  else
    l.append({{m}, {k}});
  if (rr != 2)
    r = batch;
  if (getTransposeRhs())
    r.append({{n}, {k}});
  else
    r.append({{k}, {n}});
  res.append({{m}, {n}});
  rule.operands = {l, r, {{n}}};
  rule.results.assign(getNumResults(), res);
  return rule;
}

/// tsr.bias_activation_grad: elementwise over x, dy and dx; bias_grad has
/// only the last factor, so a split leading dimension makes it partial.
ShardingRule BiasActivationGradOp::getShardingRule() {
  ShardingRule rule;
  TensorFactors x = addFactors(rule, shapeOf(getInput()));
  rule.operands = {x, x};
  rule.results = {x, {x.back()}};
  return rule;
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

/// Reshape: both shapes are cut at every boundary of either side's running
/// product, giving the finest common factorization. [S,B,D] -> [S,B*H,Dh]
/// has boundaries S, S*B, S*B*H, S*B*H*Dh, so D = [H, Dh] and B*H = [B, H]:
/// batch and heads stay separately shardable through PyTorch's merged
/// attention layout. Where the boundaries do not nest ([6,4] -> [4,6]) the
/// dimensions involved cannot be split.
ShardingRule ReshapeOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  TensorFactors input(in.size()), result(out.size());
  // Running products (boundaries) of each side, merged and deduplicated.
  SmallVector<int64_t> bounds;
  int64_t p = 1;
  for (int64_t s : in)
    bounds.push_back(p *= s);
  p = 1;
  for (int64_t s : out)
    bounds.push_back(p *= s);
  llvm::sort(bounds);
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  bool nested = true;
  for (size_t i = 1; i < bounds.size(); ++i)
    nested &= bounds[i] % bounds[i - 1] == 0;
  if (!nested) {
    rule.operands = {addFactors(rule, in, /*needReplication=*/true)};
    rule.results = {addFactors(rule, out, /*needReplication=*/true)};
    return rule;
  }
  // One factor per interval between consecutive boundaries.
  SmallVector<int64_t> factorOf; // factor index per interval
  int64_t prev = 1;
  for (int64_t b : bounds) {
    factorOf.push_back(rule.addFactor(b / prev));
    prev = b;
  }
  auto assign = [&](ArrayRef<int64_t> shape, TensorFactors &dims) {
    int64_t lo = 1;
    size_t k = 0;
    for (auto [d, size] : llvm::enumerate(shape)) {
      int64_t hi = lo * size;
      if (size == 1) { // a unit dim owns a unit factor
        dims[d] = {rule.addFactor(1)};
        continue;
      }
      while (k < bounds.size() && bounds[k] <= lo)
        ++k;
      for (; k < bounds.size() && bounds[k] <= hi; ++k)
        dims[d].push_back(factorOf[k]);
      lo = hi;
    }
  };
  assign(in, input);
  assign(out, result);
  rule.operands = {input};
  rule.results = {result};
  rule.linearGroups = {{0}};
  return rule;
}

ShardingRule TransposeOp::getShardingRule() {
  ShardingRule rule;
  TensorFactors input = addFactors(rule, shapeOf(getInput()));
  TensorFactors result;
  for (int64_t p : getPermutation())
    result.push_back(input[p]);
  rule.operands = {input};
  rule.results = {result};
  rule.linearGroups = {{0}};
  return rule;
}

/// Slice: untouched dims share a factor. A dim cut into chunk c of k equal
/// chunks (PyTorch's fused QKV `chunk(3)`) is [k, size/k] in the operand and
/// the chunk factor passes through; any other cut needs the dim whole.
/// Localized, chunk c of a split chunk factor of local extent l is [c·l,
/// (c+1)·l) and an untouched dim spans its local extent.
ShardingRule SliceOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  TensorFactors input, result;
  // Per dim: (chunk index, factor whose local extent bounds it), or -1 for
  // dims whose bounds stay as they are.
  SmallVector<std::pair<int64_t, int64_t>> localBounds;
  for (auto [d, size] : llvm::enumerate(in)) {
    int64_t start = getStartIndices()[d], limit = getLimitIndices()[d],
            stride = getStrides()[d];
    if (start == 0 && limit == size && stride == 1) {
      int64_t f = rule.addFactor(size);
      input.push_back({f});
      result.push_back({f});
      localBounds.push_back({0, f});
    } else if (stride == 1 && out[d] > 1 && size % out[d] == 0 &&
               start % out[d] == 0) {
      int64_t count = rule.addFactor(size / out[d], /*needReplication=*/true);
      int64_t chunk = rule.addFactor(out[d]);
      input.push_back({count, chunk});
      result.push_back({chunk});
      localBounds.push_back({start / out[d], chunk});
    } else {
      input.push_back({rule.addFactor(size, true)});
      result.push_back({rule.addFactor(out[d], true)});
      localBounds.push_back({0, -1});
    }
  }
  rule.operands = {input};
  rule.results = {result};
  rule.linearGroups = {{0}};
  rule.localize = [localBounds](Operation *op, ArrayRef<int64_t> local,
                                ShardingRule::FactorAxes) -> LogicalResult {
    auto slice = cast<SliceOp>(op);
    SmallVector<int64_t> start(slice.getStartIndices()),
        limit(slice.getLimitIndices());
    for (auto [d, bound] : llvm::enumerate(localBounds)) {
      if (bound.second < 0)
        continue;
      int64_t extent = local[bound.second];
      start[d] = bound.first * extent;
      limit[d] = start[d] + extent;
    }
    OpBuilder b(op->getContext());
    slice.setStartIndicesAttr(b.getDenseI64ArrayAttr(start));
    slice.setLimitIndicesAttr(b.getDenseI64ArrayAttr(limit));
    return success();
  };
  return rule;
}

/// Concat: other dims share factors. Along `axis`, with c the gcd of the
/// inputs' extents, every input is [n_i/c, c] and the result [Σn_i/c, c]:
/// the chunk factor c is shared and may be split (concatenating the local
/// pieces of the Q, K and V gradients gives the local fused QKV gradient),
/// the chunk counts need replication.
ShardingRule ConcatOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> out = shapeOf(getResult());
  int64_t axis = getAxis();
  int64_t c = 0;
  for (Value input : getInputs())
    c = std::gcd(c, shapeOf(input)[axis]);
  bool chunked = c > 1;
  int64_t chunk = chunked ? rule.addFactor(c) : -1;
  TensorFactors result;
  for (auto [d, size] : llvm::enumerate(out)) {
    if ((int64_t)d != axis)
      result.push_back({rule.addFactor(size)});
    else if (chunked)
      result.push_back({rule.addFactor(size / c, true), chunk});
    else
      result.push_back({rule.addFactor(size, true)});
  }
  for (Value input : getInputs()) {
    TensorFactors dims = result;
    int64_t n = shapeOf(input)[axis];
    if (chunked)
      dims[axis] = {rule.addFactor(n / c, true), chunk};
    else
      dims[axis] = {rule.addFactor(n, true)};
    rule.operands.push_back(dims);
  }
  rule.results = {result};
  SmallVector<unsigned, 2> all;
  for (unsigned i = 0; i < getInputs().size(); ++i)
    all.push_back(i);
  rule.linearGroups = {all};
  return rule;
}

//===----------------------------------------------------------------------===//
// Neural-network ops
//===----------------------------------------------------------------------===//

/// Records on a localized op the grid axes its vocabulary factor `v` is
/// split over (`grid_axes`, read by the runtime to get the rank's vocabulary
/// range and a communicator), or removes the attribute when `v` is whole.
static LogicalResult recordVocabAxes(Operation *op, int64_t v,
                                     ShardingRule::FactorAxes axes) {
  if (v < static_cast<int64_t>(axes.size()) && !axes[v].empty())
    op->setAttr("grid_axes", DenseI16ArrayAttr::get(op->getContext(), axes[v]));
  else
    op->removeAttr("grid_axes");
  return success();
}

/// gather: table [V, D...], indices [I...] -> [I..., D...]. V is a reduction:
/// with V split (Megatron-LM's vocab-parallel embedding, Shoeybi et al.
/// 2019) each rank looks up only the ids in its row range [r·V/n,
/// (r+1)·V/n) and writes zero rows for the others, so the result is a
/// partial sum over V's axes and the partitioner all-reduces it. The local
/// op carries those axes as `grid_axes`.
ShardingRule GatherOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> table = shapeOf(getTable());
  TensorFactors indices = addFactors(rule, shapeOf(getIndices()));
  TensorFactors rows = addFactors(rule, table.drop_front());
  int64_t v = rule.addFactor(table[0]);
  TensorFactors t = {{v}};
  t.append(rows.begin(), rows.end());
  TensorFactors result = indices;
  result.append(rows.begin(), rows.end());
  rule.operands = {t, indices};
  rule.results = {result};
  rule.localize = [v](Operation *op, ArrayRef<int64_t>,
                      ShardingRule::FactorAxes axes) {
    return recordVocabAxes(op, v, axes);
  };
  return rule;
}

/// gather_grad: splitting the index dims makes the table gradient partial
/// (the data-parallel embedding gradient). The table's V may be split (the
/// vocab-parallel embedding's gradient): each rank scatter-adds only the
/// ids in its row range, recorded as `grid_axes` on the local op.
ShardingRule GatherGradOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> table = shapeOf(getResult());
  TensorFactors indices = addFactors(rule, shapeOf(getIndices()));
  TensorFactors rows = addFactors(rule, table.drop_front());
  TensorFactors grad = indices;
  grad.append(rows.begin(), rows.end());
  int64_t v = rule.addFactor(table[0]);
  TensorFactors result = {{v}};
  result.append(rows.begin(), rows.end());
  rule.operands = {indices, grad};
  rule.results = {result};
  rule.linearGroups = {{1}};
  rule.localize = [v](Operation *op, ArrayRef<int64_t>,
                      ShardingRule::FactorAxes axes) {
    return recordVocabAxes(op, v, axes);
  };
  return rule;
}

/// Leading dims split freely; normalized dims [axis, rank) stay whole.
static std::pair<TensorFactors, TensorFactors>
normalizedFactors(ShardingRule &rule, ArrayRef<int64_t> shape, int64_t axis) {
  TensorFactors all, normalized;
  for (auto [d, size] : llvm::enumerate(shape)) {
    int64_t f = rule.addFactor(size, (int64_t)d >= axis);
    all.push_back({f});
    if ((int64_t)d >= axis)
      normalized.push_back({f});
  }
  return {all, normalized};
}

ShardingRule LayerNormOp::getShardingRule() {
  ShardingRule rule;
  auto [x, norm] = normalizedFactors(rule, shapeOf(getInput()), getAxis());
  rule.operands = {x, norm, norm};
  rule.results = {x};
  return rule;
}

ShardingRule LayerNormGradOp::getShardingRule() {
  ShardingRule rule;
  auto [x, norm] = normalizedFactors(rule, shapeOf(getInput()), getAxis());
  rule.operands = {x, norm, x};
  rule.results = {x, norm, norm};
  return rule;
}

/// RMSNorm: layer_norm's rule without the bias (the row statistic needs the
/// whole normalized dims; scale follows them).
ShardingRule RmsNormOp::getShardingRule() {
  ShardingRule rule;
  auto [x, norm] = normalizedFactors(rule, shapeOf(getInput()), getAxis());
  rule.operands = {x, norm};
  rule.results = {x};
  return rule;
}

/// The leading factors appear in no scale_grad dim: a split batch makes it
/// partial (summed over the rows of every rank).
ShardingRule RmsNormGradOp::getShardingRule() {
  ShardingRule rule;
  auto [x, norm] = normalizedFactors(rule, shapeOf(getInput()), getAxis());
  rule.operands = {x, norm, x};
  rule.results = {x, norm};
  return rule;
}

/// The fused residual add + norm: input, residual, sum and result all
/// follow the norm's input.
ShardingRule AddLayerNormOp::getShardingRule() {
  ShardingRule rule;
  auto [x, norm] = normalizedFactors(rule, shapeOf(getInput()), getAxis());
  rule.operands = {x, x, norm, norm};
  rule.results = {x, x};
  return rule;
}

ShardingRule AddRmsNormOp::getShardingRule() {
  ShardingRule rule;
  auto [x, norm] = normalizedFactors(rule, shapeOf(getInput()), getAxis());
  rule.operands = {x, x, norm};
  rule.results = {x, x};
  return rule;
}

/// The norm's gradient rule with the addend laid out as the input gradient.
ShardingRule LayerNormGradAddOp::getShardingRule() {
  ShardingRule rule;
  auto [x, norm] = normalizedFactors(rule, shapeOf(getInput()), getAxis());
  rule.operands = {x, norm, x, x};
  rule.results = {x, norm, norm};
  return rule;
}

ShardingRule RmsNormGradAddOp::getShardingRule() {
  ShardingRule rule;
  auto [x, norm] = normalizedFactors(rule, shapeOf(getInput()), getAxis());
  rule.operands = {x, norm, x, x};
  rule.results = {x, norm};
  return rule;
}

static ShardingRule softmaxRule(Operation *op, int64_t axis) {
  ShardingRule rule;
  TensorFactors x;
  for (auto [d, size] : llvm::enumerate(shapeOf(op->getResult(0))))
    x.push_back({rule.addFactor(size, (int64_t)d == axis)});
  rule.operands.assign(op->getNumOperands(), x);
  rule.results = {x};
  return rule;
}

ShardingRule SoftmaxOp::getShardingRule() {
  return softmaxRule(*this, getAxis());
}
ShardingRule SoftmaxGradOp::getShardingRule() {
  return softmaxRule(*this, getAxis());
}

/// attention / attention_grad: the leading (batch) dims are factors shared by
/// every tensor and split freely; Sq, Sk, Dh and Dv must stay whole (a split
/// sequence needs the ring/all-gather rules of sequence parallelism, a split
/// head dim would make the scores partial before the softmax). The mask is
/// [Sq, Sk].
///
/// Ring attention (`ring_size` = K > 1, Liu et al. 2023; striped layout,
/// Brandon et al. 2023): queries and keys share ONE sequence, modelled as
/// two factors `so` (S/K, major, needs replication) and `si` (K, minor),
/// and every sequence dim is [so, si]. A dim sharded `{S/K, K : [axes]}`
/// splits `si`: each rank holds the stripe i·K + r of Q, K and V and the
/// kernel rotates K/V around the ring itself, so `si` is `reducedByOp`; as
/// it is in every result nothing is partial. `si` must be split over axes
/// of exactly K ranks (local extent 1), which the local op records as
/// `grid_axes`; when it is not split the local op is plain attention on the
/// whole sequence (no `grid_axes`).
///
/// Grouped-query attention (K/V with Hkv < H heads, dim rank-3): the
/// query's head dim is two factors, `hkv` (major, shared with the K/V head
/// dim) and `nrep` = H / Hkv (minor, the query heads of one group), since
/// query head h = g·nrep + i uses K/V head g. Splitting the heads over tp
/// ({H : [tp]}) therefore splits `hkv`, which needs tp to divide Hkv
/// (Megatron-LM's rule); a layout that does not cut at the factor boundary
/// (tp not dividing Hkv) is not proposed, so the heads stay whole and the
/// partitioner gathers them (correct, not parallel). A split `nrep` (query
/// heads split finer than K/V heads, K/V replicated) is allowed: the
/// backward's dK/dV lack `nrep` and so are partial sums over its axes.
static ShardingRule attentionRule(Operation *op, Value query, Value key,
                                  Value value, Value mask, bool grad,
                                  std::optional<int64_t> ringSize) {
  ShardingRule rule;
  ArrayRef<int64_t> q = shapeOf(query), k = shapeOf(key), v = shapeOf(value);
  int64_t r = q.size();
  TensorFactors batch = addFactors(rule, q.drop_back(2));
  // K/V's leading dims: the query's, with the head dim cut to `hkv` under
  // GQA (the verifier has checked Hkv divides H).
  TensorFactors kvBatch = batch;
  if (r >= 4 && k[r - 3] != q[r - 3] && k[r - 3] > 0 &&
      q[r - 3] % k[r - 3] == 0) {
    rule.factors[batch[r - 3][0]].size = k[r - 3]; // becomes `hkv`
    int64_t nrep = rule.addFactor(q[r - 3] / k[r - 3]);
    batch[r - 3] = {batch[r - 3][0], nrep};
    kvBatch[r - 3] = {batch[r - 3][0]};
  }
  int64_t ring = ringSize.value_or(1);
  // Ring attention needs no mask and one sequence split into K stripes (the
  // verifier's conditions; a partitioned op keeps today's whole-dims rule).
  bool isRing = ring > 1 && !mask && q[r - 2] == k[r - 2] &&
                q[r - 2] % ring == 0 && !op->hasAttr("grid_axes");
  ShardingRule::DimFactors sq, sk;
  int64_t si = -1;
  if (isRing) {
    int64_t so = rule.addFactor(q[r - 2] / ring, /*needReplication=*/true);
    si = rule.addFactor(ring, /*needReplication=*/false,
                        /*reducedByOp=*/true);
    sq = sk = {so, si};
  } else {
    sq = {rule.addFactor(q[r - 2], true)};
    sk = {rule.addFactor(k[r - 2], true)};
  }
  int64_t dh = rule.addFactor(q[r - 1], true);
  int64_t dv = rule.addFactor(v[r - 1], true);
  auto with = [&](const TensorFactors &lead,
                  std::initializer_list<ShardingRule::DimFactors> tail) {
    TensorFactors t = lead;
    for (const ShardingRule::DimFactors &f : tail)
      t.push_back(f);
    return t;
  };
  TensorFactors tq = with(batch, {sq, {dh}}), tk = with(kvBatch, {sk, {dh}}),
                tv = with(kvBatch, {sk, {dv}}), to = with(batch, {sq, {dv}}),
                tlse = with(batch, {sq});
  if (isRing)
    rule.localize = [si, ring](Operation *op, ArrayRef<int64_t> localSizes,
                               ShardingRule::FactorAxes axes) -> LogicalResult {
      if (si >= static_cast<int64_t>(axes.size()) || axes[si].empty()) {
        op->removeAttr("grid_axes");
        return success();
      }
      if (localSizes[si] != 1)
        return op->emitOpError("ring attention's ring factor (")
               << ring << ") must be split over grid axes of exactly " << ring
               << " ranks, but each rank keeps " << localSizes[si]
               << " stripes";
      op->setAttr("grid_axes",
                  DenseI16ArrayAttr::get(op->getContext(), axes[si]));
      return success();
    };
  if (!grad) {
    rule.operands = {tq, tk, tv};
    rule.results = {to, tlse};
  } else {
    rule.operands = {tq, tk, tv, to, tlse, to};
    rule.results = {tq, tk, tv};
  }
  if (mask)
    rule.operands.push_back({sq, sk});
  return rule;
}

ShardingRule AttentionOp::getShardingRule() {
  return attentionRule(*this, getQuery(), getKey(), getValue(), getMask(),
                       false, getRingSize());
}
ShardingRule AttentionGradOp::getShardingRule() {
  return attentionRule(*this, getQuery(), getKey(), getValue(), getMask(), true,
                       getRingSize());
}

/// cross_entropy: N splits into a partial sum. V may be split (Megatron-LM's
/// vocab-parallel cross-entropy, Shoeybi et al. 2019): the kernel all-reduces
/// the row max (MAX) and the sums of exponentials and the target logits
/// (SUM) over V's axes itself, so V is `reducedByOp` and the loss is not
/// partial over them; the full logits are never gathered. The local op
/// carries V's axes as `grid_axes`.
ShardingRule CrossEntropyOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  int64_t n = rule.addFactor(logits[0]);
  int64_t v = rule.addFactor(logits[1], /*needReplication=*/false,
                             /*reducedByOp=*/true);
  rule.operands = {{{n}, {v}}, {{n}}};
  rule.results = {{}};
  rule.localize = [v](Operation *op, ArrayRef<int64_t>,
                      ShardingRule::FactorAxes axes) {
    return recordVocabAxes(op, v, axes);
  };
  return rule;
}

/// cross_entropy_grad: as cross_entropy; with V split the kernel recomputes
/// the row max and sum of exponentials with the same two all-reduces over
/// V's axes (`grid_axes`) and writes its own columns of the gradient.
ShardingRule CrossEntropyGradOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  int64_t n = rule.addFactor(logits[0]);
  int64_t v = rule.addFactor(logits[1], /*needReplication=*/false,
                             /*reducedByOp=*/true);
  rule.operands = {{{n}, {v}}, {{n}}, {}};
  rule.results = {{{n}, {v}}};
  rule.localize = [v](Operation *op, ArrayRef<int64_t>,
                      ShardingRule::FactorAxes axes) {
    return recordVocabAxes(op, v, axes);
  };
  return rule;
}

//===----------------------------------------------------------------------===//
// Optimizer updates: elementwise over the parameter; the step and the
// learning rate are replicated scalars.
//===----------------------------------------------------------------------===//

ShardingRule SgdUpdateOp::getShardingRule() {
  ShardingRule rule;
  TensorFactors p = addFactors(rule, shapeOf(getParam()));
  rule.operands = {p, p, {}};
  rule.results = {p};
  return rule;
}

ShardingRule AdamwUpdateOp::getShardingRule() {
  ShardingRule rule;
  TensorFactors p = addFactors(rule, shapeOf(getParam()));
  rule.operands = {p, p, p, p, {}, {}};
  rule.results = {p, p, p};
  return rule;
}

/// Multi-tensor updates: parameter i's factors are shared by entry i of
/// every operand group and every result group; the scalars (step, lr) are
/// replicated. Every factor is kept whole (needReplication): in the factor
/// model every result depends on every factor of the op, so a result
/// lacking another parameter's split factor would be taken as partial over
/// its axes, and parameters split along different factors over one axis
/// would conflict. The per-parameter independence of the update cannot be
/// expressed, so a propagation through the fused op gathers split
/// operands first (correct, not efficient). tsr-fuse-optimizer forms the op
/// after partition, on local shapes, where nothing propagates through it.
static ShardingRule multiUpdateRule(Operation *op, ValueRange tensors,
                                    unsigned groups, unsigned resultGroups,
                                    unsigned scalars) {
  ShardingRule rule;
  unsigned n = op->getNumResults() / resultGroups;
  SmallVector<TensorFactors> perParam;
  for (unsigned i = 0; i < n; ++i)
    perParam.push_back(
        addFactors(rule, shapeOf(tensors[i]), /*needReplication=*/true));
  for (unsigned k = 0; k < groups; ++k)
    rule.operands.append(perParam.begin(), perParam.end());
  rule.operands.append(scalars, TensorFactors{});
  for (unsigned k = 0; k < resultGroups; ++k)
    rule.results.append(perParam.begin(), perParam.end());
  return rule;
}

ShardingRule MultiSgdUpdateOp::getShardingRule() {
  return multiUpdateRule(*this, getTensors(), 2, 1, 1);
}

ShardingRule MultiAdamwUpdateOp::getShardingRule() {
  return multiUpdateRule(*this, getTensors(), 4, 3, 2);
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

/// Elementwise over `input` and the result (any split passes through;
/// linear in `input`); `step` is a scalar. The partitioned op records the
/// layout it runs on (its `layout`, see TsrOps.td), which its kernel needs
/// to find each local element's global index.
ShardingRule DropoutOp::getShardingRule() {
  ShardingRule rule;
  TensorFactors dims = addFactors(rule, shapeOf(getResult()));
  rule.operands = {dims, {}};
  rule.results = {dims};
  rule.linearGroups = {{0}};
  rule.recordLayouts =
      [](Operation *op, ArrayRef<Attribute> resultLayouts,
         ArrayRef<RankedTensorType> globalResults) -> LogicalResult {
    auto sharding = dyn_cast_or_null<ShardingAttr>(resultLayouts.front());
    if (!sharding)
      return op->emitOpError("partitioned without a layout");
    ArrayRef<int64_t> globalShape = globalResults.front().getShape();
    SmallVector<int64_t> enc;
    for (unsigned d = 0; d < globalShape.size(); ++d) {
      ShardingAttr::DimFactors subs = sharding.getDimFactors(d, globalShape[d]);
      enc.push_back(subs.size());
      for (const ShardingAttr::SubFactor &f : subs) {
        enc.push_back(f.size);
        enc.push_back(f.axes.size());
        for (int16_t a : f.axes)
          enc.push_back(a);
      }
    }
    cast<DropoutOp>(op).setLayout(enc);
    return success();
  };
  return rule;
}

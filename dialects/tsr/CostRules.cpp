//===- CostRules.cpp - CostOpInterface overrides --------------------------===//
//
// Ops not listed here use the interface default: one FLOP per result element
// and every operand and result read or written once.
//
//===----------------------------------------------------------------------===//

#include "dialects/tsr/TsrOps.h"
#include "dialects/tsrt/AttentionWorkspace.h"

using namespace mlir;
using namespace tessera::tsr;

/// 2·batch·M·N·K: one multiply and one add per term.
int64_t MatmulOp::getFlops() {
  auto lhs = getLhs().getType();
  int64_t k =
      lhs.getDimSize(getTransposeLhs() ? lhs.getRank() - 2 : lhs.getRank() - 1);
  return 2 * getResult().getType().getNumElements() * k;
}

/// As the CPU kernel (cpu::matmul) runs it: a rank-2 rhs without a
/// transposed lhs folds the batch into M (one GEMM [batch·M, K] x [K, N]);
/// otherwise one GEMM per batch element.
static SmallVector<GemmShape> matmulGemms(RankedTensorType lhs,
                                          RankedTensorType rhs,
                                          RankedTensorType result,
                                          bool transposeLhs) {
  int64_t rank = result.getRank();
  int64_t m = result.getDimSize(rank - 2), n = result.getDimSize(rank - 1);
  int64_t k =
      lhs.getDimSize(transposeLhs ? lhs.getRank() - 2 : lhs.getRank() - 1);
  int64_t batch = 1;
  for (int64_t i = 0; i + 2 < rank; ++i)
    batch *= result.getDimSize(i);
  if (batch == 0 || m == 0 || n == 0 || k == 0)
    return {};
  if (rhs.getRank() == 2 && !transposeLhs)
    return {GemmShape{1, batch * m, n, k}};
  return {GemmShape{batch, m, n, k}};
}

SmallVector<GemmShape> MatmulOp::getGemmShapes() {
  return matmulGemms(getLhs().getType(), getRhs().getType(),
                     getResult().getType(), getTransposeLhs());
}

/// b·Sq·Sk, the number of attention scores (b = product of leading dims).
/// A partitioned ring attention (`grid_axes` with `ring_size` K) scores its
/// local queries against all K key blocks that pass through it: K times its
/// local Sk.
static int64_t attentionScores(Operation *op, Value query, Value key) {
  auto q = cast<RankedTensorType>(query.getType());
  auto k = cast<RankedTensorType>(key.getType());
  int64_t ring = 1;
  if (op->hasAttr("grid_axes"))
    if (auto r = op->getAttrOfType<IntegerAttr>("ring_size"))
      ring = std::max<int64_t>(1, r.getInt());
  return q.getNumElements() / q.getDimSize(q.getRank() - 1) *
         k.getDimSize(k.getRank() - 2) * ring;
}

static int64_t lastDim(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getDimSize(t.getRank() - 1);
}

/// Forward: S = Q·Kᵀ (2·Dh per score) and O = P·V (2·Dv per score), plus
/// about 5 FLOPs per score for scale, mask, running max, exp and sum:
/// b·Sq·Sk·(2·Dh + 2·Dv + 5), i.e. ≈ 4·b·Sq·Sk·Dh when Dv = Dh. The causal
/// variant is counted in full (the CPU kernel skips masked blocks only
/// partly). Bytes are the operands and results (the default): no S × S
/// tensor is read or written.
int64_t AttentionOp::getFlops() {
  return attentionScores(*this, getQuery(), getKey()) *
         (2 * lastDim(getQuery()) + 2 * lastDim(getValue()) + 5);
}

/// Backward: recompute S = Q·Kᵀ (2·Dh), dV = Pᵀ·dO and dP = dO·Vᵀ (2·Dv
/// each), dQ = dS·K and dK = dSᵀ·Q (2·Dh each), plus about 8 FLOPs per score
/// for exp(S − lse) and dS = P ∘ (dP − rowsum(dO ∘ O)):
/// b·Sq·Sk·(6·Dh + 4·Dv + 8) ≈ 2.5 × the forward when Dv = Dh.
int64_t AttentionGradOp::getFlops() {
  return attentionScores(*this, getQuery(), getKey()) *
         (6 * lastDim(getQuery()) + 4 * lastDim(getValue()) + 8);
}

/// The blocked GEMMs of the CPU attention kernels
/// (runtime/backends/cpu/Attention.cpp): per leading index and per block of
/// kAttentionBlockRows query rows, against the nc keys that block can see
/// (all Sk, or with `causal` the keys up to its last row). A partitioned
/// ring attention repeats them for each of its ring_size K/V blocks (the
/// striped layout gives every block the same causal shape).
static SmallVector<GemmShape> attentionGemms(Operation *op, Value query,
                                             Value key, Value value,
                                             bool causal, bool backward) {
  auto q = cast<RankedTensorType>(query.getType());
  auto k = cast<RankedTensorType>(key.getType());
  int64_t rank = q.getRank();
  int64_t sq = q.getDimSize(rank - 2), dh = q.getDimSize(rank - 1);
  int64_t sk = k.getDimSize(rank - 2), dv = lastDim(value);
  int64_t batch = 1;
  for (int64_t i = 0; i + 2 < rank; ++i)
    batch *= q.getDimSize(i);
  if (op->hasAttr("grid_axes"))
    if (auto r = op->getAttrOfType<IntegerAttr>("ring_size"))
      batch *= std::max<int64_t>(1, r.getInt());
  SmallVector<GemmShape> gemms;
  if (batch == 0 || sq == 0 || sk == 0 || dh == 0 || dv == 0)
    return gemms;
  const int64_t blockRows = ::tessera::tsrt::kAttentionBlockRows;
  for (int64_t i0 = 0; i0 < sq; i0 += blockRows) {
    int64_t rows = std::min(blockRows, sq - i0);
    int64_t nc = causal ? std::min(sk, i0 + rows) : sk;
    if (!backward) {
      gemms.push_back({batch, rows, nc, dh}); // S = Q Kᵀ
      gemms.push_back({batch, rows, dv, nc}); // O += P V
      continue;
    }
    gemms.push_back({batch, rows, nc, dh}); // S = Q Kᵀ
    gemms.push_back({batch, nc, dv, rows}); // dV += Pᵀ dO
    gemms.push_back({batch, rows, nc, dv}); // dP = dO Vᵀ
    gemms.push_back({batch, rows, dh, nc}); // dQ += dS K
    gemms.push_back({batch, nc, dh, rows}); // dK += dSᵀ Q
  }
  return gemms;
}

SmallVector<GemmShape> AttentionOp::getGemmShapes() {
  return attentionGemms(*this, getQuery(), getKey(), getValue(), getCausal(),
                        /*backward=*/false);
}

SmallVector<GemmShape> AttentionGradOp::getGemmShapes() {
  return attentionGemms(*this, getQuery(), getKey(), getValue(), getCausal(),
                        /*backward=*/true);
}

/// One exp per score the kernel forms (the score GEMMs' m·n): the online
/// softmax forward, and the recomputed probabilities backward.
static int64_t scoresOf(ArrayRef<GemmShape> gemms, size_t perBlock) {
  int64_t scores = 0;
  for (size_t i = 0; i < gemms.size(); i += perBlock)
    scores += gemms[i].batch * gemms[i].m * gemms[i].n;
  return scores;
}

int64_t AttentionOp::getTranscendentals() {
  return scoresOf(getGemmShapes(), 2);
}

int64_t AttentionGradOp::getTranscendentals() {
  return scoresOf(getGemmShapes(), 5);
}

/// The fused attention kernels are calibrated per score they form.
int64_t AttentionOp::getMeasuredUnits() { return getTranscendentals(); }
int64_t AttentionGradOp::getMeasuredUnits() { return getTranscendentals(); }

/// Ring attention's K/V rotations (runtime/backends/cpu/Attention.cpp):
/// fp32 blocks, sent with MPI_Sendrecv_replace around the ring; forward K−1
/// rotations of K and V, backward K−1 of K, V, dK and dV and one more of dK
/// and dV.
static SmallVector<KernelMessage> ringMessages(Operation *op, Value key,
                                               Value value, bool backward) {
  SmallVector<KernelMessage> messages;
  auto axes = op->getAttrOfType<DenseI16ArrayAttr>("grid_axes");
  auto ring = op->getAttrOfType<IntegerAttr>("ring_size");
  if (!axes || !ring || ring.getInt() < 2)
    return messages;
  int64_t kv = 4 * (cast<RankedTensorType>(key.getType()).getNumElements() +
                    cast<RankedTensorType>(value.getType()).getNumElements());
  KernelMessage m{KernelMessage::Kind::SendRecv,
                  SmallVector<int16_t>(axes.asArrayRef()),
                  backward ? 2 * kv : kv};
  messages.append(ring.getInt() - 1, m);
  if (backward) {
    m.bytes = kv;
    messages.push_back(m);
  }
  return messages;
}

SmallVector<KernelMessage> AttentionOp::getKernelMessages() {
  return ringMessages(*this, getKey(), getValue(), /*backward=*/false);
}

SmallVector<KernelMessage> AttentionGradOp::getKernelMessages() {
  return ringMessages(*this, getKey(), getValue(), /*backward=*/true);
}

/// Vocab-parallel cross-entropy (runtime/backends/cpu/CpuBackend.cpp): the
/// kernel all-reduces its N rows' max, then their sums of exponentials (and, in
/// the forward, the target logits), as f64.
static SmallVector<KernelMessage>
vocabParallelMessages(Operation *op, Value logits, bool backward) {
  auto axes = op->getAttrOfType<DenseI16ArrayAttr>("grid_axes");
  if (!axes || axes.empty())
    return {};
  int64_t rows = cast<RankedTensorType>(logits.getType()).getDimSize(0);
  SmallVector<int16_t> gridAxes(axes.asArrayRef());
  return {
      {KernelMessage::Kind::AllReduce, gridAxes, 8 * rows},
      {KernelMessage::Kind::AllReduce, gridAxes, (backward ? 8 : 16) * rows}};
}

SmallVector<KernelMessage> CrossEntropyOp::getKernelMessages() {
  return vocabParallelMessages(*this, getLogits(), /*backward=*/false);
}

SmallVector<KernelMessage> CrossEntropyGradOp::getKernelMessages() {
  return vocabParallelMessages(*this, getLogits(), /*backward=*/true);
}

/// A view: the CPU kernel shares the operand's storage, nothing is moved.
int64_t ReshapeOp::getBytesAccessed() { return 0; }

//===----------------------------------------------------------------------===//
// RMSNorm and the sigmoid family
//===----------------------------------------------------------------------===//

/// Elements of `v` and rows of a normalization over [axis, rank).
static std::pair<int64_t, int64_t> elementsAndRows(Value v, int64_t axis) {
  auto t = cast<RankedTensorType>(v.getType());
  int64_t n = t.getNumElements(), cols = 1;
  for (int64_t d = axis; d < t.getRank(); ++d)
    cols *= t.getDimSize(d);
  return {n, cols ? n / cols : 0};
}

/// Per element: x² and its running sum, x · rstd and · scale (4); per row:
/// the mean's division and + ε (2).
int64_t RmsNormOp::getFlops() {
  auto [n, rows] = elementsAndRows(getInput(), getAxis());
  return 4 * n + 2 * rows;
}

/// One rsqrt per row.
int64_t RmsNormOp::getTranscendentals() {
  return elementsAndRows(getInput(), getAxis()).second;
}

/// Per element: x² and sum (2), x̂ = x · r (1), g = dy · w (1), Σ g · x̂
/// (2), dw += dy · x̂ (2), dx = r · (g − x̂ · c) (3); per row: the mean,
/// + ε and the dot product's mean (3).
int64_t RmsNormGradOp::getFlops() {
  auto [n, rows] = elementsAndRows(getInput(), getAxis());
  return 11 * n + 3 * rows;
}

int64_t RmsNormGradOp::getTranscendentals() {
  return elementsAndRows(getInput(), getAxis()).second;
}

/// The add (1) and the layer norm: Σx (1), (x − mean)² and its sum (3),
/// ((x − mean) · rstd) · scale + bias (4) per element; per row: the mean,
/// the variance's division and + ε (3).
int64_t AddLayerNormOp::getFlops() {
  auto [n, rows] = elementsAndRows(getInput(), getAxis());
  return 9 * n + 3 * rows;
}

/// One square root per row.
int64_t AddLayerNormOp::getTranscendentals() {
  return elementsAndRows(getInput(), getAxis()).second;
}

/// The add (1) and tsr.rms_norm's 4 per element, 2 per row.
int64_t AddRmsNormOp::getFlops() {
  auto [n, rows] = elementsAndRows(getInput(), getAxis());
  return 5 * n + 2 * rows;
}

int64_t AddRmsNormOp::getTranscendentals() {
  return elementsAndRows(getInput(), getAxis()).second;
}

/// Per element: the statistics (4), x̂ (2), g = dy · scale (1), Σ g and
/// Σ g · x̂ (3), dscale += dy · x̂ and dbias += dy (3), dx = rstd · (g −
/// mean(g) − x̂ · mean(g · x̂)) (4) and + addend (1); per row: the two
/// means, + ε and the two dot-product means (4).
int64_t LayerNormGradAddOp::getFlops() {
  auto [n, rows] = elementsAndRows(getInput(), getAxis());
  return 18 * n + 4 * rows;
}

int64_t LayerNormGradAddOp::getTranscendentals() {
  return elementsAndRows(getInput(), getAxis()).second;
}

/// tsr.rms_norm_grad's 11 per element and 3 per row, + addend (1).
int64_t RmsNormGradAddOp::getFlops() {
  auto [n, rows] = elementsAndRows(getInput(), getAxis());
  return 12 * n + 3 * rows;
}

int64_t RmsNormGradAddOp::getTranscendentals() {
  return elementsAndRows(getInput(), getAxis()).second;
}

static int64_t elementsOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

/// 1 / (1 + exp(−x)): negation, add, division, and one exp.
int64_t SumSquaresOp::getFlops() { return 2 * elementsOf(getInput()); }
int64_t SigmoidOp::getFlops() { return 3 * elementsOf(getResult()); }
int64_t SigmoidOp::getTranscendentals() { return elementsOf(getResult()); }

/// x / (1 + exp(−x)): negation, add, division, the infinity test, one exp.
int64_t SiluOp::getFlops() { return 4 * elementsOf(getResult()); }
int64_t SiluOp::getTranscendentals() { return elementsOf(getResult()); }

/// s = sigmoid(x) (3), then dy · s · (1 + x · (1 − s)) (4), one exp.
int64_t SiluGradOp::getFlops() { return 7 * elementsOf(getResult()); }
int64_t SiluGradOp::getTranscendentals() { return elementsOf(getResult()); }

/// 2 FLOP per element (compare, scale) plus Philox-4x32-10 amortised over
/// its 4 words: 10 rounds of 2 multiplies and 4 xors per 4 elements, about
/// 12 FLOP-equivalents per element in all.
int64_t DropoutOp::getFlops() { return 14 * elementsOf(getResult()); }

//===----------------------------------------------------------------------===//
// Fused linear layer (tsr-fuse-linear)
//===----------------------------------------------------------------------===//

/// Epilogue FLOPs and transcendentals per element of an activation (as the
/// CPU kernels evaluate it): gelu 0.5·x·(1 + erf(x/√2)), gelu_tanh
/// 0.5·x·(1 + tanh(β·(x + κ·x³))), relu, silu x / (1 + exp(−x)).
static std::pair<int64_t, int64_t> activationCost(StringRef activation) {
  if (activation == "gelu")
    return {4, 1};
  if (activation == "gelu_tanh")
    return {8, 1};
  if (activation == "relu")
    return {1, 0};
  if (activation == "silu")
    return {4, 1};
  return {0, 0};
}

/// The activation gradients' FLOPs and transcendentals per element
/// (cpu::geluGrad, reluGrad, siluGrad).
static std::pair<int64_t, int64_t> activationGradCost(StringRef activation) {
  if (activation == "gelu")
    return {9, 2};
  if (activation == "gelu_tanh")
    return {14, 1};
  if (activation == "relu")
    return {1, 0};
  if (activation == "silu")
    return {7, 1};
  return {0, 0};
}

/// The GEMM, then per output element the bias (1) and the activation.
int64_t LinearOp::getFlops() {
  auto lhs = getLhs().getType();
  int64_t k =
      lhs.getDimSize(getTransposeLhs() ? lhs.getRank() - 2 : lhs.getRank() - 1);
  int64_t n = elementsOf(getResult());
  return 2 * n * k + n * (1 + activationCost(getActivation()).first);
}

int64_t LinearOp::getTranscendentals() {
  return elementsOf(getResult()) * activationCost(getActivation()).second;
}

/// As tsr.matmul's (the CPU kernel runs the same GEMMs, in blocks of rows
/// whose count does not change their total work).
SmallVector<GemmShape> LinearOp::getGemmShapes() {
  return matmulGemms(getLhs().getType(), getRhs().getType(),
                     getResult().getType(), getTransposeLhs());
}

/// The activation gradient and one add into the column sum per element.
int64_t BiasActivationGradOp::getFlops() {
  return elementsOf(getInput()) *
         (activationGradCost(getActivation()).first + 1);
}

int64_t BiasActivationGradOp::getTranscendentals() {
  return elementsOf(getInput()) * activationGradCost(getActivation()).second;
}

/// The unfused ops' FLOPs per element, summed over the program's
/// instructions (common/fusion/ElementwiseProgram.h), times the elements of
/// the iteration shape. Bytes are the interface default: the inputs and
/// results only; the intermediates stay in cache or registers.
static int64_t fusedPerElement(FusedElementwiseOp op, bool transcendentals) {
  int64_t per = 0;
  for (StringRef name : op.getOps().getAsValueRange<StringAttr>())
    if (auto code = ::tessera::fusion::elemOpNamed(
            std::string_view(name.data(), name.size()))) {
      const auto &info = ::tessera::fusion::elemOpInfo(*code);
      per += transcendentals ? info.transcendentals : info.flops;
    }
  return op.getNumResults() ? per * elementsOf(op.getResult(0)) : 0;
}
int64_t FusedElementwiseOp::getFlops() { return fusedPerElement(*this, false); }
int64_t FusedElementwiseOp::getTranscendentals() {
  return fusedPerElement(*this, true);
}
/// Never timed per unit: a fused kernel has no calibrated figure (the
/// roofline of its FLOPs and bytes times it).
int64_t FusedElementwiseOp::getMeasuredUnits() { return -1; }

/// The multi-tensor updates are timed per parameter element, like the
/// per-parameter updates (tessera-run --calibrate): all N parameters'.
static int64_t paramElements(ValueRange params) {
  int64_t n = 0;
  for (Value p : params)
    n += elementsOf(p);
  return n;
}
int64_t MultiSgdUpdateOp::getMeasuredUnits() {
  return paramElements(getParams());
}
int64_t MultiAdamwUpdateOp::getMeasuredUnits() {
  return paramElements(getGroup(0));
}

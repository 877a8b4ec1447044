//===- KernelDesc.h - a tsrt.kernel decoded once, typed --------*- C++ -*-===//
//
// What every backend binds: a `tsrt.kernel` decoded once, at load, into a
// KernelDesc.
//   - Its name becomes a KernelKind (one per name, KernelKinds.def) through
//     one table built once; backends dispatch on the kind through their own
//     tables, never on the name.
//   - Its operand and result types are checked and the result types are
//     inferred from the operands and attributes and compared with the
//     declared ones (shapes, dtypes, counts, attribute ranges: everything
//     the kernels would otherwise leave to assertions), the same for every
//     backend, so a program a backend cannot run is a load error naming the
//     op, never a failure mid-step.
//   - Its attributes (a DictionaryAttr in the IR) become one typed struct
//     per family (MatmulAttrs, AttentionAttrs, ...), with axes normalised
//     and optimizer hyper-parameters resolved against the manifest.
//
// 16-bit floats: a kernel with a bf16/f16 operand or result that is not a
// data-movement kernel (tsrt::isDataMovementKernel) is validated on its
// types with bf16/f16 widened to f32 (`widened`), since it computes in f32
// (the CPU backend always through f32 copies; the CUDA backend natively
// where its kernel takes the 16-bit dtypes, see CudaBackend.cpp).
//
// Collectives (tsrt.all_reduce, all_gather, reduce_scatter, all_to_all,
// all_slice) are checked the same way by checkCollective.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_KERNELDESC_H
#define TESSERA_RUNTIME_EXECUTOR_KERNELDESC_H

#include "runtime/executor/Program.h"

#include "common/random/Philox.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

namespace mlir {
class DictionaryAttr;
}

namespace tessera {
namespace runtime {
namespace exec {

//===----------------------------------------------------------------------===//
// Kernel kinds
//===----------------------------------------------------------------------===//

/// One kind per `tsrt.kernel` name (KernelKinds.def).
enum class KernelKind : uint8_t {
#define TESSERA_KERNEL(Kind, Name, Family) Kind,
#include "runtime/executor/KernelKinds.def"
};

/// Number of KernelKinds (the size of a backend's dispatch table).
constexpr size_t kNumKernelKinds = 0
#define TESSERA_KERNEL(Kind, Name, Family) +1
#include "runtime/executor/KernelKinds.def"
    ;

/// `kind` as an index into a dispatch table.
constexpr size_t kernelIndex(KernelKind kind) {
  return static_cast<size_t>(kind);
}

/// A backend's dispatch table, one `Fn` per kind (null where it has none):
/// `fill(set)` calls `set(kinds, fn)` for each family.
template <typename Fn, typename Fill>
std::array<Fn, kNumKernelKinds> makeKindTable(Fill fill) {
  std::array<Fn, kNumKernelKinds> t{};
  fill([&t](std::initializer_list<KernelKind> kinds, Fn fn) {
    for (KernelKind k : kinds)
      t[kernelIndex(k)] = fn;
  });
  return t;
}

/// The value `table` gives `kind` (a backend's kernel or op code for each
/// kind of a family), or nothing for a kind it does not list.
template <typename T, size_t N>
std::optional<T> lookupKind(const std::pair<KernelKind, T> (&table)[N],
                            KernelKind kind) {
  for (const auto &[k, value] : table)
    if (k == kind)
      return value;
  return std::nullopt;
}

/// The tsrt name of `kind` ("matmul").
llvm::StringRef kernelName(KernelKind kind);

/// The kind of the tsrt kernel called `name`, or nothing for a name the
/// runtime does not know.
std::optional<KernelKind> kernelKindOf(llvm::StringRef name);

/// True for the kinds that move elements without arithmetic
/// (tsrt::isDataMovementKernel): they run natively on 16-bit floats.
bool isDataMovement(KernelKind kind);

//===----------------------------------------------------------------------===//
// Typed attributes, one struct per family
//===----------------------------------------------------------------------===//

/// Kernels without attributes (elementwise, select, convert, reshape,
/// broadcast, gather, gather_grad, relu_grad, silu_grad).
struct NoAttrs {};

/// gelu, gelu_grad: `approximate` = "none" (erf) or "tanh".
enum class GeluApproximate { None, Tanh };
struct GeluAttrs {
  GeluApproximate approximate = GeluApproximate::None;
};

/// reduce_sum / reduce_mean / reduce_max: `axes` normalised into
/// [0, rank), sorted, without repeats; `keepdim`.
struct ReduceAttrs {
  std::vector<int64_t> axes;
  bool keepDim = false;
};

/// matmul: `transpose_lhs`, `transpose_rhs`. Operands [b..., M, K] and
/// [b..., K, N] (either may be rank 2, broadcasting over the other's batch
/// dims); result [b..., M, N].
struct MatmulAttrs {
  bool transposeLhs = false, transposeRhs = false;
};

/// transpose: `permutation` of the operand's dimensions.
struct TransposeAttrs {
  std::vector<int64_t> permutation;
};

/// slice: `start_indices`, `limit_indices`, `strides`, one per dimension.
struct SliceAttrs {
  std::vector<int64_t> starts, limits, strides;
};

/// concat, softmax, softmax_grad: `axis`, normalised into [0, rank).
struct AxisAttrs {
  int64_t axis = 0;
};

/// layer_norm(_grad), rms_norm(_grad): `axis` (normalised; the normalised
/// shape is the operand's dims from `axis` on) and `epsilon` (as f32);
/// `rms` for the rms_norm kinds, `grad` for the gradient kinds.
struct NormAttrs {
  int64_t axis = 0;
  float epsilon = 0;
  bool rms = false;
  bool grad = false;
};

/// attention / attention_grad: the shapes (Q [b..., Sq, Dh], K [b..., Sk,
/// Dh], V [b..., Sk, Dv]; `batch` is the product of b..., and with rank >=
/// 4, K/V may have Hkv heads dividing Q's H: `group` = H / Hkv), `scale`,
/// `causal`, whether a mask [Sq, Sk] is the last operand, and `ring_size`
/// (> 1 with grid_axes: ring attention over the desc's communicator, Sq ==
/// Sk, no mask).
struct AttentionAttrs {
  int64_t batch = 1, sq = 0, sk = 0, dh = 0, dv = 0, group = 1;
  float scale = 1;
  bool causal = false;
  bool hasMask = false;
  int64_t ringSize = 1;
};

/// cross_entropy(_grad): with grid_axes (Megatron-LM's vocab-parallel
/// form) the f64 scratch values per logits row
/// (tsrt::vocabParallelScratchPerRow); 0 otherwise.
struct CrossEntropyAttrs {
  int64_t scratchPerRow = 0;
};

/// sgd_update (param, grad, lr): `weight_decay` (hyperParameter-resolved).
/// The learning rate is operand 2, an f32 scalar read at run time.
struct SgdAttrs {
  double weightDecay = 0;
};

/// adamw_update (param, grad, exp_avg, exp_avg_sq, step, lr): `beta1`,
/// `beta2`, `eps`, `weight_decay` (hyperParameter-resolved). The learning
/// rate is operand 5, an f32 scalar read at run time.
struct AdamwAttrs {
  double beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0;
};

/// dropout (tsr.dropout, common/random/Philox.h): operands (x, step) where
/// step is a 0-D f32 integer value; `ratio` in [0, 1) as its 24-bit
/// `threshold` and the 1/(1 − ratio) `scale`; `seed`, `opId`; and the
/// operand's `layout` as sub-factors in row-major order over all
/// dimensions (each: global size, the grid axes splitting it, the local
/// size, the product of the later factors' global sizes). A grid axis equal
/// to the number of rank axes of a pipelined program is the micro-batch
/// axis (its coordinate is ExecContext::microBatch). Without a `layout`
/// attribute the operand is the whole tensor (one unsplit factor per dim).
struct DropoutAttrs {
  struct Factor {
    int64_t globalSize = 1, localSize = 1, globalStride = 1;
    std::vector<int64_t> axes;
    std::vector<int64_t> axisSizes; ///< the sizes of `axes`
  };
  float ratio = 0, scale = 1;
  uint32_t threshold = 0;
  uint64_t seed = 0;
  uint32_t opId = 0;
  std::vector<Factor> factors;
};

/// The activation of a fused linear layer (tsr.linear's `activation`).
enum class Activation { None, Gelu, GeluTanh, Relu, Silu };

/// linear (lhs, rhs, bias) -> (result [, preactivation]): the matmul's
/// flags, the activation and whether the preactivation is a result.
/// bias_activation_grad (x, dy) -> (dx, dbias): `activation` only (never
/// None).
struct LinearAttrs {
  bool transposeLhs = false, transposeRhs = false;
  Activation activation = Activation::None;
  bool preactivation = false;
};

using KernelAttrs =
    std::variant<NoAttrs, GeluAttrs, ReduceAttrs, MatmulAttrs, TransposeAttrs,
                 SliceAttrs, AxisAttrs, NormAttrs, AttentionAttrs,
                 CrossEntropyAttrs, SgdAttrs, AdamwAttrs, DropoutAttrs,
                 LinearAttrs>;

//===----------------------------------------------------------------------===//
// The descriptor
//===----------------------------------------------------------------------===//

/// One validated `tsrt.kernel`.
struct KernelDesc {
  KernelKind kind = KernelKind::Add;
  /// The operand and result types as the program declares them.
  std::vector<TensorType> operands, results;
  /// grid_axes: the program's communicator index (ExecContext::comms) and
  /// its number of ranks; -1 and 0 without grid_axes. Kernels with it
  /// communicate themselves: vocab-parallel gather, gather_grad,
  /// cross_entropy(_grad), and ring attention.
  int commIndex = -1;
  int64_t commSize = 0;
  /// True when the kernel was validated on f32-widened types (see the file
  /// comment).
  bool widened = false;
  /// The family's attributes (std::get<MatmulAttrs>(attrs), ...).
  KernelAttrs attrs;

  llvm::StringRef name() const { return kernelName(kind); }
  template <typename T> const T &get() const { return std::get<T>(attrs); }
  bool hasGridAxes() const { return commIndex >= 0; }
  /// True if an operand or result is a 16-bit float (bf16 or f16).
  bool hasFloat16() const;
};

/// Decodes and validates kernel `name` with `attrs` for the given operand
/// and result types; `commIndex` / `commSize` are its grid_axes'
/// communicator (-1 / 0 without). `options` supplies the manifest's
/// optimizer values (hyperParameter). The error says what is wrong but not
/// where (the caller prefixes the op's location and kernel): "unknown
/// kernel", "expects 2 operand(s) and 1 result(s), got 1 and 1", ...
llvm::Expected<KernelDesc>
decodeKernel(llvm::StringRef name, mlir::DictionaryAttr attrs,
             llvm::ArrayRef<TensorType> operands,
             llvm::ArrayRef<TensorType> results, const CompileOptions &options,
             int commIndex = -1, int64_t commSize = 0);

/// The dropout kernel's walk of its operand on the rank at grid `coords`
/// (ExecContext::coords; missing entries count as 0) running micro-batch
/// `microBatch` (the coordinate on a pipelined program's micro-batch axis):
/// one entry per sub-factor, with the block's first global sub-index.
std::vector<tessera::random::DropoutFactor>
dropoutFactors(const DropoutAttrs &attrs, llvm::ArrayRef<int64_t> coords,
               int64_t microBatch);

/// An optimizer hyper-parameter: the manifest's value for `key` when it
/// rounds to the same f32 as the op's attribute (the kernel then gets the
/// double, as torch.optim does with Python floats), else the attribute.
double hyperParameter(const CompileOptions &options, llvm::StringRef key,
                      double attrValue);

/// The types a kernel with bf16/f16 operands or results runs on under the
/// 16-bit adapter (both backends): every bf16/f16 type widened to f32, and
/// which operands / results were widened.
struct WidenedTypes {
  std::vector<TensorType> ins, outs;
  std::vector<bool> narrowIn, narrowOut;
};
WidenedTypes widenFloat16(llvm::ArrayRef<TensorType> ins,
                          llvm::ArrayRef<TensorType> outs);

/// `desc` with its operand and result types replaced by `w`'s widened ones
/// (what a backend's 16-bit adapter binds its f32 kernel for).
KernelDesc withWidenedTypes(const KernelDesc &desc, const WidenedTypes &w);

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// Collective kinds of the tsrt dialect.
/// AllSlice keeps the rank's block along `dim` (no communication).
enum class CollectiveOp {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  AllSlice
};

/// A collective instruction as Program::compile resolved it: op, the
/// program's communicator index (ExecContext::comms), its number of ranks,
/// the dims (gather/scatter dim, or split and concat dims of all_to_all;
/// axis indices in [0, rank) once checked) and the reduction (all_reduce:
/// max instead of sum).
struct CollectiveSpec {
  CollectiveOp op;
  int commIndex = -1;
  int64_t ranks = 1;
  int64_t dim = 0, dim2 = 0;
  bool max = false;
};

/// Checks collective `spec` (`spec.ranks` ranks; all_reduce: f32, bf16,
/// f16 or i64, result = operand; all_gather: result dim `dim` times ranks;
/// reduce_scatter and all_slice: `dim` divisible by ranks, result one
/// block; all_to_all: `dim` (split) divisible, `dim2` (concat) multiplied)
/// and normalises its negative dims into [0, rank). Errors as
/// decodeKernel's.
llvm::Error checkCollective(CollectiveSpec &spec, const TensorType &operand,
                            const TensorType &result);

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_KERNELDESC_H

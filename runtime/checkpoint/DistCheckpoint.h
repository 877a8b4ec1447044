//===- DistCheckpoint.h - distributed (sharded) checkpoints -----*- C++ -*-===//
//
// A Tessera checkpoint is a folder of per-rank safetensors files plus one
// JSON index giving every tensor's global shape, dtype and each shard's slice
// and file: the layout of torch.distributed.checkpoint (DCP) and Megatron-LM's
// dist_checkpointing, so a save under one plan (grid, layouts) loads under
// any other. The full description is docs/Checkpoint.md.
//
//   ROOT/latest                     "iter_0000004\n" (replaced atomically)
//   ROOT/iter_0000004/index.json    the index (below)
//   ROOT/iter_0000004/rank_00000.safetensors ...  one per rank that writes
//                                   a shard (keys = tensor names)
//   ROOT/iter_0000008.tmp.<token>/  a save in progress (never read)
//
// index.json:
//   {"format": "tessera-checkpoint", "version": 1, "step": 4,
//    "consumed_samples": 32, "plan": {...}, "loss_scale": ... (optional),
//    "tensors": {NAME: {"role": "param"|"frozen"|"opt_state",
//                       "dtype": "F32", "shape": [global dims],
//                       "order": i (position in the saving plan's list,
//                                   e.g. manifest order; optional),
//                       "shards": [{"file": "rank_00001.safetensors",
//                                   "key": NAME,
//                                   "ranges": [[[b, e], ...] per dim],
//                                   "digest": "xxh3:<16 hex>"}]}}}
//
// Integrity. Every shard file carries section digests ("tessera.digests",
// runtime/checkpoint/SafeTensors.h) and the index records each shard's
// digest. The reader checks, before a shard's bytes are used, that the
// file's digest for the key is the index's and that the bytes match it: a
// mismatch is one line naming the file and the key. An index without
// "digest" entries (a checkpoint written by another tool, e.g. the tests'
// Python writers) is read without these checks; shard files that do carry
// digests are still checked against them.
//
// Shards. A shard is the global tensor restricted to the Cartesian product,
// over dims, of a sorted set of indices, each set a list of disjoint,
// increasing half-open intervals [b, e). The shard's stored tensor has, per
// dim, the size of that set, its data row-major in increasing global index.
// Every exec::Layout piece has this form (a factored dim such as fused QKV
// [{3, []}, {64, [tp]}] on tp rank 1 of 2 is {[32,64), [96,128), [160,192)}),
// so any layout's local tensor is a shard. The shards of one tensor are
// disjoint and cover it. Replicated copies are written once: among the ranks
// holding exactly the same piece, the lowest rank writes it (DCP's dedup).
//
// Atomicity. Each rank writes its file into ROOT/iter_NNNNNNN.tmp.<token>/
// and fsyncs it; after all ranks are done (the caller's barrier), one rank
// (finalizeCheckpoint) checks the files, writes and fsyncs index.json, renames
// the folder to ROOT/iter_NNNNNNN, fsyncs ROOT, then replaces ROOT/latest
// (write latest.tmp, fsync, rename, fsync ROOT). A process killed at any
// point leaves the previous checkpoint and `latest` intact; a .tmp folder is
// never read.
//
// This library has no MPI: every rank can compute every rank's shards from
// the layouts (planShards), so no gather is needed. Errors are one line and
// name the file and the tensor.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_CHECKPOINT_DISTCHECKPOINT_H
#define TESSERA_RUNTIME_CHECKPOINT_DISTCHECKPOINT_H

#include "runtime/Tensor.h"
#include "runtime/checkpoint/SafeTensors.h"
#include "runtime/executor/Layout.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace runtime {
namespace ckpt {

//===----------------------------------------------------------------------===//
// Index sets
//===----------------------------------------------------------------------===//

/// Sorted, disjoint, non-empty half-open intervals [first, second) of one
/// dimension's indices (adjacent intervals are merged).
using IntervalSet = std::vector<std::pair<int64_t, int64_t>>;
/// One IntervalSet per tensor dimension (empty for a rank-0 tensor).
using ShardRanges = std::vector<IntervalSet>;

/// Number of indices in `set`.
int64_t intervalSetSize(const IntervalSet &set);
/// Shape of a shard: the size of each dim's set.
std::vector<int64_t> rangesShape(const ShardRanges &ranges);
/// The whole tensor of `shape`: one interval [0, d) per dim (empty for a
/// zero-sized dim).
ShardRanges fullRanges(llvm::ArrayRef<int64_t> shape);

/// The index sets of the piece of a tensor with `layout` held by the rank at
/// `coords` of a grid of `gridShape` (coords.size() == gridShape.size(); the
/// layout verified for gridShape). rangesShape(result) equals
/// layout.localShape(gridShape) and the order of the local data is the
/// sets' order, so the result describes the local tensor exactly.
ShardRanges localRanges(const exec::Layout &layout,
                        llvm::ArrayRef<int64_t> gridShape,
                        llvm::ArrayRef<int64_t> coords);

/// Copies the elements in both `src` (a tensor holding the shard `srcRanges`)
/// and `dst` (holding `dstRanges`) from src into dst. Shapes must be
/// rangesShape of the ranges, dtypes equal. Elements of dst outside src are
/// untouched. Returns the number of elements copied.
int64_t copyIntersection(const Tensor &src, const ShardRanges &srcRanges,
                         Tensor &dst, const ShardRanges &dstRanges);

//===----------------------------------------------------------------------===//
// Saving
//===----------------------------------------------------------------------===//

/// A tensor of the checkpoint as one plan holds it.
struct TensorSpec {
  /// Plan-independent manifest name (ONNX parameter name, "<param>.exp_avg",
  /// "step", loss scaling's state ...). Unique across roles.
  std::string name;
  /// "param", "frozen" or "opt_state" (any non-empty string is stored).
  std::string role;
  DType dtype = DType::F32;
  /// How the plan splits it; the global shape is layout.globalShape().
  exec::Layout layout;
};

/// The tensors one rank holds.
struct RankHoldings {
  int64_t rank = 0;
  /// The rank's coordinates on the grid the layouts refer to (for pipeline
  /// plans the full manifest grid: append 0 for the virtual mb axis).
  std::vector<int64_t> coords;
  /// Indices into the TensorSpec list (pipeline plans: the tensors of the
  /// rank's stage).
  std::vector<size_t> tensors;
};

/// One stored shard.
struct ShardEntry {
  int64_t rank = 0;   ///< the rank that writes it
  std::string file;   ///< "rank_00001.safetensors" (rankFileName)
  std::string key;    ///< safetensors key (the tensor name)
  ShardRanges ranges; ///< which elements it holds
};

/// Who writes what: computed identically on every rank.
struct ShardPlan {
  std::vector<TensorSpec> tensors;
  /// shards[i]: tensors[i]'s shards (disjoint, covering it), by writer rank.
  std::vector<std::vector<ShardEntry>> shards;
  /// For a writing rank: (tensor index, shard index) pairs it writes, in
  /// tensor order. Ranks that write nothing are absent (and write no file).
  std::map<int64_t, std::vector<std::pair<size_t, size_t>>> writes;
  /// Total bytes stored (each element once).
  int64_t totalBytes() const;
};

/// Computes the shards: each rank's piece of each tensor it holds
/// (localRanges), deduplicated (the lowest rank holding an identical piece
/// writes it). Errors (naming the tensor): duplicate names, an empty role,
/// a layout invalid for `gridShape`, coords of the wrong length or out of
/// range, an unknown tensor index, a tensor that the ranks' pieces do not
/// cover (e.g. held by no rank).
llvm::Expected<ShardPlan> planShards(std::vector<TensorSpec> tensors,
                                     llvm::ArrayRef<int64_t> gridShape,
                                     llvm::ArrayRef<RankHoldings> ranks);

/// "iter_0000004" (7 digits, more when the step needs them).
std::string iterationDirName(int64_t step);
/// "rank_00001.safetensors".
std::string rankFileName(int64_t rank);
/// ROOT/iter_NNNNNNN.tmp.<token>: where the save of `step` is assembled.
/// Every rank must use the same token (e.g. rank 0's pid, broadcast).
std::string tmpDirPath(llvm::StringRef root, int64_t step, uint64_t token);

/// Called by every rank that appears in plan.writes (others may call it: it
/// does nothing): creates `tmpDir` (and parents) if needed and writes
/// tmpDir/rank_RRRRR.safetensors with the shards `rank` writes, fsynced.
/// `localValue(spec)` returns the rank's local HOST tensor of that tensor
/// (local shape and dtype checked) or null. Errors name the file and tensor.
llvm::Error writeRankShards(
    llvm::StringRef tmpDir, const ShardPlan &plan, int64_t rank,
    llvm::function_ref<const Tensor *(const TensorSpec &)> localValue);

/// What the index records besides the tensors.
struct CheckpointInfo {
  int64_t step = 0;            ///< steps completed
  int64_t consumedSamples = 0; ///< data position (global samples consumed)
  /// The plan (grid axes/shape/rank_order, precision, optimizer, ...).
  llvm::json::Object plan;
  /// fp16 loss scale, if any (informational; the state tensors carry it).
  std::optional<double> lossScale;
  /// More top-level members (must not clash with the ones above).
  llvm::json::Object extra;
};

/// Section digests of the written shards: (file, key) -> "xxh3:...".
using ShardDigests = std::map<std::pair<std::string, std::string>, std::string>;

/// The index.json object for `plan` and `info`; each shard entry gets
/// "digest" from `digests` when it has one.
llvm::json::Object buildIndex(const ShardPlan &plan, const CheckpointInfo &info,
                              const ShardDigests &digests = {});

/// Run by ONE rank after every rank's writeRankShards returned (barrier):
/// checks that every file the plan names exists in `tmpDir` with its keys,
/// writes tmpDir/index.json (fsync), renames tmpDir to
/// ROOT/iterationDirName(info.step) (an existing folder of that name is
/// replaced), fsyncs ROOT, atomically replaces ROOT/latest, then prunes with
/// keepLast (0: keep all). Errors name the path.
llvm::Error finalizeCheckpoint(llvm::StringRef root, llvm::StringRef tmpDir,
                               const ShardPlan &plan,
                               const CheckpointInfo &info,
                               int64_t keepLast = 0);

/// Removes all but the `keepLast` (> 0) newest ROOT/iter_NNNNNNN folders,
/// never the one ROOT/latest names, and the .tmp folders of steps older than
/// the newest complete one. Other files are left alone.
llvm::Error pruneCheckpoints(llvm::StringRef root, int64_t keepLast);

/// Convenience for tools and tests (one process plays every rank): saves
/// global tensors under `gridShape` with per-tensor layouts, holdings from
/// every coordinate of the grid (ranks row-major over the grid axes), into
/// ROOT via the tmp folder + finalize path. `globals[i]` has
/// tensors[i].layout's global shape.
llvm::Error saveGlobalCheckpoint(llvm::StringRef root,
                                 std::vector<TensorSpec> tensors,
                                 llvm::ArrayRef<Tensor> globals,
                                 llvm::ArrayRef<int64_t> gridShape,
                                 const CheckpointInfo &info,
                                 int64_t keepLast = 0);

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

/// One shard as the index describes it.
struct ShardInfo {
  std::string file; ///< relative to the checkpoint folder
  std::string key;
  ShardRanges ranges;
  /// The shard's section digest ("xxh3:..."), as the index records it; ""
  /// for an index without digests (written by another tool).
  std::string digest;
};

/// One tensor as the index describes it.
struct TensorInfo {
  std::string name;
  std::string role;
  DType dtype = DType::F32;
  std::string dtypeName;      ///< safetensors name: "F32", "BF16", ...
  std::vector<int64_t> shape; ///< global
  std::vector<ShardInfo> shards;
  /// "order" (the saving plan's position), or -1 when absent.
  int64_t order = -1;
  /// Global size in bytes.
  int64_t bytes() const;
};

/// If `path` is a folder with an index.json, that folder; otherwise `path`
/// must hold a `latest` file naming an iter_* folder in it. Errors name the
/// path (no checkpoint, unreadable or dangling latest).
llvm::Expected<std::string> resolveCheckpointDir(llvm::StringRef path);

/// An opened checkpoint: the parsed, validated index. Files are read on
/// demand (only the safetensors header and the needed tensor's bytes).
class CheckpointReader {
public:
  /// Opens ROOT (through `latest`) or an iter_* folder and validates the
  /// index: format/version, every tensor's dtype and shape, every shard's
  /// ranges (sorted, in bounds, one set per dim), shards disjoint and
  /// covering the tensor, every referenced file present. Errors name the
  /// file and tensor.
  static llvm::Expected<std::unique_ptr<CheckpointReader>>
  open(llvm::StringRef path);

  /// The iter_* folder.
  const std::string &directory() const { return dir; }
  int64_t step() const { return stepValue; }
  int64_t consumedSamples() const { return consumed; }
  /// The whole index (plan, loss_scale, extra members).
  const llvm::json::Object &index() const { return root; }
  /// index()["plan"], or null.
  const llvm::json::Object *plan() const { return root.getObject("plan"); }
  std::optional<double> lossScale() const {
    return root.getNumber("loss_scale");
  }
  /// Tensors sorted by name.
  const std::vector<TensorInfo> &tensors() const { return infos; }
  const TensorInfo *find(llvm::StringRef name) const;
  /// Tensors in the saving plan's order ("order"; those without one last,
  /// by name): e.g. the manifest order, which --save-weights also uses.
  std::vector<const TensorInfo *> tensorsInOrder() const;

  /// Error unless the checkpoint has `name` with this dtype and global shape
  /// ("checkpoint 'DIR': tensor 'w' has shape [4, 8], the model needs
  /// [8, 4]"; "... has no tensor 'w'").
  llvm::Error checkTensor(llvm::StringRef name, DType dtype,
                          llvm::ArrayRef<int64_t> shape) const;

  /// Reads every file's header and checks that each shard's key exists with
  /// the index's dtype and the shape of its ranges (corrupt or truncated
  /// files, missing keys). Errors name the file and tensor.
  llvm::Error verifyFiles() const;

  /// verifyFiles, then reads every shard's bytes once and checks them
  /// against their digests (tessera-ckpt inspect). Errors name the file and
  /// the key.
  llvm::Error verifyData() const;

  /// The piece of tensor `name` for a rank at `coords` of `gridShape` under
  /// `layout` (whose global shape must equal the checkpoint's): reads only
  /// the shards that intersect it and copies the intersections. Errors: an
  /// unknown tensor, a shape mismatch, a bad layout, file errors.
  llvm::Expected<Tensor> loadLocal(llvm::StringRef name,
                                   const exec::Layout &layout,
                                   llvm::ArrayRef<int64_t> gridShape,
                                   llvm::ArrayRef<int64_t> coords) const;
  /// The whole tensor (global shape).
  llvm::Expected<Tensor> loadGlobal(llvm::StringRef name) const;

private:
  CheckpointReader() = default;
  llvm::Expected<const SafeTensorsHeader *> header(llvm::StringRef file) const;
  llvm::Expected<Tensor> readShard(const TensorInfo &info,
                                   const ShardInfo &shard) const;

  std::string dir;
  std::string indexPath;
  llvm::json::Object root;
  int64_t stepValue = 0, consumed = 0;
  std::vector<TensorInfo> infos;
  mutable std::map<std::string, SafeTensorsHeader> headers;
};

} // namespace ckpt
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_CHECKPOINT_DISTCHECKPOINT_H

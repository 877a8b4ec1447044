//===- OffsetAllocator.h - static offsets for buffers with lifetimes -*- C++
//-*-//
//
// Offline offset assignment for a straight-line program: given buffers with
// a size in bytes and a lifetime (the first and last instruction, inclusive,
// during which the buffer must hold its data), assign every buffer a byte
// offset in one arena so that buffers whose lifetimes overlap never overlap
// in memory, and report the arena size (the largest end offset).
//
// The algorithm is "Greedy by Size for Offset Calculation" (Pisarchyk & Lee,
// "Efficient Memory Management for Deep Neural Net Inference", 2020,
// arXiv:2001.03288, section 4.3), the one TensorFlow Lite's GPU delegate
// uses (tensorflow/lite/delegates/gpu/common/memory_management/
// greedy_by_size_assignment.cc): buffers are placed in decreasing size
// (ties: earlier first instruction, then lower index); each goes into the
// smallest gap between already placed buffers whose lifetimes intersect its
// own that is large enough (best fit), or else right after the highest of
// them. Freed space is therefore reused by any later buffer that fits.
//
// Every size is rounded up to the alignment and every offset is a multiple of
// it. The result is deterministic. The library has no MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_PASSES_LOWERING_OFFSETALLOCATOR_H
#define TESSERA_PASSES_LOWERING_OFFSETALLOCATOR_H

#include <cstdint>
#include <vector>

namespace tessera::lowering {

/// One buffer to place: `bytes` (>= 0; rounded up to the alignment, and 0
/// counts as one alignment unit so that every buffer has a distinct address)
/// live over instructions [first, last] (first <= last).
struct BufferLifetime {
  int64_t bytes = 0;
  int64_t first = 0;
  int64_t last = 0;
};

/// Offsets (bytes from the arena start, one per buffer, same order) and the
/// arena size in bytes (0 when there are no buffers).
struct OffsetAssignment {
  std::vector<int64_t> offsets;
  int64_t arenaBytes = 0;
};

/// The size in bytes a buffer of `bytes` occupies: rounded up to `alignment`
/// (a power of two), and at least `alignment`.
int64_t alignedBufferBytes(int64_t bytes, int64_t alignment = 64);

/// Assigns offsets by greedy-by-size best fit (see the file comment).
/// `alignment` must be a power of two. Complexity O(n^2) in the number of
/// buffers.
OffsetAssignment assignOffsets(const std::vector<BufferLifetime> &buffers,
                               int64_t alignment = 64);

/// The most bytes (aligned sizes) live at any one instruction: a lower bound
/// on the arena size of any valid assignment.
int64_t peakLiveBytes(const std::vector<BufferLifetime> &buffers,
                      int64_t alignment = 64);

/// True when no two buffers with intersecting lifetimes overlap in
/// [offset, offset + alignedBufferBytes) and every buffer ends within the
/// arena (a checker for tests and assertions).
bool isValidAssignment(const std::vector<BufferLifetime> &buffers,
                       const OffsetAssignment &assignment,
                       int64_t alignment = 64);

} // namespace tessera::lowering

#endif // TESSERA_PASSES_LOWERING_OFFSETALLOCATOR_H

//===- OffsetAllocator.cpp - static offsets for buffers with lifetimes ----===//

#include "passes/lowering/OffsetAllocator.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <numeric>

using namespace tessera::lowering;

int64_t tessera::lowering::alignedBufferBytes(int64_t bytes,
                                              int64_t alignment) {
  assert(alignment > 0 && (alignment & (alignment - 1)) == 0 &&
         "alignment must be a power of two");
  if (bytes <= 0)
    return alignment;
  return (bytes + alignment - 1) / alignment * alignment;
}

static bool intersects(const BufferLifetime &a, const BufferLifetime &b) {
  return a.first <= b.last && b.first <= a.last;
}

OffsetAssignment
tessera::lowering::assignOffsets(const std::vector<BufferLifetime> &buffers,
                                 int64_t alignment) {
  size_t n = buffers.size();
  std::vector<int64_t> size(n);
  for (size_t i = 0; i < n; ++i)
    size[i] = alignedBufferBytes(buffers[i].bytes, alignment);

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (size[a] != size[b])
      return size[a] > size[b];
    return buffers[a].first < buffers[b].first;
  });

  OffsetAssignment result;
  result.offsets.assign(n, -1);
  std::vector<size_t> placed;                    // indices of placed buffers
  std::vector<std::pair<int64_t, int64_t>> busy; // [offset, end) in the way
  for (size_t i : order) {
    busy.clear();
    for (size_t j : placed)
      if (intersects(buffers[i], buffers[j]))
        busy.emplace_back(result.offsets[j], result.offsets[j] + size[j]);
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap between busy ranges that holds the buffer.
    int64_t best = -1;
    int64_t bestGap = std::numeric_limits<int64_t>::max();
    int64_t cursor = 0; // end of the busy ranges seen so far
    for (const auto &[begin, end] : busy) {
      int64_t gap = begin - cursor;
      if (gap >= size[i] && gap < bestGap) {
        best = cursor;
        bestGap = gap;
      }
      cursor = std::max(cursor, end);
    }
    if (best < 0)
      best = cursor; // after the highest busy range
    result.offsets[i] = best;
    result.arenaBytes = std::max(result.arenaBytes, best + size[i]);
    placed.push_back(i);
  }
  return result;
}

bool tessera::lowering::isValidAssignment(
    const std::vector<BufferLifetime> &buffers,
    const OffsetAssignment &assignment, int64_t alignment) {
  if (assignment.offsets.size() != buffers.size())
    return false;
  for (size_t i = 0; i < buffers.size(); ++i) {
    int64_t oi = assignment.offsets[i];
    int64_t si = alignedBufferBytes(buffers[i].bytes, alignment);
    if (oi < 0 || oi % alignment != 0 || oi + si > assignment.arenaBytes)
      return false;
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      if (!intersects(buffers[i], buffers[j]))
        continue;
      int64_t oj = assignment.offsets[j];
      int64_t sj = alignedBufferBytes(buffers[j].bytes, alignment);
      if (oi < oj + sj && oj < oi + si)
        return false;
    }
  }
  return true;
}

int64_t
tessera::lowering::peakLiveBytes(const std::vector<BufferLifetime> &buffers,
                                 int64_t alignment) {
  // Sweep over lifetime starts and ends (ends after starts at the same
  // instruction, since lifetimes are inclusive).
  std::vector<std::pair<int64_t, int64_t>> events; // (time, +/- bytes)
  for (const BufferLifetime &b : buffers) {
    int64_t size = alignedBufferBytes(b.bytes, alignment);
    events.emplace_back(2 * b.first, size);
    events.emplace_back(2 * b.last + 1, -size);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto &[time, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return peak;
}

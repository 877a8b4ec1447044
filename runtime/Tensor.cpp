//===- Tensor.cpp - Owning dense tensor -----------------------------------===//

#include "runtime/Tensor.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

using namespace tessera::runtime;

static std::atomic<int64_t> liveBytes{0};
static std::atomic<int64_t> peakBytes{0};
static std::atomic<int64_t> allocations{0};

int64_t tessera::runtime::heapBytesLive() { return liveBytes.load(); }
int64_t tessera::runtime::heapBytesPeak() { return peakBytes.load(); }
void tessera::runtime::resetHeapBytesPeak() { peakBytes = liveBytes.load(); }
int64_t tessera::runtime::heapAllocations() { return allocations.load(); }

size_t tessera::runtime::dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return 4;
  case DType::I64:
    return 8;
  case DType::I1:
    return 1;
  case DType::BF16:
  case DType::F16:
    return 2;
  }
  return 0;
}

const char *tessera::runtime::dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::I64:
    return "i64";
  case DType::I1:
    return "i1";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  }
  return "?";
}

int64_t tessera::runtime::shapeNumel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string tessera::runtime::shapeToString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::empty(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.type = dtype;
  t.dims = std::move(shape);
  t.count = shapeNumel(t.dims);
  assert(t.count >= 0 && "negative dimension");
  size_t bytes = t.bytes();
  // Round up to the alignment, and never allocate zero bytes so that every
  // non-null tensor has a distinct, valid pointer.
  size_t alloc = (bytes + 63) / 64 * 64;
  if (alloc == 0)
    alloc = 64;
  void *p = std::aligned_alloc(64, alloc);
  assert(p && "out of memory");
  allocations.fetch_add(1, std::memory_order_relaxed);
  int64_t live = liveBytes.fetch_add(static_cast<int64_t>(alloc)) +
                 static_cast<int64_t>(alloc);
  int64_t peak = peakBytes.load();
  while (live > peak && !peakBytes.compare_exchange_weak(peak, live)) {
  }
  t.storage = std::shared_ptr<void>(p, [alloc](void *q) {
    liveBytes.fetch_sub(static_cast<int64_t>(alloc));
    std::free(q);
  });
  t.ptr = p;
  return t;
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.ptr, 0, t.bytes());
  return t;
}

Tensor Tensor::view(void *data, DType dtype, std::vector<int64_t> shape,
                    std::shared_ptr<void> keepAlive) {
  Tensor t;
  t.type = dtype;
  t.dims = std::move(shape);
  t.count = shapeNumel(t.dims);
  t.ptr = data;
  if (keepAlive)
    t.storage = std::move(keepAlive);
  else
    t.storage = std::shared_ptr<void>(data, [](void *) {});
  return t;
}

Tensor Tensor::reshape(std::vector<int64_t> newShape) const {
  Tensor t = *this;
  t.dims = std::move(newShape);
  assert(shapeNumel(t.dims) == count && "reshape: element count mismatch");
  return t;
}

Tensor Tensor::clone() const {
  if (isNull())
    return Tensor();
  Tensor t = empty(type, dims);
  if (bytes())
    std::memcpy(t.ptr, ptr, bytes());
  return t;
}

//===- DistCheckpoint.cpp - distributed (sharded) checkpoints -------------===//

#include "runtime/checkpoint/DistCheckpoint.h"
#include "runtime/FaultInject.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <set>
#include <unistd.h>

using namespace tessera::runtime;
using namespace tessera::runtime::ckpt;
namespace json = llvm::json;
namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

static llvm::Error makeError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

static std::string joinPath(llvm::StringRef a, llvm::StringRef b) {
  llvm::SmallString<256> p(a);
  path::append(p, b);
  return std::string(p);
}

//===----------------------------------------------------------------------===//
// Index sets
//===----------------------------------------------------------------------===//

int64_t ckpt::intervalSetSize(const IntervalSet &set) {
  int64_t n = 0;
  for (const auto &iv : set)
    n += iv.second - iv.first;
  return n;
}

std::vector<int64_t> ckpt::rangesShape(const ShardRanges &ranges) {
  std::vector<int64_t> shape;
  for (const IntervalSet &set : ranges)
    shape.push_back(intervalSetSize(set));
  return shape;
}

ShardRanges ckpt::fullRanges(llvm::ArrayRef<int64_t> shape) {
  ShardRanges r;
  for (int64_t d : shape)
    r.push_back(d > 0 ? IntervalSet{{0, d}} : IntervalSet{});
  return r;
}

/// Appends [b, e) to `set`, merging with the last interval when adjacent.
static void appendInterval(IntervalSet &set, int64_t b, int64_t e) {
  if (b >= e)
    return;
  if (!set.empty() && set.back().second == b)
    set.back().second = e;
  else
    set.push_back({b, e});
}

ShardRanges ckpt::localRanges(const exec::Layout &layout,
                              llvm::ArrayRef<int64_t> gridShape,
                              llvm::ArrayRef<int64_t> coords) {
  ShardRanges ranges;
  for (const exec::DimLayout &dim : layout.dims) {
    size_t k = dim.size();
    std::vector<int64_t> global(k), local(k), offset(k), stride(k);
    int64_t acc = 1;
    for (size_t i = k; i-- > 0;) {
      const exec::LayoutFactor &f = dim[i];
      int64_t n = 1, c = 0;
      for (int64_t a : f.axes) {
        n *= gridShape[a];
        c = c * gridShape[a] + coords[a];
      }
      global[i] = f.size;
      local[i] = f.size / n;
      offset[i] = c * local[i];
      stride[i] = acc;
      acc *= f.size;
    }
    IntervalSet set;
    // Innermost factor that is not whole: the factors inside it are whole,
    // so each choice of the outer factors' indices gives one run.
    int64_t m = static_cast<int64_t>(k) - 1;
    while (m >= 0 && local[m] == global[m])
      --m;
    if (m < 0) {
      appendInterval(set, 0, acc);
      ranges.push_back(std::move(set));
      continue;
    }
    int64_t runLen = local[m] * stride[m];
    std::vector<int64_t> idx(static_cast<size_t>(m), 0);
    while (true) {
      int64_t start = offset[m] * stride[m];
      for (int64_t i = 0; i < m; ++i)
        start += (offset[i] + idx[i]) * stride[i];
      appendInterval(set, start, start + runLen);
      int64_t i = m - 1;
      for (; i >= 0; --i) {
        if (++idx[i] < local[i])
          break;
        idx[i] = 0;
      }
      if (i < 0)
        break;
    }
    ranges.push_back(std::move(set));
  }
  return ranges;
}

namespace {
/// A common run of one dim: `len` indices at local position `src` in the
/// source set and `dst` in the destination set.
struct Segment {
  int64_t src, dst, len;
};
} // namespace

/// The intersection of two interval sets as segments in both local index
/// spaces.
static std::vector<Segment> intersect(const IntervalSet &a,
                                      const IntervalSet &b) {
  std::vector<Segment> out;
  size_t i = 0, j = 0;
  int64_t aPos = 0, bPos = 0; // local index of a[i].first / b[j].first
  while (i < a.size() && j < b.size()) {
    int64_t lo = std::max(a[i].first, b[j].first);
    int64_t hi = std::min(a[i].second, b[j].second);
    if (lo < hi)
      out.push_back(
          {aPos + (lo - a[i].first), bPos + (lo - b[j].first), hi - lo});
    if (a[i].second <= b[j].second) {
      aPos += a[i].second - a[i].first;
      ++i;
    } else {
      bPos += b[j].second - b[j].first;
      ++j;
    }
  }
  return out;
}

static bool setsIntersect(const IntervalSet &a, const IntervalSet &b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::max(a[i].first, b[j].first) < std::min(a[i].second, b[j].second))
      return true;
    if (a[i].second <= b[j].second)
      ++i;
    else
      ++j;
  }
  return false;
}

static bool rangesIntersect(const ShardRanges &a, const ShardRanges &b) {
  for (size_t d = 0; d < a.size(); ++d)
    if (!setsIntersect(a[d], b[d]))
      return false;
  return true;
}

int64_t ckpt::copyIntersection(const Tensor &src, const ShardRanges &srcRanges,
                               Tensor &dst, const ShardRanges &dstRanges) {
  assert(src.dtype() == dst.dtype() && "dtype mismatch");
  assert(src.shape() == rangesShape(srcRanges) && "source shape mismatch");
  assert(dst.shape() == rangesShape(dstRanges) && "destination shape");
  size_t n = srcRanges.size();
  size_t elem = dtypeSize(src.dtype());
  if (n == 0) {
    std::memcpy(dst.raw(), src.raw(), elem);
    return 1;
  }
  std::vector<std::vector<Segment>> segs(n);
  for (size_t d = 0; d < n; ++d) {
    segs[d] = intersect(srcRanges[d], dstRanges[d]);
    if (segs[d].empty())
      return 0;
  }
  // Trailing dims that both tensors hold whole form one contiguous block.
  size_t inner = n;
  int64_t block = 1;
  while (inner > 1) {
    const std::vector<Segment> &s = segs[inner - 1];
    int64_t size = src.shape()[inner - 1];
    if (s.size() != 1 || s[0].src != 0 || s[0].dst != 0 || s[0].len != size ||
        dst.shape()[inner - 1] != size)
      break;
    block *= size;
    --inner;
  }
  // Now dims [0, inner) are iterated; the last of them by segment runs.
  std::vector<int64_t> srcStride(inner), dstStride(inner);
  {
    int64_t sa = block, da = block;
    for (size_t d = inner; d-- > 0;) {
      srcStride[d] = sa;
      dstStride[d] = da;
      sa *= src.shape()[d];
      da *= dst.shape()[d];
    }
  }
  const char *sp = static_cast<const char *>(src.raw());
  char *dp = static_cast<char *>(dst.raw());
  int64_t copied = 0;
  // Recursive walk over the outer dims' (segment, index) pairs.
  std::function<void(size_t, int64_t, int64_t)> walk = [&](size_t d, int64_t so,
                                                           int64_t dO) {
    if (d + 1 == inner) {
      for (const Segment &s : segs[d]) {
        int64_t count = s.len * srcStride[d];
        std::memcpy(dp + (dO + s.dst * dstStride[d]) * elem,
                    sp + (so + s.src * srcStride[d]) * elem, count * elem);
        copied += count;
      }
      return;
    }
    for (const Segment &s : segs[d])
      for (int64_t i = 0; i < s.len; ++i)
        walk(d + 1, so + (s.src + i) * srcStride[d],
             dO + (s.dst + i) * dstStride[d]);
  };
  walk(0, 0, 0);
  return copied;
}

//===----------------------------------------------------------------------===//
// Saving
//===----------------------------------------------------------------------===//

int64_t ShardPlan::totalBytes() const {
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    for (const ShardEntry &s : shards[i])
      total += shapeNumel(rangesShape(s.ranges)) *
               static_cast<int64_t>(dtypeSize(tensors[i].dtype));
  return total;
}

std::string ckpt::iterationDirName(int64_t step) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "iter_%07lld", static_cast<long long>(step));
  return buf;
}

std::string ckpt::rankFileName(int64_t rank) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "rank_%05lld.safetensors",
                static_cast<long long>(rank));
  return buf;
}

std::string ckpt::tmpDirPath(llvm::StringRef root, int64_t step,
                             uint64_t token) {
  return joinPath(root,
                  iterationDirName(step) + ".tmp." + std::to_string(token));
}

llvm::Expected<ShardPlan> ckpt::planShards(std::vector<TensorSpec> tensors,
                                           llvm::ArrayRef<int64_t> gridShape,
                                           llvm::ArrayRef<RankHoldings> ranks) {
  ShardPlan plan;
  std::set<std::string> names;
  for (const TensorSpec &t : tensors) {
    if (t.name.empty())
      return makeError("checkpoint: a tensor has an empty name");
    if (!names.insert(t.name).second)
      return makeError("checkpoint: tensor '" + t.name +
                       "' appears twice (names must be unique across roles)");
    if (t.role.empty())
      return makeError("checkpoint: tensor '" + t.name + "' has no role");
    if (llvm::Error err = exec::verifyLayout(t.layout, gridShape, t.name))
      return makeError("checkpoint: " + llvm::toString(std::move(err)));
  }
  plan.tensors = std::move(tensors);
  size_t numTensors = plan.tensors.size();
  plan.shards.resize(numTensors);
  // Ranks in increasing order so that the lowest holder writes.
  std::vector<const RankHoldings *> order;
  for (const RankHoldings &r : ranks)
    order.push_back(&r);
  llvm::stable_sort(order, [](const RankHoldings *a, const RankHoldings *b) {
    return a->rank < b->rank;
  });
  std::vector<std::map<ShardRanges, size_t>> seen(numTensors);
  for (const RankHoldings *r : order) {
    if (r->coords.size() != gridShape.size())
      return makeError(llvm::formatv("checkpoint: rank {0} has {1} grid "
                                     "coordinates, the grid has {2} axes",
                                     r->rank, r->coords.size(),
                                     gridShape.size()));
    for (auto [a, c] : llvm::enumerate(r->coords))
      if (c < 0 || c >= gridShape[a])
        return makeError(llvm::formatv("checkpoint: rank {0}'s coordinate "
                                       "{1} on axis {2} is outside [0, {3})",
                                       r->rank, c, a, gridShape[a]));
    for (size_t ti : r->tensors) {
      if (ti >= numTensors)
        return makeError(llvm::formatv("checkpoint: rank {0} holds tensor "
                                       "#{1} of {2}",
                                       r->rank, ti, numTensors));
      const TensorSpec &t = plan.tensors[ti];
      ShardRanges rg = localRanges(t.layout, gridShape, r->coords);
      auto [it, inserted] = seen[ti].try_emplace(rg, plan.shards[ti].size());
      if (!inserted)
        continue;
      ShardEntry e;
      e.rank = r->rank;
      e.file = rankFileName(r->rank);
      e.key = t.name;
      e.ranges = std::move(rg);
      plan.shards[ti].push_back(std::move(e));
    }
  }
  for (size_t ti = 0; ti < numTensors; ++ti) {
    const TensorSpec &t = plan.tensors[ti];
    int64_t covered = 0;
    for (const ShardEntry &s : plan.shards[ti])
      covered += shapeNumel(rangesShape(s.ranges));
    int64_t numel = shapeNumel(t.layout.globalShape());
    // Pieces of one layout are identical or disjoint, so distinct pieces
    // cover the tensor exactly when their sizes add up.
    if (covered != numel)
      return makeError(llvm::formatv(
          "checkpoint: tensor '{0}': the ranks holding it cover {1} of its "
          "{2} elements",
          t.name, covered, numel));
    for (auto [si, s] : llvm::enumerate(plan.shards[ti]))
      plan.writes[s.rank].push_back({ti, si});
  }
  return std::move(plan);
}

/// fsyncs a file or folder.
static llvm::Error syncPath(llvm::StringRef p, bool isDir) {
  std::string s = p.str();
  int fd = ::open(s.c_str(), isDir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0)
    return makeError("checkpoint: cannot open '" + s +
                     "' to sync: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    return makeError("checkpoint: fsync of '" + s +
                     "' failed: " + std::strerror(err));
  return llvm::Error::success();
}

/// Writes `contents` to `p` and fsyncs it.
static llvm::Error writeFileSynced(llvm::StringRef p,
                                   llvm::StringRef contents) {
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(p, ec, fs::OF_None);
    if (ec)
      return makeError("checkpoint: cannot write '" + p + "': " + ec.message());
    os << contents;
    os.close();
    if (os.has_error()) {
      std::string msg = os.error().message();
      os.clear_error();
      return makeError("checkpoint: writing '" + p + "' failed: " + msg);
    }
  }
  return syncPath(p, /*isDir=*/false);
}

namespace {
/// The fault-injection hook's stream: forwards every write to `out`
/// unbuffered and, after the first two (a safetensors file's length and
/// header), flushes `out` and reaches the `checkpoint` moment.
class HeaderThenFault : public llvm::raw_ostream {
public:
  explicit HeaderThenFault(llvm::raw_fd_ostream &out)
      : llvm::raw_ostream(/*unbuffered=*/true), out(out) {}

private:
  void write_impl(const char *ptr, size_t size) override {
    out.write(ptr, size);
    pos += size;
    if (++writes == 2) {
      out.flush();
      fault::at(fault::Moment::Checkpoint);
    }
  }
  uint64_t current_pos() const override { return pos; }
  llvm::raw_fd_ostream &out;
  uint64_t pos = 0;
  int writes = 0;
};
} // namespace

llvm::Error ckpt::writeRankShards(
    llvm::StringRef tmpDir, const ShardPlan &plan, int64_t rank,
    llvm::function_ref<const Tensor *(const TensorSpec &)> localValue) {
  auto it = plan.writes.find(rank);
  if (it == plan.writes.end())
    return llvm::Error::success();
  if (std::error_code ec = fs::create_directories(tmpDir))
    return makeError("checkpoint: cannot create '" + tmpDir +
                     "': " + ec.message());
  std::string file = joinPath(tmpDir, rankFileName(rank));
  std::vector<NamedTensor> named;
  for (auto [ti, si] : it->second) {
    const TensorSpec &t = plan.tensors[ti];
    const ShardEntry &s = plan.shards[ti][si];
    const Tensor *value = localValue(t);
    if (!value || value->isNull())
      return makeError("checkpoint '" + file + "': rank " +
                       std::to_string(rank) + " has no value for tensor '" +
                       t.name + "'");
    std::vector<int64_t> want = rangesShape(s.ranges);
    if (value->shape() != want || value->dtype() != t.dtype)
      return makeError(llvm::formatv(
          "checkpoint '{0}': tensor '{1}': rank {2}'s value is {3} {4}, its "
          "shard is {5} {6}",
          file, t.name, rank, dtypeName(value->dtype()),
          shapeToString(value->shape()), dtypeName(t.dtype),
          shapeToString(want)));
    named.push_back({s.key, value});
  }
  std::error_code ec;
  {
    llvm::raw_fd_ostream os(file, ec, fs::OF_None);
    if (ec)
      return makeError("checkpoint: cannot write '" + file +
                       "': " + ec.message());
    // Test hook (runtime/FaultInject.h): the `checkpoint` moment, with the
    // shard's header on disk and its data not yet.
    std::optional<HeaderThenFault> hook;
    if (LLVM_UNLIKELY(fault::pending(fault::Moment::Checkpoint)))
      hook.emplace(os);
    if (llvm::Error err = writeSafeTensors(
            hook ? static_cast<llvm::raw_ostream &>(*hook) : os, named,
            {{"format", "tessera-checkpoint-shard"},
             {"rank", std::to_string(rank)}}))
      return makeError("checkpoint '" + file +
                       "': " + llvm::toString(std::move(err)));
    os.close();
    if (os.has_error()) {
      std::string msg = os.error().message();
      os.clear_error();
      return makeError("checkpoint: writing '" + file + "' failed: " + msg);
    }
  }
  return syncPath(file, /*isDir=*/false);
}

static json::Array rangesToJson(const ShardRanges &ranges) {
  json::Array dims;
  for (const IntervalSet &set : ranges) {
    json::Array ivs;
    for (const auto &iv : set)
      ivs.push_back(json::Array{iv.first, iv.second});
    dims.push_back(std::move(ivs));
  }
  return dims;
}

static std::optional<DType> parseDType(llvm::StringRef s) {
  if (s == "F32")
    return DType::F32;
  if (s == "I64")
    return DType::I64;
  if (s == "BOOL" || s == "U8")
    return DType::I1;
  if (s == "BF16")
    return DType::BF16;
  if (s == "F16")
    return DType::F16;
  return std::nullopt;
}

json::Object ckpt::buildIndex(const ShardPlan &plan, const CheckpointInfo &info,
                              const ShardDigests &digests) {
  json::Object root = info.extra;
  root["format"] = "tessera-checkpoint";
  root["version"] = 1;
  root["step"] = info.step;
  root["consumed_samples"] = info.consumedSamples;
  root["plan"] = json::Object(info.plan);
  if (info.lossScale)
    root["loss_scale"] = *info.lossScale;
  json::Object tensors;
  for (auto [ti, t] : llvm::enumerate(plan.tensors)) {
    json::Array shards;
    for (const ShardEntry &s : plan.shards[ti]) {
      json::Object shard{
          {"file", s.file}, {"key", s.key}, {"ranges", rangesToJson(s.ranges)}};
      auto d = digests.find({s.file, s.key});
      if (d != digests.end())
        shard["digest"] = d->second;
      shards.push_back(std::move(shard));
    }
    tensors[t.name] =
        json::Object{{"role", t.role},
                     {"dtype", safetensorsDTypeName(t.dtype)},
                     {"shape", json::Array(t.layout.globalShape())},
                     {"order", static_cast<int64_t>(ti)},
                     {"shards", std::move(shards)}};
  }
  root["tensors"] = std::move(tensors);
  return root;
}

/// Checks a shard's key in a parsed header: present, dtype and shape.
static llvm::Error checkShardEntry(const SafeTensorsHeader &h,
                                   llvm::StringRef tensor, DType dtype,
                                   llvm::StringRef key,
                                   const ShardRanges &ranges) {
  const SafeTensorsEntry *e = h.find(key);
  if (!e)
    return makeError("checkpoint file '" + h.source + "' has no key '" + key +
                     "' (a shard of tensor '" + tensor + "')");
  std::vector<int64_t> want = rangesShape(ranges);
  if (e->dtype != dtype || e->shape != want)
    return makeError(llvm::formatv(
        "checkpoint file '{0}': tensor '{1}' is stored as {2} {3}, the "
        "index says {4} {5}",
        h.source, tensor, e->dtypeName, shapeToString(e->shape),
        safetensorsDTypeName(dtype), shapeToString(want)));
  return llvm::Error::success();
}

/// Checks that the shard file's section digest for `s.key` is the one the
/// index records (when it records one); readSafeTensor then checks the
/// bytes against it.
static llvm::Error checkShardDigest(const SafeTensorsHeader &h,
                                    const ShardInfo &s) {
  if (s.digest.empty())
    return llvm::Error::success();
  const SafeTensorsEntry *e = h.find(s.key);
  if (!e || e->digest != s.digest)
    return makeError(llvm::formatv(
        "{0}: section \"{1}\" does not match index.json (digest {2}, "
        "index.json records {3})",
        h.source, s.key,
        e && !e->digest.empty() ? e->digest : std::string("none"), s.digest));
  return llvm::Error::success();
}

/// Parses ROOT/latest's contents: one iter_* folder name.
static llvm::Expected<std::string> readLatest(llvm::StringRef root) {
  std::string p = joinPath(root, "latest");
  auto buf = llvm::MemoryBuffer::getFile(p, /*IsText=*/true);
  if (!buf)
    return makeError("checkpoint '" + p +
                     "': cannot read: " + buf.getError().message());
  llvm::StringRef name = (*buf)->getBuffer().trim();
  if (name.empty() || name.contains('/') || name.contains('\\') ||
      name == "." || name == ".." || name.contains('\n'))
    return makeError("checkpoint '" + p + "' does not name a folder of '" +
                     root + "': '" + name + "'");
  return name.str();
}

/// (step, is complete) of a ROOT entry named iter_NNN or iter_NNN.tmp.X.
static std::optional<std::pair<int64_t, bool>>
parseIterName(llvm::StringRef name) {
  if (!name.consume_front("iter_"))
    return std::nullopt;
  llvm::StringRef digits = name.take_while(llvm::isDigit);
  if (digits.empty())
    return std::nullopt;
  int64_t step;
  if (digits.getAsInteger(10, step))
    return std::nullopt;
  llvm::StringRef rest = name.drop_front(digits.size());
  if (rest.empty())
    return std::make_pair(step, true);
  if (rest.starts_with(".tmp."))
    return std::make_pair(step, false);
  return std::nullopt;
}

llvm::Error ckpt::pruneCheckpoints(llvm::StringRef root, int64_t keepLast) {
  if (keepLast <= 0)
    return llvm::Error::success();
  std::string latest;
  if (fs::exists(joinPath(root, "latest"))) {
    llvm::Expected<std::string> l = readLatest(root);
    if (l)
      latest = *l;
    else
      llvm::consumeError(l.takeError());
  }
  std::vector<std::pair<int64_t, std::string>> complete, partial;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; it != end && !ec;
       it.increment(ec)) {
    llvm::StringRef name = path::filename(it->path());
    auto parsed = parseIterName(name);
    if (!parsed || it->type() != fs::file_type::directory_file)
      continue;
    (parsed->second ? complete : partial)
        .push_back({parsed->first, name.str()});
  }
  if (ec)
    return makeError("checkpoint: cannot list '" + root + "': " + ec.message());
  llvm::sort(complete,
             [](const auto &a, const auto &b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(keepLast); i < complete.size(); ++i) {
    if (complete[i].second == latest)
      continue;
    if (std::error_code rec =
            fs::remove_directories(joinPath(root, complete[i].second)))
      return makeError("checkpoint: cannot remove '" +
                       joinPath(root, complete[i].second) +
                       "': " + rec.message());
  }
  int64_t newest = complete.empty() ? -1 : complete.front().first;
  for (const auto &[step, name] : partial)
    if (step < newest)
      if (std::error_code rec = fs::remove_directories(joinPath(root, name)))
        return makeError("checkpoint: cannot remove '" + joinPath(root, name) +
                         "': " + rec.message());
  return llvm::Error::success();
}

llvm::Error ckpt::finalizeCheckpoint(llvm::StringRef root,
                                     llvm::StringRef tmpDir,
                                     const ShardPlan &plan,
                                     const CheckpointInfo &info,
                                     int64_t keepLast) {
  if (std::error_code ec = fs::create_directories(tmpDir))
    return makeError("checkpoint: cannot create '" + tmpDir +
                     "': " + ec.message());
  // Every file the index will name, with its keys and their digests.
  ShardDigests digests;
  for (const auto &[rank, writes] : plan.writes) {
    std::string file = joinPath(tmpDir, rankFileName(rank));
    llvm::Expected<SafeTensorsHeader> h = readSafeTensorsHeader(file);
    if (!h)
      return makeError(
          "checkpoint: rank " + std::to_string(rank) +
          "'s file is not complete: " + llvm::toString(h.takeError()));
    if (!h->hasDigests)
      return makeError("checkpoint: rank " + std::to_string(rank) +
                       "'s file '" + file + "' has no section digests");
    for (auto [ti, si] : writes) {
      const ShardEntry &s = plan.shards[ti][si];
      if (llvm::Error err =
              checkShardEntry(*h, plan.tensors[ti].name, plan.tensors[ti].dtype,
                              s.key, s.ranges))
        return err;
      digests[{s.file, s.key}] = h->find(s.key)->digest;
    }
  }
  std::string indexText;
  {
    llvm::raw_string_ostream os(indexText);
    os << llvm::formatv("{0:2}", json::Value(buildIndex(plan, info, digests)))
       << "\n";
  }
  if (llvm::Error err =
          writeFileSynced(joinPath(tmpDir, "index.json"), indexText))
    return err;
  if (llvm::Error err = syncPath(tmpDir, /*isDir=*/true))
    return err;

  std::string name = iterationDirName(info.step);
  std::string target = joinPath(root, name);
  std::string pid = std::to_string(::getpid());
  std::string old;
  if (fs::exists(target)) {
    old = target + ".old." + pid;
    if (std::error_code ec = fs::rename(target, old))
      return makeError("checkpoint: cannot move the previous '" + target +
                       "' aside: " + ec.message());
  }
  if (std::error_code ec = fs::rename(tmpDir, target)) {
    if (!old.empty())
      (void)fs::rename(old, target); // put the previous one back
    return makeError("checkpoint: cannot rename '" + tmpDir + "' to '" +
                     target + "': " + ec.message());
  }
  if (llvm::Error err = syncPath(root, /*isDir=*/true))
    return err;
  std::string latestTmp = joinPath(root, "latest.tmp." + pid);
  if (llvm::Error err = writeFileSynced(latestTmp, name + "\n"))
    return err;
  if (std::error_code ec = fs::rename(latestTmp, joinPath(root, "latest")))
    return makeError("checkpoint: cannot replace '" + joinPath(root, "latest") +
                     "': " + ec.message());
  if (llvm::Error err = syncPath(root, /*isDir=*/true))
    return err;
  if (!old.empty())
    if (std::error_code ec = fs::remove_directories(old))
      return makeError("checkpoint: cannot remove '" + old +
                       "': " + ec.message());
  return pruneCheckpoints(root, keepLast);
}

llvm::Error ckpt::saveGlobalCheckpoint(llvm::StringRef root,
                                       std::vector<TensorSpec> tensors,
                                       llvm::ArrayRef<Tensor> globals,
                                       llvm::ArrayRef<int64_t> gridShape,
                                       const CheckpointInfo &info,
                                       int64_t keepLast) {
  if (globals.size() != tensors.size())
    return makeError("checkpoint: saveGlobalCheckpoint needs one value per "
                     "tensor");
  for (auto [i, t] : llvm::enumerate(tensors))
    if (globals[i].shape() != t.layout.globalShape() ||
        globals[i].dtype() != t.dtype)
      return makeError("checkpoint: tensor '" + t.name + "': value is " +
                       dtypeName(globals[i].dtype()) + " " +
                       shapeToString(globals[i].shape()) + ", expected " +
                       dtypeName(t.dtype) + " " +
                       shapeToString(t.layout.globalShape()));
  int64_t world = shapeNumel(std::vector<int64_t>(gridShape));
  std::vector<RankHoldings> ranks;
  for (int64_t r = 0; r < world; ++r) {
    RankHoldings h;
    h.rank = r;
    h.coords = exec::gridCoords(r, gridShape);
    for (size_t i = 0; i < tensors.size(); ++i)
      h.tensors.push_back(i);
    ranks.push_back(std::move(h));
  }
  llvm::Expected<ShardPlan> plan = planShards(tensors, gridShape, ranks);
  if (!plan)
    return plan.takeError();
  std::string tmp = tmpDirPath(root, info.step, ::getpid());
  for (const auto &[rank, writes] : plan->writes) {
    std::vector<int64_t> coords = ranks[rank].coords;
    std::vector<Tensor> keep;
    auto local = [&](const TensorSpec &t) -> const Tensor * {
      size_t i = &t - plan->tensors.data();
      keep.push_back(
          exec::sliceToLocal(globals[i], t.layout, gridShape, coords));
      return &keep.back();
    };
    keep.reserve(tensors.size());
    if (llvm::Error err = writeRankShards(tmp, *plan, rank, local))
      return err;
  }
  return finalizeCheckpoint(root, tmp, *plan, info, keepLast);
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

int64_t TensorInfo::bytes() const {
  return shapeNumel(shape) * static_cast<int64_t>(dtypeSize(dtype));
}

llvm::Expected<std::string> ckpt::resolveCheckpointDir(llvm::StringRef p) {
  if (!fs::is_directory(p))
    return makeError("checkpoint '" + p + "': no such folder");
  if (fs::exists(joinPath(p, "index.json")))
    return p.str();
  if (!fs::exists(joinPath(p, "latest")))
    return makeError("checkpoint '" + p +
                     "': neither an index.json nor a 'latest' file");
  llvm::Expected<std::string> name = readLatest(p);
  if (!name)
    return name.takeError();
  std::string dir = joinPath(p, *name);
  if (!fs::exists(joinPath(dir, "index.json")))
    return makeError("checkpoint '" + joinPath(p, "latest") + "' names '" +
                     *name + "', which has no index.json");
  return dir;
}

/// The first pair (i < j) of overlapping shards, if any. Shards written
/// from layouts have, in every dim, sets that are identical or disjoint;
/// then two shards overlap exactly when all their sets are identical, which
/// a set of per-dim class tuples finds in O(S log S). Otherwise (another
/// writer) every pair is compared.
static std::optional<std::pair<size_t, size_t>>
findOverlap(const std::vector<ShardInfo> &shards) {
  if (shards.size() < 2)
    return std::nullopt;
  size_t rank = shards.front().ranges.size();
  std::vector<std::vector<int64_t>> classOf(shards.size(),
                                            std::vector<int64_t>(rank));
  bool classesDisjoint = true;
  for (size_t d = 0; d < rank && classesDisjoint; ++d) {
    std::map<IntervalSet, int64_t> classes;
    for (size_t i = 0; i < shards.size(); ++i)
      classOf[i][d] = classes.try_emplace(shards[i].ranges[d], classes.size())
                          .first->second;
    std::vector<std::pair<int64_t, int64_t>> all;
    for (const auto &[set, id] : classes)
      all.insert(all.end(), set.begin(), set.end());
    llvm::sort(all);
    for (size_t k = 1; k < all.size(); ++k)
      if (all[k].first < all[k - 1].second)
        classesDisjoint = false;
  }
  if (classesDisjoint) {
    std::map<std::vector<int64_t>, size_t> seen;
    for (size_t i = 0; i < shards.size(); ++i) {
      auto [it, inserted] = seen.try_emplace(classOf[i], i);
      if (!inserted && shapeNumel(rangesShape(shards[i].ranges)) > 0)
        return std::make_pair(it->second, i);
    }
    return std::nullopt;
  }
  for (size_t j = 1; j < shards.size(); ++j)
    for (size_t i = 0; i < j; ++i)
      if (rangesIntersect(shards[i].ranges, shards[j].ranges))
        return std::make_pair(i, j);
  return std::nullopt;
}

llvm::Expected<std::unique_ptr<CheckpointReader>>
CheckpointReader::open(llvm::StringRef p) {
  llvm::Expected<std::string> dir = resolveCheckpointDir(p);
  if (!dir)
    return dir.takeError();
  std::unique_ptr<CheckpointReader> r(new CheckpointReader());
  r->dir = *dir;
  r->indexPath = joinPath(*dir, "index.json");
  const std::string &ip = r->indexPath;
  auto fail = [&](const llvm::Twine &msg) {
    return makeError("checkpoint '" + ip + "': " + msg);
  };
  auto buf = llvm::MemoryBuffer::getFile(ip, /*IsText=*/true);
  if (!buf)
    return fail("cannot read: " + buf.getError().message());
  llvm::Expected<json::Value> parsed = json::parse((*buf)->getBuffer());
  if (!parsed)
    return fail("invalid JSON: " + llvm::toString(parsed.takeError()));
  json::Object *rootObj = parsed->getAsObject();
  if (!rootObj)
    return fail("not a JSON object");
  r->root = std::move(*rootObj);
  const json::Object &root = r->root;
  if (root.getString("format") !=
      std::optional<llvm::StringRef>("tessera-checkpoint"))
    return fail("\"format\" is not \"tessera-checkpoint\"");
  if (root.getInteger("version") != std::optional<int64_t>(1))
    return fail("unsupported \"version\" (this build reads version 1)");
  std::optional<int64_t> step = root.getInteger("step");
  std::optional<int64_t> consumed = root.getInteger("consumed_samples");
  if (!step || *step < 0)
    return fail("\"step\" must be a non-negative integer");
  if (!consumed || *consumed < 0)
    return fail("\"consumed_samples\" must be a non-negative integer");
  r->stepValue = *step;
  r->consumed = *consumed;
  const json::Object *tensors = root.getObject("tensors");
  if (!tensors)
    return fail("missing \"tensors\" object");
  std::set<std::string> files;
  for (const auto &kv : *tensors) {
    TensorInfo info;
    info.name = kv.first.str();
    auto bad = [&](const llvm::Twine &msg) {
      return fail("tensor '" + info.name + "': " + msg);
    };
    const json::Object *t = kv.second.getAsObject();
    if (!t)
      return bad("not an object");
    std::optional<llvm::StringRef> role = t->getString("role");
    std::optional<llvm::StringRef> dt = t->getString("dtype");
    const json::Array *shape = t->getArray("shape");
    const json::Array *shards = t->getArray("shards");
    if (!role || !dt || !shape || !shards)
      return bad("needs string \"role\", \"dtype\" and arrays \"shape\", "
                 "\"shards\"");
    if (const json::Value *order = t->get("order")) {
      std::optional<int64_t> o = order->getAsInteger();
      if (!o || *o < 0)
        return bad("\"order\" must be a non-negative integer");
      info.order = *o;
    }
    info.role = role->str();
    info.dtypeName = dt->str();
    std::optional<DType> dtype = parseDType(*dt);
    if (!dtype)
      return bad("unsupported dtype '" + *dt + "'");
    info.dtype = *dtype;
    for (const json::Value &d : *shape) {
      std::optional<int64_t> v = d.getAsInteger();
      if (!v || *v < 0)
        return bad("shape entries must be non-negative integers");
      info.shape.push_back(*v);
    }
    int64_t covered = 0;
    for (auto [si, sv] : llvm::enumerate(*shards)) {
      ShardInfo shard;
      const json::Object *so = sv.getAsObject();
      std::optional<llvm::StringRef> file =
          so ? so->getString("file") : std::nullopt;
      std::optional<llvm::StringRef> key =
          so ? so->getString("key") : std::nullopt;
      const json::Array *ranges = so ? so->getArray("ranges") : nullptr;
      if (!file || !key || !ranges)
        return bad(llvm::formatv("shard {0} needs strings \"file\", \"key\" "
                                 "and array \"ranges\"",
                                 si));
      if (file->empty() || file->contains('/') || file->contains('\\') ||
          *file == "." || *file == "..")
        return bad(llvm::formatv("shard {0}: file '{1}' is not a file name "
                                 "in the checkpoint folder",
                                 si, *file));
      shard.file = file->str();
      shard.key = key->str();
      if (const json::Value *d = so->get("digest")) {
        std::optional<llvm::StringRef> text = d->getAsString();
        if (!text || !text->starts_with("xxh3:") || text->size() != 21)
          return bad(llvm::formatv("shard {0} ({1}): \"digest\" must be "
                                   "\"xxh3:\" and 16 hex digits",
                                   si, shard.file));
        shard.digest = text->str();
      }
      if (ranges->size() != info.shape.size())
        return bad(llvm::formatv("shard {0} ({1}): {2} range sets for a "
                                 "tensor of rank {3}",
                                 si, shard.file, ranges->size(),
                                 info.shape.size()));
      for (auto [d, setValue] : llvm::enumerate(*ranges)) {
        const json::Array *set = setValue.getAsArray();
        if (!set)
          return bad(llvm::formatv("shard {0} ({1}): dim {2}: expected a "
                                   "list of [begin, end] intervals",
                                   si, shard.file, d));
        IntervalSet ivs;
        for (const json::Value &iv : *set) {
          const json::Array *pair = iv.getAsArray();
          std::optional<int64_t> b, e;
          if (pair && pair->size() == 2) {
            b = (*pair)[0].getAsInteger();
            e = (*pair)[1].getAsInteger();
          }
          if (!b || !e)
            return bad(llvm::formatv("shard {0} ({1}): dim {2}: expected a "
                                     "list of [begin, end] intervals",
                                     si, shard.file, d));
          if (*b < 0 || *b >= *e || *e > info.shape[d])
            return bad(llvm::formatv("shard {0} ({1}): dim {2}: range [{3}, "
                                     "{4}) is out of bounds of size {5}",
                                     si, shard.file, d, *b, *e, info.shape[d]));
          if (!ivs.empty() && *b < ivs.back().second)
            return bad(llvm::formatv("shard {0} ({1}): dim {2}: ranges are "
                                     "not sorted and disjoint",
                                     si, shard.file, d));
          ivs.push_back({*b, *e});
        }
        shard.ranges.push_back(std::move(ivs));
      }
      covered += shapeNumel(rangesShape(shard.ranges));
      files.insert(shard.file);
      info.shards.push_back(std::move(shard));
    }
    if (std::optional<std::pair<size_t, size_t>> o = findOverlap(info.shards)) {
      const ShardInfo &a = info.shards[o->first], &b = info.shards[o->second];
      return bad(llvm::formatv("shards {0} ({1}) and {2} ({3}) overlap",
                               o->first, a.file, o->second, b.file));
    }
    if (covered != shapeNumel(info.shape))
      return bad(llvm::formatv("the shards cover {0} of its {1} elements",
                               covered, shapeNumel(info.shape)));
    r->infos.push_back(std::move(info));
  }
  llvm::sort(r->infos, [](const TensorInfo &a, const TensorInfo &b) {
    return a.name < b.name;
  });
  for (const std::string &f : files)
    if (!fs::exists(joinPath(r->dir, f)))
      return makeError("checkpoint '" + r->dir + "': file '" + f +
                       "' named by index.json is missing");
  return std::move(r);
}

const TensorInfo *CheckpointReader::find(llvm::StringRef name) const {
  auto it = llvm::partition_point(
      infos, [&](const TensorInfo &t) { return t.name < name; });
  return it != infos.end() && it->name == name ? &*it : nullptr;
}

std::vector<const TensorInfo *> CheckpointReader::tensorsInOrder() const {
  std::vector<const TensorInfo *> out;
  for (const TensorInfo &t : infos)
    out.push_back(&t);
  llvm::stable_sort(out, [](const TensorInfo *a, const TensorInfo *b) {
    uint64_t oa = static_cast<uint64_t>(a->order),
             ob = static_cast<uint64_t>(b->order); // -1: last
    return oa < ob;
  });
  return out;
}

llvm::Error CheckpointReader::checkTensor(llvm::StringRef name, DType dtype,
                                          llvm::ArrayRef<int64_t> shape) const {
  const TensorInfo *info = find(name);
  if (!info)
    return makeError("checkpoint '" + dir + "' has no tensor '" + name + "'");
  if (llvm::ArrayRef<int64_t>(info->shape) != shape)
    return makeError("checkpoint '" + dir + "': tensor '" + name +
                     "' has shape " + shapeToString(info->shape) +
                     ", the model needs " +
                     shapeToString(std::vector<int64_t>(shape)));
  if (info->dtype != dtype)
    return makeError("checkpoint '" + dir + "': tensor '" + name +
                     "' has dtype " + info->dtypeName + ", the model needs " +
                     safetensorsDTypeName(dtype));
  return llvm::Error::success();
}

llvm::Expected<const SafeTensorsHeader *>
CheckpointReader::header(llvm::StringRef file) const {
  auto it = headers.find(file.str());
  if (it != headers.end())
    return &it->second;
  llvm::Expected<SafeTensorsHeader> h =
      readSafeTensorsHeader(joinPath(dir, file));
  if (!h)
    return makeError("checkpoint: " + llvm::toString(h.takeError()));
  return &headers.emplace(file.str(), std::move(*h)).first->second;
}

llvm::Error CheckpointReader::verifyFiles() const {
  for (const TensorInfo &info : infos)
    for (const ShardInfo &s : info.shards) {
      llvm::Expected<const SafeTensorsHeader *> h = header(s.file);
      if (!h)
        return h.takeError();
      if (llvm::Error err =
              checkShardEntry(**h, info.name, info.dtype, s.key, s.ranges))
        return err;
      if (llvm::Error err = checkShardDigest(**h, s))
        return err;
    }
  return llvm::Error::success();
}

llvm::Error CheckpointReader::verifyData() const {
  if (llvm::Error err = verifyFiles())
    return err;
  for (const TensorInfo &info : infos)
    for (const ShardInfo &s : info.shards)
      if (llvm::Expected<Tensor> t = readShard(info, s); !t)
        return t.takeError();
  return llvm::Error::success();
}

llvm::Expected<Tensor> CheckpointReader::readShard(const TensorInfo &info,
                                                   const ShardInfo &s) const {
  llvm::Expected<const SafeTensorsHeader *> h = header(s.file);
  if (!h)
    return h.takeError();
  if (llvm::Error err =
          checkShardEntry(**h, info.name, info.dtype, s.key, s.ranges))
    return std::move(err);
  if (llvm::Error err = checkShardDigest(**h, s))
    return std::move(err);
  llvm::Expected<Tensor> t = readSafeTensor(**h, s.key);
  if (!t)
    return makeError("checkpoint: " + llvm::toString(t.takeError()));
  return t;
}

llvm::Expected<Tensor>
CheckpointReader::loadLocal(llvm::StringRef name, const exec::Layout &layout,
                            llvm::ArrayRef<int64_t> gridShape,
                            llvm::ArrayRef<int64_t> coords) const {
  const TensorInfo *info = find(name);
  if (!info)
    return makeError("checkpoint '" + dir + "' has no tensor '" + name + "'");
  if (layout.globalShape() != info->shape)
    return makeError("checkpoint '" + dir + "': tensor '" + name +
                     "' has shape " + shapeToString(info->shape) +
                     ", the model needs " +
                     shapeToString(layout.globalShape()));
  if (llvm::Error err = exec::verifyLayout(layout, gridShape, name))
    return makeError("checkpoint: " + llvm::toString(std::move(err)));
  if (coords.size() != gridShape.size())
    return makeError(llvm::formatv("checkpoint: tensor '{0}': {1} grid "
                                   "coordinates for a grid of {2} axes",
                                   name, coords.size(), gridShape.size()));
  ShardRanges want = localRanges(layout, gridShape, coords);
  Tensor out = Tensor::empty(info->dtype, rangesShape(want));
  int64_t copied = 0;
  for (const ShardInfo &s : info->shards) {
    if (!rangesIntersect(s.ranges, want))
      continue;
    llvm::Expected<Tensor> shard = readShard(*info, s);
    if (!shard)
      return shard.takeError();
    copied += copyIntersection(*shard, s.ranges, out, want);
  }
  if (copied != out.numel())
    return makeError(llvm::formatv("checkpoint '{0}': tensor '{1}': the "
                                   "shards give {2} of the {3} elements "
                                   "needed",
                                   dir, name, copied, out.numel()));
  return out;
}

llvm::Expected<Tensor>
CheckpointReader::loadGlobal(llvm::StringRef name) const {
  const TensorInfo *info = find(name);
  if (!info)
    return makeError("checkpoint '" + dir + "' has no tensor '" + name + "'");
  return loadLocal(name, exec::Layout::replicated(info->shape), {}, {});
}

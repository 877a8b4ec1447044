//===- Cluster.cpp - the machine the planner plans for --------------------===//

#include "common/cluster/Cluster.h"
#include "common/io/FileSafety.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstdlib>

using namespace tessera::planner;
using llvm::StringRef;

static llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

namespace {
/// Reads required fields of one JSON object; errors name the field by its
/// dotted path from the cluster object ("intra_node.bandwidth").
struct FieldReader {
  const llvm::json::Object &obj;
  std::string prefix; // "" or "intra_node."

  llvm::Error missing(StringRef key) const {
    return fail("cluster: missing field '" + prefix + key + "'");
  }
  llvm::Error bad(StringRef key, const llvm::Twine &what) const {
    return fail("cluster: field '" + prefix + key + "' " + what);
  }

  llvm::Expected<int64_t> positiveInt(StringRef key) const {
    const llvm::json::Value *v = obj.get(key);
    if (!v)
      return missing(key);
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i < 1)
      return bad(key, "must be an integer >= 1");
    return *i;
  }
  /// A number > 0 (or >= 0 when `allowZero`).
  llvm::Expected<double> number(StringRef key, bool allowZero = false) const {
    const llvm::json::Value *v = obj.get(key);
    if (!v)
      return missing(key);
    std::optional<double> d = v->getAsNumber();
    if (!d || !(allowZero ? *d >= 0 : *d > 0))
      return bad(key,
                 allowZero ? "must be a number >= 0" : "must be a number > 0");
    return *d;
  }
  llvm::Expected<const llvm::json::Object *> object(StringRef key) const {
    const llvm::json::Value *v = obj.get(key);
    if (!v)
      return missing(key);
    const llvm::json::Object *o = v->getAsObject();
    if (!o)
      return bad(key, "must be an object");
    return o;
  }
};
} // namespace

/// The "bandwidth" and "latency" fields of `r`'s object, and with
/// `measuredRanks` > 0 (a group of that size) the optional "measured".
static llvm::Expected<Cluster::Link>
parseLinkFields(const FieldReader &r, int64_t measuredRanks = 0) {
  Cluster::Link link;
  auto bw = r.number("bandwidth");
  if (!bw)
    return bw.takeError();
  auto lat = r.number("latency", /*allowZero=*/true);
  if (!lat)
    return lat.takeError();
  link.bandwidth = *bw;
  link.latency = *lat;
  // "measured" and "measured_back_to_back": [[bytes, seconds], ...].
  auto readPoints =
      [&](StringRef key,
          std::vector<std::pair<double, double>> &out) -> llvm::Error {
    const llvm::json::Value *v = r.obj.get(key);
    if (!v)
      return llvm::Error::success();
    link.measuredRanks = measuredRanks;
    const llvm::json::Array *points = v->getAsArray();
    if (!points)
      return r.bad(key, "must be an array of [bytes, seconds]");
    for (auto [i, p] : llvm::enumerate(*points)) {
      std::string element = (key + "[" + llvm::Twine(i) + "]").str();
      const llvm::json::Array *pair = p.getAsArray();
      std::optional<double> bytes, seconds;
      if (pair && pair->size() == 2) {
        bytes = (*pair)[0].getAsNumber();
        seconds = (*pair)[1].getAsNumber();
      }
      if (!bytes || !seconds || !(*bytes > 0) || !(*seconds > 0))
        return r.bad(element, "must be [bytes > 0, seconds > 0]");
      if (!out.empty() && !(*bytes > out.back().first))
        return r.bad(element, "must have more bytes than the one before");
      out.push_back({*bytes, *seconds});
    }
    return llvm::Error::success();
  };
  if (measuredRanks > 0) {
    if (llvm::Error e = readPoints("measured", link.measured))
      return std::move(e);
    if (llvm::Error e =
            readPoints("measured_back_to_back", link.measuredBackToBack))
      return std::move(e);
  }
  return link;
}

static llvm::Expected<Cluster::Link> parseLink(const FieldReader &parent,
                                               StringRef key) {
  auto obj = parent.object(key);
  if (!obj)
    return obj.takeError();
  return parseLinkFields(FieldReader{**obj, parent.prefix + key.str() + "."});
}

llvm::Expected<Cluster>
tessera::planner::parseCluster(const llvm::json::Value &value) {
  const llvm::json::Object *obj = value.getAsObject();
  if (!obj)
    return fail("cluster: expected a JSON object");
  FieldReader r{*obj, ""};
  Cluster c;

  if (const llvm::json::Value *v = obj->get("name")) {
    std::optional<StringRef> s = v->getAsString();
    if (!s)
      return r.bad("name", "must be a string");
    c.name = s->str();
  }
  if (const llvm::json::Value *v = obj->get("source")) {
    std::optional<StringRef> s = v->getAsString();
    if (!s)
      return r.bad("source", "must be a string");
    c.source = s->str();
  }

  auto nodes = r.positiveInt("nodes");
  if (!nodes)
    return nodes.takeError();
  c.nodes = *nodes;
  auto dpn = r.positiveInt("devices_per_node");
  if (!dpn)
    return dpn.takeError();
  c.devicesPerNode = *dpn;

  auto flops = r.object("peak_flops");
  if (!flops)
    return flops.takeError();
  if ((*flops)->empty())
    return r.bad("peak_flops", "must name at least one dtype");
  FieldReader fr{**flops, "peak_flops."};
  for (const auto &kv : **flops) {
    auto f = fr.number(kv.first);
    if (!f)
      return f.takeError();
    c.peakFlops[kv.first.str()] = *f;
  }

  auto mem = r.number("memory_bytes");
  if (!mem)
    return mem.takeError();
  c.memoryBytes = *mem;

  auto intra = parseLink(r, "intra_node");
  if (!intra)
    return intra.takeError();
  c.intraNode = *intra;
  auto inter = parseLink(r, "inter_node");
  if (!inter)
    return inter.takeError();
  c.interNode = *inter;

  // Optional, measured by calibration.
  for (auto [key, field] :
       {std::pair{"memory_bandwidth", &c.memoryBandwidth},
        std::pair{"op_overhead", &c.opOverhead},
        std::pair{"transcendental_rate", &c.transcendentalRate},
        std::pair{"cores_per_node", &c.coresPerNode},
        std::pair{"waiting_rank_share", &c.waitingRankShare},
        std::pair{"sync_lag_fraction", &c.syncLagFraction}})
    if (obj->get(key)) {
      auto v = r.number(key, /*allowZero=*/true);
      if (!v)
        return v.takeError();
      *field = *v;
    }
  if (c.waitingRankShare > 1)
    return r.bad("waiting_rank_share", "must be in [0, 1]");
  for (auto [key, field] : {std::pair{"sync_lag_window", &c.syncLagWindow},
                            std::pair{"compute_scale", &c.computeScale}})
    if (obj->get(key)) {
      auto v = r.number(key);
      if (!v)
        return v.takeError();
      *field = *v;
    }
  if (obj->get("kernel_seconds_per_element")) {
    auto kernels = r.object("kernel_seconds_per_element");
    if (!kernels)
      return kernels.takeError();
    FieldReader kr{**kernels, "kernel_seconds_per_element."};
    for (const auto &kv : **kernels) {
      auto v = kr.number(kv.first);
      if (!v)
        return v.takeError();
      c.kernelSecondsPerElement[kv.first.str()] = *v;
    }
  }
  if (obj->get("gemm_peak_fraction")) {
    auto v = r.number("gemm_peak_fraction");
    if (!v)
      return v.takeError();
    if (*v > 1)
      return r.bad("gemm_peak_fraction", "must be in (0, 1]");
    c.gemmPeakFraction = *v;
  }
  if (const llvm::json::Value *v = obj->get("gemm")) {
    const llvm::json::Array *points = v->getAsArray();
    if (!points)
      return r.bad("gemm", "must be an array");
    for (auto [i, p] : llvm::enumerate(*points)) {
      const llvm::json::Object *po = p.getAsObject();
      std::string prefix = "gemm[" + std::to_string(i) + "].";
      if (!po)
        return fail("cluster: field '" + prefix.substr(0, prefix.size() - 1) +
                    "' must be an object");
      FieldReader pr{*po, prefix};
      Cluster::GemmPoint g;
      std::optional<StringRef> dtype = po->getString("dtype");
      if (!dtype)
        return pr.missing("dtype");
      g.dtype = dtype->str();
      for (auto [key, field] :
           {std::pair{"m", &g.m}, std::pair{"n", &g.n}, std::pair{"k", &g.k}}) {
        auto d = pr.positiveInt(key);
        if (!d)
          return d.takeError();
        *field = *d;
      }
      auto f = pr.number("flops");
      if (!f)
        return f.takeError();
      g.flops = *f;
      c.gemm.push_back(std::move(g));
    }
  }
  if (obj->get("collectives")) {
    auto kinds = r.object("collectives");
    if (!kinds)
      return kinds.takeError();
    FieldReader kr{**kinds, "collectives."};
    for (const auto &kv : **kinds) {
      StringRef kind = kv.first;
      if (!llvm::is_contained({"all_reduce", "all_gather", "reduce_scatter",
                               "all_to_all", "send_recv"},
                              kind))
        return kr.bad(kind, "is not a collective (all_reduce, all_gather, "
                            "reduce_scatter, all_to_all, send_recv)");
      auto links = kr.object(kind);
      if (!links)
        return links.takeError();
      FieldReader lr{**links, "collectives." + kind.str() + "."};
      Cluster::LinkPair pair;
      if ((*links)->get("intra_node")) {
        auto l = parseLink(lr, "intra_node");
        if (!l)
          return l.takeError();
        pair.intraNode = *l;
      }
      if ((*links)->get("inter_node")) {
        auto l = parseLink(lr, "inter_node");
        if (!l)
          return l.takeError();
        pair.interNode = *l;
      }
      if ((*links)->get("groups")) {
        const llvm::json::Array *groups = (*links)->getArray("groups");
        if (!groups)
          return lr.bad("groups", "must be an array");
        for (auto [i, g] : llvm::enumerate(*groups)) {
          std::string element = "groups[" + std::to_string(i) + "]";
          const llvm::json::Object *go = g.getAsObject();
          if (!go)
            return lr.bad(element, "must be an object");
          FieldReader gr{*go, lr.prefix + element + "."};
          Cluster::GroupLink group;
          auto size = gr.positiveInt("size");
          if (!size)
            return size.takeError();
          auto stride = gr.positiveInt("stride");
          if (!stride)
            return stride.takeError();
          if (*size < 2)
            return gr.bad("size", "must be at least 2");
          group.size = *size;
          group.stride = *stride;
          auto l = parseLinkFields(gr, *size);
          if (!l)
            return l.takeError();
          group.link = *l;
          pair.groups.push_back(group);
        }
      }
      c.collectiveLinks[kind.str()] = pair;
    }
  }
  return c;
}

llvm::json::Value tessera::planner::toJSON(const Cluster &c) {
  llvm::json::Object flops;
  for (const auto &[dtype, f] : c.peakFlops)
    flops[dtype] = f;
  auto link = [](const Cluster::Link &l) {
    llvm::json::Object o{{"bandwidth", l.bandwidth}, {"latency", l.latency}};
    // [[bytes, seconds], ...], as parseLinkFields reads it back.
    auto putPoints = [&](StringRef key,
                         const std::vector<std::pair<double, double>> &v) {
      if (v.empty())
        return;
      llvm::json::Array points;
      for (auto [bytes, seconds] : v)
        points.push_back(llvm::json::Array{bytes, seconds});
      o[key] = std::move(points);
    };
    putPoints("measured", l.measured);
    putPoints("measured_back_to_back", l.measuredBackToBack);
    return o;
  };
  llvm::json::Object out{{"name", c.name},
                         {"nodes", c.nodes},
                         {"devices_per_node", c.devicesPerNode},
                         {"peak_flops", std::move(flops)},
                         {"memory_bytes", c.memoryBytes},
                         {"intra_node", link(c.intraNode)},
                         {"inter_node", link(c.interNode)},
                         {"source", c.source},
                         {"memory_bandwidth", c.memoryBandwidth},
                         {"op_overhead", c.opOverhead},
                         {"transcendental_rate", c.transcendentalRate},
                         {"cores_per_node", c.coresPerNode},
                         {"waiting_rank_share", c.waitingRankShare},
                         {"sync_lag_fraction", c.syncLagFraction},
                         {"sync_lag_window", c.syncLagWindow},
                         {"compute_scale", c.computeScale},
                         {"gemm_peak_fraction", c.gemmPeakFraction}};
  if (!c.kernelSecondsPerElement.empty()) {
    llvm::json::Object kernels;
    for (const auto &[name, seconds] : c.kernelSecondsPerElement)
      kernels[name] = seconds;
    out["kernel_seconds_per_element"] = std::move(kernels);
  }
  if (!c.gemm.empty()) {
    llvm::json::Array points;
    for (const Cluster::GemmPoint &g : c.gemm)
      points.push_back(llvm::json::Object{{"dtype", g.dtype},
                                          {"m", g.m},
                                          {"n", g.n},
                                          {"k", g.k},
                                          {"flops", g.flops}});
    out["gemm"] = std::move(points);
  }
  if (!c.collectiveLinks.empty()) {
    llvm::json::Object kinds;
    for (const auto &[kind, pair] : c.collectiveLinks) {
      llvm::json::Object links;
      if (pair.intraNode)
        links["intra_node"] = link(*pair.intraNode);
      if (pair.interNode)
        links["inter_node"] = link(*pair.interNode);
      if (!pair.groups.empty()) {
        llvm::json::Array groups;
        for (const Cluster::GroupLink &g : pair.groups) {
          llvm::json::Object o = link(g.link);
          o["size"] = g.size;
          o["stride"] = g.stride;
          groups.push_back(std::move(o));
        }
        links["groups"] = std::move(groups);
      }
      kinds[kind] = std::move(links);
    }
    out["collectives"] = std::move(kinds);
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Presets
//===----------------------------------------------------------------------===//
//
// Bandwidths are stored per device and per direction. NVIDIA quotes NVLink
// as the total of both directions ("600 GB/s" = 300 GB/s each way), and
// InfiniBand per adapter and per direction (HDR 200 Gb/s = 25 GB/s each
// way). A DGX node has one compute adapter per GPU, so a GPU's share of
// the network is one adapter. FLOP/s are dense (the datasheets' "with
// sparsity" figures are halved). "GB" of memory is taken as 10^9 bytes,
// which is below the GiB the parts really have, so the estimate is safe.
//
// gemm_peak_fraction 0.8 is NOT from a datasheet either: it is the usual
// ceiling of cuBLAS on large bf16/fp16 GEMMs (about 250 of 312 TFLOP/s on
// A100), an estimate that `tessera-run --calibrate` replaces by a measured
// GEMM table.
//
// Latencies are NOT from datasheets: they are typical NCCL small-message
// times (a few µs over NVLink/NVSwitch inside a node, 5-10 µs across
// InfiniBand), estimates to be replaced by `tessera-run --calibrate`.

static Cluster dgxA100(int64_t nodes) {
  Cluster c;
  c.name = "dgx-a100:" + std::to_string(nodes);
  c.nodes = nodes;
  c.devicesPerNode = 8; // DGX A100 User Guide: 8x A100 SXM4.
  // NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column):
  // BF16/FP16 Tensor Core 312 TFLOP/s (624 with sparsity), FP32 19.5
  // TFLOP/s, TF32 Tensor Core 156 TFLOP/s (312 with sparsity).
  c.peakFlops = {
      {"bf16", 312e12}, {"fp16", 312e12}, {"fp32", 19.5e12}, {"tf32", 156e12}};
  c.memoryBytes = 80e9;         // datasheet: 80 GB HBM2e
  c.memoryBandwidth = 2.039e12; // datasheet: 2,039 GB/s (80GB SXM)
  c.gemmPeakFraction = 0.8;     // estimate, see above
  // Datasheet: third-generation NVLink 600 GB/s per GPU (both directions
  // together) -> 300 GB/s per direction.
  c.intraNode = {300e9, 3e-6};
  // DGX A100 User Guide: 8x single-port ConnectX-6 HDR InfiniBand 200 Gb/s
  // for the compute fabric, one per GPU -> 25 GB/s per GPU per direction.
  c.interNode = {25e9, 8e-6};
  c.source =
      "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM): 312 TFLOP/s "
      "bf16/fp16 dense, 19.5 TFLOP/s fp32, 156 TFLOP/s tf32, 80 GB HBM2e at "
      "2,039 GB/s, "
      "NVLink 3 600 GB/s total (300 GB/s per direction); NVIDIA DGX A100 "
      "User Guide: 8 GPUs per node, 8x ConnectX-6 HDR InfiniBand 200 Gb/s "
      "(25 GB/s per GPU per direction); latencies 3 us intra-node / 8 us "
      "inter-node are typical NCCL estimates, to be replaced by calibration";
  return c;
}

static Cluster dgxH100(int64_t nodes) {
  Cluster c;
  c.name = "dgx-h100:" + std::to_string(nodes);
  c.nodes = nodes;
  c.devicesPerNode = 8; // DGX H100 User Guide: 8x H100 SXM5.
  // NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): BF16/FP16
  // Tensor Core 1,979 TFLOP/s with sparsity -> 989 dense; FP32 67 TFLOP/s;
  // TF32 Tensor Core 989 with sparsity -> 494.5 dense.
  c.peakFlops = {
      {"bf16", 989e12}, {"fp16", 989e12}, {"fp32", 67e12}, {"tf32", 494.5e12}};
  c.memoryBytes = 80e9;        // datasheet: 80 GB HBM3
  c.memoryBandwidth = 3.35e12; // datasheet: 3.35 TB/s (SXM)
  c.gemmPeakFraction = 0.8;    // estimate, see above
  // Datasheet: fourth-generation NVLink 900 GB/s per GPU (both directions
  // together) -> 450 GB/s per direction.
  c.intraNode = {450e9, 3e-6};
  // DGX H100 User Guide: 8x ConnectX-7 NDR InfiniBand 400 Gb/s for the
  // compute fabric, one per GPU -> 50 GB/s per GPU per direction.
  c.interNode = {50e9, 8e-6};
  c.source =
      "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): 989 TFLOP/s "
      "bf16/fp16 dense (1,979 with sparsity), 67 TFLOP/s fp32, 494.5 TFLOP/s "
      "tf32 dense, 80 GB HBM3 at 3.35 TB/s, NVLink 4 900 GB/s total (450 "
      "GB/s per "
      "direction); NVIDIA DGX H100 User Guide: 8 GPUs per node, 8x "
      "ConnectX-7 NDR InfiniBand 400 Gb/s (50 GB/s per GPU per direction); "
      "latencies 3 us intra-node / 8 us inter-node are typical NCCL "
      "estimates and gemm_peak_fraction 0.8 a typical cuBLAS ceiling, to be "
      "replaced by calibration";
  return c;
}

/// Meta's Grand Teton H100 hosts as torchtitan's Llama 3.1 benchmarks ran
/// them (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md):
/// 8 H100 per host "fully connected with NVLink", 96 GB HBM2e at 2.4 TB/s,
/// "backend RDMA network with 400 Gb/s per GPU" (RoCE), the default 500 W
/// power limit. The page says the peak is "between SXM and NVL" and not
/// known exactly; the preset takes the SXM datasheet's (989 TFLOP/s bf16,
/// 1,979 fp8, dense; torchtitan's MFU uses the same) and leaves the power cap's
/// loss to gemm_peak_fraction, which docs/Planner.md fits on one benchmark row.
static Cluster grandTetonH100(int64_t nodes) {
  Cluster c;
  c.name = "grand-teton-h100:" + std::to_string(nodes);
  c.nodes = nodes;
  c.devicesPerNode = 8;
  c.peakFlops = {{"bf16", 989e12},
                 {"fp16", 989e12},
                 {"fp32", 67e12},
                 {"tf32", 494.5e12},
                 {"fp8", 1979e12}};
  c.memoryBytes = 96e9;       // 96 GB HBM2e
  c.memoryBandwidth = 2.4e12; // 2.4 TB/s
  c.gemmPeakFraction = 0.8;   // estimate, as the DGX presets
  // NVLink 4 between the 8 GPUs of a host: 900 GB/s total, 450 GB/s per
  // direction (H100 SXM datasheet).
  c.intraNode = {450e9, 3e-6};
  // 400 Gb/s RDMA per GPU: 50 GB/s per direction.
  c.interNode = {50e9, 8e-6};
  c.source =
      "torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Grand Teton): "
      "8 H100 per host with NVLink (H100 SXM datasheet: 900 GB/s total, 450 "
      "GB/s per direction), 96 GB HBM2e at 2.4 TB/s, 400 Gb/s RDMA per GPU "
      "(50 GB/s per direction), 500 W; peak taken as H100 SXM's 989 TFLOP/s "
      "bf16 and 1,979 TFLOP/s fp8 dense; latencies 3 us / 8 us and "
      "gemm_peak_fraction 0.8 are "
      "estimates, as for the DGX presets";
  return c;
}

std::string tessera::planner::calibrationPath(int64_t ranks) {
  llvm::SmallString<256> path;
  if (const char *dir = std::getenv("TESSERA_CALIBRATION_DIR"); dir && *dir) {
    path = dir;
  } else {
    const char *home = std::getenv("HOME");
    path = home && *home ? home : ".";
    llvm::sys::path::append(path, ".cache", "tessera");
  }
  llvm::sys::path::append(path, "cpu-" + std::to_string(ranks) + ".json");
  return std::string(path);
}

static llvm::Expected<Cluster> readClusterFile(StringRef path);

/// `cpu:N`: the calibration `tessera-run --calibrate` wrote for N ranks.
static llvm::Expected<Cluster> cpuCalibration(StringRef spec, int64_t n) {
  std::string path = calibrationPath(n);
  if (!llvm::sys::fs::exists(path))
    return fail("cluster preset '" + spec +
                "': cpu clusters are measured, not preset, and there is no "
                "calibration file '" +
                path + "'; run `mpirun -np " + llvm::Twine(n) +
                " tessera-run --calibrate` on this machine (it writes that "
                "file; TESSERA_CALIBRATION_DIR overrides the directory) or "
                "pass the JSON file of `tessera-run --calibrate OUT.json` to "
                "--cluster");
  llvm::Expected<Cluster> cluster = readClusterFile(path);
  if (!cluster)
    return fail("cluster preset '" + spec +
                "': " + llvm::toString(cluster.takeError()));
  if (cluster->devices() != n)
    return fail("cluster preset '" + spec + "': calibration file '" + path +
                "' describes " + llvm::Twine(cluster->devices()) +
                " devices, not " + llvm::Twine(n) + "; rerun `mpirun -np " +
                llvm::Twine(n) + " tessera-run --calibrate --force`");
  return cluster;
}

static constexpr StringRef kPresetHelp =
    "expected dgx-a100:N, dgx-h100:N, grand-teton-h100:N, cpu:N or a "
    "cluster JSON file";

llvm::Expected<Cluster> tessera::planner::clusterPreset(StringRef spec) {
  auto [kind, count] = spec.split(':');
  if (kind != "dgx-a100" && kind != "dgx-h100" && kind != "grand-teton-h100" &&
      kind != "cpu")
    return fail("unknown cluster preset '" + kind + "' in '" + spec + "' (" +
                kPresetHelp + ")");
  int64_t n = 0;
  if (count.empty() || count.getAsInteger(10, n) || n < 1)
    return fail("cluster preset '" + spec + "': N must be an integer >= 1" +
                " (" + kind + ":N), got '" + count + "'");
  if (kind == "cpu")
    return cpuCalibration(spec, n);
  if (kind == "grand-teton-h100")
    return grandTetonH100(n);
  return kind == "dgx-a100" ? dgxA100(n) : dgxH100(n);
}

/// True when `spec` looks like a preset rather than a file path.
static bool looksLikePreset(StringRef spec) {
  StringRef kind = spec.split(':').first;
  if (kind == "dgx-a100" || kind == "dgx-h100" || kind == "grand-teton-h100" ||
      kind == "cpu")
    return true;
  // "name:N" without a path separator or a .json suffix: a mistyped preset.
  return spec.contains(':') && !spec.contains('/') && !spec.contains('\\') &&
         !spec.ends_with(".json");
}

llvm::Expected<Cluster> tessera::planner::loadCluster(StringRef specOrPath) {
  if (looksLikePreset(specOrPath))
    return clusterPreset(specOrPath);
  return readClusterFile(specOrPath);
}

static llvm::Expected<Cluster> readClusterFile(StringRef specOrPath) {
  // A regular file of at most 64 MiB (a FIFO or /dev/zero is an error;
  // common/io/FileSafety.h).
  auto buf =
      tessera::io::readInputFile("cluster file", specOrPath, uint64_t(64) << 20,
                                 /*isText=*/true);
  if (!buf)
    return fail("cannot read " + llvm::toString(buf.takeError()) + " (" +
                kPresetHelp + ")");
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buf)->getBuffer());
  if (!json)
    return fail("cluster file '" + specOrPath +
                "': " + llvm::toString(json.takeError()));
  llvm::Expected<Cluster> cluster = parseCluster(*json);
  if (!cluster)
    return fail("cluster file '" + specOrPath +
                "': " + llvm::toString(cluster.takeError()));
  return cluster;
}

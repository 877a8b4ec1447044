//===- ClusterTest.cpp - cluster presets, JSON and errors -----------------===//

#include "common/cluster/Cluster.h"
#include "common/cluster/CostModel.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

using namespace tessera::planner;

namespace {

/// The error message of `e`, which must be an error.
template <typename T> std::string errorOf(llvm::Expected<T> e) {
  EXPECT_FALSE(static_cast<bool>(e));
  if (e)
    return "";
  return llvm::toString(e.takeError());
}

TEST(ClusterPreset, DgxA100) {
  llvm::Expected<Cluster> c = loadCluster("dgx-a100:4");
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name, "dgx-a100:4");
  EXPECT_EQ(c->nodes, 4);
  EXPECT_EQ(c->devicesPerNode, 8);
  EXPECT_EQ(c->devices(), 32);
  EXPECT_DOUBLE_EQ(c->peakFlops.at("bf16"), 312e12);
  EXPECT_DOUBLE_EQ(c->peakFlops.at("fp16"), 312e12);
  EXPECT_DOUBLE_EQ(c->peakFlops.at("fp32"), 19.5e12);
  EXPECT_DOUBLE_EQ(c->memoryBytes, 80e9);
  EXPECT_DOUBLE_EQ(c->intraNode.bandwidth, 300e9); // 600 GB/s total / 2
  EXPECT_DOUBLE_EQ(c->interNode.bandwidth, 25e9);  // HDR 200 Gb/s
  EXPECT_GT(c->intraNode.latency, 0);
  EXPECT_GT(c->interNode.latency, c->intraNode.latency);
  EXPECT_NE(c->source.find("A100"), std::string::npos);
  EXPECT_NE(c->source.find("datasheet"), std::string::npos);
  EXPECT_NE(c->source.find("DGX A100 User Guide"), std::string::npos);
}

TEST(ClusterPreset, DgxH100) {
  llvm::Expected<Cluster> c = loadCluster("dgx-h100:16");
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->nodes, 16);
  EXPECT_EQ(c->devices(), 128);
  EXPECT_DOUBLE_EQ(c->peakFlops.at("bf16"), 989e12);
  EXPECT_DOUBLE_EQ(c->peakFlops.at("fp32"), 67e12);
  EXPECT_DOUBLE_EQ(c->memoryBytes, 80e9);
  EXPECT_DOUBLE_EQ(c->intraNode.bandwidth, 450e9); // 900 GB/s total / 2
  EXPECT_DOUBLE_EQ(c->interNode.bandwidth, 50e9);  // NDR 400 Gb/s
  EXPECT_NE(c->source.find("H100"), std::string::npos);
  EXPECT_NE(c->source.find("DGX H100 User Guide"), std::string::npos);
}

TEST(ClusterPreset, GrandTetonH100) {
  // torchtitan's benchmark hosts: 8 H100 96 GB HBM2e (2.4 TB/s) with
  // NVLink, 400 Gb/s RDMA per GPU.
  llvm::Expected<Cluster> c = loadCluster("grand-teton-h100:64");
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name, "grand-teton-h100:64");
  EXPECT_EQ(c->devices(), 512);
  EXPECT_EQ(c->devicesPerNode, 8);
  EXPECT_DOUBLE_EQ(c->memoryBytes, 96e9);
  EXPECT_DOUBLE_EQ(c->memoryBandwidth, 2.4e12);
  EXPECT_DOUBLE_EQ(c->peakFlops.at("bf16"), 989e12);
  EXPECT_DOUBLE_EQ(c->peakFlops.at("fp8"), 1979e12);
  EXPECT_DOUBLE_EQ(c->intraNode.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(c->interNode.bandwidth, 50e9);
  EXPECT_NE(c->source.find("torchtitan"), std::string::npos);
  EXPECT_NE(errorOf(loadCluster("grand-teton-h100:0")).find("N must be"),
            std::string::npos);
}

TEST(ClusterPreset, Errors) {
  EXPECT_NE(errorOf(loadCluster("dgx-b200:4"))
                .find("unknown cluster preset 'dgx-b200'"),
            std::string::npos);
  EXPECT_NE(
      errorOf(loadCluster("dgx-a100:0")).find("N must be an integer >= 1"),
      std::string::npos);
  EXPECT_NE(errorOf(loadCluster("dgx-h100:-2")).find("'dgx-h100:-2'"),
            std::string::npos);
  EXPECT_NE(errorOf(loadCluster("dgx-h100:x")).find("got 'x'"),
            std::string::npos);
  EXPECT_NE(errorOf(loadCluster("dgx-h100")).find("dgx-h100:N"),
            std::string::npos);
  std::string file = errorOf(loadCluster("/nonexistent/cluster.json"));
  EXPECT_NE(file.find("cannot read cluster file '/nonexistent/cluster.json'"),
            std::string::npos)
      << file;
}

/// Points TESSERA_CALIBRATION_DIR at a fresh temporary directory for one
/// test and restores it after.
class CalibrationDir : public ::testing::Test {
protected:
  void SetUp() override {
    if (const char *old = std::getenv("TESSERA_CALIBRATION_DIR"))
      saved = old;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("tessera-cal", dir));
    setenv("TESSERA_CALIBRATION_DIR", dir.c_str(), 1);
  }
  void TearDown() override {
    llvm::sys::fs::remove_directories(dir);
    if (saved)
      setenv("TESSERA_CALIBRATION_DIR", saved->c_str(), 1);
    else
      unsetenv("TESSERA_CALIBRATION_DIR");
  }
  llvm::SmallString<128> dir;
  std::optional<std::string> saved;
};

TEST_F(CalibrationDir, CpuPresetReadsTheCalibrationFile) {
  EXPECT_EQ(calibrationPath(4), std::string(dir) + "/cpu-4.json");
  // Missing: the error says how to make it.
  std::string missing = errorOf(loadCluster("cpu:2"));
  EXPECT_NE(missing.find("cpu clusters are measured, not preset"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("mpirun -np 2 tessera-run --calibrate"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find(calibrationPath(2)), std::string::npos) << missing;

  // Present: read as a cluster file.
  Cluster c = *clusterPreset("dgx-h100:1");
  c.name = "cpu:2";
  c.devicesPerNode = 2;
  c.opOverhead = 2e-6;
  c.transcendentalRate = 3e7;
  c.gemm.push_back({"fp32", 16, 16, 16, 1e9});
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(calibrationPath(2), ec);
    ASSERT_FALSE(ec);
    os << toJSON(c);
  }
  llvm::Expected<Cluster> loaded = loadCluster("cpu:2");
  ASSERT_TRUE(static_cast<bool>(loaded)) << llvm::toString(loaded.takeError());
  EXPECT_EQ(loaded->name, "cpu:2");
  EXPECT_EQ(loaded->devices(), 2);
  EXPECT_DOUBLE_EQ(loaded->opOverhead, 2e-6);
  EXPECT_DOUBLE_EQ(loaded->transcendentalRate, 3e7);
  ASSERT_EQ(loaded->gemm.size(), 1u);

  // A file for another rank count under the name of this one.
  llvm::sys::fs::rename(calibrationPath(2), calibrationPath(3));
  std::string wrong = errorOf(loadCluster("cpu:3"));
  EXPECT_NE(wrong.find("describes 2 devices, not 3"), std::string::npos)
      << wrong;
}

TEST(ClusterJSON, RoundTrip) {
  Cluster c = *clusterPreset("dgx-h100:2");
  llvm::json::Value v = toJSON(c);
  llvm::Expected<Cluster> back = parseCluster(v);
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->name, c.name);
  EXPECT_EQ(back->nodes, c.nodes);
  EXPECT_EQ(back->devicesPerNode, c.devicesPerNode);
  EXPECT_EQ(back->peakFlops, c.peakFlops);
  EXPECT_DOUBLE_EQ(back->memoryBytes, c.memoryBytes);
  EXPECT_DOUBLE_EQ(back->intraNode.bandwidth, c.intraNode.bandwidth);
  EXPECT_DOUBLE_EQ(back->intraNode.latency, c.intraNode.latency);
  EXPECT_DOUBLE_EQ(back->interNode.bandwidth, c.interNode.bandwidth);
  EXPECT_DOUBLE_EQ(back->interNode.latency, c.interNode.latency);
  EXPECT_EQ(back->source, c.source);
  // And through text, as a file would hold it.
  std::string text;
  llvm::raw_string_ostream(text) << v;
  llvm::Expected<llvm::json::Value> reparsed = llvm::json::parse(text);
  ASSERT_TRUE(static_cast<bool>(reparsed));
  EXPECT_EQ(*reparsed, v);
}

TEST(ClusterJSON, LoadFile) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("cluster", "json", path));
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os << R"({"name": "two-box", "nodes": 2, "devices_per_node": 4,
              "peak_flops": {"fp32": 1e12},
              "memory_bytes": 16e9,
              "intra_node": {"bandwidth": 10e9, "latency": 1e-6},
              "inter_node": {"bandwidth": 1e9, "latency": 0}})";
  }
  llvm::Expected<Cluster> c = loadCluster(path);
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name, "two-box");
  EXPECT_EQ(c->devices(), 8);
  EXPECT_DOUBLE_EQ(c->peakFlops.at("fp32"), 1e12);
  EXPECT_DOUBLE_EQ(c->interNode.latency, 0);
  EXPECT_EQ(c->source, "");
}

TEST(ClusterJSON, ErrorsNameTheField) {
  llvm::json::Value good = toJSON(*clusterPreset("dgx-a100:1"));
  auto without = [&](llvm::StringRef key) {
    llvm::json::Value v = good;
    v.getAsObject()->erase(key);
    return errorOf(parseCluster(v));
  };
  EXPECT_NE(without("nodes").find("missing field 'nodes'"), std::string::npos);
  EXPECT_NE(without("devices_per_node").find("'devices_per_node'"),
            std::string::npos);
  EXPECT_NE(without("peak_flops").find("'peak_flops'"), std::string::npos);
  EXPECT_NE(without("memory_bytes").find("'memory_bytes'"), std::string::npos);
  EXPECT_NE(without("inter_node").find("'inter_node'"), std::string::npos);

  llvm::json::Value v = good;
  v.getAsObject()->getObject("intra_node")->erase("bandwidth");
  EXPECT_NE(
      errorOf(parseCluster(v)).find("missing field 'intra_node.bandwidth'"),
      std::string::npos);

  v = good;
  (*v.getAsObject())["nodes"] = 0;
  EXPECT_NE(errorOf(parseCluster(v)).find("'nodes' must be an integer >= 1"),
            std::string::npos);

  v = good;
  (*v.getAsObject()->getObject("peak_flops"))["bf16"] = "fast";
  EXPECT_NE(errorOf(parseCluster(v)).find("'peak_flops.bf16' must be a number"),
            std::string::npos);

  v = good;
  (*v.getAsObject()->getObject("inter_node"))["latency"] = -1.0;
  EXPECT_NE(errorOf(parseCluster(v)).find("'inter_node.latency'"),
            std::string::npos);

  EXPECT_NE(errorOf(parseCluster(llvm::json::Value(3))).find("JSON object"),
            std::string::npos);
}

} // namespace

TEST(ClusterJSON, CalibratedFields) {
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(R"({
    "nodes": 1, "devices_per_node": 4,
    "peak_flops": {"fp32": 5e10}, "memory_bytes": 6e9,
    "intra_node": {"bandwidth": 4e9, "latency": 1e-5},
    "inter_node": {"bandwidth": 4e9, "latency": 1e-5},
    "memory_bandwidth": 1.5e10, "op_overhead": 3e-6,
    "transcendental_rate": 4e7, "gemm_peak_fraction": 0.9,
    "cores_per_node": 2, "waiting_rank_share": 0.25,
    "sync_lag_fraction": 0.3, "sync_lag_window": 1e-3, "compute_scale": 0.9,
    "kernel_seconds_per_element": {"layer_norm": 4e-9, "adamw_update": 7e-9},
    "gemm": [{"dtype": "fp32", "m": 64, "n": 128, "k": 256, "flops": 2e10}],
    "collectives": {"all_to_all": {"intra_node": {"bandwidth": 1e9,
                                                  "latency": 4e-5}},
                    "all_reduce": {"groups": [
                      {"size": 2, "stride": 2, "bandwidth": 3e8,
                       "latency": 9e-5},
                      {"size": 2, "stride": 1, "bandwidth": 2e8,
                       "latency": 8e-5}]}}})");
  ASSERT_TRUE(static_cast<bool>(v));
  llvm::Expected<Cluster> c = parseCluster(*v);
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  EXPECT_DOUBLE_EQ(c->memoryBandwidth, 1.5e10);
  EXPECT_DOUBLE_EQ(c->opOverhead, 3e-6);
  EXPECT_DOUBLE_EQ(c->transcendentalRate, 4e7);
  EXPECT_DOUBLE_EQ(c->gemmPeakFraction, 0.9);
  EXPECT_DOUBLE_EQ(c->coresPerNode, 2);
  EXPECT_DOUBLE_EQ(c->waitingRankShare, 0.25);
  EXPECT_DOUBLE_EQ(c->syncLagFraction, 0.3);
  EXPECT_DOUBLE_EQ(c->syncLagWindow, 1e-3);
  EXPECT_DOUBLE_EQ(c->computeScale, 0.9);
  EXPECT_DOUBLE_EQ(c->kernelSecondsPerElement.at("layer_norm"), 4e-9);
  EXPECT_DOUBLE_EQ(c->kernelSecondsPerElement.at("adamw_update"), 7e-9);
  ASSERT_EQ(c->gemm.size(), 1u);
  EXPECT_EQ(c->gemm[0].dtype, "fp32");
  EXPECT_EQ(c->gemm[0].n, 128);
  EXPECT_DOUBLE_EQ(c->gemm[0].flops, 2e10);
  // The measured all-to-all link overrides the node link; others fall back.
  EXPECT_DOUBLE_EQ(c->link("all_to_all", true).bandwidth, 1e9);
  EXPECT_DOUBLE_EQ(c->link("all_to_all", false).bandwidth, 4e9);
  EXPECT_DOUBLE_EQ(c->link("all_reduce", true).latency, 1e-5);
  // Measured groups: the same size and stride, else the same size with the
  // smallest stride; a size never measured, or across nodes, falls back.
  EXPECT_DOUBLE_EQ(c->link("all_reduce", true, 2, 2).bandwidth, 3e8);
  EXPECT_DOUBLE_EQ(c->link("all_reduce", true, 2, 1).bandwidth, 2e8);
  EXPECT_DOUBLE_EQ(c->link("all_reduce", true, 2, 0).bandwidth, 2e8);
  EXPECT_DOUBLE_EQ(c->link("all_reduce", true, 2, 4).bandwidth, 2e8);
  EXPECT_DOUBLE_EQ(c->link("all_reduce", true, 4, 1).bandwidth, 4e9);
  EXPECT_DOUBLE_EQ(c->link("all_reduce", false, 2, 1).bandwidth, 4e9);
  EXPECT_DOUBLE_EQ(c->link("all_to_all", true, 2, 1).bandwidth, 1e9);

  llvm::Expected<Cluster> back = parseCluster(toJSON(*c));
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(toJSON(*back), toJSON(*c));

  // Presets leave the measured fields absent except what datasheets give.
  Cluster a100 = *clusterPreset("dgx-a100:1");
  EXPECT_DOUBLE_EQ(a100.memoryBandwidth, 2.039e12);
  EXPECT_TRUE(a100.gemm.empty());
  EXPECT_TRUE(a100.collectiveLinks.empty());

  auto errorWith = [&](llvm::StringRef key, llvm::json::Value value) {
    llvm::json::Value w = *v;
    (*w.getAsObject())[key] = std::move(value);
    return errorOf(parseCluster(w));
  };
  EXPECT_NE(errorWith("gemm_peak_fraction", 1.5).find("must be in (0, 1]"),
            std::string::npos);
  EXPECT_NE(errorWith("waiting_rank_share", 1.5)
                .find("'waiting_rank_share' must be in [0, 1]"),
            std::string::npos);
  EXPECT_NE(errorWith("cores_per_node", -2).find("'cores_per_node'"),
            std::string::npos);
  EXPECT_NE(errorWith("sync_lag_fraction", -0.1)
                .find("field 'sync_lag_fraction' must be a number >= 0"),
            std::string::npos);
  EXPECT_NE(errorWith("sync_lag_window", 0)
                .find("field 'sync_lag_window' must be a number > 0"),
            std::string::npos);
  EXPECT_NE(errorWith("compute_scale", 0)
                .find("field 'compute_scale' must be a number > 0"),
            std::string::npos);
  EXPECT_NE(errorWith("transcendental_rate", -1)
                .find("field 'transcendental_rate' must be a number >= 0"),
            std::string::npos);
  EXPECT_NE(errorWith("gemm", llvm::json::Array{llvm::json::Object{
                                  {"dtype", "fp32"}, {"m", 1}, {"n", 1}}})
                .find("missing field 'gemm[0].k'"),
            std::string::npos);
  EXPECT_NE(errorWith("collectives",
                      llvm::json::Object{{"broadcast", llvm::json::Object{}}})
                .find("'collectives.broadcast' is not a collective"),
            std::string::npos);
  EXPECT_NE(errorWith("op_overhead", -1.0).find("'op_overhead'"),
            std::string::npos);
  auto groupsError = [&](llvm::json::Value groups) {
    return errorWith(
        "collectives",
        llvm::json::Object{
            {"all_reduce", llvm::json::Object{{"groups", std::move(groups)}}}});
  };
  EXPECT_NE(groupsError(3).find("'collectives.all_reduce.groups' must be an "
                                "array"),
            std::string::npos);
  EXPECT_NE(groupsError(llvm::json::Array{1})
                .find("'collectives.all_reduce.groups[0]' must be an object"),
            std::string::npos);
  EXPECT_NE(
      groupsError(
          llvm::json::Array{llvm::json::Object{
              {"size", 1}, {"stride", 1}, {"bandwidth", 1e9}, {"latency", 0}}})
          .find("'collectives.all_reduce.groups[0].size' must be at least 2"),
      std::string::npos);
  EXPECT_NE(groupsError(llvm::json::Array{llvm::json::Object{
                            {"size", 2}, {"bandwidth", 1e9}, {"latency", 0}}})
                .find("missing field 'collectives.all_reduce.groups[0]."
                      "stride'"),
            std::string::npos);
  auto measuredError = [&](llvm::json::Value measured) {
    return groupsError(llvm::json::Array{
        llvm::json::Object{{"size", 2},
                           {"stride", 1},
                           {"bandwidth", 1e9},
                           {"latency", 0},
                           {"measured", std::move(measured)}}});
  };
  EXPECT_NE(measuredError(1).find("'collectives.all_reduce.groups[0]."
                                  "measured' must be an array"),
            std::string::npos);
  EXPECT_NE(measuredError(llvm::json::Array{llvm::json::Array{256, 0}})
                .find("'collectives.all_reduce.groups[0].measured[0]' must "
                      "be [bytes > 0, seconds > 0]"),
            std::string::npos);
  EXPECT_NE(measuredError(llvm::json::Array{llvm::json::Array{1024, 2e-5},
                                            llvm::json::Array{256, 3e-5}})
                .find("'collectives.all_reduce.groups[0].measured[1]' must "
                      "have more bytes than the one before"),
            std::string::npos);
}

TEST(ClusterJSON, MeasuredCollectiveTimes) {
  // A group's measured times are read with the group's size, written back,
  // and used by collectiveSeconds for groups of that size only.
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(R"({
    "nodes": 1, "devices_per_node": 4, "peak_flops": {"fp32": 5e10},
    "memory_bytes": 6e9,
    "intra_node": {"bandwidth": 4e9, "latency": 1e-5},
    "inter_node": {"bandwidth": 4e9, "latency": 1e-5},
    "collectives": {"all_reduce": {
      "intra_node": {"bandwidth": 1e9, "latency": 1e-5,
                     "measured": [[256, 1e-3]]},
      "groups": [{"size": 2, "stride": 1, "bandwidth": 1e9, "latency": 1e-5,
                  "measured": [[1024, 2e-5], [4096, 5e-5]],
                  "measured_back_to_back": [[1024, 1e-5], [4096, 3e-5]]}]}}})");
  ASSERT_TRUE(static_cast<bool>(v));
  llvm::Expected<Cluster> c = parseCluster(*v);
  ASSERT_TRUE(static_cast<bool>(c)) << llvm::toString(c.takeError());
  const Cluster::Link &pair = c->link("all_reduce", true, 2, 1);
  ASSERT_EQ(pair.measured.size(), 2u);
  EXPECT_EQ(pair.measuredRanks, 2);
  EXPECT_DOUBLE_EQ(pair.measured[1].first, 4096);
  EXPECT_DOUBLE_EQ(pair.measured[1].second, 5e-5);
  // "measured" belongs to a group of known size; on a plain link it is
  // not read.
  EXPECT_TRUE(c->link("all_reduce", true).measured.empty());
  EXPECT_DOUBLE_EQ(collectiveSeconds(Collective::AllReduce, 2048, 2, pair),
                   2e-5 + (2048.0 - 1024) / (4096 - 1024) * (5e-5 - 2e-5));
  llvm::Expected<Cluster> back = parseCluster(toJSON(*c));
  ASSERT_TRUE(static_cast<bool>(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(toJSON(*back), toJSON(*c));
  EXPECT_EQ(back->link("all_reduce", true, 2, 1).measured, pair.measured);
  // Back to back: its own table; without one, `measured` serves.
  EXPECT_DOUBLE_EQ(
      collectiveSeconds(Collective::AllReduce, 2048, 2, pair, true),
      1e-5 + (2048.0 - 1024) / (4096 - 1024) * (3e-5 - 1e-5));
  EXPECT_EQ(back->link("all_reduce", true, 2, 1).measuredBackToBack,
            pair.measuredBackToBack);
  Cluster::Link single = pair;
  single.measuredBackToBack.clear();
  EXPECT_DOUBLE_EQ(
      collectiveSeconds(Collective::AllReduce, 2048, 2, single, true),
      collectiveSeconds(Collective::AllReduce, 2048, 2, single));
  // A malformed back-to-back table names its element.
  llvm::json::Value w = *v;
  llvm::json::Array *groups = w.getAsObject()
                                  ->getObject("collectives")
                                  ->getObject("all_reduce")
                                  ->getArray("groups");
  (*(*groups)[0].getAsObject())["measured_back_to_back"] = llvm::json::Array{
      llvm::json::Array{4096, 1e-5}, llvm::json::Array{1024, 2e-5}};
  EXPECT_NE(errorOf(parseCluster(w))
                .find("measured_back_to_back[1]' must have more bytes"),
            std::string::npos);
}

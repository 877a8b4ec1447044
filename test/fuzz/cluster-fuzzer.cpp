//===- cluster-fuzzer.cpp - the cluster JSON reader -----------------------===//
//
// libFuzzer target: every input is a cluster description
// (common/cluster/Cluster.h, `--cluster FILE.json`), parsed with
// llvm::json::parse and read with parseCluster. A cluster it accepts must
// survive its own round trip: parseCluster(toJSON(c)) accepts it too (the
// header's promise), else the target aborts (a finding).
//
//===----------------------------------------------------------------------===//

#include "test/fuzz/FuzzUtil.h"

#include "common/cluster/Cluster.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 64 * 1024)
    return 0;
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse(fuzz::asStringRef(data, size));
  if (!json) {
    llvm::consumeError(json.takeError());
    return 0;
  }
  llvm::Expected<planner::Cluster> cluster = planner::parseCluster(*json);
  if (!cluster) {
    llvm::consumeError(cluster.takeError());
    return 0;
  }
  llvm::Expected<planner::Cluster> again =
      planner::parseCluster(planner::toJSON(*cluster));
  if (!again) {
    llvm::errs() << "round trip rejected: " << llvm::toString(again.takeError())
                 << "\n";
    std::abort();
  }
  return 0;
}

//===- StageBalance.cpp - cutting a layer sequence into stages ------------===//

#include "passes/pipeline/StageBalance.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <limits>

using namespace tessera;

std::vector<int64_t> pipeline::balanceChunks(llvm::ArrayRef<double> unitCost,
                                             int64_t chunks) {
  int64_t n = static_cast<int64_t>(unitCost.size());
  std::vector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + unitCost[i];
  auto sum = [&](int64_t from, int64_t to) {
    return prefix[to] - prefix[from];
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest max-cost of cutting units [0, i) into k groups;
  // cut[k][i]: where the last of those groups starts.
  std::vector<std::vector<double>> best(chunks + 1,
                                        std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> cut(chunks + 1,
                                        std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= chunks; ++k)
    for (int64_t i = k; i <= n; ++i)
      for (int64_t j = k - 1; j < i; ++j) {
        double cost = std::max(best[k - 1][j], sum(j, i));
        // Strictly better only, so the earliest optimal cut is kept.
        if (cost < best[k][i] - 1e-12 * std::max(1.0, cost)) {
          best[k][i] = cost;
          cut[k][i] = j;
        }
      }
  std::vector<int64_t> first(chunks);
  int64_t end = n;
  for (int64_t k = chunks; k >= 1; --k) {
    first[k - 1] = cut[k][end];
    end = cut[k][end];
  }
  return first;
}

llvm::Error pipeline::checkBoundaries(llvm::ArrayRef<int64_t> boundaries,
                                      int64_t chunks, int64_t numUnits) {
  auto fail = [](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
  };
  if (static_cast<int64_t>(boundaries.size()) != chunks)
    return fail(llvm::formatv("--pp-stages gives {0} stage starts but the "
                              "pipeline has {1} chunks (--pp x "
                              "--virtual-stages)",
                              boundaries.size(), chunks));
  if (boundaries.front() != 0)
    return fail(llvm::formatv("--pp-stages must start at layer 0, not {0}",
                              boundaries.front()));
  for (size_t i = 1; i < boundaries.size(); ++i)
    if (boundaries[i] <= boundaries[i - 1])
      return fail(llvm::formatv("--pp-stages must be strictly increasing: "
                                "{0} follows {1}",
                                boundaries[i], boundaries[i - 1]));
  if (boundaries.back() >= numUnits)
    return fail(llvm::formatv("--pp-stages: stage start {0} is past the "
                              "model's last layer (the model has {1} layers, "
                              "0 to {2})",
                              boundaries.back(), numUnits, numUnits - 1));
  return llvm::Error::success();
}

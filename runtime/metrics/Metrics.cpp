//===- Metrics.cpp - per-step metrics (JSON lines) and progress lines -----===//

#include "runtime/metrics/Metrics.h"

#include "common/io/FileSafety.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"

#include <cmath>
#include <cstdio>

using namespace tessera::runtime;
namespace json = llvm::json;

namespace {
void number(json::OStream &j, llvm::StringRef key, double v) {
  if (std::isfinite(v))
    j.attribute(key, v);
  else
    j.attribute(key, nullptr);
}
} // namespace

std::string tessera::runtime::formatMetricsJson(const StepMetrics &m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  json::OStream j(os);
  j.objectBegin();
  j.attribute("step", m.step);
  number(j, "loss", m.loss);
  number(j, "step_time_s", m.stepTimeS);
  number(j, "tokens_per_s", m.tokensPerS);
  for (const auto &kv : m.extra)
    number(j, kv.first, kv.second);
  for (const auto &kv : m.intLists)
    j.attributeArray(kv.first, [&] {
      for (int64_t v : kv.second)
        j.value(v);
    });
  for (const auto &kv : m.numLists)
    j.attributeArray(kv.first, [&] {
      for (double v : kv.second)
        j.value(std::isfinite(v) ? json::Value(v) : json::Value(nullptr));
    });
  j.objectEnd();
  os.flush();
  return s;
}

std::string tessera::runtime::formatProgressLine(int64_t step, double loss,
                                                 double tokensPerS) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "step %lld | loss %.4f | %.0f tok/s",
                (long long)step, loss, tokensPerS);
  return buf;
}

llvm::Expected<std::unique_ptr<MetricsWriter>>
MetricsWriter::open(llvm::StringRef path, bool append) {
  std::error_code ec;
  auto os = std::make_unique<llvm::raw_fd_ostream>(
      path, ec, append ? llvm::sys::fs::OF_Append : llvm::sys::fs::OF_None);
  if (ec)
    return llvm::createStringError(ec, "metrics file '%s': %s",
                                   path.str().c_str(), ec.message().c_str());
  return std::unique_ptr<MetricsWriter>(
      new MetricsWriter(path.str(), std::move(os)));
}

llvm::Error MetricsWriter::write(const StepMetrics &m) {
  // One write(2) of the whole line (io::appendRecord): a killed run leaves
  // whole records only.
  if (std::error_code ec =
          tessera::io::appendRecord(*os, formatMetricsJson(m) + "\n"))
    return llvm::createStringError(ec, "metrics file '%s': write failed: %s",
                                   filePath.c_str(), ec.message().c_str());
  return llvm::Error::success();
}

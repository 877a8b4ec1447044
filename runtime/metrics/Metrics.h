//===- Metrics.h - per-step metrics (JSON lines) and progress lines -*- C++
//-*-//
//
// `--metrics FILE` writes one JSON object per step and line:
//   {"step": 12, "loss": 3.1234, "step_time_s": 0.5, "tokens_per_s": 1234.0,
//    <extra numeric fields, e.g. "bytes_sent">,
//    <extra integer-list fields, e.g. "peak_activation_sets": [2, 1]>,
//    <extra number-list fields, e.g. "bytes_send_per_rank": [512.0, 0.0]>}
// The file is opened once; each record is flushed as it is written.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_METRICS_METRICS_H
#define TESSERA_RUNTIME_METRICS_METRICS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera {
namespace runtime {

/// One step's measurements.
struct StepMetrics {
  int64_t step = 0;
  double loss = 0;       ///< global mean loss (natural log)
  double stepTimeS = 0;  ///< wall-clock seconds for the step
  double tokensPerS = 0; ///< global tokens per second
  /// Extra numeric fields in order, e.g. {"bytes_sent", 1.5e6}. Names must not
  /// repeat the four fixed keys.
  std::vector<std::pair<std::string, double>> extra;
  /// Extra integer-array fields in order, written after `extra`, e.g.
  /// {"peak_activation_sets", {2, 1}}. Same naming rule.
  std::vector<std::pair<std::string, std::vector<int64_t>>> intLists;
  /// Extra number-array fields in order, written after `intLists`, e.g.
  /// {"bytes_send_per_rank", {512, 0}}; non-finite entries are written as
  /// null. Same naming rule.
  std::vector<std::pair<std::string, std::vector<double>>> numLists;
};

/// The JSON object for `m` (no trailing newline). Non-finite numbers are
/// written as null (JSON has no NaN).
std::string formatMetricsJson(const StepMetrics &m);

/// "step 12 | loss 3.1234 | 1234 tok/s" (loss with 4 decimals, tokens/s
/// rounded to an integer).
std::string formatProgressLine(int64_t step, double loss, double tokensPerS);

/// Appends JSON lines to a file opened once.
class MetricsWriter {
public:
  /// Opens `path`, truncating it unless `append` is true. Error names the
  /// path.
  static llvm::Expected<std::unique_ptr<MetricsWriter>>
  open(llvm::StringRef path, bool append = false);

  /// Writes one line in one write(2) (io::appendRecord), so a run killed at
  /// any moment leaves whole records. Error names the path on I/O failure.
  llvm::Error write(const StepMetrics &m);

  const std::string &path() const { return filePath; }

private:
  MetricsWriter(std::string path, std::unique_ptr<llvm::raw_fd_ostream> os)
      : filePath(std::move(path)), os(std::move(os)) {}
  std::string filePath;
  std::unique_ptr<llvm::raw_fd_ostream> os;
};

} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_METRICS_METRICS_H

//===- TensorDump.h - tessera-run --dump-tensors ----------------*- C++ -*-===//
//
// Writes, for one rank, every traced kernel result of every step (the
// programs tessera-check compiles carry `tsrt.trace` ids; ordinary plans
// have none and write nothing but an empty index):
//   DIR/rank<R>.bin   the results' raw little-endian bytes, back to back, in
//                     the order the rank computed them;
//   DIR/rank<R>.json  {"rank": R, "axes": ["dp", "tp"], "coords": [0, 1],
//                      "grid_shape": [2, 2], "tensors": [{"step": s,
//                      "trace": id, "result": i, "dtype": "f32",
//                      "shape": [local shape], "offset": bytes,
//                      "bytes": n}, ...]}
// Shapes are the rank's local ones; tessera-check reassembles global tensors
// from them with the layouts (`tsr.trace_shardings`) of the program it
// compiled.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_TRAINER_TENSORDUMP_H
#define TESSERA_RUNTIME_TRAINER_TENSORDUMP_H

#include "runtime/Tensor.h"
#include "runtime/executor/Backend.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

namespace tessera::runtime {

class TensorDump {
public:
  /// Creates DIR (if needed) and DIR/rank<rank>.bin. `backend` downloads
  /// device tensors. Errors name the file.
  static llvm::Expected<std::unique_ptr<TensorDump>>
  open(llvm::StringRef dir, int rank, exec::Backend &backend);

  /// Appends result `result` of traced kernel `trace` in step `step`.
  llvm::Error add(int64_t step, int64_t trace, unsigned result,
                  const Tensor &value);

  /// Closes the data file and writes the index. Errors name the file.
  llvm::Error finish(const std::vector<std::string> &axes,
                     llvm::ArrayRef<int64_t> coords,
                     llvm::ArrayRef<int64_t> gridShape);

private:
  TensorDump(std::string dir, int rank, exec::Backend &backend,
             std::unique_ptr<llvm::raw_fd_ostream> data)
      : dir(std::move(dir)), rank(rank), backend(backend),
        data(std::move(data)) {}
  std::string dir;
  int rank;
  exec::Backend &backend;
  std::unique_ptr<llvm::raw_fd_ostream> data;
  int64_t offset = 0;
  llvm::json::Array index;
};

} // namespace tessera::runtime

#endif // TESSERA_RUNTIME_TRAINER_TENSORDUMP_H

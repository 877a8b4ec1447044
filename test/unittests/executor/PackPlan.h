//===- PackPlan.h - build plan.tsr artifacts for tests ----------*- C++ -*-===//
//
// Test helper (and the `tessera-pack-plan` tool): packs a textual `tsrt`
// module, a manifest and initial weights into the plan.tsr layout that the
// compiler writes (runtime/executor/Plan.h), with the program as MLIR
// bytecode. Parameters without a given value get deterministic
// pseudo-random values (uniform in [-0.5, 0.5), seeded by the name).
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_TEST_UNITTESTS_EXECUTOR_PACKPLAN_H
#define TESSERA_TEST_UNITTESTS_EXECUTOR_PACKPLAN_H

#include "runtime/Tensor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <string>

namespace tessera {
namespace runtime {
namespace test {

/// Deterministic initial value for parameter `name`.
Tensor defaultInitialValue(llvm::StringRef name, std::vector<int64_t> shape);

/// The artifact bytes. `manifest` is the manifest JSON object; `weights`
/// overrides the initial value of params/frozen tensors by name;
/// `sourceName` is the file name the program's locations refer to. With
/// `verify` false the module is packed without running the MLIR verifier
/// (to test that the runtime rejects invalid programs itself).
llvm::Expected<std::string>
packPlan(llvm::StringRef mlirText, const llvm::json::Object &manifest,
         const std::map<std::string, Tensor> &weights = {},
         llvm::StringRef sourceName = "program.mlir", bool verify = true);

} // namespace test
} // namespace runtime
} // namespace tessera

#endif // TESSERA_TEST_UNITTESTS_EXECUTOR_PACKPLAN_H

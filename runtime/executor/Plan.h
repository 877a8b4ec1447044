//===- Plan.h - loading a plan.tsr artifact ---------------------*- C++ -*-===//
//
// plan.tsr is one safetensors file written by the compiler
// (compiler/artifact/Artifact.h):
//   - one F32 tensor per parameter / frozen initializer, GLOBAL shape, named
//     by its ONNX name (the initial weights);
//   - a U8 tensor (manifest "program", normally "__program__") holding the
//     `tsrt` runtime module as MLIR bytecode (textual MLIR is accepted too);
//   - metadata "tessera.manifest": JSON
//       {"format": "tessera-plan", "version": 1,
//        "grid": {"axes": ["dp", "tp"], "shape": [2, 2]},
//        "program": "__program__", "function": "train_step",
//        "global_batch": 8, "seq_len": 64, "optimizer": {...},
//        "arguments": [{"index", "name", "role", "dtype", "shape",
//                       "local_shape", "layout"}, ...],
//        "results": [{"index", "role", "name"}, ...]}
//     Argument roles: "param" (trainable, initial value = the tensor of that
//     name), "frozen" (likewise, never updated), "opt_state" (starts at
//     zeros), "tokens", "labels" (global [B, S] i64). Result roles: "loss"
//     (f32 scalar, the global mean), "param" / "opt_state" (replace the
//     argument of the same name for the next step).
//
// Loading parses and checks everything once (manifest against program,
// layouts against the grid, initial weights against shapes), compiles the
// program into instructions and then drops the MLIR module: a Plan holds no
// MLIR objects. Every error names the file and the offending entry.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_EXECUTOR_PLAN_H
#define TESSERA_RUNTIME_EXECUTOR_PLAN_H

#include "runtime/Tensor.h"
#include "runtime/checkpoint/SafeTensors.h"
#include "runtime/executor/Layout.h"
#include "runtime/executor/Program.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tessera {
namespace runtime {
namespace exec {

/// Roles of program arguments and results.
enum class Role { Param, Frozen, OptState, Tokens, Labels, Loss };
/// "param", "frozen", ...
const char *roleName(Role role);

/// One program argument as described by the manifest.
struct ArgumentSpec {
  int64_t index = 0;
  std::string name;
  Role role = Role::Param;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;      ///< global
  std::vector<int64_t> localShape; ///< per rank
  Layout layout;
};

/// One program result as described by the manifest.
struct ResultSpec {
  int64_t index = 0;
  Role role = Role::Loss;
  std::string name;
  /// For param/opt_state results: the argument it replaces; else -1.
  int64_t argument = -1;
};

/// The parsed "tessera.manifest".
struct Manifest {
  std::vector<std::string> gridAxes;
  std::vector<int64_t> gridShape;
  std::string program = "__program__";
  std::string function = "train_step";
  int64_t globalBatch = 0;
  int64_t seqLen = 0;
  llvm::json::Object optimizer;
  std::vector<ArgumentSpec> arguments; ///< arguments[i].index == i
  std::vector<ResultSpec> results;     ///< results[i].index == i

  /// Product of the grid shape.
  int64_t numRanks() const;
  /// "dp=2 x tp=2".
  std::string gridDescription() const;
  /// Index of the argument named `name` with role `role`, or -1.
  int64_t findArgument(llvm::StringRef name, Role role) const;

  /// Parses and checks the JSON (names unique per role, layouts valid for the
  /// grid and matching shape/local_shape, results referring to arguments).
  /// Errors are prefixed with `source`.
  static llvm::Expected<Manifest> parse(llvm::StringRef json,
                                        llvm::StringRef source);
};

/// A loaded, checked artifact.
class Plan {
public:
  /// Reads and checks `path`.
  static llvm::Expected<std::unique_ptr<Plan>> load(llvm::StringRef path);
  /// Same, from a parsed safetensors file; `source` names it in errors.
  static llvm::Expected<std::unique_ptr<Plan>>
  fromSafeTensors(SafeTensorsFile file, llvm::StringRef source);

  const Manifest &manifest() const { return man; }
  const Program &program() const { return prog; }
  /// Global initial value of a param/frozen argument, or null.
  const Tensor *initialValue(llvm::StringRef name) const;
  /// Where the plan came from (path or buffer name).
  const std::string &source() const { return src; }

private:
  Plan() = default;
  std::string src;
  Manifest man;
  Program prog;
  std::map<std::string, Tensor, std::less<>> weights;
};

} // namespace exec
} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_EXECUTOR_PLAN_H

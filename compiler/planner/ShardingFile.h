//===- ShardingFile.h - `--sharding FILE.json` ------------------*- C++ -*-===//
//
// The parameter shardings a user pins (tessera-partition --sharding): a JSON
// object from parameter name (`tsr.name`, the ONNX initializer's name) to
// its layout in --explain's notation (common/plan/LayoutText.h), e.g.
//
//   {"h.0.attn.c_attn.weight": "[-, {3, 64 : tp}]",
//    "wpe.weight": "replicated"}
//
// Each pin is checked against the parameter's shape and the plan's grid and
// becomes Plan::shardings[name], in canonical text; the sharding search
// chooses the parameters not pinned, and tsr-sharding-annotate applies them.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_COMPILER_PLANNER_SHARDINGFILE_H
#define TESSERA_COMPILER_PLANNER_SHARDINGFILE_H

#include "common/plan/Grid.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::planner {

/// Parameter name -> global shape.
using ParameterShapes = std::map<std::string, std::vector<int64_t>>;

/// Parses `text`, the contents of the sharding file `path`, for a model with
/// parameters `params` on `grid`. Returns name -> canonical layout text.
/// Errors (one line, "PATH: ..." naming the key): not JSON, not an object, a
/// value that is not a string, a name that is not a parameter (with the
/// three closest names), a layout that does not parse, whose rank differs
/// from the parameter's, that names an axis the grid lacks or that a grid
/// axis does not divide.
llvm::Expected<std::map<std::string, std::string>>
parseShardingFile(llvm::StringRef path, llvm::StringRef text,
                  const ParameterShapes &params, const GridSpec &grid);

/// Reads the file `path` and parses it (parseShardingFile); an unreadable
/// file is an error naming it.
llvm::Expected<std::map<std::string, std::string>>
readShardingFile(llvm::StringRef path, const ParameterShapes &params,
                 const GridSpec &grid);

/// The names of `params` closest to `name` by edit distance, at most `n`,
/// nearest first (ties in name order).
std::vector<std::string>
closestNames(llvm::StringRef name, const ParameterShapes &params, size_t n = 3);

} // namespace tessera::planner

#endif // TESSERA_COMPILER_PLANNER_SHARDINGFILE_H

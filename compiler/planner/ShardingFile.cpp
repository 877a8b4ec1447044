//===- ShardingFile.cpp - `--sharding FILE.json` --------------------------===//

#include "compiler/planner/ShardingFile.h"

#include "common/io/FileSafety.h"
#include "common/plan/LayoutText.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace tessera::planner;
namespace json = llvm::json;

/// `s` as a JSON string ("a\nb" with its escapes), so errors stay one line.
static std::string quoted(llvm::StringRef s) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << json::Value(s.str());
  return out;
}

std::vector<std::string>
tessera::planner::closestNames(llvm::StringRef name,
                               const ParameterShapes &params, size_t n) {
  std::vector<std::pair<unsigned, std::string>> scored;
  for (const auto &entry : params)
    scored.push_back({name.edit_distance(entry.first), entry.first});
  std::stable_sort(
      scored.begin(), scored.end(),
      [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < n; ++i)
    out.push_back(scored[i].second);
  return out;
}

llvm::Expected<std::map<std::string, std::string>>
tessera::planner::parseShardingFile(llvm::StringRef path, llvm::StringRef text,
                                    const ParameterShapes &params,
                                    const GridSpec &grid) {
  auto fail = [&](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   path + ": " + msg);
  };
  llvm::Expected<json::Value> root = json::parse(text);
  if (!root)
    return fail("not JSON: " + llvm::toString(root.takeError()));
  const json::Object *object = root->getAsObject();
  if (!object)
    return fail("expected a JSON object {\"parameter name\": \"layout\", "
                "...}");
  std::map<std::string, std::string> out;
  // In name order, so the first error does not depend on hashing.
  std::vector<std::string> keys;
  for (const auto &entry : *object)
    keys.push_back(entry.first.str());
  llvm::sort(keys);
  for (const std::string &name : keys) {
    const json::Value &value = *object->get(name);
    std::optional<llvm::StringRef> layout = value.getAsString();
    if (!layout) {
      std::string got;
      llvm::raw_string_ostream os(got);
      os << value;
      return fail(quoted(name) +
                  ": the layout must be a string such as "
                  "\"[tp, -]\" or \"replicated\", got " +
                  got);
    }
    auto param = params.find(name);
    if (param == params.end()) {
      std::string closest;
      for (const std::string &c : closestNames(name, params))
        closest += (closest.empty() ? "" : ", ") + c;
      return fail(quoted(name) + " is not a parameter of the model" +
                  (closest.empty() ? std::string(" (it has none)")
                                   : "; the closest: " + closest));
    }
    llvm::Expected<TensorLayout> parsed =
        parseLayoutText(*layout, param->second, &grid);
    if (!parsed)
      return fail(quoted(name) + ": " + quoted(*layout) + ": " +
                  llvm::toString(parsed.takeError()));
    out[name] = printLayoutText(*parsed);
  }
  return out;
}

llvm::Expected<std::map<std::string, std::string>>
tessera::planner::readShardingFile(llvm::StringRef path,
                                   const ParameterShapes &params,
                                   const GridSpec &grid) {
  // Only a regular file (a FIFO would block, /dev/zero never end;
  // common/io/FileSafety.h).
  if (llvm::sys::fs::exists(path)) {
    std::string kind = tessera::io::describeNonRegular(path);
    if (!kind.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     path + ": cannot read: it is " + kind +
                                         ", not a regular file");
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        path + ": cannot read: " + buffer.getError().message());
  return parseShardingFile(path, (*buffer)->getBuffer(), params, grid);
}

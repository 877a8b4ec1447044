//===- TensorDump.cpp - tessera-run --dump-tensors ------------------------===//

#include "runtime/trainer/TensorDump.h"

#include "common/io/FileSafety.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

using namespace tessera::runtime;

static std::string rankFile(llvm::StringRef dir, int rank,
                            llvm::StringRef ext) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, "rank" + std::to_string(rank) + ext.str());
  return std::string(path);
}

llvm::Expected<std::unique_ptr<TensorDump>>
TensorDump::open(llvm::StringRef dir, int rank, exec::Backend &backend) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return llvm::createStringError("--dump-tensors: cannot create '" + dir +
                                   "': " + ec.message());
  std::string path = rankFile(dir, rank, ".bin");
  std::error_code ec;
  auto data = std::make_unique<llvm::raw_fd_ostream>(path, ec);
  if (ec)
    return llvm::createStringError("--dump-tensors: cannot write '" + path +
                                   "': " + ec.message());
  return std::unique_ptr<TensorDump>(
      new TensorDump(dir.str(), rank, backend, std::move(data)));
}

llvm::Error TensorDump::add(int64_t step, int64_t trace, unsigned result,
                            const Tensor &value) {
  const Tensor *host = &value;
  Tensor downloaded;
  if (!backend.hostMemory()) {
    llvm::Expected<Tensor> t = backend.download(value);
    if (!t)
      return t.takeError();
    downloaded = std::move(*t);
    host = &downloaded;
  }
  int64_t bytes =
      host->numel() * static_cast<int64_t>(dtypeSize(host->dtype()));
  data->write(static_cast<const char *>(host->raw()), bytes);
  llvm::json::Array shape;
  for (int64_t d : host->shape())
    shape.push_back(d);
  index.push_back(llvm::json::Object{{"step", step},
                                     {"trace", trace},
                                     {"result", static_cast<int64_t>(result)},
                                     {"dtype", dtypeName(host->dtype())},
                                     {"shape", std::move(shape)},
                                     {"offset", offset},
                                     {"bytes", bytes}});
  offset += bytes;
  return llvm::Error::success();
}

llvm::Error TensorDump::finish(const std::vector<std::string> &axes,
                               llvm::ArrayRef<int64_t> coords,
                               llvm::ArrayRef<int64_t> gridShape) {
  data->close();
  if (data->has_error()) {
    std::string msg = data->error().message();
    data->clear_error();
    return llvm::createStringError("--dump-tensors: cannot write '" +
                                   rankFile(dir, rank, ".bin") + "': " + msg);
  }
  // The index last and atomically (common/io/FileSafety.h): a run killed
  // while dumping leaves no index, so the dump reads as incomplete.
  std::string path = rankFile(dir, rank, ".json");
  llvm::json::Array axisNames, coordList, shape;
  for (const std::string &a : axes)
    axisNames.push_back(a);
  for (int64_t c : coords)
    coordList.push_back(c);
  for (int64_t s : gridShape)
    shape.push_back(s);
  llvm::json::Value value(llvm::json::Object{{"rank", rank},
                                             {"axes", std::move(axisNames)},
                                             {"coords", std::move(coordList)},
                                             {"grid_shape", std::move(shape)},
                                             {"tensors", std::move(index)}});
  return io::writeFileAtomically("--dump-tensors", path,
                                 [&](llvm::raw_ostream &os) {
                                   os << value << "\n";
                                   return llvm::Error::success();
                                 });
}

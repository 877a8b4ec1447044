//===- OnnxExport.cpp - a checkpoint's weights into an ONNX model ---------===//
//
// libonnx/protobuf may throw: this file is built with exceptions and
// exportOnnx catches them.
//
//===----------------------------------------------------------------------===//

#include "tools/tessera-ckpt/OnnxExport.h"

#include "compiler/import/ConstTensor.h"
#include "compiler/import/ExternalData.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <onnx/onnx_pb.h>

#include <exception>
#include <limits>
#include <optional>

using namespace tessera;
using namespace tessera::ckpttool;
using runtime::ckpt::CheckpointReader;
using runtime::ckpt::TensorInfo;
namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string dimsString(const onnx::TensorProto &t) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  return runtime::shapeToString(dims);
}

/// True when `a` and `b` exist and are the same file.
bool sameFile(const llvm::Twine &a, const llvm::Twine &b) {
  bool result = false;
  return !fs::equivalent(a, b, result) && result;
}

/// Writes initializers into the external data file, 16-byte aligned.
class DataWriter {
public:
  DataWriter(std::string path, std::string location)
      : finalPath(std::move(path)), loc(std::move(location)) {}

  llvm::Error open() {
    tmpPath = finalPath + ".tmp." +
              std::to_string(llvm::sys::Process::getProcessId());
    std::error_code ec;
    os.emplace(tmpPath, ec, fs::OF_None);
    if (ec)
      return fail("cannot write '" + tmpPath + "': " + ec.message());
    return llvm::Error::success();
  }
  /// Appends `bytes` and points `t` at them.
  void put(onnx::TensorProto &t, llvm::StringRef bytes) {
    while (offset % 16 != 0) {
      *os << '\0';
      ++offset;
    }
    os->write(bytes.data(), bytes.size());
    t.clear_raw_data();
    t.clear_float_data();
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char *k, const std::string &v) {
      onnx::StringStringEntryProto *e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", loc);
    add("offset", std::to_string(offset));
    add("length", std::to_string(bytes.size()));
    offset += bytes.size();
  }
  llvm::Error close() {
    closed = true;
    os->close();
    if (os->has_error()) {
      std::string msg = os->error().message();
      os->clear_error();
      return fail("writing '" + tmpPath + "' failed: " + msg);
    }
    return llvm::Error::success();
  }
  llvm::Error commit() {
    if (std::error_code ec = fs::rename(tmpPath, finalPath))
      return fail("cannot rename '" + tmpPath + "' to '" + finalPath +
                  "': " + ec.message());
    return llvm::Error::success();
  }
  void discard() {
    if (os && !closed) {
      os->close();
      os->clear_error();
    }
    if (!tmpPath.empty())
      fs::remove(tmpPath);
  }
  const std::string &pathName() const { return finalPath; }

private:
  std::string finalPath, loc, tmpPath;
  std::optional<llvm::raw_fd_ostream> os;
  uint64_t offset = 0;
  bool closed = false;
};

void setInline(onnx::TensorProto &t, llvm::StringRef bytes) {
  t.clear_float_data();
  t.clear_external_data();
  t.clear_data_location();
  t.set_raw_data(bytes.data(), bytes.size());
}

llvm::Expected<ExportStats> exportImpl(const CheckpointReader &checkpoint,
                                       llvm::StringRef inPath,
                                       llvm::StringRef outPath,
                                       const ExportOptions &options) {
  if (inPath == outPath || sameFile(inPath, outPath))
    return fail("refusing to overwrite the input model '" + inPath +
                "' (choose another -o)");
  auto buffer = llvm::MemoryBuffer::getFile(inPath, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return fail("cannot read '" + inPath + "': " + buffer.getError().message());
  if ((*buffer)->getBufferSize() >
      static_cast<size_t>(std::numeric_limits<int>::max()))
    return fail("'" + inPath +
                "' is larger than 2 GiB (not an ONNX model "
                "protobuf)");
  onnx::ModelProto model;
  if (!model.ParseFromArray((*buffer)->getBufferStart(),
                            static_cast<int>((*buffer)->getBufferSize())))
    return fail("'" + inPath +
                "' is not a valid ONNX model (protobuf parse "
                "failed)");
  if (!model.has_graph())
    return fail("'" + inPath + "' has no graph");
  onnx::GraphProto *graph = model.mutable_graph();

  llvm::SmallString<256> modelDir(inPath);
  path::remove_filename(modelDir);
  if (modelDir.empty())
    modelDir = ".";
  import::ExternalDataReader external{std::string(modelDir)};

  // Output mode and the files IN reads external data from.
  bool anyExternal = false;
  for (const onnx::TensorProto &t : graph->initializer())
    if (import::ExternalDataReader::isExternal(t)) {
      anyExternal = true;
      break;
    }
  ExportStats stats;
  stats.external = options.externalData || anyExternal;
  std::optional<DataWriter> data;
  if (stats.external) {
    std::string dataPath = (outPath + ".data").str();
    std::string location = path::filename(dataPath).str();
    for (const onnx::TensorProto &t : graph->initializer())
      for (const auto &kv : t.external_data())
        if (kv.key() == "location") {
          llvm::SmallString<256> p(modelDir);
          path::append(p, kv.value());
          if (sameFile(p, dataPath))
            return fail("refusing to overwrite '" + dataPath + "', which '" +
                        inPath +
                        "' reads external data from (choose "
                        "another -o)");
        }
    data.emplace(dataPath, location);
    if (llvm::Error err = data->open())
      return std::move(err);
    stats.dataFile = dataPath;
  }
  llvm::scope_exit cleanup([&] {
    if (data)
      data->discard();
  });

  llvm::StringSet<> replaced;
  for (onnx::TensorProto &t : *graph->mutable_initializer()) {
    const TensorInfo *info = checkpoint.find(t.name());
    if (info && info->role != "opt_state") {
      auto bad = [&](const llvm::Twine &msg) {
        return fail("'" + inPath + "': initializer '" + t.name() + "' " + msg);
      };
      if (t.data_type() != onnx::TensorProto::FLOAT)
        return bad("has data type " + std::to_string(t.data_type()) +
                   " (not FLOAT); the checkpoint holds " + info->dtypeName +
                   " values");
      std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
      if (dims != info->shape)
        return bad("has dims " + dimsString(t) + ", the checkpoint's '" +
                   info->name + "' has shape " +
                   runtime::shapeToString(info->shape));
      if (info->dtype != runtime::DType::F32)
        return bad("is FLOAT; the checkpoint holds " + info->dtypeName +
                   " values");
      llvm::Expected<runtime::Tensor> value = checkpoint.loadGlobal(info->name);
      if (!value)
        return value.takeError();
      llvm::StringRef bytes(static_cast<const char *>(value->raw()),
                            value->bytes());
      if (data)
        data->put(t, bytes);
      else
        setInline(t, bytes);
      replaced.insert(t.name());
      ++stats.replaced;
      continue;
    }
    ++stats.kept;
    if (!import::ExternalDataReader::isExternal(t))
      continue;
    int64_t n = 1;
    for (int64_t d : t.dims())
      n *= d;
    int64_t elem = import::dtypeBytes(t.data_type());
    if (elem <= 0)
      return fail("'" + inPath + "': initializer '" + t.name() +
                  "' has external data of an unsupported data type " +
                  std::to_string(t.data_type()));
    llvm::Expected<import::TensorBytes> bytes = external.read(t, n * elem);
    if (!bytes)
      return fail("'" + inPath + "': " + llvm::toString(bytes.takeError()));
    llvm::StringRef b(bytes->bytes.data(), bytes->bytes.size());
    if (data)
      data->put(t, b);
    else
      setInline(t, b);
  }
  for (const TensorInfo &info : checkpoint.tensors())
    if (info.role != "opt_state" && !replaced.contains(info.name))
      return fail("checkpoint tensor '" + info.name + "' (" + info.role +
                  ") is not an initializer of '" + inPath + "'");

  if (!data && model.ByteSizeLong() >
                   static_cast<size_t>(std::numeric_limits<int>::max()))
    return fail("the exported model would exceed protobuf's 2 GiB; use "
                "--external-data");
  std::string serialized;
  if (!model.SerializeToString(&serialized))
    return fail("cannot serialize the exported model");
  if (data)
    if (llvm::Error err = data->close())
      return std::move(err);
  std::string tmp =
      (outPath + ".tmp." + std::to_string(llvm::sys::Process::getProcessId()))
          .str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, fs::OF_None);
    if (ec)
      return fail("cannot write '" + tmp + "': " + ec.message());
    os << serialized;
    os.close();
    if (os.has_error()) {
      std::string msg = os.error().message();
      os.clear_error();
      fs::remove(tmp);
      return fail("writing '" + tmp + "' failed: " + msg);
    }
  }
  if (data)
    if (llvm::Error err = data->commit()) {
      fs::remove(tmp);
      return std::move(err);
    }
  if (std::error_code ec = fs::rename(tmp, outPath)) {
    fs::remove(tmp);
    return fail("cannot rename '" + tmp + "' to '" + outPath +
                "': " + ec.message());
  }
  cleanup.release();
  return stats;
}

} // namespace

llvm::Expected<ExportStats>
ckpttool::exportOnnx(const CheckpointReader &checkpoint, llvm::StringRef inPath,
                     llvm::StringRef outPath, const ExportOptions &options) {
  try {
    return exportImpl(checkpoint, inPath, outPath, options);
  } catch (const std::exception &e) {
    return fail("'" + inPath + "': " + e.what());
  }
}

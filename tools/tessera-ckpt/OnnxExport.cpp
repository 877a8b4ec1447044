//===- OnnxExport.cpp - a checkpoint's weights into an ONNX model ---------===//
//
// libonnx/protobuf may throw: this file is built with exceptions and
// exportOnnx catches them.
//
//===----------------------------------------------------------------------===//

#include "tools/tessera-ckpt/OnnxExport.h"

#include "compiler/import/ConstTensor.h"
#include "compiler/import/ExternalData.h"
#include "compiler/import/Initializers.h"
#include "compiler/import/TensorProtoBytes.h"

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
#include <map>
#include <optional>
#include <set>

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

/// `v` (f32) broadcast along its size-1 dims to `dims` (the same rank), as
/// little-endian bytes: a parameter trained as one slice (ParamPlan's
/// repeatDims) written back to its initializer's shape.
std::string broadcastBytes(const runtime::Tensor &v,
                           const std::vector<int64_t> &dims) {
  if (v.shape() == dims)
    return std::string(static_cast<const char *>(v.raw()), v.bytes());
  int64_t n = runtime::shapeNumel(dims);
  std::vector<float> out(static_cast<size_t>(n));
  size_t rank = dims.size();
  std::vector<int64_t> srcStride(rank);
  int64_t acc = 1;
  for (size_t d = rank; d-- > 0;) {
    srcStride[d] = v.shape()[d] == 1 ? 0 : acc;
    acc *= v.shape()[d];
  }
  const float *src = v.data<float>();
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d)
      off += idx[d] * srcStride[d];
    out[static_cast<size_t>(i)] = src[off];
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < dims[d])
        break;
      idx[d] = 0;
    }
  }
  return std::string(reinterpret_cast<const char *>(out.data()),
                     out.size() * sizeof(float));
}

/// The transpose of a 2-D f32 matrix of `dims` given as bytes.
std::string transposeBytes(const std::string &bytes,
                           const std::vector<int64_t> &dims) {
  int64_t r = dims[0], c = dims[1];
  const float *in = reinterpret_cast<const float *>(bytes.data());
  std::vector<float> out(static_cast<size_t>(r * c));
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j)
      out[static_cast<size_t>(j * r + i)] = in[i * c + j];
  return std::string(reinterpret_cast<const char *>(out.data()),
                     out.size() * sizeof(float));
}

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

  // Which parameter each initializer holds: the importer's own
  // classification (Initializers.h: aliases, transposed ties, untied
  // copies, parameters trained as a broadcast slice), so that the names and
  // shapes are the ones tessera-partition gave the checkpoint's tensors.
  std::map<std::string, int> initIndex;
  for (int i = 0; i < graph->initializer_size(); ++i)
    initIndex[graph->initializer(i).name()] = i;
  std::vector<std::vector<char>> scratch(graph->initializer_size());
  std::vector<import::InitView> views;
  for (int i = 0; i < graph->initializer_size(); ++i) {
    const onnx::TensorProto &t = graph->initializer(i);
    if (!import::isFloatDType(t.data_type()))
      continue;
    import::InitView v;
    v.name = t.name();
    v.dtype = t.data_type();
    v.dims.assign(t.dims().begin(), t.dims().end());
    int64_t n = 1;
    for (int64_t d : v.dims)
      n *= d;
    bool has = import::ExternalDataReader::isExternal(t) || n == 0 ||
               !t.raw_data().empty() || t.float_data_size() > 0 ||
               t.double_data_size() > 0 || t.int32_data_size() > 0;
    if (has) {
      if (import::ExternalDataReader::isExternal(t)) {
        llvm::Expected<import::TensorBytes> b =
            external.read(t, n * import::dtypeBytes(t.data_type()));
        if (!b)
          return fail("'" + inPath + "': " + llvm::toString(b.takeError()));
        scratch[i].assign(b->bytes.begin(), b->bytes.end());
        v.data = scratch[i];
      } else {
        llvm::Expected<llvm::ArrayRef<char>> b =
            import::inlineTensorBytes(t, "initializer", n, scratch[i]);
        if (!b)
          return fail("'" + inPath + "': " + llvm::toString(b.takeError()));
        v.data = *b;
      }
      v.hasData = true;
    }
    views.push_back(std::move(v));
  }
  llvm::StringSet<> dataInputs, floatInputs;
  bool hasIntegerInput = false;
  for (const onnx::ValueInfoProto &in : graph->input())
    if (!initIndex.count(in.name()) && in.type().has_tensor_type()) {
      int32_t dt = in.type().tensor_type().elem_type();
      hasIntegerInput |= dt != import::kUndefined &&
                         !import::isFloatDType(dt) && dt != import::kBool;
    }
  for (const onnx::ValueInfoProto &in : graph->input()) {
    if (initIndex.count(in.name()) || !in.type().has_tensor_type())
      continue;
    if (hasIntegerInput &&
        import::isFloatDType(in.type().tensor_type().elem_type()))
      floatInputs.insert(in.name()); // a parameter (export_params=False)
    else
      dataInputs.insert(in.name());
  }
  import::InitializerPlan plan =
      import::classifyInitializers(*graph, views, dataInputs);

  // New values: initializer name -> (dims, f32 bytes).
  std::map<std::string, std::pair<std::vector<int64_t>, std::string>> values;
  std::vector<std::string> added; // new initializers, in order
  llvm::StringSet<> handled;
  auto load = [&](const std::string &name, llvm::ArrayRef<int64_t> shape,
                  llvm::StringRef what) -> llvm::Expected<runtime::Tensor> {
    const TensorInfo *info = checkpoint.find(name);
    if (!info || info->role == "opt_state")
      return fail("'" + inPath + "': " + what + " '" + name +
                  "' is not in the checkpoint '" + checkpoint.directory() +
                  "'");
    if (llvm::ArrayRef<int64_t>(info->shape) != shape)
      return fail("'" + inPath + "': " + what + " '" + name + "' has shape " +
                  runtime::shapeToString(std::vector<int64_t>(shape)) +
                  " in the model, the checkpoint's has " +
                  runtime::shapeToString(info->shape));
    if (info->dtype != runtime::DType::F32)
      return fail("'" + inPath + "': " + what + " '" + name +
                  "': the checkpoint holds " + info->dtypeName +
                  " values, not F32");
    handled.insert(name);
    return checkpoint.loadGlobal(name);
  };
  auto requireFloat = [&](const onnx::TensorProto &t) -> llvm::Error {
    if (t.data_type() != onnx::TensorProto::FLOAT)
      return fail("'" + inPath + "': initializer '" + t.name() +
                  "' has data type " + std::to_string(t.data_type()) +
                  " (not FLOAT); the checkpoint holds F32 values");
    return llvm::Error::success();
  };
  std::set<int> removeNodes;
  for (const import::ParamPlan &p : plan.params) {
    const onnx::TensorProto &src = graph->initializer(initIndex.at(p.source));
    if (llvm::Error err = requireFloat(src))
      return std::move(err);
    llvm::Expected<runtime::Tensor> v = load(p.name, p.shape, "parameter");
    if (!v)
      return v.takeError();
    std::vector<int64_t> dims(src.dims().begin(), src.dims().end());
    std::string bytes = broadcastBytes(*v, dims);
    if (p.name != p.source || !initIndex.count(p.name)) {
      added.push_back(p.name);
      // An alias parameter: its Identity node goes, the initializer
      // takes its output's name.
      for (int node : plan.aliasNodes)
        if (graph->node(node).output_size() == 1 &&
            graph->node(node).output(0) == p.name)
          removeNodes.insert(node);
    }
    values[p.name] = {dims, std::move(bytes)};
  }
  for (const auto &tie : plan.transposedTies) {
    const onnx::TensorProto &t =
        graph->initializer(initIndex.at(tie.first().str()));
    if (llvm::Error err = requireFloat(t))
      return std::move(err);
    auto it = values.find(tie.second); // NOLINT
    if (it == values.end() || it->second.first.size() != 2)
      return fail("'" + inPath + "': initializer '" + tie.first() +
                  "' is tied to '" + tie.second +
                  "', which has no 2-D value in the checkpoint");
    std::vector<int64_t> dims = it->second.first;
    values[tie.first().str()] = {{dims[1], dims[0]},
                                 transposeBytes(it->second.second, dims)};
  }
  for (const auto &[input, name] : plan.renamedInputs)
    graph->mutable_node(input.first)->set_input(input.second, name);
  // Tensors the classification does not name (--trainable constants,
  // export_params=False inputs): by name.
  for (const TensorInfo &info : checkpoint.tensors()) {
    if (info.role == "opt_state" || handled.contains(info.name))
      continue;
    auto it = initIndex.find(info.name);
    if (it == initIndex.end() && !floatInputs.contains(info.name))
      return fail("checkpoint tensor '" + info.name + "' (" + info.role +
                  ") is not an initializer of '" + inPath + "'");
    std::vector<int64_t> dims = info.shape;
    if (it != initIndex.end()) {
      const onnx::TensorProto &t = graph->initializer(it->second);
      if (llvm::Error err = requireFloat(t))
        return std::move(err);
      dims.assign(t.dims().begin(), t.dims().end());
    } else {
      added.push_back(info.name);
    }
    llvm::Expected<runtime::Tensor> v = load(info.name, dims, "initializer");
    if (!v)
      return v.takeError();
    values[info.name] = {
        dims, std::string(static_cast<const char *>(v->raw()), v->bytes())};
  }

  for (onnx::TensorProto &t : *graph->mutable_initializer()) {
    auto it = values.find(t.name());
    if (it != values.end()) {
      if (data)
        data->put(t, it->second.second);
      else
        setInline(t, it->second.second);
      ++stats.replaced;
      continue;
    }
    ++stats.kept;
    if (!import::ExternalDataReader::isExternal(t))
      continue;
    const std::vector<char> &b = scratch[initIndex.at(t.name())];
    llvm::StringRef bytes(b.data(), b.size());
    if (b.empty()) { // not read above (not floating-point)
      int64_t n = 1;
      for (int64_t d : t.dims())
        n *= d;
      llvm::Expected<import::TensorBytes> r =
          external.read(t, n * import::dtypeBytes(t.data_type()));
      if (!r)
        return fail("'" + inPath + "': " + llvm::toString(r.takeError()));
      bytes = llvm::StringRef(r->bytes.data(), r->bytes.size());
      if (data)
        data->put(t, bytes);
      else
        setInline(t, bytes);
      continue;
    }
    if (data)
      data->put(t, bytes);
    else
      setInline(t, bytes);
  }
  for (const std::string &name : added) {
    onnx::TensorProto *t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : values[name].first)
      t->add_dims(d);
    if (data)
      data->put(*t, values[name].second);
    else
      setInline(*t, values[name].second);
    ++stats.replaced;
  }
  for (auto it = removeNodes.rbegin(); it != removeNodes.rend(); ++it)
    graph->mutable_node()->DeleteSubrange(*it, 1);

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

//===- SafeTensors.cpp - safetensors reader and writer --------------------===//

#include "runtime/checkpoint/SafeTensors.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstring>
#include <set>

using namespace tessera::runtime;
namespace json = llvm::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20; // same limit as safetensors

llvm::Error stError(llvm::StringRef file, const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "safetensors '%s': %s", file.str().c_str(),
                                 msg.c_str());
}

const char *stDType(DType d) {
  switch (d) {
  case DType::F32:
    return "F32";
  case DType::I64:
    return "I64";
  case DType::I1:
    return "BOOL";
  case DType::BF16:
    return "BF16";
  case DType::F16:
    return "F16";
  }
  return "?";
}

} // namespace

const Tensor *SafeTensorsFile::find(llvm::StringRef name) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return &tensors[i];
  return nullptr;
}

llvm::Error tessera::runtime::writeSafeTensors(
    llvm::raw_ostream &os, llvm::ArrayRef<NamedTensor> tensors,
    const std::map<std::string, std::string> &metadata,
    const RawByteTensorNames &rawBytes) {
  std::set<std::string> seen;
  for (const NamedTensor &nt : tensors) {
    if (nt.first.empty() || nt.first == "__metadata__" ||
        !seen.insert(nt.first).second)
      return stError("<output>",
                     "invalid or duplicate tensor name '" + nt.first + "'");
    if (!nt.second || nt.second->isNull())
      return stError("<output>", "tensor '" + nt.first + "' is null");
  }
  std::string header;
  {
    llvm::raw_string_ostream hs(header);
    json::OStream j(hs);
    j.objectBegin();
    if (!metadata.empty()) {
      j.attributeObject("__metadata__", [&] {
        for (const auto &kv : metadata)
          j.attribute(kv.first, kv.second);
      });
    }
    uint64_t offset = 0;
    for (const NamedTensor &nt : tensors) {
      const Tensor &t = *nt.second;
      j.attributeObject(nt.first, [&] {
        bool raw = t.dtype() == DType::I1 && rawBytes.count(nt.first);
        j.attribute("dtype", raw ? "U8" : stDType(t.dtype()));
        j.attributeArray("shape", [&] {
          for (int64_t d : t.shape())
            j.value(d);
        });
        j.attributeArray("data_offsets", [&] {
          j.value(offset);
          j.value(offset + t.bytes());
        });
      });
      offset += t.bytes();
    }
    j.objectEnd();
  }
  while (header.size() % 8 != 0)
    header.push_back(' ');
  char len[8];
  llvm::support::endian::write64le(len, header.size());
  os.write(len, 8);
  os << header;
  for (const NamedTensor &nt : tensors) {
    const Tensor &t = *nt.second;
    if (t.dtype() == DType::I1 && !rawBytes.count(nt.first)) {
      // Normalise booleans to 0/1.
      std::string b(t.bytes(), '\0');
      const uint8_t *p = t.data<uint8_t>();
      for (size_t i = 0; i < b.size(); ++i)
        b[i] = p[i] ? 1 : 0;
      os << b;
    } else {
      os.write(static_cast<const char *>(t.raw()), t.bytes());
    }
  }
  return llvm::Error::success();
}

llvm::Expected<std::string> tessera::runtime::serializeSafeTensors(
    llvm::ArrayRef<NamedTensor> tensors,
    const std::map<std::string, std::string> &metadata) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (auto e = writeSafeTensors(os, tensors, metadata))
    return std::move(e);
  os.flush();
  return out;
}

llvm::Error tessera::runtime::writeSafeTensors(
    llvm::StringRef path, llvm::ArrayRef<NamedTensor> tensors,
    const std::map<std::string, std::string> &metadata,
    const RawByteTensorNames &rawBytes) {
  std::string tmp = (path + ".tmp").str();
  std::error_code ec;
  {
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_None);
    if (ec)
      return stError(path,
                     "cannot open '" + tmp + "' for writing: " + ec.message());
    if (auto e = writeSafeTensors(os, tensors, metadata, rawBytes)) {
      os.close();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return stError(path, llvm::toString(std::move(e)));
    }
    os.close();
    if (os.has_error()) {
      std::string msg = os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return stError(path, "write failed: " + msg);
    }
  }
  if (std::error_code rec = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return stError(path, "cannot rename '" + tmp + "': " + rec.message());
  }
  return llvm::Error::success();
}

llvm::Expected<SafeTensorsFile>
tessera::runtime::parseSafeTensors(llvm::StringRef buffer,
                                   llvm::StringRef name) {
  if (buffer.size() < 8)
    return stError(name, "file of " + std::to_string(buffer.size()) +
                             " bytes is too short for the header size");
  uint64_t headerSize = llvm::support::endian::read64le(buffer.data());
  if (headerSize > kMaxHeaderBytes || headerSize > buffer.size() - 8)
    return stError(name, "header size " + std::to_string(headerSize) +
                             " exceeds the file (" +
                             std::to_string(buffer.size()) + " bytes)");
  llvm::StringRef headerText = buffer.substr(8, headerSize);
  llvm::StringRef data = buffer.substr(8 + headerSize);
  llvm::Expected<json::Value> parsed = json::parse(headerText);
  if (!parsed)
    return stError(name, "invalid JSON header: " +
                             llvm::toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  if (!root)
    return stError(name, "header is not a JSON object");

  SafeTensorsFile file;
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto &kv : *root) {
    std::string key = kv.first.str();
    if (key == "__metadata__") {
      const json::Object *md = kv.second.getAsObject();
      if (!md)
        return stError(name, "__metadata__ is not an object");
      for (const auto &m : *md) {
        auto s = m.second.getAsString();
        if (!s)
          return stError(name, "__metadata__ value '" + m.first.str() +
                                   "' is not a string");
        file.metadata[m.first.str()] = s->str();
      }
      continue;
    }
    auto bad = [&](const std::string &msg) {
      return stError(name, "tensor '" + key + "': " + msg);
    };
    const json::Object *obj = kv.second.getAsObject();
    if (!obj)
      return bad("entry is not an object");
    Entry e;
    e.name = key;
    auto dt = obj->getString("dtype");
    if (!dt)
      return bad("missing dtype");
    if (*dt == "F32")
      e.dtype = DType::F32;
    else if (*dt == "I64")
      e.dtype = DType::I64;
    else if (*dt == "BOOL" || *dt == "U8")
      e.dtype = DType::I1;
    else if (*dt == "BF16")
      e.dtype = DType::BF16;
    else if (*dt == "F16")
      e.dtype = DType::F16;
    else
      return bad("unsupported dtype '" + dt->str() + "'");
    const json::Array *shape = obj->getArray("shape");
    if (!shape)
      return bad("missing shape");
    uint64_t numel = 1;
    for (const json::Value &d : *shape) {
      auto v = d.getAsInteger();
      if (!v || *v < 0)
        return bad("shape entries must be non-negative integers");
      e.shape.push_back(*v);
      if (*v != 0 && numel > (uint64_t(1) << 58) / uint64_t(*v))
        return bad("shape is too large");
      numel *= uint64_t(*v);
    }
    const json::Array *offs = obj->getArray("data_offsets");
    if (!offs || offs->size() != 2)
      return bad("data_offsets must be [begin, end]");
    auto b = (*offs)[0].getAsUINT64(), en = (*offs)[1].getAsUINT64();
    if (!b || !en)
      return bad("data_offsets must be non-negative integers");
    e.begin = *b;
    e.end = *en;
    if (e.begin > e.end || e.end > data.size())
      return bad("data_offsets [" + std::to_string(e.begin) + ", " +
                 std::to_string(e.end) + "] are outside the data section of " +
                 std::to_string(data.size()) + " bytes");
    if (e.end - e.begin != numel * dtypeSize(e.dtype))
      return bad("data_offsets span " + std::to_string(e.end - e.begin) +
                 " bytes but dtype " + dt->str() + " and shape need " +
                 std::to_string(numel * dtypeSize(e.dtype)));
    entries.push_back(std::move(e));
  }
  std::stable_sort(
      entries.begin(), entries.end(), [](const Entry &a, const Entry &b) {
        return a.begin != b.begin ? a.begin < b.begin : a.name < b.name;
      });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end)
      return stError(name, "tensor '" + entries[i].name + "' overlaps '" +
                               entries[i - 1].name + "'");
  for (Entry &e : entries) {
    Tensor t = Tensor::empty(e.dtype, e.shape);
    if (t.bytes())
      std::memcpy(t.raw(), data.data() + e.begin, t.bytes());
    file.names.push_back(e.name);
    file.tensors.push_back(std::move(t));
  }
  return std::move(file);
}

llvm::Expected<SafeTensorsFile>
tessera::runtime::readSafeTensors(llvm::StringRef path) {
  auto bufOr = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
  if (!bufOr)
    return stError(path, "cannot read: " + bufOr.getError().message());
  return parseSafeTensors((*bufOr)->getBuffer(), path);
}

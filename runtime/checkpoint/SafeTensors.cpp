//===- SafeTensors.cpp - safetensors reader and writer --------------------===//

#include "runtime/checkpoint/SafeTensors.h"

#include "common/io/FileSafety.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/xxhash.h"

#include <cstdio>
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

/// `name`: section "SECTION" is corrupt (digest GOT, expected WANT).
llvm::Error corruptError(llvm::StringRef file, llvm::StringRef section,
                         llvm::StringRef got, llvm::StringRef want) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "%s: section \"%s\" is corrupt (digest %s, expected %s)",
      file.str().c_str(), section.str().c_str(), got.str().c_str(),
      want.str().c_str());
}

/// The bytes a tensor is stored as: booleans normalised to 0/1 unless raw.
std::string normalisedBool(const Tensor &t) {
  std::string b(t.bytes(), '\0');
  const uint8_t *p = t.data<uint8_t>();
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = p[i] ? 1 : 0;
  return b;
}

} // namespace

std::string tessera::runtime::sectionDigest(llvm::StringRef bytes) {
  char hex[24];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(llvm::xxh3_64bits(bytes)));
  return std::string("xxh3:") + hex;
}

const char *tessera::runtime::safetensorsDTypeName(DType d) {
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
  // The digests of every section (file comment of SafeTensors.h).
  std::map<std::string, std::string> withDigests;
  {
    json::Object metaDigests, tensorDigests;
    for (const auto &kv : metadata) {
      if (kv.first == kDigestsKey)
        continue;
      withDigests.insert(kv);
      metaDigests[kv.first] = sectionDigest(kv.second);
    }
    for (const NamedTensor &nt : tensors) {
      const Tensor &t = *nt.second;
      bool normalise = t.dtype() == DType::I1 && !rawBytes.count(nt.first);
      std::string bytes =
          normalise
              ? normalisedBool(t)
              : std::string(static_cast<const char *>(t.raw()), t.bytes());
      tensorDigests[nt.first] = sectionDigest(bytes);
    }
    std::string text;
    llvm::raw_string_ostream ts(text);
    ts << json::Value(json::Object{{"metadata", std::move(metaDigests)},
                                   {"tensors", std::move(tensorDigests)}});
    withDigests[kDigestsKey] = std::move(text);
  }
  std::string header;
  {
    llvm::raw_string_ostream hs(header);
    json::OStream j(hs);
    j.objectBegin();
    j.attributeObject("__metadata__", [&] {
      for (const auto &kv : withDigests)
        j.attribute(kv.first, kv.second);
    });
    uint64_t offset = 0;
    for (const NamedTensor &nt : tensors) {
      const Tensor &t = *nt.second;
      j.attributeObject(nt.first, [&] {
        bool raw = t.dtype() == DType::I1 && rawBytes.count(nt.first);
        j.attribute("dtype", raw ? "U8" : safetensorsDTypeName(t.dtype()));
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
      os << normalisedBool(t); // booleans as 0/1
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
  // Atomically (common/io/FileSafety.h): a temporary file beside `path`,
  // fsync'ed and renamed over it; never a device node or other non-regular
  // file.
  std::string inner;
  llvm::Error err = io::writeFileAtomically(
      "the file", path, [&](llvm::raw_ostream &os) -> llvm::Error {
        if (auto e = writeSafeTensors(os, tensors, metadata, rawBytes)) {
          inner = llvm::toString(std::move(e));
          return llvm::createStringError(inner);
        }
        return llvm::Error::success();
      });
  if (err) {
    std::string msg = llvm::toString(std::move(err));
    return stError(path, inner.empty() ? msg : inner);
  }
  return llvm::Error::success();
}

/// Whether `s` is "xxh3:" and 16 lower-case hex digits.
static bool isDigest(llvm::StringRef s) {
  if (!s.consume_front("xxh3:") || s.size() != 16)
    return false;
  return llvm::all_of(s, [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

/// Reads "tessera.digests" (if any) of a parsed header: checks every
/// metadata value against its digest, records every tensor's digest in its
/// entry, and removes the key from the metadata.
static llvm::Error checkDigests(llvm::StringRef name, SafeTensorsHeader &out) {
  auto it = out.metadata.find(kDigestsKey);
  if (it == out.metadata.end())
    return llvm::Error::success();
  std::string text = std::move(it->second);
  out.metadata.erase(it);
  out.hasDigests = true;
  auto bad = [&](const std::string &msg) {
    return stError(name, std::string("\"") + kDigestsKey + "\": " + msg);
  };
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return bad("not valid JSON");
  }
  const json::Object *root = parsed->getAsObject();
  const json::Object *meta = root ? root->getObject("metadata") : nullptr;
  const json::Object *tens = root ? root->getObject("tensors") : nullptr;
  if (!meta || !tens || root->size() != 2)
    return bad("expected {\"metadata\": {...}, \"tensors\": {...}}");
  for (const json::Object *o : {meta, tens})
    for (const auto &kv : *o) {
      std::optional<llvm::StringRef> d = kv.second.getAsString();
      if (!d || !isDigest(*d))
        return bad("the digest of \"" + kv.first.str() +
                   "\" is not \"xxh3:\" and 16 hex digits");
    }
  // Metadata: checked now, before anyone parses a value.
  for (const auto &[key, value] : out.metadata) {
    std::optional<llvm::StringRef> want = meta->getString(key);
    if (!want)
      return bad("no digest for the metadata \"" + key + "\"");
    std::string got = sectionDigest(value);
    if (got != *want)
      return corruptError(name, key, got, *want);
  }
  for (const auto &kv : *meta)
    if (!out.metadata.count(kv.first.str()))
      return bad("a digest for the metadata \"" + kv.first.str() +
                 "\", which the file lacks");
  // Tensors: checked when their bytes are read.
  for (SafeTensorsEntry &e : out.entries) {
    std::optional<llvm::StringRef> want = tens->getString(e.name);
    if (!want)
      return bad("no digest for the tensor \"" + e.name + "\"");
    e.digest = want->str();
  }
  if (tens->size() != out.entries.size())
    for (const auto &kv : *tens)
      if (!out.find(kv.first))
        return bad("a digest for the tensor \"" + kv.first.str() +
                   "\", which the file lacks");
  return llvm::Error::success();
}

/// Parses and validates the JSON header `headerText` of a file whose data
/// section has `dataSize` bytes. Entries come back in data-offset order.
static llvm::Error parseHeader(llvm::StringRef headerText, uint64_t dataSize,
                               llvm::StringRef name, SafeTensorsHeader &out) {
  llvm::Expected<json::Value> parsed = json::parse(headerText);
  if (!parsed)
    return stError(name, "invalid JSON header: " +
                             llvm::toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  if (!root)
    return stError(name, "header is not a JSON object");

  std::vector<SafeTensorsEntry> &entries = out.entries;
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
        out.metadata[m.first.str()] = s->str();
      }
      continue;
    }
    auto bad = [&](const std::string &msg) {
      return stError(name, "tensor '" + key + "': " + msg);
    };
    const json::Object *obj = kv.second.getAsObject();
    if (!obj)
      return bad("entry is not an object");
    SafeTensorsEntry e;
    e.name = key;
    auto dt = obj->getString("dtype");
    if (!dt)
      return bad("missing dtype");
    e.dtypeName = dt->str();
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
    if (e.begin > e.end || e.end > dataSize)
      return bad("data_offsets [" + std::to_string(e.begin) + ", " +
                 std::to_string(e.end) + "] are outside the data section of " +
                 std::to_string(dataSize) + " bytes");
    if (e.end - e.begin != numel * dtypeSize(e.dtype))
      return bad("data_offsets span " + std::to_string(e.end - e.begin) +
                 " bytes but dtype " + dt->str() + " and shape need " +
                 std::to_string(numel * dtypeSize(e.dtype)));
    entries.push_back(std::move(e));
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const SafeTensorsEntry &a, const SafeTensorsEntry &b) {
                     return a.begin != b.begin ? a.begin < b.begin
                                               : a.name < b.name;
                   });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end)
      return stError(name, "tensor '" + entries[i].name + "' overlaps '" +
                               entries[i - 1].name + "'");
  // The tensors cover the data section exactly, as in the safetensors
  // package (which refuses a file with gaps or trailing bytes): no byte is
  // left that no digest covers.
  uint64_t covered = 0;
  for (const SafeTensorsEntry &e : entries) {
    if (e.begin != covered)
      return stError(name, "tensor '" + e.name + "' starts at data offset " +
                               std::to_string(e.begin) + ", not at " +
                               std::to_string(covered) +
                               " (the tensors must cover the data section "
                               "without gaps)");
    covered = e.end;
  }
  if (covered != dataSize)
    return stError(name, "the tensors cover " + std::to_string(covered) +
                             " of the data section's " +
                             std::to_string(dataSize) + " bytes");
  return checkDigests(name, out);
}

/// Reads the 8-byte header size from the first bytes of a file of
/// `fileSize` bytes and checks it.
static llvm::Expected<uint64_t>
headerSizeOf(llvm::StringRef first8, uint64_t fileSize, llvm::StringRef name) {
  if (fileSize < 8 || first8.size() < 8)
    return stError(name, "file of " + std::to_string(fileSize) +
                             " bytes is too short for the header size");
  uint64_t headerSize = llvm::support::endian::read64le(first8.data());
  if (headerSize > kMaxHeaderBytes || headerSize > fileSize - 8)
    return stError(name, "header size " + std::to_string(headerSize) +
                             " exceeds the file (" + std::to_string(fileSize) +
                             " bytes)");
  return headerSize;
}

llvm::Expected<SafeTensorsFile>
tessera::runtime::parseSafeTensors(llvm::StringRef buffer,
                                   llvm::StringRef name) {
  llvm::Expected<uint64_t> headerSize =
      headerSizeOf(buffer, buffer.size(), name);
  if (!headerSize)
    return headerSize.takeError();
  llvm::StringRef headerText = buffer.substr(8, *headerSize);
  llvm::StringRef data = buffer.substr(8 + *headerSize);
  SafeTensorsHeader header;
  if (llvm::Error err = parseHeader(headerText, data.size(), name, header))
    return std::move(err);
  SafeTensorsFile file;
  file.metadata = std::move(header.metadata);
  file.hasDigests = header.hasDigests;
  // Every section is checked before any tensor is handed out.
  for (const SafeTensorsEntry &e : header.entries) {
    if (e.digest.empty())
      continue;
    std::string got = sectionDigest(data.substr(e.begin, e.end - e.begin));
    if (got != e.digest)
      return corruptError(name, e.name, got, e.digest);
  }
  for (SafeTensorsEntry &e : header.entries) {
    Tensor t = Tensor::empty(e.dtype, e.shape);
    if (t.bytes())
      std::memcpy(t.raw(), data.data() + e.begin, t.bytes());
    file.names.push_back(e.name);
    file.tensors.push_back(std::move(t));
  }
  return std::move(file);
}

const SafeTensorsEntry *SafeTensorsHeader::find(llvm::StringRef name) const {
  for (const SafeTensorsEntry &e : entries)
    if (e.name == name)
      return &e;
  return nullptr;
}

llvm::Expected<SafeTensorsHeader>
tessera::runtime::readSafeTensorsHeader(llvm::StringRef path) {
  uint64_t fileSize = 0;
  if (std::error_code ec = llvm::sys::fs::file_size(path, fileSize))
    return stError(path, "cannot read: " + ec.message());
  auto readSlice = [&](uint64_t size,
                       uint64_t offset) -> llvm::Expected<std::string> {
    auto bufOr = llvm::MemoryBuffer::getFileSlice(path, size, offset,
                                                  /*IsVolatile=*/false);
    if (!bufOr)
      return stError(path, "cannot read: " + bufOr.getError().message());
    if ((*bufOr)->getBufferSize() != size)
      return stError(path, "short read");
    return (*bufOr)->getBuffer().str();
  };
  llvm::Expected<std::string> first =
      readSlice(std::min<uint64_t>(8, fileSize), 0);
  if (!first)
    return first.takeError();
  llvm::Expected<uint64_t> headerSize = headerSizeOf(*first, fileSize, path);
  if (!headerSize)
    return headerSize.takeError();
  llvm::Expected<std::string> text = readSlice(*headerSize, 8);
  if (!text)
    return text.takeError();
  SafeTensorsHeader header;
  header.source = path.str();
  header.dataOffset = 8 + *headerSize;
  header.fileSize = fileSize;
  if (llvm::Error err =
          parseHeader(*text, fileSize - header.dataOffset, path, header))
    return std::move(err);
  return std::move(header);
}

llvm::Expected<Tensor>
tessera::runtime::readSafeTensor(const SafeTensorsHeader &header,
                                 llvm::StringRef name) {
  const SafeTensorsEntry *e = header.find(name);
  if (!e)
    return stError(header.source, "no tensor '" + name.str() + "'");
  Tensor t = Tensor::empty(e->dtype, e->shape);
  if (!t.bytes()) {
    if (!e->digest.empty() && sectionDigest("") != e->digest)
      return corruptError(header.source, name, sectionDigest(""), e->digest);
    return t;
  }
  llvm::Expected<llvm::sys::fs::file_t> fd =
      llvm::sys::fs::openNativeFileForRead(header.source);
  if (!fd)
    return stError(header.source, "tensor '" + name.str() + "': cannot read: " +
                                      llvm::toString(fd.takeError()));
  auto buf =
      llvm::MutableArrayRef<char>(static_cast<char *>(t.raw()), t.bytes());
  size_t done = 0;
  uint64_t offset = header.dataOffset + e->begin;
  while (done < buf.size()) {
    llvm::Expected<size_t> n = llvm::sys::fs::readNativeFileSlice(
        *fd, buf.drop_front(done), offset + done);
    if (!n || *n == 0) {
      std::string why = n ? std::string("unexpected end of file")
                          : llvm::toString(n.takeError());
      llvm::sys::fs::closeFile(*fd);
      return stError(header.source,
                     "tensor '" + name.str() + "': cannot read: " + why);
    }
    done += *n;
  }
  llvm::sys::fs::closeFile(*fd);
  if (!e->digest.empty()) {
    std::string got = sectionDigest(llvm::StringRef(buf.data(), buf.size()));
    if (got != e->digest)
      return corruptError(header.source, name, got, e->digest);
  }
  return t;
}

llvm::Expected<SafeTensorsFile>
tessera::runtime::readSafeTensors(llvm::StringRef path) {
  auto bufOr = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                           /*RequiresNullTerminator=*/false);
  if (!bufOr)
    return stError(path, "cannot read: " + bufOr.getError().message());
  return parseSafeTensors((*bufOr)->getBuffer(), path);
}

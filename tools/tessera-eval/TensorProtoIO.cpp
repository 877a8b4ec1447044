//===- TensorProtoIO.cpp - ONNX TensorProto files for tessera-eval --------===//
//
// libonnx/protobuf may throw: this file is built with exceptions and every
// public function catches them.
//
//===----------------------------------------------------------------------===//

#include "tools/tessera-eval/TensorProtoIO.h"

#include "common/io/FileSafety.h"
#include "compiler/import/ConstTensor.h"
#include "compiler/import/TensorProtoBytes.h"

#include "runtime/Tensor.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <exception>

namespace tessera::eval {
namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Expected<HostTensor> fromProto(const onnx::TensorProto &t,
                                     llvm::StringRef what) {
  HostTensor h;
  h.name = t.name();
  h.dtype = t.data_type();
  if (t.data_location() == onnx::TensorProto::EXTERNAL ||
      t.external_data_size() > 0)
    return fail(what + ": external data is not supported");
  if (import::dtypeBytes(h.dtype) == 0)
    return fail(what + ": data type " + onnxDTypeName(h.dtype) +
                " has no Tessera type (unsupported)");
  h.dims.assign(t.dims().begin(), t.dims().end());
  int64_t n = 1;
  for (int64_t d : h.dims) {
    if (d < 0 || (d > 0 && n > (int64_t(1) << 40) / d))
      return fail(what + ": invalid dims");
    n *= d;
  }
  // The importer's reading of TensorProto storage, so that both agree.
  std::vector<char> scratch;
  llvm::Expected<llvm::ArrayRef<char>> raw =
      import::inlineTensorBytes(t, what, n, scratch);
  if (!raw)
    return raw.takeError();
  import::ConstTensor c = import::decodeTensor(h.dtype, h.dims, *raw);
  h.f = std::move(c.f);
  h.i = std::move(c.i);
  return h;
}

llvm::Expected<std::string> readFile(llvm::StringRef path) {
  // Only regular files: a FIFO would block, /dev/zero never end
  // (common/io/FileSafety.h).
  if (llvm::sys::fs::exists(path)) {
    std::string kind = io::describeNonRegular(path);
    if (!kind.empty())
      return fail(path + ": cannot open: it is " + kind +
                  ", not a regular file");
  }
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return fail(path + ": cannot open: " + buffer.getError().message());
  return (*buffer)->getBuffer().str();
}

std::string valueKind(const onnx::TypeProto &type) {
  switch (type.value_case()) {
  case onnx::TypeProto::kTensorType:
    return "tensor";
  case onnx::TypeProto::kSequenceType:
    return "sequence";
  case onnx::TypeProto::kMapType:
    return "map";
  case onnx::TypeProto::kOptionalType:
    return "optional";
  case onnx::TypeProto::kSparseTensorType:
    return "sparse_tensor";
  default:
    return "unknown";
  }
}

} // namespace

std::string onnxDTypeName(int32_t dtype) {
  if (onnx::TensorProto::DataType_IsValid(dtype))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(dtype));
  return "DTYPE" + std::to_string(dtype);
}

bool isOnnxInteger(int32_t dtype) {
  switch (dtype) {
  case kInt8:
  case kInt16:
  case kInt32:
  case kInt64:
  case kUInt8:
  case kUInt16:
  case kUInt32:
  case kUInt64:
    return true;
  default:
    return false;
  }
}

bool HostTensor::isFloat() const {
  return dtype == kFloat || dtype == kDouble || dtype == kFloat16 ||
         dtype == kBFloat16;
}

int64_t HostTensor::numel() const {
  return isFloat() ? static_cast<int64_t>(f.size())
                   : static_cast<int64_t>(i.size());
}

void adoptBFloat16Bits(HostTensor &t, int32_t declared) {
  if (declared != kBFloat16 || t.dtype != kUInt16)
    return;
  t.dtype = kBFloat16;
  t.f.clear();
  for (int64_t bits : t.i)
    t.f.push_back(
        import::halfBitsToDouble(static_cast<uint16_t>(bits), kBFloat16));
  t.i.clear();
}

llvm::Expected<HostTensor> readTensorProto(llvm::StringRef path) {
  llvm::Expected<std::string> bytes = readFile(path);
  if (!bytes)
    return bytes.takeError();
  try {
    onnx::TensorProto t;
    if (!t.ParseFromString(*bytes))
      return fail(path + ": cannot parse as an ONNX TensorProto");
    return fromProto(t, path);
  } catch (const std::exception &e) {
    return fail(path + ": " + e.what());
  }
}

llvm::Error writeTensorProto(const HostTensor &t, llvm::StringRef path) {
  try {
    onnx::TensorProto p;
    p.set_name(t.name);
    p.set_data_type(t.dtype);
    for (int64_t d : t.dims)
      p.add_dims(d);
    std::string raw;
    auto append = [&](const void *v, size_t n) {
      raw.append(static_cast<const char *>(v), n);
    };
    switch (t.dtype) {
    case kFloat:
      for (double v : t.f) {
        float x = static_cast<float>(v);
        append(&x, sizeof(x));
      }
      break;
    case kFloat16:
      for (double v : t.f) {
        uint16_t x = runtime::toFloat16(static_cast<float>(v)).bits;
        append(&x, sizeof(x));
      }
      break;
    case kBFloat16:
      for (double v : t.f) {
        uint16_t x = runtime::toBFloat16(static_cast<float>(v)).bits;
        append(&x, sizeof(x));
      }
      break;
    case kInt64:
      for (int64_t v : t.i)
        append(&v, sizeof(v));
      break;
    case kBool:
      for (int64_t v : t.i) {
        uint8_t x = v != 0;
        append(&x, sizeof(x));
      }
      break;
    default:
      return fail(path + ": cannot write data type " + onnxDTypeName(t.dtype));
    }
    p.set_raw_data(raw);
    std::string bytes;
    if (!p.SerializeToString(&bytes))
      return fail(path + ": cannot serialize the TensorProto");
    // Atomically, never over a non-regular file (common/io/FileSafety.h).
    return io::writeFileAtomically("--write-outputs", path,
                                   [&](llvm::raw_ostream &os) {
                                     os << bytes;
                                     return llvm::Error::success();
                                   });
  } catch (const std::exception &e) {
    return fail(path + ": " + e.what());
  }
}

llvm::Expected<PreparedModel> readModel(llvm::StringRef path) {
  llvm::Expected<std::string> bytes = readFile(path);
  if (!bytes)
    return bytes.takeError();
  try {
    onnx::ModelProto model;
    if (!model.ParseFromString(*bytes))
      return fail(path + ": cannot parse as an ONNX ModelProto");
    PreparedModel out;
    out.bytes = std::move(*bytes);
    llvm::StringSet<> inits;
    for (const auto &t : model.graph().initializer())
      inits.insert(t.name());
    for (const auto &in : model.graph().input()) {
      if (inits.contains(in.name()))
        continue;
      GraphInput g;
      g.name = in.name();
      g.kind = valueKind(in.type());
      if (in.type().has_tensor_type())
        g.dtype = in.type().tensor_type().elem_type();
      out.inputs.push_back(std::move(g));
    }
    for (const auto &o : model.graph().output()) {
      GraphInput g;
      g.name = o.name();
      g.kind = valueKind(o.type());
      if (o.type().has_tensor_type())
        g.dtype = o.type().tensor_type().elem_type();
      out.outputs.push_back(std::move(g));
    }
    return out;
  } catch (const std::exception &e) {
    return fail(path + ": " + e.what());
  }
}

llvm::Error bindInputs(PreparedModel &model, llvm::ArrayRef<HostTensor> values,
                       llvm::ArrayRef<bool> asConstant) {
  if (values.size() != model.inputs.size() ||
      asConstant.size() != model.inputs.size())
    return fail(llvm::formatv("the model has {0} graph inputs but {1} values "
                              "were given",
                              model.inputs.size(), values.size()));
  try {
    onnx::ModelProto m;
    if (!m.ParseFromString(model.bytes))
      return fail("cannot parse the model again");
    onnx::GraphProto *g = m.mutable_graph();
    llvm::StringMap<size_t> index;
    for (size_t k = 0; k < model.inputs.size(); ++k)
      index[model.inputs[k].name] = k;

    // Concrete dims for every input, then the constants.
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
    std::vector<onnx::NodeProto> constants;
    for (const onnx::ValueInfoProto &in : g->input()) {
      auto it = index.find(in.name());
      if (it == index.end()) { // has an initializer
        *kept.Add() = in;
        continue;
      }
      const HostTensor &v = values[it->second];
      onnx::ValueInfoProto info = in;
      if (info.type().has_tensor_type()) {
        auto *tt = info.mutable_type()->mutable_tensor_type();
        if (tt->elem_type() != v.dtype)
          return fail("graph input '" + in.name() + "' is " +
                      onnxDTypeName(tt->elem_type()) + " but its value is " +
                      onnxDTypeName(v.dtype));
        bool hadShape = tt->has_shape();
        auto *shape = tt->mutable_shape();
        auto declared = [&] {
          std::string s = "[";
          for (int d = 0; d < shape->dim_size(); ++d)
            s += (d ? ", " : "") +
                 (shape->dim(d).has_dim_value()
                      ? std::to_string(shape->dim(d).dim_value())
                      : std::string("?"));
          return s + "]";
        };
        auto mismatch = [&] {
          return fail("graph input '" + in.name() + "' is declared " +
                      declared() + " but its value is " +
                      runtime::shapeToString(v.dims) +
                      " (the data set does not fit the model)");
        };
        if (hadShape && shape->dim_size() != static_cast<int>(v.dims.size()))
          return mismatch();
        if (!hadShape) {
          shape->clear_dim();
          for (int64_t d : v.dims)
            shape->add_dim()->set_dim_value(d);
        }
        for (int d = 0; d < shape->dim_size(); ++d) {
          auto *dim = shape->mutable_dim(d);
          if (dim->has_dim_value() && dim->dim_value() != v.dims[d])
            return mismatch();
          dim->set_dim_value(v.dims[d]);
        }
      }
      if (!asConstant[it->second]) {
        *kept.Add() = std::move(info);
        continue;
      }
      onnx::NodeProto node;
      node.set_op_type("Constant");
      node.set_name("tessera_eval_bound_" + in.name());
      node.add_output(in.name());
      onnx::AttributeProto *attr = node.add_attribute();
      attr->set_name("value");
      attr->set_type(onnx::AttributeProto::TENSOR);
      onnx::TensorProto *t = attr->mutable_t();
      t->set_name(in.name());
      t->set_data_type(v.dtype);
      for (int64_t d : v.dims)
        t->add_dims(d);
      std::string raw;
      int64_t bytes = import::dtypeBytes(v.dtype);
      raw.resize(static_cast<size_t>(v.numel() * bytes));
      for (int64_t k = 0; k < v.numel(); ++k) {
        char *p = raw.data() + k * bytes;
        switch (v.dtype) {
        case kFloat: {
          float x = static_cast<float>(v.f[k]);
          std::memcpy(p, &x, 4);
          break;
        }
        case kDouble:
          std::memcpy(p, &v.f[k], 8);
          break;
        case kFloat16: {
          uint16_t x = runtime::toFloat16(static_cast<float>(v.f[k])).bits;
          std::memcpy(p, &x, 2);
          break;
        }
        case kBFloat16: {
          uint16_t x = runtime::toBFloat16(static_cast<float>(v.f[k])).bits;
          std::memcpy(p, &x, 2);
          break;
        }
        default: // little-endian: the low `bytes` bytes of the int64
          std::memcpy(p, &v.i[k], static_cast<size_t>(bytes));
          break;
        }
      }
      t->set_raw_data(raw);
      constants.push_back(std::move(node));
    }
    g->mutable_input()->Swap(&kept);
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (onnx::NodeProto &c : constants)
      *nodes.Add() = std::move(c);
    for (const onnx::NodeProto &n : g->node())
      *nodes.Add() = n;
    g->mutable_node()->Swap(&nodes);
    if (!m.SerializeToString(&model.bytes))
      return fail("cannot serialize the rewritten model");
    std::vector<GraphInput> left;
    for (size_t k = 0; k < model.inputs.size(); ++k)
      if (!asConstant[k])
        left.push_back(model.inputs[k]);
    model.inputs = std::move(left);
    return llvm::Error::success();
  } catch (const std::exception &e) {
    return fail(std::string("binding inputs: ") + e.what());
  }
}

} // namespace tessera::eval

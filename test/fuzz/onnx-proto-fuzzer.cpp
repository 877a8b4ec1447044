//===- onnx-proto-fuzzer.cpp - ONNX importer, structure-aware -------------===//
//
// libFuzzer target: like onnx-import-fuzzer, but the mutator works on the
// parsed onnx::ModelProto (LLVMFuzzerCustomMutator), so that most mutants
// are well-formed protobuf and reach the importer's conversions instead of
// stopping in the protobuf parser. Debian has no libprotobuf-mutator; this
// is a small one on protobuf reflection. Each mutation picks one of:
//   - a scalar anywhere in the model (reflection: ints get boundary values
//     or small steps, floats special values, strings another name of the
//     graph, a supported op type or a few bytes changed, enums and bools
//     another value);
//   - a dimension of a graph input, output or value_info, or an
//     initializer's dims;
//   - an attribute's value (i, f, ints element, s);
//   - a node's op type (another op the importer supports);
//   - dropping or duplicating a node, a node input, a graph input or an
//     initializer; swapping two nodes;
//   - renaming a value use to another value's name;
//   - the default-domain opset version.
// The mutant is serialized back; when the input does not parse as a
// ModelProto, or the mutant does not fit, libFuzzer's byte mutator is used.
//
//===----------------------------------------------------------------------===//

#include "test/fuzz/OnnxImportFuzzer.h"

#include "compiler/import/OnnxImporter.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using Rng = std::minstd_rand;

size_t pick(Rng &rng, size_t n) {
  return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

int64_t interestingInt(Rng &rng, int64_t old) {
  static const int64_t values[] = {0,
                                   1,
                                   -1,
                                   2,
                                   3,
                                   7,
                                   64,
                                   -2,
                                   255,
                                   65536,
                                   std::numeric_limits<int32_t>::max(),
                                   std::numeric_limits<int32_t>::min(),
                                   std::numeric_limits<int64_t>::max(),
                                   std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max() - 1,
                                   int64_t(1) << 40};
  switch (pick(rng, 3)) {
  case 0:
    return values[pick(rng, std::size(values))];
  case 1:
    return static_cast<int64_t>(static_cast<uint64_t>(old) + 1);
  default:
    return static_cast<int64_t>(static_cast<uint64_t>(old) - 1);
  }
}

double interestingFloat(Rng &rng, double old) {
  static const double values[] = {0.0,
                                  -0.0,
                                  1.0,
                                  -1.0,
                                  0.5,
                                  1e-30,
                                  1e30,
                                  std::numeric_limits<double>::infinity(),
                                  -std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN(),
                                  std::numeric_limits<float>::max(),
                                  std::numeric_limits<float>::denorm_min()};
  if (pick(rng, 2))
    return values[pick(rng, std::size(values))];
  return old * 2;
}

/// Names of values in the graph (inputs, outputs, initializers, node
/// outputs) and the supported op types: replacement strings.
struct Names {
  std::vector<std::string> values, ops;
};

Names collectNames(const onnx::ModelProto &model) {
  Names names;
  const onnx::GraphProto &g = model.graph();
  for (const auto &v : g.input())
    names.values.push_back(v.name());
  for (const auto &v : g.output())
    names.values.push_back(v.name());
  for (const auto &t : g.initializer())
    names.values.push_back(t.name());
  for (const auto &n : g.node())
    for (const auto &o : n.output())
      names.values.push_back(o);
  names.values.push_back("");
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v;
    for (const auto &op : tessera::import::supportedOps())
      v.push_back(op.opType);
    v.push_back("NoSuchOp");
    return v;
  }();
  names.ops = ops;
  return names;
}

/// One scalar slot of a message: a field (and index, for repeated fields).
struct Slot {
  Message *msg;
  const FieldDescriptor *field;
  int index; // -1: singular
};

void collectSlots(
    Message &msg, std::vector<Slot> &slots,
    std::vector<std::pair<Message *, const FieldDescriptor *>> &repeatedFields,
    int depth) {
  if (depth > 8)
    return;
  const Reflection *refl = msg.GetReflection();
  std::vector<const FieldDescriptor *> fields;
  refl->ListFields(msg, &fields);
  for (const FieldDescriptor *f : fields) {
    if (f->is_repeated()) {
      repeatedFields.push_back({&msg, f});
      int n = refl->FieldSize(msg, f);
      for (int i = 0; i < n; ++i) {
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)
          collectSlots(*refl->MutableRepeatedMessage(&msg, f, i), slots,
                       repeatedFields, depth + 1);
        else
          slots.push_back({&msg, f, i});
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      collectSlots(*refl->MutableMessage(&msg, f), slots, repeatedFields,
                   depth + 1);
    } else {
      slots.push_back({&msg, f, -1});
    }
  }
}

std::string mutateString(Rng &rng, std::string s, const Names &names,
                         const FieldDescriptor *f) {
  if (f->name() == "op_type" || (pick(rng, 4) == 0 && !names.ops.empty()))
    return names.ops[pick(rng, names.ops.size())];
  switch (pick(rng, 4)) {
  case 0:
    return names.values[pick(rng, names.values.size())];
  case 1:
    if (!s.empty())
      s[pick(rng, s.size())] ^= static_cast<char>(1 + pick(rng, 255));
    return s;
  case 2:
    if (!s.empty())
      s.resize(pick(rng, s.size()));
    return s;
  default:
    return s + s;
  }
}

void mutateSlot(Rng &rng, const Slot &slot, const Names &names) {
  Message &m = *slot.msg;
  const Reflection *r = m.GetReflection();
  const FieldDescriptor *f = slot.field;
  bool rep = slot.index >= 0;
  int i = slot.index;
  switch (f->cpp_type()) {
  case FieldDescriptor::CPPTYPE_INT32: {
    int64_t v = rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f);
    auto nv = static_cast<int32_t>(interestingInt(rng, v));
    rep ? r->SetRepeatedInt32(&m, f, i, nv) : r->SetInt32(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_INT64: {
    int64_t v = rep ? r->GetRepeatedInt64(m, f, i) : r->GetInt64(m, f);
    int64_t nv = interestingInt(rng, v);
    rep ? r->SetRepeatedInt64(&m, f, i, nv) : r->SetInt64(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_UINT32: {
    uint64_t v = rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f);
    auto nv = static_cast<uint32_t>(interestingInt(rng, v));
    rep ? r->SetRepeatedUInt32(&m, f, i, nv) : r->SetUInt32(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_UINT64: {
    uint64_t v = rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f);
    auto nv = static_cast<uint64_t>(interestingInt(rng, v));
    rep ? r->SetRepeatedUInt64(&m, f, i, nv) : r->SetUInt64(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_FLOAT: {
    double v = rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f);
    auto nv = static_cast<float>(interestingFloat(rng, v));
    rep ? r->SetRepeatedFloat(&m, f, i, nv) : r->SetFloat(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_DOUBLE: {
    double v = rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f);
    double nv = interestingFloat(rng, v);
    rep ? r->SetRepeatedDouble(&m, f, i, nv) : r->SetDouble(&m, f, nv);
    break;
  }
  case FieldDescriptor::CPPTYPE_BOOL: {
    bool v = rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f);
    rep ? r->SetRepeatedBool(&m, f, i, !v) : r->SetBool(&m, f, !v);
    break;
  }
  case FieldDescriptor::CPPTYPE_ENUM: {
    const auto *e = f->enum_type();
    const auto *v = e->value(static_cast<int>(pick(rng, e->value_count())));
    rep ? r->SetRepeatedEnum(&m, f, i, v) : r->SetEnum(&m, f, v);
    break;
  }
  case FieldDescriptor::CPPTYPE_STRING: {
    std::string s = rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
    s = mutateString(rng, std::move(s), names, f);
    rep ? r->SetRepeatedString(&m, f, i, s) : r->SetString(&m, f, s);
    break;
  }
  case FieldDescriptor::CPPTYPE_MESSAGE:
    break;
  }
}

/// Drops, duplicates or swaps elements of a repeated field.
void mutateRepeated(Rng &rng, Message &m, const FieldDescriptor *f) {
  const Reflection *r = m.GetReflection();
  int n = r->FieldSize(m, f);
  if (n == 0)
    return;
  switch (pick(rng, 3)) {
  case 0: // drop element k (move it last, remove last)
    r->SwapElements(&m, f, static_cast<int>(pick(rng, n)), n - 1);
    r->RemoveLast(&m, f);
    break;
  case 1: { // duplicate element k (appended)
    int k = static_cast<int>(pick(rng, n));
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      r->AddMessage(&m, f)->CopyFrom(r->GetRepeatedMessage(m, f, k));
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      r->AddString(&m, f, r->GetRepeatedString(m, f, k));
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
      r->AddInt64(&m, f, r->GetRepeatedInt64(m, f, k));
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
      r->AddFloat(&m, f, r->GetRepeatedFloat(m, f, k));
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_INT32) {
      r->AddInt32(&m, f, r->GetRepeatedInt32(m, f, k));
    }
    break;
  }
  default: // swap two elements (e.g. reorder nodes: a use before its def)
    r->SwapElements(&m, f, static_cast<int>(pick(rng, n)),
                    static_cast<int>(pick(rng, n)));
    break;
  }
}

/// Mutations that know ONNX: opset, dims, attributes, op types.
bool mutateOnnx(Rng &rng, onnx::ModelProto &model, const Names &names) {
  onnx::GraphProto *g = model.mutable_graph();
  switch (pick(rng, 4)) {
  case 0: { // the default-domain opset
    for (auto &imp : *model.mutable_opset_import())
      if (imp.domain().empty() || imp.domain() == "ai.onnx") {
        static const int64_t opsets[] = {1,  6,  7,  9,  11, 13, 14,
                                         17, 18, 20, 21, 28, 29, 99};
        imp.set_version(opsets[pick(rng, std::size(opsets))]);
        return true;
      }
    return false;
  }
  case 1: { // a dim of a graph input/output/value_info
    std::vector<onnx::TensorShapeProto_Dimension *> dims;
    for (auto *list :
         {g->mutable_input(), g->mutable_output(), g->mutable_value_info()})
      for (auto &v : *list)
        if (v.type().has_tensor_type())
          for (auto &d : *v.mutable_type()
                              ->mutable_tensor_type()
                              ->mutable_shape()
                              ->mutable_dim())
            dims.push_back(&d);
    if (dims.empty())
      return false;
    auto *d = dims[pick(rng, dims.size())];
    if (pick(rng, 4) == 0)
      d->set_dim_param("N");
    else
      d->set_dim_value(interestingInt(rng, d->dim_value()));
    return true;
  }
  case 2: { // a node's op type
    if (g->node_size() == 0)
      return false;
    g->mutable_node(static_cast<int>(pick(rng, g->node_size())))
        ->set_op_type(names.ops[pick(rng, names.ops.size())]);
    return true;
  }
  default: { // a node input renamed to another value
    if (g->node_size() == 0)
      return false;
    auto *n = g->mutable_node(static_cast<int>(pick(rng, g->node_size())));
    if (n->input_size() == 0)
      return false;
    n->set_input(static_cast<int>(pick(rng, n->input_size())),
                 names.values[pick(rng, names.values.size())]);
    return true;
  }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tessera::fuzz::importOnnxInput(data, size);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  Rng rng(seed);
  onnx::ModelProto model;
  if (size > tessera::fuzz::kMaxOnnxInput || pick(rng, 8) == 0 ||
      !model.ParseFromArray(data, static_cast<int>(size)))
    return LLVMFuzzerMutate(data, size, maxSize);
  Names names = collectNames(model);
  int rounds = 1 + static_cast<int>(pick(rng, 3));
  for (int k = 0; k < rounds; ++k) {
    if (pick(rng, 3) == 0 && mutateOnnx(rng, model, names))
      continue;
    std::vector<Slot> slots;
    std::vector<std::pair<Message *, const FieldDescriptor *>> repeated;
    collectSlots(model, slots, repeated, 0);
    if (!repeated.empty() && pick(rng, 3) == 0) {
      auto [msg, field] = repeated[pick(rng, repeated.size())];
      mutateRepeated(rng, *msg, field);
    } else if (!slots.empty()) {
      mutateSlot(rng, slots[pick(rng, slots.size())], names);
    }
  }
  std::string out;
  if (!model.SerializeToString(&out) || out.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

//===- tessera-ckpt.cpp - inspect, convert and export checkpoints ---------===//
//
// tessera-ckpt works on the distributed checkpoints that tessera-run --save
// writes (runtime/checkpoint/DistCheckpoint.h, docs/Checkpoint.md). DIR is a
// checkpoint root (its `latest` is followed) or one iter_NNNNNNN folder.
//
//   tessera-ckpt inspect DIR
//       Step, consumed samples, loss scale, the plan, then one line per
//       tensor: name, role, dtype, global shape, bytes, shard count; and the
//       totals. Reads the index and every file (checks every shard against
//       the index and against its section digest, docs/Checkpoint.md).
//   tessera-ckpt convert DIR --to model.safetensors [--with-optim]
//       One safetensors file with the ONNX parameter names and global
//       shapes (the Hugging Face layout): params and frozen tensors, in the
//       saving plan's order, metadata {"format": "pt", "tessera.steps":
//       step}: the file tessera-run --save-weights writes for the same
//       weights. --with-optim adds the optimizer state.
//   tessera-ckpt export DIR --onnx IN.onnx -o OUT.onnx [--external-data]
//       IN with the checkpoint's weights as initializers (OnnxExport.h), so
//       OUT runs in onnxruntime with the trained weights.
//
// Every error is one line, "tessera-ckpt: ..." naming the file and tensor,
// and exit status 1.
//
//===----------------------------------------------------------------------===//

#include "common/io/CommandLine.h"
#include "common/io/FileSafety.h"
#include "runtime/checkpoint/DistCheckpoint.h"
#include "runtime/checkpoint/SafeTensors.h"
#include "tools/tessera-ckpt/OnnxExport.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <set>

using namespace tessera;
using namespace tessera::runtime;
using namespace tessera::runtime::ckpt;
namespace cl = llvm::cl;

static cl::SubCommand inspectCmd("inspect",
                                 "Print a checkpoint's step, plan, tensors "
                                 "(shape, dtype, role, bytes, shards) and "
                                 "totals, after checking every shard's "
                                 "digest");
static cl::SubCommand
    convertCmd("convert",
               "Write one safetensors file with the global weights (ONNX "
               "names; the Hugging Face layout)");
static cl::SubCommand
    exportCmd("export", "Write an ONNX model with the checkpoint's weights as "
                        "initializers");

static cl::opt<std::string> inspectDir(cl::Positional, cl::Required,
                                       cl::desc("<checkpoint DIR>"),
                                       cl::sub(inspectCmd));
static cl::opt<std::string> convertDir(cl::Positional, cl::Required,
                                       cl::desc("<checkpoint DIR>"),
                                       cl::sub(convertCmd));
static cl::opt<std::string> exportDir(cl::Positional, cl::Required,
                                      cl::desc("<checkpoint DIR>"),
                                      cl::sub(exportCmd));
static cl::opt<std::string>
    convertTo("to", cl::Required,
              cl::desc("Output safetensors file (written to a temporary file "
                       "beside it, then renamed; an error when it is an "
                       "existing non-regular file)"),
              cl::value_desc("model.safetensors"), cl::sub(convertCmd));
static cl::opt<bool> withOptim(
    "with-optim",
    cl::desc("Also write the optimizer state (role opt_state: "
             "\"<param>.exp_avg\", \"<param>.exp_avg_sq\", \"step\", ...)"),
    cl::init(false), cl::sub(convertCmd));
static cl::opt<std::string> onnxIn("onnx", cl::Required,
                                   cl::desc("The model whose initializers "
                                            "the weights replace (never "
                                            "overwritten)"),
                                   cl::value_desc("IN.onnx"),
                                   cl::sub(exportCmd));
static cl::opt<std::string> onnxOut("o", cl::Required,
                                    cl::desc("Output ONNX model"),
                                    cl::value_desc("OUT.onnx"),
                                    cl::sub(exportCmd));
static cl::opt<bool> externalData(
    "external-data",
    cl::desc("Write the weights to OUT.onnx.data (ONNX external data) even "
             "when IN keeps them inline (needed past protobuf's 2 GiB)"),
    cl::init(false), cl::sub(exportCmd));

static int failWith(llvm::Error err) {
  llvm::errs() << "tessera-ckpt: " << llvm::toString(std::move(err)) << "\n";
  return 1;
}

static std::string humanBytes(int64_t b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? llvm::formatv("{0} B", b).str()
                : llvm::formatv("{0:F1} {1}", v, units[u]).str();
}

static llvm::Expected<std::unique_ptr<CheckpointReader>>
openChecked(llvm::StringRef dir) {
  auto reader = CheckpointReader::open(dir);
  if (!reader)
    return reader.takeError();
  if (llvm::Error err = (*reader)->verifyFiles())
    return std::move(err);
  return reader;
}

static int inspect() {
  auto reader = openChecked(inspectDir);
  if (!reader)
    return failWith(reader.takeError());
  // Every shard's bytes against its digest (convert and export check the
  // shards they read).
  if (llvm::Error err = (*reader)->verifyData())
    return failWith(std::move(err));
  const CheckpointReader &r = **reader;
  llvm::raw_ostream &os = llvm::outs();
  os << "checkpoint: " << r.directory() << "\n";
  os << "step: " << r.step() << "\n";
  os << "consumed_samples: " << r.consumedSamples() << "\n";
  if (std::optional<double> scale = r.lossScale())
    os << "loss_scale: " << *scale << "\n";
  if (const llvm::json::Object *plan = r.plan())
    os << "plan: " << llvm::json::Value(llvm::json::Object(*plan)) << "\n";
  std::map<std::string, std::pair<int64_t, int64_t>> byRole; // count, bytes
  std::set<std::string> files;
  size_t nameWidth = 4;
  for (const TensorInfo &t : r.tensors())
    nameWidth = std::max(nameWidth, t.name.size());
  os << "tensors: " << r.tensors().size() << "\n";
  os << llvm::formatv(
      "  {0} {1} {2} {3} {4} {5}\n", llvm::left_justify("name", nameWidth),
      llvm::left_justify("role", 9), llvm::left_justify("dtype", 5),
      llvm::left_justify("shape", 16), llvm::right_justify("bytes", 12),
      "shards");
  int64_t total = 0;
  for (const TensorInfo *t : r.tensorsInOrder()) {
    os << llvm::formatv(
        "  {0} {1} {2} {3} {4} {5}\n", llvm::left_justify(t->name, nameWidth),
        llvm::left_justify(t->role, 9), llvm::left_justify(t->dtypeName, 5),
        llvm::left_justify(shapeToString(t->shape), 16),
        llvm::right_justify(std::to_string(t->bytes()), 12), t->shards.size());
    auto &[count, bytes] = byRole[t->role];
    ++count;
    bytes += t->bytes();
    total += t->bytes();
    for (const ShardInfo &s : t->shards)
      files.insert(s.file);
  }
  for (const auto &[role, cb] : byRole)
    os << llvm::formatv("{0}: {1} tensors, {2} bytes ({3})\n", role, cb.first,
                        cb.second, humanBytes(cb.second));
  os << llvm::formatv("total: {0} bytes ({1}) in {2} files\n", total,
                      humanBytes(total), files.size());
  return 0;
}

static int convert() {
  // Never an input, only a regular file (common/io/FileSafety.h).
  if (llvm::Error err = tessera::io::checkOutputs(
          {{"the checkpoint", convertDir, /*directory=*/true}},
          {{"--to", convertTo}}))
    return failWith(std::move(err));
  auto reader = openChecked(convertDir);
  if (!reader)
    return failWith(reader.takeError());
  const CheckpointReader &r = **reader;
  std::vector<std::pair<std::string, Tensor>> values;
  for (const TensorInfo *t : r.tensorsInOrder()) {
    if (t->role == "opt_state" && !withOptim)
      continue;
    llvm::Expected<Tensor> v = r.loadGlobal(t->name);
    if (!v)
      return failWith(v.takeError());
    values.emplace_back(t->name, std::move(*v));
  }
  std::vector<NamedTensor> named;
  for (auto &[name, t] : values)
    named.emplace_back(name, &t);
  // The metadata tessera-run --save-weights writes.
  std::map<std::string, std::string> meta{
      {"format", "pt"}, {"tessera.steps", std::to_string(r.step())}};
  if (llvm::Error err =
          writeSafeTensors(llvm::StringRef(convertTo), named, meta))
    return failWith(std::move(err));
  llvm::outs() << llvm::formatv("wrote {0}: {1} tensors (step {2})\n",
                                convertTo, named.size(), r.step());
  return 0;
}

static int exportModel() {
  // The model must be a regular file (a FIFO would block, /dev/zero never
  // end); -o never an input, only a regular file (common/io/FileSafety.h).
  if (llvm::sys::fs::exists(onnxIn))
    if (llvm::Error err = tessera::io::checkInputFile("--onnx", onnxIn))
      return failWith(std::move(err));
  if (llvm::Error err = tessera::io::checkOutputs(
          {{"--onnx", onnxIn},
           {"the checkpoint", exportDir, /*directory=*/true}},
          {{"-o", onnxOut}}))
    return failWith(std::move(err));
  auto reader = openChecked(exportDir);
  if (!reader)
    return failWith(reader.takeError());
  ckpttool::ExportOptions options;
  options.externalData = externalData;
  llvm::Expected<ckpttool::ExportStats> stats =
      ckpttool::exportOnnx(**reader, onnxIn, onnxOut, options);
  if (!stats)
    return failWith(stats.takeError());
  llvm::outs() << llvm::formatv(
      "wrote {0}: {1} initializers from step {2}, {3} kept{4}\n", onnxOut,
      stats->replaced, (*reader)->step(), stats->kept,
      stats->external ? " (external data: " + stats->dataFile + ")"
                      : std::string());
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  tessera::io::parseCommandLine(
      argc, argv,
      "tessera-ckpt: inspect, convert and export Tessera checkpoints\n\n"
      "  tessera-ckpt inspect DIR\n"
      "  tessera-ckpt convert DIR --to model.safetensors [--with-optim]\n"
      "  tessera-ckpt export DIR --onnx IN.onnx -o OUT.onnx "
      "[--external-data]\n\n"
      "DIR: a checkpoint root written by tessera-run --save (its 'latest' "
      "is followed) or one iter_NNNNNNN folder (docs/Checkpoint.md).\n");
  if (inspectCmd)
    return inspect();
  if (convertCmd)
    return convert();
  if (exportCmd)
    return exportModel();
  llvm::errs() << "tessera-ckpt: expected a command: inspect, convert or "
                  "export (see --help)\n";
  return 1;
}

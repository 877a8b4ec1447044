//===- tessera-eval.cpp - run an ONNX model's forward on the CPU runtime --===//
//
//   tessera-eval MODEL.onnx --data DIR [--bind none|int|all]
//                [--rtol R] [--atol A] [--write-outputs OUTDIR]
//   tessera-eval MODEL.onnx --input X.pb ... [--expect Y.pb ...]
//   tessera-eval --batch [--rtol R] [--atol A]     (jobs on stdin)
//
// Runs the forward pass of one ONNX model through Tessera's own path — the
// importer (compiler/import, importOnnxBytes, with the raising patterns),
// `tsr-lower-to-runtime` and `tsr-plan-memory` (passes/lowering), then the
// runtime's Program on the CPU backend (runtime/executor) — on inputs read
// from TensorProto files, and compares every output with an expected
// TensorProto. It is what test/onnx-node/run_node_tests.py runs on ONNX's
// backend node tests (docs/OpCoverage.md).
//
// Inputs. `--data DIR` is a data set of ONNX's backend tests: DIR/input_<k>.pb
// and DIR/output_<k>.pb, k = 0, 1, ... Otherwise `--input` (in order) and
// `--expect` (optional, in order). Input k is the value of the k-th graph
// input that has no initializer; expected output k is graph output k. A
// graph input with symbolic or missing dims takes the dims of its value.
//
// `--bind` turns graph inputs into constants before import (a Constant node
// holding the value replaces the graph input):
//   none  every input stays a runtime argument;
//   int   integer inputs (INT8..INT64, UINT8..UINT64; not BOOL) become
//         constants. Tessera compiles static shapes, so an integer input
//         that feeds a shape operand (Reshape's shape, Slice's starts,
//         ReduceMean-18's axes, Split's split, Expand's shape, Range's
//         bounds, ...) must be known at compile time;
//   all   every input becomes a constant: the importer's compile-time
//         evaluator folds whatever it evaluates, often the whole model.
//
// Comparison (numpy.allclose, see Compare.h): element k matches when
// |got - expected| <= atol + rtol * |expected|, default rtol = atol = 1e-5;
// FLOAT16 outputs use at least 2^-9 and BFLOAT16 at least 2^-6 for both;
// NaN matches NaN, infinities must be equal, integers and booleans exactly
// equal; shapes and element types must be equal.
//
// Output: one line on stdout,
//   PASS: <n> output(s), max abs err <e>, max rel err <r>
//   FAIL: output '<name>' (#<k>): <what differs> [; ...]
//   RAN: <n> output(s)                          (nothing to compare)
//   ERROR: <stage>: <message>                   (stage: input, import,
//                                                lower, compile, run, output)
// Exit status: 0 pass (or ran), 1 mismatch, 2 error. Warnings (e.g. an opset
// newer than libonnx knows) go to stderr.
//
// `--batch` reads jobs from stdin, one per line, `MODEL<tab>DATA_DIR<tab>
// none|int|all`, and answers each with its one line on stdout, flushed
// (exit status 0 at the end of the input). One process then serves many
// models: its start-up (mostly loading the CUDA libraries the runtime
// links) costs about 20 times a node test's import and run. Each job gets
// a fresh MLIRContext; a crash ends the process, and the caller knows which
// job caused it from the lines it got.
//
//===----------------------------------------------------------------------===//

#include "common/io/CommandLine.h"
#include "common/io/FileSafety.h"
#include "compiler/import/OnnxImporter.h"
#include "dialects/tsr/DiscardableAttrs.h"
#include "dialects/tsr/TsrDialect.h"
#include "dialects/tsrt/TsrtDialect.h"
#include "passes/lowering/Passes.h"
#include "runtime/Tensor.h"
#include "runtime/executor/Program.h"
#include "tools/tessera-eval/Compare.h"
#include "tools/tessera-eval/TensorProtoIO.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace mlir;
using namespace tessera;
using namespace tessera::eval;
namespace cl = llvm::cl;
namespace rt = tessera::runtime;

static cl::OptionCategory evalCategory("tessera-eval options");
static cl::opt<std::string> modelPath(cl::Positional, cl::Optional,
                                      cl::desc("<model.onnx>"), cl::init(""),
                                      cl::cat(evalCategory));
static cl::opt<bool>
    batch("batch",
          cl::desc("Read jobs from stdin, one per line: MODEL<tab>DATA_DIR<tab>"
                   "none|int|all; print one result line per job (flushed)"),
          cl::init(false), cl::cat(evalCategory));
static cl::opt<std::string>
    dataDir("data",
            cl::desc("Data set directory: input_<k>.pb and output_<k>.pb "
                     "(the layout of ONNX's backend tests)"),
            cl::value_desc("dir"), cl::init(""), cl::cat(evalCategory));
static cl::list<std::string>
    inputFiles("input",
               cl::desc("Input TensorProto file (graph input order; "
                        "repeat for each input)"),
               cl::value_desc("file.pb"), cl::cat(evalCategory));
static cl::list<std::string>
    expectFiles("expect",
                cl::desc("Expected output TensorProto file (graph output "
                         "order; repeat for each output)"),
                cl::value_desc("file.pb"), cl::cat(evalCategory));
enum class Bind { None, Int, All };
static cl::opt<Bind> bindMode(
    "bind", cl::desc("Graph inputs bound as constants before import"),
    cl::values(clEnumValN(Bind::None, "none", "none (default)"),
               clEnumValN(Bind::Int, "int",
                          "integer inputs (shape operands must be constants)"),
               clEnumValN(Bind::All, "all",
                          "every input (the importer folds the model)")),
    cl::init(Bind::None), cl::cat(evalCategory));
static cl::opt<double>
    rtolOpt("rtol",
            cl::desc("Relative tolerance (|got - exp| <= atol + rtol*|exp|)"),
            cl::init(1e-5), cl::cat(evalCategory));
static cl::opt<double> atolOpt("atol", cl::desc("Absolute tolerance"),
                               cl::init(1e-5), cl::cat(evalCategory));
static cl::opt<std::string>
    writeOutputs("write-outputs",
                 cl::desc("Write every output as DIR/output_<k>.pb"),
                 cl::value_desc("dir"), cl::init(""), cl::cat(evalCategory));

namespace {

/// What one run gives: the line to print and the exit status (0 pass or
/// ran, 1 mismatch, 2 error).
struct Outcome {
  int status = 0;
  std::string line;
};

/// "ERROR: <stage>: <msg>" (newlines folded), status 2.
Outcome error(llvm::StringRef stage, const llvm::Twine &msg) {
  std::string line = msg.str();
  for (char &c : line)
    if (c == '\n')
      c = ' ';
  while (!line.empty() && line.back() == ' ')
    line.pop_back();
  return {2, ("ERROR: " + stage + ": " + line).str()};
}

Outcome error(llvm::StringRef stage, llvm::Error err) {
  return error(stage, llvm::toString(std::move(err)));
}

/// Collects error diagnostics (with their notes) into one line; prints
/// warnings and remarks to stderr.
struct DiagnosticCollector {
  explicit DiagnosticCollector(MLIRContext &ctx)
      : handler(&ctx, [this](Diagnostic &diag) {
          std::string text;
          llvm::raw_string_ostream os(text);
          Location loc = diag.getLocation();
          if (auto name = dyn_cast<NameLoc>(loc))
            os << "'" << name.getName().getValue() << "': ";
          os << diag;
          for (Diagnostic &note : diag.getNotes())
            os << " (note: " << note << ")";
          if (diag.getSeverity() == DiagnosticSeverity::Error) {
            if (!message.empty())
              message += "; ";
            message += text;
          } else {
            llvm::errs() << "tessera-eval: " << text << "\n";
          }
          return success();
        }) {}
  std::string take(llvm::StringRef fallback) {
    std::string m = message.empty() ? fallback.str() : message;
    message.clear();
    return m;
  }
  std::string message;
  ScopedDiagnosticHandler handler;
};

/// The ONNX data type of a runtime dtype.
int32_t onnxDTypeOf(rt::DType d) {
  switch (d) {
  case rt::DType::F32:
    return kFloat;
  case rt::DType::I64:
    return kInt64;
  case rt::DType::I1:
    return kBool;
  case rt::DType::BF16:
    return kBFloat16;
  case rt::DType::F16:
    return kFloat16;
  }
  return 0;
}

/// A value as the runtime argument of `type`. Errors name `what`.
llvm::Expected<rt::Tensor> toRuntime(const HostTensor &v,
                                     const runtime::exec::TensorType &type,
                                     llvm::StringRef what) {
  if (onnxDTypeOf(type.dtype) != v.dtype || type.shape != v.dims)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("{0} is {1} {2} but the program takes {3}", what,
                      onnxDTypeName(v.dtype), rt::shapeToString(v.dims),
                      type.str()));
  rt::Tensor t = rt::Tensor::empty(type.dtype, type.shape);
  for (int64_t k = 0; k < t.numel(); ++k) {
    switch (type.dtype) {
    case rt::DType::F32:
      t.data<float>()[k] = static_cast<float>(v.f[k]);
      break;
    case rt::DType::F16:
      t.data<rt::Float16>()[k] = rt::toFloat16(static_cast<float>(v.f[k]));
      break;
    case rt::DType::BF16:
      t.data<rt::BFloat16>()[k] = rt::toBFloat16(static_cast<float>(v.f[k]));
      break;
    case rt::DType::I64:
      t.data<int64_t>()[k] = v.i[k];
      break;
    case rt::DType::I1:
      t.data<uint8_t>()[k] = v.i[k] != 0;
      break;
    }
  }
  return t;
}

HostTensor fromRuntime(const rt::Tensor &t, llvm::StringRef name) {
  HostTensor h;
  h.name = name.str();
  h.dtype = onnxDTypeOf(t.dtype());
  h.dims = t.shape();
  for (int64_t k = 0; k < t.numel(); ++k) {
    switch (t.dtype()) {
    case rt::DType::F32:
      h.f.push_back(t.data<float>()[k]);
      break;
    case rt::DType::F16:
      h.f.push_back(rt::toFloat(t.data<rt::Float16>()[k]));
      break;
    case rt::DType::BF16:
      h.f.push_back(rt::toFloat(t.data<rt::BFloat16>()[k]));
      break;
    case rt::DType::I64:
      h.i.push_back(t.data<int64_t>()[k]);
      break;
    case rt::DType::I1:
      h.i.push_back(t.data<uint8_t>()[k] != 0);
      break;
    }
  }
  return h;
}

/// A parameter's initial value from its `tsr.init` resource blob.
llvm::Expected<rt::Tensor> fromInit(Attribute init,
                                    const runtime::exec::TensorType &type,
                                    llvm::StringRef name) {
  auto fail = [&](const llvm::Twine &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "initializer '" + name + "' " + msg);
  };
  auto resource = dyn_cast_or_null<DenseResourceElementsAttr>(init);
  if (!resource)
    return fail("has no value (tsr.init)");
  AsmResourceBlob *blob = resource.getRawHandle().getBlob();
  rt::Tensor t = rt::Tensor::empty(type.dtype, type.shape);
  if (!blob || blob->getData().size() != t.bytes())
    return fail("holds the wrong number of bytes for " + type.str());
  if (t.bytes())
    std::memcpy(t.raw(), blob->getData().data(), t.bytes());
  return t;
}

/// An error or tolerance (3 significant digits) or a value (9: exact for
/// f32).
std::string fmt(double v, int digits = 3) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

/// Files DIR/<prefix>_<k>.pb for k = 0, 1, ... while they exist.
std::vector<std::string> dataSetFiles(llvm::StringRef dir,
                                      llvm::StringRef prefix) {
  std::vector<std::string> files;
  for (int k = 0;; ++k) {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, (prefix + "_" + llvm::Twine(k) + ".pb").str());
    if (!llvm::sys::fs::exists(p))
      break;
    files.push_back(std::string(p));
  }
  return files;
}

/// One run: a model, its input and expected files (or a data set
/// directory) and which inputs to bind.
struct Job {
  std::string model;
  std::string dataDir; ///< when set, replaces inputs/expected
  std::vector<std::string> inputs, expected;
  Bind bind = Bind::None;
};

Outcome runJob(const Job &job, Tolerance tol, llvm::StringRef writeDir) {
  // Files.
  std::vector<std::string> ins = job.inputs, outs = job.expected;
  const std::string &modelPath = job.model;
  if (!job.dataDir.empty()) {
    if (!llvm::sys::fs::is_directory(job.dataDir))
      return error("input", job.dataDir + ": not a directory");
    ins = dataSetFiles(job.dataDir, "input");
    outs = dataSetFiles(job.dataDir, "output");
  }

  llvm::Expected<PreparedModel> model = readModel(modelPath);
  if (!model)
    return error("input", model.takeError());
  for (const GraphInput &in : model->inputs)
    if (in.kind != "tensor")
      return error("input", "graph input '" + in.name + "' is a " + in.kind +
                                ", which Tessera does not support (tensors "
                                "only)");
  for (const GraphInput &out : model->outputs)
    if (out.kind != "tensor")
      return error("input", "graph output '" + out.name + "' is a " + out.kind +
                                ", which Tessera does not support (tensors "
                                "only)");
  if (ins.size() != model->inputs.size())
    return error("input",
                 llvm::formatv("the model has {0} graph inputs but {1} input "
                               "files were given",
                               model->inputs.size(), ins.size())
                     .str());
  if (!outs.empty() && outs.size() != model->outputs.size())
    return error("input",
                 llvm::formatv("the model has {0} graph outputs but {1} "
                               "expected outputs were given",
                               model->outputs.size(), outs.size())
                     .str());
  std::vector<HostTensor> values;
  llvm::SmallVector<bool> asConstant;
  for (size_t k = 0; k < ins.size(); ++k) {
    llvm::Expected<HostTensor> v = readTensorProto(ins[k]);
    if (!v)
      return error("input", v.takeError());
    adoptBFloat16Bits(*v, model->inputs[k].dtype);
    asConstant.push_back(job.bind == Bind::All ||
                         (job.bind == Bind::Int && isOnnxInteger(v->dtype)));
    values.push_back(std::move(*v));
  }
  std::vector<HostTensor> expected;
  for (size_t k = 0; k < outs.size(); ++k) {
    llvm::Expected<HostTensor> v = readTensorProto(outs[k]);
    if (!v)
      return error("input", v.takeError());
    adoptBFloat16Bits(*v, model->outputs[k].dtype);
    expected.push_back(std::move(*v));
  }
  // Values of the inputs left as runtime arguments, by graph input name.
  llvm::StringMap<const HostTensor *> argValues;
  for (size_t k = 0; k < values.size(); ++k)
    if (!asConstant[k])
      argValues[model->inputs[k].name] = &values[k];
  if (llvm::Error err = bindInputs(*model, values, asConstant))
    return error("input", std::move(err));

  // Import.
  DialectRegistry registry;
  registry.insert<tsr::TsrDialect, tsrt::TsrtDialect, func::FuncDialect>();
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  DiagnosticCollector diags(ctx);
  import::ImportOptions opts;
  OwningOpRef<ModuleOp> module =
      import::importOnnxBytes(model->bytes, modelPath, ctx, opts);
  if (!module)
    return error("import", diags.take("import failed"));
  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  if (!forward)
    return error("import", "the imported module has no @forward");

  // Argument values, read before lowering drops `tsr.init`.
  struct ArgSource {
    std::string name;
    const HostTensor *value = nullptr; ///< a graph input's value
    Attribute init;                    ///< a parameter's tsr.init
  };
  std::vector<ArgSource> argSources;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    ArgSource src;
    auto name = tsr::getArgName(forward, i);
    src.name = name ? name.str() : ("argument #" + llvm::Twine(i)).str();
    auto role = tsr::getArgRole(forward, i);
    if (role && role.getValue() == "input") {
      auto it = argValues.find(src.name);
      if (it == argValues.end())
        return error("import", "@forward takes input '" + src.name +
                                   "', which is not a graph input");
      src.value = it->second;
    } else {
      src.init = forward.getArgAttr(i, tsr::kInitAttrName);
    }
    argSources.push_back(std::move(src));
  }

  // Lower to the runtime program.
  PassManager pm(&ctx);
  pm.addPass(lowering::createLowerToRuntime());
  pm.addNestedPass<func::FuncOp>(lowering::createPlanMemory());
  if (failed(pm.run(*module)))
    return error("lower", diags.take("lowering failed"));

  // Compile and run on the CPU backend.
  runtime::exec::CompileOptions copts;
  llvm::Expected<runtime::exec::Program> program =
      runtime::exec::Program::compile(*module, "forward", copts, modelPath);
  if (!program)
    return error("compile", program.takeError());
  std::vector<rt::Tensor> args;
  for (size_t i = 0; i < argSources.size(); ++i) {
    const auto &type = program->argTypes()[i];
    llvm::Expected<rt::Tensor> t =
        argSources[i].value
            ? toRuntime(*argSources[i].value, type,
                        "input '" + argSources[i].name + "'")
            : fromInit(argSources[i].init, type, argSources[i].name);
    if (!t)
      return error("input", t.takeError());
    args.push_back(std::move(*t));
  }
  runtime::exec::ExecContext ectx;
  runtime::exec::Arena arena;
  if (program->arenaBytes() > 0) {
    llvm::Expected<runtime::exec::Arena> a =
        runtime::exec::Arena::allocate(program->arenaBytes());
    if (!a)
      return error("run", a.takeError());
    arena = std::move(*a);
    ectx.arena = &arena;
  }
  llvm::Expected<std::vector<rt::Tensor>> results =
      program->run(ectx, std::move(args));
  if (!results)
    return error("run", results.takeError());
  if (results->size() != model->outputs.size())
    return error("output", llvm::formatv("the program returned {0} values for "
                                         "{1} graph outputs",
                                         results->size(), model->outputs.size())
                               .str());

  std::vector<HostTensor> got;
  for (size_t k = 0; k < results->size(); ++k)
    got.push_back(fromRuntime((*results)[k], model->outputs[k].name));
  if (!writeDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(writeDir))
      return error("output", writeDir + ": " + ec.message());
    for (size_t k = 0; k < got.size(); ++k) {
      llvm::SmallString<256> p(writeDir);
      llvm::sys::path::append(p, "output_" + std::to_string(k) + ".pb");
      if (llvm::Error err = writeTensorProto(got[k], p))
        return error("output", std::move(err));
    }
  }
  if (expected.empty())
    return {0, "RAN: " + std::to_string(got.size()) + " output(s)"};

  std::vector<std::string> failures;
  double maxAbs = 0, maxRel = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    Comparison c = compare(got[k], expected[k], tol);
    maxAbs = std::max(maxAbs, c.maxAbs);
    maxRel = std::max(maxRel, c.maxRel);
    if (c.ok)
      continue;
    std::string what = "output '" + model->outputs[k].name + "' (#" +
                       std::to_string(k) + "): ";
    if (!c.structural.empty()) {
      failures.push_back(what + c.structural);
      continue;
    }
    Tolerance t = effectiveTolerance(expected[k].dtype, tol);
    std::string bound = expected[k].isFloat()
                            ? " beyond atol " + fmt(t.atol) + " + rtol " +
                                  fmt(t.rtol) + " * |expected|"
                            : "";
    failures.push_back(
        what +
        llvm::formatv("{0} of {1} elements differ{2}; max abs err {3}, max "
                      "rel err {4}; worst at {5}: got {6}, expected {7}",
                      c.mismatches, c.elements, bound, fmt(c.maxAbs),
                      fmt(c.maxRel), indexString(expected[k].dims, c.worst),
                      fmt(c.worstGot, 9), fmt(c.worstExpected, 9))
            .str());
  }
  if (!failures.empty())
    return {1, "FAIL: " + llvm::join(failures, "; ")};
  return {0, "PASS: " + std::to_string(got.size()) +
                 " output(s), max abs err " + fmt(maxAbs) + ", max rel err " +
                 fmt(maxRel)};
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  cl::HideUnrelatedOptions(evalCategory);
  tessera::io::parseCommandLine(
      argc, argv,
      "tessera-eval: run an ONNX model's forward on Tessera's CPU runtime and "
      "compare its outputs\n\n"
      "  Imports MODEL.onnx (compiler/import), lowers @forward to the tsrt\n"
      "  runtime program (tsr-lower-to-runtime, tsr-plan-memory), runs it on\n"
      "  the CPU backend with inputs from TensorProto files and compares each\n"
      "  output with the expected TensorProto: |got - exp| <= atol + rtol *\n"
      "  |exp| (numpy.allclose; FLOAT16 at least 2^-9, BFLOAT16 at least\n"
      "  2^-6; NaN == NaN; integers exact). --data DIR reads DIR/input_<k>.pb\n"
      "  and DIR/output_<k>.pb. --bind int makes integer inputs constants\n"
      "  (shape operands must be known at compile time); --bind all makes\n"
      "  every input a constant (the importer folds the model).\n\n"
      "  Prints one line: PASS: ... | FAIL: ... | RAN: ... | ERROR: <stage>:\n"
      "  ...; exit status 0 pass, 1 mismatch, 2 error. --batch reads jobs\n"
      "  MODEL<tab>DATA_DIR<tab>none|int|all from stdin and prints one such\n"
      "  line per job.\n");

  Tolerance tol{rtolOpt, atolOpt};
  if (batch) {
    if (!modelPath.empty() || !dataDir.empty() || !inputFiles.empty() ||
        !expectFiles.empty() || !writeOutputs.empty()) {
      llvm::errs() << "tessera-eval: error: --batch takes its jobs from "
                      "stdin only\n";
      return 2;
    }
    // One job per line, one result line per job, flushed: a caller can
    // tell which job a crash interrupted.
    std::string text;
    for (int c = 0; c != EOF;) {
      c = std::getchar();
      if (c != '\n' && c != EOF) {
        text += static_cast<char>(c);
        continue;
      }
      if (text.empty())
        continue;
      llvm::SmallVector<llvm::StringRef> fields;
      llvm::StringRef(text).split(fields, '\t');
      Outcome o;
      std::optional<Bind> bind;
      if (fields.size() == 3)
        bind = llvm::StringSwitch<std::optional<Bind>>(fields[2])
                   .Case("none", Bind::None)
                   .Case("int", Bind::Int)
                   .Case("all", Bind::All)
                   .Default(std::nullopt);
      if (!bind) {
        o = error("input", "batch line '" + text +
                               "' is not MODEL<tab>DATA_DIR<tab>"
                               "none|int|all");
      } else {
        Job job;
        job.model = fields[0].str();
        job.dataDir = fields[1].str();
        job.bind = *bind;
        o = runJob(job, tol, "");
      }
      llvm::outs() << o.line << "\n";
      llvm::outs().flush();
      text.clear();
    }
    return 0;
  }
  if (modelPath.empty()) {
    llvm::errs() << "tessera-eval: error: no model given (see --help)\n";
    return 2;
  }
  Job job;
  job.model = modelPath;
  job.bind = bindMode;
  job.inputs.assign(inputFiles.begin(), inputFiles.end());
  job.expected.assign(expectFiles.begin(), expectFiles.end());
  if (!dataDir.empty()) {
    if (!job.inputs.empty() || !job.expected.empty()) {
      llvm::errs() << "tessera-eval: error: --data cannot be combined with "
                      "--input/--expect\n";
      return 2;
    }
    job.dataDir = dataDir;
  }
  // --write-outputs DIR must not hold the model or a data file it would
  // overwrite (DIR/output_<k>.pb); common/io/FileSafety.h.
  if (!writeOutputs.empty()) {
    std::vector<tessera::io::NamedPath> inputs{{"the model", modelPath}};
    for (const std::string &f : job.inputs)
      inputs.push_back({"--input", f});
    for (const std::string &f : job.expected)
      inputs.push_back({"--expect", f});
    if (!dataDir.empty())
      for (const char *prefix : {"input", "output"})
        for (const std::string &f : dataSetFiles(dataDir, prefix))
          inputs.push_back({"--data", f});
    if (llvm::Error err = tessera::io::checkOutputs(
            inputs, {{"--write-outputs", writeOutputs, /*directory=*/true}})) {
      llvm::errs() << "tessera-eval: error: " << toString(std::move(err))
                   << "\n";
      return 2;
    }
  }
  Outcome o = runJob(job, tol, writeOutputs);
  llvm::outs() << o.line << "\n";
  return o.status;
}

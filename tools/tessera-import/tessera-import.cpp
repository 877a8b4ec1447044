//===- tessera-import.cpp - ONNX → tsr importer driver --------------------===//
//
//   tessera-import MODEL.onnx [--freeze REGEX] [--trainable REGEX]
//                  [-o OUT.mlir] [--no-raise] [--explain]
//   tessera-import --raise-only IN.mlir      (apply the raising patterns only)
//   tessera-import --list-supported-ops      (one "<OpType> runtime|constant"
//                                             line per ONNX op converted)
//
// --explain prints, to stderr, what became of every initializer (trained,
// frozen, constant, tied) and why (compiler/import/Initializers.h).
// Prints the imported module (`func.func @forward` in the tsr dialect).
// Parameter data (dense_resource blobs) longer than --elide-resource-limit
// bytes is elided from the printed output unless the limit is negative.
// Exits non-zero, with an error naming the file/node/tensor, on bad input.
//
//===----------------------------------------------------------------------===//

#include "common/io/CommandLine.h"
#include "common/io/FileSafety.h"
#include "compiler/import/OnnxImporter.h"
#include "compiler/import/RaisePatterns.h"
#include "dialects/tsr/TsrDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.onnx>"));
static cl::opt<std::string> outputPath(
    "o",
    cl::desc("Output file ('-', the default: standard output). Written "
             "atomically (a temporary file renamed over it); an error, before "
             "anything is read, when it is the input file (also through a "
             "symlink or hard link) or an existing non-regular file other "
             "than /dev/null"),
    cl::value_desc("file"), cl::init("-"));
static cl::opt<std::string>
    freezeRegex("freeze",
                cl::desc("Initializers whose name matches this regex are "
                         "frozen (tsr.role = \"frozen\")"),
                cl::value_desc("regex"), cl::init(""));
static cl::opt<std::string> trainableRegex(
    "trainable",
    cl::desc("Initializers classified as constants whose name matches this "
             "regex are trained parameters instead"),
    cl::value_desc("regex"), cl::init(""));
static cl::opt<bool> explainInits(
    "explain", cl::desc("Print every initializer's class and reason to stderr"),
    cl::init(false));
static cl::opt<bool> listOps(
    "list-supported-ops",
    cl::desc("Print the ONNX op types the importer converts, one per line, "
             "each followed by 'runtime' (lowered to tsr ops) or 'constant' "
             "(evaluated only when its inputs are compile-time constants), "
             "and exit"),
    cl::init(false));
static cl::opt<bool> noRaise("no-raise",
                             cl::desc("Skip the raising patterns "
                                      "(layer_norm, gelu, ...)"),
                             cl::init(false));
static cl::opt<bool>
    raiseOnly("raise-only",
              cl::desc("Input is tsr MLIR: apply the raising patterns only"),
              cl::init(false));
static cl::opt<int64_t> elideLimit(
    "elide-resource-limit",
    cl::desc("Elide resource blobs larger than this many bytes from the "
             "output (negative: print everything)"),
    cl::init(64));

/// Prints "FILE: error: message" (FileLineColLoc with line 0 has no line).
static void printDiagnostic(Diagnostic &diag) {
  Location loc = diag.getLocation();
  std::string where;
  if (auto name = dyn_cast<NameLoc>(loc))
    loc = name.getChildLoc();
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    where = file.getFilename().str();
    if (file.getLine() != 0)
      where += ":" + std::to_string(file.getLine()) + ":" +
               std::to_string(file.getColumn());
  }
  const char *severity = "error";
  switch (diag.getSeverity()) {
  case DiagnosticSeverity::Warning:
    severity = "warning";
    break;
  case DiagnosticSeverity::Note:
    severity = "note";
    break;
  case DiagnosticSeverity::Remark:
    severity = "remark";
    break;
  default:
    break;
  }
  if (!where.empty())
    llvm::errs() << where << ": ";
  llvm::errs() << severity << ": " << diag << "\n";
  for (Diagnostic &note : diag.getNotes())
    printDiagnostic(note);
}

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  tessera::io::parseCommandLine(argc, argv, "Tessera ONNX importer\n");
  if (listOps) {
    for (const auto &op : tessera::import::supportedOps())
      llvm::outs() << op.opType << " " << (op.runtime ? "runtime" : "constant")
                   << "\n";
    return 0;
  }
  if (inputPath.empty()) {
    llvm::errs() << "tessera-import: error: no input file (see --help)\n";
    return 1;
  }
  // Never overwrite the input; only regular files in and out
  // (common/io/FileSafety.h).
  if (llvm::Error err = tessera::io::checkOutputs({{"the input", inputPath}},
                                                  {{"-o", outputPath}})) {
    llvm::errs() << "tessera-import: error: " << toString(std::move(err))
                 << "\n";
    return 1;
  }

  DialectRegistry registry;
  registry.insert<tessera::tsr::TsrDialect, func::FuncDialect,
                  shard::ShardDialect>();
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();

  OwningOpRef<ModuleOp> module;
  if (raiseOnly) {
    llvm::SourceMgr sourceMgr;
    SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
    // A regular file, read with a size bound (a FIFO or /dev/zero is an
    // error), or standard input for "-".
    auto file = inputPath == "-"
                    ? llvm::errorOrToExpected(llvm::MemoryBuffer::getSTDIN())
                    : tessera::io::readInputFile("the input", inputPath,
                                                 /*maxBytes=*/uint64_t(1) << 32,
                                                 /*isText=*/true);
    if (!file) {
      llvm::errs() << "tessera-import: error: " << toString(file.takeError())
                   << "\n";
      return 1;
    }
    sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
    module = parseSourceFile<ModuleOp>(sourceMgr, &ctx);
    if (!module || failed(tessera::import::raiseTsrPatterns(*module)) ||
        failed(verify(*module)))
      return 1;
  } else {
    ScopedDiagnosticHandler handler(&ctx, [](Diagnostic &diag) {
      printDiagnostic(diag);
      return success();
    });
    tessera::import::ImportOptions opts;
    opts.freezeRegex = freezeRegex;
    opts.trainableRegex = trainableRegex;
    opts.raise = !noRaise;
    tessera::import::ImportReport report;
    opts.report = &report;
    module = tessera::import::importOnnxFile(inputPath, ctx, opts);
    if (!module)
      return 1;
    if (explainInits)
      report.print(llvm::errs());
  }

  OpPrintingFlags flags;
  if (elideLimit >= 0)
    flags.elideLargeResourceString(elideLimit);
  if (llvm::Error err = tessera::io::writeFileAtomically(
          "-o", outputPath, [&](llvm::raw_ostream &os) {
            module->print(os, flags);
            os << "\n";
            return llvm::Error::success();
          })) {
    llvm::errs() << "tessera-import: error: " << toString(std::move(err))
                 << "\n";
    return 1;
  }
  return 0;
}

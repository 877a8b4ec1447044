//===- tessera-pack-plan.cpp - pack a test plan.tsr -----------------------===//
//
// tessera-pack-plan PROGRAM.mlir MANIFEST.json -o PLAN.tsr
//
// Test utility for the runtime's lit tests (test/Run): packs a textual tsrt
// module (stored as MLIR bytecode), a manifest and deterministic initial
// weights into the artifact layout tessera-run reads. Not installed.
//
//===----------------------------------------------------------------------===//

#include "PackPlan.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace tessera::runtime;
namespace cl = llvm::cl;

static cl::opt<std::string> programPath(cl::Positional, cl::Required,
                                        cl::desc("<program.mlir>"));
static cl::opt<std::string> manifestPath(cl::Positional, cl::Required,
                                         cl::desc("<manifest.json>"));
static cl::opt<std::string> outputPath("o", cl::Required,
                                       cl::desc("Output plan.tsr"),
                                       cl::value_desc("path"));

static int fail(const llvm::Twine &msg) {
  llvm::errs() << "tessera-pack-plan: error: " << msg << "\n";
  return 1;
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "Packs a test plan.tsr\n");
  auto program = llvm::MemoryBuffer::getFile(programPath);
  if (!program)
    return fail("cannot read '" + programPath + "'");
  auto manifestText = llvm::MemoryBuffer::getFile(manifestPath);
  if (!manifestText)
    return fail("cannot read '" + manifestPath + "'");
  llvm::Expected<llvm::json::Value> manifest =
      llvm::json::parse((*manifestText)->getBuffer());
  if (!manifest)
    return fail(manifestPath + ": " + llvm::toString(manifest.takeError()));
  if (!manifest->getAsObject())
    return fail(manifestPath + ": expected a JSON object");
  llvm::Expected<std::string> bytes = test::packPlan(
      (*program)->getBuffer(), *manifest->getAsObject(), {}, programPath);
  if (!bytes)
    return fail(llvm::toString(bytes.takeError()));
  std::error_code ec;
  llvm::ToolOutputFile out(outputPath, ec, llvm::sys::fs::OF_None);
  if (ec)
    return fail("cannot write '" + outputPath + "': " + ec.message());
  out.os() << *bytes;
  out.keep();
  return 0;
}

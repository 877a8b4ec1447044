//===- plan-fuzzer.cpp - the plan.tsr loader on raw bytes -----------------===//
//
// libFuzzer target: every input is a plan.tsr artifact (safetensors: header
// JSON, manifest in __metadata__, the program and initial weights as
// tensors), loaded as tessera-run loads it: parseSafeTensors, then
// Plan::fromSafeTensors (manifest, program, pipeline, weights, compiled for
// the CPU backend).
//
// The program. MLIR's bytecode reader (Debian's libMLIR, not instrumented) is
// not hardened against corrupt input: a flipped byte can corrupt its heap
// (issue 26). Tessera's defence is the artifact's section digests, checked
// before anything is parsed, so a corrupt program never reaches the reader.
// This target therefore does not feed mutated bytecode to it: its seeds hold
// the program as MLIR text (which the loader also accepts, and whose parser
// reports errors), and an input whose program tensor is bytecode (the
// "ML\xefR" magic) is skipped. Everything Tessera parses itself - the
// safetensors header, the manifest, the pipeline schedule, the checks of
// the program against the manifest, the weights - is fuzzed.
//
// Digests. parseSafeTensors checks "tessera.digests" before handing out a
// section, and Plan::fromSafeTensors refuses a file that had none. A byte
// mutation of a seed (written without digests) parses as a digest-less file;
// the target then marks it as checked (SafeTensorsFile::hasDigests), exactly
// what a file whose digests matched looks like to the loader, so that the
// fuzzer reaches the parsers behind the check. A mutation of a file with
// digests stops at the digest check, which the corrupt-artifact tests
// (test/Run/integrity.test, e2e.integrity.corrupt_plan) cover.
//
//===----------------------------------------------------------------------===//

#include "test/fuzz/FuzzUtil.h"

#include "runtime/checkpoint/SafeTensors.h"
#include "runtime/executor/Plan.h"

#include "llvm/Support/Error.h"

#include <cstring>

using namespace tessera::runtime;

namespace {
/// Bytecode starts with "ML\xefR" (mlir/Bytecode/BytecodeImplementation.h).
bool holdsBytecode(const SafeTensorsFile &file) {
  for (const Tensor &t : file.tensors)
    if (t.dtype() == DType::I1 && t.bytes() >= 4 &&
        std::memcmp(t.raw(), "ML\xefR", 4) == 0)
      return true;
  return false;
}

/// Lets a parsed digest-less input through the loader's "written by an
/// older Tessera" check, as if its digests had been present and matched.
void markDigestsChecked(SafeTensorsFile &file) { file.hasDigests = true; }
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 20))
    return 0;
  llvm::Expected<SafeTensorsFile> file =
      parseSafeTensors(tessera::fuzz::asStringRef(data, size), "fuzz.tsr");
  if (!file) {
    llvm::consumeError(file.takeError());
    return 0;
  }
  if (holdsBytecode(*file))
    return 0;
  markDigestsChecked(*file);
  auto plan = exec::Plan::fromSafeTensors(std::move(*file), "fuzz.tsr");
  if (!plan)
    llvm::consumeError(plan.takeError());
  return 0;
}

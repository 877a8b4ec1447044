//===- onnx-import-fuzzer.cpp - ONNX importer on raw bytes ----------------===//
//
// libFuzzer target (`make fuzz`, scripts/fuzz.sh): every input is a
// serialized ONNX ModelProto, mutated as bytes. The importer must reject bad
// input with a diagnostic; a crash, sanitizer report, timeout or
// out-of-memory is a finding. Inputs larger than kMaxOnnxInput are skipped.
//
//===----------------------------------------------------------------------===//

#include "test/fuzz/OnnxImportFuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tessera::fuzz::importOnnxInput(data, size);
  return 0;
}

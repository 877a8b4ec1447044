//===- OnnxImportFuzzer.h - one import of fuzzed ONNX bytes -----*- C++ -*-===//

#ifndef TESSERA_TEST_FUZZ_ONNXIMPORTFUZZER_H
#define TESSERA_TEST_FUZZ_ONNXIMPORTFUZZER_H

#include <cstddef>
#include <cstdint>

namespace tessera::fuzz {

/// Largest model a fuzz input may be (bytes; larger ones are skipped): the
/// seeds are node tests and weight-free models of a few KiB, and a bound
/// keeps each import (constant folding included) to milliseconds.
constexpr size_t kMaxOnnxInput = 64 * 1024;

/// Imports `data` as a serialized ModelProto (raising patterns included) in
/// a fresh context, dropping the diagnostics.
void importOnnxInput(const uint8_t *data, size_t size);

} // namespace tessera::fuzz

#endif // TESSERA_TEST_FUZZ_ONNXIMPORTFUZZER_H

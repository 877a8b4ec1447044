//===- ByteSize.h - memory sizes as text ----------------------*- C++ -*-===//
//
// `--memory-per-device SIZE` (tessera-partition and tessera-run) takes a
// number and an optional unit: "80GB", "512MiB", "1.5GB", "1073741824",
// "64 KiB". Decimal units are powers of 1000 (kB/KB, MB, GB, TB), binary
// units powers of 1024 (KiB, MiB, GiB, TiB); "B" or no unit means bytes.
// Units are case-insensitive except that 'b' alone is still bytes (there
// are no bit units). Fractions are allowed when the result is a whole
// number of bytes after rounding down.
//
//===----------------------------------------------------------------------===//

#ifndef TESSERA_RUNTIME_METRICS_BYTESIZE_H
#define TESSERA_RUNTIME_METRICS_BYTESIZE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>

namespace tessera {
namespace runtime {

/// Parses a size (see the file comment) into bytes (rounded down to a whole
/// byte). Errors (with the text quoted): empty text, no number, a negative
/// or zero size, an unknown unit, a value beyond 2^63 - 1 bytes.
llvm::Expected<int64_t> parseByteSize(llvm::StringRef text);

/// "1234567890 bytes (1.15 GiB)"-style text for messages: the exact count,
/// then the value in the largest binary unit below it (2 decimals).
std::string formatByteSize(int64_t bytes);

} // namespace runtime
} // namespace tessera

#endif // TESSERA_RUNTIME_METRICS_BYTESIZE_H

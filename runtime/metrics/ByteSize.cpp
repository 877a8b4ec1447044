//===- ByteSize.cpp - memory sizes as text --------------------------------===//

#include "runtime/metrics/ByteSize.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace tessera::runtime;

llvm::Expected<int64_t> tessera::runtime::parseByteSize(llvm::StringRef text) {
  auto bad = [&](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "invalid memory size '" + text +
                                       "': " + why);
  };
  llvm::StringRef s = text.trim();
  if (s.empty())
    return bad("expected a number with an optional unit, e.g. 80GB, 512MiB");
  // The number: digits with at most one '.'.
  size_t n = 0;
  bool dot = false, digits = false;
  for (; n < s.size(); ++n) {
    char c = s[n];
    if (c >= '0' && c <= '9')
      digits = true;
    else if (c == '.' && !dot)
      dot = true;
    else
      break;
  }
  if (!digits)
    return bad("expected a number with an optional unit, e.g. 80GB, 512MiB");
  llvm::StringRef number = s.take_front(n);
  llvm::StringRef unit = s.drop_front(n).trim();
  double multiplier = llvm::StringSwitch<double>(unit.lower())
                          .Case("", 1)
                          .Case("b", 1)
                          .Case("kb", 1e3)
                          .Case("mb", 1e6)
                          .Case("gb", 1e9)
                          .Case("tb", 1e12)
                          .Case("kib", 1024.0)
                          .Case("mib", 1024.0 * 1024)
                          .Case("gib", 1024.0 * 1024 * 1024)
                          .Case("tib", 1024.0 * 1024 * 1024 * 1024)
                          .Default(-1);
  if (multiplier < 0)
    return bad("unknown unit '" + unit +
               "' (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  double value = 0;
  if (number.getAsDouble(value) || !std::isfinite(value))
    return bad("cannot read the number '" + number + "'");
  // Integers without a unit are read exactly (doubles lose precision past
  // 2^53).
  if (!dot && multiplier == 1) {
    uint64_t exact = 0;
    if (number.getAsInteger(10, exact) || exact > INT64_MAX)
      return bad("larger than 2^63 - 1 bytes");
    if (exact == 0)
      return bad("the size must be positive");
    return static_cast<int64_t>(exact);
  }
  double bytes = std::floor(value * multiplier);
  if (bytes >= 9.2233720368547758e18)
    return bad("larger than 2^63 - 1 bytes");
  if (bytes < 1)
    return bad("the size must be at least one byte");
  return static_cast<int64_t>(bytes);
}

std::string tessera::runtime::formatByteSize(int64_t bytes) {
  static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = -1;
  while (u < 3 && v >= 1024) {
    v /= 1024;
    ++u;
  }
  if (u < 0)
    return llvm::formatv("{0} bytes", bytes).str();
  return llvm::formatv("{0} bytes ({1:F2} {2})", bytes, v, units[u]).str();
}

#!/usr/bin/env bash
# Usage: check_vecmath_symbols.sh OBJECT...
#
# The objects of TesseraCpuKernels compiled with ISA flags (VecMathAvx2.cpp,
# VecMathAvx512.cpp) must define no external symbol but their table function
# (vecmath::detail::avx2Table / avx512Table): a weak (inline, template) or
# global definition there could be the copy the linker keeps for every
# caller, and an AVX-512 instruction would then fault on an AVX2-only CPU.
# Other objects given are ignored. Exit 1 on a stray symbol.
set -uo pipefail
fail=0
checked=0
for obj in "$@"; do
  case "$obj" in
    *VecMathAvx2.cpp.o) want=avx2Table ;;
    *VecMathAvx512.cpp.o) want=avx512Table ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  stray=$(nm -C --defined-only -g "$obj" | awk '{ $1 = ""; $2 = ""; print }' |
          grep -v "tessera::runtime::vecmath::detail::${want}()" || true)
  if [ -n "$stray" ]; then
    echo "FAIL: $(basename "$obj") defines external symbols besides ${want}:"
    echo "$stray" | sed 's/^/  /'
    fail=1
  fi
done
if [ "$checked" = 0 ]; then
  echo "no VecMath ISA objects given (not x86-64?): nothing to check"
  exit 0
fi
[ "$fail" = 0 ] && echo "PASS: $checked ISA objects define only their table"
exit "$fail"

#!/usr/bin/env bash
# Usage: check_bundle.sh BUNDLE [MAX_BYTES]
#
# Checks `make bundle`'s folder (scripts/bundle.sh):
#   - its size is at most MAX_BYTES (default 64 MiB);
#   - every shared library that bin/tessera-run, bin/orterun, bin/orted and
#     each bundled library and component load (ldd, with the launcher's
#     LD_LIBRARY_PATH) resolves inside BUNDLE, except glibc, libstdc++,
#     libgcc_s and the CUDA runtime, cuBLASLt and NCCL (a CUDA node's), and
#     none is missing;
#   - tessera-run loads no libMLIR / libLLVM / libopenblas (linked
#     statically).
# Prints ldd of tessera-run. Exit 1 on a failure.
set -uo pipefail
B=$(cd "$1" && pwd)
MAX=${2:-$((64 * 1024 * 1024))}
ALLOWED='^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libcudart\.so\.[0-9]+|libcublasLt\.so\.[0-9]+|libcublas\.so\.[0-9]+|libnccl\.so\.[0-9]+|libcuda\.so\.1)$'
fail=0

size=$(du -sb "$B" | cut -f1)
echo "bundle size: $size bytes ($(( (size + 1048575) / 1048576 )) MiB; limit $MAX)"
[ "$size" -le "$MAX" ] || { echo "FAIL: the bundle is larger than $MAX bytes"; fail=1; }

echo "ldd $B/bin/tessera-run:"
LD_LIBRARY_PATH="$B/lib" ldd "$B/bin/tessera-run" | sed 's/ (0x[0-9a-f]*)//; s/^/  /'

check() {  # one binary or library
  local name arrow path rest
  while read -r name arrow path rest; do
    [ -n "$name" ] || continue
    if [ "$arrow" != "=>" ]; then  # linux-vdso.so.1, /lib64/ld-linux...
      [[ $name =~ $ALLOWED ]] || { echo "FAIL: $1 loads $name"; fail=1; }
    elif [ "$path" = "not" ]; then
      echo "FAIL: $1 needs $name, which is missing"; fail=1
    elif [[ $path == "$B"/* ]]; then
      :
    elif ! [[ $name =~ $ALLOWED ]]; then
      echo "FAIL: $1 loads $name from $path, outside the bundle"; fail=1
    fi
  done < <(LD_LIBRARY_PATH="$B/lib" ldd "$1" 2>&1 | sed 's/ (0x[0-9a-f]*)//')
}
n=0
for f in "$B"/bin/tessera-run "$B"/bin/orterun "$B"/bin/orted "$B"/lib/*.so* \
         "$B"/lib/openmpi/*.so "$B"/lib/pmix/*.so; do
  [ -e "$f" ] || { echo "FAIL: $f missing"; fail=1; continue; }
  check "$f"
  n=$((n + 1))
done
if LD_LIBRARY_PATH="$B/lib" ldd "$B/bin/tessera-run" | grep -E 'lib(MLIR|LLVM|openblas|gfortran)' >/dev/null; then
  echo "FAIL: tessera-run loads MLIR, LLVM or OpenBLAS dynamically"; fail=1
fi
[ "$fail" = 0 ] && echo "PASS: $n files load nothing from outside the bundle but glibc, libstdc++, libgcc_s and CUDA"
exit "$fail"

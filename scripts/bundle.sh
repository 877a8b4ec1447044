#!/usr/bin/env bash
# Usage: scripts/bundle.sh [BUILD] [OUT]
#
# Makes OUT (default BUILD/bundle, BUILD default build) a folder that runs
# tessera-run on a machine with no LLVM, MLIR, OpenBLAS or Open MPI
# installed (DESIGN.md: a cluster node needs only tessera-run):
#
#   launch              sets PATH, LD_LIBRARY_PATH and Open MPI's and PMIx's
#                       install directories (OPAL_PREFIX, OPAL_PKGLIBDIR, ...,
#                       PMIX_PREFIX, ...) to this folder, then runs its
#                       arguments: `OUT/launch mpirun -np 2 tessera-run
#                       plan.tsr --data tokens.u16 --steps 8`
#   bin/tessera-run     stripped; MLIR, LLVM and OpenBLAS linked statically
#   bin/mpirun, orterun, mpiexec, orted
#                       Open MPI's launcher (and its daemon, for other nodes)
#   lib/                the shared libraries of those that a node may lack:
#                       Open MPI, PMIx, hwloc, libevent, ...
#   lib/openmpi, lib/pmix
#                       Open MPI's and PMIx's components (plugins), except
#                       those of the network stacks Debian's Open MPI turns
#                       off by default (libfabric, UCX, verbs, PSM) and of
#                       OpenSHMEM: shared memory and TCP
#   share/openmpi, share/pmix, etc/
#                       help texts and Open MPI's default MCA parameters
#
# Everything a bundled binary loads resolves inside OUT except glibc,
# libstdc++, libgcc_s and, for a CUDA build, the CUDA runtime, cuBLASLt and
# NCCL, which a CUDA node has: test/deploy/check_bundle.sh checks that.
# Prints the bundle's size.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-$BUILD/bundle}
RUN=$BUILD/tools/tessera-run/tessera-run
[ -x "$RUN" ] || { echo "bundle: $RUN not built (cmake --build $BUILD --target tessera-run)" >&2; exit 1; }
command -v orterun >/dev/null || { echo "bundle: orterun (Open MPI) not found" >&2; exit 1; }

ompi_info_path() { ompi_info --path "$1" --parsable | sed -n "s/^path:$1://p"; }
OMPI_PKGLIBDIR=$(ompi_info_path pkglibdir)
OMPI_PKGDATADIR=$(ompi_info_path pkgdatadir)
OMPI_SYSCONFDIR=$(ompi_info_path sysconfdir)
# PMIx's components and help texts (Debian: /usr/lib/<triplet>/pmix2), from
# the libpmix that Open MPI's PMIx component loads.
PMIX_LIB=$(ldd "$OMPI_PKGLIBDIR"/mca_pmix_*.so 2>/dev/null |
  awk '$1 ~ /^libpmix\.so/ {print $3; exit}')
PMIX_ROOT=""
if [ -n "$PMIX_LIB" ]; then
  PMIX_ROOT=$(dirname "$(dirname "$(readlink -f "$PMIX_LIB")")")
  [ -d "$PMIX_ROOT/lib/pmix" ] || PMIX_ROOT=""
fi

rm -rf "$OUT"
mkdir -p "$OUT"/{bin,lib/openmpi,lib/pmix,share/openmpi,share/pmix,etc}

# Libraries every node has (glibc, the C++ runtime) and the CUDA stack of a
# CUDA node; never copied.
SYSTEM_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so)'
# Dependencies of the components left out (network stacks off by default in
# Debian's openmpi-mca-params.conf, and OpenSHMEM).
SKIP_RE='lib(fabric|ucp|ucs|uct|ucm|ibverbs|rdmacm|psm|infinipath|efa|nl-|oshmem|mca_common_(ofi|ucx|verbs))'

# The shared libraries (resolved paths) `$1` loads, outside SYSTEM_RE.
deps() {
  LD_LIBRARY_PATH="$OUT/lib" ldd "$1" |
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r name path; do
      [[ $name =~ $SYSTEM_RE ]] || echo "$path"
    done
}
# Copies `$1`'s dependencies into lib/ under their sonames.
copy_deps() {
  local path
  for path in $(deps "$1"); do
    [ -e "$OUT/lib/$(basename "$path")" ] || {
      cp -L "$path" "$OUT/lib/$(basename "$path")"
      [ -z "${BUNDLE_VERBOSE:-}" ] || echo "bundle: $(basename "$path") for $1"
    }
  done
}

strip -o "$OUT/bin/tessera-run" "$RUN"
ORTERUN=$(readlink -f "$(command -v orterun)")
cp -L "$ORTERUN" "$OUT/bin/orterun"
cp -L "$(readlink -f "$(dirname "$ORTERUN")/orted")" "$OUT/bin/orted"
ln -s orterun "$OUT/bin/mpirun"
ln -s orterun "$OUT/bin/mpiexec"
for b in tessera-run orterun orted; do copy_deps "$OUT/bin/$b"; done

copy_components() {  # SRC_DIR DEST_DIR
  local so
  for so in "$1"/*.so; do
    if ldd "$so" | grep -E "$SKIP_RE" >/dev/null; then
      continue
    fi
    cp "$so" "$2/"
    copy_deps "$so"
  done
}
copy_components "$OMPI_PKGLIBDIR" "$OUT/lib/openmpi"
cp -r "$OMPI_PKGDATADIR"/. "$OUT/share/openmpi/"
[ -f "$OMPI_SYSCONFDIR/openmpi-mca-params.conf" ] &&
  cp "$OMPI_SYSCONFDIR/openmpi-mca-params.conf" "$OUT/etc/"
if [ -n "$PMIX_ROOT" ]; then
  copy_components "$PMIX_ROOT/lib/pmix" "$OUT/lib/pmix"
  cp -r "$PMIX_ROOT/share/pmix"/. "$OUT/share/pmix/"
fi

cat > "$OUT/launch" <<'EOF'
#!/bin/sh
# Runs its arguments with this bundle's tessera-run, Open MPI and libraries:
#   launch mpirun -np 2 tessera-run plan.tsr --data tokens.u16 --steps 8
B=$(cd "$(dirname "$0")" && pwd)
export PATH="$B/bin:$PATH"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Open MPI finds its components, help texts and defaults here, and mpirun
# passes the prefix on to the daemons it starts on other nodes.
export OPAL_PREFIX="$B" OPAL_EXEC_PREFIX="$B" OPAL_BINDIR="$B/bin"
export OPAL_LIBDIR="$B/lib" OPAL_PKGLIBDIR="$B/lib/openmpi"
export OPAL_DATAROOTDIR="$B/share" OPAL_DATADIR="$B/share"
export OPAL_PKGDATADIR="$B/share/openmpi" OPAL_SYSCONFDIR="$B/etc"
export PMIX_PREFIX="$B" PMIX_EXEC_PREFIX="$B" PMIX_LIBDIR="$B/lib"
export PMIX_PKGLIBDIR="$B/lib/pmix" PMIX_DATADIR="$B/share"
export PMIX_PKGDATADIR="$B/share/pmix"
# mpirun's ssh launcher wants ssh or rsh even for ranks on this node; where
# neither exists (a container, a chroot) and no batch system is in charge,
# it launches the ranks on this node only.
if [ -z "${OMPI_MCA_plm:-}" ] && [ -z "${SLURM_JOB_ID:-}" ] &&
   ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
  export OMPI_MCA_plm=isolated
fi
exec "$@"
EOF
chmod +x "$OUT/launch"

echo "bundle: $OUT, $(du -sb "$OUT" | cut -f1) bytes ($(du -sh "$OUT" | cut -f1))"

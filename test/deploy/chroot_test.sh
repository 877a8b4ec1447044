#!/usr/bin/env bash
# Usage: chroot_test.sh SOURCE_DIR BUILD_DIR BUNDLE WORK_DIR
#
# The bundle (scripts/bundle.sh) on a machine that has none of Tessera's
# dependencies: a minimal Debian (debootstrap --variant=minbase, no LLVM,
# MLIR, OpenBLAS or Open MPI; checked) runs the example GPT's dp2 plan under
# the bundle's own mpirun (`launch mpirun -np 2 tessera-run ...`), and its 8
# losses must equal those of the same run outside with the build's
# tessera-run and the system's mpirun (1e-6 relative).
#
# The plan is made outside by the build's tessera-partition. For a CUDA
# build the directories of the CUDA libraries tessera-run loads (the CUDA
# runtime, cuBLASLt, NCCL: what a CUDA node has) are bind-mounted read-only
# into the chroot; nothing else of the host is visible but /proc, /sys and
# a fresh /dev/shm, in a mount namespace of the test's own (unshare), so no
# mount outlives it.
#
# The chroot is made once and cached in $TESSERA_CHROOT (default
# /var/cache/tessera/<suite>-minbase; about 200 MB, 1 minute to make);
# $TESSERA_DEBIAN_MIRROR picks the mirror. Exits 77 (skipped, with the
# reason) when not root, when debootstrap, unshare or chroot is missing,
# when the mirror cannot be reached, or when mounts are not permitted.
set -euo pipefail
SRC=$1 BUILD=$2 BUNDLE=$(cd "$3" && pwd) WORK=$4
skip() { echo "SKIPPED: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, mount)"
for t in debootstrap unshare chroot mount wget; do
  command -v "$t" >/dev/null || PATH=$PATH:/usr/sbin:/sbin
  command -v "$t" >/dev/null || skip "$t not installed (scripts/install-deps.sh installs debootstrap)"
done

SUITE=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
SUITE=${SUITE:-bookworm}
MIRROR=${TESSERA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOT=${TESSERA_CHROOT:-/var/cache/tessera/$SUITE-minbase}
mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
flock 9
if [ ! -f "$ROOT/.tessera-complete" ]; then
  wget -q --timeout=20 --tries=1 -O /dev/null "$MIRROR/dists/$SUITE/Release" ||
    skip "the Debian mirror $MIRROR cannot be reached (set TESSERA_DEBIAN_MIRROR)"
  echo "making the chroot $ROOT (debootstrap --variant=minbase $SUITE)"
  rm -rf "$ROOT.tmp"
  if ! debootstrap --variant=minbase "$SUITE" "$ROOT.tmp" "$MIRROR" >"$ROOT.log" 2>&1; then
    tail -5 "$ROOT.log"
    rm -rf "$ROOT.tmp"
    skip "debootstrap $SUITE from $MIRROR failed (log: $ROOT.log)"
  fi
  touch "$ROOT.tmp/.tessera-complete"
  rm -rf "$ROOT" && mv "$ROOT.tmp" "$ROOT"
fi
flock -u 9

# The chroot really lacks what the bundle replaces.
installed=$(chroot "$ROOT" dpkg-query -W -f '${Package}\n' |
  grep -E 'llvm|mlir|openblas|blas|openmpi|libmpi|pmix|hwloc' || true)
[ -z "$installed" ] || { echo "FAIL: the chroot has $installed installed"; exit 1; }
found=$(find "$ROOT/usr" "$ROOT/lib" -name 'libLLVM*' -o -name 'libMLIR*' \
  -o -name 'libopenblas*' -o -name 'libmpi*' -o -name 'mpirun' 2>/dev/null | head -3)
[ -z "$found" ] || { echo "FAIL: the chroot has $found"; exit 1; }
echo "chroot: $ROOT, $(chroot "$ROOT" dpkg-query -W | wc -l) packages, none of LLVM, MLIR, OpenBLAS, Open MPI"

# The plan and the run outside.
rm -rf "$WORK" && mkdir -p "$WORK"
"$BUILD/tools/tessera-partition/tessera-partition" "$SRC/examples/gpt/gpt.onnx" \
  -o "$WORK/dp2.tsr" --dp 2 >"$WORK/partition.log" 2>&1 ||
  { cat "$WORK/partition.log"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
RUN_ARGS=(--steps 8)
mpirun -np 2 "$BUILD/tools/tessera-run/tessera-run" "$WORK/dp2.tsr" \
  --data "$SRC/examples/data/corpus.u16" "${RUN_ARGS[@]}" \
  --metrics "$WORK/host.jsonl" >"$WORK/host.log" 2>&1 ||
  { cat "$WORK/host.log"; exit 1; }

# Inside: the bundle, the plan and the data in a fresh folder of the chroot.
IN=$(mktemp -d "$ROOT/tmp/tessera-bundle.XXXXXX")
trap 'rm -rf "$IN"' EXIT
T=/tmp/$(basename "$IN")
cp -a "$BUNDLE" "$IN/bundle"
cp "$WORK/dp2.tsr" "$SRC/examples/data/corpus.u16" "$IN/"
# The CUDA libraries a CUDA build's tessera-run loads from outside the
# bundle (check_bundle.sh allows only these and glibc/libstdc++/libgcc).
mounts="mount -t proc proc '$ROOT/proc' && mount --rbind /sys '$ROOT/sys' &&
  mount -t tmpfs tmpfs '$ROOT/dev/shm'"
cuda_path=""
i=0
for dir in $(LD_LIBRARY_PATH="$BUNDLE/lib" ldd "$BUNDLE/bin/tessera-run" |
             awk '$1 ~ /^lib(cudart|cublas|cublasLt|nccl|cuda)\.so/ {print $3}' |
             xargs -r -n1 dirname | sort -u); do
  mkdir -p "$IN/cuda$i"
  mounts="$mounts && mount --bind '$dir' '$IN/cuda$i' && mount -o remount,ro,bind '$IN/cuda$i'"
  cuda_path="$cuda_path${cuda_path:+:}$T/cuda$i"
  echo "bind-mounted $dir (CUDA) read-only"
  i=$((i + 1))
done
set +e
unshare --mount --propagation private sh -c "$mounts" >/dev/null 2>&1 ||
  skip "mounts in a new mount namespace are not permitted here (unshare --mount)"
unshare --mount --propagation private sh -c "$mounts && exec chroot '$ROOT' \
  /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LD_LIBRARY_PATH='$cuda_path' \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 \
  $T/bundle/launch mpirun -np 2 tessera-run $T/dp2.tsr --data $T/corpus.u16 \
  ${RUN_ARGS[*]} --metrics $T/chroot.jsonl" 2>&1 | tee "$WORK/chroot.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || { echo "FAIL: the bundle's mpirun exited with $rc in the chroot"; exit 1; }
cp "$IN/chroot.jsonl" "$WORK/"

/usr/bin/python3 - "$WORK/host.jsonl" "$WORK/chroot.jsonl" <<'EOF'
import json, sys
host, inside = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
if len(host) != 8 or len(inside) != 8:
    sys.exit(f"FAIL: {len(host)} losses outside, {len(inside)} in the chroot (want 8)")
worst = 0.0
for i, (a, b) in enumerate(zip(host, inside)):
    rel = abs(a - b) / max(abs(a), 1e-30)
    worst = max(worst, rel)
    print(f"step {i}: loss outside {a:.9f}, in the chroot {b:.9f}")
if worst > 1e-6:
    sys.exit(f"FAIL: the losses differ by {worst:.3g} relative (> 1e-6)")
print(f"PASS: the chroot's 8 losses match the run outside (max rel diff {worst:.3g})")
EOF

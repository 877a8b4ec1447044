#!/usr/bin/env bash
# Installs every Debian package Tessera needs to build, test and run, if missing.
# Idempotent: does nothing when everything is present. debootstrap makes the
# minimal Debian chroot in which the bundle test (scripts/bundle-chroot-test.sh)
# runs `make bundle`'s tessera-run. clang-22 and its sanitizer runtimes
# (libclang-rt-22-dev: ASan, UBSan, LSan, libFuzzer) build `make sanitize`'s
# and `make fuzz`'s build-san. Slurm (slurmctld, slurmd, slurm-client) and
# munge run the multi-node tests' own cluster (test/multinode/slurm.sh); their
# packages' system services are neither started nor left enabled here: the
# test starts its own daemons with its own configuration.
set -euo pipefail
PKGS=(
  cmake ninja-build g++ make
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  libonnx-dev libonnx-testdata libprotobuf-dev protobuf-compiler
  libopenmpi-dev openmpi-bin libopenblas-dev libsleef-dev
  libgtest-dev
  clang-22 libclang-rt-22-dev
  debootstrap
  zlib1g-dev libzstd-dev libedit-dev libxml2-dev libffi-dev libcurl4-openssl-dev
  python3-torch python3-onnx python3-numpy python3-venv python3-pip
  slurmctld slurmd slurm-client munge
)
# Packages whose postinst would start (and enable) a system-wide daemon.
SERVICES=(munge slurmctld slurmd)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  # A policy-rc.d that refuses every start (as Debian's container images
  # have) keeps invoke-rc.d and deb-systemd-invoke from starting munged,
  # slurmctld or slurmd during the installation; removed afterwards when it
  # was ours.
  policy=/usr/sbin/policy-rc.d
  if [ ! -e $policy ]; then
    trap "$SUDO rm -f $policy" EXIT
    printf '#!/bin/sh\n# install-deps.sh: no service starts while installing\nexit 101\n' |
      $SUDO tee $policy >/dev/null
    $SUDO chmod 755 $policy
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # Under systemd the units were enabled for the next boot: disable those
  # just installed (and stop them, should anything have started them).
  if [ -d /run/systemd/system ]; then
    for s in "${SERVICES[@]}"; do
      [[ " ${missing[*]} " == *" $s "* ]] || continue
      $SUDO systemctl disable --now "$s" >/dev/null 2>&1 || true
    done
  fi
else
  echo "install-deps: all packages present"
fi

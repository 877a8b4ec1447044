#!/usr/bin/env bash
# Installs every Debian package Tessera needs to build, test and run, if missing.
# Idempotent: does nothing when everything is present. debootstrap makes the
# minimal Debian chroot in which the bundle test (scripts/bundle-chroot-test.sh)
# runs `make bundle`'s tessera-run. clang-22 and its sanitizer runtimes
# (libclang-rt-22-dev: ASan, UBSan, LSan, libFuzzer) build `make sanitize`'s
# and `make fuzz`'s build-san.
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
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

#!/usr/bin/env bash
# Installs what rgpu needs to build and test, if it is missing (idempotent).
# Debian 12 packages only; the CUDA 13 toolkit (nvcc, headers) must already be
# installed (it is not packaged by Debian): set CUDA_HOME if it is not in
# /usr/local/cuda.
set -euo pipefail

packages=(cmake g++ make pkg-config openssl clang
  libasio-dev capnproto libcapnp-dev liblz4-dev libzstd-dev libssl-dev
  libtomlplusplus-dev libspdlog-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev libfftw3-dev libxxhash-dev systemd nlohmann-json3-dev etcd-server etcd-client llvm-14-dev
  libsystemd-dev libyaml-cpp-dev dpkg-dev chromium fonts-dejavu-core)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -x "$cuda_home/bin/nvcc" ] || [ ! -f "$cuda_home/include/cuda_runtime_api.h" ]; then
  echo "setup: the CUDA 13 toolkit was not found in $cuda_home (set CUDA_HOME)." >&2
  echo "setup: rgpu needs its headers to build and nvcc for the examples and end-to-end tests." >&2
  exit 1
fi

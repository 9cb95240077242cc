#!/usr/bin/env bash
# Installs everything fxfuse needs to build and test, from Debian's registry only.
# Idempotent: packages already present are skipped quickly.
set -euo pipefail
PKGS=(bazel-bootstrap protobuf-compiler libprotobuf-dev nlohmann-json3-dev libsimdjson-dev
      libzip-dev libssl-dev libfmt-dev libcli11-dev catch2 libopenblas-dev llvm-14-tools graphviz clang-14 libclang-rt-14-dev
      python3 zlib1g-dev)
if [[ "${FXFUSE_WITH_TORCH:-0}" == 1 ]]; then PKGS+=(python3-torch); fi
# Headless browser for the HTML report test (tests/inspect); tools/test.sh (CI) sets FXFUSE_WITH_TORCH=1 too.
if [[ "${FXFUSE_WITH_TORCH:-0}" == 1 || "${FXFUSE_WITH_BROWSER:-0}" == 1 ]]; then PKGS+=(chromium fonts-dejavu-core); fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  # Say what is installed and let apt show its progress.
  echo "install_deps: installing ${#missing[@]} Debian package(s): ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
  echo "install_deps: installed ${missing[*]}"
else
  echo "install_deps: all ${#PKGS[@]} Debian packages already installed"
fi
if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install_deps: warning: CUDA toolkit not found at /usr/local/cuda; GPU targets will not build" >&2
fi

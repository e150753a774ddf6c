#!/usr/bin/env bash
# Installs the build dependencies from the distribution's packages (Debian 12 or Ubuntu 24.04).
# Packages already present are left alone, so this also works on a machine that reaches no
# package registry, as long as everything is already installed (the GPU machine).
#
# The CUDA toolkit is not installed here: it comes from NVIDIA's installer or the machine image.
# The script only checks that nvcc is present and says what to do if it is not.
set -euo pipefail

packages=(cmake ninja-build g++ libfmt-dev libcli11-dev nlohmann-json3-dev catch2 git)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "all build dependencies are installed"
fi

if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "note: nvcc is at /usr/local/cuda/bin but not on PATH; the scripts add it"
  else
    echo "error: the CUDA toolkit (nvcc) is not installed; install CUDA 12.8 or newer (tested with 13.0)" >&2
    exit 1
  fi
fi

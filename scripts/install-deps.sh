#!/usr/bin/env bash
# Installs the build dependencies from the distribution's packages (Debian 12 or Ubuntu 24.04).
# What is already present is left alone, so this also works on a machine that reaches no package
# registry, as long as everything is already there (the GPU machine).
#
# The CUDA toolkit is not installed here: it comes from NVIDIA's installer or the machine image.
# The script only checks that nvcc is present and says what to do if it is not.
set -euo pipefail

# package → a file that proves it is installed (however it got there)
declare -A probe=(
  [cmake]=/usr/bin/cmake
  [ninja-build]=/usr/bin/ninja
  [g++]=/usr/bin/g++
  [git]=/usr/bin/git
  [libfmt-dev]=/usr/include/fmt/core.h
  [libcli11-dev]=/usr/include/CLI/CLI.hpp
  [nlohmann-json3-dev]=/usr/include/nlohmann/json.hpp
  [catch2]=/usr/include/catch2
)

missing=()
for p in "${!probe[@]}"; do
  [ -e "${probe[$p]}" ] || command -v "$(basename "${probe[$p]}")" >/dev/null 2>&1 || missing+=("$p")
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

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "error: the CUDA toolkit (nvcc) is not installed; install CUDA 12.8 or newer (tested with 13.0)" >&2
  exit 1
fi

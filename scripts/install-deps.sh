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

# The cuDNN frontend's headers (header-only C++), for the cuDNN attention peer row. PyPI's
# nvidia-cudnn-frontend wheel ships them under include/; they are unpacked into .deps/ (ignored by
# git), where CMake looks (common/peers/cudnn.cmake). cuDNN itself comes from the CUDA toolkit's
# directory, CUDNN_ROOT, or PyPI's nvidia-cudnn-cu12/-cu13 (PyTorch installs it). Nothing here is
# required: without it the ladder prints "cudnn: not built" and how to enable it.
# A machine without network (the GPU machine) gets .deps/ copied along with the tree.
cudnn_frontend_version=${LADDER_CUDNN_FRONTEND_VERSION:-1.32.0}
fe_dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/cudnn_frontend"
if [ -f "$fe_dir/include/cudnn_frontend.h" ]; then
  echo "cuDNN frontend headers: $fe_dir/include"
elif python3 -m pip --version >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  # The headers are the same in every wheel of a version: ask for one fixed wheel, whatever this
  # machine's Python or processor.
  if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
       --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 -d "$tmp" \
       "nvidia-cudnn-frontend==$cudnn_frontend_version" >"$tmp/pip.log" 2>&1 &&
     python3 - "$tmp" "$fe_dir" <<'PY'
import pathlib, shutil, sys, zipfile
tmp, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(tmp.glob("nvidia_cudnn_frontend-*.whl"))
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit(f"{wheel.name} has no include/cudnn_frontend.h")
    staging = dest.with_name(dest.name + ".partial")  # renamed into place once complete
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    for n in names:
        z.extract(n, staging)
staging.rename(dest)
print(f"cuDNN frontend headers: {dest / 'include'} ({len(names)} files from {wheel.name})")
PY
  then
    rm -rf "$tmp"
  else
    echo "note: could not fetch the cuDNN frontend headers (nvidia-cudnn-frontend==$cudnn_frontend_version" \
         "from PyPI; see $tmp/pip.log); the ladder will build without the cuDNN row" >&2
  fi
else
  echo "note: no pip for python3, so the cuDNN frontend headers were not fetched; the ladder will" \
       "build without the cuDNN row (install python3-pip and run this again to add it)" >&2
fi

# cuobjdump and the nvdisasm it runs for -sass, for lab L09's SASS check (labs/L09_wait_placement/):
# the toolkit's own where it has them; else the one binary of each of PyPI's nvidia-cuda-cuobjdump
# and nvidia-cuda-nvdisasm wheels, unpacked into .deps/cuobjdump/bin (ignored by git), where the
# lab's checker and CMake look. Nothing here is required: without them lab L09 compiles the
# learner's file and says SKIPPED (exit 77) instead of reading the SASS.
sass_tools_version=${LADDER_SASS_TOOLS_VERSION:-13.5.37}
ob_dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/cuobjdump"
nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
for tool in cuobjdump nvdisasm; do
  if command -v "$tool" >/dev/null 2>&1; then
    echo "$tool: $(command -v "$tool")"
  elif [ -x "$nvcc_dir/$tool" ]; then
    echo "$tool: $nvcc_dir/$tool"
  elif [ -x "$ob_dir/bin/$tool" ]; then
    echo "$tool: $ob_dir/bin/$tool"
  elif python3 -m pip --version >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    if python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" \
         "nvidia-cuda-$tool==$sass_tools_version" >"$tmp/pip.log" 2>&1 &&
       python3 - "$tmp" "$ob_dir" "$tool" <<'PY'
import pathlib, sys, zipfile
tmp, dest, tool = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
wheel = next(tmp.glob(f"nvidia_cuda_{tool}-*.whl"))
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(f"/bin/{tool}")]
    if len(names) != 1:
        sys.exit(f"{wheel.name} has no single bin/{tool}")
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    target = dest / "bin" / tool
    partial = dest / "bin" / f"{tool}.partial"  # renamed into place once complete
    partial.write_bytes(z.read(names[0]))
    partial.chmod(0o755)
    partial.rename(target)
print(f"{tool}: {target} (from {wheel.name})")
PY
    then
      rm -rf "$tmp"
    else
      echo "note: could not fetch $tool (nvidia-cuda-$tool==$sass_tools_version from PyPI; see" \
           "$tmp/pip.log); lab L09 will compile your file but not read its SASS" >&2
    fi
  else
    echo "note: no pip for python3, so $tool was not fetched; lab L09 will compile your file but not" \
         "read its SASS (install python3-pip and run this again, or put $tool on PATH)" >&2
  fi
done

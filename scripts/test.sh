#!/usr/bin/env bash
# The README's test command: installs what is missing, configures, builds and runs every test.
# Without a GPU the GPU tests are reported as skipped (never as passed).
#   scripts/test.sh          # preset "ci" (no GPU needed) unless a GPU is present, then "gpu"
#   scripts/test.sh ci|gpu
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/install-deps.sh
preset=${1:-}
if [ -z "$preset" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then preset=gpu; else preset=ci; fi
fi
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset" -j 2

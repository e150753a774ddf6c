#!/usr/bin/env bash
# The README's ladder command: installs what is missing, builds for this machine's GPU and runs
# the whole ladder, printing the table. Extra arguments go to `ladder` (try --help).
#   scripts/ladder.sh                       # every step on the default shapes
#   scripts/ladder.sh --steps 3-6 --n 8192 --causal --json out.json
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
if ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then
  echo "error: no NVIDIA GPU found (nvidia-smi lists none). The ladder needs a GPU to run;" >&2
  echo "       on this machine you can build and run the CPU tests with scripts/test.sh." >&2
  exit 3
fi
scripts/install-deps.sh
cmake --preset gpu >/dev/null
cmake --build --preset gpu -j "$(nproc)"
exec build/gpu/bin/ladder "$@"

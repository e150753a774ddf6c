#!/usr/bin/env bash
# The README's test command: installs what is missing, configures, builds and runs every test.
# Without a GPU the GPU tests are reported as skipped (never as passed).
#   scripts/test.sh          # preset "ci" (no GPU needed) unless a GPU is present, then "gpu"
#   scripts/test.sh ci|gpu
#   scripts/test.sh --full   # the GPU tests on the full grid, the one scripts/round.sh's test stage
#                            # runs (every N of the rounds), instead of the quick grid
# The GPU tests' grid (tests/gpu/gpu_support.hpp): quick by default — every step and variant on
# ragged N for every tile, both masks, both dtypes, B·H of 1 and 3, the K/V ring wrapping, and for
# the variants that serve them the forward's and the backward's GQA and varlen grids — or full with
# --full (or LADDER_TEST_GRID=full in the environment; the backward's varlen grid then adds a
# sequence of 16384).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="" grid=${LADDER_TEST_GRID:-quick}
for arg in "$@"; do
  case $arg in
    --full) grid=full ;;
    ci|gpu) preset=$arg ;;
    *) echo "usage: scripts/test.sh [--full] [ci|gpu]" >&2; exit 2 ;;
  esac
done
case $grid in
  quick|full) ;;
  *) echo "scripts/test.sh: LADDER_TEST_GRID must be quick or full, not '$grid'" >&2; exit 2 ;;
esac
export LADDER_TEST_GRID=$grid
source scripts/env.sh
scripts/install-deps.sh
if [ -z "$preset" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then preset=gpu; else preset=ci; fi
fi
# The fp64 references the GPU test entries share (common/reference_cache.hpp): each shape's is
# computed once per run, not once per step; emptied first, so it never outgrows one run.
export LADDER_REFERENCE_CACHE=${LADDER_REFERENCE_CACHE:-$PWD/build/$preset/reference-cache}
rm -rf "$LADDER_REFERENCE_CACHE"
start=$SECONDS
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$(nproc)"
built=$SECONDS
# The GPU tests are mostly CPU work (the fp64 reference runs on every core), all on one GPU: as
# many at once as there are cores, up to 8 (on 16 cores, more only queue for the same cores and
# the same GPU). The time limit is for the entries without their own (the GPU entries have theirs,
# set for the full grid in tests/CMakeLists.txt).
cores=$(nproc)
jobs=$((cores < 8 ? cores : 8))
echo "scripts/test.sh: preset $preset, $grid grid, ctest -j $jobs"
rc=0
ctest --preset "$preset" -j "$jobs" --timeout 900 || rc=$?
echo "scripts/test.sh: $grid grid; build $((built - start)) s, tests $((SECONDS - built)) s"
exit $rc

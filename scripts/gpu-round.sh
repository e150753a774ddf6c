#!/usr/bin/env bash
# One GPU round on a machine with a GPU, in one go: build, GPU tests, ladder, benchmarks, labs,
# peers (PyTorch SDPA), sanitizer, profiles — in that order, the most needed first, so a round cut
# short by a time limit loses the least. Everything lands in OUT (logs, JSON), at most a handful of files,
# so a remote runner can bring them back.
#
#   scripts/gpu-round.sh OUT [stage ...]
#   stages: build test sanitize ladder bench peers labs ncu   (default: build test sanitize ladder)
#
# Results land as dated files (OUT/YYYY-MM-DD-ladder-default.json, ...-bench-d64.json, ...): copy
# them to docs/results/<gpu>/ unchanged; a later round writes new files, never over these.
# Environment: LADDER_GIT_COMMIT names the commit in the results when the tree has no .git;
# TEST_REGEX limits the ctest entries run besides gpu_large (default: all);
# SANITIZE_STEPS ("06 99") limits the sanitizer to those steps' executables (default: all) and
# SANITIZE_TOOLS ("memcheck racecheck") its tools (default: all four); BENCH_STEPS (default 4-6)
# the steps of the benchmark grids, BENCH_N_D64 / BENCH_N_D128 their sequence lengths.
# On a machine without network, carry .deps (the cuDNN frontend's headers, scripts/install-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/cudnn-env.sh
out=${1:?usage: scripts/gpu-round.sh OUT [stages...]}
shift
stages=("$@")
((${#stages[@]})) || stages=(build test sanitize ladder)
mkdir -p "$out/logs"
day=$(date -u +%F)
logs="$out/logs"
has() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

if [ -z "${LADDER_GIT_COMMIT:-}" ]; then
  LADDER_GIT_COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  export LADDER_GIT_COMMIT
fi
note "round at $(date -u +%FT%TZ), commit $LADDER_GIT_COMMIT, stages: ${stages[*]}"
nvidia-smi >"$logs/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.limit --format=csv >>"$summary" 2>&1

bin=build/gpu/bin
if has build; then
  start=$SECONDS
  # shellcheck disable=SC2086
  cmake --preset gpu -DLADDER_PTXAS_VERBOSE=ON $LADDER_CUDNN_ARGS >"$logs/configure.log" 2>&1 &&
    cmake --build --preset gpu -j "$(nproc)" >"$logs/build.log" 2>&1
  rc=$?
  note "build: rc=$rc in $((SECONDS - start)) s; $(grep -m1 -i 'cudnn attention peer' "$logs/configure.log")"
  if [ $rc -ne 0 ]; then  # nothing after this can run: stop, and bring the log back
    grep -E -B2 -A6 "error|FAILED" "$logs/build.log" | head -60
    tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
    exit 1
  fi
  # The compiler's resource report, one line per kernel: registers, spills, shared memory.
  grep -E "Compiling entry|Used [0-9]+ registers|spill stores" "$logs/build.log" >"$logs/ptxas.txt" || true
fi

if has test; then
  start=$SECONDS
  # Correctness entries in parallel (they time nothing); gpu_large alone, since it holds the
  # timing-noise test.
  # TEST_REGEX limits the first part to matching tests (default: all).
  (cd build/gpu && ctest --output-on-failure -j 3 --timeout 1500 -E '^gpu_large$' -R "${TEST_REGEX:-.}" &&
    ctest --output-on-failure --timeout 1500 -R '^gpu_large$') >"$logs/ctest.log" 2>&1
  rc=$?
  note "tests: rc=$rc in $((SECONDS - start)) s; $(grep -E 'tests passed|tests failed' "$logs/ctest.log" | tail -1)"
  grep -E "Skipped|Failed|\*\*\*" "$logs/ctest.log" | head -20 | tee -a "$summary"
fi

if has ladder; then
  start=$SECONDS
  # Through the README's own command, so the round also proves it works on this machine.
  scripts/ladder.sh --json "$out/$day-ladder-default.json" >"$logs/ladder.log" 2>&1
  rc=$?
  note "ladder (scripts/ladder.sh): rc=$rc in $((SECONDS - start)) s"
  # --save: the inputs and outputs as .npy, checked against PyTorch where it is installed.
  "$bin/ladder" --track attention --n 1000 --d 64,128 --mask both --heads 2 --no-time --save "$out/npy" \
    >"$logs/save.log" 2>&1 && python3 scripts/check_npy.py "$out/npy" >>"$logs/save.log" 2>&1
  rc=$?
  note "--save and scripts/check_npy.py: rc=$rc; $(tail -1 "$logs/save.log")"
  rm -rf "$out/npy"
  cat "$logs/ladder.log"
fi

# Issue 3's grids: the seed's (B=4, H=8, D=64) and the FlashAttention papers' (16k tokens, H=16,
# D=128). The slow rungs (00 naive, 03 FA v1) only on the seed's grid.
if has bench; then
  start=$SECONDS
  bench_steps=${BENCH_STEPS:-4-6}
  "$bin/ladder" --track attention --steps "$bench_steps" --b 4 --heads 8 --d 64 \
    --n "${BENCH_N_D64:-1024,4096,8192}" --mask both --json "$out/$day-ladder-d64.json" \
    >"$logs/bench-d64.log" 2>&1
  note "bench d64 (steps $bench_steps + peers): rc=$?"
  "$bin/ladder" --track attention --steps "$bench_steps" --tokens 16384 --heads 16 --d 128 \
    --n "${BENCH_N_D128:-1024,4096,16384}" --mask both --json "$out/$day-ladder-d128.json" \
    >"$logs/bench-d128.log" 2>&1
  note "bench d128 (steps $bench_steps + peers): rc=$?"
  note "bench total $((SECONDS - start)) s"
fi

if has labs; then
  start=$SECONDS
  scripts/labs-round.sh "$out/labs" >"$logs/labs.log" 2>&1
  rc=$?
  note "labs: rc=$rc in $((SECONDS - start)) s"
  tail -15 "$logs/labs.log" | tee -a "$summary"
  [ -d "$out/labs" ] && { cp -r "$out/labs" "$logs/labs-out"; rm -rf "$out/labs"; }
fi

if has peers; then
  start=$SECONDS
  PYTHONUNBUFFERED=1 python3 scripts/peers.py --out "$out/$day-peers.json" >"$logs/peers.log" 2>&1
  rc=$?
  note "peers: rc=$rc in $((SECONDS - start)) s"
fi

if has sanitize; then
  start=$SECONDS
  : >"$logs/sanitize.log"
  for exe in "$bin"/step*; do
    if [ -n "${SANITIZE_STEPS:-}" ]; then
      num=$(basename "$exe" | sed -E 's/^step([0-9]+)_.*/\1/')
      [[ " $SANITIZE_STEPS " == *" $num "* ]] || continue
    fi
    # shellcheck disable=SC2086
    scripts/sanitize.sh "$exe" ${SANITIZE_TOOLS:-} >>"$logs/sanitize.log" 2>&1
    rc=$?
    note "sanitize $(basename "$exe"): rc=$rc"
  done
  note "sanitizer total $((SECONDS - start)) s"
fi

if has ncu; then
  start=$SECONDS
  scripts/profile.sh "$bin" "$out" >"$logs/ncu.log" 2>&1
  rc=$?
  note "ncu: rc=$rc in $((SECONDS - start)) s"
fi

tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
note "done"

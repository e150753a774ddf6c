#!/usr/bin/env bash
# The three-consumer step's (22's) GPU round, in one device call: the GPU tests of step 22 (ctest's gpu_step22 entry, and
# the large ragged problem restricted to it), compute-sanitizer's memcheck, racecheck and synccheck
# on a small ragged problem, the ladder at the issue's D = 64 shapes with step 21's main variant,
# cuDNN and the fp16 GEMM ceiling in the same process, and Nsight Compute's tensor-pipe activity
# and stall reasons of steps 21 and 22 at D = 64. Every stage runs under a timeout, so a kernel
# that hangs costs its timeout, not the call.
#
#   scripts/step21-round.sh OUT [stage ...]
#   stages: test sanitize ladder ncu bf16   (default); also waves (a many-wave D = 64 shape) and
#           ncu2 (Nsight Compute's scheduler and pipe view); bf16 runs only where the binary has it
#
# The binaries (`ladder`, `gpu_tests`, built for sm_90a with cuDNN) come from LADDER_STEP21_BIN,
# built on a machine without the GPU and carried (the device call then spends no time compiling);
# where they do not run, the round builds them in build/step21-gpu.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source scripts/cudnn-env.sh
out=${1:?usage: scripts/step21-round.sh OUT [stages...]}
shift
stages=("$@")
((${#stages[@]})) || stages=(test sanitize ladder ncu bf16)
has() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
logs="$out/logs"
mkdir -p "$logs"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

note "step 22 round at $(date -u +%FT%TZ), commit ${LADDER_GIT_COMMIT:-unknown}, stages ${stages[*]}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit \
  --format=csv >>"$summary" 2>&1

bin=${LADDER_STEP21_BIN:-.h1-bin}
# Carried compressed (the two binaries are mostly device code, 57 MB, the tree's limit is 64 MiB).
[ -f "$bin/bin.tgz" ] && [ ! -x "$bin/ladder" ] && tar -xzf "$bin/bin.tgz" -C "$bin"
start=$SECONDS
if "$bin/ladder" --list >"$logs/list.log" 2>&1 && { ! has test || [ -x "$bin/gpu_tests" ]; }; then
  note "binaries: the carried ones in $bin"
else
  note "binaries: the carried ones do not run here ($(head -c 300 "$logs/list.log")); building"
  build=build/step21-gpu
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DLADDER_BUILD_TESTS=ON $LADDER_CUDNN_ARGS >"$logs/configure.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target ladder gpu_tests >"$logs/build.log" 2>&1
  rc=$?
  note "build: rc=$rc in $((SECONDS - start)) s"
  [ $rc -eq 0 ] || { tail -40 "$logs/build.log"; exit 1; }
  bin=$build/bin
  cp "$build/tests/gpu_tests" "$bin/" 2>/dev/null
fi
"$bin/ladder" --list 2>/dev/null | grep -E "^ *(21|22)/|three_consumers" >>"$summary"

# A smoke test first: one small ragged problem per mask and D under a short timeout. A kernel that
# hangs stops the round here instead of costing every stage's timeout.
start=$SECONDS
timeout 60 "$bin/ladder" --steps 22 --no-peers --no-time --no-resources --b 1 --heads 3 --n 113,1000 \
  --d 64,128 --mask both >"$logs/smoke.log" 2>&1
rc=$?
note "smoke (step 22, N=113,1000, D=64, both masks): rc=$rc in $((SECONDS - start)) s"
grep -E "^ *22/" "$logs/smoke.log" | head -12 | tee -a "$summary"
if [ $rc -ne 0 ]; then
  tail -20 "$logs/smoke.log" | tee -a "$summary"
  tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
  exit 1
fi

# The GPU tests (ctest's gpu_step22 entry: every variant of step 22 over the whole shape grid) and
# the large ragged problem B=6 H=9 N=4224 D=64 (ctest's gpu_large, restricted to step 22), side by
# side with the sanitizer: they check, they do not time.
sanitize() {
  local tool extra rc=0 r sanitizer
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    echo "== step 22: $tool"
    timeout 90 "$sanitizer" --tool "$tool" --error-exitcode 99 "${extra[@]}" "$bin/ladder" --steps 22 \
      --no-peers --no-time --no-resources --b 1 --heads 2 --n 113 --d 64,128 --mask both >"$logs/san-$tool.log" 2>&1
    r=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|=========.*(Error|error|hazard|Hazard)" "$logs/san-$tool.log" | head -8
    grep -E "^ *22/" "$logs/san-$tool.log" | head -8
    [ $r -eq 0 ] || { rc=1; echo "rc=$r"; tail -8 "$logs/san-$tool.log"; }
  done
  return $rc
}
if has test || has sanitize; then
  start=$SECONDS
  pids=()
  if has test; then
    (LADDER_TEST_STEP=22 timeout 150 "$bin/gpu_tests" "~[large]~[timing]" >"$logs/test.log" 2>&1; echo $? >"$logs/test.rc") &
    pids+=($!)
    (LADDER_TEST_STEP=22 timeout 150 "$bin/gpu_tests" "[large]" >"$logs/test-large.log" 2>&1; echo $? >"$logs/test-large.rc") &
    pids+=($!)
  fi
  if has sanitize; then
    (sanitize >"$logs/sanitize.log" 2>&1; echo $? >"$logs/sanitize.rc") &
    pids+=($!)
  fi
  wait "${pids[@]}"
  if has test; then
    for t in test test-large; do
      note "gpu $t step 22: rc=$(cat "$logs/$t.rc"); $(grep -E 'test cases|All tests passed' "$logs/$t.log" | tail -1)"
      [ "$(cat "$logs/$t.rc")" = 0 ] ||
        grep -E "FAILED|with expansion|on B=|error|Timeout|timed out" "$logs/$t.log" | head -16 | tee -a "$summary"
    done
  fi
  if has sanitize; then
    note "sanitize step 22 (memcheck racecheck synccheck, N=113, D=64, both masks): rc=$(cat "$logs/sanitize.rc")"
    cat "$logs/sanitize.log" >>"$summary"
  fi
  note "tests and sanitizer: $((SECONDS - start)) s"
fi

variants=(--variant 21/snake --variant 22/three_consumers_3stage --variant 22/three_consumers)
common=(--track attention --steps 21,22 "${variants[@]}" --ref-rows 256 --b 4 --heads 8 --d 64 --n 4096,8192 --mask both)
if has ladder; then
  start=$SECONDS
  timeout 120 "$bin/ladder" "${common[@]}" --json "$out/ladder-d64.json" >"$logs/ladder-d64.log" 2>&1
  note "ladder B=4 H=8 N=4096,8192 D=64 both masks: rc=$? in $((SECONDS - start)) s"
  cat "$logs/ladder-d64.log"
fi

# Nsight Compute, one launch per variant at B=4 H=8 N=4096 D=64 non-causal, clocks untouched:
# speed of light, the tensor pipe's activity, and the stall reasons.
if has ncu; then
  start=$SECONDS
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for id in 21/snake 22/three_consumers_3stage; do
    s=${id%%/*}
    kernel=$([ "$s" = 21 ] && echo persistent_kernel || echo three_consumers_kernel)
    timeout 60 "$ncu" --clock-control none -k "regex:$kernel" --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section LaunchStats \
      --metrics sm__inst_executed_pipe_tensor_op_gmma.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio \
      "$bin/ladder" --steps "$s" --variant "$id" --no-peers --b 4 --heads 8 --n 4096 --d 64 --mask none \
      --no-time --no-check --no-resources >"$logs/ncu.log" 2>&1
    note "ncu $id D=64: rc=$?"
    { echo "==== $id B=4 H=8 N=4096 D=64 non-causal"; cat "$logs/ncu.log"; } >>"$out/ncu.txt"
  done
  note "ncu total $((SECONDS - start)) s"
fi

# Many waves (B=16 H=16 N=4096 D=64: 5632 tiles of 192 rows on 132 SMs, 42.7 per SM, against
# 8192 of 128 rows, 62.1): the tile count's rounding costs under 2% here, so the rows compare the
# kernels' throughput per tile, apart from the issue's shapes' last partial wave.
if has waves; then
  start=$SECONDS
  timeout 120 "$bin/ladder" --track attention --steps 21,22 "${variants[@]}" --ref-rows 256 --b 16 --heads 16 \
    --d 64 --n 4096 --mask both --json "$out/ladder-d64-waves.json" >"$logs/ladder-waves.log" 2>&1
  note "ladder B=16 H=16 N=4096 D=64 both masks: rc=$? in $((SECONDS - start)) s"
  cat "$logs/ladder-waves.log"
fi

# Nsight Compute's issue-side view at the issue's shape: the schedulers (eligible warps, issue
# slots), the compute workload (the busiest pipe), and, in a call of its own in case a name is
# not known to this ncu, the MUFU (xu), FMA and ALU pipes' shares.
if has ncu2; then
  start=$SECONDS
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  for id in 21/snake 22/three_consumers_3stage 22/three_consumers; do
    s=${id%%/*}
    kernel=$([ "$s" = 21 ] && echo persistent_kernel || echo three_consumers_kernel)
    shape=(--steps "$s" --variant "$id" --no-peers --b 4 --heads 8 --n 4096 --d 64 --mask none --no-time --no-check --no-resources)
    timeout 60 "$ncu" --clock-control none -k "regex:$kernel" --launch-count 1 --section SchedulerStats \
      --section ComputeWorkloadAnalysis --section SpeedOfLight \
      --metrics sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active "$bin/ladder" "${shape[@]}" >"$logs/ncu2.log" 2>&1
    note "ncu (schedulers, compute workload) $id D=64: rc=$?"
    { echo "==== $id B=4 H=8 N=4096 D=64 non-causal: schedulers, compute workload"; cat "$logs/ncu2.log"; } >>"$out/ncu2.txt"
    timeout 60 "$ncu" --clock-control none -k "regex:$kernel" --launch-count 1 \
      --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.sum,smsp__issue_active.avg.pct_of_peak_sustained_active \
      "$bin/ladder" "${shape[@]}" >"$logs/ncu3.log" 2>&1
    note "ncu (pipes) $id D=64: rc=$?"
    { echo "==== $id B=4 H=8 N=4096 D=64 non-causal: pipes"; cat "$logs/ncu3.log"; } >>"$out/ncu2.txt"
  done
  note "ncu2 total $((SECONDS - start)) s"
fi

# bf16, where the harness and the step have it (the lead's bf16 work): the same rows and shapes.
if has bf16; then
  if "$bin/ladder" --help 2>&1 | grep -q -- "--dtype"; then
    start=$SECONDS
    timeout 100 "$bin/ladder" "${common[@]}" --dtype bf16 --json "$out/ladder-d64-bf16.json" >"$logs/ladder-bf16.log" 2>&1
    note "ladder bf16 B=4 H=8 D=64: rc=$? in $((SECONDS - start)) s"
    cat "$logs/ladder-bf16.log"
  else
    note "bf16: this ladder has no --dtype; skipped"
  fi
fi

tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
note "done"

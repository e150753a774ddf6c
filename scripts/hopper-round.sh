#!/usr/bin/env bash
# Part IV's GPU round (steps 16-22, sm_90a), in one device call: build (or use carried binaries),
# the GPU tests of each Hopper step, compute-sanitizer on a small ragged problem, the ladder at the
# issue's shapes with step 06 beside it, PyTorch's SDPA (FlashAttention-2 and cuDNN backends) and
# the fp16 GEMM ceiling measured in the same call, and Nsight Compute on the top step. Every stage
# runs under a timeout, so a kernel that hangs costs its timeout, not the call.
#
#   scripts/hopper-round.sh OUT [stage ...]
#   stages: build test sanitize ladder peers crosscheck ncu   (default: all)
#   crosscheck: scripts/peers.py times the ladder's main Hopper variants and its cuDNN row through
#   libladder_capi.so beside PyTorch's SDPA backends, in one process, by one method (graph replays)
#   (test and sanitize run concurrently, they only check; ladder, peers and ncu time, alone)
#
# Environment: LADDER_HOPPER_BIN    a folder holding a prebuilt `ladder` and `gpu_tests` (carried to
#                                   the GPU machine to save its build time); used when they run
#                                   there, else the build stage builds them in LADDER_HOPPER_BUILD
#              LADDER_HOPPER_BUILD  build folder (default build/hopper-gpu)
#              LADDER_HOPPER_STEPS  steps to test and time (default "16 17 18 19 20 21 22")
#              LADDER_TEST_STEPS    steps to test and sanitize (default LADDER_HOPPER_STEPS)
#              LADDER_NCU_IDS       variants profiled by ncu (default "18/ws 20/persistent")
#              LADDER_DTYPE         fp16 (default) or bf16: the element type of the ladder and peers
#                                   stages (bf16 runs only the variants that declare it, with cuDNN
#                                   and PyTorch in bf16 beside them; files get a -bf16 suffix)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out=${1:?usage: scripts/hopper-round.sh OUT [stages...]}
shift
stages=("$@")
((${#stages[@]})) || stages=(build test sanitize ladder peers crosscheck ncu)
has() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
mkdir -p "$out/logs"
logs="$out/logs"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

build=${LADDER_HOPPER_BUILD:-build/hopper-gpu}
read -r -a steps <<<"${LADDER_HOPPER_STEPS:-16 17 18 19 20 21 22}"
read -r -a test_steps <<<"${LADDER_TEST_STEPS:-${steps[*]}}"
read -r -a ncu_ids <<<"${LADDER_NCU_IDS:-18/ws 20/persistent}"
dtype=${LADDER_DTYPE:-fp16}
suffix=""
[ "$dtype" = fp16 ] || suffix="-$dtype"
bin="$build/bin"
tests="$build/tests/gpu_tests"
capi="$build/lib/libladder_capi.so"
read -r -a crosscheck_ids <<<"${LADDER_CROSSCHECK_IDS:-20/persistent 21/snake 22/three_consumers 99/cudnn}"
note "hopper round at $(date -u +%FT%TZ), commit ${LADDER_GIT_COMMIT:-unknown}, steps ${steps[*]}, stages ${stages[*]}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit \
  --format=csv >>"$summary" 2>&1

# cuDNN for the ladder's in-process peer row, where the machine has it only in PyTorch's wheels.
cudnn_lib=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), 'lib'))" 2>/dev/null)
[ -n "$cudnn_lib" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cudnn_lib"

if has build; then
  start=$SECONDS
  carried=${LADDER_HOPPER_BIN:-}
  if [ -n "$carried" ] && "$carried/ladder" --list >/dev/null 2>"$logs/carried.log" && [ -x "$carried/gpu_tests" ]; then
    bin=$carried
    tests=$carried/gpu_tests
    capi=$carried/libladder_capi.so
    note "build: using the carried ladder and gpu_tests in $carried"
  else
    [ -n "$carried" ] && note "build: the carried binaries do not run here ($(head -c 300 "$logs/carried.log")); building"
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DLADDER_BUILD_TESTS=ON -DLADDER_PTXAS_VERBOSE=ON >"$logs/configure.log" 2>&1 &&
      cmake --build "$build" -j "$(nproc)" --target ladder gpu_tests ladder_capi >"$logs/build.log" 2>&1
    rc=$?
    note "build: rc=$rc in $((SECONDS - start)) s"
    [ $rc -eq 0 ] || { tail -40 "$logs/build.log"; exit 1; }
    grep -E "Compiling entry|Used [0-9]+ registers|spill stores|C75[0-9][0-9]" "$logs/build.log" >"$out/ptxas.txt" || true
  fi
fi

# scripts/sanitize.sh's small ragged problem (N = 113, two heads, both D, both masks), run through
# the ladder so that one executable serves every step; fails on any report.
sanitize_step() {
  local s=$1 tool r rc=0 sanitizer extra
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    echo "== step $s: $tool"
    timeout 240 "$sanitizer" --tool "$tool" --error-exitcode 99 "${extra[@]}" "$bin/ladder" --steps "$s" \
      --no-peers --no-time --no-resources --b 1 --heads 2 --n 113 --d 64,128 --mask both \
      --dtype fp16,bf16 >"/tmp/san.$s.$tool" 2>&1
    r=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|=========.*(Error|error|hazard|Hazard)" "/tmp/san.$s.$tool" | head -8
    [ $r -eq 0 ] || { rc=1; echo "rc=$r"; tail -5 "/tmp/san.$s.$tool"; }
  done
  return $rc
}

# The GPU tests and the sanitizer of every step run side by side (they check, they do not time):
# one process each, all on the one GPU, so the stage costs the longest of them.
if has test || has sanitize; then
  start=$SECONDS
  pids=()
  for s in "${test_steps[@]}"; do
    if has test; then
      (LADDER_TEST_STEP=$s timeout 300 "$tests" >"$logs/test-$s.log" 2>&1; echo $? >"$logs/test-$s.rc") &
      pids+=($!)
    fi
    # Library peers (step 99) are not sanitized: the reports come from inside cuDNN's own kernels
    # (racecheck flags its generated SDPA kernels), which this course can neither read nor fix.
    if has sanitize && [ "$s" -lt 90 ]; then
      (sanitize_step "$s" >"$logs/sanitize-$s.log" 2>&1; echo $? >"$logs/sanitize-$s.rc") &
      pids+=($!)
    fi
  done
  wait "${pids[@]}"
  for s in "${test_steps[@]}"; do
    if has test; then
      note "gpu test step $s: rc=$(cat "$logs/test-$s.rc"); $(grep -E 'test cases|All tests passed' "$logs/test-$s.log" | tail -1)"
      [ "$(cat "$logs/test-$s.rc")" = 0 ] ||
        grep -E "FAILED|with expansion|on B=|error|Timeout|timed out" "$logs/test-$s.log" | head -12 | tee -a "$summary"
    fi
    if has sanitize && [ "$s" -lt 90 ]; then
      note "sanitize step $s (memcheck racecheck synccheck): rc=$(cat "$logs/sanitize-$s.rc")"
      [ "$(cat "$logs/sanitize-$s.rc")" = 0 ] || head -16 "$logs/sanitize-$s.log" | tee -a "$summary"
    fi
  done
  note "tests and sanitizer: $((SECONDS - start)) s"
fi

if has ladder; then
  declare -A step_variants=([16]="wgmma" [17]="tma" [18]="ws" [19]="overlap pingpong pingpong_3stage"
                           [20]="persistent" [21]="snake dynamic"
                           [22]="three_consumers three_consumers_3stage")
  variants=(--variant 06/h200)
  for s in "${steps[@]}"; do for v in ${step_variants[$s]}; do variants+=(--variant "$s/$v"); done; done
  common=(--track attention --steps "6,$(IFS=,; echo "${steps[*]}")" "${variants[@]}" --ref-rows 256
          --dtype "$dtype")
  start=$SECONDS
  timeout 300 "$bin/ladder" "${common[@]}" --b 4 --heads 8 --d 64 --n 4096,8192 --mask both \
    --json "$out/ladder-d64$suffix.json" >"$logs/ladder-d64$suffix.log" 2>&1
  note "ladder B=4 H=8 D=64: rc=$? in $((SECONDS - start)) s"
  start=$SECONDS
  timeout 300 "$bin/ladder" "${common[@]}" --tokens 16384 --heads 16 --d 128 --n 4096,8192 --mask both \
    --json "$out/ladder-d128$suffix.json" >"$logs/ladder-d128$suffix.log" 2>&1
  note "ladder 16k tokens H=16 D=128: rc=$? in $((SECONDS - start)) s"
  start=$SECONDS
  timeout 200 "$bin/ladder" "${common[@]}" --b 4 --heads 16 --d 128 --n 8448 --mask none \
    --json "$out/ladder-fa3$suffix.json" >"$logs/ladder-fa3$suffix.log" 2>&1
  note "ladder FA3 ablation shape B=4 H=16 N=8448 D=128: rc=$? in $((SECONDS - start)) s"
  cat "$logs/ladder-d64$suffix.log" "$logs/ladder-d128$suffix.log" "$logs/ladder-fa3$suffix.log"
fi

# PyTorch's peers at exactly these shapes, timed with scripts/peers.py's own function (imported,
# not copied), and the fp16 GEMM ceiling of the moment.
if has peers; then
  start=$SECONDS
  PYTHONUNBUFFERED=1 LADDER_DTYPE=$dtype timeout 200 python3 - "$out/peers$suffix.json" >"$logs/peers$suffix.log" 2>&1 <<'EOF'
import datetime, json, os, sys
sys.path.insert(0, "scripts")
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import peers

shapes = [(4, 8, n, 64, c) for c in (False, True) for n in (4096, 8192)]
shapes += [(16384 // n, 16, n, 128, c) for c in (False, True) for n in (4096, 8192)]
shapes += [(4, 16, 8448, 128, False)]  # FlashAttention-3's ablation shape
torch.manual_seed(0)
l2 = torch.cuda.get_device_properties(0).L2_cache_size
flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
rows = []
a = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
b = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
t = peers.time_fn(lambda: a @ b, flush)
rows.append({"kind": "matmul", "name": "torch-fp16-matmul-8192", "flops": 2 * 8192**3, **t,
             "tflops": 2 * 8192**3 / (t["median_ms"] * 1e-3) / 1e12})
print(f"fp16 GEMM 8192^3: {rows[-1]['tflops']:.1f} TFLOP/s")
del a, b
dtype_name = os.environ.get("LADDER_DTYPE", "fp16")
dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float16
for (bsz, heads, n, d, causal) in shapes:
    q, k, v = (torch.randn(bsz, heads, n, d, dtype=dtype, device="cuda") for _ in range(3))
    flops = 4 * bsz * heads * n * n * d / (2 if causal else 1)
    for name in ("sdpa-flash", "sdpa-cudnn"):
        row = {"kind": "attention", "name": name, "batch": bsz, "heads": heads, "seqlen": n,
               "head_dim": d, "causal": causal, "dtype": dtype_name, "flops": flops}
        try:
            with sdpa_kernel([peers.BACKENDS[name]]):
                fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                t = peers.time_fn(fn, flush)
            row.update(t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
        except Exception as e:
            row["error"] = str(e).splitlines()[0][:300]
        rows.append(row)
        print(f"{name:11s} B={bsz} H={heads} N={n} D={d} causal={causal} {dtype_name}: "
              + (f"{row['tflops']:.1f} TFLOP/s" if "tflops" in row else row["error"]))
    del q, k, v
json.dump({"schema": "attention-ladder/peers/1",
           "provenance": {"gpu": peers.gpu_provenance(),
                          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                          "git_commit": os.environ.get("LADDER_GIT_COMMIT", "unknown"),
                          "method": "scripts/peers.py's time_fn: CUDA events per repetition, L2 flushed "
                                    "between, median of >=5 reps after >=25 ms warm-up"},
           "rows": rows}, open(sys.argv[1], "w"), indent=1)
EOF
  note "peers (PyTorch SDPA flash, cuDNN; fp16 GEMM): rc=$? in $((SECONDS - start)) s"
  cat "$logs/peers$suffix.log" >>"$summary"
fi

# The ladder's variants timed by PyTorch's method in PyTorch's process (scripts/peers.py through the C
# interface), at Part IV's target shapes: the ratio to PyTorch's cuDNN backend from one process.
if has crosscheck; then
  start=$SECONDS
  ids=$(IFS=,; echo "${crosscheck_ids[*]}")
  PYTHONUNBUFFERED=1 timeout 300 python3 scripts/peers.py --grid part4 --dtype "$dtype" --ladder-lib "$capi" \
    --ladder-variants "$ids" --out "$out/crosscheck$suffix.json" >"$logs/crosscheck$suffix.log" 2>&1
  note "crosscheck ($ids beside PyTorch, $dtype): rc=$? in $((SECONDS - start)) s"
  grep -v "efficient" "$logs/crosscheck$suffix.log" >>"$summary"
fi

# Nsight Compute, one launch of the profiled step per head dimension, clocks untouched: speed of
# light, warp states (stall reasons), occupancy, and the wgmma pipe's activity.
if has ncu; then
  start=$SECONDS
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  declare -A kernel_of=([16]=wgmma_kernel [17]=tma_kernel [18]=ws_kernel [19]=pingpong_kernel [20]=persistent_kernel
                     [21]=persistent_kernel [22]=three_consumers_kernel)
  for id in "${ncu_ids[@]}"; do
    s=${id%%/*}
    for d in 128 64; do
      if [ "$d" = 128 ]; then shape=(--b 4 --heads 16 --n 4096 --d 128); else shape=(--b 4 --heads 8 --n 4096 --d 64); fi
      timeout 120 "$ncu" --clock-control none -k "regex:${kernel_of[$s]}" --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
        --metrics sm__inst_executed_pipe_tensor_op_gmma.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio \
        "$bin/ladder" --steps "$s" --variant "$id" --no-peers "${shape[@]}" --mask none --no-time --no-check \
        --no-resources >"$logs/ncu.log" 2>&1
      note "ncu $id D=$d: rc=$?"
      { echo "==== $id ${shape[*]} non-causal"; cat "$logs/ncu.log"; } >>"$out/ncu.txt"
    done
  done
  note "ncu total $((SECONDS - start)) s"
fi

tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
note "done"

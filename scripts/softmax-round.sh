#!/usr/bin/env bash
# Part III's GPU round (steps 07-15, the B300 series' softmax experiments), in one call:
#   1. the GPU tests of steps 07-15 (what ctest's gpu_step07 .. gpu_step15 entries run)
#   2. compute-sanitizer memcheck, racecheck, synccheck on a small ragged problem
#   3. the series' workload (B=1 H=64 N=1024 D=128), every variant of 07-15 and step 06's two
#      D=128 candidates, causal and not, checked against the fp64 reference
#   4. the two standard grids (B=4 H=8 D=64 N=1024..16384; 16k tokens H=16 D=128 N=1024..16384),
#      causal and not, each step's main variant and step 06's best
#   5. PyTorch SDPA (flash, cuDNN, efficient) on the same shapes, timed like the harness, through
#      scripts/peers.py's own timing code
#   6. Nsight Compute (--clock-control none) on every kernel at the series' workload: warp
#      states, SASS-level stall sampling, instruction mix, shared-memory wavefronts, FP32 counts
# Everything lands in OUT; later stages are skipped when the time budget (ROUND_BUDGET_S,
# default 300 s) runs low, and every stage writes its files as soon as it ends.
#
#   scripts/softmax-round.sh OUT [BIN_DIR]
# BIN_DIR holds `ladder` and `gpu_tests` built for sm_90a; where they do not run on this machine
# (or BIN_DIR is not given) the script builds them with the gpu preset first.
#
#   scripts/softmax-round.sh --summarize ROUND_DIR OUT.csv
# turns a round's Nsight Compute exports (ncu-raw.csv.gz, ncu-source.csv.gz, logs/ncu-details.csv)
# into the per-version evidence table of the chapters (docs/results/h200/*-softmax-ncu.csv).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --summarize ]; then
  exec python3 - "${2:?round dir}" "${3:?output csv}" <<'PY'
import csv, gzip, io, re, sys
from collections import defaultdict
rnd, dst = sys.argv[1], sys.argv[2]
# The round's profiling order: part a, then part b; every variant launched twice.
order = ["07/v1", "07/v2", "07/v3", "07/v4", "07/v5", "08/v6", "09/v7", "10/v8",
         "06/h200", "06/d128_s64", "11/qkfragpipe", "11/qkaprefetch", "11/qkspecialized", "12/v10",
         "13/v11", "13/v11_ablation", "14/v12", "15/v13"]
num = lambda x: float(x.replace(",", "").split(" ")[0]) if x not in ("", "n/a") else float("nan")

raw = [r for r in csv.reader(io.TextIOWrapper(gzip.open(f"{rnd}/ncu-raw.csv.gz"), "utf-8"))]
header = raw[0]
rows = [dict(zip(header, r)) for r in raw if r and r[0].isdigit()]
assert len(rows) == 2 * len(order), len(rows)
metrics = [rows[2 * i] for i in range(len(order))]

details = open(f"{rnd}/logs/ncu-details.csv").read()
fp32 = re.findall(r"This kernel executes ([0-9,]+) fused and ([0-9,]+) non-fused", details)
assert len(fp32) == 2 * len(order), len(fp32)

# SASS-level stall samples: the source page prints each profiled function four times; the first.
blocks, cur = [], None
for r in csv.reader(io.TextIOWrapper(gzip.open(f"{rnd}/ncu-source.csv.gz"), "utf-8")):
    if r and r[0] == "Kernel Name":
        cur = {"rows": []}
        blocks.append(cur)
    elif r and r[0] == "Address":
        cur["cols"] = r
    elif r and r[0].startswith("0x"):
        cur["rows"].append(dict(zip(cur["cols"], r)))
assert len(blocks) == 4 * len(order), len(blocks)
# Samples land on the instruction that waits, so a shuffle's latency shows on the FMNMX (max chain)
# or FADD (sum chain) that consumes it: "chain" counts the three together.
CLASSES = (("chain", ("SHFL", "FMNMX", "FADD")), ("LDS/STS", ("LDS", "STS")), ("LDSM", ("LDSM",)),
           ("HMMA", ("HMMA",)), ("BAR/BRA", ("BAR", "BRA")), ("MUFU", ("MUFU",)))
def klass(src):
    words = src.split()
    op = words[1] if words and words[0].startswith("@") else (words[0] if words else "")
    base = op.split(".")[0]
    return next((name for name, ops in CLASSES if base in ops), "other"), base

prefix, suffix = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
stall_keys = [h for h in header if h.startswith(prefix) and h.endswith(suffix)]
out = csv.writer(open(dst, "w", newline=""))
out.writerow(["id", "regs", "occupancy th/ach %", "tensor pipe %", "top stalls (warps per issue)",
              "short sb", "mio throttle", "barrier", "samples: shuffle chain %", "LDS/STS %", "LDSM %",
              "HMMA %", "BAR/BRA %", "SHFL of instr %", "excess smem wavefronts", "FP32 fused", "FP32 non-fused"])
for i, vid in enumerate(order):
    m = metrics[i]
    stalls = sorted(((num(m[k]), k[len(prefix):-len(suffix)]) for k in stall_keys), reverse=True)
    samples, instr = defaultdict(float), defaultdict(float)
    for r in blocks[4 * i]["rows"]:
        c, base = klass(r["Source"])
        samples[c] += num(r["Warp Stall Sampling (All Samples)"] or "0")
        instr[base] += num(r["Instructions Executed"] or "0")
    ts, ti = sum(samples.values()) or 1, sum(instr.values()) or 1
    pct = lambda c: f"{100 * samples[c] / ts:.0f}"
    out.writerow([vid, m["launch__registers_per_thread"].split()[0],
                  f"{num(m['sm__maximum_warps_per_active_cycle_pct']):.0f}/"
                  f"{num(m['sm__warps_active.avg.pct_of_peak_sustained_active']):.0f}",
                  f"{num(m['sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active']):.0f}",
                  "; ".join(f"{n} {v:.2f}" for v, n in stalls[:3]),
                  f"{num(m[prefix + 'short_scoreboard' + suffix]):.2f}",
                  f"{num(m[prefix + 'mio_throttle' + suffix]):.2f}",
                  f"{num(m[prefix + 'barrier' + suffix]):.2f}",
                  pct("chain"), pct("LDS/STS"), pct("LDSM"), pct("HMMA"), pct("BAR/BRA"),
                  f"{100 * instr['SHFL'] / ti:.1f}",
                  f"{num(m['derived__memory_l1_wavefronts_shared_excessive']):,.0f}",
                  f"{num(fp32[2 * i][0]):,.0f}", f"{num(fp32[2 * i][1]):,.0f}"])
print("wrote", dst)
PY
fi
source scripts/env.sh
out=${1:?usage: scripts/softmax-round.sh OUT [BIN_DIR]}
bin=${2:-build/gpu/bin}
budget=${ROUND_BUDGET_S:-300}
mkdir -p "$out/logs"
logs="$out/logs"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $((SECONDS)); }
time_left() { echo $((budget - SECONDS)); }
steps="7-15"
step_ids=(07 08 09 10 11 12 13 14 15)
mains=(06/h200 06/d128_s64 07/v5 08/v6 09/v7 10/v8 11/qkspecialized 12/v10 13/v11_ablation 14/v12 15/v13)

note "softmax round at $(date -u +%FT%TZ), commit ${LADDER_GIT_COMMIT:-unknown}, budget ${budget} s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.limit \
  --format=csv >>"$summary" 2>&1

# ---- 0. binaries ----------------------------------------------------------------------------
if ! "$bin/ladder" --list >"$logs/list.txt" 2>&1; then
  note "prebuilt binaries do not run here ($(head -c 200 "$logs/list.txt")); building"
  cmake --preset gpu -DLADDER_BUILD_TESTS=ON -DLADDER_PTXAS_VERBOSE=ON >"$logs/configure.log" 2>&1 &&
    cmake --build --preset gpu -j "$(nproc)" --target ladder gpu_tests >"$logs/build.log" 2>&1
  note "build: rc=$? at $(elapsed) s"
  bin=build/gpu/bin
  tests_exe=$(find build/gpu -name gpu_tests -type f | head -1)
  "$bin/ladder" --list >"$logs/list.txt" 2>&1
else
  tests_exe="$bin/gpu_tests"
fi
note "steps listed: $(grep -cE '^ +(0[6-9]|1[0-5])/' "$logs/list.txt") variants of 06-15"

# ---- 1. GPU tests: one process per step, as ctest's gpu_stepNN entries (LADDER_TEST_STEP) ----
start=$SECONDS
for s in "${step_ids[@]}"; do
  (LADDER_TEST_STEP=$s timeout 100 "$tests_exe" >"$logs/test-$s.log" 2>&1; echo "$s rc=$?" >"$logs/test-$s.rc") &
  # at most 5 at a time: the fp64 reference runs on the CPU
  while (($(jobs -rp | wc -l) >= 5)); do sleep 0.5; done
done
wait
for s in "${step_ids[@]}"; do
  note "test step $s: $(cat "$logs/test-$s.rc") $(grep -E 'test cases|All tests passed' "$logs/test-$s.log" | tail -1)"
done
note "tests: $((SECONDS - start)) s"

# ---- 2. compute-sanitizer on a small ragged problem -----------------------------------------
start=$SECONDS
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  (timeout 150 "$san" --tool "$tool" --error-exitcode 99 "$bin/ladder" --steps "$steps" --b 1 --heads 1 \
     --n 113 --d 64,128 --mask both --no-time --no-resources >"$logs/sanitize-$tool.log" 2>&1
   echo "rc=$?" >"$logs/sanitize-$tool.rc") &
done
wait
for tool in memcheck racecheck synccheck; do
  note "sanitize $tool: $(cat "$logs/sanitize-$tool.rc"); $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/sanitize-$tool.log" | tail -1)"
done
note "sanitizer: $((SECONDS - start)) s"

# ---- 3. the series' workload: every variant, checked -----------------------------------------
start=$SECONDS
"$bin/ladder" --steps 6-15 --variant 06/h200 06/d128_s64 $(grep -oE '^ +(0[7-9]|1[0-5])/[a-z0-9_]+' "$logs/list.txt") \
  --b 1 --heads 64 --n 1024 --d 128 --mask both --json "$out/series.json" >"$logs/series.log" 2>&1
note "series workload: rc=$? in $((SECONDS - start)) s"
cat "$logs/series.log"

# ---- 4. the grids: main variants, timed only (correctness is stages 1 and 3) -----------------
if (($(time_left) > 150)); then
  start=$SECONDS
  "$bin/ladder" --steps 6-15 --variant "${mains[@]}" --b 4 --heads 8 --d 64 --n 1024,2048,4096,8192,16384 \
    --mask both --no-check --no-resources --target-ms 100 --json "$out/grid-d64.json" >"$logs/grid-d64.log" 2>&1
  note "grid d64: rc=$? in $((SECONDS - start)) s"
  start=$SECONDS
  "$bin/ladder" --steps 6-15 --variant "${mains[@]}" --tokens 16384 --heads 16 --d 128 --n 1024,4096,8192,16384 \
    --mask both --no-check --no-resources --target-ms 100 --json "$out/grid-d128.json" >"$logs/grid-d128.log" 2>&1
  note "grid d128: rc=$? in $((SECONDS - start)) s"
else
  note "grids skipped: $(time_left) s left"
fi

# ---- 5. PyTorch peers on the same shapes, with scripts/peers.py's timing ---------------------
if (($(time_left) > 100)); then
  start=$SECONDS
  PYTHONUNBUFFERED=1 timeout 120 python3 - "$out/peers.json" >"$logs/peers.log" 2>&1 <<'EOF'
import datetime, json, os, sys
sys.path.insert(0, "scripts")
import torch
from peers import BACKENDS, gpu_provenance, grids, time_fn
from torch.nn.attention import sdpa_kernel
shapes = [(1, 64, 1024, 128, c) for c in (False, True)]          # the series' workload
shapes += grids(False) + [(4, 8, 16384, 64, c) for c in (False, True)]
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4, device="cuda")
rows = []
for (b, h, n, d, causal) in shapes:
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float16, device="cuda") for _ in range(3))
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    for name, backend in BACKENDS.items():
        row = {"kind": "attention", "name": name, "batch": b, "heads": h, "seqlen": n,
               "head_dim": d, "causal": causal, "flops": flops}
        try:
            with sdpa_kernel([backend]):
                t = time_fn(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), flush)
            row.update(t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
        except Exception as e:
            row["error"] = str(e).splitlines()[0][:300]
        rows.append(row)
        print(name, b, h, n, d, causal, round(row.get("tflops", -1), 1), flush=True)
    del q, k, v
json.dump({"schema": "attention-ladder/peers/1",
           "provenance": {"gpu": gpu_provenance(),
                          "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                          "git_commit": os.environ.get("LADDER_GIT_COMMIT", "unknown"),
                          "method": "scripts/peers.py's time_fn: CUDA events per repetition, L2 flushed between, "
                                    "median of >=5 reps after >=25 ms warm-up"},
           "rows": rows}, open(sys.argv[1], "w"), indent=1)
EOF
  note "peers: rc=$? in $((SECONDS - start)) s"
  grep -E "^sdpa-(flash|cudnn) 1 64 1024" "$logs/peers.log" | tee -a "$summary"
else
  note "peers skipped: $(time_left) s left"
fi

# ---- 6. Nsight Compute at the series' workload, every kernel ---------------------------------
# Two reports (the versions up to V8, then the rest), so that a report cut short by the budget
# leaves the other whole. Kept: the raw metrics, the rule texts (details) and the SASS-level
# stall samples (source page); the reports themselves stay behind.
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
sections=(--section WarpStateStats --section SourceCounters --section InstructionStats --section Occupancy
          --section LaunchStats --section MemoryWorkloadAnalysis_Tables --section SpeedOfLight
          --section ComputeWorkloadAnalysis)
all_ids=($(grep -oE '^ +(0[7-9]|1[0-5])/[a-z0-9_]+' "$logs/list.txt"))
part_a=(); part_b=(06/h200 06/d128_s64)
for id in "${all_ids[@]}"; do case $id in 0[7-9]/*|10/*) part_a+=("$id") ;; *) part_b+=("$id") ;; esac; done
: >"$logs/ncu-details.csv"
for part in a b; do
  if (($(time_left) < 40)); then note "ncu part $part skipped: $(time_left) s left"; continue; fi
  start=$SECONDS
  if [ $part = a ]; then ids=("${part_a[@]}"); else ids=("${part_b[@]}"); fi
  steps_of_part=$([ $part = a ] && echo 7-10 || echo 6-15)
  timeout $(($(time_left) - 10)) "$ncu" --clock-control none "${sections[@]}" -k regex:'b300_kernel|fa_v2_2_kernel' \
    -f -o "$logs/ncu-$part" "$bin/ladder" --steps "$steps_of_part" --variant "${ids[@]}" --b 1 --heads 64 --n 1024 \
    --d 128 --mask none --no-time --no-check --no-resources >"$logs/ncu-$part.log" 2>&1
  note "ncu part $part (${#ids[@]} variants): rc=$? in $((SECONDS - start)) s"
  rep="$logs/ncu-$part.ncu-rep"
  [ -f "$rep" ] || continue
  "$ncu" -i "$rep" --page raw --csv --print-metric-instances values >>"$out/ncu-raw.csv" 2>>"$logs/ncu-export.err" ||
    "$ncu" -i "$rep" --page raw --csv >>"$out/ncu-raw.csv" 2>>"$logs/ncu-export.err"
  "$ncu" -i "$rep" --page details --csv --print-details all >>"$logs/ncu-details.csv" 2>>"$logs/ncu-export.err" ||
    "$ncu" -i "$rep" --page details --csv >>"$logs/ncu-details.csv" 2>>"$logs/ncu-export.err"
  "$ncu" -i "$rep" --page source --csv --print-source sass >>"$out/ncu-source.csv" 2>>"$logs/ncu-export.err"
  rm -f "$rep"
done
for f in "$out/ncu-raw.csv" "$out/ncu-source.csv"; do [ -f "$f" ] && note "$(basename "$f"): $(wc -l <"$f") lines" && gzip -f "$f"; done

tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
note "done at $(elapsed) s"

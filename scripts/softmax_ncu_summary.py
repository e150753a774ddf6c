#!/usr/bin/env python3
"""Turns a Part III round's Nsight Compute exports into the per-version evidence table of the
chapters (docs/results/h200/*-softmax-ncu.csv): registers, occupancy, tensor pipe, the top stalls,
the SASS-level stall samples by instruction class, shared-memory wavefronts, FP32 counts.

    python3 scripts/softmax_ncu_summary.py OUT/2026-12-01-softmax-ncu OUT.csv   # scripts/round.sh's files
    python3 scripts/softmax_ncu_summary.py ROUND_DIR OUT.csv                    # the 2026-11-30 layout

scripts/round.sh's softmax stage writes PREFIX-raw.csv.gz, PREFIX-source.csv.gz and
PREFIX-details.csv.gz; the 2026-11-30 round wrote ROUND_DIR/ncu-raw.csv.gz, ncu-source.csv.gz and
logs/ncu-details.csv.
"""
import os
import csv, gzip, io, re, sys
from collections import defaultdict
rnd, dst = sys.argv[1], sys.argv[2]
if os.path.isdir(rnd):
    raw_path, source_path, details_path = f"{rnd}/ncu-raw.csv.gz", f"{rnd}/ncu-source.csv.gz", f"{rnd}/logs/ncu-details.csv"
else:
    raw_path, source_path, details_path = f"{rnd}-raw.csv.gz", f"{rnd}-source.csv.gz", f"{rnd}-details.csv.gz"
opener = lambda path: io.TextIOWrapper(gzip.open(path), "utf-8") if path.endswith(".gz") else open(path)
# The round's profiling order: part a, then part b; every variant launched twice.
order = ["07/v1", "07/v2", "07/v3", "07/v4", "07/v5", "08/v6", "09/v7", "10/v8",
         "06/h200", "06/d128_s64", "11/qkfragpipe", "11/qkaprefetch", "11/qkspecialized", "12/v10",
         "13/v11", "13/v11_ablation", "14/v12", "15/v13"]
num = lambda x: float(x.replace(",", "").split(" ")[0]) if x not in ("", "n/a") else float("nan")

raw = [r for r in csv.reader(opener(raw_path))]
header = raw[0]
rows = [dict(zip(header, r)) for r in raw if r and r[0].isdigit()]
assert len(rows) == 2 * len(order), len(rows)
metrics = [rows[2 * i] for i in range(len(order))]

details = opener(details_path).read()
fp32 = re.findall(r"This kernel executes ([0-9,]+) fused and ([0-9,]+) non-fused", details)
assert len(fp32) == 2 * len(order), len(fp32)

# SASS-level stall samples: the source page prints each profiled function four times; the first.
blocks, cur = [], None
for r in csv.reader(opener(source_path)):
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

#!/usr/bin/env bash
# The SM clock and board power while a command runs: nvidia-smi sampled every 50 ms into CSV, then
# the mean, min and max over the samples taken while the GPU was busy (utilization >= 50%).
# For the question chapter 33 leaves open: do two kernels that take the same time under Nsight
# Compute run at different clocks when timed back to back (a power limit)?
#
#   scripts/clock_trace.sh OUT.csv COMMAND...      e.g. scripts/clock_trace.sh ours.csv ladder ...
# Prints one line: samples, mean/min/max SM MHz, mean/max W (busy samples only). Never changes a
# clock or a limit: it only reads.
set -uo pipefail
out=$1
shift
command -v nvidia-smi >/dev/null || { echo "clock_trace: no nvidia-smi" >&2; exit 2; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv,noheader,nounits -lms 50 >"$out" &
smi=$!
"$@"
rc=$?
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
python3 - "$out" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split(",")]
    try:
        rows.append((float(parts[1]), float(parts[2]), float(parts[3])))
    except (IndexError, ValueError):
        continue
busy = [r for r in rows if r[2] >= 50]
if not busy:
    print(f"clock_trace: {len(rows)} samples, none with the GPU busy")
else:
    mhz = [r[0] for r in busy]
    w = [r[1] for r in busy]
    print(f"clock_trace: {len(busy)} busy samples of {len(rows)}: SM {sum(mhz)/len(mhz):.0f} MHz "
          f"(min {min(mhz):.0f}, max {max(mhz):.0f}), power {sum(w)/len(w):.0f} W (max {max(w):.0f})")
PY
exit $rc

#!/usr/bin/env bash
# Nsight Compute evidence for the chapters: occupancy limits, achieved occupancy, shared-memory
# bank conflicts and tensor-pipe activity of the attention kernels, one launch each, clocks left
# alone (--clock-control none). Writes OUT/ncu.csv.
#   scripts/profile.sh build/gpu/bin OUT
set -uo pipefail
bin=${1:?usage: scripts/profile.sh BIN_DIR OUT}
out=${2:?usage: scripts/profile.sh BIN_DIR OUT}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
metrics=(
  gpu__time_duration.sum
  launch__registers_per_thread
  launch__shared_mem_per_block_dynamic
  launch__occupancy_limit_registers
  launch__occupancy_limit_shared_mem
  launch__occupancy_limit_warps
  sm__maximum_warps_per_active_cycle_pct
  sm__warps_active.avg.pct_of_peak_sustained_active
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
  smsp__inst_executed_op_ldsm.sum
  sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
  dram__throughput.avg.pct_of_peak_sustained_elapsed
)
metric_list=$(IFS=,; echo "${metrics[*]}")
csv="$out/ncu.csv"
: >"$csv"

profile() {  # profile EXE VARIANT D CAUSAL
  local exe=$1 variant=$2 d=$3 mask=$4
  echo "== $(basename "$exe") $variant D=$d mask=$mask"
  "$ncu" --clock-control none --csv --metrics "$metric_list" --launch-count 1 -k "regex:fa_" \
    "$bin/$exe" --b 4 --heads 8 --n 4096 --d "$d" --mask "$mask" --variant "$variant" --no-time --no-check \
    --no-resources >"/tmp/ncu.$$" 2>&1
  local rc=$?
  grep -E '^"' "/tmp/ncu.$$" | awk -v prefix="\"$exe\",\"$variant\",\"$d\",\"$mask\"," '{print prefix $0}' >>"$csv"
  [ $rc -eq 0 ] || { echo "ncu failed (rc=$rc):"; tail -5 "/tmp/ncu.$$"; }
  rm -f "/tmp/ncu.$$"
}

for exe in "$bin"/step0[4-9]_* ; do
  name=$(basename "$exe")
  for variant in $("$exe" --list | awk '$1 ~ /^[0-9][0-9]\// {print $1}'); do
    for d in 64 128; do profile "$name" "$variant" "$d" none; done
  done
done
echo "rows: $(wc -l <"$csv")"

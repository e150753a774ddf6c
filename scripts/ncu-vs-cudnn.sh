#!/usr/bin/env bash
# Nsight Compute on one of our kernels and on cuDNN's, same shape, same counters (clocks untouched):
# where does the time of each go? Used by chapter 20 for the causal D=128 gap.
#   scripts/ncu-vs-cudnn.sh OUT BIN_DIR VARIANT_ID KERNEL_REGEX -- ladder shape options...
#   e.g. scripts/ncu-vs-cudnn.sh out build/gpu/bin 21/snake persistent_kernel -- \
#          --b 4 --heads 16 --n 4096 --d 128 --mask causal
set -uo pipefail
out=$1 bin=$2 id=$3 regex=$4
shift 5
mkdir -p "$out"
source "$(dirname "$0")/cudnn-env.sh" >/dev/null 2>&1 || true
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
metrics=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__registers_per_thread
step=${id%%/*}
# Our kernel alone (--no-peers); a peer step by number alone (its variants are not selectable by
# id). Every launch that matches is profiled: with --no-time each variant runs twice (the rerun
# check), so a peer step's two cuDNN graphs give four reports.
select=(--variant "$id" --no-peers)
[ "$step" -ge 90 ] && select=()
name=$(echo "$id $*" | tr ' /' '__')
"$ncu" --clock-control none -k "regex:$regex" --launch-count 4 --metrics "$metrics" \
  "$bin/ladder" --track attention --steps "$step" "${select[@]}" --no-time --no-check --no-resources "$@" \
  >"$out/ncu-$name.txt" 2>&1
echo "ncu $id $*: rc=$?"
grep -E "^  [a-z_]+__|launch__|Section|==PROF==|[a-z_]+kernel|sdpa" "$out/ncu-$name.txt" | head -40

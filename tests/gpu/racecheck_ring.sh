#!/usr/bin/env bash
# Chapter 25's racecheck measurements, on a Hopper GPU, from an existing build (this script builds nothing):
#   1. tests/gpu/racecheck_ring.cu, every variant plain and under racecheck (analysis and hazard
#      reports; bulk and generic also with --racecheck-trace-sync, to see which synchronisation
#      the tool records);
#   2. step 25's stress test (gpu_tests "[stress]": 25/late_consumers against the measured
#      variants, dK and dV bit for bit);
#   3. step 25 under racecheck: head_by_head (every consumer thread releases a stage) against
#      warp_release (lane 0 of each warp releases it after __syncwarp, the first version), and
#      whether the ring must wrap for the report (128 query rows a block at D = 64: N = 256 is
#      two blocks, no stage reused; N = 384 is three, stage 0 reused).
# Logs and summary.txt go to OUT (summary.txt is appended to, so the stages can run as separate
# commands). How to read them: docs/25_hopper_backward.md, "What racecheck reports", and the
# notes at the end of summary.txt.
#   tests/gpu/racecheck_ring.sh [--build DIR] [--stages ring,step25,stress] [--timeout S] [OUT]
#   (OUT default: $OUT or ./racecheck-out; --build default build/gpu; every stage by default)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=build/gpu limit=300 stages=ring,step25,stress
while (($#)); do
  case $1 in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --stages) stages=${2:?--stages needs a list}; shift 2 ;;
    --timeout) limit=${2:?--timeout needs seconds}; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
out=${1:-${OUT:-racecheck-out}}
mkdir -p "$out" || exit 2
wants() { [[ ",$stages," == *",$1,"* ]]; }
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
ring=$build/bin/racecheck_ring
step=$build/bin/step25_hopper_backward
tests=$build/tests/gpu_tests
for exe in "$ring" "$step" "$tests" "$sanitizer"; do
  [ -x "$exe" ] || { echo "missing $exe (build racecheck_ring, step25_hopper_backward and gpu_tests; compute-sanitizer comes with the CUDA toolkit)" >&2; exit 2; }
done
summary=$out/summary.txt
note() { echo "$*" | tee -a "$summary"; }
# The sanitizer's verdict of a log: its summary line and the first access line of each report.
verdict() {
  grep -hE "RACECHECK SUMMARY" "$1" | tail -1
  grep -hE -A1 "Race reported between" "$1" | grep -oE "(Race reported between|and) (Read|Write) access at .*" | head -6
  grep -hoE "Potential (RAW|WAR|WAW) hazard" "$1" | sort | uniq -c
}
racecheck=("$sanitizer" --tool racecheck --error-exitcode 99)

if wants ring; then
note "== 1. the minimal ring ($ring)"
variants=(bulk bulk_all_arrive bulk_fenced generic generic_all_arrive syncthreads bulk_syncthreads bulk_broken)
declare -A plain_rc race_rc
for v in "${variants[@]}"; do
  timeout "$limit" "$ring" "$v" >"$out/ring_${v}_plain.log" 2>&1
  plain_rc[$v]=$?
  timeout "$limit" "${racecheck[@]}" --racecheck-report analysis "$ring" "$v" >"$out/ring_${v}_racecheck.log" 2>&1
  race_rc[$v]=$?
  timeout "$limit" "${racecheck[@]}" --racecheck-report hazard "$ring" "$v" >"$out/ring_${v}_hazards.log" 2>&1
  note "-- $v: plain exit ${plain_rc[$v]} ($(tail -1 "$out/ring_${v}_plain.log")); racecheck exit ${race_rc[$v]}"
  verdict "$out/ring_${v}_racecheck.log" | sed 's/^/     /' | tee -a "$summary"
  grep -hoE "Potential (RAW|WAR|WAW) hazard" "$out/ring_${v}_hazards.log" | sort | uniq -c | sed 's/^/     hazard records:/' | tee -a "$summary"
  # Which lanes read in the hazards: lane 0 arrives on the empty barrier, lanes 1-31 only __syncwarp.
  grep -hoE "Read Thread \([0-9]+," "$out/ring_${v}_hazards.log" | grep -oE "[0-9]+" |
    awk '{ lane = $1 % 32; n[lane == 0 ? "lane 0" : "lanes 1-31"]++ } END { for (k in n) printf "     reads in hazard records by %s: %d\n", k, n[k] }' |
    tee -a "$summary"
done
for v in bulk generic; do
  timeout "$limit" "${racecheck[@]}" --racecheck-trace-sync yes "$ring" "$v" >"$out/ring_${v}_tracesync.log" 2>&1
  note "-- $v with --racecheck-trace-sync: $(grep -c "called by threads" "$out/ring_${v}_tracesync.log") synchronisation records" \
       "($(grep -oE "^========= [A-Za-z:. ]+ called by" "$out/ring_${v}_tracesync.log" | sed 's/^========= //; s/ called by//' | sort | uniq -c | tr '\n' ';'))"
done
fi

if wants stress; then
note ""
note "== 2. step 25's stress test ($tests \"[stress]\")"
LADDER_TEST_STEP=25 timeout "$limit" "$tests" "[stress]" >"$out/stress.log" 2>&1
note "-- exit $? ($(grep -E "late consumers:|test cases|assertions" "$out/stress.log" | tr '\n' ' '))"
fi

if wants step25; then
note ""
note "== 3. step 25 under racecheck ($step): every thread's release (the kernel) and lane 0's (warp_release)"
# No CPU reference (--no-check): the gradients are the stress test's; this is about the hazards.
common=(--no-time --no-check --no-peers --no-resources --mask both --b 1 --heads 2 --dtype fp16)
run_step() {  # name, then the step's arguments
  local name=$1
  shift
  timeout "$limit" "${racecheck[@]}" --racecheck-report all "$step" "${common[@]}" "$@" >"$out/step25_${name}.log" 2>&1
  note "-- $name ($*): racecheck exit $?"
  verdict "$out/step25_${name}.log" | sed 's/^/     /' | tee -a "$summary"
}
run_step head_by_head --variant 25/head_by_head --d 64,128 --n 384
run_step warp_release --variant 25/warp_release --d 64,128 --n 384
run_step late_consumers --variant 25/late_consumers --d 64 --n 384
run_step no_wrap --variant 25/warp_release --d 64 --n 256
fi

cat >>"$summary" <<'EOF'

== How to read it (docs/25_hopper_backward.md, "What racecheck reports")
  * every variant's plain run: exit 0, except bulk_broken: exit 1 (it read the producer's next pass).
  * bulk_broken under racecheck: flagged (exit 99). If not, racecheck does not see this kind of
    hazard at all and its silence elsewhere proves nothing.
  * syncthreads: clean (the control). If not, the tool misreads the program itself.
  * bulk flagged with the same pair of lines as step 25 (a bulk_load write against the reads):
    the minimal kernel reproduces the report.
      - generic flagged too: the tool does not carry a warp's reads through __syncwarp into lane 0's
        release; generic_all_arrive and bulk_all_arrive clean would confirm it (step 25's fix
        would then be: every consumer thread arrives, as CUTLASS's pipeline does).
      - generic clean, bulk flagged: the tool does not order a bulk copy after the issuing thread's
        mbarrier wait. bulk_fenced clean: it wants the cross-proxy fence (a fix for step 25 too);
        bulk_syncthreads clean: it follows bar.sync but not the mbarrier's release/acquire.
  * stress test passing: the gradients do not change however late the consumers are.
  * step 25: head_by_head clean, warp_release flagged with the same pair (bulk_load against the
    lse/D reads, lanes 1-31 reading), no_wrap clean: the report was the per-warp release.
EOF
echo "logs and summary: $out"

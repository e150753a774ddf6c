#!/usr/bin/env bash
# compute-sanitizer's tools on a small, ragged problem; fails on any report. The one recipe for the
# sanitizer: scripts/round.sh's sanitize stage calls it for each step through the ladder.
#   scripts/sanitize.sh build/gpu/bin/step05_fa_v2_1            # one step's executable, four tools
#   scripts/sanitize.sh --steps 20 --dtype fp16,bf16 build/round/bin/ladder memcheck racecheck
# --steps S     with the `ladder` executable: only these steps (its --steps)
# --dtype LIST  element types (the ladder's --dtype; a variant without bf16 is listed as skipped)
# --timeout T   seconds per tool (default 600): a hang fails the tool instead of the whole round
# Tools: memcheck (with --leak-check full), racecheck, synccheck, initcheck (default: all four).
set -uo pipefail
steps="" dtype="" limit=600
while (($#)); do
  case $1 in
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --dtype) dtype=${2:?--dtype needs a value}; shift 2 ;;
    --timeout) limit=${2:?--timeout needs seconds}; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
exe=${1:?usage: scripts/sanitize.sh [--steps S] [--dtype LIST] [--timeout T] EXECUTABLE [TOOLS...]}
shift
tools=("$@")
((${#tools[@]})) || tools=(memcheck racecheck synccheck initcheck)
for tool in "${tools[@]}"; do
  case $tool in memcheck|racecheck|synccheck|initcheck) ;; *) echo "unknown tool '$tool'" >&2; exit 2 ;; esac
done
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# Small and ragged: N = 113 is not a multiple of any tile, two heads, both masks, both D; the
# matrix product and the reduction of steps 01-02 ragged too. Library rows are left out (their
# reports would come from inside the libraries' kernels).
args=(--no-time --no-peers --no-resources --b 1 --heads 2 --n 113 --d 64,128 --mask both --gemm 113,127,129 --count 100003)
[ -n "$steps" ] && args+=(--steps "$steps")
[ -n "$dtype" ] && args+=(--dtype "$dtype")

status=0
log=$(mktemp /tmp/sanitize.XXXXXX)
for tool in "${tools[@]}"; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  echo "== $(basename "$exe")${steps:+ --steps $steps}${dtype:+ --dtype $dtype}: $tool"
  timeout "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 "${extra[@]}" "$exe" "${args[@]}" >"$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAILED: $tool reported errors (exit 99), the program failed, or it ran past ${limit} s (124); exit $rc:"
    grep -E "=========|error|Error" "$log" | head -40
    tail -5 "$log"
    status=1
  else
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -2
  fi
done
rm -f "$log"
exit $status

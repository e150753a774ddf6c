#!/usr/bin/env bash
# compute-sanitizer's tools on a small, ragged problem; fails on any report. The one recipe for the
# sanitizer: scripts/round.sh's sanitize stage calls it for each step through the ladder.
#   scripts/sanitize.sh build/gpu/bin/step05_fa_v2_1            # one step's executable, four tools
#   scripts/sanitize.sh --steps 20 --dtype fp16,bf16 build/round/bin/ladder memcheck racecheck
# --steps S     with the `ladder` executable: only these steps (its --steps)
# --dtype LIST  element types (the ladder's --dtype; a variant without bf16 is listed as skipped)
# --timeout T   seconds per tool (default 600): a hang fails the tool instead of the whole round
# --serving     also Part VI's problems, small and ragged: GQA, decode (7 queries, 1000 keys),
#               a paged cache (pages of 64 and 16) and a varlen batch (each variant runs the ones
#               it declares; the others are skipped)
# Tools: memcheck (with --leak-check full), racecheck, synccheck, initcheck (default: all four).
set -uo pipefail
steps="" dtype="" limit=600 serving=0
while (($#)); do
  case $1 in
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --dtype) dtype=${2:?--dtype needs a value}; shift 2 ;;
    --timeout) limit=${2:?--timeout needs seconds}; shift 2 ;;
    --serving) serving=1; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
common=(--no-time --no-peers --no-resources --d 64,128 --mask both)
[ -n "$steps" ] && common+=(--steps "$steps")
[ -n "$dtype" ] && common+=(--dtype "$dtype")
problems=("--b 1 --heads 2 --n 113 --gemm 113,127,129 --count 100003")
if ((serving)); then
  problems+=("--b 2 --heads 4 --kv-heads 2 --n 113"
             "--b 3 --heads 8 --kv-heads 2 --n 7 --kv-n 1000"
             "--b 3 --heads 8 --kv-heads 2 --n 7 --kv-n 1000 --page-size 64,16"
             "--heads 4 --kv-heads 2 --varlen 1,113,300,64")
fi

status=0
log=$(mktemp /tmp/sanitize.XXXXXX)
for tool in "${tools[@]}"; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  echo "== $(basename "$exe")${steps:+ --steps $steps}${dtype:+ --dtype $dtype}: $tool"
  rc=0
  for problem in "${problems[@]}"; do
    read -r -a args <<<"$problem"
    timeout "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 "${extra[@]}" "$exe" "${common[@]}" \
      "${args[@]}" >>"$log" 2>&1
    r=$?
    # 6: no selected variant runs this problem (a decode step on a prefill shape): nothing to check.
    ((r == 0 || r == 6)) || { rc=$r; echo "  (on: $problem)" >>"$log"; break; }
  done
  if [ $rc -ne 0 ]; then
    echo "FAILED: $tool reported errors (exit 99), the program failed, or it ran past ${limit} s (124); exit $rc:"
    grep -E "=========|error|Error" "$log" | head -40
    tail -5 "$log"
    status=1
  else
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -2
  fi
  : >"$log"
done
rm -f "$log"
exit $status

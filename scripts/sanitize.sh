#!/usr/bin/env bash
# Runs one step's executable under compute-sanitizer's four tools on a small, ragged problem and
# fails on any report.
#   scripts/sanitize.sh build/gpu/bin/step05_fa_v2_1 [memcheck racecheck synccheck initcheck]
set -uo pipefail
exe=${1:?usage: scripts/sanitize.sh STEP_EXECUTABLE [TOOLS...]}
shift
tools=("$@")
((${#tools[@]})) || tools=(memcheck racecheck synccheck initcheck)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)

# Small and ragged: N = 113 is not a multiple of any tile, two heads, both masks, both D.
args=(--no-time --no-peers --b 1 --heads 2 --n 113 --d 64,128 --mask both --gemm 113,127,129 --count 100003)

status=0
for tool in "${tools[@]}"; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  echo "== $(basename "$exe"): $tool"
  if ! "$sanitizer" --tool "$tool" --error-exitcode 99 "${extra[@]}" "$exe" "${args[@]}" --no-resources \
      >"/tmp/sanitize.$$.log" 2>&1; then
    echo "FAILED: $tool reported errors (or the program failed):"
    grep -E "=========|error" "/tmp/sanitize.$$.log" | head -40
    status=1
  else
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "/tmp/sanitize.$$.log" | tail -2
  fi
  rm -f "/tmp/sanitize.$$.log"
done
exit $status

#!/usr/bin/env bash
# The labs on a GPU machine: every checker on the reference solutions (each must pass) and on the
# untouched starters (each must fail, with its FAIL message, never a crash). Builds both modes in
# one build folder (build/gpu, the preset's: the starters are lab_LNN, the solutions
# lab_LNN_solution, which the tests option adds), so after a full round's build it only links.
#
#   scripts/labs-round.sh OUT     # OUT/summary.txt, OUT/LNN-solution.log, OUT/LNN-starter.log
#
# Exit 0 when every solution passed and every starter failed as it should.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out=${1:?usage: scripts/labs-round.sh OUT}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
labs=(L01 L02 L03 L04 L05 L06)
start=$SECONDS

targets=()
for lab in "${labs[@]}"; do targets+=("lab_$lab" "lab_${lab}_solution"); done
note "labs round at $(date -u +%FT%TZ), commit ${LADDER_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"
# LABS_BIN=folder: use checkers built elsewhere (a dry run of this script on a machine without a GPU).
if [ -n "${LABS_BIN:-}" ]; then
  note "using the checkers in $LABS_BIN (not building)"
elif ! { cmake --preset gpu -DLADDER_BUILD_TESTS=ON -DLADDER_LABS_MODE=starter >"$out/build.log" 2>&1 &&
       cmake --build --preset gpu -j "$(nproc)" --target "${targets[@]}" >>"$out/build.log" 2>&1; }; then
  tail -30 "$out/build.log"
  note "FAILED: the labs did not build (build.log)"
  exit 1
else
  note "built ${#targets[@]} checkers in $((SECONDS - start)) s"
fi
bin=${LABS_BIN:-build/gpu/bin}
failures=0
declare -A verdicts
for lab in "${labs[@]}"; do
  # The solution: must pass (exit 0) and say PASS.
  t=$SECONDS
  timeout 300 "$bin/lab_${lab}_solution" >"$out/$lab-solution.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^$lab: PASS" "$out/$lab-solution.log"; then
    note "$lab solution: PASS as expected ($((SECONDS - t)) s)"
    verdicts[$lab]="solution PASS"
  else
    note "$lab solution: UNEXPECTED exit $rc ($((SECONDS - t)) s); last lines:"
    verdicts[$lab]="solution UNEXPECTED (exit $rc)"
    tail -15 "$out/$lab-solution.log" | tee -a "$summary"
    failures=$((failures + 1))
  fi
  # The measured figures the checker printed (its verdict's lines).
  awk -v lab="$lab" '/^$/ {buf = ""; next} $0 ~ "^" lab ": PASS" {printf "%s", buf; exit} {buf = buf "    " $0 "\n"}' \
    "$out/$lab-solution.log" | tee -a "$summary"
  # The untouched starter: must fail its checks (exit 1, a FAIL line), not crash or hang.
  t=$SECONDS
  timeout 300 "$bin/lab_$lab" --no-time >"$out/$lab-starter.log" 2>&1
  rc=$?
  reason=$(grep -m1 -A1 "^$lab: FAIL" "$out/$lab-starter.log" | tail -1 | cut -c1-160)
  # A fault or an exception is not the clear failure a learner should see: it counts as unexpected.
  if [ $rc -eq 1 ] && grep -q "^$lab: FAIL" "$out/$lab-starter.log" &&
     ! grep -q "the checker stopped\|kernel fault" "$out/$lab-starter.log"; then
    note "$lab starter: FAIL as expected ($((SECONDS - t)) s):$reason"
    verdicts[$lab]+=", starter FAIL as it should"
  else
    note "$lab starter: UNEXPECTED exit $rc ($((SECONDS - t)) s), expected a FAIL verdict; last lines:"
    verdicts[$lab]+=", starter UNEXPECTED (exit $rc)"
    tail -15 "$out/$lab-starter.log" | tee -a "$summary"
    failures=$((failures + 1))
  fi
done
note ""
for lab in "${labs[@]}"; do note "$lab: ${verdicts[$lab]}"; done
note "labs round: $failures unexpected result(s) in $((SECONDS - start)) s"
[ $failures -eq 0 ]

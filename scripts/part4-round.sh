#!/usr/bin/env bash
# Part IV's whole round in one device call: scripts/hopper-round.sh twice, fp16 then bf16.
#   fp16: build (or the carried binaries), the GPU tests of steps 16-22 and the cuDNN peer,
#         compute-sanitizer on steps 16-22 (fp16 and bf16), the ladder at the issue's shapes with
#         step 06 beside it, and the crosscheck (the ladder's variants timed by PyTorch's method in
#         PyTorch's process, beside its SDPA backends)
#   bf16: the ladder and the crosscheck again in bf16
# Everything lands in OUT/fp16 and OUT/bf16, then in OUT/round.tgz (the device tool brings back a
# handful of files).
#
#   scripts/part4-round.sh OUT
#   LADDER_HOPPER_BIN=folder  binaries built here and carried (ladder, gpu_tests, libladder_capi.so)
#   LADDER_GIT_COMMIT=sha     the commit they were built from (the copy on the device has no .git)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/part4-round.sh OUT}
export LADDER_HOPPER_STEPS="${LADDER_HOPPER_STEPS:-16 17 18 19 20 21 22}"
export LADDER_TEST_STEPS="${LADDER_TEST_STEPS:-16 17 18 19 20 21 22 99}"
export LADDER_CROSSCHECK_IDS="${LADDER_CROSSCHECK_IDS:-20/persistent 21/snake 21/dynamic 22/three_consumers 99/cudnn}"
scripts/hopper-round.sh "$out/fp16" build test sanitize ladder crosscheck >"$out/fp16.log" 2>&1
echo "fp16 round: rc=$?"
LADDER_DTYPE=bf16 scripts/hopper-round.sh "$out/bf16" build ladder crosscheck >"$out/bf16.log" 2>&1
echo "bf16 round: rc=$?"
grep -hE "rc=|hopper round" "$out/fp16/summary.txt" "$out/bf16/summary.txt"
tar -C "$out" -czf "$out/round.tgz" fp16 bf16 && rm -rf "$out/fp16" "$out/bf16"

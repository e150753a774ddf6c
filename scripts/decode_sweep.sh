#!/usr/bin/env bash
# The split count swept at the decode shapes of issue 26: each shape run once with the split rule
# (common/split_kv.hpp) and once for every forced count (LADDER_SPLITS=N), one JSON file each, so
# that a cost model of the split count can be checked against the measured optimum.
#
#   scripts/decode_sweep.sh [--ladder PATH] [--variants ID,ID] [--splits 1,2,4,...] OUT
#
# --ladder    the ladder executable (default build/gpu/bin/ladder)
# --variants  the decode variants to time (default 28/split_kv,42/cta_merge); cuDNN's rows come
#             with the attention track in every file
# --splits    the forced counts (default 1,2,3,4,6,8,11,16,22,32,44,64); a count above what a
#             shape's keys allow is clamped to that (the file records the shape, not the count)
# OUT gets sweep-SHAPE-rule.json and sweep-SHAPE-sN.json (SHAPE = bB-hHq-nkNk), bf16, D = 128,
# one query token, Hkv = 8, no mask, checked (the reference is cheap at Nq = 1).
set -euo pipefail
cd "$(dirname "$0")/.."
ladder=build/gpu/bin/ladder variants=28/split_kv,42/cta_merge splits=1,2,3,4,6,8,11,16,22,32,44,64 out=""
while (($#)); do
  case $1 in
    --ladder) ladder=$2; shift ;;
    --variants) variants=$2; shift ;;
    --splits) splits=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "decode_sweep.sh: unknown option $1" >&2; exit 2 ;;
    *) out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || { echo "decode_sweep.sh: OUT is missing (try --help)" >&2; exit 2; }
[ -x "$ladder" ] || { echo "decode_sweep.sh: no ladder at $ladder (build it: cmake --build --preset gpu)" >&2; exit 2; }
mkdir -p "$out"
vargs=()
IFS=, read -r -a vs <<<"$variants"
for v in "${vs[@]}"; do vargs+=(--variant "$v"); done
steps=$(printf '%s\n' "${vs[@]}" | cut -d/ -f1 | sort -u | paste -sd,)
IFS=, read -r -a counts <<<"$splits"
for shape in "3 40 12345" "1 64 131072" "8 32 32768" "2 32 65536"; do
  read -r b hq nk <<<"$shape"
  name="b$b-h$hq-nk$nk"
  run() {  # run TAG: one ladder call, its JSON in OUT
    "$ladder" --steps "$steps" "${vargs[@]}" --b "$b" --heads "$hq" --kv-heads 8 --n 1 --kv-n "$nk" --d 128 \
      --mask none --dtype bf16 --json "$out/sweep-$name-$1.json" >"$out/sweep-$name-$1.txt" 2>&1
  }
  run rule && echo "$name rule: done"
  for s in "${counts[@]}"; do LADDER_SPLITS=$s run "s$s" && echo "$name splits=$s: done"; done
done

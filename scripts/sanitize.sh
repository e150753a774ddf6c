#!/usr/bin/env bash
# compute-sanitizer's tools on problems sized so that every pipeline ring of a step wraps at least
# twice, ragged; fails on any report. The one recipe for the sanitizer: scripts/round.sh's sanitize
# stage calls it for each step through the ladder, scripts/sanitize_all.sh for every step and lab.
#
#   scripts/sanitize.sh build/gpu/bin/step05_fa_v2_1            # one step's executable, four tools
#   scripts/sanitize.sh --steps 20 --dtype fp16,bf16 build/round/bin/ladder memcheck racecheck
#   scripts/sanitize.sh --args --no-time build/gpu/bin/lab_L05_solution racecheck   # as given
#   scripts/sanitize.sh --print-problems --serving --steps 16-35   # the problems; no GPU needed
#
# --steps S         with the `ladder` executable: only these steps (its --steps: 3-6, 0,3,5);
#                   library peers (98, 99) are never sanitized
# --dtype LIST      element types (the ladder's --dtype; a variant without bf16 is listed as skipped)
# --timeout T       seconds per tool (default 600), shared by the tool's problems: a hang fails the
#                   tool instead of the whole round
# --serving         also Part VI's problems of the steps that serve them: GQA (26), a varlen batch
#                   (27), a decode (28) and a paged cache (29); a step that has no other problem
#                   (27-29) runs them without it
# --args STRING     run EXECUTABLE with exactly these arguments (split at spaces) instead of the
#                   problem list, e.g. a lab checker with --no-time
# --log-dir DIR     keep each run's whole sanitizer output there (TOOL-N.log)
# --print-problems  print the selected steps' problems, one "STEP<Tab>KIND<Tab>ARGS" line each
#                   (KIND base or serving), and exit; with no EXECUTABLE the steps are the table's
# Tools: memcheck (with --leak-check full), racecheck, synccheck, initcheck (default: all four).
#
# The problems (problems_of below) come from each step's ring constants: a walk of U blocks through
# a ring of S stages wraps floor((U - 1) / S) times, so every ring gets U >= 2S + 1 (which is also
# the issue's S + 2 or more), with N ragged against every tile. Persistent kernels (20-22, 26, 27,
# 31-35) get --grid-sms 3: three CTAs, each walking many tiles, so their ring (which runs on across
# tiles) and their Q/O buffer wrap too; decode (28, 29) plans 3 splits for 3 SMs.
# Every displayed hazard is a report, errors and warnings alike; nothing is filtered.
#
# Output, per tool: "== NAME [--steps S] [--dtype D]: TOOL", one line per problem with the tool's
# summary and wall time, any report, and "== result: TOOL STATUS COUNT (PROBLEMS problems, T s)"
# with STATUS clean, reports, fail (the program failed), timeout, or nothing (no variant ran any
# problem: nothing was checked).
# Exit: 0 every tool clean, 1 a report, a failure, a timeout or nothing checked,
# 2 bad usage.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die_usage() { echo "sanitize.sh: $*" >&2; echo "try: scripts/sanitize.sh --help" >&2; exit 2; }

readonly kPeerStepsFrom=90        # library rows (cuDNN's 98, 99): reports would come from its kernels
readonly kMaxReportLines=60       # report lines of a failed run copied into the output
readonly kKillGraceSeconds=10     # after the timeout's TERM, KILL the sanitizer and its program
readonly kSanitizerErrorExit=99   # --error-exitcode: what a run with a report exits with
readonly kNothingRanExit=6        # the ladder's exit code when every selected variant was skipped

# ---- the problems -------------------------------------------------------------------------------
# The problems of step $1, one per line: "base ARGS" (always) or "serving ARGS" (with --serving, or
# when the step has no base problem); no output and status 1 for a step without an entry. Every
# attention problem runs at --d 64,128 and --mask both (`common`, below); B·H and N are about the
# smallest that wrap each ring twice, because racecheck instruments every shared-memory access
# (B = 1: each CTA's walk, not the batch, is what wraps a ring). W counts the
# wraps of the longest walk (a causal problem's last query block walks as far as an unmasked one).
# tests/cpu/test_sanitize.py recomputes every W from the steps' sources.
problems_of() {
  case $1 in
    # Steps 00-02: no ring (00's S and P are in global memory; 01's slab of 16 or 32 is reloaded
    # over K = 129: 5-9 slabs, W >= 4; 02 reduces in registers and a tree). Ragged sizes only.
    0|1|2) echo "base --b 1 --heads 2 --n 113 --gemm 113,127,129 --count 100003" ;;
    # N = 200 = 3·64 + 8. 03: one K/V buffer (S = 1) of 64 keys, 4 blocks, W = 3; its inner walk
    # reloads the Q buffer (S = 1) per query block of 48 or 64 rows, 5 or 4 blocks, W = 4 or 3.
    # 04: a 2-stage cp.async ring of 32 keys, 7 blocks, W = 3. 07-14: one K and one V buffer
    # (S = 1) of 64 keys, 4 blocks, W = 3. 23: no ring (two N×N matrices in global memory).
    3|4|7|8|9|10|11|12|13|14|23) echo "base --b 1 --heads 2 --n 200 --grid-sms 3" ;;
    # N = 300 = 4·64 + 44: 2-stage K/V rings of 64 keys (05/bc64, 30) and 15's 2-stage V ring: 5
    # blocks, W = 2; 05/bc32's ring of 32 keys: 10 blocks, W = 4; 15's single K buffer: W = 4.
    5|15|30) echo "base --b 1 --heads 2 --n 300 --grid-sms 3" ;;
    # N = 563 = 4·128 + 51. 06: a 2-stage ring of 128 keys at D = 64 (bc128, h200): 5 blocks, W = 2;
    # of 64 keys at D = 128: 9 blocks, W = 4. 16-18: 2-stage rings of 128 keys: 5 blocks, W = 2.
    # 24, 25: the Q/dO ring (and 25's dS ring) of 2 stages walked by a key block: 128 query rows at
    # D = 64 (24, 25's two consumers), 5 blocks, W = 2; 64 rows (D = 128, 25/one_consumer), 9
    # blocks, W = 4. 25's dQ convert grid is capped at 16·3 CTAs by --grid-sms 3: a strided walk.
    # 36, 39: step 25's two-consumer tiles (both rings 2 stages: 5 blocks at D = 64, 9 at D = 128).
    6|16|17|18|24|25|36) echo "base --b 1 --heads 2 --n 563 --grid-sms 3" ;;
    # 39 both ways: on 3 SMs its 5 key blocks per head take the ascending order of turns, on the
    # whole GPU the rotated walk (no mask) with its cycle of waits.
    39) echo "base --b 1 --heads 2 --n 563 --grid-sms 3"
        echo "base --b 1 --heads 2 --n 563" ;;
    # 40 (the dQ writer warp): 39's two problems; the writer's staging buffers (2 at D = 128: 9
    # blocks, W = 5; 1 at D = 64: 5 blocks) and both variants (atomic, ordered both ways).
    40) echo "base --b 1 --heads 2 --n 563 --grid-sms 3"
        echo "base --b 1 --heads 2 --n 563" ;;
    # 37 (GQA backward): the dense problem, and 4 query heads on 2 K/V heads: a CTA's ring runs on
    # across the group's 2 heads, 10 blocks at D = 64 (W = 4), 18 at D = 128 (W = 8).
    37) echo "base --b 1 --heads 2 --n 563 --grid-sms 3"
        echo "serving --b 1 --heads 4 --kv-heads 2 --n 563 --grid-sms 3" ;;
    # 38 (varlen backward only): lengths 1, 113, 563, 64, 300, MHA and 4 query heads on 2 K/V heads:
    # the 563-token sequence's key blocks walk 5 query blocks at D = 64 (W = 2; 10 with the group of
    # 2), 9 at D = 128 (W = 4).
    38) echo "serving --heads 4 --kv-heads 0,2 --varlen 1,113,563,64,300 --grid-sms 3" ;;
    # N = 777 = 6·128 + 9: 3-stage rings of 128 keys, 7 blocks per query block, W = 2 (19's
    # 2-stage variants: W = 3). Persistent (20, 21, 31-33, 35): 2 heads × 7 query blocks of 128
    # rows = 14 tiles on 3 CTAs (5, 5, 4 tiles with a static walk; 21/dynamic's counter decides its
    # own): the K/V ring runs on across tiles (28 blocks per CTA unmasked, W >= 9; causal, 16 for
    # the lightest CTA, W = 5) and the Q/O buffer (one slot, a q_full phase per tile) W >= 3.
    19|20|21|31|32|33|35) echo "base --b 1 --heads 2 --n 777 --grid-sms 3" ;;
    # 26 (GQA): the dense problem, and 4 query heads on 2 K/V heads (group 2). N = 1050 = 8·128 + 26
    # = 5·192 + 90: at D = 128 (tiles of 128 rows, 3 stages) 36 tiles on 3 CTAs, the longest tile
    # W = 2; at D = 64 (step 22's tile: 192 rows, 4 stages) 24 tiles, 9 blocks each, W = 2; the ring
    # over a CTA's tiles and the Q/O buffer wrap many times more.
    26) echo "base --b 1 --heads 2 --n 1050 --grid-sms 3"
        echo "serving --b 1 --heads 4 --kv-heads 2 --n 1050 --grid-sms 3" ;;
    # N = 1050 = 8·128 + 26 = 5·192 + 90: 22 and 34's rings of 4 stages (22's second variant: 3)
    # of 128 keys, 9 blocks per query block of 192 rows, W = 2; 2 heads × 6 tiles on 3 CTAs, 4
    # each: Q/O W = 3, the ring over a CTA's tiles W >= 8 (causal 4; 3 stages: 11, causal 6).
    # D = 128 is refused (three consumers' O accumulators do not fit): those rows are skipped.
    22|34) echo "base --b 1 --heads 2 --n 1050 --grid-sms 3" ;;
    # 27 (varlen only): lengths 1, 113, 1050, 64, 300, MHA and 4 query heads on 2 K/V heads: at
    # D = 128, 13 query blocks of 128 per head, 52 tiles on 3 CTAs (Q/O W >= 16), the 1050-token
    # sequence 9 blocks of the 3-stage ring, W = 2; at D = 64, blocks of 192 rows, 4 stages, W = 2.
    27) echo "serving --heads 4 --kv-heads 0,2 --varlen 1,113,1050,64,300 --grid-sms 3" ;;
    # 28 (decode) and 29 (paged): 7 queries × a group of 4 = 28 packed rows, 2 row blocks × B·Hkv =
    # 8 CTAs per split; on 3 SMs (2 CTAs each) the split rule picks 3 splits of the 136 tiles of 16
    # keys (2169 = 135·16 + 9): 46, 46, 44 tiles, 11 or 12 per warp. Each warp's cp.async ring: 5
    # stages at D = 64, W = 2; 3 stages at D = 128, W = 3. one_cta_per_head walks 34 per warp.
    # 29 also through pages of 64 (34 pages, the last of 57 keys) and of 16 (136 pages).
    # 41, 42: 28's problem; its 3 splits meet at the 8 counters, each CTA fencing and counting, the
    # last merging and resetting, at every launch of the run (the check's and its rerun's).
    28|41|42) echo "serving --b 2 --heads 8 --kv-heads 2 --n 7 --kv-n 2169 --grid-sms 3" ;;
    # 43: 29's problem (42's counters and merge through the pages).
    29|43) echo "serving --b 2 --heads 8 --kv-heads 2 --n 7 --kv-n 2169 --page-size 0,64,16 --grid-sms 3" ;;
    # 44 (rows across the warps, one ring a CTA of 64-key tiles, 5 stages at D = 64 and 3 at 128):
    # 16 queries × a group of 5 = 80 packed rows, 2 row blocks (48 + 32: one and two idle warps)
    # × B·Hkv = 8 CTAs a split of the 4-warp CTA; 4 queries: 20 rows, 1 block, 4 CTAs of the
    # 2-warp one. On 3 SMs (2 CTAs each) both plan 3 splits of the 36 tiles (2300 = 35·64 + 60):
    # 12 each, W = 2 at D = 64 and 3 at 128; the splits of both row blocks meet at the counters.
    44) echo "serving --b 2 --heads 10 --kv-heads 2 --n 16 --kv-n 2300 --grid-sms 3"
        echo "serving --b 2 --heads 10 --kv-heads 2 --n 4 --kv-n 2300 --grid-sms 3" ;;
    # 45 (FP8, D = 64 and 128): the producer's three transposing warps walk a 4-stage ring (and its Vᵀ
    # twin) across the CTA's tiles; 1177 = 9·128 + 25 gives the longest tile 10 blocks, so even one
    # tile wraps the ring twice, the lightest CTA's walk far more; GQA (group 2) too.
    # 46: 45's kernel with part of the exponentials on the FMA pipes, the same problems. 47: a
    # 2-stage ring of 192- or 128-key blocks; the longest tile's 7 or 10 blocks wrap it 3 or 4 times;
    # three_stages' 3-stage K/Vt ring and 2-stage V ring, 7 blocks: twice and 3 times.
    45|46|47) echo "base --b 1 --heads 2 --n 1177 --grid-sms 3 --dtype fp8"
        echo "serving --b 1 --heads 4 --kv-heads 2 --n 1050 --grid-sms 3 --dtype fp8" ;;
    *) return 1 ;;
  esac
}
readonly kTableSteps="0-47"  # the steps problems_of knows (--print-problems without an executable)

# ---- arguments ------------------------------------------------------------------------------------
steps="" dtype="" limit=600 serving=0 use_args=0 exe_args="" log_dir="" print_only=0 is_ladder=0
value() { [ $# -ge 2 ] && [ -n "$2" ] || die_usage "$1 needs a value"; }
while (($#)); do
  case $1 in
    --steps) value "$@"; steps=$2; shift 2 ;;
    --dtype) value "$@"; dtype=$2; shift 2 ;;
    --timeout) value "$@"; limit=$2; shift 2 ;;
    --serving) serving=1; shift ;;
    --args) [ $# -ge 2 ] || die_usage "--args needs a value (\"\" for none)"; use_args=1; exe_args=$2; shift 2 ;;
    --log-dir) value "$@"; log_dir=$2; shift 2 ;;
    --print-problems) print_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die_usage "unknown option $1" ;;
    *) break ;;
  esac
done
step_list_re='^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$'
[ -z "$steps" ] || [[ $steps =~ $step_list_re ]] || die_usage "--steps takes numbers and ranges like 3-6 or 0,3,5 (got '$steps')"
[ -z "$dtype" ] || [[ $dtype =~ ^(fp16|bf16|fp8)(,(fp16|bf16|fp8))*$ ]] || die_usage "--dtype takes fp16, bf16, fp8 or a list of them (got '$dtype')"
[[ $limit =~ ^[0-9]+$ ]] && ((limit > 0)) || die_usage "--timeout takes a positive number of seconds (got '$limit')"
if ((use_args)) && { [ -n "$steps" ] || [ -n "$dtype" ] || ((serving)) || ((print_only)); }; then
  die_usage "--args runs the executable as given: it does not combine with --steps, --dtype, --serving or --print-problems"
fi

exe=${1:-}
[ $# -gt 0 ] && shift
if [ -z "$exe" ] && ! ((print_only)); then
  die_usage "EXECUTABLE is missing (usage: scripts/sanitize.sh [OPTIONS] EXECUTABLE [TOOLS...])"
fi
if [ -n "$exe" ] && [ ! -x "$exe" ]; then
  die_usage "$exe is not an executable (build it first: cmake --build --preset gpu --target ladder)"
fi
tools=("$@")
((${#tools[@]})) || tools=(memcheck racecheck synccheck initcheck)
for tool in "${tools[@]}"; do
  case $tool in memcheck|racecheck|synccheck|initcheck) ;; *) die_usage "unknown tool '$tool' (tools: memcheck racecheck synccheck initcheck)" ;; esac
done

# ---- the steps and their problems --------------------------------------------------------------------
# "3-6,9" over the numbers in $2 (one per line): a range takes those inside it; a single number must
# be one of them (as the ladder's --steps).
expand_steps() {
  local spec=$1 known=$2 part lo hi s out=()
  IFS=, read -r -a parts <<<"$spec"
  for part in "${parts[@]}"; do
    if [[ $part == *-* ]]; then
      lo=$((10#${part%-*})) hi=$((10#${part#*-}))
      ((lo <= hi)) || die_usage "--steps: the range $part runs backwards"
      for s in $known; do ((s >= lo && s <= hi)) && out+=("$s"); done
    else
      s=$((10#$part))
      grep -qx "$s" <<<"$known" || die_usage "--steps: there is no step $s${exe:+ in $(basename "$exe")} (see --list)"
      out+=("$s")
    fi
  done
  printf '%s\n' "${out[@]}" | sort -n -u
}

if ((use_args)); then
  selected=()
else
  if [ -n "$exe" ]; then
    listing=$("$exe" --list 2>&1) || die_usage "$exe --list failed: is it the ladder or a step executable? ($listing)"
    known=$(awk '/^[0-9][0-9]+ / {print $1 + 0}' <<<"$listing")
    [ -n "$known" ] || die_usage "$exe --list names no step: is it the ladder or a step executable?"
    # A step's own executable runs its step and has no --steps option; `ladder` has one.
    # The help is read whole before it is searched: `exe --help | grep -q` under pipefail fails
    # whenever grep exits before the executable has written everything (SIGPIPE), and the ladder
    # would then run every step under the tool.
    help_text=$("$exe" --help 2>/dev/null) || true
    grep -q -- '--steps' <<<"$help_text" && is_ladder=1
  else
    known=$(seq "${kTableSteps%-*}" "${kTableSteps#*-}")
  fi
  if [ -n "$steps" ]; then picked=$(expand_steps "$steps" "$known") || exit 2; else picked=$known; fi
  selected=()
  for s in $picked; do ((s < kPeerStepsFrom)) && selected+=("$s"); done
  ((${#selected[@]})) || die_usage "nothing to sanitize: the selection${steps:+ $steps} holds library peers only (steps $kPeerStepsFrom and up are not sanitized)"
fi

# The unique problems in first-seen order, each with the selected steps that run it.
problem_args=() problem_steps=()
add_problem() {  # add_problem STEP ARGS
  local i
  for i in "${!problem_args[@]}"; do
    if [ "${problem_args[$i]}" = "$2" ]; then problem_steps[$i]+=",$1"; return; fi
  done
  problem_args+=("$2") problem_steps+=("$1")
}
for s in "${selected[@]}"; do
  table=$(problems_of "$s") || die_usage "step $s has no sanitizer problem in scripts/sanitize.sh (problems_of): add one sized from its rings' stages and block sizes"
  has_base=0
  grep -q '^base ' <<<"$table" && has_base=1
  while read -r kind args; do
    if ((print_only)); then
      [ "$kind" = base ] || ((serving || !has_base)) && printf '%s\t%s\t%s\n' "$s" "$kind" "$args"
      continue
    fi
    if [ "$kind" = base ] || ((serving || !has_base)); then add_problem "$s" "$args"; fi
  done <<<"$table"
done
((print_only)) && exit 0

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$sanitizer" ] || { echo "sanitize.sh: no compute-sanitizer on PATH or in /usr/local/cuda/bin (it comes with the CUDA toolkit)" >&2; exit 1; }
[ -z "$log_dir" ] || mkdir -p "$log_dir" || die_usage "--log-dir $log_dir cannot be created"

# Library rows are left out (their reports would come from inside the libraries' kernels).
common=(--no-time --no-peers --no-resources --d 64,128 --mask both)
[ -n "$dtype" ] && common+=(--dtype "$dtype")
if ((use_args)); then
  read -r -a given <<<"$exe_args"
  problem_args=("${exe_args:-(no arguments)}") problem_steps=("")
fi

# The reports a finished run's log shows: the sum of its summary lines' counts.
count_reports() {  # count_reports TOOL LOG
  if [ "$1" = racecheck ]; then
    sed -n 's/.*RACECHECK SUMMARY: \([0-9][0-9]*\) hazard.*/\1/p' "$2"
  else
    sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$2"
  fi | awk '{n += $1} END {print n + 0}'
}
has_summary() { grep -qE "ERROR SUMMARY|RACECHECK SUMMARY" "$2"; }
# The program's own failure lines (the ladder's "error: ...", a lab's "LNN: FAIL"): a failed check
# under a tool that found reports exits 99 like a clean program with reports would.
program_failed() { grep -qE '^(error: |L[0-9]{2}: FAIL)' "$1"; }
# The lines of a report: the tool's own (without its banner), the program's errors, the log's end.
show_report() {
  grep -E '^=========' "$1" | grep -vE '^=========( COMPUTE-SANITIZER)?\s*$' | head -"$kMaxReportLines" | sed 's/^/    /'
  grep -E '^(error: |L[0-9]{2}: FAIL|  - )' "$1" | head -12 | sed 's/^/    /'
  echo "    (last lines of the log:)"
  tail -5 "$1" | sed 's/^/    /'
}

# A tool's status is its worst problem's: clean < reports < timeout < fail. A problem that
# no selected variant runs counts for nothing; if none ran, the tool's status is `nothing`.
rank() { case $1 in clean) echo 0 ;; reports) echo 1 ;; timeout) echo 2 ;; fail) echo 3 ;; esac; }

status=0
log=$(mktemp /tmp/sanitize.XXXXXX)
trap 'rm -f "$log"' EXIT
name=$(basename "${exe}")
for tool in "${tools[@]}"; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  echo "== $name${steps:+ --steps $steps}${dtype:+ --dtype $dtype}: $tool"
  tool_start=$SECONDS deadline=$((SECONDS + limit))
  worst=clean reports=0 skipped=0
  for i in "${!problem_args[@]}"; do
    left=$((deadline - SECONDS))
    label=${problem_args[$i]}
    [ -n "${problem_steps[$i]}" ] && label="[steps ${problem_steps[$i]}] $label"
    if ((left <= 0)); then
      echo "  $label: not run, the tool's ${limit} s were spent"
      [ "$(rank "$worst")" -lt "$(rank timeout)" ] && worst=timeout
      continue
    fi
    if ((use_args)); then
      cmd=("$sanitizer" --tool "$tool" --error-exitcode "$kSanitizerErrorExit" "${extra[@]}" "$exe" "${given[@]}")
    else
      read -r -a args <<<"${problem_args[$i]}"
      step_opt=()
      ((is_ladder)) && step_opt=(--steps "${problem_steps[$i]}")
      cmd=("$sanitizer" --tool "$tool" --error-exitcode "$kSanitizerErrorExit" "${extra[@]}" "$exe" "${common[@]}"
           "${step_opt[@]}" "${args[@]}")
    fi
    t0=$SECONDS
    echo "\$ ${cmd[*]}" >"$log"
    timeout -k "$kKillGraceSeconds" "$left" "${cmd[@]}" >>"$log" 2>&1
    r=$?
    secs=$((SECONDS - t0))
    [ -n "$log_dir" ] && cp "$log" "$log_dir/$tool-$((i + 1)).log"
    n=$(count_reports "$tool" "$log")
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1 | sed 's/^=* *//')
    this=clean
    if ((r == 124 || r == 137)); then
      this=timeout
      echo "  $label: TIMEOUT after ${secs} s (the tool's ${limit} s; exit $r)"
    elif ((r == kNothingRanExit)) && ! ((use_args)); then
      this=clean skipped=$((skipped + 1))
      echo "  $label: no selected variant runs it (exit $r; ${secs} s)"
    elif ((r != 0 && r != kSanitizerErrorExit)) || { ((r == kSanitizerErrorExit)) && program_failed "$log"; } ||
         { ((r == 0)) && ! has_summary "$tool" "$log" && [ -z "$summary" ] && ! ((use_args)); }; then
      this=fail
      echo "  $label: FAILED: the program failed or the tool did not finish (exit $r; ${secs} s)${summary:+; $summary}"
      show_report "$log"
    elif ((n > 0 || r == kSanitizerErrorExit)); then
      this=reports
      echo "  $label: REPORTS: ${summary:-exit $r} (${secs} s):"
      show_report "$log"
      reports=$((reports + (n > 0 ? n : 1)))
    else
      echo "  $label: ${summary:-no summary line (the program made no CUDA call?)} (${secs} s)"
    fi
    [ "$(rank "$this")" -gt "$(rank "$worst")" ] && worst=$this
  done
  # Every problem skipped by every variant: nothing was checked, which is not a pass.
  if [ "$worst" = clean ] && ((skipped == ${#problem_args[@]})); then
    worst=nothing
    echo "  nothing was checked: every selected variant was skipped on every problem (a Hopper step on another GPU?)"
  fi
  echo "== result: $tool $worst $reports (${#problem_args[@]} problems, $((SECONDS - tool_start)) s)"
  [ "$worst" = clean ] || status=1
done
exit $status

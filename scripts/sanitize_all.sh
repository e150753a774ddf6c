#!/usr/bin/env bash
# Every step and every lab solution under compute-sanitizer's four tools, as parallel jobs on one
# GPU, into one log: scripts/sanitize.sh (its problems wrap every ring at least twice) once per
# step and tool, through `ladder --steps S --dtype fp16,bf16 --serving`, and each lab's solution
# checker with --no-time. Meant to fit one 10-minute call on an H200 (16 cores): see --budget.
#
#   scripts/sanitize_all.sh OUT_LOG                           # steps 03-47, labs L01-L12 and L14, 4 tools
#   scripts/sanitize_all.sh -j 16 --build build/round OUT_LOG
#   scripts/sanitize_all.sh --steps 20-22,25 --tools racecheck --labs none OUT_LOG
#
# -j N          jobs at a time (default 12): each is one sanitizer process with its own CUDA context
#               on the shared GPU; the CPU references use the other cores
# --build DIR   the build folder with bin/ladder and bin/lab_LNN_solution (default build/gpu)
# --steps LIST  steps to run (default 3-44; 98 and 99, the library peers, are never sanitized)
# --tools LIST  comma separated: memcheck, racecheck, synccheck, initcheck (default all four)
# --labs LIST   labs to run, comma separated (default L01-L12 and L14), or none
# --timeout T   seconds per job (default 300); a job past it is reported as a timeout
# --budget S    seconds for the whole run (default 540): a job gets at most what is left, and a job
#               not started by then is reported as not run, so the log is written in time
#
# L09 is a SASS check, but on an H100/H200 its checker also runs its kernel once (run.cu): the
# driver is built first (bin/lab_L09_solution --cpu compiles it into BUILD/labs/lab_L09_solution/)
# and then sanitized directly, since the checker itself is Python around nvcc and cuobjdump.
#
# OUT_LOG gets, in a stable order (steps ascending, then labs; tools in the order above), each
# job's command, its summary lines and any report, then a table (step × tool: clean, no kernel (CPU-only),
# N reports, FAIL, timeout, not run; each with the job's wall time), the slowest jobs and the total
# wall time. The sanitizer's whole output per run is packed into OUT_LOG.logs.tgz.
# Exit: 0 every job clean (or a CPU-only lab), 1 anything else, 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die_usage() { echo "sanitize_all.sh: $*" >&2; echo "try: scripts/sanitize_all.sh --help" >&2; exit 2; }

readonly kAllTools="memcheck racecheck synccheck initcheck"
readonly kAllLabs="L01 L02 L03 L04 L05 L06 L07 L08 L09 L10 L11 L12 L14"
readonly kOuterGraceSeconds=30   # a job's own limit past sanitize.sh's, for its filter and logs
readonly kSlowestShown=15        # the slowest jobs listed under the table
# Labs whose checker launches no kernel (compute-sanitizer stops them: "terminated before first
# instrumented API call"): listed, never run under the tools.
readonly kCpuOnlyLabs="L03"
# A lab checker's deadlock watchdog (L06: 250 ms a wait) would fire on a correct ring slowed ~100×
# by the tools; a real deadlock still ends, at this limit.
export LADDER_LAB_STALL_MS=60000
readonly kLabCost=12             # a lab job's cost guess (the queue's order only), before the tool's weight

jobs_max=12 build=build/gpu steps_arg=3-47 tools_arg=${kAllTools// /,} labs_arg=${kAllLabs// /,}
limit=300 budget=540 out=""
value() { [ $# -ge 2 ] && [ -n "$2" ] || die_usage "$1 needs a value"; }
while (($#)); do
  case $1 in
    -h|--help) usage; exit 0 ;;
    -j) value "$@"; jobs_max=$2; shift ;;
    -j[0-9]*) jobs_max=${1#-j} ;;
    --build) value "$@"; build=$2; shift ;;
    --steps) value "$@"; steps_arg=$2; shift ;;
    --tools) value "$@"; tools_arg=$2; shift ;;
    --labs) value "$@"; labs_arg=$2; shift ;;
    --timeout) value "$@"; limit=$2; shift ;;
    --budget) value "$@"; budget=$2; shift ;;
    -*) die_usage "unknown option $1" ;;
    *) [ -z "$out" ] || die_usage "one OUT_LOG, got '$out' and '$1'"; out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || die_usage "OUT_LOG (the combined log to write) is missing"
for pair in "jobs_max:-j" "limit:--timeout" "budget:--budget"; do
  var=${pair%%:*} flag=${pair#*:}
  [[ ${!var} =~ ^[0-9]+$ ]] && ((${!var} > 0)) || die_usage "$flag takes a positive whole number (got '${!var}')"
done
[[ $steps_arg =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] || die_usage "--steps takes numbers and ranges like 3-35 or 20,25 (got '$steps_arg')"
IFS=, read -r -a tools <<<"$tools_arg"
for t in "${tools[@]}"; do [[ " $kAllTools " == *" $t "* ]] || die_usage "unknown tool '$t' (tools: $kAllTools)"; done
labs=()
if [ "$labs_arg" != none ]; then
  IFS=, read -r -a labs <<<"$labs_arg"
  for l in "${labs[@]}"; do [[ " $kAllLabs " == *" $l "* ]] || die_usage "unknown lab '$l' (labs: $kAllLabs, or none)"; done
fi
ladder=$build/bin/ladder
[ -x "$ladder" ] || die_usage "no $ladder: build it first (cmake --build --preset gpu --target ladder, and the lab_LNN_solution targets)"
out_dir=$(dirname "$out")
[ -d "$out_dir" ] && [ -w "$out_dir" ] || die_usage "the folder of OUT_LOG ($out_dir) does not exist or is not writable"

# The steps: the ladder's, within --steps, without the peers (sanitize.sh --print-problems checks
# the numbers against the ladder's list and says which step is missing).
problems=$(scripts/sanitize.sh --print-problems --serving --steps "$steps_arg" "$ladder") || exit 2
steps=$(cut -f1 <<<"$problems" | sort -n -u)
[ -n "$steps" ] || [ ${#labs[@]} -gt 0 ] || die_usage "nothing to run: no step in $steps_arg and no lab"

work=$(mktemp -d /tmp/sanitize-all.XXXXXX)
logs_dir=$out.d
rm -rf "$logs_dir" && mkdir -p "$logs_dir" || die_usage "cannot create $logs_dir"
start=$SECONDS
deadline=$((SECONDS + budget))
trap 'rm -rf "$work"' EXIT

# ---- the jobs ------------------------------------------------------------------------------------
# One job per (step or lab, tool): NAME KIND WHAT TOOL COST. COST only orders the queue (longest
# first, so the long racecheck jobs do not start last): a guess from the step's variant count, its
# largest problem and the tool, in arbitrary units; the log's wall times are what to tune with.
tool_weight() { case $1 in racecheck) echo 3 ;; memcheck|initcheck) echo 2 ;; *) echo 1 ;; esac; }
listing=$("$ladder" --list) || die_usage "$ladder --list failed"
variants_of() { awk -v s="$1" '/^[0-9][0-9]+ / {cur = $1 + 0; next} cur == s && /^ +[0-9]+\// {n++} END {print n + 0}' <<<"$listing"; }
largest_n() {  # the largest query length (--n, --varlen) of step $1's problems: what racecheck pays for
  awk -F'\t' -v s="$1" '$1 == s {
      k = split($3, a, " ")
      for (i = 1; i < k; i++)
        if (a[i] == "--n" || a[i] == "--varlen") {
          split(a[i + 1], v, ","); for (j in v) if (v[j] + 0 > m) m = v[j] + 0
        }
    } END {print m + 0}' <<<"$problems"
}
queue=()
for s in $steps; do
  v=$(variants_of "$s") n=$(largest_n "$s")
  for t in "${tools[@]}"; do
    queue+=("$(printf 'step-%02d' "$s") step $s $t $(((2 + v * (1 + n * n / 250000)) * $(tool_weight "$t")))")
  done
done
for l in "${labs[@]}"; do
  # L09's jobs wait for its driver's build: last in the queue, they find it built.
  for t in "${tools[@]}"; do queue+=("lab-$l lab $l $t $([ "$l" = L09 ] && echo 0 || echo $((kLabCost * $(tool_weight "$t"))))"); done
done
mapfile -t queue < <(printf '%s\n' "${queue[@]}" | sort -k5,5nr -k1,1 -k4,4)

# L09's driver, built once before its jobs (they wait for it: they are cheap, so they come last).
l09_exe=$build/labs/lab_L09_solution/lab_L09_run
needs_l09=0
for l in "${labs[@]}"; do [ "$l" = L09 ] && needs_l09=1; done
if ((needs_l09)); then
  (if [ -x "$build/bin/lab_L09_solution" ]; then
     timeout "$limit" "$build/bin/lab_L09_solution" --cpu >"$work/l09-build.log" 2>&1
   else
     echo "no $build/bin/lab_L09_solution (build the lab_L09_solution target)" >"$work/l09-build.log"
   fi
   touch "$work/l09-built") &
fi

run_job() {  # run_job NAME KIND WHAT TOOL: writes $work/NAME-TOOL.{out,rc,secs}
  local name=$1 kind=$2 what=$3 tool=$4 key="$1-$4" t0=$SECONDS left r
  left=$((deadline - SECONDS))
  ((left > limit)) && left=$limit
  local job_logs="$logs_dir/$key"
  {
    if ((left <= 0)); then
      echo "not run: the run's ${budget} s budget was spent"
      echo notrun >"$work/$key.rc"
      echo 0 >"$work/$key.secs"
      return
    fi
    case $kind in
      step)
        echo "\$ scripts/sanitize.sh --steps $what --serving --dtype fp16,bf16 --timeout $left $ladder $tool"
        timeout -k 10 "$((left + kOuterGraceSeconds))" scripts/sanitize.sh --steps "$what" --serving --dtype fp16,bf16 \
          --timeout "$left" --log-dir "$job_logs" "$ladder" "$tool"
        r=$? ;;
      lab)
        local exe=$build/bin/lab_${what}_solution args="--no-time --small"
        if [[ " $kCpuOnlyLabs " == *" $what "* ]]; then
          echo "no kernel (CPU-only lab): not sanitized; its checker makes no CUDA call, so the tools have nothing to instrument"
          echo cpuonly >"$work/$key.rc"
          echo 0 >"$work/$key.secs"
          return
        fi
        if [ "$what" = L09 ]; then
          while [ ! -f "$work/l09-built" ] && ((SECONDS < deadline)); do sleep 1; done
          exe=$l09_exe args=""
          if [ ! -x "$exe" ]; then
            echo "FAILED: L09's driver was not built ($exe); bin/lab_L09_solution --cpu said:"
            sed 's/^/    /' "$work/l09-build.log" 2>/dev/null | tail -15
          fi
        fi
        if [ ! -x "$exe" ]; then
          [ "$what" = L09 ] || echo "FAILED: no $exe (build the lab_${what}_solution target; the labs need LADDER_BUILD_TESTS=ON)"
          r=1
        else
          echo "\$ scripts/sanitize.sh --args '$args' --timeout $left $exe $tool"
          timeout -k 10 "$((left + kOuterGraceSeconds))" scripts/sanitize.sh --args "$args" --timeout "$left" \
            --log-dir "$job_logs" "$exe" "$tool"
          r=$?
        fi ;;
    esac
    echo "$r" >"$work/$key.rc"
    echo $((SECONDS - t0)) >"$work/$key.secs"
  } >"$work/$key.out" 2>&1
  printf '  %-10s %-9s %s (%s s)\n' "$name" "$tool" "$(cell "$key" | sed 's/ ([0-9]* s)$//')" "$(cat "$work/$key.secs")"
}

# A job's cell in the table: its status from sanitize.sh's result line, and its wall time.
cell() {
  local key=$1 rc status count secs
  rc=$(cat "$work/$key.rc" 2>/dev/null || echo missing)
  secs=$(cat "$work/$key.secs" 2>/dev/null || echo 0)
  read -r status count < <(sed -n 's/^== result: [a-z]* \([a-z]*\) \([0-9]*\).*/\1 \2/p' "$work/$key.out" 2>/dev/null | tail -1)
  if [ "$rc" = notrun ]; then echo "not run"; return; fi
  if [ "$rc" = cpuonly ]; then echo "no kernel (CPU-only)"; return; fi
  case ${status:-} in
    clean) [ "$rc" = 0 ] && echo "clean ($secs s)" || echo "FAIL ($secs s)" ;;
    reports) echo "$count reports ($secs s)" ;;
    timeout) echo "timeout ($secs s)" ;;
    nothing) echo "nothing ran ($secs s)" ;;
    *) if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "timeout ($secs s)"; else echo "FAIL ($secs s)"; fi ;;
  esac
}

# The running jobs, into $running (not echoed: `jobs` must run in this shell). L09's build, while
# it runs, is one background job more than the slots count.
count_running() {
  running=$(jobs -rp | wc -l)
  if ((needs_l09)) && [ ! -f "$work/l09-built" ]; then running=$((running - 1)); fi
}

echo "sanitize_all: ${#queue[@]} jobs, $jobs_max at a time, ${limit} s each at most, ${budget} s in all; log: $out"
for entry in "${queue[@]}"; do
  read -r name kind what tool _ <<<"$entry"
  while count_running; ((running >= jobs_max)); do wait -n; done
  run_job "$name" "$kind" "$what" "$tool" &
done
wait
total=$((SECONDS - start))

# ---- the log, in a stable order ------------------------------------------------------------------
ordered=()
for s in $steps; do ordered+=("$(printf 'step-%02d' "$s")"); done
for l in "${labs[@]}"; do ordered+=("lab-$l"); done
{
  echo "# compute-sanitizer on every step and lab solution (scripts/sanitize_all.sh)"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # scripts/tree_state.py, not git: the GPU machine's copy may carry a .git of another commit.
  echo "code: $(python3 scripts/tree_state.py 2>/dev/null || echo "unknown (scripts/tree_state.py failed)")"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo unknown)"
  echo "compute-sanitizer: $( (command -v compute-sanitizer >/dev/null && compute-sanitizer --version || /usr/local/cuda/bin/compute-sanitizer --version) 2>/dev/null | grep -iE 'version' | head -1)"
  echo "build: $build; jobs: $jobs_max at a time; timeout ${limit} s per job; budget ${budget} s"
  echo "steps: $(tr '\n' ' ' <<<"$steps")(each: --dtype fp16,bf16 --serving, the problems of scripts/sanitize.sh --print-problems)"
  echo "labs: ${labs[*]:-none} (each solution's checker with --no-time --small; L09: its driver; CPU-only: $kCpuOnlyLabs)"
  echo
  for name in "${ordered[@]}"; do
    for t in "${tools[@]}"; do
      key="$name-$t"
      echo "### $name $t: $(cell "$key")"
      cat "$work/$key.out" 2>/dev/null || echo "(no output: the job did not run)"
      echo
    done
  done
  echo "## summary"
  printf '%-10s' "job"
  for t in "${tools[@]}"; do printf ' %-22s' "$t"; done
  echo
  for name in "${ordered[@]}"; do
    printf '%-10s' "$name"
    for t in "${tools[@]}"; do printf ' %-22s' "$(cell "$name-$t")"; done
    echo
  done
  echo
  echo "slowest jobs:"
  for f in "$work"/*.secs; do echo "$(cat "$f") $(basename "$f" .secs)"; done | sort -k1,1nr | head -"$kSlowestShown" |
    awk '{printf "  %5d s  %s\n", $1, $2}'
  echo "total wall time: ${total} s for ${#queue[@]} jobs ($jobs_max at a time)"
} >"$out"
# The sanitizer's whole output, one file per run, in one archive beside the log.
if tar czf "$out.logs.tgz" -C "$(dirname "$logs_dir")" "$(basename "$logs_dir")" 2>/dev/null; then
  rm -rf "$logs_dir"
else
  echo "sanitize_all: could not pack $logs_dir into $out.logs.tgz; the logs stay in $logs_dir" >&2
fi

bad=0
for name in "${ordered[@]}"; do
  for t in "${tools[@]}"; do
    case $(cell "$name-$t") in clean*|"no kernel"*) ;; *) bad=$((bad + 1)) ;; esac
  done
done
sed -n '/^## summary/,$p' "$out"
if ((bad)); then
  echo "sanitize_all: $bad of ${#queue[@]} jobs not clean (details in $out)"
  exit 1
fi
echo "sanitize_all: all ${#queue[@]} jobs clean"
exit 0

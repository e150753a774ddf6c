#!/usr/bin/env bash
# The GPU round: the one script that builds (or takes carried binaries), tests, sanitizes, times
# and profiles the ladder on a machine with a GPU, in stages, each under a timeout, the most needed
# first, so a round cut short by a time limit loses the least.
#
#   scripts/round.sh [--stages LIST] [--steps 16-22] [--dtype fp16,bf16] [--bin DIR]
#                    [--old-lib PATH] [--budget SECONDS] OUT
#
# Stages (comma separated; they run in this order whatever the order given):
#   fa4        install FlashAttention-4 from .fa4/ (two transfers, /work/shared/tools/fa4/README.md):
#              .fa4/small (and .fa4/part1) -> /tmp/fa4w, then .fa4/big (or .fa4/part2) -> /tmp/site;
#              a no-op that says so without .fa4/; a later call finds /tmp/site by itself
#   build      configure and build ladder, gpu_tests, libladder_capi.so in ROUND_BUILD (default
#              build/round), unless --bin (or LADDER_BIN) holds binaries that run here
#   smoke      one small ragged problem per step under a short timeout: a hang stops the round here
#   test       the GPU tests of each step and of 99 (LADDER_TEST_STEP), side by side, on the full
#              grid (LADDER_TEST_GRID=full; scripts/test.sh's default is quick), then the
#              timing-noise test alone
#   sanitize   scripts/sanitize.sh through `ladder --steps S --serving` for each step (beside the
#              tests), on its problems that wrap every pipeline ring at least twice
#   ladder     the ladder at Part IV's shapes (B=4 H=8 D=64 and 16k tokens H=16 D=128 at N=4096,8192,
#              both masks; FlashAttention-3's B=4 H=16 N=8448 D=128), every variant of the steps
#              and 06/h200, per dtype
#   fp8        Part VIII in the ladder's process: the FP8 forward (45/fp8, 45/fp8_words) beside cuDNN's
#              FP8 row (99/cudnn_fp8), the bf16 top (33/iterators; 26/group_order for GQA) and
#              cuDNN's bf16 row, bf16 and fp8 problems in one run: B=2 H=16 N=8192 D=128 and
#              B=1 H=64 Hkv=8 N=16384 D=128, both masks; cuDNN's FP8 and the three-consumer bf16
#              top (34) at D=64 (step 45 refuses D=64, which the run lists)
#   backward   Part V in the ladder's process: steps 24-25 and cuDNN's backward (98) at the issue's
#              shapes (B=4 H=8 D=64 and B=2 H=16 D=128, N=8192, both masks), per dtype; and
#              steps 23-25 at B=4 H=8 D=64 N=1024,2048 (fp16), where the naive step's N×N
#              matrices still fit
#   serving    Part VI in the ladder's process (bf16; ROUND_SERVING lists the parts, default all
#              but sweep): decode at the issue's four shapes, contiguous and paged (pages of 64 and
#              256), steps 28-29 and cuDNN (99); fused: steps 28, 41 and 42 at issue 26's four
#              shapes; pagedfused: 29 and 43 through pages of 16, 64, 256 beside 42 at those
#              shapes; specdec: 28, 42 and 44 (rows across the warps) at 1-16 query tokens,
#              both masks; ratios: GQA 1, 4, 8;
#              dtypes: fp16 at D = 128 and bf16 at D = 64 at the four shapes; sweep: scripts/decode_sweep.sh (forced split counts, a tarball); GQA
#              prefill against dense (B=4 H=32 Hkv=8, N=4096,8192, D=128, both masks; steps 21,
#              26, 99); a varlen batch of lengths 1..8192 against the dense
#              batch (steps 21, 27, 99); fp16 accumulation (steps 05, 30; fp16, D=64)
#   grids      the standard grids (B=4 H=8 D=64 N=1k..16k; 16k tokens H=16 D=128 N=1k..16k), each
#              step's main variant, timed only
#   waves      a many-wave shape, B=16 H=16 N=4096 D=64, every variant of the steps
#   softmax    Part III's series (steps 07-15): every variant at B=1 H=64 N=1024 D=128, checked, and
#              Nsight Compute's exports that scripts/softmax_ncu_summary.py turns into the table
#   readme     the README's scripts/ladder.sh on the default shapes, and --save checked by check_npy.py
#   peers      scripts/peers.py: PyTorch's SDPA backends (and FlashAttention-4) on the ladder's grid
#   crosscheck scripts/peers.py --grid part4 with the ladder's variants through libladder_capi.so,
#              beside PyTorch's backends and FlashAttention-4, one process, one timing method
#   bwdpeers   scripts/peers.py --pass bwd: the backward (dQ, dK, dV) of PyTorch's FA2 and cuDNN
#              backends and FlashAttention-4 beside the ladder's backward variants (98/cudnn and
#              each of ROUND_BWD_STEPS' main variant) through libladder_capi.so, at Part V's shapes;
#              37/group_in_cta on --grid bwd-gqa and 38/packed on --grid bwd-varlen --seed 3
#   servepeers scripts/peers.py --pass serve: Part VI's shapes with PyTorch's SDPA (enable_gqa) and
#              FlashAttention-4 (GQA, varlen, paged) beside the ladder's Part VI main variants and
#              steps 41-42 (ROUND_SERVE_GRIDS, default decode paged gqa varlen; decode-sizes too)
#   compare    scripts/peers.py with two libraries (old=--old-lib, new=this build) in one process:
#              each old variant and its new counterpart at Part IV's shapes (make_tables' compare)
#   ncu        Nsight Compute on ROUND_NCU_IDS (speed of light, warp states, schedulers, pipes)
#   profile    scripts/profile.sh (steps 04-09's per-step executables; builds them)
#   labs       every lab checker on its solution (must pass) and its untouched starter (must fail)
# Default: build,smoke,test,sanitize,ladder,crosscheck.
#
# --steps      the steps of test, sanitize, ladder, grids, waves (default 16-22); their variants
#              come from `ladder --list`, so a step that this build lacks is simply not there
# --dtype      element types of the timing stages (default fp16,bf16; files of bf16 end in -bf16)
# --bin DIR    carried binaries: ladder, gpu_tests, libladder_capi.so (or each as FILE.xz, or
#              DIR/bin.tgz of them; unpacked into /tmp/round-bin)
# --old-lib    the older libladder_capi.so (or PATH.xz) for `compare` (default ROUND_OLD_LIB or
#              .oldlib/libladder_capi.so; kept in /tmp/ladder-old for later calls)
# --budget     seconds this call may spend (default ROUND_BUDGET_S or 570): a stage's timeouts are
#              cut to what is left, and a stage is skipped when too little is
# Relative paths (OUT, --bin, --old-lib) are from the repository root, where the script runs.
#
# OUT gets summary.txt, logs.tgz and the dated results (YYYY-MM-DD-*.json, ...); when they are
# more than the device tool brings back (8 files), the results go into results.tgz. Copy results
# to docs/results/<gpu>/ unchanged, under new names; never over an existing file.
# Provenance: in a copy without .git, run `scripts/tree_state.py --write` in the checkout before the
# copy leaves and carry .tree-state.json: the round then verifies the copy against it and records
# commit, dirty true|false and the tree's hash in every results file (else dirty: unknown + hash).
# Environment: LADDER_GIT_COMMIT (the commit, where the copy has no .git nor state file), ROUND_BUILD,
# ROUND_CROSSCHECK_GRID (peers.py's grid for crosscheck: part4, the default, or part7),
# ROUND_CUDA_ARCH (default 90a on sm_90, else native), ROUND_TEST_STEPS, ROUND_SANITIZE_TOOLS
# (default memcheck racecheck synccheck initcheck), ROUND_CROSSCHECK_IDS, ROUND_NCU_IDS,
# ROUND_BWD_STEPS (the backward steps of bwdpeers, default 24 25 36 39 40; 37 and 38 run on the
# bwd-gqa and bwd-varlen grids when the build lists them),
# ROUND_OLD_COMMIT (the commit the --old-lib was built from, recorded in compare's JSON),
# ROUND_COMPARE_PAIRS (OLD>NEW,... instead of the re-cut's ten pairs),
# ROUND_JOBS (parallel test/sanitize processes, default 6), LABS_BIN, FA4_DIR (default .fa4),
# ROUND_FA4_SITE (where an earlier call's fa4 stage installed FlashAttention-4, default /tmp/site;
# empty: none, as the CPU tests run it).
# cuDNN: PyTorch's wheel's, through scripts/cudnn-env.sh; offline, carry .deps (install-deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

ALL_STAGES=(fa4 build smoke test sanitize ladder fp8 backward serving grids waves softmax readme peers crosscheck bwdpeers servepeers compare ncu profile labs)
# Old id -> new id: the variants the compare stage times side by side (the re-cut of Part IV).
COMPARE_PAIRS="20/persistent_3stage>20/persistent,20/persistent_snake>21/snake,20/persistent_dynamic>21/dynamic"
COMPARE_PAIRS+=",21/three_consumers_4stage>22/three_consumers,21/three_consumers>22/three_consumers_3stage"
COMPARE_PAIRS+=",16/wgmma>16/wgmma,17/tma>17/tma,18/ws>18/ws,19/pingpong>19/pingpong"
COMPARE_PAIRS+=",19/pingpong_3stage>19/pingpong_3stage"
COMPARE_PAIRS=${ROUND_COMPARE_PAIRS:-$COMPARE_PAIRS}
DEFAULT_CROSSCHECK="20/persistent 21/snake 21/dynamic 22/three_consumers 99/cudnn"

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die_usage() { echo "round.sh: $*" >&2; echo "try: scripts/round.sh --help" >&2; exit 2; }

stages_arg="build,smoke,test,sanitize,ladder,crosscheck"
steps_arg="16-22"
dtype_arg="fp16,bf16"
carried=${LADDER_BIN:-}
old_lib=${ROUND_OLD_LIB:-.oldlib/libladder_capi.so}
budget=${ROUND_BUDGET_S:-570}
out=""
value() { [ $# -ge 2 ] && [ -n "$2" ] || die_usage "$1 needs a value"; }
while (($#)); do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --stages) value "$@"; stages_arg=$2; shift ;;
    --stages=*) stages_arg=${1#*=} ;;
    --steps) value "$@"; steps_arg=$2; shift ;;
    --steps=*) steps_arg=${1#*=} ;;
    --dtype) value "$@"; dtype_arg=$2; shift ;;
    --dtype=*) dtype_arg=${1#*=} ;;
    --bin) value "$@"; carried=$2; shift ;;
    --old-lib) value "$@"; old_lib=$2; shift ;;
    --budget) value "$@"; budget=$2; shift ;;
    -*) die_usage "unknown option $1" ;;
    *) [ -z "$out" ] || die_usage "one OUT folder, got '$out' and '$1'"; out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || die_usage "OUT (the folder for the results) is missing"
IFS=, read -r -a stages <<<"$stages_arg"
for s in "${stages[@]}"; do
  [[ " ${ALL_STAGES[*]} " == *" $s "* ]] || die_usage "unknown stage '$s' (stages: ${ALL_STAGES[*]})"
done
IFS=, read -r -a dtypes <<<"$dtype_arg"
for d in "${dtypes[@]}"; do [[ $d == fp16 || $d == bf16 || $d == fp8 ]] || die_usage "unknown dtype '$d' (fp16, bf16, fp8)"; done
[[ $budget =~ ^[0-9]+$ ]] || die_usage "--budget takes whole seconds, got '$budget'"
# --steps 16-22 or 6,16-19: the step numbers, without leading zeros.
steps=()
IFS=, read -r -a parts <<<"$steps_arg"
for p in "${parts[@]}"; do
  if [[ $p =~ ^([0-9]+)-([0-9]+)$ ]]; then
    for ((i = 10#${BASH_REMATCH[1]}; i <= 10#${BASH_REMATCH[2]}; i++)); do steps+=("$i"); done
  elif [[ $p =~ ^[0-9]+$ ]]; then steps+=("$((10#$p))")
  else die_usage "--steps takes 16-22 or 6,16,20-22, got '$steps_arg'"
  fi
done
((${#steps[@]})) || die_usage "--steps names no step"

has() { [[ " ${stages[*]} " == *" $1 "* ]]; }
mkdir -p "$out/logs" || exit 1
logs="$out/logs"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
day=$(date -u +%F)
t0=$SECONDS
left() { echo $((budget - (SECONDS - t0))); }
cap() { local l; l=$(($(left) - 10)); ((l < $1)) && echo $((l > 1 ? l : 1)) || echo "$1"; }
csv() { local IFS=,; echo "$*"; }
sfx() { [ "$1" = fp16 ] && echo "" || echo "-$1"; }

# Bring back what there is even when a stage stops the round: logs tarred, results counted.
finish() {
  tar -C "$out" -czf "$out/logs.tgz" logs 2>/dev/null && rm -rf "$logs"
  local f files=()
  for f in "$out"/*; do
    f=${f##*/}
    [[ -e "$out/$f" && ! $f =~ ^(summary.txt|logs.tgz|results.tgz)$ ]] && files+=("$f")
  done
  if ((${#files[@]} + 2 > 8)); then
    tar -C "$out" -czf "$out/results.tgz" "${files[@]}" && (cd "$out" && rm -rf "${files[@]}")
    note "results: ${#files[@]} files packed into results.tgz (the device tool brings back 8)"
  fi
}
trap finish EXIT
trap 'note "stopped by a signal"; exit 124' TERM INT

source scripts/env.sh
source scripts/cudnn-env.sh
# Which code this round measures: the commit, dirty true|false (or unknown in a copy without .git
# unless it carries the .tree-state.json that `scripts/tree_state.py --write` made before the copy
# left), and a hash of the tracked files; exported, so the build and every results file record them.
given_commit=${LADDER_GIT_COMMIT:-}
if state=$(python3 scripts/tree_state.py --env 2>/dev/null); then eval "$state"; fi
[ -n "$given_commit" ] && [ "${LADDER_TREE_SOURCE:-}" != git ] && LADDER_GIT_COMMIT=$given_commit
LADDER_GIT_COMMIT=${LADDER_GIT_COMMIT:-unknown} LADDER_GIT_DIRTY=${LADDER_GIT_DIRTY:-unknown}
export LADDER_GIT_COMMIT LADDER_GIT_DIRTY LADDER_TREE_HASH PYTHONUNBUFFERED=1
# FlashAttention-4 installed by an earlier call on this machine (the fa4 stage). The CPU tests
# (tests/cpu/test_scripts.py) set ROUND_FA4_SITE empty, to run as on a machine without it.
fa4_site=${ROUND_FA4_SITE-/tmp/site}
[ -n "$fa4_site" ] && [ -d "$fa4_site/flash_attn" ] &&
  export PYTHONPATH=$fa4_site:$fa4_site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
note "round at $(date -u +%FT%TZ), commit $LADDER_GIT_COMMIT, dirty: $LADDER_GIT_DIRTY, tree ${LADDER_TREE_HASH:-?} (${LADDER_TREE_SOURCE:-no tree_state.py}), stages ${stages[*]}, steps ${steps[*]}, dtypes ${dtypes[*]}, budget ${budget} s"
note "cuDNN: ${ladder_torch_cudnn:-none in a PyTorch wheel here (the toolkit one, if any)}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,power.limit \
  --format=csv >>"$summary" 2>&1
nvidia-smi >"$logs/nvidia-smi.txt" 2>&1

# Runs one stage (a function), with its time and exit status in the summary; skipped when the
# budget has less than $2 seconds left.
stage() {
  local name=$1 need=${2:-30} start=$SECONDS rc
  has "$name" || return 0
  if (($(left) < need)); then note "$name: skipped, $(left) s of the budget left (needs ~$need)"; return 0; fi
  "stage_$name"
  rc=$?
  note "$name: rc=$rc in $((SECONDS - start)) s"
  return $rc
}

# The old library for `compare`, carried as PATH or PATH.xz (31 MB of mostly device code packs to
# ~4 MB) in whichever call, kept in /tmp/ladder-old for the calls after it on the same machine.
if [ -f "$old_lib.xz" ] && [ ! -f "$old_lib" ]; then
  mkdir -p /tmp/ladder-old && xz -dc "$old_lib.xz" >/tmp/ladder-old/libladder_capi.so && note "old library: $old_lib.xz, unpacked"
elif [ -f "$old_lib" ] && [ "$old_lib" != /tmp/ladder-old/libladder_capi.so ]; then
  mkdir -p /tmp/ladder-old && cp "$old_lib" /tmp/ladder-old/libladder_capi.so
fi
[ -f /tmp/ladder-old/libladder_capi.so ] && old_lib=/tmp/ladder-old/libladder_capi.so

# ---- binaries ------------------------------------------------------------------------------
build=${ROUND_BUILD:-build/round}
bin="" tests="" capi=""
use_bins() {  # use_bins DIR_OF_LADDER GPU_TESTS LIBCAPI: if the ladder runs here
  "$1/ladder" --list >"$logs/list.txt" 2>&1 || return 1
  bin=$1 tests=$2 capi=$3
}
# Carried files may come compressed (FILE.xz, or DIR/bin.tgz): unpacked once into /tmp/round-bin,
# which later calls on the same machine find again.
unpack_bins() {
  local f
  if [ -f "$carried/bin.tgz" ] && [ ! -x "$carried/ladder" ]; then
    mkdir -p /tmp/round-bin && tar -xzf "$carried/bin.tgz" -C /tmp/round-bin && carried=/tmp/round-bin
  elif [ -f "$carried/ladder.xz" ] && [ ! -x "$carried/ladder" ]; then
    mkdir -p /tmp/round-bin
    for f in "$carried"/*.xz; do xz -dc "$f" >"/tmp/round-bin/$(basename "$f" .xz)" && chmod +x "/tmp/round-bin/$(basename "$f" .xz)"; done
    carried=/tmp/round-bin
  fi
}
find_bins() {
  if [ -n "$carried" ]; then
    unpack_bins
    use_bins "$carried" "$carried/gpu_tests" "$carried/libladder_capi.so" && return 0
    note "the carried binaries in $carried do not run here: $(head -c 300 "$logs/list.txt")"
  fi
  use_bins "$build/bin" "$build/tests/gpu_tests" "$build/lib/libladder_capi.so" ||
    use_bins /tmp/round-bin /tmp/round-bin/gpu_tests /tmp/round-bin/libladder_capi.so
}
stage_build() {
  if [ -n "$carried" ] && find_bins && [ "$bin" = "$carried" ]; then
    note "build: the carried binaries in $carried"
    return 0
  fi
  local arch=${ROUND_CUDA_ARCH:-}
  if [ -z "$arch" ]; then
    arch=native
    [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)" = 9.0 ] && arch=90a
  fi
  local targets=(ladder gpu_tests ladder_capi)
  if has labs; then for l in L01 L02 L03 L04 L05 L06 L07 L08 L09 L10 L11 L12 L13 L14; do targets+=("lab_$l" "lab_${l}_solution"); done; fi
  has profile && targets=(all)
  # shellcheck disable=SC2086
  timeout "$(cap 120)" cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DLADDER_BUILD_TESTS=ON -DLADDER_PTXAS_VERBOSE=ON $LADDER_CUDNN_ARGS >"$logs/configure.log" 2>&1 &&
    timeout "$(cap 540)" cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$logs/build.log" 2>&1
  local rc=$?
  note "build ($arch, ${targets[*]}): $(grep -m1 -i 'cudnn attention peer' "$logs/configure.log")"
  if [ $rc -ne 0 ]; then grep -E -B2 -A6 "error|FAILED" "$logs/build.log" | head -60 | tee -a "$summary"; return $rc; fi
  # The compiler's resource report, one line per kernel: registers, spills, shared memory.
  grep -E "Compiling entry|Used [0-9]+ registers|spill stores|C75[0-9][0-9]" "$logs/build.log" >"$out/$day-ptxas.txt"
  find_bins
}

# ---- FlashAttention-4 ----------------------------------------------------------------------
fa4_imports() { python3 -c "import flash_attn.cute, importlib.metadata as m; print(m.version('flash-attn-4'))" 2>/dev/null; }
stage_fa4() {
  local fa4=${FA4_DIR:-.fa4}
  local did=0 line
  if compgen -G "$fa4/small/*.whl" >/dev/null; then
    mkdir -p /tmp/fa4w && cp "$fa4"/small/*.whl /tmp/fa4w/ && did=1
    note "fa4: copied $(ls "$fa4"/small/*.whl | wc -l) wheels to /tmp/fa4w (transfer 1 of 2)"
  fi
  if [ -f "$fa4"/part1/cu13.tar.xz.00 ]; then  # the big archive split in two transfers
    mkdir -p /tmp/fa4w && cp "$fa4"/part1/cu13.tar.xz.00 /tmp/fa4w/ && did=1 && note "fa4: part 1 of the big archive to /tmp/fa4w"
  fi
  local script=""
  if [ -f "$fa4"/big/install-on-device.sh ]; then
    script=$fa4/big/install-on-device.sh
  elif [ -f "$fa4"/part2/cu13.tar.xz.01 ] && [ -f /tmp/fa4w/cu13.tar.xz.00 ]; then
    mkdir -p /tmp/fa4big && cat /tmp/fa4w/cu13.tar.xz.00 "$fa4"/part2/cu13.tar.xz.01 >/tmp/fa4big/cu13.tar.xz &&
      cp "$fa4"/part2/install-on-device.sh /tmp/fa4big/ && script=/tmp/fa4big/install-on-device.sh
  fi
  if [ -n "$script" ]; then
    did=1
    if line=$(timeout "$(cap 300)" bash "$script" 2>"$logs/fa4-install.log"); then
      eval "$line"
      export PYTHONPATH
      note "fa4: installed into /tmp/site (transfer 2 of 2)"
    else
      note "fa4: the install failed: $(tail -3 "$logs/fa4-install.log")"
    fi
  fi
  local v
  if v=$(fa4_imports); then
    note "fa4: flash_attn.cute imports (flash-attn-4 $v); peers, crosscheck and compare time it"
  elif ((did)); then
    note "fa4: not importable yet (after transfer 1, carry .fa4/big in the next call on this warm machine)"
  else
    note "fa4: no $fa4/ folder and no FlashAttention-4 installed: nothing to do; the peers run without it"
  fi
  return 0
}

# ---- variants, from the binary's own list ----------------------------------------------------
# ids of the listed variants whose step is in "$@" (numbers); filter: all, main, bf16.
variants_of() {
  local filter=$1
  shift
  [ -f "$logs/list.txt" ] || return 0
  awk -v want=" $* " -v filter="$filter" '
    $1 ~ /^[0-9]+\/[A-Za-z0-9_]+$/ {
      split($1, p, "/")
      if (!index(want, " " (p[1] + 0) " ")) next
      if (filter == "main" && $0 !~ /\(main\)/) next
      if (filter == "bf16" && $0 !~ /fp16 and bf16/) next
      print $1
    }' "$logs/list.txt"
}
listed() { [ -n "$(variants_of all "$((10#${1%%/*}))" | grep -x "$1")" ]; }
need_bin() { [ -n "$bin" ] || { note "$1: no ladder binary (run the build stage, or carry --bin)"; return 1; }; }

# ---- correctness ---------------------------------------------------------------------------
stage_smoke() {
  need_bin smoke || return 1
  timeout "$(cap 90)" "$bin/ladder" --steps "$(csv "${steps[@]}")" --no-peers --no-time --no-resources --b 1 \
    --heads 3 --n 113,1000 --d 64,128 --mask both --dtype "$dtype_arg" >"$logs/smoke.log" 2>&1
  local rc=$?
  grep -cE "^ *[0-9]+/[a-z0-9_]+ " "$logs/smoke.log" | sed 's/^/smoke rows: /' | tee -a "$summary"
  [ $rc -eq 0 ] || tail -20 "$logs/smoke.log" | tee -a "$summary"
  return $rc
}

# The GPU tests and the sanitizer (they check, they do not time) side by side on the one GPU,
# at most ROUND_JOBS processes at a time (the fp64 reference runs on the CPU).
throttle() { while (($(jobs -rp | wc -l) >= ${ROUND_JOBS:-6})); do sleep 0.5; done; }
stage_checks() {
  local s rc=0 t
  read -r -a test_steps <<<"${ROUND_TEST_STEPS:-${steps[*]} 99}"
  read -r -a tools <<<"${ROUND_SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}"
  t=$(cap 400)
  for s in "${test_steps[@]}"; do
    if has test && [ -n "$(variants_of all "$s")" ]; then
      throttle
      (LADDER_TEST_STEP=$s LADDER_TEST_GRID=full timeout "$t" "$tests" "~[timing]" >"$logs/test-$s.log" 2>&1; echo $? >"$logs/test-$s.rc") &
    fi
  done
  for s in "${steps[@]}"; do
    # Library peers (99) are not sanitized: the reports would come from inside cuDNN's kernels.
    if has sanitize && ((s < 90)) && [ -n "$(variants_of all "$s")" ]; then
      throttle
      (scripts/sanitize.sh --steps "$s" --serving --dtype "$dtype_arg" --timeout "$((t / ${#tools[@]}))" "$bin/ladder" \
         "${tools[@]}" >"$logs/sanitize-$s.log" 2>&1; echo $? >"$logs/sanitize-$s.rc") &
    fi
  done
  wait
  for s in "${test_steps[@]}"; do
    [ -f "$logs/test-$s.rc" ] || continue
    note "test step $s: rc=$(cat "$logs/test-$s.rc"); $(grep -E 'test cases|All tests passed' "$logs/test-$s.log" | tail -1)"
    [ "$(cat "$logs/test-$s.rc")" = 0 ] ||
      { rc=1; grep -E "FAILED|with expansion|on B=|error|Timeout|timed out" "$logs/test-$s.log" | head -12 | tee -a "$summary"; }
  done
  for s in "${steps[@]}"; do
    [ -f "$logs/sanitize-$s.rc" ] || continue
    note "sanitize step $s (${tools[*]}): rc=$(cat "$logs/sanitize-$s.rc")"
    [ "$(cat "$logs/sanitize-$s.rc")" = 0 ] || { rc=1; head -16 "$logs/sanitize-$s.log" | tee -a "$summary"; }
  done
  # The timing-noise test times, so it runs alone.
  if has test && (($(left) > 60)); then
    timeout "$(cap 200)" "$tests" "[timing]" >"$logs/test-timing.log" 2>&1
    note "test [timing] (the same kernel timed twice): rc=$?; $(grep -E 'test cases|All tests passed' "$logs/test-timing.log" | tail -1)"
  fi
  return $rc
}
stage_test() { need_bin test && [ -x "$tests" ] || { note "test: no gpu_tests"; return 1; }; stage_checks; }
stage_sanitize() { need_bin sanitize && stage_checks; }  # alone; with the tests, stage_test runs both

# ---- timing in the ladder's own process ------------------------------------------------------
ladder_run() {  # ladder_run NAME TIMEOUT ARGS...: one ladder run with its JSON and log
  local name=$1 t=$2
  shift 2
  timeout "$(cap "$t")" "$bin/ladder" "$@" --json "$out/$day-$name.json" >"$logs/$name.log" 2>&1
  local rc=$?
  note "  $name: rc=$rc"
  grep -E "^ *[0-9]+/[a-z0-9_]+ " "$logs/$name.log" | head -60 >>"$logs/tables.txt"
  return $rc
}
variant_args() { local v; for v in "$@"; do printf -- '--variant\n%s\n' "$v"; done; }
stage_ladder() {
  need_bin ladder || return 1
  local dt s rc=0 ids args
  mapfile -t ids < <(variants_of all "${steps[@]}")
  mapfile -t args < <(variant_args 06/h200 "${ids[@]}")
  for dt in "${dtypes[@]}"; do
    s=$(sfx "$dt")
    local common=(--track attention --steps "6,$(csv "${steps[@]}")" "${args[@]}" --ref-rows 256 --dtype "$dt")
    ladder_run "ladder-d64$s" 300 "${common[@]}" --b 4 --heads 8 --d 64 --n 4096,8192 --mask both || rc=1
    ladder_run "ladder-d128$s" 300 "${common[@]}" --tokens 16384 --heads 16 --d 128 --n 4096,8192 --mask both || rc=1
    ladder_run "ladder-fa3$s" 200 "${common[@]}" --b 4 --heads 16 --d 128 --n 8448 --mask none || rc=1
  done
  return $rc
}
stage_fp8() {
  need_bin fp8 || return 1
  local rc=0
  local common=(--track attention --ref-rows 256 --dtype bf16,fp8 --mask both)
  local dense=(33/iterators 45/fp8 45/fp8_words 46/poly_quarter 46/poly_half 47/wide 47/two_stages 99/cudnn 99/cudnn_fp8)
  local gqa=(26/group_order 45/fp8 45/fp8_words 46/poly_quarter 46/poly_half 47/wide 47/two_stages 99/cudnn 99/cudnn_fp8)
  local d64=(34/three_iterators 45/fp8 99/cudnn 99/cudnn_fp8)
  local v
  mapfile -t v < <(variant_args "${dense[@]}")
  ladder_run "fp8-forward" 300 "${common[@]}" --steps 33,45,46,47,99 "${v[@]}" --b 2 --heads 16 --d 128 --n 8192 || rc=1
  mapfile -t v < <(variant_args "${gqa[@]}")
  ladder_run "fp8-gqa" 300 "${common[@]}" --steps 26,45,46,47,99 "${v[@]}" --b 1 --heads 64 --kv-heads 8 --d 128 \
    --n 16384 || rc=1
  mapfile -t v < <(variant_args "${d64[@]}")
  ladder_run "fp8-d64" 200 "${common[@]}" --steps 34,45,99 "${v[@]}" --b 2 --heads 16 --d 64 --n 8192 || rc=1
  return $rc
}
stage_backward() {
  need_bin backward || return 1
  local dt s rc=0
  for dt in "${dtypes[@]}"; do
    s=$(sfx "$dt")
    local common=(--track backward --steps 24-25,98 --ref-rows 256 --dtype "$dt" --n 8192 --mask both)
    ladder_run "backward-d64$s" 300 "${common[@]}" --b 4 --heads 8 --d 64 || rc=1
    ladder_run "backward-d128$s" 300 "${common[@]}" --b 2 --heads 16 --d 128 || rc=1
  done
  ladder_run "backward-small" 200 --track backward --steps 23-25,98 --ref-rows 256 --b 4 --heads 8 --d 64 \
    --n 1024,2048 --mask both || rc=1
  return $rc
}
stage_serving() {
  need_bin serving || return 1
  local rc=0 part
  local d=(--track attention --ref-rows 256 --dtype bf16 --d 128)
  for part in ${ROUND_SERVING:-decode fused gqa varlen fp16acc}; do
    case $part in
      decode)
        ladder_run serving-decode-b8 150 "${d[@]}" --steps 28,29 --b 8 --heads 32 --kv-heads 8 --n 1 \
          --kv-n 32768 --page-size 0,64,256 || rc=1
        ladder_run serving-decode-b64 150 "${d[@]}" --steps 28,29 --b 64 --heads 32 --kv-heads 8 --n 1 \
          --kv-n 4096 --page-size 0,64,256 || rc=1
        ladder_run serving-decode-b1 150 "${d[@]}" --steps 28,29 --b 1 --heads 64 --kv-heads 8 --n 1 \
          --kv-n 131072 --page-size 0,64,256 || rc=1
        ladder_run serving-decode-b128 150 "${d[@]}" --steps 28,29 --b 128 --heads 32 --kv-heads 32 --n 1 \
          --kv-n 2048 --page-size 0,64,256 || rc=1 ;;
      fused)  # issue 26: steps 28, 41, 42 side by side at its four contiguous shapes (bf16, D = 128)
        local shp
        for shp in "3 40 12345" "1 64 131072" "8 32 32768" "64 32 4096"; do
          set -- $shp
          ladder_run "serving-fused-b$1-nk$3" 90 "${d[@]}" --steps 28,41,42 --b "$1" --heads "$2" --kv-heads 8 \
            --n 1 --kv-n "$3" || rc=1
        done ;;
      pagedfused)  # issue 26: 29 and 43 (paged) beside 42 (contiguous) at its four shapes, pages of 16, 64, 256
        local shq
        for shq in "3 40 12345" "1 64 131072" "8 32 32768" "64 32 4096"; do
          set -- $shq
          ladder_run "serving-pagedfused-b$1-nk$3" 120 "${d[@]}" --steps 29,42,43 --b "$1" --heads "$2" --kv-heads 8 \
            --n 1 --kv-n "$3" --page-size 0,16,64,256 || rc=1
        done ;;
      specdec)  # issue 26: 1-16 query tokens a sequence (speculative decoding), causal aligned to the end and not;
        # 44 (a CTA's warps over its rows, one K/V ring) beside 42 (a CTA per 16 rows) and 28
        ladder_run serving-specdec-b3 200 "${d[@]}" --steps 28,42,44 --b 3 --heads 40 --kv-heads 8 --n 1,2,4,7,16 \
          --kv-n 12345 --mask both || rc=1
        ladder_run serving-specdec-b8 200 "${d[@]}" --steps 28,42,44 --b 8 --heads 32 --kv-heads 8 --n 1,2,4,7,16 \
          --kv-n 32768 --mask both || rc=1 ;;
      ratios)  # issue 26: GQA ratios 1, 4, 8 (Hkv = 32, 8, 4 at Hq = 32) at B=3 and B=8
        ladder_run serving-ratios-b3 150 "${d[@]}" --steps 28,42 --b 3 --heads 32 --kv-heads 32,8,4 --n 1 --kv-n 12345 || rc=1
        ladder_run serving-ratios-b8 150 "${d[@]}" --steps 28,42 --b 8 --heads 32 --kv-heads 32,8,4 --n 1 --kv-n 32768 || rc=1 ;;
      dtypes)  # issue 26: fp16 at D = 128 and bf16 at D = 64, steps 28 and 42 at the four shapes
        local sht
        for sht in "3 40 12345" "1 64 131072" "8 32 32768" "64 32 4096"; do
          set -- $sht
          ladder_run "serving-dtypes-fp16-b$1-nk$3" 90 --track attention --ref-rows 256 --dtype fp16 --d 128 --steps 28,42 \
            --b "$1" --heads "$2" --kv-heads 8 --n 1 --kv-n "$3" || rc=1
          ladder_run "serving-dtypes-d64-b$1-nk$3" 90 --track attention --ref-rows 256 --dtype bf16 --d 64 --steps 28,42 \
            --b "$1" --heads "$2" --kv-heads 8 --n 1 --kv-n "$3" || rc=1
        done ;;
      sweep)  # issue 26: the split count forced from 1 to 64 (scripts/decode_sweep.sh), one tarball
        timeout "$(cap 400)" scripts/decode_sweep.sh --ladder "$bin/ladder" "$logs/decode-sweep" \
          >"$logs/decode-sweep.log" 2>&1 || rc=1
        tar -C "$logs" -czf "$out/$day-decode-sweep.tgz" decode-sweep && note "  decode sweep: $out/$day-decode-sweep.tgz" ;;
      gqa)
        ladder_run serving-gqa 300 "${d[@]}" --steps 21,26 --b 4 --heads 32 --kv-heads 0,8 --n 4096,8192 \
          --mask both || rc=1 ;;
      varlen)
        ladder_run serving-varlen 300 "${d[@]}" --steps 21,27 --heads 16 --kv-heads 0,4 \
          --varlen random:24:8192:1 --varlen dense --b 6 --n 8192 --mask both || rc=1 ;;
      fp16acc)
        ladder_run serving-fp16acc 300 --track attention --steps 5,30 --ref-rows 256 --dtype fp16 --d 64 \
          --b 4 --heads 8 --n 1024,2048,4096,8192 --mask both || rc=1 ;;
      *) note "serving: unknown part '$part'"; rc=1 ;;
    esac
  done
  return $rc
}
stage_grids() {
  need_bin grids || return 1
  local dt s rc=0 args
  mapfile -t args < <(variants_of main "${steps[@]}" | xargs -r printf -- '--variant\n%s\n'; variant_args 06/h200)
  for dt in "${dtypes[@]}"; do
    s=$(sfx "$dt")
    local common=(--track attention --steps "6,$(csv "${steps[@]}")" "${args[@]}" --mask both --no-check
                  --no-resources --target-ms 100 --dtype "$dt")
    ladder_run "grid-d64$s" 300 "${common[@]}" --b 4 --heads 8 --d 64 --n 1024,2048,4096,8192,16384 || rc=1
    ladder_run "grid-d128$s" 300 "${common[@]}" --tokens 16384 --heads 16 --d 128 --n 1024,4096,8192,16384 || rc=1
  done
  return $rc
}
stage_waves() {
  need_bin waves || return 1
  local args
  mapfile -t args < <(variants_of all "${steps[@]}" | xargs -r printf -- '--variant\n%s\n')
  ladder_run ladder-d64-waves 200 --track attention --steps "$(csv "${steps[@]}")" "${args[@]}" --ref-rows 256 \
    --b 16 --heads 16 --d 64 --n 4096 --mask both
}
stage_readme() {
  timeout "$(cap 500)" scripts/ladder.sh --json "$out/$day-ladder-default.json" >"$logs/readme-ladder.log" 2>&1 || return 1
  timeout "$(cap 120)" build/gpu/bin/ladder --track attention --n 1000 --d 64,128 --mask both --heads 2 --no-time --save /tmp/round-npy \
    >"$logs/save.log" 2>&1 && python3 scripts/check_npy.py /tmp/round-npy >>"$logs/save.log" 2>&1
  local rc=$?
  note "  --save and scripts/check_npy.py: rc=$rc; $(tail -1 "$logs/save.log")"
  rm -rf /tmp/round-npy
  return $rc
}

# ---- Part III's series -----------------------------------------------------------------------
ncu_bin() { command -v ncu || echo /usr/local/cuda/bin/ncu; }
stage_softmax() {
  need_bin softmax || return 1
  local all part ids args rc=0 ncu rep
  mapfile -t all < <(variants_of all 7 8 9 10 11 12 13 14 15)
  mapfile -t args < <(variant_args 06/h200 06/d128_s64 "${all[@]}")
  ladder_run softmax-series 200 --steps 6-15 "${args[@]}" --b 1 --heads 64 --n 1024 --d 128 --mask both || rc=1
  # Nsight Compute on every kernel at the series' workload, in two reports (07-10, then the
  # rest), so that one cut short leaves the other whole: raw metrics, rule texts, SASS samples.
  ncu=$(ncu_bin)
  local sections=(--section WarpStateStats --section SourceCounters --section InstructionStats --section Occupancy
                  --section LaunchStats --section MemoryWorkloadAnalysis_Tables --section SpeedOfLight
                  --section ComputeWorkloadAnalysis)
  : >"$logs/ncu-details.csv"
  for part in a b; do
    if [ $part = a ]; then mapfile -t ids < <(variants_of all 7 8 9 10)
    else mapfile -t ids < <(printf '%s\n' 06/h200 06/d128_s64; variants_of all 11 12 13 14 15); fi
    (($(left) > 40)) || { note "  ncu part $part: skipped, $(left) s left"; continue; }
    mapfile -t args < <(variant_args "${ids[@]}")
    timeout "$(cap 300)" "$ncu" --clock-control none "${sections[@]}" -k regex:'b300_kernel|fa_v2_2_kernel' \
      -f -o "$logs/ncu-$part" "$bin/ladder" --steps "$([ $part = a ] && echo 7-10 || echo 6-15)" "${args[@]}" \
      --b 1 --heads 64 --n 1024 --d 128 --mask none --no-time --no-check --no-resources >"$logs/ncu-$part.log" 2>&1
    note "  ncu part $part (${#ids[@]} variants): rc=$?"
    rep="$logs/ncu-$part.ncu-rep"
    [ -f "$rep" ] || { rc=1; continue; }
    "$ncu" -i "$rep" --page raw --csv --print-metric-instances values >>"$out/$day-softmax-ncu-raw.csv" 2>>"$logs/ncu-export.err" ||
      "$ncu" -i "$rep" --page raw --csv >>"$out/$day-softmax-ncu-raw.csv" 2>>"$logs/ncu-export.err"
    "$ncu" -i "$rep" --page details --csv --print-details all >>"$logs/ncu-details.csv" 2>>"$logs/ncu-export.err" ||
      "$ncu" -i "$rep" --page details --csv >>"$logs/ncu-details.csv" 2>>"$logs/ncu-export.err"
    "$ncu" -i "$rep" --page source --csv --print-source sass >>"$out/$day-softmax-ncu-source.csv" 2>>"$logs/ncu-export.err"
    rm -f "$rep"
  done
  cp "$logs/ncu-details.csv" "$out/$day-softmax-ncu-details.csv"
  gzip -f "$out/$day-softmax-ncu-"*.csv 2>/dev/null
  # PyTorch at the series' workload and the grids, by peers.py's method.
  peers_run softmax-peers --grid series --dtype fp16 || rc=1
  return $rc
}

# ---- timing in PyTorch's process (scripts/peers.py) ------------------------------------------
peers_run() {  # peers_run NAME ARGS...
  local name=$1
  shift
  timeout "$(cap 400)" python3 scripts/peers.py "$@" --out "$out/$day-$name.json" >"$logs/$name.log" 2>&1
  local rc=$?
  note "  $name: rc=$rc"
  grep -v "efficient" "$logs/$name.log" | grep -E "TFLOP/s|FAIL|refused|error|Error" | head -80 >>"$summary"
  return $rc
}
stage_peers() {
  local dt rc=0
  for dt in "${dtypes[@]}"; do peers_run "peers$(sfx "$dt")" --grid ladder --dtype "$dt" || rc=1; done
  return $rc
}
stage_crosscheck() {
  need_bin crosscheck || return 1
  [ -f "$capi" ] || { note "crosscheck: no libladder_capi.so next to the ladder ($capi)"; return 1; }
  local dt rc=0 ids=() id missing=()
  for id in ${ROUND_CROSSCHECK_IDS:-$DEFAULT_CROSSCHECK}; do
    if listed "$id"; then ids+=("$id"); else missing+=("$id"); fi
  done
  ((${#missing[@]})) && note "  crosscheck: not in this build: ${missing[*]}"
  # and each step's main variant
  for id in $(variants_of main "${steps[@]}"); do [[ " ${ids[*]} " == *" $id "* ]] || ids+=("$id"); done
  for dt in "${dtypes[@]}"; do
    local use=("${ids[@]}")
    # The steps of every id, not only --steps' (an id of another step was dropped from bf16 before).
    [ "$dt" = bf16 ] && mapfile -t use < <(comm -12 <(printf '%s\n' "${ids[@]}" | sort) \
      <(variants_of bf16 $(printf '%s\n' "${ids[@]%%/*}" | sort -u) | sort))
    peers_run "crosscheck$(sfx "$dt")" --grid "${ROUND_CROSSCHECK_GRID:-part4}" --dtype "$dt" --ladder-lib "$capi" \
      --ladder-variants "$(csv "${use[@]}")" || rc=1
  done
  return $rc
}
stage_bwdpeers() {
  need_bin bwdpeers || return 1
  [ -f "$capi" ] || { note "bwdpeers: no libladder_capi.so next to the ladder ($capi)"; return 1; }
  local dt rc=0 s ids=() use main
  listed 98/cudnn && ids+=(98/cudnn)
  for s in ${ROUND_BWD_STEPS:-24 25 36 39 40}; do  # each step's main variant (its only one, if it has one)
    mapfile -t main < <(variants_of main "$s")
    ((${#main[@]})) || mapfile -t main < <(variants_of all "$s")
    ids+=("${main[@]}")
  done
  ((${#ids[@]})) || note "  bwdpeers: no backward variant in this build: PyTorch's and FA4's rows only"
  for dt in "${dtypes[@]}"; do
    use=("${ids[@]}")
    [ "$dt" = bf16 ] && mapfile -t use < <(comm -12 <(printf '%s\n' "${ids[@]}" | sort) <(variants_of bf16 ${ROUND_BWD_STEPS:-24 25 36 39 40} 98 | sort))
    peers_run "bwdpeers$(sfx "$dt")" --pass bwd --dtype "$dt" \
      ${use[0]:+--ladder-lib "$capi" --ladder-variants "$(csv "${use[@]}")"} || rc=1
    # Part VII's serving backwards on their own grids (GQA; the seeded varlen batch of 24 sequences).
    if listed 37/group_in_cta; then
      peers_run "bwdpeers-gqa$(sfx "$dt")" --pass bwd --grid bwd-gqa --dtype "$dt" --ladder-lib "$capi" \
        --ladder-variants 37/group_in_cta || rc=1
    fi
    if listed 38/packed; then
      peers_run "bwdpeers-varlen$(sfx "$dt")" --pass bwd --grid bwd-varlen --seed 3 --dtype "$dt" \
        --ladder-lib "$capi" --ladder-variants 38/packed || rc=1
    fi
  done
  return $rc
}
stage_servepeers() {
  need_bin servepeers || return 1
  [ -f "$capi" ] || { note "servepeers: no libladder_capi.so next to the ladder ($capi)"; return 1; }
  local ids=() s main grid rc=0
  listed 99/cudnn && ids+=(99/cudnn)
  for s in 26 27 28 29 41 42; do  # each step's main variant (its only one, if it has one: --list marks none)
    mapfile -t main < <(variants_of main "$s")
    ((${#main[@]})) || mapfile -t main < <(variants_of all "$s")
    ids+=("${main[@]}")
  done
  ((${#ids[@]})) || note "  servepeers: no Part VI variant in this build: PyTorch's and FA4's rows only"
  # One grid per run: each stays well under the stage's cap (FA4 compiles once per configuration).
  for grid in ${ROUND_SERVE_GRIDS:-decode paged gqa varlen}; do
    peers_run "servepeers-$grid" --pass serve --grid "$grid" --dtype bf16 \
      ${ids[0]:+--ladder-lib "$capi" --ladder-variants "$(csv "${ids[@]}")"} || rc=1
  done
  return $rc
}
stage_compare() {
  need_bin compare || return 1
  [ -f "$old_lib" ] || { note "compare: no old library at $old_lib(.xz) (--old-lib or ROUND_OLD_LIB)"; return 1; }
  [ -f "$capi" ] || { note "compare: no libladder_capi.so of this build ($capi)"; return 1; }
  local dt rc=0 pair pairs=() missing=() stale=()
  IFS=, read -r -a all_pairs <<<"$COMPARE_PAIRS"
  for dt in "${dtypes[@]}"; do
    pairs=() missing=() stale=()
    for pair in "${all_pairs[@]}"; do
      local new=${pair#*>} old=${pair%%>*}
      if ! listed "$new"; then missing+=("$new"); continue; fi
      # A renamed pair whose old id this build still lists: the build predates the re-cut, and
      # its "new" id may name another kernel (20/persistent was the 2-stage ring): not timed.
      if [ "$old" != "$new" ] && listed "$old"; then stale+=("$old>$new"); continue; fi
      # bf16: only where the new variant declares it (an old one that does not is its row's error)
      [ "$dt" = bf16 ] && ! grep -qx "$new" <<<"$(variants_of bf16 "$((10#${new%%/*}))")" && continue
      pairs+=("old:${pair%%>*}>new:$new")
    done
    ((${#missing[@]})) && note "  compare $dt: new ids not in this build: ${missing[*]}"
    ((${#stale[@]})) && note "  compare $dt: not timed, this build still has the old id: ${stale[*]}"
    ((${#pairs[@]})) || { note "  compare $dt: no pair to time"; continue; }
    LADDER_LIB_COMMITS="old=${ROUND_OLD_COMMIT:-unknown},new=$LADDER_GIT_COMMIT" \
      peers_run "compare$(sfx "$dt")" --grid part4 --dtype "$dt" --backends sdpa-cudnn --ladder-lib "old=$old_lib" \
      --ladder-lib "new=$capi" --ladder-pairs "$(csv "${pairs[@]}")" || rc=1
  done
  return $rc
}

# ---- profiles ------------------------------------------------------------------------------
kernel_of() {  # the __global__ function of step $1's source (steps/NN_*/), for ncu's -k filter
  grep -h -A3 "__global__" steps/"$(printf %02d "$1")"_*/*.cu* 2>/dev/null | grep -oE '[a-z0-9_]+_kernel' | head -1
}
stage_ncu() {
  need_bin ncu || return 1
  local ncu id s d shape rc=0 ids=() k
  ncu=$(ncu_bin)
  for id in ${ROUND_NCU_IDS:-22/three_consumers 21/snake}; do listed "$id" && ids+=("$id"); done
  ((${#ids[@]})) || mapfile -t ids < <(variants_of main "${steps[@]}" | tail -1)  # the top step's main
  local metrics=sm__inst_executed_pipe_tensor_op_gmma.sum,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
  metrics+=,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active
  metrics+=,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
  for st in barrier long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle sleeping dispatch_stall \
            selected not_selected lg_throttle membar; do
    metrics+=,smsp__average_warps_issue_stalled_${st}_per_issue_active.ratio
  done
  for id in "${ids[@]}"; do
    s=$((10#${id%%/*}))
    k=${ROUND_NCU_KERNEL:-$(kernel_of "$s")}
    for d in 64 128; do
      if [ "$d" = 128 ]; then shape=(--b 4 --heads 16 --n 4096 --d 128); else shape=(--b 4 --heads 8 --n 4096 --d 64); fi
      timeout "$(cap 120)" "$ncu" --clock-control none ${k:+-k "regex:$k"} --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
        --section ComputeWorkloadAnalysis --metrics "$metrics" "$bin/ladder" --steps "$s" --variant "$id" --no-peers \
        "${shape[@]}" --mask none --no-time --no-check --no-resources >"$logs/ncu-one.log" 2>&1
      local r=$?
      [ $r -eq 0 ] || rc=1
      note "  ncu $id D=$d (kernel ${k:-any}): rc=$r"
      { echo "==== $id ${shape[*]} non-causal"; cat "$logs/ncu-one.log"; } >>"$out/$day-ncu.txt"
    done
  done
  return $rc
}
stage_profile() {
  [ -d "$build/bin" ] || { note "profile: no per-step executables in $build/bin (the build stage builds them)"; return 1; }
  mkdir -p "$out/profile"
  timeout "$(cap 400)" scripts/profile.sh "$build/bin" "$out/profile" >"$logs/profile.log" 2>&1
  local rc=$?
  [ -f "$out/profile/ncu.csv" ] && mv "$out/profile/ncu.csv" "$out/$day-ncu.csv"
  rmdir "$out/profile" 2>/dev/null
  return $rc
}

# ---- the labs ------------------------------------------------------------------------------
stage_labs() {
  # The labs' checkers beside the ladder: the build stage's, or the carried ones (--bin); LABS_BIN overrides.
  local lbin=${LABS_BIN:-${bin:-$build/bin}} lab rc t failures=0
  for lab in L01 L02 L03 L04 L05 L06 L07 L08 L09 L10 L11 L12 L13 L14; do
    if [ ! -x "$lbin/lab_${lab}_solution" ]; then note "  $lab: no checker in $lbin (the build stage builds them)"; failures=$((failures + 1)); continue; fi
    t=$SECONDS
    timeout "$(cap 300)" "$lbin/lab_${lab}_solution" >"$logs/$lab-solution.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "^$lab: PASS" "$logs/$lab-solution.log"; then
      note "  $lab solution: PASS as expected ($((SECONDS - t)) s)"
    else
      note "  $lab solution: UNEXPECTED exit $rc ($((SECONDS - t)) s); last lines:"
      tail -15 "$logs/$lab-solution.log" | tee -a "$summary"
      failures=$((failures + 1))
    fi
    # The measured figures the checker printed (its verdict's lines).
    awk -v lab="$lab" '/^$/ {buf = ""; next} $0 ~ "^" lab ": PASS" {printf "%s", buf; exit} {buf = buf "    " $0 "\n"}' \
      "$logs/$lab-solution.log" | tee -a "$summary"
    # The untouched starter must fail its checks (exit 1, a FAIL line), not crash or hang.
    t=$SECONDS
    timeout "$(cap 300)" "$lbin/lab_$lab" --no-time >"$logs/$lab-starter.log" 2>&1
    rc=$?
    if [ $rc -eq 1 ] && grep -q "^$lab: FAIL" "$logs/$lab-starter.log" &&
       ! grep -q "the checker stopped\|kernel fault" "$logs/$lab-starter.log"; then
      note "  $lab starter: FAIL as expected ($((SECONDS - t)) s):$(grep -m1 -A1 "^$lab: FAIL" "$logs/$lab-starter.log" | tail -1 | cut -c1-160)"
    else
      note "  $lab starter: UNEXPECTED exit $rc ($((SECONDS - t)) s), expected a FAIL verdict; last lines:"
      tail -15 "$logs/$lab-starter.log" | tee -a "$summary"
      failures=$((failures + 1))
    fi
  done
  note "  labs: $failures unexpected result(s)"
  [ $failures -eq 0 ]
}

# ---- the round -----------------------------------------------------------------------------
rc_all=0
stage fa4 5 || rc_all=1
if has build; then stage build 60 || { note "build failed: nothing after it can run"; exit 1; }; else find_bins; fi
[ -n "$bin" ] && note "binaries: $bin ($(grep -cE '^ +[0-9]+/' "$logs/list.txt") variants listed)"
if has smoke; then stage smoke 30 || { note "smoke failed: a kernel hangs or fails on a small problem; stopping"; exit 1; }; fi
if has test; then stage test 60 || rc_all=1; elif has sanitize; then stage sanitize 60 || rc_all=1; fi
for s in ladder fp8 backward serving grids waves softmax readme peers crosscheck bwdpeers servepeers compare ncu profile labs; do
  stage "$s" 40 || rc_all=1
done
note "done in $((SECONDS - t0)) s, rc=$rc_all"
exit $rc_all

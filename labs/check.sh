#!/usr/bin/env bash
# One lab, one command: builds the lab's checker with YOUR kernel file against the harness, runs the
# check grid on the GPU and prints pass/fail with the measured figures. Without a GPU it says so,
# compiles your kernel and runs the CPU parts.
#
#   labs/check.sh L01              # your file (labs/L01_*/...), in build/labs
#   labs/check.sh L01 --solution   # the reference (labs/L01_*/solution/...), in build/labs-solution
#   labs/check.sh L04 --no-time    # arguments after the lab (and --solution) go to the checker
#
# Exit: 0 pass, 1 a check failed, 2 bad usage or build failure, 77 no GPU (CPU parts ran), 124 the
# checker ran past LADDER_LAB_TIMEOUT seconds (default 900): a kernel that never finished.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

lab=${1:-}
if [[ ! "$lab" =~ ^L(0[1-9]|1[0-4])$ ]]; then
  echo "usage: labs/check.sh L01|L02|L03|L04|L05|L06|L07|L08|L09|L10|L11|L12|L13|L14 [--solution] [checker args]" >&2
  exit 2
fi
shift
mode=starter
if [ "${1:-}" = "--solution" ]; then mode=solution; shift; fi
build=build/labs
[ "$mode" = solution ] && build=build/labs-solution

# L09 and L13 need no harness and no GPU for their main check: their checkers (Python) compile
# your file with nvcc themselves and read the SASS with cuobjdump (labs/L09_wait_placement/README.md,
# labs/L13_shared_by_name/README.md).
if [ "$lab" = L09 ] || [ "$lab" = L13 ]; then
  args=("$@")
  [ "$mode" = solution ] && args=(--solution "${args[@]}")
  checker=labs/L09_wait_placement/check.py
  [ "$lab" = L13 ] && checker=labs/L13_shared_by_name/check.py
  timeout "${LADDER_LAB_TIMEOUT:-900}" python3 "$checker" "${args[@]}"
  rc=$?
  case $rc in
    0) echo "(exit 0: every check passed)";;
    1) echo "(exit 1: a check failed; the lines above say which and why)";;
    2) echo "(exit 2: bad usage, or your file did not compile)";;
    77) echo "(exit 77: what could run passed; the $lab line above says what did not run: no GPU, or no cuobjdump)";;
    124) echo "(exit 124: the checker ran past ${LADDER_LAB_TIMEOUT:-900} s and was stopped)";;
    *) echo "(exit $rc: the checker itself failed)";;
  esac
  exit $rc
fi

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  arch=${LADDER_LABS_ARCH:-native}
else
  arch=${LADDER_LABS_ARCH:-90a}  # no GPU: compile for the H200 so the kernel is at least compiled
  echo "note: no GPU here; compiling for sm_${arch} and running the CPU parts only"
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  scripts/install-deps.sh >/dev/null || { echo "error: installing the build dependencies failed (scripts/install-deps.sh)" >&2; exit 2; }
fi
echo "building lab_$lab ($mode) in $build ..."
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
      -DLADDER_BUILD_TESTS=OFF -DLADDER_LABS_MODE="$mode" >"$build.configure.log" 2>&1; then
  tail -20 "$build.configure.log"
  echo "error: configuring failed (full log: $build.configure.log)" >&2
  exit 2
fi
cmake --build "$build" --target "lab_$lab" -j "$(nproc)" >"$build.build.log" 2>&1
brc=$?
grep -v -e '^\[[0-9]*/[0-9]*\]' -e '^ninja: ' "$build.build.log"  # the compiler's messages, if any
if [ $brc -ne 0 ] || [ ! -x "$build/bin/lab_$lab" ]; then
  echo "error: lab_$lab did not compile: the compiler's messages are above (your file is in labs/${lab}_*/)" >&2
  exit 2
fi

# Under a timeout: a kernel that hangs (a barrier wait that never completes, and no bounded wait
# to catch it) ends the run with exit 124 instead of holding the GPU forever.
limit=${LADDER_LAB_TIMEOUT:-900}
timeout "$limit" "$build/bin/lab_$lab" "$@"
rc=$?
case $rc in
  0) echo "(exit 0: every check passed)";;
  1) echo "(exit 1: a check failed; the lines above say which and why)";;
  77) echo "(exit 77: compiled and ran the CPU parts; no GPU to run the kernel)";;
  124) echo "(exit 124: the checker ran past ${limit} s and was stopped: a kernel that never finished, e.g. a wait on a barrier phase that never completes)";;
  *) echo "(exit $rc: the checker itself failed)";;
esac
exit $rc

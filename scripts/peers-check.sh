#!/usr/bin/env bash
# Checks the ladder's own peer rows on a GPU machine against PyTorch: cuDNN's attention (step 99,
# timed by the harness) against PyTorch SDPA's cuDNN backend (the same library, timed by
# scripts/peers.py's time_fn), and the cuBLAS fp16 GEMM ceiling against torch's fp16 matmul.
# Prints one comparison table last; logs and JSON go to OUT.
#
#   scripts/peers-check.sh OUT [BIN_DIR]
#
# BIN_DIR: a directory with step99_peers and gemm_ceiling_check built elsewhere (for the same
# x86-64 Linux); without it, or when they do not run here, both are built here with the `gpu`
# preset. The build uses PyTorch's cuDNN (site-packages/nvidia/cudnn) when it ships headers, so
# both sides run one library; otherwise the toolkit's.
#
# On a machine without network (the GPU machine behind the `run` tool) the cuDNN frontend's headers
# must travel with the tree: run scripts/install-deps.sh here first, then carry its folder:
#     run(carry=[".deps"], command="scripts/peers-check.sh $OUT")
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out=${1:?usage: scripts/peers-check.sh OUT [BIN_DIR]}
bin=${2:-}
mkdir -p "$out"
log="$out/peers-check.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }

# ---- PyTorch's cuDNN: the library its SDPA cuDNN backend uses ----
# scripts/cudnn-env.sh finds it (site-packages/nvidia/cudnn) and puts its lib/ on the path.
source scripts/cudnn-env.sh
torch_cudnn=$ladder_torch_cudnn
cudnn_root=""
[ -n "$torch_cudnn" ] && [ -f "$torch_cudnn/include/cudnn.h" ] && cudnn_root=$torch_cudnn
say "PyTorch's cuDNN: ${torch_cudnn:-none found} (headers: ${cudnn_root:+yes}${cudnn_root:-no})"
ls /usr/local/cuda/include/cudnn_version.h >/dev/null 2>&1 && say "toolkit has cuDNN headers" || say "toolkit has no cuDNN"

# ---- the GEMM ceiling's driver: time_gemm_ceiling() once, as the runner will ----
driver_src=$(mktemp -d)/gemm_ceiling_check.cpp
cat >"$driver_src" <<'CPP'
#include <cstdio>
#include "common/device_buffer.hpp"
#include "common/peers/gemm_ceiling.hpp"
int main() try {
  int l2 = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  ladder::CudaStream stream;
  ladder::L2Flusher flusher{std::size_t(l2)};
  std::string why;
  const auto g = ladder::time_gemm_ceiling(stream.get(), ladder::TimingOptions{}, flusher, &why);
  if (!g) { std::printf("gemm ceiling not run: %s\n", why.c_str()); return 1; }
  std::printf("{\"id\": \"%s\", \"median_ms\": %.5f, \"p20_ms\": %.5f, \"p80_ms\": %.5f, \"reps\": %zu, "
              "\"tflops\": %.2f, \"max_rel_error\": %.3g}\n", g->id.c_str(), g->timing.median_ms,
              g->timing.p20_ms, g->timing.p80_ms, g->timing.samples_ms.size(), g->tflops(), g->max_rel_error);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gemm ceiling failed: %s\n", e.what());
  return 1;
}
CPP
build_driver() {  # $1 = the build directory holding common/libladder_common.a
  local cuda; cuda=$(dirname "$(dirname "$(command -v nvcc)")")
  g++ -O2 -std=c++20 -DFMT_HEADER_ONLY=1 -I. -isystem "$cuda/include" "$driver_src" \
    "$1/common/libladder_common.a" "$cuda/lib64/libcudart_static.a" -L"$cuda/lib64" -lcublas \
    -lrt -ldl -lpthread -Wl,-rpath,"$cuda/lib64" -o "$1/bin/gemm_ceiling_check"
}

runs() { [ -x "$1/step99_peers" ] && "$1/step99_peers" --list >/dev/null 2>&1 && [ -x "$1/gemm_ceiling_check" ]; }
if [ -z "$bin" ] || ! runs "$bin"; then
  [ -n "$bin" ] && say "the binaries in $bin do not run here; building"
  start=$SECONDS
  cmake --preset gpu -DLADDER_BUILD_TESTS=OFF -DLADDER_WITH_CUDNN=ON ${cudnn_root:+-DCUDNN_ROOT=$cudnn_root} \
    >"$out/configure.log" 2>&1 &&
    cmake --build --preset gpu -j "$(nproc)" --target step99_peers ladder_common >"$out/build.log" 2>&1 &&
    build_driver build/gpu >>"$out/build.log" 2>&1
  rc=$?
  say "build: rc=$rc in $((SECONDS - start)) s; $(grep -m1 'cuDNN attention peer' "$out/configure.log")"
  [ $rc -eq 0 ] || { tail -30 "$out/configure.log" "$out/build.log"; exit 1; }
  bin=build/gpu/bin
fi

# ---- ours: the harness, same process for every row ----
start=$SECONDS
ldd "$bin/step99_peers" | grep -E "cudnn|nvrtc|not found" >>"$log" 2>&1
"$bin/step99_peers" --b 4 --heads 8 --n 4096 --d 64 --mask both --json "$out/cudnn-d64.json" >>"$log" 2>&1
say "step99 d64: rc=$?"
"$bin/step99_peers" --b 4 --heads 16 --n 4096 --d 128 --mask both --json "$out/cudnn-d128.json" >>"$log" 2>&1
say "step99 d128: rc=$?"
# Ragged sizes, checked only: does cuDNN refuse any of the GPU tests' shapes?
"$bin/step99_peers" --b 1 --heads 3 --n 1,113,1000 --d 64,128 --mask both --no-time \
  --json "$out/cudnn-ragged.json" >>"$log" 2>&1
say "step99 ragged (checks only): rc=$?"
"$bin/gemm_ceiling_check" >"$out/gemm.json" 2>>"$log"
say "gemm ceiling: rc=$? $(cat "$out/gemm.json")"
say "ours: $((SECONDS - start)) s"

# ---- PyTorch, timed by scripts/peers.py's time_fn, then the comparison ----
start=$SECONDS
PYTHONUNBUFFERED=1 python3 - "$out" <<'PY' 2>&1 | tee -a "$log"
import json, pathlib, sys
sys.path.insert(0, "scripts")
import torch
from torch.nn.attention import sdpa_kernel
from peers import BACKENDS, time_fn

out = pathlib.Path(sys.argv[1])
l2 = torch.cuda.get_device_properties(0).L2_cache_size
flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
torch.manual_seed(0)
theirs = {}
for b, h, n, d in [(4, 8, 4096, 64), (4, 16, 4096, 128)]:
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float16, device="cuda") for _ in range(3))
    for causal in (False, True):
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        with sdpa_kernel([BACKENDS["sdpa-cudnn"]]):
            t = time_fn(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), flush)
        theirs[(b, h, n, d, causal)] = (t["median_ms"], flops / (t["median_ms"] * 1e-3) / 1e12)
a = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
bm = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
t = time_fn(lambda: a @ bm, flush)
torch_gemm = 2 * 8192**3 / (t["median_ms"] * 1e-3) / 1e12

print(f"\nPyTorch {torch.__version__}, its cuDNN {torch.backends.cudnn.version()}")
print(f"{'shape':34s} {'row':14s} {'ours ms':>9s} {'TFLOP/s':>8s} {'torch-cudnn':>11s} {'ratio':>6s}  check")
for name in ("cudnn-d64.json", "cudnn-d128.json"):
    res = json.load(open(out / name))
    for run in res["runs"]:
        s = run["shape"]
        key = (s["batch"], s["heads"], s["seqlen"], s["head_dim"], s["causal"])
        for r in run["rows"]:
            if "median_ms" not in r:
                print(f"{run['shape_text']:34s} {r['id']:14s} {r['status']}: {r['note'][:120]}")
                continue
            t_ms, t_tf = theirs[key]
            err = r.get("error", {})
            lse = r.get("lse_error")
            check = f"pass={err.get('pass')} max_abs={err.get('max_abs')} tol={err.get('tolerance')}"
            if lse:
                check += f" lse pass={lse.get('pass')}"
            print(f"{run['shape_text']:34s} {r['id']:14s} {r['median_ms']:9.4f} {r['tflops']:8.1f} "
                  f"{t_tf:11.1f} {r['tflops'] / t_tf:6.3f}  {check} rerun={r.get('rerun_identical')}")
ragged = json.load(open(out / "cudnn-ragged.json"))
bad = [(run["shape_text"], r["id"], r["status"], r["note"][:160]) for run in ragged["runs"] for r in run["rows"]
       if r["status"] != "ok" or not r.get("error", {}).get("pass")]
print(f"ragged shapes: {sum(len(run['rows']) for run in ragged['runs'])} rows, {len(bad)} not ok")
for x in bad[:12]:
    print("   ", *x)
try:
    g = json.loads((out / "gemm.json").read_text())
except (OSError, ValueError):
    g = None
    print("GEMM ceiling: no result (see the log)")
if g:
    print(f"GEMM ceiling: ours {g['tflops']:.1f} TFLOP/s (median {g['median_ms']:.3f} ms), torch fp16 matmul "
          f"{torch_gemm:.1f} TFLOP/s, ratio {g['tflops'] / torch_gemm:.3f}")
PY
say "pytorch + comparison: $((SECONDS - start)) s"

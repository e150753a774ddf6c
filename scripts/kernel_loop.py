#!/usr/bin/env python3
"""One attention forward, FlashAttention-4's or a ladder variant's, called in a loop: the calls
inside an NVTX range "loop", for Nsight Compute (`ncu --nvtx --nvtx-include "loop/"`), for a
clock and power trace (scripts/clock_trace.sh), and for FA4's generated code (the CuTe DSL keeps
its cubins when CUTE_DSL_KEEP_CUBIN=1 and CUTE_DSL_DUMP_DIR=DIR are set; scripts/wait_placement.py
reads them). The first call compiles (FA4) or sets up (ladder), outside the range.

  python3 scripts/kernel_loop.py --impl fa4 --b 4 --heads 8 --n 4096 --d 64 [--causal] [--calls 1]
  python3 scripts/kernel_loop.py --impl 33/iterators --ladder-lib build/round/lib/libladder_capi.so ...

Both take Q, K, V in their own layout ([B, N, H, D] for FA4, [B, H, N, D] for the ladder), random
N(0, 1) values of --dtype; nothing is checked here (peers.py and the ladder check).
"""
import argparse
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", required=True, help="fa4, or a ladder variant id such as 33/iterators")
    ap.add_argument("--ladder-lib", help="libladder_capi.so (for a ladder variant)")
    ap.add_argument("--b", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    ap.add_argument("--calls", type=int, default=1)
    a = ap.parse_args()
    if a.calls < 1:
        ap.error("--calls must be at least 1")
    dt = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(0)
    if a.impl == "fa4":
        try:
            from flash_attn.cute import flash_attn_func
        except Exception as e:
            sys.exit(f"kernel_loop: flash_attn.cute does not import ({str(e).splitlines()[0][:200]}); "
                     "install it first (scripts/round.sh --stages fa4)")
        q, k, v = (torch.randn(a.b, a.n, a.heads, a.d, device="cuda", dtype=dt, generator=g) for _ in range(3))

        def call():
            flash_attn_func(q, k, v, causal=a.causal)
    else:
        if not a.ladder_lib:
            ap.error(f"--impl {a.impl} needs --ladder-lib")
        from peers import LadderLibs, ladder_call
        libs = LadderLibs([a.ladder_lib])
        q, k, v = (torch.randn(a.b, a.heads, a.n, a.d, device="cuda", dtype=dt, generator=g) for _ in range(3))
        label = next(iter(libs.paths))
        call, _ = ladder_call(libs, label, a.impl, q, k, v, a.causal, a.dtype == "bf16")
    call()  # compiles or sets up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    torch.cuda.nvtx.range_push("loop")
    for _ in range(a.calls):
        call()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / a.calls
    flops = 4 * a.b * a.heads * a.n * a.n * a.d / (2 if a.causal else 1)
    print(f"kernel_loop: {a.impl} B={a.b} H={a.heads} N={a.n} D={a.d} causal={a.causal} {a.dtype}: "
          f"{a.calls} back-to-back call(s), {ms:.4f} ms each by the host clock ({flops / ms / 1e9:.1f} TFLOP/s)")


if __name__ == "__main__":
    main()

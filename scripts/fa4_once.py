#!/usr/bin/env python3
"""FlashAttention-4's forward on one shape, the measured calls inside an NVTX range "fa4", for
Nsight Compute (`ncu --nvtx --nvtx-include "fa4/"`) and for its generated code (the CuTe DSL keeps
its cubins when CUTE_DSL_KEEP_CUBIN=1 and CUTE_DSL_DUMP_DIR=DIR are set; scripts/wait_placement.py
reads them). The first call compiles, outside the range.

  python3 scripts/fa4_once.py --b 4 --heads 8 --n 4096 --d 64 [--causal] [--dtype fp16] [--calls 1]
"""
import argparse
import sys

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--b", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--d", type=int, required=True)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    ap.add_argument("--calls", type=int, default=1)
    a = ap.parse_args()
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:
        sys.exit(f"fa4_once: flash_attn.cute does not import ({str(e).splitlines()[0][:200]}); "
                 "install it first (scripts/round.sh --stages fa4)")
    dt = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(a.b, a.n, a.heads, a.d, device="cuda", dtype=dt, generator=g) for _ in range(3))
    flash_attn_func(q, k, v, causal=a.causal)  # compiles
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("fa4")
    for _ in range(a.calls):
        flash_attn_func(q, k, v, causal=a.causal)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"fa4_once: B={a.b} H={a.heads} N={a.n} D={a.d} causal={a.causal} {a.dtype}: {a.calls} call(s)")


if __name__ == "__main__":
    main()

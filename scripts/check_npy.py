#!/usr/bin/env python3
"""Checks the .npy files that `--save DIR` writes against an independent implementation:
PyTorch's scaled_dot_product_attention (in fp32 from the same fp16 inputs) when PyTorch is
installed, else numpy in float64. Prints one line per saved output and exits 1 if any differs by
more than fp16 rounding allows.

    build/gpu/bin/ladder --track attention --n 1000 --no-time --save dump/
    python3 scripts/check_npy.py dump/
"""
import pathlib
import sys

import numpy as np

TOLERANCE = 4e-3  # a few fp16 ulps near 1: the kernels round P to fp16, the reference does not


def reference(q, k, v, causal):
    try:
        import torch
        t = [torch.from_numpy(x.astype(np.float32)) for x in (q, k, v)]
        if torch.cuda.is_available():
            t = [x.cuda() for x in t]
        o = torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal)
        return o.cpu().numpy().astype(np.float64), "torch sdpa (fp32)"
    except ImportError:
        q, k, v = (x.astype(np.float64) for x in (q, k, v))
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        if causal:
            n = s.shape[-1]
            s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v, "numpy (fp64)"


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "dump")
    worst, checked = 0.0, 0
    for case in sorted(root.glob("attention_*")):
        q, k, v = (np.load(case / f"{t}.npy") for t in "qkv")
        ref, how = reference(q, k, v, case.name.endswith("_causal"))
        for out in sorted(case.glob("o_*.npy")):
            o = np.load(out).astype(np.float64)
            err = float(np.nanmax(np.abs(o - ref))) if not np.isnan(o).any() else float("nan")
            worst = max(worst, err) if err == err else float("nan")
            checked += 1
            print(f"{case.name}/{out.name}: max |kernel - {how}| = {err:.2e}")
    ok = checked > 0 and worst == worst and worst <= TOLERANCE
    print(f"{'ok' if ok else 'FAIL'}: {checked} outputs, worst {worst:.2e} (tolerance {TOLERANCE})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

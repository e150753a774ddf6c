#!/usr/bin/env python3
"""Fit the cubic of common/exp2_poly.hpp: 2^f on [0, 1] with the least maximum relative error,
constrained to p(0) = 1 and p(1) = 2 exactly (so 2^x is exact at every integer and continuous,
hence monotone, across them).

    p(f) = 1 + f + a (f^2 - f) + b (f^3 - f^2)        (p(0) = 1, p(1) = 2 for any a, b)
         = 1 + c1 f + c2 f^2 + c3 f^3,  c1 = 1 - a,  c2 = a - b,  c3 = b

Two free parameters, so the minimax error r(f) = p(f) / 2^f - 1 (zero at both ends) equioscillates
at three interior points (Chebyshev's alternation theorem for a linear family). Remez's exchange:
solve p(f_i) = 2^f_i (1 + (-1)^i E) for (a, b, E) at three points, move the points to the
extrema of r on a dense grid, repeat until they stop moving. Then c3 and c2 are rounded to
multiples of 2^-24 and c1 = 1 - c2 - c3: all three are exact floats and Horner at f = 1 sums to
exactly 2 (every partial sum is a multiple of 2^-24 below 2, hence a float).

    scripts/fit_exp2_poly.py          prints the coefficients, the fit's error, and the error of the
                                      float32 evaluation (FMA emulated in float64) on a dense grid
    scripts/fit_exp2_poly.py --figure docs/img/part7-exp2-poly.png
                                      also draws chapter 32's figure: that error against fp16's and
                                      bf16's rounding, and the per-SMSP cycle model of the variants
                                      (static SASS counts of a CUDA 13.0 build, not a measurement)

Needs numpy (PyPI). The C++ header's constants are this script's output; tests/cpu/test_exp2_poly.cpp
checks the error bound on the header's own evaluation.
"""
import sys

import numpy as np

# Chapter 32's model: per SM sub-partition (SMSP) and pair of 128-key blocks (one per consumer
# warpgroup; each SMSP holds one warp of each), at D = 64: the tensor cores' 2 x 512 cycles at
# 4096 FLOP/clk/SM, MUFU.EX2 at 4 lanes/clk/SMSP (8 cycles a warp instruction), one issue a cycle.
# Instructions per block: the unmasked loop of each variant's fp16 non-causal kernel
# (scripts/sass_exp2.py on a CUDA 13.0 build, docs/results/notes/2026-12-01-step32-sass.md).
MODEL = [  # (variant, instructions in the loop, MUFU.EX2 in the loop)
    ("31/pinned", 463, 66), ("32/lazy_rescale", 472 - 32, 66), ("32/poly_quarter", 576, 50),
    ("32/poly_lazy", 585 - 32, 50), ("32/poly_half", 688, 34)]


def remez(grid, iterations=30):
    pts = np.array([0.25, 0.5, 0.75])
    for _ in range(iterations):
        A = np.stack([pts * pts - pts, pts ** 3 - pts * pts, -((-1.0) ** np.arange(3)) * 2 ** pts], axis=1)
        a, b, err = np.linalg.solve(A, 2 ** pts - 1 - pts)
        r = (1 + grid + a * (grid ** 2 - grid) + b * (grid ** 3 - grid ** 2)) / 2 ** grid - 1
        d = np.diff(r)
        ext = np.where(d[:-1] * d[1:] <= 0)[0] + 1  # local extrema of r inside (0, 1)
        ext = ext[np.abs(r[ext]) > 1e-12]
        if len(ext) != 3 or np.allclose(grid[ext], pts):
            break
        pts = grid[ext]
    return a, b, abs(err), np.abs(r).max()


def f32(x):
    return np.float32(x)


def fma32(a, b, c):  # a·b is exact in float64 (24 + 24 bits); one rounding of the sum to float32
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))


def main():
    grid = np.linspace(0.0, 1.0, 400001)
    a, b, err, rmax = remez(grid)
    q = 2.0 ** 24
    c3 = np.round(b * q) / q
    c2 = np.round((a - b) * q) / q
    c1 = 1.0 - c2 - c3
    assert f32(c1) == c1 and f32(c2) == c2 and f32(c3) == c3
    f = grid.astype(np.float32)
    p = fma32(fma32(fma32(f32(c3), f, f32(c2)), f, f32(c1)), f, np.float32(1.0))
    rel = np.abs(p.astype(np.float64) / 2 ** f.astype(np.float64) - 1)
    print(f"minimax relative error of the real cubic: {err:.6e} (grid max {rmax:.6e}, 2^{np.log2(err):.2f})")
    for name, c in (("c1", c1), ("c2", c2), ("c3", c3)):
        print(f"  {name} = {float(c).hex()}  ({c:.10f}, {int(round(c * q))} / 2^24)")
    print(f"float32 Horner at f = 1: {float(fma32(fma32(fma32(f32(c3), 1, f32(c2)), 1, f32(c1)), 1, 1))}")
    print(f"float32 evaluation, max relative error on [0, 1]: {rel.max():.6e}")
    print(f"fp16 unit roundoff 2^-11 = {2 ** -11:.6e}, bf16 2^-8 = {2 ** -8:.6e}")
    if "--figure" in sys.argv:
        figure(sys.argv[sys.argv.index("--figure") + 1], f, rel)


def figure(path, f, rel):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.0))
    ax.plot(f[::50], rel[::50], color="#1f77b4", lw=1.2, label="cubic, float32 evaluation")
    for y, name, color in ((2 ** -11, "fp16 unit roundoff 2^-11", "#d62728"), (2 ** -8, "bf16 2^-8", "#ff7f0e")):
        ax.axhline(y, color=color, ls="--", lw=1, label=name)
    ax.set_yscale("log")
    ax.set_ylim(1e-7, 1e-2)
    ax.set_xlabel("f = x - floor(x)", fontsize=8)
    ax.set_ylabel("|p(f) / 2^f - 1|", fontsize=8)
    ax.set_title("The cubic's relative error: 1.03e-4, zero at f = 0 and 1", fontsize=9)
    ax.legend(fontsize=7, loc="lower center")
    ax.tick_params(labelsize=7)
    names = [m[0] for m in MODEL]
    x = np.arange(len(MODEL))
    tensor = [2 * 512] * len(MODEL)
    mufu = [2 * e * 8 for _, _, e in MODEL]
    issue = [2 * n for _, n, _ in MODEL]
    for k, (vals, name, color) in enumerate(((tensor, "tensor cores (at peak)", "#2ca02c"),
                                               (mufu, "MUFU pipe", "#d62728"), (issue, "issue slots", "#1f77b4"))):
        bx.bar(x + (k - 1) * 0.27, vals, 0.27, color=color, label=name)
    bx.set_xticks(x, names, fontsize=7, rotation=15)
    bx.set_ylabel("cycles per SMSP per pair of blocks", fontsize=8)
    bx.set_title("A model from static SASS counts (D = 64), not a measurement", fontsize=9)
    bx.legend(fontsize=7, loc="lower right")
    bx.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()

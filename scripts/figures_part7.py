#!/usr/bin/env python3
"""Draws Part VII's figures (chapters 31-35 and the part's introduction) into docs/img/:

  part7-lazy-rescale.png   chapter 35: one row's K/V blocks, its block maxima, its running max and
                           the reference max the lazy rule keeps. The rule is read from
                           common/lazy_rescale.hpp (the threshold and the comparison are checked
                           against the header's text, so a change there fails here). The rows are
                           synthetic (Gaussian scores), not a measurement.
  part7-clocks-power.png   Part VII's introduction: SM clock, board power and throughput of the four
                           back-to-back runs (step 33, FA4, step 33, FA4) read from the committed
                           docs/results/h200/2026-12-01-p7r3-clocks.txt. Measured.
  part7-overlap-pinned.png one warpgroup's iteration in step 21's SASS and in step 31's: the softmax
                           waits for both products, or for S_i only (schematic, from the SASS order).
  part7-desc-iterators.png one unmasked K/V block's SASS instructions by kind, steps 21/33 and 22/34
                           (results/h200/2026-12-01-p7r2-sass-loops.json: counted from SASS, not timed).
  part7-bwd-mix.png        chapter 36: the instructions step 25's backward and FA4's execute, by kind
                           (results/h200/2026-12-02-bwd-r0-ncu-mix.json, Nsight Compute: measured),
                           and the same kinds in the SASS of step 25 and of step 36's variants
                           (results/h200/2026-12-02-bwd36-sass.json: counted, not timed).

(part7-exp2-poly.png, chapter 32's, is drawn by scripts/fit_exp2_poly.py.)

    scripts/figures_part7.py            # writes the five PNGs
    scripts/figures_part7.py --out DIR  # somewhere else
    scripts/figures_part7.py --check    # recomputes without writing (the rule and the file parse)
"""
import json
import re
import sys

import numpy as np

from figlib import (BLUE, GREEN, GREY, ORANGE, RED, RESULTS, out_dir, parser, pyplot, save, source_constant,
                    source_match)

HEADER = "common/lazy_rescale.hpp"
CLOCKS = RESULTS / "2026-12-01-p7r3-clocks.txt"


# ---- the lazy rule -------------------------------------------------------------------------------

def lazy_rule():
    """(threshold τ in log2 units, must_raise_max) as common/lazy_rescale.hpp defines them."""
    tau = float(source_constant(HEADER, "kLazyRescaleThresholdLog2"))
    body = source_match(HEADER, r"must_raise_max\([^)]*\)\s*\{\s*return\s+(.*?);\s*\}", "must_raise_max", re.S)
    expected = "(m_block - m_ref) * scale_log2 > threshold_log2"
    if " ".join(body.group(1).split()) != expected:
        sys.exit(f"{HEADER}: must_raise_max is no longer `{expected}`; update this script")

    def must_raise_max(m_ref, m_block, scale_log2, threshold_log2=tau):
        # The header's expression, in float32 like the kernel; −inf − x and NaN compare false.
        with np.errstate(invalid="ignore"):
            return bool((np.float32(m_block) - np.float32(m_ref)) * np.float32(scale_log2)
                        > np.float32(threshold_log2))

    return tau, must_raise_max


def walk_row(scores, block_n, scale_log2, must_raise_max):
    """One row's online softmax over its blocks, with the lazy rule: per block its max, the running
    max (what the eager rule would use) and the reference the lazy rule keeps, all in log2 units,
    and whether the lazy and the eager rules rescale O at that block."""
    m_ref = -np.inf
    running = -np.inf
    out = []
    for b in range(len(scores) // block_n):
        m_block = float(scores[b * block_n:(b + 1) * block_n].max())
        eager = m_block > running  # the eager rule rescales whenever the running max grows
        running = max(running, m_block)
        lazy = must_raise_max(m_ref, m_block, scale_log2)
        if lazy:
            m_ref = m_block
        out.append(dict(block=b, block_max=m_block * scale_log2, running=running * scale_log2,
                        ref=m_ref * scale_log2, lazy=lazy, eager=eager and b > 0))
    return out


def draw_lazy(out):
    plt = pyplot()

    tau, must_raise_max = lazy_rule()
    rng = np.random.default_rng(35)
    d, block_n, n = 64, 128, 4096
    scale_log2 = (1.0 / np.sqrt(d)) * np.log2(np.e)
    # Harness-like scores: q, k ~ N(0, 1), so q·k ~ N(0, D); "large logits": Q × 5, K × 3, plus a
    # slow drift along the keys (a row whose later keys score higher), so that the max moves.
    cases = [
        ("harness-like inputs: q·k ~ N(0, D)", rng.standard_normal(n) * np.sqrt(d)),
        ("large logits (Q × 5, K × 3) with a drift along the keys",
         rng.standard_normal(n) * np.sqrt(d) * 15 + np.linspace(0, 60, n) / scale_log2),
    ]
    fig, axes = plt.subplots(2, 1, figsize=(10, 7.8), sharex=True)
    summary = []
    for ax, (title, scores) in zip(axes, cases):
        rows = walk_row(scores, block_n, scale_log2, must_raise_max)
        x = np.array([r["block"] for r in rows])
        bm = np.array([r["block_max"] for r in rows])
        run = np.array([r["running"] for r in rows])
        ref = np.array([r["ref"] for r in rows])
        lazy = np.array([r["lazy"] for r in rows])
        eager = np.array([r["eager"] for r in rows])
        ax.fill_between(x, ref, ref + tau, step="post", color="#c8e6c9", alpha=0.8,
                        label=f"reference + τ (τ = {tau:g}): a block max inside skips the rescale")
        ax.plot(x, bm, "o", color="#777777", ms=4, label="block max")
        ax.step(x, ref, where="post", color="#d62728", lw=2.6, label="lazy reference max")
        ax.step(x, run, where="post", color="#1f77b4", lw=1.6, ls="--", zorder=5,
                label="running max (the eager rule's reference)")
        moved = x[lazy & (x > 0)]
        ax.plot(moved, ref[lazy & (x > 0)], "v", color="#d62728", ms=10,
                label="the lazy reference moves: O is rescaled")
        n_lazy, n_eager = int((lazy & (x > 0)).sum()), int(eager.sum())
        summary.append((title, n_lazy, n_eager, len(rows) - 1))
        ax.set_title(f"{title}: O rescaled after block 0 in {n_lazy} of {len(rows) - 1} blocks "
                     f"(eager rule: {n_eager})", fontsize=10)
        ax.set_ylabel("score · scale, log2 units")
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=8, loc="lower center", ncol=3)
    axes[1].set_xlabel(f"K/V block in processing order ({block_n} keys each, N = {n}, D = {d})")
    fig.suptitle("The lazy rescale on one row (synthetic scores; the rule of common/lazy_rescale.hpp)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    if out:
        save(fig, out, "part7-lazy-rescale.png", dpi=110)
    else:
        plt.close(fig)
    return summary


# ---- the clock and power trace -------------------------------------------------------------------

RUN = re.compile(r"kernel_loop: (\S+) .*?: (\d+) back-to-back call\(s\), ([\d.]+) ms each by the host clock "
                 r"\(([\d.]+) TFLOP/s\)\nclock_trace: (\d+) busy samples of (\d+): SM (\d+) MHz "
                 r"\(min (\d+), max (\d+)\), power (\d+) W \(max (\d+)\)")


def clock_runs():
    runs = [dict(name=m.group(1), calls=int(m.group(2)), ms=float(m.group(3)), tflops=float(m.group(4)),
                 busy=int(m.group(5)), samples=int(m.group(6)), sm=int(m.group(7)), sm_min=int(m.group(8)),
                 sm_max=int(m.group(9)), power=int(m.group(10)), power_max=int(m.group(11)))
            for m in RUN.finditer(CLOCKS.read_text())]
    if len(runs) != 4:
        sys.exit(f"{CLOCKS}: expected 4 runs, parsed {len(runs)}")
    return runs


def draw_clocks(out):
    plt = pyplot()

    runs = clock_runs()
    labels = [f"{i + 1}: {'step 33' if r['name'].startswith('33') else 'FA4'}" for i, r in enumerate(runs)]
    colors = ["#1f77b4" if r["name"].startswith("33") else "#ff7f0e" for r in runs]
    x = np.arange(len(runs))
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))

    ax = axes[0]
    sm = np.array([r["sm"] for r in runs])
    lo = sm - np.array([r["sm_min"] for r in runs])
    hi = np.array([r["sm_max"] for r in runs]) - sm
    ax.bar(x, sm, color=colors)
    ax.errorbar(x, sm, yerr=[lo, hi], fmt="none", ecolor="black", capsize=5)
    for xi, v in zip(x, sm):
        ax.text(xi, v / 2, f"{v}", ha="center", color="white", fontsize=9)
    ax.set_ylim(0, 2100)
    ax.set_title("SM clock, MHz (mean of busy samples; min–max)", fontsize=10)

    ax = axes[1]
    pw = np.array([r["power"] for r in runs])
    ax.bar(x, pw, color=colors)
    ax.plot(x, [r["power_max"] for r in runs], "_", color="black", ms=30, mew=2, label="highest sample")
    for xi, v in zip(x, pw):
        ax.text(xi, v / 2, f"{v}", ha="center", color="white", fontsize=9)
    ax.set_ylim(0, 880)
    ax.legend(fontsize=8, loc="upper center", frameon=False)
    ax.set_title("board power, W (mean of busy samples)", fontsize=10)

    ax = axes[2]
    tf = np.array([r["tflops"] for r in runs])
    ax.bar(x, tf, color=colors)
    for xi, v in zip(x, tf):
        ax.text(xi, v - 40, f"{v:.1f}", ha="center", color="white", fontsize=9)
    ax.set_ylim(500, 650)
    ax.set_title("TFLOP/s by the host clock (axis from 500)", fontsize=10)

    for ax in axes:
        ax.set_xticks(x, labels, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Measured on the H200: 3,000 back-to-back calls per run, B=2 H=16 N=8192 D=128 fp16, "
                 "runs in the order shown (2026-12-01-p7r3-clocks.txt)", fontsize=10)
    fig.tight_layout()
    if out:
        save(fig, out, "part7-clocks-power.png", dpi=110)
    else:
        plt.close(fig)
    return runs


# ---- the SASS schedules of steps 31 and 33 -----------------------------------------------------------

def fig_overlap_pinned(out):
    plt = pyplot()
    from matplotlib.patches import Rectangle
    """One warpgroup's iteration in step 21's SASS and in step 31's: where the softmax starts."""
    s_len, pv_len, sm_len = 1.0, 1.0, 2.2  # S_i, P_{i-1}V_{i-1}, one softmax: illustrative (D = 64)
    fig, axes = plt.subplots(2, 1, figsize=(11, 4.4))
    for ax, (title, pinned) in zip(axes, (("step 21: WARPGROUP.DEPBAR 0x0 above the exponentials", False),
                                          ("step 31: the exponentials between the two waits", True))):
        lanes = {"tensor cores (this warpgroup's products)": 1, "this warpgroup (softmax)": 0}
        for name, y in lanes.items():
            ax.text(-0.15, y + 0.4, name, ha="right", va="center", fontsize=8)
        t = 0.0
        for i in range(1, 4):
            ax.add_patch(Rectangle((t, 1), s_len, 0.8, facecolor=BLUE, edgecolor="black", alpha=0.85))
            ax.text(t + s_len / 2, 1.4, f"S{i}", ha="center", va="center", fontsize=7, color="white")
            ax.add_patch(Rectangle((t + s_len, 1), pv_len, 0.8, facecolor=GREEN, edgecolor="black", alpha=0.85))
            ax.text(t + s_len + pv_len / 2, 1.4, f"P{i-1}V{i-1}", ha="center", va="center", fontsize=7, color="white")
            start = t + s_len if pinned else t + s_len + pv_len
            ax.add_patch(Rectangle((start, 0), sm_len, 0.8, facecolor=ORANGE, edgecolor="black", alpha=0.85))
            ax.text(start + sm_len / 2, 0.4, f"softmax of S{i}: e x64", ha="center", va="center", fontsize=7)
            ax.plot([t + s_len] * 2, [-0.1, 1.9], color="purple", lw=1, ls=":")
            ax.text(t + s_len, 1.95, "W1", ha="center", fontsize=6, color="purple")
            w0 = start + sm_len if pinned else t + s_len + pv_len
            ax.plot([w0] * 2, [-0.1, 1.9], color="black", lw=1, ls="--")
            ax.text(w0, 1.95, "W0", ha="center", fontsize=6)
            t = start + sm_len + 0.15  # conversions, rescale, the next turn
        ax.set_xlim(-3.6, 13.5)
        ax.set_ylim(-0.3, 2.4)
        ax.axis("off")
        ax.set_title(title, fontsize=9)
    fig.text(0.5, 0.01, "Schematic from the SASS order, durations illustrative (D = 64: S and P·V 256 tensor cycles "
             "each, a softmax over 512 MUFU cycles). The gaps in the tensor lane are the other warpgroup's turns "
             "(the ping-pong).", ha="center", fontsize=7, color=GREY)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    save(fig, out, "part7-overlap-pinned.png", dpi=110)


def fig_desc_iterators(out):
    """Measured from SASS (results/h200/2026-12-01-p7r2-sass-loops.json): one unmasked K/V block's
    instructions by kind, steps 21/33 and 22/34."""
    plt = pyplot()
    data = json.loads((RESULTS / "2026-12-01-p7r2-sass-loops.json").read_text())["loops"]
    order = ["21 D=64", "33 D=64", "22 D=64", "34 D=64", "21 D=128", "33 D=128"]
    kinds = ["uniform datapath", "fp32 (max, scale, sum, rescale)", "MUFU.EX2", "F2FP (P to 16 bits)", "HGMMA", "other"]
    colors = [RED, BLUE, ORANGE, GREEN, "#555555", "#bbbbbb"]
    fig, ax = plt.subplots(figsize=(9, 4.4))
    for i, key in enumerate(order):
        left = 0
        for k, c in zip(kinds, colors):
            v = data[key]["by_kind"].get(k, 0)
            ax.barh(i, v, left=left, color=c, edgecolor="white", label=k if i == 0 else None)
            left += v
        ax.text(left + 4, i, str(data[key]["instructions"]), va="center", fontsize=8)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels([f"step {k.split()[0]}, {k.split()[1].replace('=', ' = ')}" for k in order], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("instructions per unmasked K/V block (one warp's loop body)", fontsize=8)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    ax.set_xlim(0, 600)
    fig.tight_layout()
    save(fig, out, "part7-desc-iterators.png", dpi=110)


BWD_MIX = RESULTS / "2026-12-02-bwd-r0-ncu-mix.json"
BWD_SASS = RESULTS / "2026-12-02-bwd36-sass.json"


def fig_bwd_mix(out):
    """Left, measured (Nsight Compute, one launch each, bf16, no mask): the instructions step 25's
    backward and FA4's execute, by kind. Right, counted from SASS (a CPU-side compile, not a
    timing): the same kinds in the main kernel of step 25 and of each of step 36's variants."""
    plt = pyplot()
    colors = [RED, ORANGE, GREEN, "#555555", BLUE, "#9467bd", "#bbbbbb"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11.5, 4.4))

    def bars(axis, data, rows, scale, unit):
        for i, key in enumerate(rows):
            left = 0.0
            for kind, c in zip(data["kinds"], colors):
                v = data["kernels"][key]["by_kind"][kind] / scale
                axis.barh(i, v, left=left, color=c, edgecolor="white", label=kind if i == 0 else None)
                left += v
            axis.text(left * 1.01, i, f"{data['kernels'][key]['instructions'] / scale:.0f}{unit}", va="center",
                      fontsize=7)
        axis.set_yticks(range(len(rows)))
        axis.set_yticklabels([k.replace(" d64", ", D = 64").replace(" d128", ", D = 128").replace("fa4", "FA4")
                              for k in rows], fontsize=7)
        axis.invert_yaxis()

    ncu = json.loads(BWD_MIX.read_text())
    bars(ax, ncu, ["25/head_by_head d64", "fa4 d64", "25/head_by_head d128", "fa4 d128"], 1e6, " M")
    ax.set_xlabel("instructions executed in one launch (millions; Nsight Compute)", fontsize=8)
    ax.set_title("measured: step 25 against FlashAttention-4", fontsize=9)
    sass = json.loads(BWD_SASS.read_text())
    rows = [f"{v} {d}" for d in ("d64", "d128")
            for v in ("25/head_by_head", "36/descriptors", "36/shared_space", "36/stmatrix")]
    bars(bx, sass, rows, 1, "")
    bx.set_xlabel("instructions in the kernel's SASS (static count, CPU-side compile)", fontsize=8)
    bx.set_title("compiled: step 25 and step 36's three changes", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=7)
    save(fig, out, "part7-bwd-mix.png", dpi=110)


def main():
    ap = parser(__doc__)
    ap.add_argument("--check", action="store_true", help="compute, write nothing")
    args = ap.parse_args()
    out = None if args.check else out_dir(args.out)
    for title, n_lazy, n_eager, blocks in draw_lazy(out):
        print(f"lazy rescale, {title}: {n_lazy} of {blocks} later blocks rescale (eager: {n_eager})")
    for r in draw_clocks(out):
        print(f"{r['name']}: SM {r['sm']} MHz, power {r['power']} W, {r['tflops']} TFLOP/s")
    if out:
        fig_overlap_pinned(out)
        fig_desc_iterators(out)
        fig_bwd_mix(out)
        print(f"wrote part7-lazy-rescale.png, part7-clocks-power.png, part7-overlap-pinned.png, "
              f"part7-desc-iterators.png, part7-bwd-mix.png to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

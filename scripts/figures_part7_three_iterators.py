#!/usr/bin/env python3
"""Draws chapter 34's measured figure into docs/img/:

  part7-three-iterators.png  the three-consumer kernel before (step 22) and after (step 34) its
                             descriptors are built once: the instructions of one unmasked K/V block
                             by kind (the SASS count, docs/results/h200/2026-12-01-p7r2-sass-loops.json),
                             and, from Nsight Compute at B=4 H=8 N=4096 D=64 (…-p7r2-ncu.txt), the
                             instructions the whole launch executed and how busy the tensor pipe was.

    scripts/figures_part7_three_iterators.py            # writes the PNG
    scripts/figures_part7_three_iterators.py --out DIR  # somewhere else
"""
import json
import re
import sys

from figlib import BLUE, GREEN, GREY, ORANGE, RED, RESULTS, out_dir, parser, pyplot, save

LOOPS = RESULTS / "2026-12-01-p7r2-sass-loops.json"
NCU = RESULTS / "2026-12-01-p7r2-ncu.txt"
KERNELS = (("22 D=64", "22/three_consumers"), ("34 D=64", "34/three_iterators"))
KINDS = (("uniform datapath", RED), ("fp32 (max, scale, sum, rescale)", BLUE), ("MUFU.EX2", ORANGE),
         ("F2FP (P to 16 bits)", GREEN), ("HGMMA", "black"), ("other", GREY))


def ncu_value(text, variant, pattern):
    m = re.search(r"====\s" + re.escape(variant) + r"\sD=64.*?" + pattern, text, re.S)
    if not m:
        sys.exit(f"figures_part7_three_iterators.py: no {pattern!r} for {variant} in {NCU.name}")
    return float(m.group(1).replace(",", ""))


def draw(out):
    loops = json.load(open(LOOPS))["loops"]
    ncu = NCU.read_text()
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.0), gridspec_kw={"width_ratios": (2, 1)})
    for y, (key, label) in enumerate(KERNELS):
        left = 0
        for kind, color in KINDS:
            n = loops[key]["by_kind"].get(kind, 0)
            ax.barh(y, n, left=left, color=color, label=kind if y == 0 else None)
            left += n
        ax.text(left + 5, y, str(left), va="center", fontsize=8)
    ax.set_yticks(range(len(KERNELS)), [label for _, label in KERNELS], fontsize=8)
    ax.set_xlabel("SASS instructions of one unmasked K/V block")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    inst = [ncu_value(ncu, v, r"inst_executed.sum\s+inst\s+([\d,]+)") / 1e6 for _, v in KERNELS]
    busy = [ncu_value(ncu, v, r"pipe_tensor_cycles_active\S+\s+%\s+([\d.]+)") for _, v in KERNELS]
    for x, (i, b) in enumerate(zip(inst, busy)):
        bx.bar(x, i, color=BLUE)
        bx.text(x, i + 2, f"{i:.1f} M\ntensor pipe {b:.0f}%", ha="center", fontsize=7)
    bx.set_xticks(range(len(KERNELS)), [label for _, label in KERNELS], fontsize=7)
    bx.set_ylabel("instructions executed (M)", fontsize=8)
    bx.set_ylim(0, max(inst) * 1.35)
    fig.suptitle("Three consumers at D=64: fewer instructions, the same tensor-pipe share (H200)", fontsize=9)
    fig.tight_layout()
    save(fig, out, "part7-three-iterators.png")


def main():
    draw(out_dir(parser(__doc__).parse_args().out))


if __name__ == "__main__":
    main()

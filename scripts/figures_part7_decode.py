#!/usr/bin/env python3
"""Draws chapter 41's figure into docs/img/:

  part7-fused-decode.png  a schematic (no measurement): one sequence's key range in 4 splits, their
                          CTAs on a time axis. Step 28: every split writes its partial, the grid
                          ends, a second kernel (combine_splits) starts after the launch gap and
                          merges. Step 41: each split counts itself in when its partial is written;
                          the one whose count is the last (here split 2, not split 3) merges all
                          four from memory and resets the counter; the others exit at once.

    scripts/figures_part7_decode.py            # writes the PNG
    scripts/figures_part7_decode.py --out DIR  # somewhere else
"""
import sys

from figlib import BLUE, GREEN, GREY, ORANGE, out_dir, parser, pyplot, save

# Finish times of the four splits (arbitrary units): equal work, unequal luck.
FINISH = [8.6, 9.1, 9.6, 9.3]
GAP, MERGE = 1.2, 1.6  # the second kernel's launch gap and run; the fused merge's run


def lane(ax, y, start, end, color, label=None, hatch=None):
    ax.barh(y, end - start, left=start, height=0.6, color=color, edgecolor="black", linewidth=0.4, hatch=hatch)
    if label:
        ax.text(start + (end - start) / 2, y, label, ha="center", va="center", fontsize=6.5)


def draw(out):
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8.6, 3.8), sharex=True)
    last = max(FINISH)
    for s, f in enumerate(FINISH):
        lane(top, s, 0.0, f, BLUE, f"split {s}: keys, partial O and LSE")
    lane(top, 4.2, last + GAP, last + GAP + 0.9 * MERGE + 0.6, ORANGE, "combine_splits")
    top.annotate("", xy=(last + GAP, 4.2), xytext=(last, 4.2), arrowprops=dict(arrowstyle="->", lw=0.8))
    top.text(last + GAP / 2, 4.75, "grid ends,\nlaunch gap", ha="center", va="bottom", fontsize=6)
    top.set_title("step 28: two kernels (the merge waits for the whole grid)", fontsize=8, loc="left")

    order = sorted(range(4), key=lambda s: FINISH[s])
    for rank, s in enumerate(order):
        f = FINISH[s]
        lane(bottom, s, 0.0, f, BLUE, f"split {s}")
        bottom.text(f + 0.08, s, f"count {rank + 1}", va="center", fontsize=6)
        if rank == 3:
            lane(bottom, s, f + 0.7, f + 0.7 + MERGE, GREEN, "merge 0..3, reset")
    bottom.set_title("step 41: one kernel (the split counted last merges all four, in order 0..3)",
                     fontsize=8, loc="left")
    for ax in (top, bottom):
        ax.set_yticks([])
        ax.set_xlim(0, last + GAP + MERGE + 1.2)
        ax.spines[["left", "top", "right"]].set_visible(False)
    bottom.set_xlabel("time (schematic)", fontsize=7)
    bottom.tick_params(axis="x", labelsize=6)
    top.axvline(last, color=GREY, lw=0.6, ls=":")
    fig.tight_layout()
    save(fig, out, "part7-fused-decode.png")


def main():
    args = parser(__doc__).parse_args()
    out = out_dir(args.out)
    draw(out)
    print(f"wrote part7-fused-decode.png to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

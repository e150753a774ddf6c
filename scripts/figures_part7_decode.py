#!/usr/bin/env python3
"""Draws chapters 41's and 42's schematic figures into docs/img/:

  part7-fused-decode.png  a schematic (no measurement): one sequence's key range in 4 splits, their
                          CTAs on a time axis. Step 28: every split writes its partial, the grid
                          ends, a second kernel (combine_splits) starts after the launch gap and
                          merges. Step 41: each split counts itself in when its partial is written;
                          the one whose count is the last (here split 2, not split 3) merges all
                          four from memory and resets the counter; the others exit at once.
  part7-wide-merge.png    a schematic (no measurement): the last CTA's merge of one row block of 16
                          splits, in round trips to L2. Step 41 (combine_row): a warp walks its
                          row two splits at a time, LSEs then partials, and then its second row.
                          Step 42 (combine_rows_in_cta): every LSE of the block in one trip, the
                          weights in shared memory, then kMergeInFlight (read from
                          common/device/split_kv.cuh) partial loads in flight a thread.

    scripts/figures_part7_decode.py            # writes the PNGs
    scripts/figures_part7_decode.py --out DIR  # somewhere else
"""
import sys

from figlib import BLUE, GREEN, GREY, ORANGE, out_dir, parser, pyplot, save, source_match

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


SPLITS = 16  # the schematic's row block: 16 splits, two rows a warp in step 41


def draw_wide_merge(out):
    in_flight = int(source_match("common/device/split_kv.cuh", r"kMergeInFlight\s*=\s*(\d+)",
                                 "kMergeInFlight").group(1))
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8.6, 3.0), sharex=True)
    t = 0.0
    for row in range(2):  # step 41: one warp, its two rows one after the other
        for pair in range(SPLITS // 2):
            lane(top, 0, t, t + 0.95, ORANGE)
            lane(top, 0, t + 1.0, t + 1.95, BLUE)
            t += 2.0
        top.text(t - SPLITS / 2, 0.45, f"row {row}: {SPLITS} splits, two at a time", ha="center", fontsize=6)
    end41 = t
    top.set_title(f"step 41: combine_row, a warp walks each split's LSE then its partial ({end41:.0f} round trips)",
                  fontsize=8, loc="left")
    lane(bottom, 0, 0.0, 0.95, ORANGE)
    lane(bottom, 0, 1.0, 1.4, GREEN)
    t = 1.5
    for item in range(2):  # two column quads a thread at 8 rows
        for group in range(SPLITS // in_flight):
            lane(bottom, 0, t, t + 0.95, BLUE)
            t += 1.0
    bottom.set_title(f"step 42: combine_rows_in_cta, one trip for every LSE, then {in_flight} partial loads in "
                     f"flight a thread (~{t:.0f} round trips)", fontsize=8, loc="left")
    for ax in (top, bottom):
        ax.set_yticks([])
        ax.set_ylim(-0.6, 0.9)
        ax.set_xlim(0, end41 + 0.5)
        ax.spines[["left", "top", "right"]].set_visible(False)
    import matplotlib.patches as mpatches
    bottom.legend(handles=[mpatches.Patch(color=ORANGE, label="LSE loads"), mpatches.Patch(color=BLUE, label="partial-O loads"),
                           mpatches.Patch(color=GREEN, label="weights in shared memory")],
                  fontsize=6, loc="center right", frameon=False)
    bottom.set_xlabel("round trips to L2 (schematic)", fontsize=7)
    bottom.tick_params(axis="x", labelsize=6)
    fig.tight_layout()
    save(fig, out, "part7-wide-merge.png")


def main():
    args = parser(__doc__).parse_args()
    out = out_dir(args.out)
    draw(out)
    draw_wide_merge(out)
    print(f"wrote part7-fused-decode.png and part7-wide-merge.png to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

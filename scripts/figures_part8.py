#!/usr/bin/env python3
"""Draws Part VIII's figures into docs/img/:

  part8-v-transpose.png  a schematic of one unit of step 45's V transpose (32 keys × 16 head dims):
                         left, the four 8 × 8 matrices (16-bit elements) of one ldmatrix.x4.trans
                         on V, with the 8 bytes quad lane (q = 0, t = 1) receives outlined; middle,
                         that lane's two PRMTs turning them into two words of Vᵀ in P's key order;
                         right, the 16-byte chunk each row of one stmatrix phase lands on under the
                         128-byte swizzle, for the plain row order (two rows to a chunk: 2-way) and
                         the kernel's (eight different chunks). The maps are common/fp8_layout.hpp's,
                         recomputed here; the script exits if the header's formulas have changed.

  part8-exp-budget.png   chapter 46's budget: for 45/fp8, 46/poly_quarter and 46/poly_half, the
                         clocks one SM sub-partition's tensor, MUFU and issue need for a block
                         pair (one 128-key block of each consumer warpgroup), and the one-warp
                         bound of a softmax (its own MUFU chain against its own issue). From the
                         SASS counts in the step's prediction note (NOTE below), not a timing.

  part8-wide-keys.png    chapter 47's block: left, where a 192-key block's Vᵀ lies (two 128-key
                         tiles side by side, the second half used; each k32 slice, one P·V
                         wgmma, inside one tile: fp8_layout.hpp's vt_offset, checked here);
                         right, the unmasked loop's instructions per 128 keys and its waits per
                         128 keys for 45/fp8, 47/two_stages and 47/wide, from the SASS counts in
                         the step's prediction note (WIDE_NOTE), not a timing.

    scripts/figures_part8.py            # writes the PNGs
    scripts/figures_part8.py --out DIR  # somewhere else
"""
import re

from figlib import BLUE, GREEN, GREY, ORANGE, RED, box, out_dir, parser, pyplot, save, source_match, source_text

LAYOUT = "common/fp8_layout.hpp"
NOTE = "docs/results/notes/2026-12-07-fp8-exp-budget-prediction.md"
BUDGET_KERNELS = ("45/fp8", "46/poly_quarter", "46/poly_half")
WIDE_NOTE = "docs/results/notes/2026-12-07-fp8-wide-keys-prediction.md"
WIDE_KERNELS = (("45/fp8", 128), ("47/two_stages", 128), ("47/wide", 192))
TENSOR_CLOCKS = 2 * 2 * 64 * 128 * 128 * 2 // 8192  # 2 warpgroups × (S + P·V) at 8192 FLOPs a clock
MUFU_CLOCKS = 8  # a warp's MUFU.EX2: 32 lanes through a sub-partition's 4-lane unit
MATRIX_COLOURS = (BLUE, GREEN, ORANGE, "#9467bd")
LANE_Q, LANE_T = 0, 1  # the lane whose bytes the figure follows


def check_source():
    source_text(LAYOUT, "return 16 * h + 8 * (f / 2) + 2 * t + f % 2;", "permuted_key's formula")
    source_text(LAYOUT, "((b / chunk) ^ (r % 8)) * chunk", "the 128-byte swizzle")
    source_text(LAYOUT, "return 16 * matrix_unit_chunk(unit) + 2 * q + (sigma ^ (q >= 4 ? 1 : 0));",
                "the store rows' order")
    source_text(LAYOUT, "kSelectEven = 0x6420", "the even selector")
    source_text(LAYOUT, "kSelectOdd = 0x7531", "the odd selector")


def permuted_key(k):
    h, t, f = k // 16, (k % 16) // 4, k % 4
    return 16 * h + 8 * (f // 2) + 2 * t + f % 2


def draw(out):
    check_source()
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 5.2), gridspec_kw={"width_ratios": [1.1, 1.3, 1.2]})
    for ax in axes:
        ax.axis("off")

    # Left: V, keys down, head dims across; matrix i = 2h + half is keys 16h + 8half + 0..7.
    ax = axes[0]
    ax.set_title("ldmatrix.x4.trans on V (one unit)", fontsize=10)
    cell = 0.25
    for key in range(32):
        i = key // 8
        for d in range(16):
            mine = d // 2 == LANE_Q and key % 8 // 2 == LANE_T and i < 2
            box(ax, d * cell, (31 - key) * cell, cell, cell, MATRIX_COLOURS[i], lw=1.6 if mine else 0.2,
                alpha=0.9 if mine else 0.35)
    for i in range(4):
        ax.text(16 * cell + 0.1, (31 - 8 * i - 4) * cell, f"matrix {i}\nkeys {8 * i}–{8 * i + 7}", fontsize=7,
                va="center")
    ax.text(8 * cell, 32 * cell + 0.15, "16 head dims (one 16-byte chunk)", ha="center", fontsize=7)
    ax.text(-0.15, 16 * cell, "32 keys of a k32 slice", rotation=90, ha="right", va="center", fontsize=7)
    ax.set_xlim(-0.6, 6.2)
    ax.set_ylim(-0.3, 8.8)

    # Middle: lane (q, t)'s registers and the PRMTs.
    ax = axes[1]
    ax.set_title(f"lane (q={LANE_Q}, t={LANE_T}): two PRMTs", fontsize=10)
    k0, d0 = 2 * LANE_T, 2 * LANE_Q
    regs = {
        "R[0]": [(k0, d0), (k0, d0 + 1), (k0 + 1, d0), (k0 + 1, d0 + 1)],
        "R[1]": [(k0 + 8, d0), (k0 + 8, d0 + 1), (k0 + 9, d0), (k0 + 9, d0 + 1)],
    }
    y = 4.2
    for name, cells in regs.items():
        ax.text(0.0, y + 0.25, name, fontsize=8, ha="right", va="center")
        for b, (k, d) in enumerate(cells):
            box(ax, 0.2 + b * 0.9, y, 0.85, 0.5, MATRIX_COLOURS[k // 8], f"V[{k}][{d}]", fontsize=7, alpha=0.5)
        y -= 0.8
    pair = regs["R[0]"] + regs["R[1]"]
    for n, (sel, label) in enumerate(((0x6420, "0x6420"), (0x7531, "0x7531"))):
        yy = 1.2 - n * 0.9
        ax.text(0.0, yy + 0.25, f"PRMT {label}", fontsize=7, ha="right", va="center")
        for b in range(4):
            k, d = pair[(sel >> (4 * b)) & 7]
            box(ax, 0.2 + b * 0.9, yy, 0.85, 0.5, MATRIX_COLOURS[k // 8], f"V[{k}][{d}]", fontsize=7, alpha=0.5)
        slots = [4 * LANE_T + b for b in range(4)]
        assert [permuted_key(s) for s in slots] == [pair[(sel >> (4 * b)) & 7][0] for b in range(4)]
        ax.text(3.9, yy + 0.25, f"= Vᵀ[{d0 + n}], slots {slots[0]}–{slots[-1]}\n  (P's key order)", fontsize=7,
                va="center")
    ax.annotate("", xy=(1.9, 1.8), xytext=(1.9, 2.5), arrowprops={"arrowstyle": "->", "color": GREY})
    ax.set_xlim(-1.4, 6.2)
    ax.set_ylim(-0.3, 5.2)

    # Right: the eight rows of stmatrix phase 0 and their swizzled chunk (byte chunk 0 of kk = 0).
    ax = axes[2]
    ax.set_title("stmatrix phase: row → swizzled chunk", fontsize=10)
    orders = {"plain: row 2q": [2 * q for q in range(8)],
              "kernel: row 2q + [q ≥ 4]": [2 * q + (1 if q >= 4 else 0) for q in range(8)]}
    for col, (title, rows) in enumerate(orders.items()):
        chunks = [0 ^ (r % 8) for r in rows]
        x = 0.3 + col * 2.9
        ax.text(x + 1.1, 8.5, title, ha="center", fontsize=8)
        for q, (r, c) in enumerate(zip(rows, chunks)):
            clash = chunks.count(c) > 1
            box(ax, x, 7.6 - q * 0.9, 2.2, 0.7, RED if clash else GREEN, f"q={q}: Vᵀ row {r} → chunk {c}",
                fontsize=7, alpha=0.45)
        ways = max(chunks.count(c) for c in chunks)
        ax.text(x + 1.1, 0.1, f"{len(set(chunks))} chunks: {ways}-way" if ways > 1 else "8 chunks: one wavefront",
                ha="center", fontsize=8, color=RED if ways > 1 else GREEN)
    ax.set_xlim(0, 6)
    ax.set_ylim(-0.3, 9.0)

    fig.suptitle("Step 45: V [keys][D] → Vᵀ [D][keys in P's order], 512 bytes a warp instruction", fontsize=11)
    fig.tight_layout()
    save(fig, out, "part8-v-transpose.png")


def loop_counts(kernel):
    """(instructions, MUFU.EX2) of the kernel's unmasked loop, per warp, from the note's table."""
    m = source_match(NOTE, r"\| " + re.escape(kernel) + r" \| (\d+) \| (\d+) \|", f"{kernel}'s SASS counts")
    return int(m.group(1)), int(m.group(2))


def draw_budget(out):
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1.5, 1]})
    counts = [loop_counts(k) for k in BUDGET_KERNELS]
    x = range(len(BUDGET_KERNELS))
    width = 0.26
    series = [("tensor (S and P·V)", [TENSOR_CLOCKS] * len(counts), GREY),
              ("MUFU (exp2)", [2 * mufu * MUFU_CLOCKS for _, mufu in counts], ORANGE),
              ("issue (the two consumer warps)", [2 * n for n, _ in counts], BLUE)]
    for i, (label, values, colour) in enumerate(series):
        xs = [k + (i - 1) * width for k in x]
        left.bar(xs, values, width, color=colour, label=label)
        for xv, v in zip(xs, values):
            left.text(xv, v + 15, str(v), ha="center", fontsize=7)
    left.set_xticks(list(x), BUDGET_KERNELS)
    left.set_ylabel("clocks of one SM sub-partition")
    left.set_title("A block pair at the peak rates: what each unit needs", fontsize=10)
    left.legend(fontsize=8, loc="upper left")
    left.set_ylim(0, 1700)

    mufu_chain = [mufu * MUFU_CLOCKS for _, mufu in counts]
    issue = [n for n, _ in counts]
    right.barh([k + 0.18 for k in x], mufu_chain, 0.34, color=ORANGE, label="its MUFU chain")
    right.barh([k - 0.18 for k in x], issue, 0.34, color=BLUE, label="its own issue")
    for k, (a, b) in enumerate(zip(mufu_chain, issue)):
        right.text(max(a, b) + 10, k, f"bound {max(a, b)}", va="center", fontsize=8, color=RED)
    right.set_yticks(list(x), BUDGET_KERNELS)
    right.invert_yaxis()
    right.set_xlim(0, 900)
    right.set_xlabel("clocks")
    right.set_title("One warp's block: the larger of the two bounds it", fontsize=10)
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle("The exponential budget at FP8, D = 128 (SASS counts of the unmasked loop)", fontsize=11)
    fig.tight_layout()
    save(fig, out, "part8-exp-budget.png")


def draw_wide_keys(out):
    source_text(LAYOUT, "return std::uint32_t(slot / kRowBytes) * kVtTileBytes + swizzled_offset(d, slot % kRowBytes);",
                "vt_offset's two tiles")
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4.6), gridspec_kw={"width_ratios": [1.4, 1]})
    # Left: Vᵀ of one stage, head dims down, key slots across, in two 128-slot tiles.
    left.axis("off")
    slice_w, tile_gap, height = 1.0, 0.5, 4.0
    colours = (BLUE, GREEN, ORANGE, "#9467bd", BLUE, GREEN)
    for kk in range(6):
        tile, within = divmod(kk, 4)
        x0 = tile * (4 * slice_w + tile_gap) + within * slice_w
        box(left, x0, 0, slice_w, height, colours[kk], alpha=0.35)
        left.text(x0 + slice_w / 2, height / 2, f"k32\nslice {kk}\nkeys\n{32 * kk}-{32 * kk + 31}", ha="center",
                  va="center", fontsize=7.5)
        left.text(x0 + slice_w / 2, -0.35, f"wgmma {kk}", ha="center", fontsize=7)
    for within in (2, 3):  # the second tile's unused half
        x0 = 4 * slice_w + tile_gap + within * slice_w
        box(left, x0, 0, slice_w, height, GREY, alpha=0.12)
        left.text(x0 + slice_w / 2, height / 2, "unused", ha="center", va="center", fontsize=7, color=GREY)
    for tile in range(2):
        x0 = tile * (4 * slice_w + tile_gap)
        left.text(x0 + 2 * slice_w, height + 0.35, f"tile {tile}: 128 × 128 bytes, swizzled",
                  ha="center", fontsize=8)
    left.text(-0.25, height / 2, "head dim\n0-127", ha="right", va="center", fontsize=8)
    left.set_xlim(-1.3, 8 * slice_w + tile_gap + 0.2)
    left.set_ylim(-0.8, height + 0.8)
    left.set_title("Vᵀ of a 192-key block: each P·V wgmma reads one k32 slice inside one tile", fontsize=10)

    # Right: instructions per 128 keys, and the per-block waits per 128 keys (one set a block).
    names = [k for k, _ in WIDE_KERNELS]
    per128 = []
    for kernel, keys in WIDE_KERNELS:
        m = source_match(WIDE_NOTE, r"\| " + re.escape(kernel) + r" \| (\d+) \| (\d+) \| (\d+) \|",
                         f"{kernel}'s SASS counts")
        per128.append(int(m.group(3)))
    waits = [128 / keys for _, keys in WIDE_KERNELS]
    y = range(len(names))
    right.barh(list(y), per128, 0.5, color=BLUE)
    for k, (v, w) in enumerate(zip(per128, waits)):
        right.text(v + 8, k, f"{v} instructions, {w:.2f} sets of waits", va="center", fontsize=8)
    right.set_yticks(list(y), names)
    right.invert_yaxis()
    right.set_xlim(0, 1000)
    right.set_xlabel("per 128 keys, per warp (unmasked loop)")
    right.set_title("What a block pays once, spread over more keys", fontsize=10)
    fig.suptitle("Step 47: 192-key blocks at FP8, D = 128", fontsize=11)
    fig.tight_layout()
    save(fig, out, "part8-wide-keys.png")


def main():
    out = out_dir(parser(__doc__).parse_args().out)
    draw(out)
    draw_budget(out)
    draw_wide_keys(out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Draws chapter 45's schematic into docs/img/:

  part8-v-transpose.png  a schematic of one unit of step 45's V transpose (32 keys × 16 head dims):
                         left, the four 8 × 8 matrices (16-bit elements) of one ldmatrix.x4.trans
                         on V, with the 8 bytes quad lane (q = 0, t = 1) receives outlined; middle,
                         that lane's two PRMTs turning them into two words of Vᵀ in P's key order;
                         right, the 16-byte chunk each row of one stmatrix phase lands on under the
                         128-byte swizzle, for the plain row order (two rows to a chunk: 2-way) and
                         the kernel's (eight different chunks). The maps are common/fp8_layout.hpp's,
                         recomputed here; the script exits if the header's formulas have changed.

    scripts/figures_part8.py            # writes the PNG
    scripts/figures_part8.py --out DIR  # somewhere else
"""
from figlib import BLUE, GREEN, GREY, ORANGE, RED, box, out_dir, parser, pyplot, save, source_text

LAYOUT = "common/fp8_layout.hpp"
MATRIX_COLOURS = (BLUE, GREEN, ORANGE, "#9467bd")
LANE_Q, LANE_T = 0, 1  # the lane whose bytes the figure follows


def check_source():
    source_text(LAYOUT, "return 16 * h + 8 * (f / 2) + 2 * t + f % 2;", "permuted_key's formula")
    source_text(LAYOUT, "((byte / kChunkBytes) ^ (row % 8)) * kChunkBytes", "the 128-byte swizzle")
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


def main():
    draw(out_dir(parser(__doc__).parse_args().out))


if __name__ == "__main__":
    main()

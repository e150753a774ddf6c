#!/usr/bin/env python3
"""Draws chapter 44's schematic into docs/img/:

  part7-specdec-rows.png  a schematic: one K/V head with 80 packed query rows (group 5 × 16 query
                          tokens) and one split's key tiles. Step 42 gives each 16 rows a CTA of
                          its own (5 CTAs, each reading every key tile of the split, four from L2);
                          step 44 gives the rows to the warps of one or two CTAs (48 + 32 rows), each
                          key tile read once into one ring and used by every warp. The tile sizes
                          (16 keys a warp tile in 42, 64 keys a ring stage in 44) are read from the
                          steps' sources.

    scripts/figures_part7_specdec.py            # writes the PNG
    scripts/figures_part7_specdec.py --out DIR  # somewhere else
"""
from figlib import BLUE, GREEN, RED, arrow, box, out_dir, parser, pyplot, save, source_constant

ROWS = 80          # group 5 × 16 query tokens (B = 3, Hq = 40, Hkv = 8)
TILE_ROWS = 16     # one m16 row tile
BLOCKS_44 = (48, 32)  # step 44's row blocks past 64 rows (as even as whole tiles allow)


def draw(out):
    keys42 = source_constant("steps/42_parallel_merge/parallel_merge.cu", "kKeys")
    keys44 = source_constant("steps/44_spec_decode/spec_decode.cu", "kKeys")
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, title in zip(axes, (f"step 42: a CTA per {TILE_ROWS} packed rows", "step 44: the rows across the warps")):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 6.2)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
        # The split's keys: a strip of K/V tiles at the top.
        for i in range(8):
            box(ax, 1.0 + i * 1.0, 5.2, 0.95, 0.6, GREEN, "K/V" if i == 0 else "", fontsize=7, alpha=0.5)
        ax.text(5.0, 6.0, "one split's keys (HBM)", ha="center", fontsize=8)
    # Step 42: five CTAs, each reading the strip.
    ax = axes[0]
    for c in range(ROWS // TILE_ROWS):
        x = 0.5 + c * 1.9
        box(ax, x, 1.2, 1.6, 2.2, BLUE, f"CTA {c}\n{TILE_ROWS} rows\n4 warps over\n{keys42}-key tiles", fontsize=7, alpha=0.35)
        arrow(ax, (x + 0.8, 5.1), (x + 0.8, 3.5), color=RED if c else "black", lw=1.0)
    ax.text(5.0, 0.55, "every key read 5 times: once from HBM, 4 times from L2\n"
            "the split rule, counting 5 CTAs a head, plans fewer splits", ha="center", fontsize=8)
    # Step 44: two CTAs of 4 warps, one ring each.
    ax = axes[1]
    x = 0.6
    for c, rows in enumerate(BLOCKS_44):
        box(ax, x, 3.0, 4.1, 0.7, GREEN, f"one ring of {keys44}-key tiles, filled by all 128 threads", fontsize=7, alpha=0.5)
        arrow(ax, (x + 2.0, 5.1), (x + 2.0, 3.75), color="black" if c == 0 else RED, lw=1.0)
        for w in range(4):
            busy = w * TILE_ROWS < rows
            box(ax, x + w * 1.03, 1.2, 0.95, 1.5, BLUE if busy else "white",
                f"warp {w}\n{TILE_ROWS} rows" if busy else f"warp {w}\nno rows", fontsize=7, alpha=0.35 if busy else 1.0)
        ax.text(x + 2.05, 0.85, f"CTA {c}: {rows} rows", ha="center", fontsize=8)
        x += 4.7
    ax.text(5.0, 0.2, "every key read twice (once a row block); each warp walks every tile of the split",
            ha="center", fontsize=8)
    fig.tight_layout()
    save(fig, out, "part7-specdec-rows.png")


def main():
    draw(out_dir(parser(__doc__).parse_args().out))


if __name__ == "__main__":
    main()

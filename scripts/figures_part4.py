#!/usr/bin/env python3
"""Draws two schematic figures of Part IV into docs/img/ (nothing in them is measured):

  part4-tma-box.png      step 17: one ragged K tile at N = 1000, D = 128. The tensor map's four
                         dimensions, the box {64, kBlockN, D/64, 1} that one cp.async.bulk.tensor
                         copies, the rows past N that the engine fills with zeros, where the box
                         lands in shared memory ([D/64][kBlockN][64]), and the bytes the stage's
                         mbarrier expects (K and V boxes, zeros included).
  part4-persistent.png   step 20 at B=4 H=16 N=4096 D=128 without a mask: the head-major tile list
                         walked by gridDim.x = 132 CTAs (CTA c takes tiles c, c + 132, ...), how
                         many heads each row of 132 tiles touches, and one CTA's K/V ring position
                         running on across its tiles, with the Q reload and the TMA store of O.

The tile constants (kWarpgroups, kBlockN, kStages, kConsumers) are read from the steps' sources, so
the figures follow the kernels; the tile walk is RowWalk's tile_index / decode
(common/device/hopper/tile_scheduler.cuh), written again here in Python.

  scripts/figures_part4.py              # both figures into docs/img/
  scripts/figures_part4.py --out DIR    # somewhere else
"""
import argparse
import pathlib
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches as patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
SMS = 132  # the H200's SM count: the persistent grid's size


def constant(path, name):
    """The integer value of `static constexpr int NAME = ...;` in a step's source (a literal, or
    64 * kWarpgroups / 64 * kConsumers, which is all the Part IV tiles use)."""
    text = (ROOT / path).read_text()
    m = re.search(r"static constexpr int " + name + r"\s*=\s*([^;]+);", text)
    if not m:
        raise SystemExit(f"{path}: no constant {name}")
    expr = m.group(1).split("//")[0].strip()
    if re.fullmatch(r"\d+", expr):
        return int(expr)
    m2 = re.fullmatch(r"(\d+)\s*\*\s*(k\w+)", expr)
    if not m2:
        raise SystemExit(f"{path}: cannot read {name} = {expr}")
    return int(m2.group(1)) * constant(path, m2.group(2))


# ---- step 17: the TMA box of a ragged tile ---------------------------------------------------------
def fig_tma_box(out):
    src = "steps/17_tma/tma.cu"
    block_m = constant(src, "kBlockM")
    block_n = constant(src, "kBlockN")
    stages = constant(src, "kStages")
    d, n, elem = 128, 1000, 2  # the chapter's question: D = 128, N = 1000, fp16 or bf16 (2 bytes)
    col_blocks = d // 64
    last = (n - 1) // block_n  # the last K/V block
    row0 = last * block_n
    real = n - row0
    zeros = block_n - real
    kv_bytes = block_n * d * elem  # Tile::kKVBytes
    expect = 2 * kv_bytes  # mbarrier_arrive_expect_tx(&kv_full[stage], 2 * kKVBytes)
    zero_bytes = 2 * zeros * d * elem
    first_stage = 0 % stages  # the kernel issues block n_blocks - 1 - i at ring position i

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13.5, 7.2), gridspec_kw={"width_ratios": [1.15, 1]})
    # Left: one head of K in global memory, as the tensor map sees it.
    ax.set_xlim(-30, 128 + 160)
    ax.set_ylim(n + zeros + 150, -85)
    ax.axis("off")
    ax.set_title(f"global memory: K of one head (N = {n}, D = {d}), and the tensor map's box", fontsize=11)
    for c in range(col_blocks):
        ax.add_patch(patches.Rectangle((64 * c, 0), 64, n, facecolor="#dbe8f6", edgecolor="#4a6b8a", lw=1))
        ax.text(64 * c + 32, -8, f"column block {c}\n(dim 2 = {c})", ha="center", va="bottom", fontsize=8.5)
    for blk in range(last + 1):
        y = blk * block_n
        ax.plot([0, 128], [y, y], color="#4a6b8a", lw=0.6)
        ax.text(-4, y + min(block_n, n - y) / 2, f"block {blk}", ha="right", va="center", fontsize=7.5)
    # The last box: real rows, then the rows past N.
    ax.add_patch(patches.Rectangle((0, row0), 128, real, facecolor="#f2c46d", edgecolor="#8a5a00", lw=1.5))
    ax.add_patch(patches.Rectangle((0, n), 128, zeros, facecolor="white", edgecolor="#8a5a00", lw=1.5,
                                   hatch="///", linestyle="--"))
    ax.plot([-20, 128 + 8], [n, n], color="#b00000", lw=1.5)
    ax.annotate(f"the box at (row {row0}, head h):\n{real} real rows", xy=(128, row0 + real / 2),
                xytext=(150, row0 - 60), fontsize=8.5, va="center", arrowprops=dict(arrowstyle="->"))
    ax.annotate(f"row N = {n}: the end of the head", xy=(128 + 8, n), xytext=(150, n + 25),
                fontsize=8.5, color="#b00000", va="center", arrowprops=dict(arrowstyle="->", color="#b00000"))
    ax.annotate(f"{zeros} rows past N: not read, zero-filled\n(dim 3 is the head: not the next\nhead's first rows)",
                xy=(64, n + zeros), xytext=(40, n + zeros + 95), fontsize=8.5, color="#8a5a00", va="center",
                arrowprops=dict(arrowstyle="->", color="#8a5a00"))
    dims = ("tensor map (4 dimensions,\ninnermost first)\n"
            "dim 0: 64 columns = 128 B\n       (the swizzle's width)\n"
            f"dim 1: N rows, stride D·2 = {d * elem} B\n"
            "dim 2: D/64 column blocks,\n       stride 128 B\n"
            f"dim 3: B·H heads,\n       stride N·D·2 = {n * d * elem:,} B\n"
            f"box:   {{64, {block_n}, {col_blocks}, 1}}")
    ax.text(140, 120, dims, va="top", ha="left", fontsize=8.5, family="monospace",
            bbox=dict(facecolor="#f5f5f5", edgecolor="#999999"))

    # Right: the ring stage the box lands in.
    bx.set_xlim(-10, 64 * col_blocks + 20 * (col_blocks - 1) + 10)
    bx.set_ylim(block_n + 95, -40)
    bx.axis("off")
    bx.set_title(f"shared memory: K of ring stage {first_stage} ([D/64][{block_n}][64], 128-byte swizzle)",
                 fontsize=11)
    for c in range(col_blocks):
        x = c * (64 + 20)
        bx.add_patch(patches.Rectangle((x, 0), 64, real, facecolor="#f2c46d", edgecolor="#8a5a00", lw=1))
        bx.add_patch(patches.Rectangle((x, real), 64, zeros, facecolor="white", edgecolor="#8a5a00", lw=1,
                                       hatch="///"))
        bx.text(x + 32, -6, f"column block {c}\n{block_n * 64 * elem // 1024} KB", ha="center", va="bottom",
                fontsize=8.5)
        bx.text(x + 32, real + zeros / 2, "zeros", ha="center", va="center", fontsize=8.5,
                bbox=dict(facecolor="white", edgecolor="none"))
        bx.text(x + 32, real / 2, f"rows {row0}–{n - 1}", ha="center", va="center", fontsize=8.5)
    note = (f"the loop walks the blocks backwards: block {last} is ring position i = 0,\n"
            f"stage i mod {stages} = {first_stage}, parity (i / {stages}) mod 2 = 0\n"
            f"thread 0: mbarrier.arrive.expect_tx(kv_full[{first_stage}], 2 · {kv_bytes:,} B = {expect:,} B)\n"
            "          then the K box and the V box, one copy each\n"
            f"the engine counts every byte of both boxes, the {zero_bytes:,} B of zeros included,\n"
            "so the phase completes as for any other block: no code for the ragged tile\n"
            "(the softmax's mask still sets keys past N to −∞)")
    bx.text(-8, block_n + 12, note, va="top", ha="left", fontsize=8.5, family="monospace",
            bbox=dict(facecolor="#eef6ee", edgecolor="#5a8a5a"))
    fig.suptitle(f"Step 17: one cp.async.bulk.tensor per tile (kBlockM = {block_m}, kBlockN = {block_n}, "
                 f"kStages = {stages}); schematic", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(out / "part4-tma-box.png", dpi=100)
    plt.close(fig)


# ---- step 20: the persistent grid -----------------------------------------------------------------
def row_walk_tile(r, cta, grid):
    """RowWalk::tile_index: the CTA's r-th tile."""
    return r * grid + cta


def decode_head_major(tile, m_blocks):
    """StaticSchedule<false, false>::decode: (head, query block) without a mask."""
    return tile // m_blocks, tile % m_blocks


def fig_persistent(out):
    src = "steps/20_persistent/persistent.cu"
    block_m = constant(src, "kBlockM")
    block_n = constant(src, "kBlockN")
    stages = constant(src, "kStages")
    b, h, n, d, elem = 4, 16, 4096, 128, 2
    bh = b * h
    m_blocks = n // block_m
    n_tiles = bh * m_blocks
    grid = min(n_tiles, SMS)  # persistent_grid
    rows = (n_tiles + grid - 1) // grid
    kv_head = 2 * n * d * elem

    fig = plt.figure(figsize=(13.5, 8.8))
    gs = fig.add_gridspec(2, 2, height_ratios=[1.25, 1], width_ratios=[2.2, 1])
    ax = fig.add_subplot(gs[0, 0])
    cx = fig.add_subplot(gs[0, 1])
    rx = fig.add_subplot(gs[1, :])

    # Top left: the tile list, one column per head, one cell per query block, coloured by its row.
    cmap = plt.get_cmap("tab20")
    for t in range(n_tiles):
        head, mb = decode_head_major(t, m_blocks)
        r = t // grid
        ax.add_patch(patches.Rectangle((head, mb), 1, 1, facecolor=cmap(r % 20), edgecolor="none"))
    picked = (0, 1, 131)
    marks = {0: "o", 1: "s", 131: "^"}
    for cta in picked:
        xs, ys = [], []
        for r in range(rows):
            t = row_walk_tile(r, cta, grid)
            if t < n_tiles:
                head, mb = decode_head_major(t, m_blocks)
                xs.append(head + 0.5)
                ys.append(mb + 0.5)
        ax.plot(xs, ys, marks[cta], color="black", ms=4.5, mfc="white" if cta else "black",
                label=f"CTA {cta}'s tiles")
    ax.set_xlim(0, bh)
    ax.set_ylim(m_blocks, 0)
    ax.set_xlabel(f"head (B·H = {bh})")
    ax.set_ylabel(f"query block ({block_m} rows; {m_blocks} per head)")
    ax.set_title(f"{n_tiles} tiles, head-major; CTA c of {grid} takes tiles c, c + {grid}, c + {2 * grid}, … "
                 f"(colour: row of {grid})", fontsize=10)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)

    # Top right: heads (and their K/V bytes) touched by each row of the list.
    heads_per_row = []
    for r in range(rows):
        lo, hi = r * grid, min(n_tiles, (r + 1) * grid) - 1
        heads_per_row.append(hi // m_blocks - lo // m_blocks + 1)
    cx.barh(range(rows), [k * kv_head / 2**20 for k in heads_per_row], color=[cmap(r % 20) for r in range(rows)])
    cx.set_ylim(rows - 0.5, -0.5)
    cx.set_xlabel("K and V of the heads in the row (MiB)")
    cx.set_ylabel(f"row of {grid} tiles")
    cx.set_title("what the CTAs running together read", fontsize=10)
    for r, k in enumerate(heads_per_row):
        cx.text(k * kv_head / 2**20 + 0.2, r, f"{k} heads", va="center", fontsize=7.5)
    cx.axvline(60, color="#b00000", lw=1)
    cx.text(59, rows - 1, "L2: 60 MiB", color="#b00000", ha="right", va="center", fontsize=8)
    cx.set_xlim(0, 64)

    # Bottom: CTA 0's ring across its first tiles (every tile has n / kBlockN K/V blocks here).
    per_tile = n // block_n
    shown_tiles = 3
    colors = ["#6d9fd6", "#e7a25a", "#7cbf7c", "#c98fd1"]
    it = 0
    for r in range(shown_tiles):
        t = row_walk_tile(r, 0, grid)
        head, mb = decode_head_major(t, m_blocks)
        for i in range(per_tile):
            stage, parity = it % stages, (it // stages) & 1
            rx.add_patch(patches.Rectangle((it, 0), 1, 1, facecolor=colors[stage], edgecolor="white", lw=0.5,
                                           hatch="//" if parity else None))
            it += 1
        x0 = r * per_tile
        rx.text(x0 + per_tile / 2, 1.55, f"tile {t}: head {head}, query block {mb}\n"
                f"K/V blocks {r * per_tile}…{r * per_tile + per_tile - 1} of the ring",
                ha="center", va="bottom", fontsize=8.5)
        rx.annotate("", xy=(x0, 1.05), xytext=(x0 + per_tile, 1.05),
                    arrowprops=dict(arrowstyle="<->", color="#555555"))
        if r:
            rx.annotate(f"the producer loads blocks {x0}–{x0 + stages - 1} (tile {t}'s first)\n"
                        f"as soon as blocks {x0 - stages}–{x0 - 1} release their stages",
                        xy=(x0 + stages / 2, 0.5), xytext=(x0 + stages + 2, -0.75), fontsize=8,
                        color="#205020", va="top", arrowprops=dict(arrowstyle="->", color="#205020"))
            rx.axvline(x0, color="black", lw=1.5)
            rx.text(x0 - 0.4, -0.25, f"Q of tile {t} once\nq_empty completes", ha="right", va="top", fontsize=8)
            rx.text(x0 - 0.4, -1.25, f"O of tile {row_walk_tile(r - 1, 0, grid)} → its Q buffer → TMA store",
                    ha="right", va="top", fontsize=8, color="#8a5a00")
    rx.set_xlim(-1, shown_tiles * per_tile + 1)
    rx.set_ylim(-2.1, 2.6)
    rx.axis("off")
    rx.set_title(f"CTA 0's K/V ring: one position counter it for the CTA's life; stage = it mod {stages}, "
                 f"parity = (it / {stages}) mod 2 (hatched: parity 1); the producer runs up to {stages} "
                 "blocks ahead, into the next tile", fontsize=10)
    handles = [patches.Patch(facecolor=colors[s], label=f"stage {s}") for s in range(stages)]
    rx.legend(handles=handles, loc="lower right", fontsize=8, ncol=stages)

    fig.suptitle(f"Step 20: a persistent grid of {grid} CTAs at B={b} H={h} N={n} D={d}, no mask "
                 "(schematic, from RowWalk's formulas)", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(out / "part4-persistent.png", dpi=100)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    fig_tma_box(args.out)
    fig_persistent(args.out)
    print(f"wrote part4-tma-box.png, part4-persistent.png into {args.out}")


if __name__ == "__main__":
    main()

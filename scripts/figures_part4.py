#!/usr/bin/env python3
"""Draws Part IV's figures (chapters 16-22) into docs/img/ (part4-peers.png, measured, is scripts/plot's):

  scripts/figures_part4.py              # all figures
  scripts/figures_part4.py --out DIR    # somewhere else

  part4-swizzle.png       the 128-byte swizzle of every Part IV tile (step 16): where each 16-byte
                          chunk of a 64-half row lands, and the 8-row, 1024-byte atom.
  part4-ring.png          the K/V ring of steps 17-22: kStages stages, each with a "full" and an
                          "empty" mbarrier; which lap waits for which parity, and who arrives.
  part4-pingpong.png      step 19's warpgroup ping-pong: two consumers' GEMM turns and softmax
                          phases, the producer's loads, the named-barrier turns.
  part4-causal-walk.png   the causal tile list of steps 20-21 at B=4 H=16 N=4096 D=128 (128-row
                          tiles, 132 SMs): which CTA takes which tile under the row walk, the snake
                          and the dynamic counter over L2-sized windows of heads, and each CTA's
                          total work.
  part4-tile-waves.png    step 22's 192-row tiles against 128-row ones at B=4 H=8 D=64 on 132 SMs:
                          rows of work per SM, the busiest SM setting the kernel's time.
  part3-NN.png            for each of Part III's chapters 07-15: every version of the series at its
  part4-tma-box.png       step 17: one ragged K tile at N = 1000, D = 128. The tensor map's four
                          dimensions, the box {64, kBlockN, D/64, 1} that one cp.async.bulk.tensor
                          copies, the rows past N that the engine fills with zeros, where the box
                          lands in shared memory ([D/64][kBlockN][64]), and the bytes the stage's
                          mbarrier expects (K and V boxes, zeros included).
  part4-persistent.png    step 20 at B=4 H=16 N=4096 D=128 without a mask: the head-major tile list
                          walked by gridDim.x = 132 CTAs (CTA c takes tiles c, c + 132, ...), how
                          many heads each row of 132 tiles touches, and one CTA's K/V ring position
                          running on across its tiles, with the Q reload and the TMA store of O.

Nothing in them is measured. The schedules are computed from the kernels' own formulas (RowWalk's
`tile_index` / `decode` and the other schedules of common/device/hopper/tile_scheduler.cuh, written
again here in Python, and the weight model of scripts/tile_model.py: a tile costs its K/V blocks
plus half a block of prologue and epilogue); the tile constants (kBlockM, kBlockN, kStages) are
read from the steps' sources, so the figures follow the kernels. The timelines (ring, ping-pong)
are schematic: their durations are illustrative, not measured.
"""
from figlib import (BLUE, GREEN, GREY, ORANGE, RED, SMS, arrow, ceil_div, out_dir, parser, pyplot, save,
                    source_constant)

plt = pyplot()
import matplotlib.patches as patches  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

L2_BYTES = 62914560  # the H200's 60 MiB L2 (docs/results/h200/*.json, provenance.gpu)
OVERHEAD = 0.5  # blocks of prologue + epilogue per tile (scripts/tile_model.py)


# ---------------------------------------------------------------- the schedules, as the kernels

def causal_tiles(bh, n, block_m, block_n, heads_per_window=None):
    """The causal tile list in kernel order: [(bh, m_block, weight)]. heads_per_window=None: heaviest
    query block of every head first (the row walk's and the snake's list); W: heaviest first within
    windows of W heads (the dynamic scheduler's list) — `work_of` of the kernels."""
    m_blocks = ceil_div(n, block_m)
    out = []
    for tile in range(m_blocks * bh):
        if heads_per_window:
            per_window = heads_per_window * m_blocks
            full_windows = bh // heads_per_window
            in_full = tile < full_windows * per_window
            window = tile // per_window if in_full else full_windows
            j = tile % per_window if in_full else tile - full_windows * per_window
            width = heads_per_window if in_full else bh - full_windows * heads_per_window
            m_block = m_blocks - 1 - j // width
            head = window * heads_per_window + j % width
        else:
            m_block = m_blocks - 1 - tile // bh
            head = tile % bh
        q_start = m_block * block_m
        n_blocks = ceil_div(min(n, q_start + block_m), block_n)
        out.append((head, m_block, n_blocks + OVERHEAD))
    return out


def static_owner(n_tiles, ctas, snake):
    """CTA of each tile: CTA c takes tile_of(r) = r*G + c, or r*G + (G-1-c) on odd rows (snake)."""
    owner = [0] * n_tiles
    for c in range(ctas):
        r = 0
        while True:
            t = r * ctas + (ctas - 1 - c) if (snake and r % 2) else r * ctas + c
            if t >= n_tiles:
                break
            owner[t] = c
            r += 1
    return owner


def dynamic_owner(tiles, ctas):
    """Greedy model of the atomic counter: CTA c starts with tile c; whoever finishes first takes the
    next index. Returns (owner of each tile, start time of each tile)."""
    import heapq
    owner, start = [0] * len(tiles), [0.0] * len(tiles)
    free = []
    for c in range(min(ctas, len(tiles))):
        owner[c], start[c] = c, 0.0
        heapq.heappush(free, (tiles[c][2], c))
    nxt = ctas
    while nxt < len(tiles):
        t, c = heapq.heappop(free)
        owner[nxt], start[nxt] = c, t
        heapq.heappush(free, (t + tiles[nxt][2], c))
        nxt += 1
    return owner, start


def loads(tiles, owner, ctas):
    out = [0.0] * ctas
    for (_, _, w), c in zip(tiles, owner):
        out[c] += w
    return out


# ---------------------------------------------------------------- figures

def fig_swizzle(out):
    """Row r's logical chunk c (8 halves = 16 bytes) is stored at chunk c XOR (r mod 8)."""
    rows, chunks = 16, 8
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, swizzled in zip(axes, (False, True)):
        for r in range(rows):
            for c in range(chunks):
                slot = c ^ (r % 8) if swizzled else c
                ax.add_patch(Rectangle((slot, r), 1, 1, facecolor=cmap(c), edgecolor="white", alpha=0.85))
                ax.text(slot + 0.5, r + 0.5, str(c), ha="center", va="center", fontsize=7, color="white")
        ax.add_patch(Rectangle((0, 0), chunks, 8, fill=False, edgecolor="black", lw=2))
        ax.set_xlim(0, chunks)
        ax.set_ylim(rows, 0)
        ax.set_xticks([x + 0.5 for x in range(chunks)])
        ax.set_xticklabels([f"{16 * x}" for x in range(chunks)], fontsize=7)
        ax.set_yticks([y + 0.5 for y in range(rows)])
        ax.set_yticklabels([str(y) for y in range(rows)], fontsize=7)
        ax.set_xlabel("byte offset in the 128-byte row (one bank group of 4 banks per 16 bytes)", fontsize=8)
        ax.set_ylabel("row of the tile", fontsize=8)
        ax.set_title("unswizzled: chunk c of every row in the same banks" if not swizzled else
                     "128-byte swizzle: chunk c of row r at c XOR (r mod 8)", fontsize=9)
    fig.suptitle("A tile row of 64 halves = 8 chunks of 16 bytes (the number is the logical chunk, the colour "
                 "follows it).\nEight rows form a 1024-byte atom (framed), which must start 1024-byte aligned; "
                 "a column of chunks read by 8 rows (an ldmatrix or a wgmma operand) then touches all 32 banks "
                 "once instead of one bank group eight times.", fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    save(fig, out, "part4-swizzle.png", dpi=100)


def fig_ring(out):
    """kStages = 3; iterations it = 0..8 of the ring; stage it % 3, lap it / 3."""
    stages, iters = 3, 9
    fig, ax = plt.subplots(figsize=(11, 4.4))
    ax.set_xlim(-2.6, iters + 0.2)
    ax.set_ylim(-0.9, 2 * stages + 0.6)
    ax.axis("off")
    for s in range(stages):
        y = 2 * (stages - 1 - s)
        ax.text(-2.5, y + 0.95, f"stage {s}", fontsize=10, weight="bold", va="center")
        ax.text(-2.5, y + 0.45, "full[s]: producer arrives\n(expect_tx), TMA's bytes\ncomplete; consumers wait",
                fontsize=6.5, va="center", color=BLUE)
        ax.text(-2.5, y - 0.2, "empty[s]: consumers arrive\n(one per consumer warp);\nproducer waits", fontsize=6.5,
                va="center", color=RED)
    for it in range(iters):
        s, lap = it % stages, it // stages
        y = 2 * (stages - 1 - s)
        x = it
        ax.add_patch(Rectangle((x + 0.05, y + 0.25), 0.9, 1.0, facecolor="#dbe9f6", edgecolor=BLUE))
        ax.text(x + 0.5, y + 1.02, f"block it={it}, lap {lap}", ha="center", fontsize=7)
        ax.text(x + 0.5, y + 0.42, f"consumers wait\nfull parity {lap & 1}", ha="center", fontsize=6.5, color=BLUE)
        ax.add_patch(Rectangle((x + 0.05, y - 0.45), 0.9, 0.6, facecolor="#f9dede", edgecolor=RED))
        ax.text(x + 0.5, y - 0.15, f"producer waits\nempty parity {(lap & 1) ^ 1}", ha="center", fontsize=6.2,
                color=RED)
    for x in range(iters + 1):
        ax.axvline(x, color="#eeeeee", lw=0.5, zorder=0)
    ax.text(iters / 2, 2 * stages + 0.35,
            "The K/V ring (kStages = 3): block it uses stage it % kStages in lap it / kStages. "
            "A barrier's phase flips each time it completes,\nso lap L waits for parity L & 1 on full; "
            "the producer's first lap waits for parity 1 on empty, which a fresh barrier reports as complete.",
            ha="center", fontsize=8)
    ax.text(iters / 2, -0.8, "Schematic. Code: common/device/hopper/mbarrier.cuh; the ring position `it` "
            "runs on across tiles from step 20 on.", ha="center", fontsize=7, color=GREY)
    fig.tight_layout()
    save(fig, out, "part4-ring.png", dpi=110)


def fig_pingpong(out):
    """Two consumers alternate GEMM turns; each one's softmax runs under the other's GEMMs."""
    g, sm = 1.0, 0.85  # a turn's GEMMs (S_i and P_{i-1}V_{i-1}), a softmax: illustrative
    fig, ax = plt.subplots(figsize=(11, 3.6))
    lanes = {"producer (TMA)": 3, "tensor cores": 2, "consumer 0": 1, "consumer 1": 0}
    for name, y in lanes.items():
        ax.text(-0.15, y + 0.4, name, ha="right", va="center", fontsize=9)
    t = 0.0
    turns = 6
    for k in range(turns):
        c = k % 2
        y = lanes[f"consumer {c}"]
        i = k // 2 + 1
        ax.add_patch(Rectangle((t, lanes["tensor cores"]), g, 0.8, facecolor=BLUE if c == 0 else GREEN,
                               edgecolor="black", alpha=0.8))
        label = f"WG{c}: S{i}" + (f", P{i-1}V{i-1}" if i > 1 else "")
        ax.text(t + g / 2, lanes["tensor cores"] + 0.4, label, ha="center",
                va="center", fontsize=7, color="white")
        ax.add_patch(Rectangle((t, y), 0.12, 0.8, facecolor="black"))
        ax.text(t + 0.14, y + 0.62, "issue", fontsize=6)
        ax.add_patch(Rectangle((t + g, y), sm, 0.8, facecolor=ORANGE, edgecolor="black", alpha=0.8))
        ax.text(t + g + sm / 2, y + 0.4, f"softmax of S{i}", ha="center", va="center", fontsize=7)
        ax.add_patch(Rectangle((t + g + sm, y), g - sm, 0.8, facecolor="#eeeeee", edgecolor="#bbbbbb"))
        ax.text(t + g + sm + (g - sm) / 2, y + 0.9, "wait", ha="center", va="center", fontsize=6, color=GREY)
        # the turn barrier: c arrives after issuing, 1-c waits on it
        if k + 1 < turns:
            arrow(ax, (t + 0.12, y + (0.0 if c == 0 else 0.8)),
                  (t + g, lanes[f"consumer {1 - c}"] + (0.8 if c == 0 else 0.0)),
                  color="purple", lw=1, mutation_scale=8)
        t += g
    for j in range(turns // 2 + 1):
        x = j * 2 * g - 1.2
        if x + 0.9 < 0 or x > turns * g:
            continue
        ax.add_patch(Rectangle((max(x, 0), lanes["producer (TMA)"]), 0.9 - max(0, -x), 0.8, facecolor="#dddddd",
                               edgecolor="black"))
        ax.text(max(x, 0) + 0.45, lanes["producer (TMA)"] + 0.4, f"K{j+1}, V{j}", ha="center", va="center",
                fontsize=7)
    ax.set_xlim(-1.6, turns * g + sm + 0.3)
    ax.set_ylim(-0.6, 4.2)
    ax.axis("off")
    ax.text(turns * g / 2, 3.95, "Warpgroup ping-pong (step 19): the purple arrows are the named-barrier "
            "turns — a consumer arrives after issuing its GEMMs, the other waits before issuing its own",
            ha="center", fontsize=8)
    ax.text(turns * g / 2, -0.45, "Schematic, durations illustrative. The producer refills a ring stage once "
            "both consumers have released it (the empty barrier of part4-ring.png).", ha="center", fontsize=7,
            color=GREY)
    fig.tight_layout()
    save(fig, out, "part4-pingpong.png", dpi=110)


def fig_causal_walk(out):
    b, h, n, d, block = 4, 16, 4096, 128, 128
    bh = b * h
    kv_bytes = 2 * n * d * 2  # one head's K and V, fp16
    window = max(1, min(bh, L2_BYTES // 2 // kv_bytes))  # the kernel's heads_per_window
    heavy = causal_tiles(bh, n, block, block)
    windowed = causal_tiles(bh, n, block, block, window)
    row_owner = static_owner(len(heavy), SMS, False)
    snake_owner = static_owner(len(heavy), SMS, True)
    dyn_owner, _ = dynamic_owner(windowed, SMS)
    schedules = [("row walk (step 20)", heavy, row_owner, BLUE),
                 ("snake (step 21, main)", heavy, snake_owner, GREEN),
                 (f"dynamic counter, windows of {window} heads (step 21)", windowed, dyn_owner, RED)]
    fig = plt.figure(figsize=(12, 7.5))
    grid = fig.add_gridspec(2, 3, height_ratios=[1.1, 1])
    rows = ceil_div(len(heavy), SMS)
    for k, (name, tiles, owner, color) in enumerate(schedules):
        ax = fig.add_subplot(grid[0, k])
        image = [[float("nan")] * SMS for _ in range(rows)]
        for t, (_, _, w) in enumerate(tiles):
            image[t // SMS][t % SMS] = w - OVERHEAD
        ax.imshow(image, aspect="auto", cmap="viridis", interpolation="nearest")
        for c, mk in ((0, "o"), (SMS - 1, "^")):
            pts = [(t % SMS, t // SMS) for t in range(len(tiles)) if owner[t] == c]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], facecolors="none", edgecolors="red",
                       s=40, marker=mk, label=f"tiles of CTA {c}")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("position in the list's row of 132 tiles", fontsize=8)
        ax.set_ylabel("row of the tile list (list order: left to right, top down)", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="lower left")
    ax = fig.add_subplot(grid[1, :])
    for name, tiles, owner, color in schedules:
        ld = loads(tiles, owner, SMS)
        mean = sum(ld) / SMS
        ax.plot(range(SMS), ld, color=color, lw=1.5,
                label=f"{name}: busiest CTA {max(ld) / mean - 1:+.1%} over the mean")
    ax.axhline(sum(w for _, _, w in heavy) / SMS, color="black", lw=0.8, ls="--", label="mean work per CTA")
    ax.set_xlabel("CTA (one per SM)", fontsize=9)
    ax.set_ylabel("work (K/V blocks + ½ per tile)", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"Causal tiles at B={b} H={h} N={n} D={d}, 128-row tiles ({len(heavy)} tiles) on {SMS} SMs. "
                 "Top: the whole list, colour = the tile's K/V blocks (yellow 32, dark 1); red marks = the tiles "
                 "CTA 0 and CTA 131 take.\nBottom: each CTA's total work (the dynamic counter: a greedy model where a "
                 "CTA takes the next index when it finishes). Work model only; the measured times are in the chapters.",
                 fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    save(fig, out, "part4-causal-walk.png", dpi=100)
    return {name: max(loads(t, o, SMS)) / (sum(w for _, _, w in t) / SMS) for name, t, o, _ in schedules}


def fig_tile_waves(out):
    b, h = 4, 8
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.0))
    for ax, n in zip(axes, (4096, 8192)):
        for block, color in ((128, BLUE), (192, RED)):
            m_blocks = ceil_div(n, block)
            tiles = m_blocks * b * h
            per_sm = [tiles // SMS + (1 if c < tiles % SMS else 0) for c in range(SMS)]
            rows = [k * block for k in per_sm]
            ax.step(range(SMS), rows, where="mid", color=color, lw=1.6,
                    label=f"{block}-row tiles: {tiles} tiles, {tiles / SMS:.2f} a SM, busiest {max(rows)} rows")
        ax.axhline(b * h * n / SMS, color="black", ls="--", lw=0.8, label=f"mean {b * h * n / SMS:.0f} rows")
        ax.set_title(f"B={b} H={h} N={n} D=64, non-causal", fontsize=9)
        ax.set_xlabel("SM (one persistent CTA each)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(0, None)
        ax.legend(fontsize=7, loc="lower left")
    axes[0].set_ylabel("query rows of work (incl. rows past N)", fontsize=8)
    fig.suptitle("Tile waves on 132 SMs: the kernel lasts as long as the busiest SM.\nAt N = 4096 the 192-row tile "
                 "costs the busiest SMs 12.5% more rows, at N = 8192 3% (and each head's last tile holds 64 real rows of 192).",
                 fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    save(fig, out, "part4-tile-waves.png", dpi=110)



# ---- step 17: the TMA box of a ragged tile ---------------------------------------------------------
def fig_tma_box(out):
    src = "steps/17_tma/tma.cu"
    block_m = source_constant(src, "kBlockM")
    block_n = source_constant(src, "kBlockN")
    stages = source_constant(src, "kStages")
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
    save(fig, out, "part4-tma-box.png", dpi=100)


# ---- step 20: the persistent grid -----------------------------------------------------------------
def row_walk_tile(r, cta, grid):
    """RowWalk::tile_index: the CTA's r-th tile."""
    return r * grid + cta


def decode_head_major(tile, m_blocks):
    """StaticSchedule<false, false>::decode: (head, query block) without a mask."""
    return tile // m_blocks, tile % m_blocks


def fig_persistent(out):
    src = "steps/20_persistent/persistent.cu"
    block_m = source_constant(src, "kBlockM")
    block_n = source_constant(src, "kBlockN")
    stages = source_constant(src, "kStages")
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
    save(fig, out, "part4-persistent.png", dpi=100)



def main():
    out = out_dir(parser(__doc__).parse_args().out)
    fig_swizzle(out)
    fig_ring(out)
    fig_pingpong(out)
    spans = fig_causal_walk(out)
    fig_tile_waves(out)
    fig_tma_box(out)
    fig_persistent(out)
    for name, s in spans.items():
        print(f"causal B=4 H=16 N=4096 D=128, {name}: busiest CTA {s:.3f}x the mean")
    print(f"wrote part4-swizzle.png, part4-ring.png, part4-pingpong.png, part4-causal-walk.png, "
          f"part4-tile-waves.png, part4-tma-box.png, part4-persistent.png to {out}")


if __name__ == "__main__":
    main()

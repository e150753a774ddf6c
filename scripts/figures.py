#!/usr/bin/env python3
"""Draws the explanatory figures of Parts IV-VI into docs/img/, and two measured ones (part3-NN, part6-decode-measured;
the other measured plots are scripts/plot's).

  scripts/figures.py              # all figures
  scripts/figures.py --out DIR    # somewhere else

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
                          workload (B=1 H=64 N=1024 D=128, non-causal and causal) in TFLOP/s, the
                          chapter's own versions highlighted, the one it is compared with outlined,
                          step 06 and PyTorch's backends as lines (results/h200/2026-11-30-softmax-
                          series.json and -softmax-peers.json: measured, not schematic).

  part5-naive-ledger.png  step 23's byte ledger at B=4 H=8 N=8192 D=64: the bytes each of its seven
                          kernels moves through the two fp32 N×N matrices (P and dP/dS) beside the
                          backward's minimum; from the step's own ledger formula (naive_backward.cu,
                          ledger()): a model of the traffic, not a measurement.
  part5-loop.png          FlashAttention-2's backward loop (step 24): K/V blocks outer, Q blocks
                          inner, dK/dV in registers, dQ by atomics; non-causal and causal.
  part5-st-layout.png     step 24's transposed tile Sᵀ = K Qᵀ in mma.sync's m16n8 accumulator layout:
                          lane and register → key row, query column, and the registers that share
                          one query's lse and D (from the kernel's constants, read from its file).
  part5-staircase.png     24/deterministic's order at N = 1024, D = 64: each key block adds its dQ
                          share of a query block after the previous key block's release (the order
                          from the kernel's loop; durations a model, not measured).
  part5-schedule.png      the Hopper backward (step 25, head_by_head): the producer's ring, the two
                          consumers' products in the kernel's order (dV, dQ, dK), the kDsStaged
                          barrier and the dQ pieces' bulk reduce-add (schematic).

  part6-split-kv.png      step 28 at Part VI's four decode shapes on 132 SMs (2 CTAs per SM): the
                          CTAs one per (batch, K/V head) gives against the split rule of
                          common/split_kv.hpp (figures_part6.splits_for, which reads its constants), and the fraction
                          of the GPU's CTA slots each fills: a model of occupancy, not a measurement.
  part7-overlap-pinned.png  one warpgroup's iteration in step 21's SASS and in step 31's: the softmax
                          waits for both products, or for S_i only (schematic, from the SASS order).
  part7-desc-iterators.png  one unmasked K/V block's SASS instructions by kind, steps 21/33 and 22/34
                          (results/h200/2026-12-01-p7r2-sass-loops.json: counted from SASS, not timed).
  part6-paged.png         step 29's address map: a block table, the pool's pages, and the 16-key
                          warp tiles inside them (schematic).
  part6-decode-measured.png  steps 28 and 29 at Part VI's four decode shapes (bf16, Nq = 1, D = 128):
                          GB/s of 28/split_kv, 29/split_kv at page size 64, cuDNN (99/cudnn) and the
                          device-to-device copy timed in the same process, and one_cta_per_head at
                          B = 1 (results/h200/2026-12-01-p6r0-serving-decode-b*.json: measured).

The schedules are computed from the kernels' own formulas (the `tile_index` / `decode` of
common/device/hopper/tile_scheduler.cuh, and the weight model of scripts/tile_model.py:
a tile costs its K/V blocks plus half a block of prologue and epilogue). The timelines (ring,
ping-pong) are schematic: their durations are illustrative, not measured.
matplotlib is installed with pip if it is missing (CI never runs this script).
"""
import argparse
import json
import math
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

try:
    import matplotlib
except ImportError:
    print("scripts/figures.py: matplotlib is missing; installing it with pip", file=sys.stderr)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"])
    import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

# The H200 of the results files: 132 SMs, a 60 MiB L2 (docs/results/h200/*.json, provenance.gpu).
SMS = 132
L2_BYTES = 62914560
OVERHEAD = 0.5  # blocks of prologue + epilogue per tile (scripts/tile_model.py)
BLUE, RED, GREEN, GREY, ORANGE = "#1f77b4", "#d62728", "#2ca02c", "#888888", "#ff7f0e"


# ---------------------------------------------------------------- the schedules, as the kernels

def ceil_div(a, b):
    return -(-a // b)


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
    fig.savefig(out / "part4-swizzle.png", dpi=100)
    plt.close(fig)


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
    fig.savefig(out / "part4-ring.png", dpi=110)
    plt.close(fig)


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
            ax.add_patch(FancyArrowPatch((t + 0.12, y + (0.0 if c == 0 else 0.8)),
                                         (t + g, lanes[f"consumer {1 - c}"] + (0.8 if c == 0 else 0.0)),
                                         arrowstyle="->", color="purple", lw=1, mutation_scale=8))
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
    fig.savefig(out / "part4-pingpong.png", dpi=110)
    plt.close(fig)


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
    fig.savefig(out / "part4-causal-walk.png", dpi=100)
    plt.close(fig)
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
    fig.savefig(out / "part4-tile-waves.png", dpi=110)
    plt.close(fig)


# Part III: chapter -> (its own versions, the versions it is compared with)
PART3 = {7: (["07/"], ["06/h200"]), 8: (["08/"], ["07/v5"]), 9: (["09/"], ["07/v5"]),
         10: (["10/"], ["09/v7"]), 11: (["11/"], ["10/v8"]), 12: (["12/"], ["11/qkspecialized"]),
         13: (["13/"], ["12/v10"]), 14: (["14/"], ["13/v11_ablation"]), 15: (["15/"], ["14/v12"])}
SERIES = "docs/results/h200/2026-11-30-softmax-series.json"
SERIES_PEERS = "docs/results/h200/2026-11-30-softmax-peers.json"


def fig_part3(out):
    import json
    series = json.loads((ROOT / SERIES).read_text())
    peers = json.loads((ROOT / SERIES_PEERS).read_text())["rows"]
    runs = [r for r in series["runs"] if r["kind"] == "attention"]
    shape = runs[0]["shape"]
    ids = [row["id"] for row in runs[0]["rows"] if row["id"].split("/")[0] >= "07"]
    made = []
    for chapter, (own, compared) in PART3.items():
        fig, axes = plt.subplots(1, len(runs), figsize=(11, 3.6), sharey=True)
        for ax, run in zip(axes, runs):
            rows = {row["id"]: row for row in run["rows"]}
            vals = [rows[i]["tflops"] for i in ids]
            colors = [RED if any(i.startswith(p) for p in own) else
                      (BLUE if i in compared else "#cccccc") for i in ids]
            bars = ax.bar(range(len(ids)), vals, color=colors, edgecolor="black", linewidth=0.4)
            for b, i, v in zip(bars, ids, vals):
                if any(i.startswith(p) for p in own) or i in compared:
                    ax.text(b.get_x() + b.get_width() / 2, v + 3, f"{v:.0f}", ha="center", fontsize=6.5)
            base = rows["06/h200"]["tflops"]
            ax.axhline(base, color=GREEN, lw=1, ls="--", label=f"06/h200 (step 06's best): {base:.0f}")
            causal = run["shape"]["causal"]
            for name, style in (("sdpa-flash", ":"), ("sdpa-cudnn", "-.")):
                pv = [p["tflops"] for p in peers if p.get("name") == name and p.get("causal") == causal
                      and p.get("seqlen") == shape["seqlen"] and p.get("head_dim") == shape["head_dim"]
                      and p.get("heads") == shape["heads"] and "tflops" in p]
                if pv:
                    ax.axhline(pv[0], color="black", lw=0.8, ls=style, label=f"PyTorch {name}: {pv[0]:.0f}")
            ax.set_xticks(range(len(ids)))
            ax.set_xticklabels([i.replace("11/qk", "11/") for i in ids], rotation=70, fontsize=6.5)
            ax.set_title(f"B={shape['batch']} H={shape['heads']} N={shape['seqlen']} D={shape['head_dim']}, "
                         f"{'causal' if causal else 'non-causal'}", fontsize=8.5)
            ax.tick_params(axis="y", labelsize=7)
            ax.legend(fontsize=6.5, loc="upper left")
        axes[0].set_ylabel("TFLOP/s", fontsize=8)
        fig.suptitle(f"Chapter {chapter:02d}: its versions (red) against the one it improves on (blue), "
                     "the whole series in grey; one run on the H200 (docs/" + SERIES.split("docs/")[1] + ")",
                     fontsize=8.5)
        fig.tight_layout(rect=(0, 0, 1, 0.93))
        name = f"part3-{chapter:02d}.png"
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        made.append(name)
    return made


# ---------------------------------------------------------------- Part V: the backward pass

def naive_ledger(b, h, n, d, out_cols=64):
    """(kernel, GB written, GB read) of the N×N matrices, and the backward's minimum in GB."""
    nn = b * h * n * n * 4 / 1e9  # one fp32 [B, H, N, N] matrix
    col_blocks = math.ceil(d / out_cols)  # the gradient kernels read their matrix once per 64 columns
    rows = [
        ("1  D = rowsum(dO∘O)", 0.0, 0.0),
        ("2  P = exp(S·scale − lse)", nn, 0.0),
        ("3  dP = dO Vᵀ", nn, 0.0),
        ("4  dS = P∘(dP − D)", nn, 2 * nn),
        ("5  dV = Pᵀ dO", 0.0, col_blocks * nn),
        ("6  dQ = scale·dS K", 0.0, col_blocks * nn),
        ("7  dK = scale·dSᵀ Q", 0.0, col_blocks * nn),
    ]
    elements = b * h * n * d
    minimum = (8 * elements * 2 + 4 * b * h * n) / 1e9  # ladder::backward_min_bytes
    return rows, minimum


def fig_naive_ledger(out):
    """Step 23's byte ledger (naive_ledger): a model of the traffic, not a measurement."""
    b, h, n, d = 4, 8, 8192, 64
    rows, minimum = naive_ledger(b, h, n, d)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    labels = [r[0] for r in rows][::-1] + ["the backward's minimum (all kernels)"]
    written = [r[1] for r in rows][::-1] + [0.0]
    read = [r[2] for r in rows][::-1] + [0.0]
    y = range(len(labels))
    ax.barh(y, written, color="#c0392b", label="N×N bytes written")
    ax.barh(y, read, left=written, color="#e6a23c", label="N×N bytes read")
    ax.barh([len(labels) - 1], [minimum], color="#2c7fb8", label="Q, K, V, O, dO, LSE in; dQ, dK, dV out")
    for i, (w, r) in enumerate(zip(written, read)):
        if w + r > 0:
            ax.text(w + r + 0.3, i, f"{w + r:.1f} GB", va="center", fontsize=8)
    ax.text(minimum + 0.3, len(labels) - 1, f"{minimum:.2f} GB", va="center", fontsize=8)
    total = sum(w + r for _, w, r in rows) + minimum
    ax.set_yticks(list(y))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("GB through global memory (a model: every re-read of Q, K, V, dO, O assumed cached)")
    ax.set_title(f"Step 23's ledger, B={b} H={h} N={n} D={d}: {total:.1f} GB in all, "
                 f"{total / minimum:.0f}× the minimum", fontsize=10)
    ax.set_xlim(0, max(w + r for _, w, r in rows) * 1.25)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "part5-naive-ledger.png", dpi=130)
    plt.close(fig)
    return total, minimum


def fig_backward_loop(out):
    """FA2's backward (step 24): a CTA owns one K/V block (a column of the score matrix), keeps
    dK and dV in registers, walks the Q blocks down the column and adds each block's dQ share
    to an fp32 accumulator with atomics; causal skips the blocks above the diagonal."""
    nb = 6
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, causal in zip(axes, (False, True)):
        ax.set_xlim(-1.5, nb + 2.8)
        ax.set_ylim(-1.3, nb + 0.9)
        ax.set_aspect("equal")
        ax.axis("off")
        col = 2
        for qi in range(nb):
            for kj in range(nb):
                masked = causal and kj > qi
                mine = kj == col and not masked
                face = "#f4f4f4" if masked else ("#dbe9f6" if mine else "white")
                ax.add_patch(Rectangle((kj, nb - 1 - qi), 1, 1, facecolor=face, edgecolor="#999999", lw=0.6))
                if mine:
                    ax.text(kj + 0.5, nb - 1 - qi + 0.5, f"S,P,dP,dS\nQ{qi}", ha="center", va="center", fontsize=6)
                    ax.add_patch(FancyArrowPatch((kj + 1.0, nb - 1 - qi + 0.5), (nb + 0.6, nb - 1 - qi + 0.5),
                                                 arrowstyle="->", color=RED, lw=0.8, mutation_scale=7))
            ax.add_patch(Rectangle((nb + 0.6, nb - 1 - qi + 0.1), 1.6, 0.8, facecolor="#f9dede", edgecolor=RED, lw=0.6))
            ax.text(nb + 1.4, nb - 1 - qi + 0.5, f"dQ{qi} += dS·K", ha="center", va="center", fontsize=6, color=RED)
        ax.text(col + 0.5, -0.45, "dK, dV of this block:\nregisters, stored once", ha="center", va="top", fontsize=7,
                color=BLUE)
        ax.text(nb / 2, nb + 0.55, ("causal: the column starts at the diagonal" if causal else
                                    "non-causal: every Q block"), ha="center", fontsize=8)
        ax.text(-0.2, nb / 2, "Q blocks (rows i)", rotation=90, ha="right", va="center", fontsize=7)
        ax.text(nb / 2, -1.2, "K/V blocks (keys j): one CTA each", ha="center", fontsize=7)
    fig.suptitle("The backward's loop (FlashAttention-2, step 24): K/V outer, Q inner, dQ by fp32 atomics "
                 "(red) — every CTA of a row of blocks adds to the same dQ rows", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "part5-loop.png", dpi=100)
    plt.close(fig)


# ---- Part V: step 24's accumulator map and deterministic staircase, step 25's schedule --------

STEP24 = ROOT / "steps" / "24_fa2_backward" / "fa2_backward.cu"


def step24_constants():
    """kBlockN, kWarps, kSubM and kBlockM (per D) as steps/24_fa2_backward/fa2_backward.cu states
    them; the figures below are drawn from these, so that a change of the kernel shows."""
    src = STEP24.read_text()

    def one(pattern):
        m = re.search(pattern, src)
        if not m:
            raise SystemExit(f"scripts/figures.py: {pattern!r} not found in {STEP24}")
        return m.groups()

    block_n = int(one(r"constexpr int kBlockN = (\d+);")[0])
    warps = int(one(r"static constexpr int kWarps = (\d+);")[0])
    sub_m = int(one(r"static constexpr int kSubM = (\d+);")[0])
    d_a, m_a, m_b = one(r"static constexpr int kBlockM = kHeadDim_ == (\d+) \? (\d+) : (\d+);")
    block_m = {int(d_a): int(m_a), 128 if int(d_a) == 64 else 64: int(m_b)}
    return {"kBlockN": block_n, "kWarps": warps, "kSubM": sub_m, "kBlockM": block_m,
            "kKeysPerWarp": block_n // warps}


def st_element(lane, ni, c, key_w0=0, qs=0):
    """(key, query) of register c of n8 tile ni of a lane's Sᵀ accumulator: mma.sync m16n8's C
    layout with keys as M (fa2_backward.cu: key key_w0 + g + 8h, query qs + 8ni + 2t + e, c = 2h + e)."""
    g, t = lane >> 2, lane & 3
    h, e = c >> 1, c & 1
    return key_w0 + g + 8 * h, qs + 8 * ni + 2 * t + e


def fig_st_layout(out):
    """Chapter 24: one warp's [16 keys × kSubM queries] tile of Sᵀ = K Qᵀ in the m16n8 accumulator
    layout (lane and register → key row, query column), which registers share one query's lse and
    D, and where the warp's tile sits in the CTA's block; from step 24's constants."""
    k = step24_constants()
    keys, sub_m = k["kKeysPerWarp"], k["kSubM"]
    tiles = sub_m // 8
    colors = ["#dbe9f6", "#fde0c5", "#d9f0d3", "#eadcf2"]  # register c = 0..3
    fig = plt.figure(figsize=(15, 6.4))
    ax = fig.add_axes([0.02, 0.06, 0.66, 0.84])
    cell = {}
    for lane in range(32):
        for ni in range(tiles):
            for c in range(4):
                cell[st_element(lane, ni, c)] = (lane, ni, c)
    assert len(cell) == keys * sub_m, "every element of the tile has exactly one owner"
    hl_query = 3  # the query whose lse and D the highlighted registers share
    for (key, query), (lane, ni, c) in cell.items():
        x, y = query, keys - 1 - key
        hl = query == hl_query
        ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colors[c], edgecolor=RED if hl else "#bbbbbb",
                               lw=1.4 if hl else 0.4, zorder=3 if hl else 1))
        ax.text(x + 0.5, y + 0.64, f"{lane}", ha="center", va="center", fontsize=6.5,
                fontweight="bold" if hl else "normal")
        ax.text(x + 0.5, y + 0.22, f"s[{ni}][{c}]", ha="center", va="center", fontsize=4.3, color="#333333")
    for ni in range(1, tiles):
        ax.plot([8 * ni, 8 * ni], [0, keys], color="black", lw=1.2)
    ax.plot([0, sub_m], [8, 8], color="black", lw=0.8, ls="--")
    ax.add_patch(Rectangle((0, 0), sub_m, keys, fill=False, edgecolor="black", lw=1.2))
    for q in range(sub_m):
        ax.text(q + 0.5, keys + 0.3, str(q), ha="center", fontsize=6)
    for key in range(keys):
        ax.text(-0.3, keys - 1 - key + 0.5, f"key {key}", ha="right", va="center", fontsize=6.5)
    for ni in range(tiles):
        ax.text(8 * ni + 4, keys + 1.0, f"n8 tile ni = {ni}", ha="center", fontsize=8)
    ax.text(sub_m / 2, keys + 1.8, "queries qs + 0 … qs + 31 of the sub-block (columns)", ha="center", fontsize=8)
    ax.text(-3.2, keys / 2, "the warp's 16 keys, key_w0 + 0 … + 15 (rows = mma's M)", rotation=90,
            ha="center", va="center", fontsize=8)
    ax.text(sub_m + 0.3, 12, "h = 0:\nkeys g", va="center", fontsize=7)
    ax.text(sub_m + 0.3, 4, "h = 1:\nkeys g + 8", va="center", fontsize=7)
    lanes = sorted({cell[(key, hl_query)][0] for key in range(keys)})
    regs = sorted({cell[(key, hl_query)][2] for key in range(keys)})
    ax.annotate(f"query {hl_query} (t = {hl_query // 2 % 4}, e = {hl_query % 2}): lanes {', '.join(map(str, lanes))}\n"
                f"registers c = {', '.join(map(str, regs))} of tile 0 (keys g and g + 8) — all 16 subtract the same\n"
                f"lse·log₂e and D, which each lane loads once as the .y of one float2 (queries 2t, 2t + 1)",
                xy=(hl_query + 0.5, -0.05), xytext=(4.5, -3.3), fontsize=7.5, color=RED,
                arrowprops=dict(arrowstyle="->", color=RED, lw=0.8))
    ax.set_xlim(-4, sub_m + 10)
    ax.set_ylim(-4.2, keys + 2.3)
    ax.set_aspect("equal")
    ax.axis("off")
    for c in range(4):
        ax.add_patch(Rectangle((sub_m + 3.2, 9.0 - 1.6 * c), 0.9, 0.9, facecolor=colors[c], edgecolor="#999999"))
        ax.text(sub_m + 4.3, 9.45 - 1.6 * c, f"c = {c} (h = {c >> 1}, e = {c & 1})", va="center", fontsize=7)
    # The CTA's block: kWarps warps × 16 keys, the step's kBlockM queries in sub-blocks of kSubM.
    bx = fig.add_axes([0.80, 0.14, 0.19, 0.70])
    bm = k["kBlockM"][64]
    for w in range(k["kWarps"]):
        for sb in range(bm // sub_m):
            mine = w == 2 and sb == 1
            bx.add_patch(Rectangle((sb * sub_m, (k["kWarps"] - 1 - w) * keys), sub_m, keys,
                                   facecolor="#f9dede" if mine else "white", edgecolor="#999999", lw=0.6))
        bx.text(-4, (k["kWarps"] - 1 - w) * keys + keys / 2, f"warp {w}", ha="right", va="center", fontsize=7)
    bx.text(1.5 * sub_m, 5 * keys + keys / 2, "the tile\nleft", ha="center", va="center",
            fontsize=6.5, color=RED)
    bx.set_xlim(-30, bm + 2)
    bx.set_ylim(-20, k["kBlockN"] + 22)
    bx.set_aspect("equal")
    bx.axis("off")
    bx.text(bm / 2, k["kBlockN"] + 14, f"The CTA's Sᵀ block at D = 64:\n{k['kBlockN']} keys × {bm} queries "
            f"(D = 128: × {k['kBlockM'][128]})", ha="center", fontsize=8)
    bx.text(bm / 2, -12, f"{k['kWarps']} warps × {keys} keys; each step's queries\n{sub_m} at a time "
            f"(kSubM), {bm // sub_m} sub-blocks at D = 64", ha="center", fontsize=7, va="center")
    fig.suptitle("Sᵀ = K Qᵀ in mma.sync's m16n8 accumulator (step 24): each cell is the lane that holds it and "
                 "its register s[ni][c]; lane = 4g + t holds keys g, g + 8 and queries 8ni + 2t, + 1",
                 fontsize=10)
    fig.savefig(out / "part5-st-layout.png", dpi=130)
    plt.close(fig)


def staircase(key_blocks, query_blocks, causal, block_n, block_m, compute=3.0, adds=1.0):
    """step 24/deterministic's order as the kernel runs it: every key block kb walks its query blocks
    from the last down to m_first (causal: kb·kBlockN / kBlockM), and adds its dQ share of block m
    only once kb − 1 has released m (dq_turn = kb); the release follows the adds (the next loop-top
    barrier). A model with illustrative durations; returns {kb: [(m, start, ready, add_start, add_end)]}."""
    released = {}
    out = {}
    for kb in range(key_blocks):
        m_first = kb * block_n // block_m if causal else 0
        t, rows = 0.0, []
        for m in range(query_blocks - 1, m_first - 1, -1):
            ready = t + compute
            start = max(ready, released.get((kb - 1, m), 0.0)) if kb > 0 else ready
            end = start + adds
            released[(kb, m)] = end
            rows.append((m, t, ready, start, end))
            t = end
        out[kb] = rows
    return out


def fig_staircase(out):
    """Chapter 24: the semaphore staircase of 24/deterministic at N = 1024, D = 64 (the kernel's
    kBlockN and kBlockM), non-causal and causal; durations illustrative."""
    k = step24_constants()
    n, d = 1024, 64
    bn, bm = k["kBlockN"], k["kBlockM"][d]
    kbs, mbs = math.ceil(n / bn), math.ceil(n / bm)
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.2))
    for ax, causal in zip(axes, (False, True)):
        sched = staircase(kbs, mbs, causal, bn, bm)
        for kb, rows in sched.items():
            y = kbs - 1 - kb
            for m, t0, ready, a0, a1 in rows:
                ax.add_patch(Rectangle((t0, y + 0.15), ready - t0, 0.7, facecolor="#dddddd", edgecolor="#777777", lw=0.5))
                if a0 > ready:
                    ax.add_patch(Rectangle((ready, y + 0.15), a0 - ready, 0.7, facecolor="white", edgecolor=GREY,
                                           hatch="///", lw=0.5))
                ax.add_patch(Rectangle((a0, y + 0.15), a1 - a0, 0.7, facecolor="#f4a6a6", edgecolor=RED, lw=0.6))
                ax.text((a0 + a1) / 2, y + 0.5, str(m), ha="center", va="center", fontsize=6.5)
            ax.text(-0.4, y + 0.5, f"key block {kb}", ha="right", va="center", fontsize=7.5)
        hl = mbs - 2 if not causal else mbs - 1
        prev = None
        for kb, rows in sched.items():
            for m, _, _, a0, a1 in rows:
                if m == hl:
                    if prev is not None:
                        ax.add_patch(FancyArrowPatch(prev, (a0, kbs - 1 - kb + 0.85), arrowstyle="->", color=RED,
                                                     lw=0.8, mutation_scale=7))
                    prev = (a1, kbs - 1 - kb + 0.15)
        end = max(rows[-1][4] for rows in sched.values())
        ax.set_xlim(-4.5, end + 0.5)
        ax.set_ylim(-1.2, kbs + 0.6)
        ax.axis("off")
        ax.text(end / 2, kbs + 0.25, (f"non-causal: every key block walks query blocks {mbs - 1} … 0" if not causal else
                                      f"causal: key block kb walks {mbs - 1} … kb·{bn}/{bm} (its diagonal)"), ha="center", fontsize=9)
        ax.text(end / 2, -0.6, f"time → (arrows: query block {hl}'s turn handed from key block to key block)",
                ha="center", fontsize=7.5, color=GREY)
    fig.suptitle(f"24/deterministic's order at N = {n}, D = {d} (kBlockN = {bn} keys per CTA, kBlockM = {bm} queries "
                 f"per step)\ngrey: the step's products; hatched: the wait for the previous key block's release; "
                 f"red: its dQ adds (the number is the query block m)", fontsize=10)
    fig.text(0.5, 0.01, "Order and visiting sets from step 24's loop (m from the last block down, dq_turn = kb); "
             "durations a model (products 3 units, adds 1), not measured. The lag is one add phase per key block, "
             "paid once at the start.", ha="center", fontsize=8, color=GREY)
    fig.tight_layout(rect=(0, 0.04, 1, 0.94))
    fig.savefig(out / "part5-staircase.png", dpi=100)
    plt.close(fig)


def fig_backward_schedule(out):
    """Chapter 25: two query blocks of step 25's main variant (head_by_head: a producer warp, two
    consumer warpgroups of 64 keys) in the order hopper_backward.cu issues them: Sᵀ and dPᵀ (SS),
    Pᵀ under dPᵀ, dSᵀ, dSᵀ staged, dV (RS), the kDsStaged barrier, the consumer's dQ product (SS),
    dK (RS) queued behind it while the warps stage the dQ piece and lane 0 issues its bulk
    reduce-add; the stage released when dK retires. Schematic: durations illustrative."""
    fig, ax = plt.subplots(figsize=(15, 6.4))
    rows = {"producer warp\n(thread 0: TMA)": 6.2, "consumer 0\ntensor cores": 5.0, "consumer 0\nwarps": 4.2,
            "consumer 1\ntensor cores": 3.0, "consumer 1\nwarps": 2.2, "copy engine → L2\n(bulk reduce-add)": 0.75}
    for name, y in rows.items():
        ax.text(-0.4, y + 0.3, name, ha="right", va="center", fontsize=8)
    tc, warp, red, load = "#9ecae1", "#fdd0a2", "#f4a6a6", "#dddddd"

    def box(x0, x1, y, label, face, fs=6.5, hatch=None, h=0.6):
        ax.add_patch(Rectangle((x0, y), x1 - x0, h, facecolor=face, edgecolor="black", lw=0.6, hatch=hatch))
        if label:
            ax.text((x0 + x1) / 2, y + h / 2, label, ha="center", va="center", fontsize=fs)

    prod = rows["producer warp\n(thread 0: TMA)"]
    box(0.0, 1.1, prod, "K, V (once)\nkv_full", load, fs=6)
    box(1.1, 2.8, prod, "block m: Q, dO,\nlse, D → stage 0", load, fs=6)
    box(2.8, 4.2, prod, "block m+1\n→ stage 1", load, fs=6)
    block_len = 10.6
    for it in range(2):
        base = 2.8 + it * block_len  # block m's stage has landed (full[0])
        stage = it % 2
        starts = [base + 0.3 * c for c in range(2)]  # the consumers drift apart and meet at kDsStaged
        bar = max(t + 4.9 for t in starts)
        release = []
        for c, t in enumerate(starts):
            ytc, yw = rows[f"consumer {c}\ntensor cores"], rows[f"consumer {c}\nwarps"]
            box(t, t + 1.6, ytc, "Sᵀ = K Qᵀ\nSS", tc)
            box(t + 1.6, t + 3.2, ytc, "dPᵀ = V dOᵀ\nSS", tc)
            box(t + 1.6, t + 3.0, yw, "Pᵀ = exp2(…)\nunder dPᵀ", warp, fs=6)
            box(t + 3.2, t + 4.2, yw, "dSᵀ = Pᵀ∘\n(dPᵀ − D)", warp, fs=5.5)
            box(t + 4.2, t + 4.9, yw, "dSᵀ\n→ smem", warp, fs=5.5)
            box(t + 4.9, t + 6.5, ytc, "dV += Pᵀ dO\nRS", "#a1d99b")
            if bar > t + 4.9:
                box(t + 4.9, bar, yw, "", "white", hatch="..")
            dq0 = max(t + 6.5, bar)
            box(dq0, dq0 + 1.8, ytc, f"dQ piece {c}\n= dS K, SS", red)
            box(dq0 + 1.8, dq0 + 3.4, ytc, "dK += dSᵀ Q\nRS", "#a1d99b")
            box(dq0 + 1.8, dq0 + 2.7, yw, "dQ piece\n→ smem", warp, fs=5.5)
            yr = rows["copy engine → L2\n(bulk reduce-add)"] + (0.35 if c == 0 else -0.35)
            box(dq0 + 2.7, dq0 + 4.3, yr, f"+= dQ piece {c}", red, fs=6, h=0.5)
            box(dq0 + 3.4, dq0 + 3.6, yw, "", "#555555")
            release.append(dq0 + 3.6)
        ax.annotate(f"empty[{stage}]: every consumer\nthread arrives (dK retired)", xy=(release[0] - 0.1, rows["consumer 0\nwarps"]),
                    xytext=(release[0] + 1.6, rows["consumer 0\nwarps"] - 0.55), fontsize=6, ha="center",
                    arrowprops=dict(arrowstyle="->", lw=0.6))
        ax.plot([bar, bar], [2.0, 5.75], color="black", ls="--", lw=0.9)
        ax.text(bar, 5.8, "kDsStaged", ha="center", fontsize=6.5)
        ax.text(base + 5.0, 7.05, f"query block {'m' if it == 0 else 'm+1'} (stage {stage})", ha="center", fontsize=8.5)
        rel = max(release)  # the producer refills the stage once all 256 consumer threads released it
        box(rel, rel + 1.4, prod, f"block m+{it + 2}\n→ stage {stage}", load, fs=6)
    ax.set_xlim(-3.6, 2.8 + 2 * block_len + 3.2)
    ax.set_ylim(-0.1, 7.4)
    ax.axis("off")
    ax.text(12.5, 0.05, "Schematic: the order is the kernel's (hopper_backward.cu, block()); durations are "
            "illustrative, not measured. Dashed: the named barrier after which a consumer may read the other's dSᵀ "
            "rows.\nDotted: waiting at it. Dark: wgmma_wait<0>, then the release. D = 64: 128 queries a block, dQ piece "
            "c = queries 64c … 64c+63 × all 64 columns; D = 128: 64 queries × columns 64c … 64c+63.",
            ha="center", va="bottom", fontsize=7, color=GREY)
    fig.suptitle("Step 25 (head_by_head), one CTA of 128 keys: the producer feeds a two-stage ring; each consumer "
                 "issues dV, dQ, dK in that order and sends its dQ piece out by one bulk reduce-add per warp", fontsize=10)
    fig.tight_layout(rect=(0, 0.0, 1, 0.96))
    fig.savefig(out / "part5-schedule.png", dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- Part VI: decode
DECODE_SHAPES = [(8, 32, 8, 32768), (64, 32, 8, 4096), (1, 64, 8, 131072), (128, 32, 32, 2048)]
DECODE_CTAS_PER_SM, DECODE_KEYS, DECODE_MIN_TILES = 2, 16, 12  # steps 28/29 at D = 128


# The split rule of common/split_kv.hpp, with its constants read from the header: one copy, in
# figures_part6.py (which draws the merge of the same splits).
from figures_part6 import splits_for, wave_fill  # noqa: E402


def fig_split_kv(out):
    slots = SMS * DECODE_CTAS_PER_SM
    fig, ax = plt.subplots(figsize=(10, 3.8))
    labels, one, split, counts = [], [], [], []
    for b, hq, hkv, nk in DECODE_SHAPES:
        ctas = b * hkv  # Nq = 1: group <= 16 rows, one row block
        s = splits_for(ctas, nk // DECODE_KEYS, slots, DECODE_MIN_TILES)
        labels.append(f"B={b} Hq={hq} Hkv={hkv}\nNk={nk}")
        one.append(min(ctas, slots) / slots if ctas < slots else wave_fill(ctas, slots))
        split.append(wave_fill(ctas * s, slots) if ctas * s >= slots else ctas * s / slots)
        counts.append((ctas, s))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], one, 0.38, color=GREY, label="one_cta_per_head: B·Hkv CTAs")
    ax.bar([i + 0.2 for i in x], split, 0.38, color=BLUE, label="split_kv: B·Hkv·splits CTAs")
    for i, (ctas, s) in enumerate(counts):
        ax.text(i - 0.2, one[i] + 0.02, f"{ctas}", ha="center", fontsize=8)
        ax.text(i + 0.2, split[i] + 0.02, f"{ctas * s}\n({s} split{'s' if s > 1 else ''})", ha="center", fontsize=8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylim(0, 1.25)
    ax.set_ylabel("CTA slots busy (mean over waves)", fontsize=8)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    ax.set_title(f"Decode on {SMS} SMs × {DECODE_CTAS_PER_SM} CTAs: how much of the GPU each grid keeps busy "
                 "(the split rule of common/split_kv.hpp; a model, not a measurement)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "part6-split-kv.png", dpi=110)
    plt.close(fig)


def fig_paged(out):
    page, tile = 64, 16
    table = [5, 2, 7, 0]  # one sequence's block table: its pages, in order, anywhere in the pool
    fig, ax = plt.subplots(figsize=(11, 3.4))
    ax.text(-0.3, 2.45, "block table row b", ha="right", va="center", fontsize=8)
    for i, pg in enumerate(table):
        ax.add_patch(Rectangle((i * 0.9, 2.1), 0.8, 0.7, facecolor="#eeeeee", edgecolor="black"))
        ax.text(i * 0.9 + 0.4, 2.45, f"{pg}", ha="center", va="center", fontsize=9)
    ax.text(-0.3, 0.5, "pool [pages, Hkv, P, D]\n(one head shown)", ha="right", va="center", fontsize=8)
    for pg in range(8):
        x = pg * 1.3
        owner = table.index(pg) if pg in table else None
        ax.add_patch(Rectangle((x, 0.1), 1.2, 0.8, facecolor="white", edgecolor="black"))
        ax.text(x + 0.6, 0.0, f"page {pg}", ha="center", va="top", fontsize=7)
        if owner is not None:
            for t in range(page // tile):
                ax.add_patch(Rectangle((x + t * 0.3, 0.1), 0.3, 0.8, facecolor=BLUE if t % 2 == 0 else ORANGE,
                                       alpha=0.35 + 0.1 * owner, edgecolor="black", lw=0.4))
            ax.text(x + 0.6, 0.5, f"keys {owner * page}-\n{owner * page + page - 1}", ha="center", va="center", fontsize=7)
            ax.add_patch(FancyArrowPatch((owner * 0.9 + 0.4, 2.1), (x + 0.6, 0.9), arrowstyle="->", mutation_scale=8,
                                         color=GREY, lw=0.8))
    ax.set_xlim(-3.2, 10.6)
    ax.set_ylim(-0.4, 3.2)
    ax.axis("off")
    ax.set_title(f"Key j of sequence b is row j % P of page block_table[b·pages_per_seq + j / P] (P = {page}): each "
                 f"{tile}-key warp tile (coloured) lies in one page,\nso it is still {tile} contiguous rows; step 29 "
                 "changes only where a tile starts (schematic)", fontsize=8.5)
    fig.tight_layout()
    fig.savefig(out / "part6-paged.png", dpi=110)
    plt.close(fig)


DECODE_MEASURED = "docs/results/h200/2026-12-01-p6r0-serving-decode-b{}.json"


def fig_decode_measured(out):
    """Measured: the ladder's process, one file per decode shape (contiguous and paged problems)."""
    import json
    bars = [("28/split_kv", None, BLUE, "28/split_kv (contiguous)"),
            ("29/split_kv", 64, ORANGE, "29/split_kv (page 64)"),
            ("99/cudnn", None, GREY, "cuDNN (99/cudnn, contiguous)"),
            ("copy", None, "#dddddd", "device copy (read + write)")]
    shapes, vals, one_cta = [], {label: [] for *_, label in bars}, []
    for b, hq, hkv, nk in DECODE_SHAPES:
        data = json.loads((ROOT / DECODE_MEASURED.format(b)).read_text())
        rows = {}
        for run in data["runs"]:
            for row in run["rows"]:
                if "gbps" in row:
                    rows[(row["id"], run["shape"].get("page_size"))] = row["gbps"]
        shapes.append(f"B={b} Hq={hq} Hkv={hkv}\nNk={nk}")
        for rid, page, _, label in bars:
            vals[label].append(rows[(rid, page)])
        one_cta.append(rows[("28/one_cta_per_head", None)] if b == 1 else None)
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.17
    for k, (rid, page, color, label) in enumerate(bars):
        xs = [i + (k - 1.5) * width for i in range(len(shapes))]
        ax.bar(xs, [v / 1000 for v in vals[label]], width, color=color, edgecolor="black", lw=0.4, label=label)
        for x, v in zip(xs, vals[label]):
            ax.text(x, v / 1000 + 0.05, f"{v / 1000:.2f}", ha="center", fontsize=6.5, rotation=90)
    i = next(j for j, v in enumerate(one_cta) if v is not None)
    x = i - 2.5 * width
    ax.bar([x], [one_cta[i] / 1000], width, color=RED, edgecolor="black", lw=0.4,
           label="28/one_cta_per_head (8 CTAs, B = 1 only)")
    ax.text(x, one_cta[i] / 1000 + 0.05, f"{one_cta[i] / 1000:.2f}", ha="center", fontsize=6.5, rotation=90)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes, fontsize=8)
    ax.set_ylim(0, 5.6)
    ax.set_ylabel("TB/s (Q, K, V, O counted once; the copy: read + write)", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", ncol=3)
    ax.set_title("Decode on the H200, bf16, Nq = 1, D = 128: one process per shape (ladder --steps 28,29), "
                 "L2 flushed; measured\n(docs/results/h200/2026-12-01-p6r0-serving-decode-b*.json)", fontsize=8.5)
    fig.tight_layout()
    fig.savefig(out / "part6-decode-measured.png", dpi=110)
    plt.close(fig)


def fig_overlap_pinned(out):
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
    fig.savefig(out / "part7-overlap-pinned.png", dpi=110)
    plt.close(fig)


def fig_desc_iterators(out):
    """Measured from SASS (results/h200/2026-12-01-p7r2-sass-loops.json): one unmasked K/V block's
    instructions by kind, steps 21/33 and 22/34."""
    data = json.loads((ROOT / "docs" / "results" / "h200" / "2026-12-01-p7r2-sass-loops.json").read_text())["loops"]
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
    fig.savefig(out / "part7-desc-iterators.png", dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fig_swizzle(out)
    fig_ring(out)
    fig_pingpong(out)
    spans = fig_causal_walk(out)
    fig_tile_waves(out)
    part3 = fig_part3(out)
    fig_naive_ledger(out)
    fig_backward_loop(out)
    fig_st_layout(out)
    fig_staircase(out)
    fig_backward_schedule(out)
    fig_split_kv(out)
    fig_paged(out)
    fig_decode_measured(out)
    fig_overlap_pinned(out)
    fig_desc_iterators(out)
    for name, s in spans.items():
        print(f"causal B=4 H=16 N=4096 D=128, {name}: busiest CTA {s:.3f}x the mean")
    print(f"wrote part4-swizzle.png, part4-ring.png, part4-pingpong.png, part4-causal-walk.png, part4-tile-waves.png, "
          f"{', '.join(part3)}, part5-naive-ledger.png, part5-loop.png, part5-st-layout.png, part5-staircase.png, "
          f"part5-schedule.png, part6-split-kv.png, part6-paged.png, part6-decode-measured.png, part7-overlap-pinned.png, part7-desc-iterators.png to {out}")


if __name__ == "__main__":
    main()

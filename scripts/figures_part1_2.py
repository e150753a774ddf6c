#!/usr/bin/env python3
"""Draws the figures of Parts I and II (chapters 00 and 03-06) into docs/img/.

  scripts/figures_part1_2.py              # all figures
  scripts/figures_part1_2.py --out DIR    # somewhere else

  part1-00.png  step 00's ledger at B=4 H=8 N=4096 D=64: the bytes each pass over the fp32 N×N
                score matrix moves, beside Q, K, V and O; from the step's ledger formula
                (naive_attention.cu, ledger(); kOutCols read from the file): a model, not a
                measurement.
  part2-03.png  step 03's loop order (K/V blocks outer, Q blocks inner) for one head, and where its
                bytes go at B=4 H=8 N=4096 D=64, Br=64: the running (O, l, m) read and written
                back on every visit; from the step's traffic() (fa_v1.cu): a model.
  part2-04.png  step 04's loop order (Q blocks outer, the state on chip, one division at the end)
                beside step 03's, and both ledgers' bytes against N (B=4 H=8 D=64, non-causal):
                a model from the two files' ledger formulas.
  part2-05.png  the C fragment of mma.sync.m16n8k16 as step 05 uses it: which lane holds which
                element of a 16×8 tile of S, the row max and sum of row g by two xor shuffles
                inside the quad 4g..4g+3, and how many S elements a lane holds per row at each Bc
                of the step (kSTiles = Bc/8): schematic, from the PTX fragment layout and the
                step's constants.
  part2-06.png  step 06's reverse iteration and heaviest-first launch order for one causal head at
                N=1024 with the D=128 tile of `06/h200` (Br=128, Bc=64): per query block, the key
                blocks it skips, the masked ones (walked first) and the unmasked ones, numbered in
                the order the loop meets them; from the kernel's n_full/n_masked formulas: a
                schematic.

Every constant is read from the kernel files (a changed constant changes the figure).
"""
import re

from figlib import ceil_div, out_dir, parser, pyplot, save, source, source_constant, source_match

plt = pyplot()
import matplotlib.patches as patches  # noqa: E402


HALF, FLOAT = 2, 4


def min_bytes(bh, n, d):
    return 4.0 * bh * n * d * HALF  # Q, K, V read once, O written once


# ---- step 00 ----------------------------------------------------------------------------------
def naive_passes(d):
    out_cols = source_constant("steps/00_naive_attention/naive_attention.cu", "kOutCols")
    return [("S written\n(scores)", 1), ("softmax:\nread for max", 1), ("softmax:\nread for sum", 1),
            ("softmax:\nread, P written", 2), (f"P V: P read\nonce per {out_cols} cols", ceil_div(d, out_cols))]


def fig_naive(out):
    b, h, n, d = 4, 8, 4096, 64
    nn = float(b * h) * n * n * FLOAT
    passes = naive_passes(d)
    labels = [p for p, _ in passes] + ["Q, K, V, O\n(the minimum)"]
    values = [nn * k / 1e9 for _, k in passes] + [min_bytes(b * h, n, d) / 1e9]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    colors = ["#d62728"] * len(passes) + ["#2ca02c"]
    bars = ax.bar(range(len(values)), values, color=colors)
    ax.set_yscale("log")
    ax.set_xticks(range(len(values)), labels, fontsize=8.5)
    ax.set_ylabel("GB through global memory (log)")
    for bar, v in zip(bars, values):
        ax.text(bar.get_x() + bar.get_width() / 2, v * 1.15, f"{v:.2f} GB", ha="center", fontsize=9)
    total = sum(values)
    ax.set_ylim(0.02, 20)
    ax.set_title(f"Step 00's ledger, B={b} H={h} N={n} D={d}: {sum(k for _, k in passes)} passes over the "
                 f"fp32 N×N matrix,\n{total:.2f} GB in all against {values[-1] * 1e3:.0f} MB for Q, K, V "
                 "and O (a model from ledger(), not a measurement)", fontsize=10)
    fig.tight_layout()
    save(fig, out, "part1-00.png", dpi=110)


# ---- steps 03 and 04: the two loop orders ------------------------------------------------------
def fa1_traffic(bh, n, d, block_m, causal=False):
    """step 03's traffic(): (components in bytes, visits), the same sums as fa_v1.cu."""
    block_n = source_constant("steps/03_fa_v1/fa_v1.cu", "kBlockN")
    row = d * HALF
    state = d * FLOAT + 2 * FLOAT
    num_kv, num_q = ceil_div(n, block_n), ceil_div(n, block_m)
    visited_rows = visits = 0
    for j in range(num_kv):
        first = j * block_n // block_m if causal else 0
        visits += num_q - first
        visited_rows += n - first * block_m
    parts = {
        "state initialized": n * state,
        "K, V once": 2 * n * row,
        "Q re-read per visit": visited_rows * row,
        "state read per visit": visited_rows * state,
        "state written back": (visited_rows - n) * state,
        "O written once": n * row,
    }
    return {k: v * bh for k, v in parts.items()}, visits * bh


def fa2_traffic(bh, n, d, causal=False):
    """step 04's ledger(): K and V once per Q block that sees them, Q and O once."""
    block_m = source_constant("steps/04_fa_v2_0/fa_v2_0.cu", "kBlockM128")
    block_n = source_constant("steps/04_fa_v2_0/fa_v2_0.cu", "kBlockN")
    row = d * HALF
    kv_rows = 0
    for i in range(ceil_div(n, block_m)):
        kv_end = min((i + 1) * block_m, n) if causal else n
        kv_rows += min(ceil_div(kv_end, block_n) * block_n, n)
    return {"K, V per Q block": bh * kv_rows * 2 * row, "Q and O once": bh * 2 * n * row}


def draw_grid(ax, nq, nkv, title, outer, state_where):
    """A (Q block × K/V block) grid with the loop order drawn as arrows."""
    for i in range(nq):
        for j in range(nkv):
            ax.add_patch(patches.Rectangle((j, nq - 1 - i), 0.92, 0.92, facecolor="#dbe9f6",
                                           edgecolor="#4a6fa5", lw=0.6))
    ax.set_xlim(-1.6, nkv + 0.4)
    ax.set_ylim(-1.9, nq + 0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    ax.text(nkv / 2, nq + 0.35, "K/V blocks j →", ha="center", fontsize=8.5)
    ax.text(-0.35, nq / 2, "Q blocks i →", rotation=-90, va="center", ha="center", fontsize=8.5)
    if outer == "kv":  # one CTA walks every column, and every cell of it, in turn
        for j in range(min(nkv, 3)):
            ax.annotate("", xy=(j + 0.46, 0.1), xytext=(j + 0.46, nq - 0.2),
                        arrowprops=dict(arrowstyle="->", color="#d62728", lw=1.4))
        ax.text(nkv / 2, -0.6, "one CTA per head: column j, then j+1, …\n"
                "each cell reads and writes back (O, l, m) of Q block i", ha="center", fontsize=8,
                color="#d62728")
    else:  # one CTA per row, the row's state stays on chip
        for i in range(min(nq, 3)):
            y = nq - 1 - i + 0.46
            ax.annotate("", xy=(nkv - 0.15, y), xytext=(0.1, y),
                        arrowprops=dict(arrowstyle="->", color="#2ca02c", lw=1.4))
        ax.text(nkv / 2, -0.6, "one CTA per Q block: row i, left to right\n"
                f"(O, l, m) {state_where}; O / l once, at the end", ha="center", fontsize=8,
                color="#2ca02c")


def fig_fa1(out):
    b, h, n, d = 4, 8, 4096, 64
    block_m = source_constant("steps/03_fa_v1/fa_v1.cu", "kBlockM64")
    block_n = source_constant("steps/03_fa_v1/fa_v1.cu", "kBlockN")
    parts, visits = fa1_traffic(b * h, n, d, block_m)
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1, 1.25]})
    draw_grid(ax0, 6, 6, f"Step 03 (FlashAttention-1): K/V outer, Q inner\n(Br={block_m}, Bc={block_n}; "
              "six blocks of each drawn)", "kv", "")
    names = list(parts)
    vals = [parts[k] / 1e9 for k in names]
    colors = ["#7f7f7f", "#2ca02c", "#ff7f0e", "#d62728", "#d62728", "#2ca02c"]
    ax1.barh(range(len(vals)), vals, color=colors)
    ax1.set_yticks(range(len(vals)), names, fontsize=9)
    ax1.invert_yaxis()
    for i, v in enumerate(vals):
        ax1.text(v + 0.03, i, f"{v:.3f} GB", va="center", fontsize=8.5)
    total = sum(vals)
    ax1.set_xlim(0, max(vals) * 1.35)
    ax1.set_xlabel("GB through global memory")
    ax1.set_title(f"Where its {total:.2f} GB go at B={b} H={h} N={n} D={d}: {visits:,.0f} visits,\n"
                  f"{total / (min_bytes(b * h, n, d) / 1e9):.0f}× the minimum "
                  f"{min_bytes(b * h, n, d) / 1e9:.3f} GB (model: traffic() of fa_v1.cu)", fontsize=10)
    fig.tight_layout()
    save(fig, out, "part2-03.png", dpi=100)


def fig_fa2(out):
    b, h, d = 4, 8, 64
    fa1_m = source_constant("steps/03_fa_v1/fa_v1.cu", "kBlockM64")
    fa2_m = source_constant("steps/04_fa_v2_0/fa_v2_0.cu", "kBlockM128")
    fa2_n = source_constant("steps/04_fa_v2_0/fa_v2_0.cu", "kBlockN")
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1, 1.25]})
    draw_grid(ax0, 6, 6, f"Step 04 (FlashAttention-2 order): Q outer, K/V inner\n(Br={fa2_m}, Bc={fa2_n}; "
              "six blocks of each drawn)", "q", "in registers and shared memory")
    ns = [1024, 2048, 4096, 8192, 16384]
    fa1 = [sum(fa1_traffic(b * h, n, d, fa1_m)[0].values()) / 1e9 for n in ns]
    fa2 = [sum(fa2_traffic(b * h, n, d).values()) / 1e9 for n in ns]
    low = [min_bytes(b * h, n, d) / 1e9 for n in ns]
    ax1.plot(ns, fa1, "o-", color="#d62728", label=f"step 03, Br={fa1_m}: state read and written per visit")
    ax1.plot(ns, fa2, "s-", color="#2ca02c", label=f"step 04, Br={fa2_m}: K, V requested once per Q block")
    ax1.plot(ns, low, "^--", color="#7f7f7f", label="Q, K, V, O once (the minimum)")
    for n, a, c in zip(ns, fa1, fa2):
        if n in (4096, 16384):
            ax1.annotate(f"{a:.2f} GB", (n, a), textcoords="offset points", xytext=(-12, 7), fontsize=8)
            ax1.annotate(f"{c:.2f} GB", (n, c), textcoords="offset points", xytext=(-12, -13), fontsize=8)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xticks(ns, [str(n) for n in ns])
    ax1.set_xlabel("N (B=4, H=8, D=64, non-causal)")
    ax1.set_ylabel("GB requested from global memory (log)")
    ax1.legend(fontsize=8, loc="upper left")
    ax1.set_title("The two loop orders' ledgers (a model from the files' formulas;\n"
                  "step 04's K/V repeats are requests that L2 can serve)", fontsize=10)
    ax1.grid(alpha=0.3, which="both")
    fig.tight_layout()
    save(fig, out, "part2-04.png", dpi=100)


# ---- step 05: the mma.sync C fragment ----------------------------------------------------------
def c_fragment_owner(row, col):
    """PTX's m16n8k16 C/D layout: (lane, register) holding element (row, col) of a 16×8 tile."""
    g, half = row % 8, row // 8
    t, j = col // 2, col % 2
    return 4 * g + t, 2 * half + j


def fig_fragment(out):
    rel = "steps/05_fa_v2_1/fa_v2_1.cu"
    shape = "common/device/mma_attention.cuh"  # the tile counts every mma.sync step's Config inherits
    block_m = int(source_match(shape, r"kBlockM = (\d+);", "kBlockM").group(1))
    warps = int(source_match(shape, r"kWarps = (\d+);", "kWarps").group(1))
    source_match(rel, r"make_variant<(\d+)>", "the Bc variants")
    bcs = sorted({int(x) for x in re.findall(r"make_variant<(\d+)>", source(rel))})
    fig = plt.figure(figsize=(13, 5.6))
    ax = fig.add_axes([0.03, 0.08, 0.5, 0.8])
    cmap = plt.get_cmap("tab20")
    for r in range(16):
        for c in range(8):
            lane, reg = c_fragment_owner(r, c)
            g = lane // 4
            ax.add_patch(patches.Rectangle((c, 15 - r), 1, 1, facecolor=cmap(g % 20), alpha=0.55,
                                           edgecolor="white"))
            ax.text(c + 0.5, 15 - r + 0.5, f"L{lane}\nc{reg}", ha="center", va="center", fontsize=6.5)
    ax.add_patch(patches.Rectangle((0, 15 - 2), 8, 1, fill=False, edgecolor="black", lw=2))
    ax.add_patch(patches.Rectangle((0, 15 - 10), 8, 1, fill=False, edgecolor="black", lw=2, ls="--"))
    ax.set_xlim(-0.3, 8.3)
    ax.set_ylim(-0.3, 16.3)
    ax.set_xticks([i + 0.5 for i in range(8)], [str(i) for i in range(8)], fontsize=8)
    ax.set_yticks([15 - r + 0.5 for r in range(16)], [str(r) for r in range(16)], fontsize=8)
    ax.set_xlabel("key column of the n8 tile")
    ax.set_ylabel("query row of the m16 tile")
    ax.set_aspect("equal")
    ax.set_title("mma.sync m16n8k16, the C fragment: lane L = 4g + t holds\n"
                 "c0, c1 = (row g, cols 2t, 2t+1) and c2, c3 = (row g+8, same cols)", fontsize=10)
    # right: the quad's reduction of row g = 2 (lanes 8..11)
    ax2 = fig.add_axes([0.55, 0.36, 0.43, 0.52])
    ax2.axis("off")
    ax2.set_xlim(0, 10)
    ax2.set_ylim(0, 6)
    ax2.set_title("Row 2's max (solid box) inside its quad, lanes 8-11:\n"
                  "every lane first takes the max of its own values, then two shuffles", fontsize=10)
    lanes = [8, 9, 10, 11]
    ys = [5, 3, 1]
    steps = ["own values", "after shfl_xor 1", "after shfl_xor 2"]
    know = [[{l} for l in lanes], [{l, l ^ 1} for l in lanes], [set(lanes) for _ in lanes]]
    for yi, (y, name, k) in enumerate(zip(ys, steps, know)):
        ax2.text(0.0, y, name, va="center", fontsize=9)
        for li, lane in enumerate(lanes):
            x = 3 + 1.7 * li
            ax2.add_patch(patches.FancyBboxPatch((x - 0.6, y - 0.45), 1.2, 0.9, boxstyle="round,pad=0.05",
                                                 facecolor=cmap(2), alpha=0.5))
            ax2.text(x, y, f"L{lane}\n" + ",".join(str(s) for s in sorted(k[li])), ha="center", va="center",
                     fontsize=7)
            if yi < 2:
                partner = lane ^ (1 if yi == 0 else 2)
                px = 3 + 1.7 * lanes.index(partner)
                ax2.annotate("", xy=(x, y - 1.45), xytext=(px, y - 0.5),
                             arrowprops=dict(arrowstyle="->", color="#555", lw=0.8))
    ax2.text(0.0, -0.2, "the numbers in a box: the lanes whose values that lane's max now covers",
             fontsize=8, color="#555")
    # below right: elements per lane per row
    ax3 = fig.add_axes([0.58, 0.06, 0.38, 0.2])
    ax3.axis("off")
    rows = [f"Bc={bc}: {bc // 8} n8 tiles per row → {2 * (bc // 8)} values of each of a lane's rows, "
            f"{8 * (bc // 8)} per quad (= Bc)" for bc in bcs]
    ax3.text(0, 1, f"Step 05: Br={block_m} rows, {warps} warps × {block_m // warps} rows = "
             f"{block_m // warps // 16} m16 tiles per warp;\nthe rows of S stay in one quad across all "
             "n8 tiles of the block:\n" + "\n".join(rows) + "\n(schematic: the layout of the PTX ISA)",
             va="top", fontsize=9)
    save(fig, out, "part2-05.png", dpi=100)


# ---- step 06: reverse iteration and heaviest first ---------------------------------------------
def fig_reverse(out):
    rel = "steps/06_fa_v2_2/fa_v2_2.cu"
    block_m = int(source_match("common/device/mma_attention.cuh", r"kBlockM = (\d+);", "kBlockM").group(1))
    m = source_match(rel, r"using BaseD128 = Config<128, (\d+), (\d+),", "BaseD128's tile")
    block_n, compute_n = int(m.group(1)), int(m.group(2))
    n = 1024
    nq, nkv = ceil_div(n, block_m), ceil_div(n, block_n)
    fig, ax = plt.subplots(figsize=(12, 5.2))
    colors = {"skip": "#eeeeee", "masked": "#ff9f6b", "full": "#8fc1e3"}
    for mb in range(nq):
        q_start = mb * block_m
        kv_end = min(n, q_start + block_m)
        n_blocks = ceil_div(kv_end, block_n)
        n_full = min(n // block_n, q_start // block_n)
        order = list(range(n_blocks - 1, -1, -1))  # the loop walks last to first
        launch = nq - 1 - mb  # heaviest first: blockIdx.y 0 is the last query block
        y = nq - 1 - mb
        for j in range(nkv):
            kind = "skip" if j >= n_blocks else ("masked" if j >= n_full else "full")
            ax.add_patch(patches.Rectangle((j, y), 0.94, 0.9, facecolor=colors[kind], edgecolor="#999", lw=0.5))
            if kind != "skip":
                ax.text(j + 0.47, y + 0.45, str(order.index(j) + 1), ha="center", va="center", fontsize=8)
        ax.text(-0.3, y + 0.45, f"Q block {mb} (rows {q_start}-{q_start + block_m - 1})  launched #{launch + 1}",
                ha="right", va="center", fontsize=8.5)
    ax.set_xlim(-7.5, nkv + 0.2)
    ax.set_ylim(-1.3, nq + 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.text(nkv / 2, nq + 0.15, f"K/V blocks of {block_n} keys →", ha="center", fontsize=9)
    for i, (k, lab) in enumerate([("masked", "masked: crosses the diagonal, walked first"),
                                  ("full", "unmasked: the mask-free loop body"),
                                  ("skip", "past the diagonal: never loaded")]):
        ax.add_patch(patches.Rectangle((-7.3 + 8 * i, -1.15), 0.5, 0.5, facecolor=colors[k], edgecolor="#999"))
        ax.text(-6.7 + 8 * i, -0.9, lab, va="center", fontsize=8)
    ax.set_title(f"Step 06 (`06/h200`, D=128 tile: Br={block_m}, Bc={block_n}, S tiles of {compute_n} keys), "
                 f"one causal head at N={n}:\nthe numbers are the order in which a CTA's loop meets its "
                 "blocks (last to first); CTAs launch heaviest first (schematic)", fontsize=10)
    fig.tight_layout()
    save(fig, out, "part2-06.png", dpi=100)


def main():
    out = out_dir(parser(__doc__).parse_args().out)
    for f in (fig_naive, fig_fa1, fig_fa2, fig_fragment, fig_reverse):
        f(out)
    print(f"figures written to {out}")


if __name__ == "__main__":
    main()

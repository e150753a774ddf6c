#!/usr/bin/env python3
"""Draws the figures of Part VII's serving backward, chapters 37 and 38, into docs/img/:

  part7-gqa-backward.png     chapter 37: one CTA of step 37 (a key block of a K/V head) walking the
                             query blocks of every head of its group, dK and dV summed in registers
                             in group order and stored once; beside it FlashAttention-3/4's way, a
                             CTA per (key block, query head) whose dK and dV go into zeroed fp32
                             accumulators by bulk reduce-adds, then a convert kernel. Schematic: the
                             tile sizes, the group loop and the grid are read from
                             steps/37_gqa_backward/gqa_backward.cu (a change there fails here); the
                             group of 4 and the six query blocks are an example, not a measurement.
  part7-varlen-backward.png  chapter 38: the packed token rows of three sequences against the
                             statistics and dQ rows padded per sequence, the grid's key blocks
                             longest first, and one key block's CTA reading rows past its sequence's
                             end. Schematic: the plan is computed as make_varlen_backward_plan
                             (common/device/backward_varlen.cuh) computes it, with kRowPad and the
                             tiles read from the sources; the three lengths are an example.

    scripts/figures_part7_serving.py            # writes the two PNGs
    scripts/figures_part7_serving.py --out DIR  # somewhere else
    scripts/figures_part7_serving.py --check    # reads the sources and computes, writes nothing
"""
import sys

from figlib import (BLUE, GREEN, GREY, ORANGE, RED, arrow, box, ceil_div, out_dir, parser, pyplot, save,
                    source_constant, source_match, source_text)

GQA = "steps/37_gqa_backward/gqa_backward.cu"
VARLEN = "steps/38_varlen_backward/varlen_backward.cu"
PLAN = "common/device/backward_varlen.cuh"
PREP = "common/device/backward_prep.cuh"

HEAD_COLORS = ["#9ecae1", "#a1d99b", "#fdd0a2", "#dadaeb"]  # the group's query heads, g = 0..3
SEQ_COLORS = ["#9ecae1", "#a1d99b", "#fdd0a2"]             # the batch's sequences


# ---- what the kernels say ----------------------------------------------------------------------------

def gqa_tiles():
    """(kBlockN, kBlockM at D = 64, kBlockM at D = 128) of step 37, and the loops the figure draws."""
    block_n = source_constant(GQA, "kBlockN")
    m = source_match(GQA, r"kBlockMOf\s*=\s*kHeadDim\s*==\s*64\s*\?\s*(\d+)\s*:\s*(\d+);", "kBlockMOf")
    source_text(GQA, "const dim3 grid(unsigned(ceil_div(n, T::kBlockN)), unsigned(kv_heads));",
                "the grid: a CTA per key block of a K/V head")
    source_text(GQA, "for (int g = 0; g < group; ++g) { float* dq_head = dq_acc + "
                "std::int64_t(bh_first + g) * n_pad * kHeadDim;", "the consumers' loop over the group's heads")
    source_text(GQA, "const int position = g * blocks_per_head - m_begin;", "the ring position of a block")
    source_text(GQA, "hopper::store_o_rows<kHeadDim>(acc_dk, dk + head, kv_start + key_local, n, t);",
                "dK stored once, from the registers")
    return block_n, int(m.group(1)), int(m.group(2))


def varlen_plan(lens, block_n):
    """make_varlen_backward_plan's plan of `lens`: (order, block_start, pad_start, total_pad)."""
    source_text(PLAN, "std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return "
                "s.q_lens[std::size_t(a)] > s.q_lens[std::size_t(b)]; });", "the longest-first order")
    source_text(PLAN, "p.pad_start[b + 1] = p.pad_start[b] + padded_rows(s.q_lens[std::size_t(b)]);",
                "the padded rows, in the batch's order")
    source_text(PLAN, "ws.lse_log2[at] = i < len ? lse[std::int64_t(h) * total_q + token] * kLog2e : INFINITY;",
                "lse = +inf in the padding")
    source_text(PREP, "constexpr int padded_rows(int n) { return (n + kRowPad - 1) / kRowPad * kRowPad; }",
                "padded_rows")
    source_text(VARLEN, "const dim3 grid(unsigned(plan.key_blocks), unsigned(sh.hkv()));", "the varlen grid")
    row_pad = source_constant(PREP, "kRowPad")
    order = sorted(range(len(lens)), key=lambda b: -lens[b])  # Python's sort is stable, as stable_sort
    block_start = [0]
    for b in order:
        block_start.append(block_start[-1] + ceil_div(lens[b], block_n))
    pad_start = [0]
    for n in lens:
        pad_start.append(pad_start[-1] + ceil_div(n, row_pad) * row_pad)
    return order, block_start, pad_start, row_pad


# ---- chapter 37 ------------------------------------------------------------------------------------

def fig_gqa(out):
    block_n, bm64, bm128 = gqa_tiles()
    group, blocks = 4, 6  # the example: a group of 4 query heads, six query blocks each
    # The counts of the example shape in the caption line: B=2 Hq=32 Hkv=8 N=4096 D=128.
    b, hq, hkv, n, d = 2, 32, 8, 4096, 128
    ours = ceil_div(n, block_n) * b * hkv
    theirs = ceil_div(n, block_n) * b * hq
    per_cta = group * ceil_div(n, bm128)
    accum_mib = 2 * b * hkv * n * d * 4 / 2**20
    summary = dict(block_n=block_n, block_m=(bm64, bm128), ctas=ours, fa3_ctas=theirs, positions=per_cta,
                   accum_mib=accum_mib)
    if out is None:
        return summary
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5.6))
    cell, gap = 1.0, 0.25

    # Left: step 37, one CTA.
    ax.set_title(f"step 37: one CTA = key block j ({block_n} keys) of K/V head k,\n"
                 f"walking the query blocks of the group's {group} heads in order", fontsize=9)
    box(ax, -2.6, 1.2, 1.6, 2.6, "#cccccc", "K_j, V_j\nloaded once\n(TMA)", fontsize=7)
    for g in range(group):
        y = (group - 1 - g) * (cell + gap)
        ax.text(-0.2, y + cell / 2, f"head {group}k+{g}", ha="right", va="center", fontsize=7)
        for m in range(blocks):
            box(ax, m * cell, y, cell, cell, HEAD_COLORS[g], f"{g * blocks + m}", fontsize=7)
        if g + 1 < group:  # the ring runs on to the next head's first block
            arrow(ax, ((blocks - 0.5) * cell, y), (0.5 * cell, y - gap), color=GREY, lw=0.8, ls="--",
                  mutation_scale=8, connectionstyle="arc3,rad=0.0")
        arrow(ax, (blocks * cell + 0.05, y + cell / 2), (blocks * cell + 0.9, y + cell / 2), color="black",
              lw=0.8, mutation_scale=9)
        # The register accumulator after head g: the sum grows by one head's share.
        for k in range(g + 1):
            box(ax, blocks * cell + 1.0 + k * 0.45, y + 0.15, 0.45, cell - 0.3, HEAD_COLORS[k], lw=0.4)
        ax.text(blocks * cell + 1.0 + (g + 1) * 0.45 + 0.1, y + cell / 2,
                "Σ heads 0.." + str(g), va="center", fontsize=7)
    top = group * (cell + gap)
    ax.text(blocks * cell / 2, top + 0.05, "query blocks m (the cell: its ring position g·blocks + m)",
            ha="center", fontsize=7)
    ax.text(blocks * cell + 1.0, top + 0.05, "acc_dk, acc_dv: fp32 registers", fontsize=7)
    box(ax, blocks * cell + 0.6, -2.1, 3.6, 0.9, GREEN, "dK_j, dV_j of head k: one store,\nelement type, group order",
        fontsize=7, tcolor="white")
    arrow(ax, (blocks * cell + 1.9, -0.05), (blocks * cell + 1.9, -1.15), color="black", lw=1, mutation_scale=10)
    box(ax, 0, -2.1, blocks * cell, 0.9, "#eeeeee",
        "dQ of each block: bulk reduce-add into its own\nquery head's fp32 accumulator (as step 25)", fontsize=7)
    ax.text(-2.6, -3.0, f"grid ⌈N/{block_n}⌉ × B·Hkv: at B=2 Hq=32 Hkv=8 N=4096 D=128, {ours} CTAs, "
            f"each {per_cta} query blocks", fontsize=7.5)
    ax.set_xlim(-2.9, blocks * cell + 4.6)
    ax.set_ylim(-3.3, top + 0.6)
    ax.axis("off")

    # Right: FlashAttention-3/4, a CTA per query head.
    bx.set_title(f"FlashAttention-3/4: {group} CTAs = key block j × each query head of the group,\n"
                 "dK, dV summed in fp32 global accumulators, then converted", fontsize=9)
    for g in range(group):
        y = (group - 1 - g) * (cell + gap)
        box(bx, -1.9, y + 0.1, 1.5, cell - 0.2, "#cccccc", "K_j, V_j", fontsize=7)
        bx.text(-2.0, y + cell / 2, f"CTA {g}\nhead {group}k+{g}", ha="right", va="center", fontsize=7)
        for m in range(blocks):
            box(bx, m * cell, y, cell, cell, HEAD_COLORS[g], f"{m}", fontsize=7)
        box(bx, blocks * cell + 0.2, y + 0.15, 0.45, cell - 0.3, HEAD_COLORS[g], lw=0.4)
        arrow(bx, (blocks * cell + 0.7, y + cell / 2), (blocks * cell + 2.1, 1.7 + 0.3 * (group - 1 - g)),
              color=RED, lw=0.9, mutation_scale=9)
    box(bx, blocks * cell + 2.1, 1.1, 2.2, 1.8, ORANGE, "dk_accum,\ndv_accum\nfp32, zeroed\nfirst", fontsize=7)
    bx.text(blocks * cell + 0.85, top + 0.05, "each CTA's share (fp32 registers):\nbulk reduce-add, in any order",
            color=RED, fontsize=7)
    bx.text(-1.15, top + 0.05, "K_j, V_j read by\nevery CTA", ha="center", fontsize=7)
    box(bx, blocks * cell + 1.6, -2.1, 3.2, 0.9, GREEN, "convert kernel:\ndK, dV in the element type",
        fontsize=6.5, tcolor="white")
    arrow(bx, (blocks * cell + 3.2, 1.05), (blocks * cell + 3.2, -1.15), color="black", lw=1, mutation_scale=10)
    bx.text(-3.4, -3.0, f"grid ⌈N/{block_n}⌉ × B·Hq: {theirs} CTAs; accumulators 2·B·Hkv·N·D·4 B = "
            f"{accum_mib:.0f} MiB, zeroed, reduced into and read back", fontsize=7.5)
    bx.set_xlim(-3.5, blocks * cell + 5.0)
    bx.set_ylim(-3.3, top + 0.6)
    bx.axis("off")

    fig.text(0.5, 0.01, "Schematic (not a measurement): a group of 4 heads and six query blocks as an example; "
             "the tiles, the group loop and the grid are those of steps/37_gqa_backward/gqa_backward.cu, "
             "FlashAttention's from its sources.", ha="center", fontsize=7, color=GREY)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, out, "part7-gqa-backward.png", dpi=110)
    return summary


# ---- chapter 38 ------------------------------------------------------------------------------------

def fig_varlen(out):
    block_n, bm64, _ = gqa_tiles()
    lens = [200, 90, 300]  # the example batch (tokens); D = 64, so a query block is bm64 rows
    order, block_start, pad_start, row_pad = varlen_plan(lens, block_n)
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    summary = dict(order=order, block_start=block_start, pad_start=pad_start, row_pad=row_pad, cu=cu)
    if out is None:
        return summary
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(13, 5.8))
    y_tok, y_pad, y_grid, h = 3.2, 1.3, -0.9, 0.7

    # The packed tokens, and the padded rows of the statistics and dQ.
    ax.text(-8, y_tok + h / 2, "packed tokens\nQ, K, V, O, dO, dQ, dK, dV\n[total, H(kv), D]", ha="right",
            va="center", fontsize=7)
    ax.text(-8, y_pad + h / 2, "lse·log2e, D, dQ accumulator\n(per head: total_pad rows)", ha="right",
            va="center", fontsize=7)
    for b, n in enumerate(lens):
        box(ax, cu[b], y_tok, n, h, SEQ_COLORS[b], f"sequence {b}\n{n} tokens", fontsize=6.5)
        box(ax, pad_start[b], y_pad, n, h, SEQ_COLORS[b], f"seq {b}\nrows 0..{n - 1}", fontsize=6.5)
        padding = pad_start[b + 1] - pad_start[b] - n
        box(ax, pad_start[b] + n, y_pad, padding, h, "white", hatch="///", lw=0.6)
        ax.plot([cu[b], pad_start[b]], [y_tok, y_pad + h], color=GREY, lw=0.6, ls=":")
        ax.text(cu[b], y_tok - 0.22, f"cu_seqlens[{b}] = {cu[b]}", fontsize=6, ha="left")
        ax.text(pad_start[b], y_pad - 0.22, f"pad_start[{b}] = {pad_start[b]}", fontsize=6, ha="left")
    ax.text(cu[-1], y_tok - 0.22, f"total = {cu[-1]}", fontsize=6, ha="right")
    ax.text(pad_start[-1], y_pad - 0.22, f"total_pad = {pad_start[-1]}", fontsize=6, ha="right")
    ax.text(pad_start[-1] + 12, y_pad + h / 2, f"hatched: each sequence\npadded to {row_pad} rows,\n"
            "lse = +inf, D = 0", fontsize=6.5, va="center")

    # The grid: every sequence's key blocks, the longest first.
    ax.text(-8, y_grid + h / 2, "blockIdx.x:\nkey blocks,\nlongest first", ha="right", va="center", fontsize=7)
    width = 100
    for i, b in enumerate(order):
        for j in range(block_start[i + 1] - block_start[i]):
            x = block_start[i] + j
            lo, hi = j * block_n, min(lens[b], (j + 1) * block_n) - 1
            box(ax, x * (width + 12), y_grid, width, h, SEQ_COLORS[b], f"x={x}: seq {b}\nkeys {lo}..{hi}",
                fontsize=6.5, lw=1.8 if (b == 0 and j == 1) else 0.6)
            if b == 0 and j == 1:
                ax.text(x * (width + 12) + width / 2, y_grid - 0.15, "the CTA drawn above", ha="center",
                        va="top", fontsize=6.5)

    # One CTA: sequence 0, key block 1, and its query block m = 1 (D = 64: bm64 query rows).
    from matplotlib.patches import Rectangle
    b, j, m = 0, 1, 1
    start, n = cu[b], lens[b]
    k0 = start + j * block_n
    own = min(k0 + block_n, start + n) - k0
    y_k = y_tok + 1.2
    x_cta = block_start[order.index(b)] + j
    ax.text(k0 - 6, y_k + 0.22, f"CTA x={x_cta}: its K, V box (keys {j * block_n}..{(j + 1) * block_n - 1})",
            fontsize=6.5, ha="right", va="center")
    box(ax, k0, y_k, own, 0.45, "#cccccc")
    box(ax, k0 + own, y_k, block_n - own, 0.45, "#f4cccc", hatch="xx", lw=0.6)
    ax.text(k0 + block_n + 6, y_k + 0.22, f"{block_n - own} rows of sequence 1: masked (key ≥ n = {n}); "
            "dK, dV rows ≥ n are not stored", fontsize=6.5, va="center", color=RED)
    q0 = start + m * bm64
    qown = min(q0 + bm64, start + n) - q0
    y_q = y_k + 0.65
    ax.text(q0 - 6, y_q + 0.22, f"its query block m = {m}: the Q, dO box", fontsize=6.5, ha="right", va="center")
    box(ax, q0, y_q, qown, 0.45, "#cccccc")
    box(ax, q0 + qown, y_q, bm64 - qown, 0.45, "#f4cccc", hatch="xx", lw=0.6)
    ax.text(q0 + bm64 + 6, y_q + 0.22, "rows of sequence 1: their lse, read from sequence 0's padding, is +inf,"
            " so P = dS = 0", fontsize=6.5, va="center", color=RED)
    p0 = pad_start[b] + m * bm64
    for x, y, w, hh in ((q0, y_q, bm64, 0.45), (p0, y_pad, bm64, h)):
        ax.add_patch(Rectangle((x, y), w, hh, facecolor="none", edgecolor=BLUE, lw=2.2))
    ax.text(p0 + bm64 / 2, y_pad - 0.5, f"block m = {m}'s lse and D: one bulk copy of padded rows "
            f"{m * bm64}..{(m + 1) * bm64 - 1};\nits dQ rows past n add into the same padding, which the "
            "convert skips", fontsize=6.5, color=BLUE, ha="center", va="top")

    right = max(pad_start[-1], cu[-1]) + 40
    ax.set_xlim(-300, right + 120)
    ax.set_ylim(y_grid - 0.7, y_q + 0.9)
    ax.axis("off")
    ax.set_title(f"Step 38's packed batch (3 sequences; D = 64: {block_n} keys per CTA, {bm64} query rows "
                 f"per block, statistics and dQ padded to {row_pad} rows per sequence)", fontsize=9)
    fig.text(0.5, 0.01, "Schematic (not a measurement): the plan is make_varlen_backward_plan's "
             "(common/device/backward_varlen.cuh) for the example lengths 200, 90, 300; the rows are drawn "
             "to scale, one head.", ha="center", fontsize=7, color=GREY)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, out, "part7-varlen-backward.png", dpi=110)
    return summary


def main():
    ap = parser(__doc__)
    ap.add_argument("--check", action="store_true", help="read the sources and compute, write nothing")
    args = ap.parse_args()
    out = None if args.check else out_dir(args.out)
    g = fig_gqa(out)
    print(f"step 37: kBlockN {g['block_n']}, kBlockM {g['block_m'][0]}/{g['block_m'][1]} (D = 64/128); "
          f"B=2 Hq=32 Hkv=8 N=4096 D=128: {g['ctas']} CTAs of {g['positions']} query blocks, "
          f"FlashAttention-3/4 {g['fa3_ctas']}, their fp32 dK/dV accumulators {g['accum_mib']:.0f} MiB")
    v = fig_varlen(out)
    print(f"step 38: lengths 200, 90, 300: order {v['order']}, block_start {v['block_start']}, "
          f"pad_start {v['pad_start']} (kRowPad {v['row_pad']})")
    if out:
        print(f"wrote part7-gqa-backward.png, part7-varlen-backward.png to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

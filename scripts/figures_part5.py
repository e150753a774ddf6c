#!/usr/bin/env python3
"""Draws every figure of Part V (chapters 23-25, the backward pass) into docs/img/:

  scripts/figures_part5.py              # all figures
  scripts/figures_part5.py --out DIR    # somewhere else

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

Nothing in them is measured: the ledger is the step's formula, the layouts come from the kernels'
constants (read from their files, so a changed constant changes the figure), and the timelines'
durations are illustrative.
"""
import math

from figlib import BLUE, GREY, RED, arrow, box, out_dir, parser, pyplot, save, source_match

plt = pyplot()
from matplotlib.patches import Rectangle  # noqa: E402


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
    save(fig, out, "part5-naive-ledger.png", dpi=130)
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
                    arrow(ax, (kj + 1.0, nb - 1 - qi + 0.5), (nb + 0.6, nb - 1 - qi + 0.5),
                          color=RED, lw=0.8, mutation_scale=7)
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
    save(fig, out, "part5-loop.png", dpi=100)


# ---- step 24's accumulator map and deterministic staircase, step 25's schedule ----------------

STEP24 = "steps/24_fa2_backward/fa2_backward.cu"


def step24_constants():
    """kBlockN, kWarps, kSubM and kBlockM (per D) as steps/24_fa2_backward/fa2_backward.cu states
    them; the figures below are drawn from these, so that a change of the kernel shows."""
    def one(pattern):
        return source_match(STEP24, pattern, "step 24's constant").groups()

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
    save(fig, out, "part5-st-layout.png", dpi=130)


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
                        arrow(ax, prev, (a0, kbs - 1 - kb + 0.85), color=RED, lw=0.8, mutation_scale=7)
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
    save(fig, out, "part5-staircase.png", dpi=100)


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

    def span(x0, x1, y, label, face, fs=6.5, hatch=None, h=0.6):
        box(ax, x0, y, x1 - x0, h, face, label, fontsize=fs, hatch=hatch)

    prod = rows["producer warp\n(thread 0: TMA)"]
    span(0.0, 1.1, prod, "K, V (once)\nkv_full", load, fs=6)
    span(1.1, 2.8, prod, "block m: Q, dO,\nlse, D → stage 0", load, fs=6)
    span(2.8, 4.2, prod, "block m+1\n→ stage 1", load, fs=6)
    block_len = 10.6
    for it in range(2):
        base = 2.8 + it * block_len  # block m's stage has landed (full[0])
        stage = it % 2
        starts = [base + 0.3 * c for c in range(2)]  # the consumers drift apart and meet at kDsStaged
        bar = max(t + 4.9 for t in starts)
        release = []
        for c, t in enumerate(starts):
            ytc, yw = rows[f"consumer {c}\ntensor cores"], rows[f"consumer {c}\nwarps"]
            span(t, t + 1.6, ytc, "Sᵀ = K Qᵀ\nSS", tc)
            span(t + 1.6, t + 3.2, ytc, "dPᵀ = V dOᵀ\nSS", tc)
            span(t + 1.6, t + 3.0, yw, "Pᵀ = exp2(…)\nunder dPᵀ", warp, fs=6)
            span(t + 3.2, t + 4.2, yw, "dSᵀ = Pᵀ∘\n(dPᵀ − D)", warp, fs=5.5)
            span(t + 4.2, t + 4.9, yw, "dSᵀ\n→ smem", warp, fs=5.5)
            span(t + 4.9, t + 6.5, ytc, "dV += Pᵀ dO\nRS", "#a1d99b")
            if bar > t + 4.9:
                span(t + 4.9, bar, yw, "", "white", hatch="..")
            dq0 = max(t + 6.5, bar)
            span(dq0, dq0 + 1.8, ytc, f"dQ piece {c}\n= dS K, SS", red)
            span(dq0 + 1.8, dq0 + 3.4, ytc, "dK += dSᵀ Q\nRS", "#a1d99b")
            span(dq0 + 1.8, dq0 + 2.7, yw, "dQ piece\n→ smem", warp, fs=5.5)
            yr = rows["copy engine → L2\n(bulk reduce-add)"] + (0.35 if c == 0 else -0.35)
            span(dq0 + 2.7, dq0 + 4.3, yr, f"+= dQ piece {c}", red, fs=6, h=0.5)
            span(dq0 + 3.4, dq0 + 3.6, yw, "", "#555555")
            release.append(dq0 + 3.6)
        ax.annotate(f"empty[{stage}]: every consumer\nthread arrives (dK retired)", xy=(release[0] - 0.1, rows["consumer 0\nwarps"]),
                    xytext=(release[0] + 1.6, rows["consumer 0\nwarps"] - 0.55), fontsize=6, ha="center",
                    arrowprops=dict(arrowstyle="->", lw=0.6))
        ax.plot([bar, bar], [2.0, 5.75], color="black", ls="--", lw=0.9)
        ax.text(bar, 5.8, "kDsStaged", ha="center", fontsize=6.5)
        ax.text(base + 5.0, 7.05, f"query block {'m' if it == 0 else 'm+1'} (stage {stage})", ha="center", fontsize=8.5)
        rel = max(release)  # the producer refills the stage once all 256 consumer threads released it
        span(rel, rel + 1.4, prod, f"block m+{it + 2}\n→ stage {stage}", load, fs=6)
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
    save(fig, out, "part5-schedule.png", dpi=110)


def main():
    out = out_dir(parser(__doc__).parse_args().out)
    fig_naive_ledger(out)
    fig_backward_loop(out)
    fig_st_layout(out)
    fig_staircase(out)
    fig_backward_schedule(out)
    print(f"wrote part5-naive-ledger.png, part5-loop.png, part5-st-layout.png, part5-staircase.png, "
          f"part5-schedule.png to {out}")


if __name__ == "__main__":
    main()

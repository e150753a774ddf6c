#!/usr/bin/env python3
"""Part III's idea figures of one row of S: its dependent chain (chapter 08), its exponentials
(chapter 12) and who holds it (chapter 14). Run by scripts/figures_part3.py, whose docstring says
what each figure shows; it reads the sources and results files with the readers there.

  part3-08-idea.png  one softmax row's dependent chain in step 07's v5 and step 08's v6, by unit.
  part3-12-idea.png  one row's exponentials before and after step 12's FFMA + EX2 rewrite, and the
                     FP32 counters Nsight Compute measured for the two kernels.
  part3-14-idea.png  who holds which rows of S: steps 07-13 against step 14.
"""
import csv
import math
import sys

from figlib import box, pyplot, save, source_constant, source_text
from figures_part3_common import (C_FP32, C_IDLE, C_LDS, C_MMA, C_MUFU, C_SHFL, FRAG, NCU, STEPS, WARP_COLORS,
                           config, legend_patches, shuffle_steps)


# ---- 08: the softmax's dependent chain ----------------------------------------------------------------

def data_08():
    r7, r8 = STEPS[7], STEPS[8]
    n = shuffle_steps(r7)
    if shuffle_steps(r8) != n:
        sys.exit("figures_part3: steps 07 and 08 reduce over different warp sizes")
    source_text(r7, "x[r][c] = s_s[row * C::kSStride + col] * scale;", "step 07's scale on load")
    source_text(r7, "p[r][0] = __expf(x[r][0] - m_new[r]);", "step 07's exponential")
    source_text(r7, "s_sum[row] = s_sum[row] * __expf(m_old[r] - m_new[r]) + sum[r];", "step 07's sum update")
    source_text(r7, "const float rescale = __expf(s_max_prev[row] - s_max[row]);", "step 07's P V rescale")
    source_text(r8, "x[r][c] = s_s[row * C::kSStride + col];", "step 08's raw load")
    source_text(r8, "p[r][0] = ptx::exp2_approx(fmaf(x[r][0], scale_log2, -m_scaled));", "step 08's exponential")
    source_text(r8, "s_sum[row] = fmaf(s_sum[row], rescale, sum[r]);", "step 08's sum update")
    source_text(r8, "const float rescale = s_rescale[row];", "step 08's P V rescale read")
    # (label, unit, ops, removed-by-V6): a row's dependent chain, one lane, in source order. __expf(x)
    # is FMUL (· log2 e) and MUFU.EX2 (step 12's header); the max and the sum are n (SHFL, op) pairs.
    before = [("LDS S", C_LDS, 1, False), ("FMUL\n·scale", C_FP32, 1, True), ("FMNMX", C_FP32, 1, False),
              (f"{n} × (SHFL, FMNMX)\nthe row's max", C_SHFL, 2 * n, False), ("FMNMX\nm_old", C_FP32, 1, False),
              ("FADD\nx − m", C_FP32, 1, False), ("FMUL\n·log2e", C_FP32, 1, False), ("MUFU\nEX2", C_MUFU, 1, False),
              ("FADD", C_FP32, 1, False), (f"{n} × (SHFL, FADD)\nthe row's sum", C_SHFL, 2 * n, False),
              ("STS\nP", C_LDS, 1, False)]
    after = [("LDS S", C_LDS, 1, False), ("FMNMX", C_FP32, 1, False),
             (f"{n} × (SHFL, FMNMX)\nthe row's max", C_SHFL, 2 * n, False), ("FMNMX\nm_old", C_FP32, 1, False),
             ("FMUL\nm·c", C_FP32, 1, False), ("FFMA\nx·c − m·c", C_FP32, 1, False), ("MUFU\nEX2", C_MUFU, 1, False),
             ("FADD", C_FP32, 1, False), (f"{n} × (SHFL, FADD)\nthe row's sum", C_SHFL, 2 * n, False),
             ("STS\nP", C_LDS, 1, False)]
    # Off the chain, per row: the bookkeeping V6 moved or removed.
    off_before = [("P V, every lane, its 2 rows", "v5: LDS ×2, FADD, FMUL, EX2 per row", "v6: LDS ×1 (s_rescale) per row"),
                  ("lane 0, the row's statistics", "v5: FADD, FMUL, EX2, FMUL, FADD (sum)",
                   "v6: FADD, FMUL, EX2, FFMA (sum), STS"),
                  ("the first key block", "v5: max and sum set before the loop", "v6: its own softmax, nothing to read")]
    off_after = None
    count = lambda chain: sum(o for _, _, o, _ in chain)
    fp32 = lambda chain: sum(o for _, c, o, _ in chain if c == C_FP32)
    return dict(n=n, before=before, after=after, off_before=off_before, off_after=off_after,
                len_before=count(before), len_after=count(after), fp_before=fp32(before), fp_after=fp32(after))


def draw_chain(ax, y, chain, unit_w=1.0, h=0.8, fontsize=6.5):
    x = 0.0
    for label, color, ops, removed in chain:
        w = max(ops, 1.6) * unit_w if ops > 1 else 1.6 * unit_w
        box(ax, x, y, w, h, "#f4c7c7" if removed else color, label, fontsize=fontsize,
            hatch="//" if removed else None, tcolor="white" if color in (C_LDS, C_SHFL, C_MUFU) else "black")
        if removed:
            ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=fontsize,
                    bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
        x += w + 0.15
    return x


def fig_08(out, made):
    plt = pyplot()
    dd = data_08()
    fig, ax = plt.subplots(figsize=(12, 4.6))
    xb = draw_chain(ax, 3.2, dd["before"])
    xa = draw_chain(ax, 1.6, dd["after"])
    ax.text(0, 4.15, f"step 07's v5: {dd['len_before']} operations on a row's chain, {dd['fp_before']} FP32 outside the shuffle steps "
            "(hatched: the one V6 removes from it)", fontsize=8, va="bottom")
    ax.text(0, 2.55, f"step 08's v6 (c = scale·log2e): {dd['len_after']} operations, {dd['fp_after']} FP32 outside the shuffle steps; the {2 * dd['n']} "
            "shuffles, the load, the exponential and the store are all still there", fontsize=8, va="bottom")
    # off the chain
    ax.text(0, 0.95, "off the chain, per row (what V6 also moved):", fontsize=7.5, va="bottom")
    x = 0.0
    for head, lb, la in dd["off_before"]:
        box(ax, x, 0.0, 12.0, 0.8, C_IDLE)
        ax.text(x + 0.2, 0.62, head, fontsize=6.8, va="center", weight="bold")
        ax.text(x + 0.2, 0.38, lb, fontsize=6.5, va="center")
        ax.text(x + 0.2, 0.14, la, fontsize=6.5, va="center")
        x += 12.3
    ax.set_xlim(-0.3, max(xb, xa, x) + 0.3)
    ax.set_ylim(-0.2, 4.6)
    ax.axis("off")
    legend_patches(ax, [("shared load / store (MIO)", C_LDS), ("shuffle + its FMNMX/FADD (MIO)", C_SHFL),
                        ("MUFU (MIO)", C_MUFU), ("FP32 pipe", C_FP32)],
                   loc="lower right", fontsize=7, ncol=4, bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.suptitle("Step 08: one softmax row's dependent chain, one lane, in the order of the source "
                 "(schematic: operations, not cycles)", fontsize=9, y=0.98)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    save(fig, out, "part3-08-idea.png", made=made)


# ---- 12: one exponential, before and after the FFMA + EX2 rewrite ----------------------------------

def ncu_rows():
    if not NCU.exists():
        sys.exit(f"figures_part3: {NCU} does not exist")
    with NCU.open() as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    for col in ("FP32 fused", "FP32 non-fused"):
        if not rows or col not in next(iter(rows.values())):
            sys.exit(f"figures_part3: {NCU}: no column {col!r}")
    return rows


def data_12():
    r11, r12 = STEPS[11], STEPS[12]
    source_text(r11, "p[r][0] = __expf(x[r][0] - m_new[r]);", "step 11's numerator")
    source_text(r11, "s_sum[row] = s_sum[row] * __expf(m_old[r] - m_new[r]) + sum[r];", "step 11's sum update")
    source_text(r11, "const float rescale = __expf(s_max_prev[row] - s_max[row]);", "step 11's P V rescale")
    source_text(r12, "const float m_log2 = m_new[r] * kLog2e;", "step 12's m·log2e once per row")
    source_text(r12, "p[r][0] = ptx::exp2_approx(fmaf(x[r][0], kLog2e, -m_log2));", "step 12's numerator")
    source_text(r12, "const float rescale = ptx::exp2_approx(fmaf(m_old[r], kLog2e, -m_new[r] * kLog2e));",
              "step 12's sum rescale")
    source_text(r12, "s_sum[row] = fmaf(s_sum[row], rescale, sum[r]);", "step 12's FFMA sum")
    source_text(r12, "const float rescale = ptx::exp2_approx(fmaf(s_max_prev[row], kLog2e, -s_max[row] * kLog2e));",
              "step 12's P V rescale")
    cols = source_constant(r12, "kWarpSize")  # kColsPerLane = kBlockN / kWarpSize
    cols = source_constant(r12, "kBlockN") // cols
    # (what, [instructions before], [instructions after]) per lane and row; __expf(y) = FMUL (y·log2 e)
    # then MUFU.EX2 (step 12's header), so __expf(x − m) = FADD, FMUL, MUFU.EX2.
    seqs = [(f"the row's {cols} numerators p = e^(x − m)",
             ["FADD x−m", "FMUL ·log2e", "EX2"] * cols,
             ["FMUL m·log2e"] + ["FFMA", "EX2"] * cols),
            ("lane 0: l = l·e^(m_old − m) + sum",
             ["FADD", "FMUL ·log2e", "EX2", "FMUL", "FADD"],
             ["FMUL m·log2e", "FFMA", "EX2", "FFMA"]),
            ("P V lane: factor e^(m_prev − m) of a row",
             ["FADD", "FMUL ·log2e", "EX2"],
             ["FMUL m·log2e", "FFMA", "EX2"])]
    rows = ncu_rows()
    num = lambda s: int(s.replace(",", ""))
    measured = {rid: (num(rows[rid]["FP32 fused"]), num(rows[rid]["FP32 non-fused"]))
                for rid in ("11/qkspecialized", "12/v10") if rid in rows}
    if len(measured) != 2:
        sys.exit(f"figures_part3: {NCU}: rows 11/qkspecialized and 12/v10 are needed")
    return dict(seqs=seqs, measured=measured)


def op_color(op):
    if op.startswith("EX2"):
        return C_MUFU
    if op.startswith("FFMA"):
        return C_MMA
    return C_FP32


def fig_12(out, made):
    plt = pyplot()
    dd = data_12()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11.5, 4.6), gridspec_kw=dict(width_ratios=[2.6, 1]))
    y = 0.0
    for what, before, after in reversed(dd["seqs"]):
        for dy, seq, name in ((0.55, before, "step 11"), (0.0, after, "step 12")):
            x = 0.0
            ax.text(-0.2, y + dy + 0.22, name, ha="right", va="center", fontsize=7)
            for op in seq:
                w = 1.5 if " " in op else 0.9
                box(ax, x, y + dy, w, 0.45, op_color(op), op, fontsize=6,
                    tcolor="white" if op_color(op) == C_MUFU else "black")
                x += w + 0.08
            ax.text(x + 0.1, y + dy + 0.22, f"{len(seq)} instructions", fontsize=6.5, va="center")
        ax.text(0, y + 1.1, what, fontsize=7.5, weight="bold", va="bottom")
        y += 1.6
    ax.set_xlim(-1.4, 9.6)
    ax.set_ylim(-0.2, y)
    ax.axis("off")
    legend_patches(ax, [("FP32, not fused", C_FP32), ("FFMA (fused)", C_MMA), ("MUFU.EX2", C_MUFU)],
                   loc="upper left", fontsize=7, frameon=False, bbox_to_anchor=(0.0, 0.0), ncol=3)
    ax.set_title("per lane, from the source forms (schematic)", fontsize=8)
    ids = list(dd["measured"])
    fused = [dd["measured"][i][0] / 1e6 for i in ids]
    non = [dd["measured"][i][1] / 1e6 for i in ids]
    xs = range(len(ids))
    bx.bar([x - 0.2 for x in xs], non, 0.4, color=C_FP32, edgecolor="black", lw=0.5, label="non-fused")
    bx.bar([x + 0.2 for x in xs], fused, 0.4, color=C_MMA, edgecolor="black", lw=0.5, label="fused")
    for x, a, b in zip(xs, non, fused):
        bx.text(x - 0.2, a, f"{a:.1f}", ha="center", va="bottom", fontsize=6.5)
        bx.text(x + 0.2, b, f"{b:.1f}", ha="center", va="bottom", fontsize=6.5)
    bx.set_xticks(list(xs))
    bx.set_xticklabels(ids, fontsize=7)
    bx.set_ylabel("FP32 instructions (millions)", fontsize=7)
    bx.tick_params(axis="y", labelsize=7)
    bx.legend(fontsize=7, frameon=False)
    bx.set_title("measured (Nsight Compute,\nseries workload, non-causal)", fontsize=8)
    fig.suptitle("Step 12: every exponential of the softmax as one FFMA feeding one MUFU.EX2", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    save(fig, out, "part3-12-idea.png", made=made)


# ---- 13: the register budget -------------------------------------------------------------------------

# ---- 14: who holds which rows of S ------------------------------------------------------------------

def data_14():
    r13, r14 = STEPS[13], STEPS[14]
    a, b = config(13), config(14)
    a["warps_n"] = source_constant(r13, "kWarpsN")
    b["warps_n"] = source_constant(r14, "kWarpsN")
    source_text(r13, "static constexpr int kSoftmaxRows = kBlockM / kWarps;", "step 13's softmax rows per warp")
    source_text(r13, "const int row0 = 16 * (warp / C::kWarpsN);", "step 13's Q Kᵀ rows of a warp")
    source_text(r13, "const int key0 = C::kQkCols * (warp % C::kWarpsN);", "step 13's Q Kᵀ keys of a warp")
    source_text(r13, "static constexpr int kQkCols = kBlockN / kWarpsN;", "step 13's keys per warp")
    source_text(r14, "static constexpr int kRowWarps = kBlockM / 16;", "step 14's row-owning warps")
    source_text(r14, "const int row0 = 16 * warp;", "step 14's Q Kᵀ rows of a warp")
    source_text(r14, "m_tile = frag::quad_max(m_tile);", "step 14's quad reduction")
    source_text(FRAG, "x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 1));", "quad_max's first shuffle")
    source_text(FRAG, "return fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));", "quad_max's second shuffle")
    a["softmax_rows"] = a["block_m"] // a["warps"]
    a["qk_cols"] = a["block_n"] // a["warps_n"]
    b["row_warps"] = b["block_m"] // 16
    # Owner of S[row][key]: in Q Kᵀ, in the softmax, and the P V warps that read P row `row`.
    def qk13(r, k): return 2 * (r // 16) + k // a["qk_cols"]
    def sm13(r, k): return r // a["softmax_rows"]
    def qk14(r, k): return r // 16
    def pv(c):
        return lambda r, k: [c["warps_n"] * (r // 16) + i for i in range(c["warps_n"])]
    shfl13 = 2 * int(math.log2(a["warp_size"]))
    shfl14 = 2  # quad_max: xor 1 and xor 2; the sum's quad reduction waits for the epilogue
    return dict(a=a, b=b, qk13=qk13, sm13=sm13, qk14=qk14, pv13=pv(a), pv14=pv(b), shfl13=shfl13, shfl14=shfl14)


def draw_owner(ax, x0, y0, rows, cols, owner, scale, title):
    """A rows × cols tile, each element coloured by owner(r, k): a warp, or a list of warps (the first
    colours it, all are named)."""
    from matplotlib.patches import Rectangle
    first = lambda w: w[0] if isinstance(w, list) else w
    for r in range(rows):
        for k in range(0, cols, 4):
            w = first(owner(r, k))
            ax.add_patch(Rectangle((x0 + k * scale, y0 - (r + 1) * scale), 4 * scale, scale,
                                   facecolor=WARP_COLORS[w], edgecolor="none"))
    ax.add_patch(Rectangle((x0, y0 - rows * scale), cols * scale, rows * scale, facecolor="none",
                           edgecolor="black", lw=0.8))
    ax.text(x0 + cols * scale / 2, y0 + 0.15, title, ha="center", va="bottom", fontsize=7.2)
    # warp numbers in the middle of each owner's region
    seen = {}
    for r in range(rows):
        for k in range(cols):
            w = owner(r, k)
            seen.setdefault(tuple(w) if isinstance(w, list) else (w,), []).append((r, k))
    for ws, cells in seen.items():
        rr = sum(c[0] for c in cells) / len(cells)
        kk = sum(c[1] for c in cells) / len(cells)
        ax.text(x0 + (kk + 0.5) * scale, y0 - (rr + 0.5) * scale, " + ".join(f"w{w}" for w in ws),
                ha="center", va="center", fontsize=6.5, color="white", weight="bold")


def fig_14(out, made):
    plt = pyplot()
    dd = data_14()
    a, b = dd["a"], dd["b"]
    fig, ax = plt.subplots(figsize=(12, 6.6))
    sc = 0.045
    # steps 07-13: block_m × block_n
    y = 6.6
    ax.text(0, y + 0.55, f"steps 07–13: Br = {a['block_m']}, Bc = {a['block_n']}, {a['warps']} warps",
            fontsize=8.5, weight="bold")
    draw_owner(ax, 0.0, y, a["block_m"], a["block_n"], dd["qk13"], sc,
               f"Q Kᵀ: a {a['block_m'] // 16} × {a['warps_n']} warp grid")
    draw_owner(ax, 4.6, y, a["block_m"], a["block_n"], dd["sm13"], sc,
               f"softmax: warp w owns rows {a['softmax_rows']}w … {a['softmax_rows']}w + {a['softmax_rows'] - 1}")
    draw_owner(ax, 9.2, y, a["block_m"], a["block_n"], dd["pv13"], sc,
               "P V: the two warps of a pair read the same P rows")
    for x in (3.3, 7.9):
        ax.annotate("", xy=(x + 1.15, y - 0.8), xytext=(x + 0.05, y - 0.8), arrowprops=dict(arrowstyle="->", lw=1.2))
    ax.text(3.85, y - 0.65, "S (fp32)\nthrough\nshared memory", ha="center", va="bottom", fontsize=6.5)
    ax.text(8.45, y - 0.65, "P (fp16)\nthrough\nshared memory", ha="center", va="bottom", fontsize=6.5)
    ax.text(4.6, y - a["block_m"] * sc - 0.35,
            f"a row's 64 logits come from two warps' registers; its max and sum are {dd['shfl13'] // 2} + "
            f"{dd['shfl13'] // 2} shuffles across the warp ({a['block_n'] // a['warp_size']} logits a lane)",
            fontsize=7)
    # step 14
    y = 3.75
    ax.text(0, y + 0.55, f"step 14: Br = {b['block_m']}, Bc = {b['block_n']}, {b['warps']} warps "
            f"(warps 0–{b['row_warps'] - 1} compute S, all {b['warps']} P V)", fontsize=8.5, weight="bold")
    draw_owner(ax, 0.0, y, b["block_m"], b["block_n"], dd["qk14"], sc, "")
    ax.text(1.6, y + 0.15, f"Q Kᵀ and softmax: warp w owns rows 16w … 16w + 15, all {b['block_n']} keys",
            ha="center", va="bottom", fontsize=7.2)
    draw_owner(ax, 9.2, y, b["block_m"], b["block_n"], dd["pv14"], sc,
               f"P V reads P: a {b['block_m'] // 16} × {b['warps_n']} grid")
    ax.annotate("", xy=(9.1, y - 1.2), xytext=(3.4, y - 1.2), arrowprops=dict(arrowstyle="->", lw=1.2))
    ax.text(6.25, y - 1.05, "S stays in registers: softmax on the C fragment\nP (fp16) through shared memory, once",
            ha="center", va="bottom", fontsize=7)
    ax.text(0, y - b["block_m"] * sc - 0.35,
            f"a row lives in one quad of one warp (lanes 4g … 4g + 3, {2 * (b['block_n'] // 8)} logits of the row a lane): "
            f"its max: the lane's own values, then {dd['shfl14']} shuffles (xor 1, xor 2); the sum's quad "
            "reduction waits for the end", fontsize=7)
    ax.set_xlim(-0.2, 12.3)
    ax.set_ylim(0.1, 7.5)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.suptitle("Step 14: which warp holds which part of the block's S (colour = warp; exact from the "
                 "kernels' constants and index formulas)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    save(fig, out, "part3-14-idea.png", made=made)

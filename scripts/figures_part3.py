#!/usr/bin/env python3
"""Part III's idea figures: one per chapter 07-15, each of that chapter's own change (matplotlib,
PNGs under docs/img/). scripts/figures.py draws the other Part III figure, part3-NN.png, the whole
series' measured bars; these are the schematics beside it.

Every figure is computed from the step's kernel file (steps/NN_*/...cu): the constants (Br, Bc,
warps, strides, rows per warp) and the index formulas are read from the source, and a constant or
a formula this script relies on that is no longer there stops it with the file and what is
missing. What each figure is:

  part3-07-idea.png  the bank map of two shared accesses of step 07: one ldmatrix phase on dense
                     256-byte rows against the XOR swizzle (v2/v3), and one half-warp of the S
                     fragment store with 64-float rows against 72-float rows (v5); wavefronts
                     counted with the bank model of lab L10 (labs/L10_staging_layout/model.hpp).
                     Exact arithmetic, not a measurement.
  part3-08-idea.png  one softmax row's dependent chain in step 07's v5 and step 08's v6 (the
                     operations of the source, in order), by unit; what V6 took off it.
                     Schematic.
  part3-09-idea.png  the softmax's issue slots on one scheduler, two rows in flight per warp
                     (step 07) against four (step 09), for one warp alone and for four warps
                     sharing the scheduler; a small in-order issue model with illustrative
                     latencies. A model, not a measurement.
  part3-10-idea.png  which lane reads which column of an S row and writes which of P, scalar
                     (step 09) against vec2 (step 10): instructions, bytes per instruction and
                     wavefronts per row (lab L10's bank model). Exact arithmetic.
  part3-11-idea.png  the Q Kᵀ k16 loop of step 11: issue order and live fragment registers of the
                     plain loop against the double-buffered one, and the specialized address
                     (the physical 16-byte chunk each lane row reads at each step). Schematic
                     and exact arithmetic.
  part3-12-idea.png  one row's exponentials before and after step 12's FFMA + EX2 rewrite (the
                     instruction sequence of each source form, per lane), and the FP32 counters
                     Nsight Compute measured for the two kernels (docs/results/h200/
                     2026-11-30-softmax-ncu.csv). Schematic, plus one measured panel.
  part3-13-idea.png  registers per thread against CTAs per SM: the register file's step function
                     at 128 threads per CTA (a model of sm_90's allocation) and shared memory's
                     limit, with every 128-thread kernel of steps 07-13 at its measured register
                     count (docs/results/h200/2026-11-30-softmax-series.json).
  part3-14-idea.png  who holds which rows of S: steps 07-13 (a 2 × 2 warp grid for Q Kᵀ, S through
                     shared memory, one softmax warp per 8 rows) against step 14 (a warp owns 16
                     whole rows in registers). Exact from the constants.
  part3-15-idea.png  the warps' roles over one key block in step 14 and step 15: who computes,
                     who waits at which barrier, who issues which cp.async. Durations schematic;
                     barriers and copy passes from the source.

    scripts/figures_part3.py            # writes the nine PNGs
    scripts/figures_part3.py --check    # reads the sources and computes everything, writes nothing
    scripts/figures_part3.py --out DIR  # somewhere else
"""
import argparse
import csv
import json
import math
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
RESULTS = ROOT / "docs" / "results" / "h200"
SERIES = RESULTS / "2026-11-30-softmax-series.json"
NCU = RESULTS / "2026-11-30-softmax-ncu.csv"

STEPS = {
    7: "steps/07_v5_padded_staging/v5_padded_staging.cu",
    8: "steps/08_v6_deferred_scale/v6_deferred_scale.cu",
    9: "steps/09_v7_four_rows/v7_four_rows.cu",
    10: "steps/10_v8_vec2/v8_vec2.cu",
    11: "steps/11_v9_qk_address/v9_qk_address.cu",
    12: "steps/12_v10_fma_exp2/v10_fma_exp2.cu",
    13: "steps/13_v11_ablation/v11_ablation.cu",
    14: "steps/14_v12_row_owner/v12_row_owner.cu",
    15: "steps/15_v13_warp_specialized/v13_warp_specialized.cu",
}
FRAG = "common/device/mma_fragments.cuh"
SWIZZLE = "common/device/swizzle.cuh"

# Colours by unit: what the MIO queue carries (shared memory, shuffles, MUFU) against the FP32 pipe.
C_LDS = "#4c72b0"
C_SHFL = "#dd8452"
C_MUFU = "#c44e52"
C_FP32 = "#b0b0b0"
C_INT = "#8c8c8c"
C_MMA = "#55a868"
C_IDLE = "#f2f2f2"
WARP_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


# ---- reading the sources ---------------------------------------------------------------------------

_texts = {}


def source(rel):
    if rel not in _texts:
        path = ROOT / rel
        if not path.exists():
            sys.exit(f"figures_part3: {rel} does not exist")
        _texts[rel] = path.read_text()
    return _texts[rel]


def need(rel, pattern, what, flags=0):
    """The first match of `pattern` in file `rel`, or exit saying which constant or formula is gone."""
    m = re.search(pattern, source(rel), flags)
    if not m:
        sys.exit(f"figures_part3: {rel}: {what} not found (pattern {pattern!r}); update "
                 f"scripts/figures_part3.py to the kernel")
    return m


def need_text(rel, text, what):
    """Exit unless the literal `text` (whitespace-insensitive) is in file `rel`."""
    squash = lambda s: re.sub(r"\s+", " ", s)
    if squash(text) not in squash(source(rel)):
        sys.exit(f"figures_part3: {rel}: {what} not found (`{text}`); update scripts/figures_part3.py "
                 f"to the kernel")


def const_int(rel, name):
    """`static constexpr int NAME = <integer>;` (or `constexpr int NAME = <integer>;`) of file `rel`."""
    return int(need(rel, r"constexpr\s+int\s+" + name + r"\s*=\s*(\d+)\s*;", f"the constant {name}").group(1))


def config(step):
    """The Config constants of step `step` that the figures use, read from its file."""
    rel = STEPS[step]
    c = {"rel": rel, "warp_size": const_int(rel, "kWarpSize"), "block_m": const_int(rel, "kBlockM"),
         "block_n": const_int(rel, "kBlockN"), "warps": const_int(rel, "kWarps")}
    c["threads"] = c["warps"] * c["warp_size"]
    need_text(rel, "static constexpr int kThreads = kWarps * kWarpSize;", "kThreads")
    return c


def frag_maps():
    """Lane → (row, col) of ldmatrix's A and B operands, and the quad layout, from mma_fragments.cuh."""
    need_text(FRAG, "int ldsm_a_row(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }", "ldsm_a_row")
    need_text(FRAG, "int ldsm_a_col(int lane) { return (lane >> 4) * 8; }", "ldsm_a_col")
    need_text(FRAG, "int ldsm_b_row(int lane) { return (lane & 7) + (lane >> 4) * 8; }", "ldsm_b_row")
    need_text(FRAG, "int ldsm_b_col(int lane) { return ((lane >> 3) & 1) * 8; }", "ldsm_b_col")
    need_text(FRAG, "int group_of(int lane) { return lane >> 2; }", "group_of")
    need_text(FRAG, "int thread_in_group(int lane) { return lane & 3; }", "thread_in_group")
    return dict(a_row=lambda l: (l & 7) + ((l >> 3) & 1) * 8, a_col=lambda l: (l >> 4) * 8,
                b_row=lambda l: (l & 7) + (l >> 4) * 8, b_col=lambda l: ((l >> 3) & 1) * 8,
                g=lambda l: l >> 2, t=lambda l: l & 3)


def xor_col():
    """swizzle.cuh's xor_col(col, row8), checked against the header's expression."""
    need_text(SWIZZLE, "return ((chunk & ~kLowChunkMask) << 3) + (((chunk & kLowChunkMask) ^ row8) << 3) + (col & 7);",
              "xor_col's expression")
    return lambda col, row8: (((col >> 3) & ~7) << 3) + ((((col >> 3) & 7) ^ row8) << 3) + (col & 7)


# ---- lab L10's bank model ----------------------------------------------------------------------------

def wavefronts(addresses, width, ldmatrix=False):
    """Wavefronts one warp-wide shared access needs: lane groups of 128 bytes of requests (all 32 lanes
    for ≤ 4-byte accesses, half-warps for 8, quarter-warps for 16, ldmatrix's 8-lane phases), each
    needing as many wavefronts as the most different 4-byte words one bank serves to it."""
    group = 8 if ldmatrix else max(1, 128 // max(width, 4))
    group = min(group, 32)
    total = 0
    for start in range(0, len(addresses), group):
        banks = {}
        for a in addresses[start:start + group]:
            for byte in range(a, a + max(width, 1), 4) if width >= 4 else [a]:
                word = byte // 4
                banks.setdefault(word % 32, set()).add(word)
        total += max(len(words) for words in banks.values())
    return total


# ---- drawing helpers -----------------------------------------------------------------------------------

def plt_module():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def box(ax, x, y, w, h, color, text="", fontsize=7, hatch=None, tcolor="black", lw=0.6, alpha=1.0):
    from matplotlib.patches import Rectangle
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", lw=lw, hatch=hatch,
                           alpha=alpha))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, color=tcolor)


def legend_patches(ax, items, **kw):
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(facecolor=c, edgecolor="black", lw=0.5, label=l) for l, c in items], **kw)


def save(fig, out, name, made):
    fig.savefig(out / name, dpi=110)
    plt_module().close(fig)
    made.append(name)


# ---- 07: the bank maps ----------------------------------------------------------------------------------

def data_07():
    c = config(7)
    rel = c["rel"]
    f = frag_maps()
    swz = xor_col()
    d = 128  # the series' head dimension
    need(rel, r"kSStride\s*=\s*\(kFeatures & kPaddedS\)\s*\?\s*kBlockN \+ (\d+)\s*:\s*kBlockN\s*;", "kSStride")
    pad = int(need(rel, r"kSStride\s*=\s*\(kFeatures & kPaddedS\)\s*\?\s*kBlockN \+ (\d+)", "the S padding").group(1))
    need_text(rel, "s_s + (row0 + g + 8 * h) * C::kSStride + key0 + 8 * j + 2 * t", "the S staging store's index")
    need_text(rel, "row0 + frag::ldsm_a_row(lane), kk * 16 + frag::ldsm_a_col(lane)", "Q's ldmatrix coordinates")
    need_text(rel, "if constexpr (kSwizzled) return row * kStride + ladder::swizzle::xor_col(col, row & 7);",
              "tile_offset's swizzle")

    # One ldmatrix.x4 of Q (warp 0, k16 step 0), dense and swizzled: byte address per lane.
    def ldsm(swizzled):
        out = []
        for lane in range(32):
            row, col = f["a_row"](lane), f["a_col"](lane)
            off = row * d + (swz(col, row & 7) if swizzled else col)
            out.append(off * 2)
        return out

    # The S store of n8 tile j = 0, h = 0, warp 0 (row0 = key0 = 0): byte address per lane.
    def s_store(stride):
        return [((f["g"](l)) * stride + 2 * f["t"](l)) * 4 for l in range(32)]

    dense, swizzled = ldsm(False), ldsm(True)
    s64, s72 = s_store(c["block_n"]), s_store(c["block_n"] + pad)
    return dict(c=c, d=d, pad=pad, ldsm={"dense": dense, "swizzled": swizzled},
                wf_ldsm={k: wavefronts(v, 16, ldmatrix=True) for k, v in (("dense", dense), ("swizzled", swizzled))},
                store={c["block_n"]: s64, c["block_n"] + pad: s72},
                wf_store={c["block_n"]: wavefronts(s64, 8), c["block_n"] + pad: wavefronts(s72, 8)})


def fig_07(out, made):
    plt = plt_module()
    dd = data_07()
    c, d = dd["c"], dd["d"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.4), gridspec_kw=dict(width_ratios=[1, 2.2]))
    # ldmatrix phase 0 (lanes 0-7): which of the 8 bank groups (16 bytes = 4 banks each) each row hits.
    for ax, key, title in ((axes[0][0], "dense", f"v1, v2: dense rows of {2 * d} bytes"),
                           (axes[1][0], "swizzled", "v3 on: chunk c of row r at c ⊕ (r mod 8)")):
        addr = dd["ldsm"][key]
        for lane in range(8):
            group = (addr[lane] % 128) // 16
            box(ax, group, 7 - lane, 1, 1, WARP_COLORS[lane], f"lane {lane}", fontsize=6.5, tcolor="white")
        ax.set_xlim(0, 8)
        ax.set_ylim(0, 8)
        ax.set_xticks([i + 0.5 for i in range(8)])
        ax.set_xticklabels([f"{4 * i}–{4 * i + 3}" for i in range(8)], fontsize=6.5)
        ax.set_yticks([i + 0.5 for i in range(8)])
        ax.set_yticklabels([f"row {7 - i}" for i in range(8)], fontsize=6.5)
        ax.set_xlabel("banks (one 16-byte bank group per column)", fontsize=7)
        ax.grid(True, color="#dddddd", lw=0.5)
        ax.set_axisbelow(True)
        wf = dd["wf_ldsm"][key]
        ax.set_title(f"ldmatrix.x4 of Q, phase 0 (lanes 0–7)\n{title}\n{wf // 4} wavefront"
                     f"{'s' if wf > 4 else ''} a phase, {wf} for the instruction", fontsize=8)
    # The S store, half-warp 0 (lanes 0-15): 8 bytes each, rows g = 0..3.
    for ax, stride in ((axes[0][1], c["block_n"]), (axes[1][1], c["block_n"] + dd["pad"])):
        addr = dd["store"][stride]
        for lane in range(16):
            bank = (addr[lane] // 4) % 32
            g = lane >> 2
            box(ax, bank, 3 - g, 2, 1, WARP_COLORS[g], f"lane {lane}", fontsize=6.5, tcolor="white")
        ax.set_xlim(0, 32)
        ax.set_ylim(0, 4)
        ax.set_xticks([i + 0.5 for i in range(0, 32, 2)])
        ax.set_xticklabels([str(i) for i in range(0, 32, 2)], fontsize=6.5)
        ax.set_yticks([i + 0.5 for i in range(4)])
        ax.set_yticklabels([f"row g={3 - i}" for i in range(4)], fontsize=6.5)
        ax.set_xlabel("bank (4 bytes each); a lane's float2 covers two banks", fontsize=7)
        ax.grid(True, color="#dddddd", lw=0.5)
        ax.set_axisbelow(True)
        wf = dd["wf_store"][stride]
        name = "v1–v4" if stride == c["block_n"] else "v5"
        ax.set_title(f"S fragment store (8 bytes a lane), lanes 0–15 of one instruction\n{name}: rows of "
                     f"{stride} floats ({4 * stride} bytes): {wf // 2} wavefront{'s' if wf > 2 else ''} a "
                     f"half-warp, {wf} for the instruction", fontsize=8)
    fig.suptitle("Step 07: where one shared-memory instruction's lanes land among the 32 banks "
                 "(addresses from the kernel's index formulas; wavefronts by lab L10's bank model)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    save(fig, out, "part3-07-idea.png", made)



# ---- 08: the softmax's dependent chain ----------------------------------------------------------------

def shuffle_steps(rel):
    """log2(kWarpSize): the butterfly `for (offset = kWarpSize / 2; offset > 0; offset /= 2)`."""
    need_text(rel, "for (int offset = kWarpSize / 2; offset > 0; offset /= 2)", "the 5-step shuffle loop")
    return int(math.log2(const_int(rel, "kWarpSize")))


def data_08():
    r7, r8 = STEPS[7], STEPS[8]
    n = shuffle_steps(r7)
    if shuffle_steps(r8) != n:
        sys.exit("figures_part3: steps 07 and 08 reduce over different warp sizes")
    need_text(r7, "x[r][c] = s_s[row * C::kSStride + col] * scale;", "step 07's scale on load")
    need_text(r7, "p[r][0] = __expf(x[r][0] - m_new[r]);", "step 07's exponential")
    need_text(r7, "s_sum[row] = s_sum[row] * __expf(m_old[r] - m_new[r]) + sum[r];", "step 07's sum update")
    need_text(r7, "const float rescale = __expf(s_max_prev[row] - s_max[row]);", "step 07's P V rescale")
    need_text(r8, "x[r][c] = s_s[row * C::kSStride + col];", "step 08's raw load")
    need_text(r8, "p[r][0] = ptx::exp2_approx(fmaf(x[r][0], scale_log2, -m_scaled));", "step 08's exponential")
    need_text(r8, "s_sum[row] = fmaf(s_sum[row], rescale, sum[r]);", "step 08's sum update")
    need_text(r8, "const float rescale = s_rescale[row];", "step 08's P V rescale read")
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
    plt = plt_module()
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
    save(fig, out, "part3-08-idea.png", made)


# ---- an in-order issue model (09, 11) -----------------------------------------------------------------

# Illustrative latencies in issue slots, for the drawings only (not measurements): an FP32 or integer
# operation, a shared load, a shuffle, a MUFU operation, an ldmatrix, an mma.
LATENCY = {"alu": 4, "lds": 24, "shfl": 24, "mufu": 16, "ldsm": 24, "mma": 16, "sts": 1}
CLASS_COLOR = {"alu": C_FP32, "lds": C_LDS, "sts": C_LDS, "shfl": C_SHFL, "mufu": C_MUFU, "ldsm": C_LDS,
               "mma": C_MMA}


def simulate(programs):
    """programs: one list per warp of (name, class, [indices of the instructions it depends on]). One
    scheduler issues at most one instruction a slot, in order within a warp, choosing among the warps
    whose next instruction has its operands the one that issued least recently. Returns per warp the
    issue slot of every instruction, and the slot at which the last result is ready."""
    n = len(programs)
    pc = [0] * n
    issue = [[None] * len(p) for p in programs]
    ready = [[None] * len(p) for p in programs]
    last = [-1] * n
    t = 0
    while any(pc[w] < len(programs[w]) for w in range(n)):
        cands = []
        for w in range(n):
            if pc[w] >= len(programs[w]):
                continue
            _, _, deps = programs[w][pc[w]]
            if all(ready[w][d] is not None and ready[w][d] <= t for d in deps):
                cands.append((last[w], w))
        if cands:
            _, w = min(cands)
            i = pc[w]
            issue[w][i] = t
            ready[w][i] = t + LATENCY[programs[w][i][1]]
            last[w] = t
            pc[w] += 1
        t += 1
    end = max(max(r) for r in ready if r)
    return issue, end


def softmax_program(rows_at_once, rows, shuffles, cols=2):
    """One softmax warp's instructions for its `rows` rows, `rows_at_once` interleaved, in the order
    of step 07's / 09's source: the loads and the scale, the max's shuffle chain, the exponentials,
    the sum's shuffle chain, the stores of P (lane 0's statistics left out)."""
    prog = []

    def emit(name, cls, deps):
        prog.append((name, cls, list(deps)))
        return len(prog) - 1

    R = range(rows_at_once)
    for _ in range(rows // rows_at_once):
        # Each phase for all the pass's rows before the next phase: the order the compiler gives the
        # unrolled `for r` loops (an in-order warp would otherwise wait on row 0 before row 1's shuffle).
        lds = {r: [emit("LDS", "lds", []) for _ in range(cols)] for r in R}
        xs = {r: [emit("FMUL", "alu", [l]) for l in lds[r]] for r in R}
        m = {r: emit("FMNMX", "alu", xs[r]) for r in R}
        for _ in range(shuffles):
            sh = {r: emit("SHFL", "shfl", [m[r]]) for r in R}
            m = {r: emit("FMNMX", "alu", [m[r], sh[r]]) for r in R}
        mo = {r: emit("LDS", "lds", []) for r in R}
        mn = {r: emit("FMNMX", "alu", [mo[r], m[r]]) for r in R}
        d = {r: [emit("FADD", "alu", [x, mn[r]]) for x in xs[r]] for r in R}
        d = {r: [emit("FMUL", "alu", [x]) for x in d[r]] for r in R}
        ps = {r: [emit("EX2", "mufu", [x]) for x in d[r]] for r in R}
        sm = {r: emit("FADD", "alu", ps[r]) for r in R}
        for _ in range(shuffles):
            sh = {r: emit("SHFL", "shfl", [sm[r]]) for r in R}
            sm = {r: emit("FADD", "alu", [sm[r], sh[r]]) for r in R}
        for r in R:
            for p in ps[r]:
                emit("STS", "sts", [p])
    return prog


def data_09():
    r7, r9 = STEPS[7], STEPS[9]
    need_text(r7, "static constexpr int kRowsAtOnce = (kFeatures & kTwoRows) ? 2 : 1;", "step 07's rows at once")
    need_text(r9, "static constexpr int kRowsAtOnce = (kFeatures & kFourRows) ? 4 : (kFeatures & kTwoRows) ? 2 : 1;",
              "step 09's rows at once")
    need_text(r9, "static constexpr int kSoftmaxRows = kBlockM / kWarps;", "rows per softmax warp")
    c = config(9)
    rows = c["block_m"] // c["warps"]
    shuffles = shuffle_steps(r9)
    ctas = [r["kernels"][0]["blocks_per_sm"] for r in series_rows() if r["id"] == "09/v7"]
    if not ctas:
        sys.exit(f"figures_part3: {SERIES}: no 09/v7 row")
    schedulers = 4  # sm_90: four warp schedulers per SM
    per_scheduler = ctas[0] * c["warps"] // schedulers
    out = {}
    for r_at_once in (2, 4):
        prog = softmax_program(r_at_once, rows, shuffles)
        for warps in (1, per_scheduler):
            issue, end = simulate([prog] * warps)
            out[(r_at_once, warps)] = dict(prog=prog, issue=issue, end=end)
    return dict(rows=rows, shuffles=shuffles, per_scheduler=per_scheduler, ctas=ctas[0], sim=out)


def draw_issue(ax, prog, issue, y0=0, height=0.8):
    from matplotlib.patches import Rectangle
    for w, slots in enumerate(issue):
        for (name, cls, _), t in zip(prog, slots):
            ax.add_patch(Rectangle((t, y0 + w), 1, height, facecolor=CLASS_COLOR[cls], edgecolor="none"))


def fig_09(out, made):
    plt = plt_module()
    dd = data_09()
    per = dd["per_scheduler"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 5.4), gridspec_kw=dict(height_ratios=[1, per]))
    xmax = max(v["end"] for v in dd["sim"].values()) + 5
    for col, r_at_once in enumerate((2, 4)):
        for row, warps in enumerate((1, per)):
            ax = axes[row][col]
            s = dd["sim"][(r_at_once, warps)]
            draw_issue(ax, s["prog"], s["issue"])
            ax.set_xlim(0, xmax)
            ax.set_ylim(0, warps)
            ax.set_yticks([w + 0.4 for w in range(warps)])
            ax.set_yticklabels([f"warp {w}" for w in range(warps)], fontsize=6.5)
            ax.tick_params(axis="x", labelsize=6.5)
            busy = sum(len(p) for p in s["issue"])
            step = "step 07 (v4, v5)" if r_at_once == 2 else "step 09 (v7)"
            ax.set_title(f"{step}: {r_at_once} rows at once, {warps} warp{'s' if warps > 1 else ''} on the "
                         f"scheduler: done at slot {s['end']}, issuing {100 * busy / s['end']:.0f}% of slots",
                         fontsize=7.5)
    for ax in axes[1]:
        ax.set_xlabel("issue slot of one scheduler (model)", fontsize=7)
    legend_patches(axes[0][1], [("LDS / STS", C_LDS), ("SHFL", C_SHFL), ("MUFU.EX2", C_MUFU), ("FP32", C_FP32)],
                   loc="upper right", fontsize=6.5, ncol=4, frameon=False, bbox_to_anchor=(1.0, -0.25))
    fig.suptitle(f"Step 09: a softmax warp's {dd['rows']} rows ({dd['shuffles']}-step shuffle chains for the max "
                 f"and the sum) in an in-order issue model; {dd['ctas']} CTAs × 4 warps per SM put {per} warps "
                 "on each of its 4 schedulers", fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    save(fig, out, "part3-09-idea.png", made)


# ---- 10: scalar against vec2 ---------------------------------------------------------------------------

def data_10():
    r9, r10 = STEPS[9], STEPS[10]
    ws = const_int(r9, "kWarpSize")
    bn = const_int(r9, "kBlockN")
    need_text(r9, "const int col = lane + kWarpSize * c;", "step 09's column of a lane")
    need_text(r9, "s_p[tile_offset<C::kSwizzledPv, C::kPStride>(row, lane + kWarpSize * c)] =", "step 09's P store")
    need_text(r10, "const int col = 2 * lane;", "step 10's column pair of a lane")
    need_text(r10, "const float2 pair = *reinterpret_cast<const float2*>(s_s + row * C::kSStride + col);",
              "step 10's float2 load")
    need_text(r10, "*reinterpret_cast<__half2*>(s_p + tile_offset<C::kSwizzledPv, C::kPStride>(row, 2 * lane)) =",
              "step 10's half2 store")
    if bn // ws != 2:
        sys.exit("figures_part3: step 09/10: expected two columns per lane")
    # Row 0 of S (fp32) and P (fp16, row 0: the swizzle is the identity there): per instruction, the
    # column of every lane.
    scalar_s = [[lane + ws * c for lane in range(ws)] for c in range(2)]
    vec_s = [[2 * lane for lane in range(ws)]]
    v = {}
    v["09"] = dict(s=[(cols, 4) for cols in scalar_s], p=[(cols, 2) for cols in scalar_s])
    v["10"] = dict(s=[(cols, 8) for cols in vec_s], p=[(cols, 4) for cols in vec_s])
    for k in v:
        v[k]["wf_s"] = sum(wavefronts([c * 4 for c in cols], w) for cols, w in v[k]["s"])
        v[k]["wf_p"] = sum(wavefronts([c * 2 for c in cols], w) for cols, w in v[k]["p"])
    return dict(ws=ws, bn=bn, v=v)


def fig_10(out, made):
    plt = plt_module()
    dd = data_10()
    bn = dd["bn"]
    fig, axes = plt.subplots(2, 1, figsize=(12, 5.6))
    inst_colors = ["#4c72b0", "#dd8452"]
    for ax, key, title in ((axes[0], "09", "step 09 (scalar): lane l holds columns l and l + 32"),
                           (axes[1], "10", "step 10 (vec2): lane l holds columns 2l and 2l + 1")):
        v = dd["v"][key]
        for y, what, elem in ((1.3, "s", 4), (0.0, "p", 2)):
            owner = {}
            for i, (cols, w) in enumerate(v[what]):
                for lane, col in enumerate(cols):
                    for e in range(w // elem):
                        owner[col + e] = (i, lane)
            for col in range(bn):
                i, lane = owner[col]
                box(ax, col, y, 1, 0.9, inst_colors[i], str(lane), fontsize=5.2, tcolor="white", lw=0.3)
        n_s, n_p = len(v["s"]), len(v["p"])
        ws, wp = v["s"][0][1], v["p"][0][1]
        ax.text(bn + 1, 1.75, f"S row ({4 * bn} bytes): {n_s} LDS of {ws} bytes a lane,\n"
                f"{v['wf_s']} wavefronts", fontsize=7.5, va="center")
        ax.text(bn + 1, 0.45, f"P row ({2 * bn} bytes): {n_p} STS of {wp} bytes a lane,\n"
                f"{v['wf_p']} wavefront{'s' if v['wf_p'] > 1 else ''}", fontsize=7.5, va="center")
        ax.text(-0.5, 1.75, "S", fontsize=9, ha="right", va="center", weight="bold")
        ax.text(-0.5, 0.45, "P", fontsize=9, ha="right", va="center", weight="bold")
        ax.set_title(f"{title}: per row and lane {n_s + n_p} shared-memory instructions, "
                     f"{v['wf_s'] + v['wf_p']} wavefronts per row", fontsize=8.5)
        ax.set_xlim(-2, bn + 20)
        ax.set_ylim(-0.2, 2.4)
        ax.set_yticks([])
        ax.set_xticks(range(0, bn + 1, 8))
        ax.tick_params(labelsize=7)
        for s in ("top", "right", "left"):
            ax.spines[s].set_visible(False)
    axes[1].set_xlabel("column of the row (the number in a cell is the lane that reads or writes it; "
                       "colour = which of the lane's instructions)", fontsize=7.5)
    fig.suptitle("Step 10: one softmax row's shared-memory accesses, scalar against vec2 (row 0; "
                 "columns from the kernels' index expressions, wavefronts by lab L10's bank model)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    save(fig, out, "part3-10-idea.png", made)


# ---- 11: the Q Kᵀ k16 loop ---------------------------------------------------------------------------

def qk_program(steps, k_loads, pipelined):
    """One warp's k16 loop of Q Kᵀ: per step one ldmatrix.x4 of Q (A), `k_loads` of K (B), two mma per
    K load, each accumulator's mma depending on its previous step's. Plain: step kk's loads then its
    mma (the source's order); pipelined: step kk + 1's loads issued before step kk's mma."""
    prog = []

    def emit(name, cls, deps):
        prog.append((name, cls, list(deps)))
        return len(prog) - 1

    acc = [None] * (2 * k_loads)

    def loads():
        return emit("LDSM A", "ldsm", []), [emit("LDSM B", "ldsm", []) for _ in range(k_loads)]

    def mmas(a, bs):
        for np_ in range(k_loads):
            for h in range(2):
                j = 2 * np_ + h
                acc[j] = emit("HMMA", "mma", [a, bs[np_]] + ([acc[j]] if acc[j] is not None else []))

    if pipelined:
        nxt = loads()
        for kk in range(steps):
            cur = nxt
            if kk + 1 < steps:
                nxt = loads()
            mmas(*cur)
    else:
        for kk in range(steps):
            mmas(*loads())
    return prog


def data_11():
    r11 = STEPS[11]
    f = frag_maps()
    d = 128
    steps = d // 16
    need_text(r11, "static constexpr int kDSteps = kHeadDim / 16;", "the k16 steps")
    need_text(r11, "constexpr int kKTiles = C::kQkTiles / 2;", "K loads per step")
    need_text(r11, "static constexpr int kQkCols = kBlockN / kWarpsN;", "keys per warp")
    need_text(r11, "ptx::ldmatrix_x4(a, a_base + (((2 * kk + a_chunk) ^ a_xor) << 3));", "the specialized A address")
    need_text(r11, "if (kk + 1 < C::kDSteps) load_b(b[ib ^ 1], kk + 1);", "the double-buffered K fragment")
    bn, wn = const_int(r11, "kBlockN"), const_int(r11, "kWarpsN")
    k_loads = bn // wn // 8 // 2
    regs = dict(plain=4 + 4 * k_loads, pipelined=2 * (4 + 4 * k_loads))
    sims = {}
    for key, piped in (("plain", False), ("pipelined", True)):
        prog = qk_program(steps, k_loads, piped)
        issue, end = simulate([prog])
        sims[key] = dict(prog=prog, issue=issue, end=end)
    # The specialized address: lane rows 0..15 of A (a_row), chunk a_chunk; physical chunk per step.
    table = [[(2 * kk + (f["a_col"](lane) >> 3)) ^ (f["a_row"](lane) & 7) for kk in range(steps)]
             for lane in range(32)]
    return dict(steps=steps, k_loads=k_loads, regs=regs, sims=sims, table=table, f=f)


def fig_11(out, made):
    plt = plt_module()
    dd = data_11()
    fig = plt.figure(figsize=(12, 5.8))
    gs = fig.add_gridspec(2, 2, width_ratios=[1.7, 1], height_ratios=[1, 1])
    xmax = max(s["end"] for s in dd["sims"].values()) + 5
    for row, key in enumerate(("plain", "pipelined")):
        ax = fig.add_subplot(gs[row, 0])
        s = dd["sims"][key]
        from matplotlib.patches import Rectangle
        names = ["LDSM A", "LDSM B", "HMMA"]
        for (name, cls, _), t in zip(s["prog"], s["issue"][0]):
            y = names.index(name)
            ax.add_patch(Rectangle((t, 2 - y + 0.15), 1.6, 0.7, facecolor=CLASS_COLOR[cls], edgecolor="black", lw=0.3))
        ax.set_xlim(0, xmax)
        ax.set_ylim(0, 3)
        ax.set_yticks([2.5, 1.5, 0.5])
        ax.set_yticklabels([f"ldmatrix.x4 of Q", f"ldmatrix.x4 of K ({dd['k_loads']} a step)", "mma m16n8k16"],
                           fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
        what = ("plain (10/v8, qkspecialized): step kk's loads, then its mma" if key == "plain" else
                "qkfragpipe: step kk + 1's loads before step kk's mma")
        ax.set_title(f"{what}\n{dd['regs'][key]} fragment registers a thread; the {dd['steps']} steps done at slot "
                     f"{s['end']} (one warp alone, in order, as written)", fontsize=7.5)
        if row == 1:
            ax.set_xlabel("issue slot (model with illustrative latencies)", fontsize=7)
    ax = fig.add_subplot(gs[:, 1])
    lanes = list(range(16))  # lanes 16-31 repeat the rows with chunk + 1
    tab = [dd["table"][l] for l in lanes]
    ax.imshow(tab, cmap="tab20", vmin=0, vmax=20, aspect="auto")
    for i, l in enumerate(lanes):
        for kk in range(dd["steps"]):
            ax.text(kk, i, str(tab[i][kk]), ha="center", va="center", fontsize=6.5, color="black")
    ax.set_xticks(range(dd["steps"]))
    ax.set_xticklabels([str(k) for k in range(dd["steps"])], fontsize=7)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"lane {l}: row {dd['f']['a_row'](l)}" for l in lanes], fontsize=6.5)
    ax.set_xlabel("k16 step kk", fontsize=7)
    ax.set_title("qkspecialized: the 16-byte chunk of its Q row a lane reads\nat step kk = (2·kk + c) ⊕ (row mod 8): "
                 "one add and one xor\n(lanes 0–15, c = 0; lanes 16–31 read chunk c = 1)", fontsize=7.5)
    fig.suptitle("Step 11: the operand path of Q Kᵀ, fragment pipelining against specialized addresses", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    save(fig, out, "part3-11-idea.png", made)


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
    need_text(r11, "p[r][0] = __expf(x[r][0] - m_new[r]);", "step 11's numerator")
    need_text(r11, "s_sum[row] = s_sum[row] * __expf(m_old[r] - m_new[r]) + sum[r];", "step 11's sum update")
    need_text(r11, "const float rescale = __expf(s_max_prev[row] - s_max[row]);", "step 11's P V rescale")
    need_text(r12, "const float m_log2 = m_new[r] * kLog2e;", "step 12's m·log2e once per row")
    need_text(r12, "p[r][0] = ptx::exp2_approx(fmaf(x[r][0], kLog2e, -m_log2));", "step 12's numerator")
    need_text(r12, "const float rescale = ptx::exp2_approx(fmaf(m_old[r], kLog2e, -m_new[r] * kLog2e));",
              "step 12's sum rescale")
    need_text(r12, "s_sum[row] = fmaf(s_sum[row], rescale, sum[r]);", "step 12's FFMA sum")
    need_text(r12, "const float rescale = ptx::exp2_approx(fmaf(s_max_prev[row], kLog2e, -s_max[row] * kLog2e));",
              "step 12's P V rescale")
    cols = const_int(r12, "kWarpSize")  # kColsPerLane = kBlockN / kWarpSize
    cols = const_int(r12, "kBlockN") // cols
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
    plt = plt_module()
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
    save(fig, out, "part3-12-idea.png", made)


# ---- 13: the register budget -------------------------------------------------------------------------

# sm_90's per-SM resources as the CUDA occupancy calculator models them (compute capability 9.0):
# 65,536 32-bit registers, allocated per warp in units of 256; at most 64 resident warps; 228 KB of
# shared memory, of which each CTA also takes 1 KB the system reserves.
SM90 = dict(regs=65536, reg_unit=256, max_warps=64, max_ctas=32, smem=228 * 1024, smem_reserved=1024)


def ctas_by_registers(regs, threads, hw=SM90):
    per_warp = math.ceil(regs * 32 / hw["reg_unit"]) * hw["reg_unit"]
    warps = min(hw["regs"] // per_warp, hw["max_warps"])
    return warps // (threads // 32)


def ctas_by_smem(smem, hw=SM90):
    return hw["smem"] // (smem + hw["smem_reserved"])


def series_rows():
    if not SERIES.exists():
        sys.exit(f"figures_part3: {SERIES} does not exist")
    doc = json.loads(SERIES.read_text())
    runs = [r for r in doc["runs"] if not r["shape"]["causal"]]
    if not runs:
        sys.exit(f"figures_part3: {SERIES}: no non-causal run")
    return runs[0]["rows"]


def data_13():
    r13 = STEPS[13]
    need_text(r13, "__launch_bounds__(C::kThreads)", "the kernel's launch bounds")
    threads = config(13)["threads"]
    kernels = []
    for row in series_rows():
        step = int(row["id"][:2])
        if not 7 <= step <= 13:
            continue
        k = row["kernels"][0]  # the non-causal kernel
        if k["threads"] != threads:
            sys.exit(f"figures_part3: {row['id']} runs {k['threads']} threads, step 13 {threads}")
        by_regs, by_smem = ctas_by_registers(k["registers"], threads), ctas_by_smem(k["dynamic_smem"])
        model = min(by_regs, by_smem)
        if model != k["blocks_per_sm"]:
            sys.exit(f"figures_part3: {row['id']}: the occupancy model says {model} CTAs per SM, the "
                     f"measured file {k['blocks_per_sm']}; the model is wrong")
        kernels.append(dict(id=row["id"], regs=k["registers"], smem=k["dynamic_smem"], ctas=k["blocks_per_sm"],
                            by_regs=by_regs, by_smem=by_smem))
    if not any(k["id"] == "13/v11" for k in kernels):
        sys.exit(f"figures_part3: {SERIES}: no 13/v11 row")
    steps = [(r, ctas_by_registers(r, threads)) for r in range(64, 169)]
    return dict(threads=threads, kernels=kernels, steps=steps)


def fig_13(out, made):
    plt = plt_module()
    dd = data_13()
    fig, ax = plt.subplots(figsize=(10.5, 4.8))
    rs = [r for r, _ in dd["steps"]]
    cs = [c for _, c in dd["steps"]]
    ax.step(rs, cs, where="post", color="black", lw=1.2,
            label=f"CTAs of {dd['threads']} threads the register file holds (model, sm_90)")
    smem = max(k["by_smem"] for k in dd["kernels"])
    ax.axhline(smem + 0.04, color=C_LDS, lw=1.2, ls="--",
               label=f"CTAs shared memory holds at {max(k['smem'] for k in dd['kernels']):,} bytes a CTA (model)")
    cliff = max(r for r, c in dd["steps"] if c >= smem)
    ax.axvline(cliff + 0.5, color=C_MUFU, lw=0.8, ls=":")
    ax.text(cliff + 1.5, 5.6, f"the cliff: above {cliff} registers a thread,\n{smem - 1} CTAs per SM instead of {smem}",
            fontsize=7.5, color=C_MUFU, va="top")
    ks = dd["kernels"]
    for k in ks:
        color = C_MUFU if k["id"].startswith("13/") else (C_LDS if k["id"] == "12/v10" else "#999999")
        ax.plot(k["regs"], k["ctas"], "o", ms=6 if color != "#999999" else 4, color=color, zorder=3,
                alpha=0.8)
    # One label per register count of the chapter's kernels (and v1, the lowest).
    labels = {}
    for k in ks:
        if k["id"].startswith(("12/", "13/")) or k["id"] == "07/v1":
            labels.setdefault(k["regs"], []).append(k["id"])
    for i, (regs, ids) in enumerate(sorted(labels.items())):
        ax.annotate(f"{', '.join(ids)}: {regs}", (regs, 4), xytext=(max(regs - 30 + 6 * i, 70), 2.9 - 0.55 * i),
                    fontsize=7, arrowprops=dict(arrowstyle="-", lw=0.5, color="#666666"))
    # The seed's B300 kernel, its own register counts (96 without, 122 with the second instantiation).
    for regs in (96, 122):
        ax.plot(regs, ctas_by_registers(regs, dd["threads"]) + 0.0, "x", color="black", ms=7, mew=1.5, zorder=4)
    ax.annotate("", xy=(122, ctas_by_registers(122, dd["threads"]) + 0.15),
                xytext=(96, ctas_by_registers(96, dd["threads"]) + 0.15),
                arrowprops=dict(arrowstyle="->", lw=0.8))
    ax.text(86, 5.35, "the seed's B300 kernel (its numbers): 96 → 122 registers\ncrosses a step of the register "
            "file, 5 → 4 CTAs", fontsize=7)
    ax.set_xlim(rs[0], rs[-1])
    ax.set_ylim(0, 9)
    ax.set_xlabel("registers per thread", fontsize=8)
    ax.set_ylabel("CTAs per SM", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, color="#eeeeee")
    ax.plot([], [], "o", color="#999999", label="steps 07–11's kernels (measured registers, D = 128)")
    ax.plot([], [], "o", color=C_LDS, label="12/v10")
    ax.plot([], [], "o", color=C_MUFU, label="13/v11 and 13/v11_ablation")
    ax.plot([], [], "x", color="black", label="the seed's B300 kernel (its register counts)")
    ax.legend(fontsize=7, loc="upper right")
    fig.suptitle("Step 13: the register budget. Every kernel of steps 07–13 sits at 4 CTAs per SM, "
                 "below the 128-register cliff, with shared memory allowing no fifth", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    save(fig, out, "part3-13-idea.png", made)


# ---- 14: who holds which rows of S ------------------------------------------------------------------

def data_14():
    r13, r14 = STEPS[13], STEPS[14]
    a, b = config(13), config(14)
    a["warps_n"] = const_int(r13, "kWarpsN")
    b["warps_n"] = const_int(r14, "kWarpsN")
    need_text(r13, "static constexpr int kSoftmaxRows = kBlockM / kWarps;", "step 13's softmax rows per warp")
    need_text(r13, "const int row0 = 16 * (warp / C::kWarpsN);", "step 13's Q Kᵀ rows of a warp")
    need_text(r13, "const int key0 = C::kQkCols * (warp % C::kWarpsN);", "step 13's Q Kᵀ keys of a warp")
    need_text(r13, "static constexpr int kQkCols = kBlockN / kWarpsN;", "step 13's keys per warp")
    need_text(r14, "static constexpr int kRowWarps = kBlockM / 16;", "step 14's row-owning warps")
    need_text(r14, "const int row0 = 16 * warp;", "step 14's Q Kᵀ rows of a warp")
    need_text(r14, "m_tile = frag::quad_max(m_tile);", "step 14's quad reduction")
    need_text(FRAG, "x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 1));", "quad_max's first shuffle")
    need_text(FRAG, "return fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));", "quad_max's second shuffle")
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
    plt = plt_module()
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
    save(fig, out, "part3-14-idea.png", made)


# ---- 15: the warps' roles over one key block --------------------------------------------------------

def loop_body(rel):
    m = need(rel, r"#pragma unroll 1\s*\n\s*for \(int block = 0; block < n_blocks; \+\+block\) \{(.*?)\n  \}\n",
             "the key-block loop", re.S)
    return m.group(1)


def data_15():
    r14, r15 = STEPS[14], STEPS[15]
    b14, b15 = loop_body(r14), loop_body(r15)
    bars = {14: b14.count("__syncthreads()"), 15: b15.count("__syncthreads()")}
    c = config(15)
    d = 128  # the series' head dimension (a template parameter of the kernel)
    row_warps = c["block_m"] // 16
    need_text(r15, "static constexpr int kLoaderThreads = kThreads - kRowWarps * kWarpSize;", "the loader threads")
    need_text(r15, "if (warp >= C::kRowWarps && has_next)", "the loaders' branch")
    loaders = c["threads"] - row_warps * c["warp_size"]
    rows_per_pass = lambda threads: threads // (d // 8)
    passes_all = c["block_n"] // rows_per_pass(c["threads"])
    passes_loaders = c["block_n"] // rows_per_pass(loaders)
    return dict(bars=bars, warps=c["warps"], row_warps=row_warps, loaders=loaders, d=d,
                passes_all=passes_all, passes_loaders=passes_loaders)


def fig_15(out, made):
    plt = plt_module()
    dd = data_15()
    W, R = dd["warps"], dd["row_warps"]
    QS, PV, CP = 6.0, 4.0, 0.8  # schematic durations: Q Kᵀ + softmax, P V, issuing one tile's cp.async
    fig, axes = plt.subplots(2, 1, figsize=(12, 6.2), sharex=True)

    def lane(ax, w, x, width, color, text="", hatch=None):
        box(ax, x, W - 1 - w + 0.1, width, 0.8, color, "" if hatch else text, fontsize=6.2, hatch=hatch,
            tcolor="white" if color in (C_MMA, C_LDS, C_MUFU) else "black")
        if hatch and text:
            ax.text(x + width / 2, W - 1 - w + 0.5, text, ha="center", va="center", fontsize=6.2,
                    bbox=dict(facecolor="white", edgecolor="none", pad=0.6))

    count = {}

    def barrier(ax, x, label):
        ax.axvline(x, color="black", lw=1.0)
        k = count[ax] = count.get(ax, 0) + 1
        ax.text(x, W + 0.05 + 0.35 * (k % 2), label, ha="center", va="bottom", fontsize=6.5)

    # step 14: wait<1>, sync | Q Kᵀ+softmax (warps 0-3) | sync | all: cp.async K | wait, sync | P V | sync | all: cp.async V
    ax = axes[0]
    x = 0.0
    for blk in range(2):
        barrier(ax, x, "sync 1")
        for w in range(W):
            if w < R:
                lane(ax, w, x, QS, C_MMA, "Q Kᵀ + softmax (S in registers)")
            else:
                lane(ax, w, x, QS, C_IDLE, "waits at the barrier", hatch="///")
        x += QS
        barrier(ax, x, "sync 2")
        for w in range(W):
            lane(ax, w, x, CP, C_LDS, "K")
        x += CP
        barrier(ax, x, "sync 3")
        for w in range(W):
            lane(ax, w, x, PV, C_MUFU, "P V")
        x += PV
        barrier(ax, x, "sync 4")
        for w in range(W):
            lane(ax, w, x, CP, C_LDS, "V")
        x += CP
    end14 = x
    ax.set_title(f"step 14: {dd['bars'][14]} barriers per key block; warps {R}–{W - 1} idle during Q Kᵀ and the "
                 f"softmax; every thread issues {dd['passes_all']} cp.async passes of K and {dd['passes_all']} of V",
                 fontsize=8)
    # step 15: wait<0>, sync | loaders: cp.async next V; row warps: Q Kᵀ+softmax | sync | all: K | P V | sync
    ax = axes[1]
    x = 0.0
    for blk in range(2):
        if blk == 0:
            barrier(ax, x, "sync 1")
        for w in range(W):
            if w < R:
                lane(ax, w, x, QS, C_MMA, "Q Kᵀ + softmax (S in registers)")
            else:
                lane(ax, w, x, 2 * CP, C_LDS, "next V")
                lane(ax, w, x + 2 * CP, QS - 2 * CP, C_IDLE, "waits at the barrier", hatch="///")
        x += QS
        barrier(ax, x, "sync 2")
        for w in range(W):
            lane(ax, w, x, CP, C_LDS, "K")
            lane(ax, w, x + CP, PV, C_MUFU, "P V (V's other buffer)")
        x += CP + PV
        barrier(ax, x, "sync 3" if blk else "sync 3 = the next sync 1")
    ax.set_title(f"step 15: {dd['bars'][15]} barriers per key block; warps {R}–{W - 1} issue the next block's V "
                 f"({dd['passes_loaders']} passes each, {dd['loaders']} loader threads) into a second buffer, "
                 f"then wait", fontsize=8)
    for ax in axes:
        ax.set_ylim(0, W + 0.9)
        ax.set_yticks([W - 1 - w + 0.5 for w in range(W)])
        ax.set_yticklabels([f"warp {w}" for w in range(W)], fontsize=7)
        ax.set_xticks([])
        for s in ("top", "right"):
            ax.spines[s].set_visible(False)
    axes[1].set_xlim(-0.3, end14 + 0.3)
    axes[1].set_xlabel("time, two key blocks (schematic: lengths are not measured; the order, the barriers "
                       "and who issues what are the kernels')", fontsize=7.5)
    legend_patches(axes[1], [("Q Kᵀ + softmax", C_MMA), ("P V", C_MUFU),
                             ("issuing cp.async", C_LDS), ("waiting at a barrier", C_IDLE)],
                   loc="lower right", fontsize=6.5, ncol=4, bbox_to_anchor=(1.0, -0.2), frameon=False)
    fig.suptitle("Step 15: warp specialization: what each warp of the CTA does in a key block", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    save(fig, out, "part3-15-idea.png", made)


# ---- main ----------------------------------------------------------------------------------------------

FIGURES = {ch: (globals()[f"data_{ch:02d}"], globals()[f"fig_{ch:02d}"]) for ch in range(7, 16)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="read the sources and compute, write nothing")
    ap.add_argument("--out", type=pathlib.Path, default=IMG)
    ap.add_argument("--only", type=int, nargs="*", help="chapters to draw (default: all)")
    args = ap.parse_args()
    chapters = args.only or sorted(FIGURES)
    if args.check:
        for ch in chapters:
            FIGURES[ch][0]()
        print(f"figures_part3: {len(chapters)} figure(s) computed from the sources")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    made = []
    for ch in chapters:
        FIGURES[ch][1](args.out, made)
    for name in made:
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Part III's idea figures of the models: the in-order issue model (chapters 09 and 11), sm_90's
occupancy model (chapter 13) and the warps' roles (chapter 15). Run by scripts/figures_part3.py,
whose docstring says what each figure shows; it reads the sources and results files with the
readers there.

  part3-09-idea.png  two rows in flight per warp (step 07) against four (step 09): issue slots.
  part3-11-idea.png  the Q Kᵀ k16 loop of step 11: issue order, live registers, the address.
  part3-13-idea.png  registers per thread against CTAs per SM, the kernels at their counts.
  part3-15-idea.png  the warps' roles over one key block in steps 14 and 15.
"""
import math
import re
import sys

from figlib import box, pyplot, save, source_constant, source_match, source_text
from figures_part3_common import (C_FP32, C_IDLE, C_LDS, C_MMA, C_MUFU, C_SHFL, SERIES, STEPS, config, frag_maps,
                           legend_patches, series_rows, shuffle_steps)


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
    source_text(r7, "static constexpr int kRowsAtOnce = (kFeatures & kTwoRows) ? 2 : 1;", "step 07's rows at once")
    source_text(r9, "static constexpr int kRowsAtOnce = (kFeatures & kFourRows) ? 4 : (kFeatures & kTwoRows) ? 2 : 1;",
              "step 09's rows at once")
    source_text(r9, "static constexpr int kSoftmaxRows = kBlockM / kWarps;", "rows per softmax warp")
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
    plt = pyplot()
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
    save(fig, out, "part3-09-idea.png", made=made)


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
    source_text(r11, "static constexpr int kDSteps = kHeadDim / 16;", "the k16 steps")
    source_text(r11, "constexpr int kKTiles = C::kQkTiles / 2;", "K loads per step")
    source_text(r11, "static constexpr int kQkCols = kBlockN / kWarpsN;", "keys per warp")
    source_text(r11, "ptx::ldmatrix_x4(a, a_base + (((2 * kk + a_chunk) ^ a_xor) << 3));", "the specialized A address")
    source_text(r11, "if (kk + 1 < C::kDSteps) load_b(b[ib ^ 1], kk + 1);", "the double-buffered K fragment")
    bn, wn = source_constant(r11, "kBlockN"), source_constant(r11, "kWarpsN")
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
    plt = pyplot()
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
    save(fig, out, "part3-11-idea.png", made=made)



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



def data_13():
    r13 = STEPS[13]
    source_text(r13, "__launch_bounds__(C::kThreads)", "the kernel's launch bounds")
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
    plt = pyplot()
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
    save(fig, out, "part3-13-idea.png", made=made)


# ---- 15: the warps' roles over one key block --------------------------------------------------------

def loop_body(rel):
    m = source_match(rel, r"#pragma unroll 1\s*\n\s*for \(int block = 0; block < n_blocks; \+\+block\) \{(.*?)\n  \}\n",
             "the key-block loop", re.S)
    return m.group(1)


def data_15():
    r14, r15 = STEPS[14], STEPS[15]
    b14, b15 = loop_body(r14), loop_body(r15)
    bars = {14: b14.count("__syncthreads()"), 15: b15.count("__syncthreads()")}
    c = config(15)
    d = 128  # the series' head dimension (a template parameter of the kernel)
    row_warps = c["block_m"] // 16
    source_text(r15, "static constexpr int kLoaderThreads = kThreads - kRowWarps * kWarpSize;", "the loader threads")
    source_text(r15, "if (warp >= C::kRowWarps && has_next)", "the loaders' branch")
    loaders = c["threads"] - row_warps * c["warp_size"]
    rows_per_pass = lambda threads: threads // (d // 8)
    passes_all = c["block_n"] // rows_per_pass(c["threads"])
    passes_loaders = c["block_n"] // rows_per_pass(loaders)
    return dict(bars=bars, warps=c["warps"], row_warps=row_warps, loaders=loaders, d=d,
                passes_all=passes_all, passes_loaders=passes_loaders)


def fig_15(out, made):
    plt = pyplot()
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
    save(fig, out, "part3-15-idea.png", made=made)

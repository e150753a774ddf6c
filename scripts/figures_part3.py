#!/usr/bin/env python3
"""Every figure of Part III (chapters 07-15) into docs/img/ (matplotlib): one measured figure per
chapter, part3-NN.png, drawn here, and one idea figure per chapter, part3-NN-idea.png, each of
that chapter's own change, drawn by this script and the two beside it, which it runs:

  part3-NN.png       for each of chapters 07-15: every version of the series at its workload
                     (B=1 H=64 N=1024 D=128, non-causal and causal) in TFLOP/s, the chapter's own
                     versions highlighted, the one it is compared with outlined, step 06 and
                     PyTorch's backends as lines (results/h200/2026-11-30-softmax-series.json and
                     -softmax-peers.json): measured, not schematic. This script.

Every idea figure is computed from the step's kernel file (steps/NN_*/...cu): the constants (Br, Bc,
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

Where each idea figure is drawn: 07 and 10 (bank maps) here; 08, 12, 14 (one row's chain, its
exponentials, who holds it) in scripts/figures_part3_rows.py; 09, 11, 13, 15 (the issue model, the
occupancy model, the warps' roles) in scripts/figures_part3_models.py.

    scripts/figures_part3.py            # writes the eighteen PNGs
    scripts/figures_part3.py --check    # reads the sources and computes everything, writes nothing
    scripts/figures_part3.py --out DIR  # somewhere else
    scripts/figures_part3.py --only 9 12  # some chapters' figures (both kinds)
"""
import json
import sys

from figlib import (BLUE, GREEN, RED, RESULTS, box, out_dir, parser, pyplot, save, source_constant,
                    source_match, source_text)
from figures_part3_common import (SERIES, STEPS, WARP_COLORS, config, frag_maps, xor_col, wavefronts)

# ---- 07: the bank maps ----------------------------------------------------------------------------------

def data_07():
    c = config(7)
    rel = c["rel"]
    f = frag_maps()
    swz = xor_col()
    d = 128  # the series' head dimension
    source_match(rel, r"kSStride\s*=\s*\(kFeatures & kPaddedS\)\s*\?\s*kBlockN \+ (\d+)\s*:\s*kBlockN\s*;", "kSStride")
    pad = int(source_match(rel, r"kSStride\s*=\s*\(kFeatures & kPaddedS\)\s*\?\s*kBlockN \+ (\d+)", "the S padding").group(1))
    source_text(rel, "s_s + (row0 + g + 8 * h) * C::kSStride + key0 + 8 * j + 2 * t", "the S staging store's index")
    source_text(rel, "row0 + frag::ldsm_a_row(lane), kk * 16 + frag::ldsm_a_col(lane)", "Q's ldmatrix coordinates")
    source_text("common/device/part3_attention.cuh",
                "if constexpr (kSwizzled) return row * kStride + ladder::swizzle::xor_col(col, row & 7);",
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
    plt = pyplot()
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
    save(fig, out, "part3-07-idea.png", made=made)



# ---- 10: scalar against vec2 ---------------------------------------------------------------------------

def data_10():
    r9, r10 = STEPS[9], STEPS[10]
    ws = source_constant(r9, "kWarpSize")
    bn = source_constant(r9, "kBlockN")
    source_text(r9, "const int col = lane + kWarpSize * c;", "step 09's column of a lane")
    source_text(r9, "s_p[tile_offset<C::kSwizzledPv, C::kPStride>(row, lane + kWarpSize * c)] =", "step 09's P store")
    source_text(r10, "const int col = 2 * lane;", "step 10's column pair of a lane")
    source_text(r10, "const float2 pair = *reinterpret_cast<const float2*>(s_s + row * C::kSStride + col);",
              "step 10's float2 load")
    source_text(r10, "*reinterpret_cast<__half2*>(s_p + tile_offset<C::kSwizzledPv, C::kPStride>(row, 2 * lane)) =",
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
    plt = pyplot()
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
    save(fig, out, "part3-10-idea.png", made=made)


# ---- part3-NN.png, measured: chapter -> (its own versions, the versions it is compared with)
PART3 = {7: (["07/"], ["06/h200"]), 8: (["08/"], ["07/v5"]), 9: (["09/"], ["07/v5"]),
         10: (["10/"], ["09/v7"]), 11: (["11/"], ["10/v8"]), 12: (["12/"], ["11/qkspecialized"]),
         13: (["13/"], ["12/v10"]), 14: (["14/"], ["13/v11_ablation"]), 15: (["15/"], ["14/v12"])}
SERIES_PEERS = RESULTS / "2026-11-30-softmax-peers.json"


def fig_part3(out, chapters=tuple(range(7, 16))):
    plt = pyplot()
    series = json.loads(SERIES.read_text())
    peers = json.loads(SERIES_PEERS.read_text())["rows"]
    runs = [r for r in series["runs"] if r["kind"] == "attention"]
    shape = runs[0]["shape"]
    ids = [row["id"] for row in runs[0]["rows"] if row["id"].split("/")[0] >= "07"]
    made = []
    for chapter, (own, compared) in PART3.items():
        if chapter not in chapters:
            continue
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
                     "the whole series in grey; one run on the H200 (docs/results/h200/" + SERIES.name + ")",
                     fontsize=8.5)
        fig.tight_layout(rect=(0, 0, 1, 0.93))
        name = f"part3-{chapter:02d}.png"
        save(fig, out, name, dpi=100, made=made)
    return made


# ---- main ----------------------------------------------------------------------------------------------

def figures():
    """{chapter: (its idea figure's data function, its drawing function)}, from the three files."""
    import figures_part3_models as models
    import figures_part3_rows as rows
    here = {7: (data_07, fig_07), 10: (data_10, fig_10)}
    return {ch: here.get(ch) or (getattr(rows if ch in (8, 12, 14) else models, f"data_{ch:02d}"),
                                  getattr(rows if ch in (8, 12, 14) else models, f"fig_{ch:02d}"))
            for ch in range(7, 16)}


def main():
    ap = parser(__doc__)
    ap.add_argument("--check", action="store_true", help="read the sources and compute, write nothing")
    ap.add_argument("--only", type=int, nargs="*", help="chapters to draw (default: all)")
    args = ap.parse_args()
    ideas = figures()
    chapters = args.only or sorted(ideas)
    if args.check:
        for ch in chapters:
            ideas[ch][0]()
        print(f"figures_part3: {len(chapters)} idea figure(s) computed from the sources")
        return
    out = out_dir(args.out)
    made = fig_part3(out, chapters)
    for ch in chapters:
        ideas[ch][1](out, made)
    for name in made:
        print(f"wrote {out / name}")


if __name__ == "__main__":
    main()

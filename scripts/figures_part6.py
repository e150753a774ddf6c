#!/usr/bin/env python3
"""Draws Part VI's figures of decoding and the roofline (chapters 26-29 and the part's introduction)
into docs/img/; scripts/figures_prefill.py draws the prefill ones (part6-gqa-order, -varlen-lpt,
-prefill-measured).

  scripts/figures_part6.py              # all figures
  scripts/figures_part6.py --out DIR    # somewhere else

  part6-split-kv.png      step 28 at Part VI's four decode shapes on 132 SMs (2 CTAs per SM): the
                          CTAs one per (batch, K/V head) gives against the split rule of
                          common/split_kv.hpp (figures_part6.splits_for, which reads its constants), and the fraction
                          of the GPU's CTA slots each fills: a model of occupancy, not a measurement.
  part6-paged.png         step 29's address map: a block table, the pool's pages, and the 16-key
                          warp tiles inside them (schematic).
  part6-decode-measured.png  steps 28 and 29 at Part VI's four decode shapes (bf16, Nq = 1, D = 128):
                          GB/s of 28/split_kv, 29/split_kv at page size 64, cuDNN (99/cudnn) and the
                          device-to-device copy timed in the same process, and one_cta_per_head at
                          B = 1 (results/h200/2026-12-01-p6r0-serving-decode-b*.json: measured).
  part6-merge.png     chapter 28's flash-decoding at one shape, B = 1, Hq = 64, Hkv = 8, Nk = 131,072,
                      D = 128 on 132 SMs: the split count comes from the rule of common/split_kv.hpp
                      (its constants are read from that header, the kernel's from
                      steps/28_split_kv_decode/split_kv_decode.cu); one query row's keys cut into
                      the pieces the CTAs take, each piece's partial log-sum-exp, and the merge's
                      weights exp(LSE_s - LSE) after the largest LSE_s is subtracted. The scores and
                      values are seeded random numbers (a model of one row, not a measurement); the
                      merged output is compared with a single pass over the same row in float64.
  part6-roofline.png  Part VI's problems on the H200's roofline: the tensor peak of
                      scripts/hardware_limits.py (dense bf16, at the datasheet's 1.83 GHz), the
                      bandwidth of the device-to-device copy the ladder timed beside the decode
                      rows, and the datasheet's 4.8 TB/s for reference; the points are measured
                      rows of committed results files (FLOPs and bytes as the harness counts them,
                      TFLOP/s as timed): decode 28/split_kv, GQA prefill 26/group_order, varlen
                      prefill 27/longest_first.
"""
import json

from figlib import (BLUE, GREY, ORANGE, RED, RESULTS, ROOT, SMS, arrow, out_dir, parser, pyplot, save,
                    source_constant)

plt = pyplot()
import numpy as np  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

import hardware_limits  # noqa: E402

# The merge and the roofline draw in the Tango palette.
T_BLUE, T_ORANGE, T_GREEN, T_GREY, T_RED = "#3465a4", "#f57900", "#4e9a06", "#888a85", "#cc0000"


def wave_fill(ctas, slots):
    waves = -(-ctas // slots)
    return ctas / (waves * slots)


def splits_for(ctas, tiles, slots, min_tiles):
    """choose_splits(ctas, max_splits_for(tiles, min_tiles), slots) of common/split_kv.hpp."""
    hpp = "common/split_kv.hpp"
    min_fill = source_constant(hpp, "kMinWaveFill")
    max_waves = source_constant(hpp, "kMaxWaves")
    most = min(max(tiles // min_tiles, 1), source_constant(hpp, "kMaxSplits"))
    best, best_fill = 1, wave_fill(ctas, slots)
    cap = max(ctas, max_waves * slots)
    s = 1
    while s <= most and ctas * s <= cap:
        fill = wave_fill(ctas * s, slots)
        if fill >= min_fill:
            return s
        if fill > best_fill:
            best, best_fill = s, fill
        s += 1
    return best


def fig_merge(out):
    b, hq, hkv, nk, d, sms = 1, 64, 8, 131072, 128, 132
    cu = "steps/28_split_kv_decode/split_kv_decode.cu"
    warps = source_constant(cu, "kWarps")
    keys_per_tile = 16                       # one warp tile: 16 keys (T::kKeys)
    stages = 3                               # kStages at D = 128 (5 at D = 64)
    ctas_per_sm = source_constant(cu, "kCtasPerSm")
    tiles = nk // keys_per_tile
    ctas = b * hkv                           # group · Nq = 8 rows: one row block
    splits = splits_for(ctas, tiles, sms * ctas_per_sm, warps * stages)
    per = -(-tiles // splits)
    splits = -(-tiles // per)                # partition(): no piece left empty by rounding
    keys_per_split = per * keys_per_tile

    # One query row of one (batch, K/V head): seeded scores in log2 units, with a sink at key 0
    # and a bump of recent keys, as attention rows often have; values ~ N(0, 1).
    rng = np.random.default_rng(28)
    x = rng.standard_normal(nk) * 1.1
    x[0] += 9.0
    x[-3000:] += np.linspace(0.0, 3.0, 3000)
    v = rng.standard_normal((nk, d)).astype(np.float32)

    lse_s, o_s = [], []
    for s in range(splits):
        xs = x[s * keys_per_split:(s + 1) * keys_per_split].astype(np.float32)
        m = xs.max()
        p = np.exp2(xs - m)
        z = p.sum()
        o_s.append((p[:, None] * v[s * keys_per_split:(s + 1) * keys_per_split]).sum(0) / z)
        lse_s.append(m + np.log2(z))
    lse_s = np.array(lse_s, dtype=np.float32)
    top = lse_s.max()
    lse = top + np.log2(np.exp2(lse_s - top).sum())
    w = np.exp2(lse_s - lse)
    o = (w[:, None] * np.array(o_s)).sum(0)
    p_ref = np.exp2(x - x.max())
    o_ref = (p_ref[:, None] * v.astype(np.float64)).sum(0) / p_ref.sum()
    err = np.abs(o - o_ref).max()

    fig, axes = plt.subplots(3, 1, figsize=(11, 8.2), gridspec_kw={"height_ratios": [1.25, 1, 1]})
    ax = axes[0]
    step = 64
    ax.plot(np.arange(0, nk, step), x[::step], color=T_GREY, lw=0.5)
    for s in range(splits):
        ax.axvspan(s * keys_per_split, (s + 1) * keys_per_split,
                   color=T_BLUE if s % 2 == 0 else T_ORANGE, alpha=0.15, lw=0)
    ax.plot([0], [x[0]], "o", color=T_RED, ms=4)
    ax.set_xlim(0, nk)
    ax.set_ylabel("score x_j (log2 units)", fontsize=8)
    ax.set_title(f"1. Split: B={b} Hq={hq} Hkv={hkv} Nk={nk:,} D={d} on {sms} SMs × {ctas_per_sm} CTAs. "
                 f"\nThe rule of common/split_kv.hpp gives {splits} splits: {ctas} → {ctas * splits} CTAs, "
                 f"each {per} tiles = {keys_per_split:,} keys of one (batch, K/V head)", fontsize=9)
    ax.set_xlabel("key j (every 64th score drawn; shaded bands: the CTAs' key ranges, alternating colours)",
                  fontsize=8)
    ax.tick_params(labelsize=7)

    ax = axes[1]
    idx = np.arange(splits)
    ax.bar(idx, lse_s - top, color=T_BLUE, width=0.7)
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlim(-0.6, splits - 0.4)
    ax.set_ylabel("LSE_s − max_s LSE_s", fontsize=8)
    ax.set_title("2. Partials: each CTA writes its rows' O_s (fp32, already divided by its own sum) and "
                 "\nLSE_s = m_s + log2 Σ exp2(x_j − m_s); the merge subtracts the largest LSE_s first "
                 f"(here split {int(np.argmax(lse_s))}, the bar of height 0)",
                 fontsize=9)
    ax.set_xticks(idx[::2])
    ax.tick_params(labelsize=7)

    ax = axes[2]
    ax.bar(idx, w, color=T_GREEN, width=0.7)
    ax.set_xlim(-0.6, splits - 0.4)
    ax.set_xlabel("split s (CTA s of the (batch, K/V head))", fontsize=8)
    ax.set_ylabel("weight exp2(LSE_s − LSE)", fontsize=8)
    ax.set_title(f"3. Merge: O = Σ_s w_s·O_s with Σ_s w_s = {w.sum():.6f}; every exponent ≤ 0. "
                 f"\nThe merge in fp32 against one pass over all keys in fp64: max |ΔO| = {err:.1e}", fontsize=9)
    ax.set_xticks(idx[::2])
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    save(fig, out, "part6-merge.png", dpi=110)
    return splits


def rows(path, keep):
    doc = json.loads((RESULTS / path).read_text())
    out = []
    for run in doc["runs"]:
        for r in run["rows"]:
            if keep(run["shape"], r) and r.get("tflops") and r.get("bytes"):
                out.append((run["shape"], r))
    return doc, out


def fig_roofline(out):
    sms, clock_ghz = 132, 1.83
    peak = hardware_limits.PER_SM_PER_CLOCK[90]["tensor_flop"] * sms * clock_ghz * 1e9 / 1e12  # TFLOP/s
    decode_files = sorted(RESULTS.glob("2026-12-01-p6r0-serving-decode-b*.json"))
    copies, decode = [], []
    for f in decode_files:
        doc, rs = rows(f.name, lambda sh, r: "page_size" not in sh and r["id"] == "28/split_kv")
        decode += rs
        copies += [r["gbps"] for run in doc["runs"] for r in run["rows"]
                   if r["id"] == "copy" and "page_size" not in run["shape"] and r.get("gbps")]
    copy = max(copies)
    _, gqa = rows("2026-12-01-p6r1-serving-gqa.json",
                  lambda sh, r: sh.get("kv_heads") == 8 and r["id"] == "26/group_order")
    _, varlen = rows("2026-12-01-p6r1-serving-varlen.json",
                     lambda sh, r: "q_lens" in sh and r["id"] == "27/longest_first")

    fig, ax = plt.subplots(figsize=(9.5, 5.2))
    ai = np.logspace(0, 4, 200)
    ax.plot(ai, np.minimum(peak, ai * copy / 1000), color="black", lw=1.4,
            label=f"roof: {peak:.0f} TFLOP/s (hardware_limits.py) and the ladder's timed copy, {copy:.0f} GB/s")
    ax.plot(ai, np.minimum(peak, ai * 4.8), color=T_GREY, lw=1, ls="--",
            label="the datasheet's 4.8 TB/s (for reference)")
    ridge = peak * 1000 / copy
    ax.axvline(ridge, color=T_GREY, lw=0.6, ls=":")
    ax.text(ridge * 1.05, 2, f"ridge ≈ {ridge:.0f} FLOP/byte", fontsize=8, color=T_GREY)

    def scatter(points, color, marker, label, note):
        xs = [r["flops"] / r["bytes"] for _, r in points]
        ys = [r["tflops"] for _, r in points]
        ax.scatter(xs, ys, color=color, marker=marker, s=36, label=label, zorder=3)
        if note:
            labels = {}
            for (sh, r), xv, yv in zip(points, xs, ys):
                labels.setdefault(round(xv, 1), [xv, yv, []])[2].append(note(sh))
            for xv, yv, names in labels.values():
                ax.annotate(", ".join(names), (xv, yv), textcoords="offset points", xytext=(7, -11), fontsize=7)

    scatter(decode, T_BLUE, "o", "decode, 28/split_kv (bf16, Nq = 1, D = 128)",
            lambda sh: f"B={sh['batch']} (group {sh['heads'] // sh.get('kv_heads', sh['heads'])})")
    scatter(gqa, T_ORANGE, "s", "GQA prefill, 26/group_order (B=4 Hq=32 Hkv=8, N 4096/8192, both masks)", None)
    scatter(varlen, T_GREEN, "^", "varlen prefill, 27/longest_first (24 lengths in 1..8192, both masks)", None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.5, 1e4)
    ax.set_ylim(1, 2000)
    ax.set_xlabel("arithmetic intensity: counted FLOPs / counted bytes (Q, K, V, O once)", fontsize=9)
    ax.set_ylabel("TFLOP/s", fontsize=9)
    ax.set_title("Part VI on the H200's roofline: prefill sits under the compute roof, decode on the bandwidth slope\n"
                 "(points: measured rows; roofs: hardware_limits.py's peak and the copy timed with the decode rows)",
                 fontsize=9)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.tick_params(labelsize=8)
    fig.tight_layout()
    save(fig, out, "part6-roofline.png", dpi=110)



# ---- the decode shapes (steps 28, 29) ------------------------------------------------------------
DECODE_SHAPES = [(8, 32, 8, 32768), (64, 32, 8, 4096), (1, 64, 8, 131072), (128, 32, 32, 2048)]
DECODE_CTAS_PER_SM, DECODE_KEYS, DECODE_MIN_TILES = 2, 16, 12  # steps 28/29 at D = 128


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
    save(fig, out, "part6-split-kv.png", dpi=110)


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
            arrow(ax, (owner * 0.9 + 0.4, 2.1), (x + 0.6, 0.9), mutation_scale=8, color=GREY, lw=0.8)
    ax.set_xlim(-3.2, 10.6)
    ax.set_ylim(-0.4, 3.2)
    ax.axis("off")
    ax.set_title(f"Key j of sequence b is row j % P of page block_table[b·pages_per_seq + j / P] (P = {page}): each "
                 f"{tile}-key warp tile (coloured) lies in one page,\nso it is still {tile} contiguous rows; step 29 "
                 "changes only where a tile starts (schematic)", fontsize=8.5)
    fig.tight_layout()
    save(fig, out, "part6-paged.png", dpi=110)


DECODE_MEASURED = "docs/results/h200/2026-12-01-p6r0-serving-decode-b{}.json"


def fig_decode_measured(out):
    """Measured: the ladder's process, one file per decode shape (contiguous and paged problems)."""
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
    save(fig, out, "part6-decode-measured.png", dpi=110)


def main():
    out = out_dir(parser(__doc__).parse_args().out)
    fig_split_kv(out)
    fig_paged(out)
    fig_decode_measured(out)
    splits = fig_merge(out)
    fig_roofline(out)
    print(f"wrote part6-split-kv.png, part6-paged.png, part6-decode-measured.png, part6-merge.png "
          f"({splits} splits) and part6-roofline.png to {out}")


if __name__ == "__main__":
    main()

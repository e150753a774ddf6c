#!/usr/bin/env python3
"""Draws two figures of Part VI into docs/img/ (new files only; scripts/figures.py and
scripts/figures_prefill.py draw the part's other figures).

  scripts/figures_part6.py              # both figures
  scripts/figures_part6.py --out DIR    # somewhere else

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
import argparse
import json
import math
import pathlib
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results" / "h200"
sys.path.insert(0, str(ROOT / "scripts"))
import hardware_limits  # noqa: E402

BLUE, ORANGE, GREEN, GREY, RED = "#3465a4", "#f57900", "#4e9a06", "#888a85", "#cc0000"


def header_constant(path, name):
    """A `constexpr` number from a C++ source file (the rule is read, not copied)."""
    text = (ROOT / path).read_text()
    m = re.search(rf"constexpr\s+[\w:]+\s+{name}\s*=\s*([0-9.]+)", text)
    if not m:
        raise SystemExit(f"{name} not found in {path}")
    return float(m.group(1)) if "." in m.group(1) else int(m.group(1))


def wave_fill(ctas, slots):
    waves = -(-ctas // slots)
    return ctas / (waves * slots)


def splits_for(ctas, tiles, slots, min_tiles):
    """choose_splits(ctas, max_splits_for(tiles, min_tiles), slots) of common/split_kv.hpp."""
    hpp = "common/split_kv.hpp"
    min_fill = header_constant(hpp, "kMinWaveFill")
    max_waves = header_constant(hpp, "kMaxWaves")
    most = min(max(tiles // min_tiles, 1), header_constant(hpp, "kMaxSplits"))
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
    warps = header_constant(cu, "kWarps")
    keys_per_tile = 16                       # one warp tile: 16 keys (T::kKeys)
    stages = 3                               # kStages at D = 128 (5 at D = 64)
    ctas_per_sm = header_constant(cu, "kCtasPerSm")
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
    ax.plot(np.arange(0, nk, step), x[::step], color=GREY, lw=0.5)
    for s in range(splits):
        ax.axvspan(s * keys_per_split, (s + 1) * keys_per_split,
                   color=BLUE if s % 2 == 0 else ORANGE, alpha=0.15, lw=0)
    ax.plot([0], [x[0]], "o", color=RED, ms=4)
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
    ax.bar(idx, lse_s - top, color=BLUE, width=0.7)
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
    ax.bar(idx, w, color=GREEN, width=0.7)
    ax.set_xlim(-0.6, splits - 0.4)
    ax.set_xlabel("split s (CTA s of the (batch, K/V head))", fontsize=8)
    ax.set_ylabel("weight exp2(LSE_s − LSE)", fontsize=8)
    ax.set_title(f"3. Merge: O = Σ_s w_s·O_s with Σ_s w_s = {w.sum():.6f}; every exponent ≤ 0. "
                 f"\nThe merge in fp32 against one pass over all keys in fp64: max |ΔO| = {err:.1e}", fontsize=9)
    ax.set_xticks(idx[::2])
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(out / "part6-merge.png", dpi=110)
    plt.close(fig)
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
    ax.plot(ai, np.minimum(peak, ai * 4.8), color=GREY, lw=1, ls="--",
            label="the datasheet's 4.8 TB/s (for reference)")
    ridge = peak * 1000 / copy
    ax.axvline(ridge, color=GREY, lw=0.6, ls=":")
    ax.text(ridge * 1.05, 2, f"ridge ≈ {ridge:.0f} FLOP/byte", fontsize=8, color=GREY)

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

    scatter(decode, BLUE, "o", "decode, 28/split_kv (bf16, Nq = 1, D = 128)",
            lambda sh: f"B={sh['batch']} (group {sh['heads'] // sh.get('kv_heads', sh['heads'])})")
    scatter(gqa, ORANGE, "s", "GQA prefill, 26/group_order (B=4 Hq=32 Hkv=8, N 4096/8192, both masks)", None)
    scatter(varlen, GREEN, "^", "varlen prefill, 27/longest_first (24 lengths in 1..8192, both masks)", None)
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
    fig.savefig(out / "part6-roofline.png", dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    splits = fig_merge(out)
    fig_roofline(out)
    print(f"wrote part6-merge.png ({splits} splits) and part6-roofline.png to {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The figures of chapters 26 and 27 (Part VI's prefill steps), from the kernels' own formulas:

  part6-gqa-order.png     step 26: which K/V head each tile of the unmasked list reads, row by row
                          of 132 tiles (the CTAs that run side by side), in the head-major walk
                          (step 21's) and the group walk (GroupWalk), B=4 Hq=32 Hkv=8 N=8192
  part6-varlen-lpt.png    step 27: the work each of 132 CTAs gets from the varlen tile list of a
                          batch with lengths drawn from 1..8192, longest first against the batch's
                          order, causal and not; and the tiles a padded batch would cost
  part6-prefill-measured.png  MEASURED (H200, round p6r1, the ladder's process): TFLOP/s of GQA
                          against the dense problem (step 26) and of the packed varlen batch against
                          the dense B=6 N=8192 one (step 27), per mask, read from
                          docs/results/h200/2026-12-01-p6r1-serving-{gqa,varlen}.json

The orders mirror common/device/hopper/tile_scheduler.cuh (StaticSchedule::decode, GroupWalk) and
common/device/hopper/varlen_scheduler.cuh (make_varlen_plan, VarlenPlan::decode, the snake rows);
the work model is scripts/figures_part4.py's (a tile costs its K/V blocks plus half a block). The first
two are models; the third plots measured rows of committed results files and nothing else. matplotlib is needed (CI never runs this script).

  scripts/figures_prefill.py [--out docs/img]
"""
import json
import random

from figlib import ROOT, SMS, ceil_div, out_dir, parser, pyplot, save

plt = pyplot()
BLOCK = 128       # kBlockM = kBlockN
OVERHEAD = 0.5    # blocks of prologue + epilogue per tile (scripts/tile_model.py)


# ---- step 26 -------------------------------------------------------------------------------------
def head_major(t, bh, m_blocks, group):
    return t // m_blocks, t % m_blocks


def group_walk(t, bh, m_blocks, group):
    per = m_blocks * group
    j = t % per
    return t // per * group + j % group, j // group


def fig_gqa_order(out):
    b, hq, hkv, n = 4, 32, 8, 8192
    group, m_blocks, bh = hq // hkv, ceil_div(n, BLOCK), b * hq
    tiles = bh * m_blocks
    rows = ceil_div(tiles, SMS)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
    for ax, (name, decode) in zip(axes, (("head_major (step 21's walk)", head_major),
                                         ("group_order (GroupWalk, main)", group_walk))):
        image = [[float("nan")] * SMS for _ in range(rows)]
        q_heads_per_row = []
        for r in range(rows):
            heads = set()
            for c in range(SMS):
                t = r * SMS + c
                if t < tiles:
                    h, _ = decode(t, bh, m_blocks, group)
                    image[r][c] = h // group
                    heads.add(h)
            q_heads_per_row.append(len(heads))
        ax.imshow(image, aspect="auto", cmap="tab20", interpolation="nearest")
        ax.set_title(f"{name}: {sum(q_heads_per_row) / rows:.1f} Q heads per row of {SMS} tiles", fontsize=9)
        ax.set_xlabel(f"position in the row (one tile per CTA, {SMS} CTAs)", fontsize=8)
        ax.set_ylabel("row of the tile list (time, roughly)", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"Unmasked GQA tiles, B={b} Hq={hq} Hkv={hkv} N={n}: colour = the K/V head (b·Hkv + h/G) a tile reads.\n"
                 "The group's heads are consecutive indices b·Hq + h, so both orders give a K/V head's "
                 f"{group}·{m_blocks} readers one contiguous run of the list\n(about two rows); the group walk "
                 "only permutes within that run, putting the group's heads side by side at each query block.",
                 fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    save(fig, out, "part6-gqa-order.png", dpi=100)


# ---- step 27 -------------------------------------------------------------------------------------
def varlen_tiles(lens, heads, causal, longest_first):
    """(b, head, m_block) in the list's order: make_varlen_plan + decode, written out."""
    order = sorted(range(len(lens)), key=lambda b: -lens[b]) if longest_first else list(range(len(lens)))
    out = []
    if causal and longest_first:
        levels = ceil_div(lens[order[0]], BLOCK)
        for m in range(levels - 1, -1, -1):
            for b in order:
                if ceil_div(lens[b], BLOCK) > m:
                    out += [(b, h, m) for h in range(heads)]
    else:
        for b in order:
            blocks = ceil_div(lens[b], BLOCK)
            for j in range(blocks):
                m = blocks - 1 - j if causal else j
                out += [(b, h, m) for h in range(heads)]
    return out


def weight(lens, tile, causal):
    b, _, m = tile
    blocks = ceil_div(lens[b], BLOCK)
    return (min(blocks, m + 1) if causal else blocks) + OVERHEAD


def snake_loads(lens, tiles, causal):
    load = [0.0] * SMS
    for t, tile in enumerate(tiles):
        r, c = divmod(t, SMS)
        load[SMS - 1 - c if r & 1 else c] += weight(lens, tile, causal)
    return load


def fig_varlen_lpt(out):
    rng = random.Random(27)
    lens = [rng.randint(1, 8192) for _ in range(16)]
    heads = 32
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for ax, causal in zip(axes, (False, True)):
        for longest_first, color in ((True, "#2ca02c"), (False, "#d62728")):
            tiles = varlen_tiles(lens, heads, causal, longest_first)
            load = snake_loads(lens, tiles, causal)
            mean = sum(load) / SMS
            name = "longest_first (main)" if longest_first else "in_order"
            ax.plot(range(SMS), load, color=color, lw=1.4,
                    label=f"{name}: busiest CTA {max(load) / mean - 1:+.1%} over the mean")
        ax.axhline(mean, color="black", ls="--", lw=0.8, label="mean work per CTA")
        real = sum(ceil_div(n, BLOCK) for n in lens) * heads
        padded = len(lens) * ceil_div(max(lens), BLOCK) * heads
        ax.set_title(f"{'causal' if causal else 'no mask'}: {real} tiles (padded to the longest: {padded})", fontsize=9)
        ax.set_xlabel("CTA (one per SM), snake rows", fontsize=8)
        ax.set_ylabel("work (K/V blocks + ½ per tile)", fontsize=8)
        ax.set_ylim(0, None)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"Varlen tile lists, H={heads}, 16 lengths drawn from 1..8192 (seed 27): {sorted(lens, reverse=True)}\n"
                 "Work model only; the measured times are in chapter 27.", fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    save(fig, out, "part6-varlen-lpt.png", dpi=100)


# ---- measured: steps 26 and 27 beside the dense top kernels ----------------------------------------
MEASURED = {"gqa": "results/h200/2026-12-01-p6r1-serving-gqa.json",
            "varlen": "results/h200/2026-12-01-p6r1-serving-varlen.json"}


def measured_rows(name):
    """{(id, kv_heads or 0, varlen?, seqlen, causal): TFLOP/s} of one results file's measured rows."""
    data = json.loads((ROOT / "docs" / MEASURED[name]).read_text())
    out = {}
    for run in data["runs"]:
        s = run["shape"]
        for r in run["rows"]:
            if r.get("status") == "ok" and r.get("tflops"):
                out[(r["id"], s.get("kv_heads", 0), bool(s.get("q_lens")), s["seqlen"], bool(s["causal"]))] = r["tflops"]
    return out, data["provenance"]


def bars(ax, groups, series, title):
    """groups: [label]; series: [(label, colour, [value or None per group])]."""
    width = 0.8 / len(series)
    for k, (label, color, vals) in enumerate(series):
        xs = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar([x for x, v in zip(xs, vals) if v], [v for v in vals if v], width, color=color, label=label)
        for x, v in zip(xs, vals):
            if v:
                ax.text(x, v + 4, f"{v:.0f}", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=7.5)
    ax.set_ylabel("TFLOP/s (bf16, D=128)", fontsize=8)
    ax.set_ylim(0, 720)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)


def fig_prefill_measured(out):
    gqa, prov = measured_rows("gqa")
    var, _ = measured_rows("varlen")
    fig, axes = plt.subplots(1, 2, figsize=(12, 6.2))
    shapes = [(n, c) for c in (False, True) for n in (4096, 8192)]
    groups = [f"{'causal' if c else 'no mask'}\nN={n}" for n, c in shapes]
    bars(axes[0], groups, [
        ("dense: 21/snake (no mask: = 20/persistent)", "#bbbbbb",
         [gqa.get(("21/snake" if c else "20/persistent", 0, False, n, c)) for n, c in shapes]),
        ("dense: 21/dynamic (causal)", "#7f7f7f", [gqa.get(("21/dynamic", 0, False, n, c)) for n, c in shapes]),
        ("GQA Hkv=8: 26/group_order", "#1f77b4", [gqa.get(("26/group_order", 8, False, n, c)) for n, c in shapes]),
        ("GQA Hkv=8: 26/head_major", "#aec7e8", [gqa.get(("26/head_major", 8, False, n, c)) for n, c in shapes]),
        ("GQA Hkv=8: 99/cudnn", "#ff7f0e", [gqa.get(("99/cudnn", 8, False, n, c)) for n, c in shapes]),
    ], "step 26: B=4 Hq=32 (dense: Hkv=32), same FLOPs")
    masks = [False, True]
    groups = ["no mask", "causal"]

    def dense(i, hkv, c):
        return var.get((i, hkv, False, 8192, c))

    def packed(i, hkv, c):
        return next((v for (j, h, vl, _, cc), v in var.items() if j == i and h == hkv and vl and cc == c), None)
    bars(axes[1], groups, [
        ("dense B=6 N=8192: 21/snake (no mask: = 20/persistent)", "#bbbbbb",
         [dense("21/snake" if c else "20/persistent", 0, c) for c in masks]),
        ("dense B=6 N=8192: 21/dynamic (causal)", "#7f7f7f", [dense("21/dynamic", 0, c) for c in masks]),
        ("varlen: 27/longest_first", "#2ca02c", [packed("27/longest_first", 0, c) for c in masks]),
        ("varlen: 27/in_order", "#98df8a", [packed("27/in_order", 0, c) for c in masks]),
        ("dense Hkv=4: 26/group_order", "#1f77b4", [dense("26/group_order", 4, c) for c in masks]),
        ("varlen Hkv=4: 27/longest_first", "#006400", [packed("27/longest_first", 4, c) for c in masks]),
        ("varlen Hkv=4: 27/in_order", "#c5e0b4", [packed("27/in_order", 4, c) for c in masks]),
    ], "step 27: H=16, 24 lengths from 1..8192 (seed 1, 79,632 tokens)\nagainst the dense B=6 N=8192 (49,152 tokens)")
    g = prov["gpu"]
    fig.suptitle(f"Measured on an {g['name']} (commit {prov['git_commit']}, {prov['date'][:10]}, the ladder's process): "
                 f"{MEASURED['gqa'].split('/')[-1]}, {MEASURED['varlen'].split('/')[-1]}", fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    save(fig, out, "part6-prefill-measured.png", dpi=100)


def main():
    out = out_dir(parser(__doc__).parse_args().out)
    fig_gqa_order(out)
    fig_varlen_lpt(out)
    fig_prefill_measured(out)
    print(f"wrote part6-gqa-order.png, part6-varlen-lpt.png, part6-prefill-measured.png to {out}")


if __name__ == "__main__":
    main()

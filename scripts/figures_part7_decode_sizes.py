#!/usr/bin/env python3
"""Draws chapter 42's measured figures into docs/img/:

  part7-decode-sizes.png       GB/s of K and V read against the cache's size (1,024 to 131,072 keys)
                               at three small batches (B=1 Hq=64, B=3 Hq=40, B=8 Hq=32; Hkv=8,
                               D=128, bf16, one query token): steps 28 and 42, cuDNN through the
                               ladder (99) and through PyTorch's SDPA, and PyTorch's FlashAttention-2
                               backend, all from one peers.py process (the L2 flushed clean), with
                               the device copy's rate from the same round's ladder process.
  part7-split-cost-model.png   the forced-split sweep of step 42 at four shapes (measured) and the
                               cost model fitted to it, both from the committed fit
                               (scripts/split_cost_model.py --json), with the split rule's count.

    scripts/figures_part7_decode_sizes.py            # writes both PNGs
    scripts/figures_part7_decode_sizes.py --out DIR  # somewhere else
"""
import json
import sys

from figlib import BLUE, GREEN, GREY, ORANGE, RED, RESULTS, out_dir, parser, pyplot, save

SIZES = RESULTS / "2026-12-02-r6-servepeers-decode-sizes.json"
COPY = RESULTS / "2026-12-02-r6-flush-read-1a.json"  # the ladder's copy row, read flush
MODEL = RESULTS / "2026-12-02-r6-split-cost-model.json"  # scripts/split_cost_model.py's fit of the r6 sweep
BATCHES = ((1, 64), (3, 40), (8, 32))
SERIES = (("ladder:42/cta_merge", "42/cta_merge", BLUE, "-"), ("ladder:28/split_kv", "28/split_kv", GREEN, "--"),
          ("ladder:99/cudnn", "cuDNN (ladder)", RED, "-"), ("sdpa-cudnn", "cuDNN (SDPA)", ORANGE, ":"),
          ("sdpa-flash", "FlashAttention-2 (SDPA)", GREY, "-."))


def copy_gbps():
    run = json.load(open(COPY))["runs"][0]
    rows = [r for r in run["rows"] if r.get("ceiling")]
    if not rows:
        sys.exit(f"figures_part7_decode_sizes.py: no copy row in {COPY}")
    return rows[0]["gbps"]


def draw_sizes(out):
    plt = pyplot()
    rows = [r for r in json.load(open(SIZES))["rows"] if r.get("shape_kind") == "decode"]
    copy = copy_gbps()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.5), sharey=True)
    for ax, (b, hq) in zip(axes, BATCHES):
        for name, label, color, ls in SERIES:
            pts = sorted((r["bytes"] / 1e6, r["gbps"]) for r in rows
                         if r["name"] == name and r["batch"] == b and r["heads"] == hq and r.get("gbps"))
            if pts:
                ax.plot(*zip(*pts), ls, marker="o", ms=3, color=color, label=label)
        ax.axhline(copy, color="black", lw=0.8, ls=":")
        ax.text(0.98, copy * 1.01, "device copy (ladder)", fontsize=7, va="bottom", ha="right", transform=ax.get_yaxis_transform())
        ax.set_xscale("log")
        ax.set_title(f"B={b} Hq={hq} Hkv=8", fontsize=9)
        ax.set_xlabel("K and V read (MB)")
        ax.set_ylim(0, copy * 1.15)
    axes[0].set_ylabel("GB/s")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Decode (bf16, D=128, 1 query token): GB/s against the cache's size, H200", fontsize=10)
    fig.tight_layout()
    save(fig, out, "part7-decode-sizes.png")


def draw_model(out):
    plt = pyplot()
    fit = json.load(open(MODEL))
    fig, axes = plt.subplots(1, len(fit["shapes"]), figsize=(3.2 * len(fit["shapes"]), 3.2))
    for ax, line in zip(axes, fit["shapes"]):
        xs = sorted(int(x) for x in line["measured_us"])
        measured = [line["measured_us"][str(x)] for x in xs]
        ax.plot(xs, measured, "o", color=BLUE, ms=4, label="measured")
        ax.plot(xs, [line["model_us"][str(x)] for x in xs], "-", color=ORANGE, label="model")
        ax.axvline(line["rule"], color=GREEN, ls=":", label="the rule's count")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, min(max(measured), 4 * min(measured)) * 1.05)
        ax.set_title(line["shape"].replace(" Hkv=8", ""), fontsize=9)
        ax.set_xlabel("splits")
    axes[0].set_ylabel("µs")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    save(fig, out, "part7-split-cost-model.png")


def main():
    out = out_dir(parser(__doc__).parse_args().out)
    draw_sizes(out)
    draw_model(out)


if __name__ == "__main__":
    main()

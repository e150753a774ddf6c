#!/usr/bin/env python3
"""Draws chapter 43's measured figure into docs/img/:

  part7-paged-cost.png   what a page costs: each kernel's time on a contiguous cache divided by its
                         time on a paged one (pages of 16, 64 and 256 rows, shuffled), at issue
                         26's four decode shapes (bf16, D=128, one query token, Hkv=8), for step 43
                         against step 42 and for cuDNN against itself, all from one ladder process
                         a shape (docs/results/h200/2026-12-02-r8-pagedfused-{1..4}.json), with
                         step 43 against step 29 (both paged) beside them.

    scripts/figures_part7_paged.py            # writes the PNG
    scripts/figures_part7_paged.py --out DIR  # somewhere else
"""
import json
import sys

from figlib import BLUE, GREEN, RED, RESULTS, out_dir, parser, pyplot, save

FILES = [RESULTS / f"2026-12-02-r8-pagedfused-{i}.json" for i in range(1, 5)]
PAGES = (16, 64, 256)


def medians(path):
    """{(page_size, id): median ms} of one ladder file, and the shape's text (contiguous run)."""
    runs = json.load(open(path))["runs"]
    times = {(run["shape"].get("page_size", 0), row["id"]): row["median_ms"]
             for run in runs for row in run["rows"] if row.get("status") == "ok" and "median_ms" in row}
    return times, runs[0]["shape_text"]


def draw(out):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(FILES), figsize=(11, 3.3), sharey=True)
    width = 0.27
    for ax, path in zip(axes, FILES):
        t, text = medians(path)
        try:
            series = (("43 paged / 42 contiguous", BLUE, [t[(0, "42/cta_merge")] / t[(p, "43/cta_merge")] for p in PAGES]),
                      ("cuDNN paged / cuDNN contiguous", RED, [t[(0, "99/cudnn")] / t[(p, "99/cudnn")] for p in PAGES]),
                      ("43 / 29, both paged", GREEN, [t[(p, "29/split_kv")] / t[(p, "43/cta_merge")] for p in PAGES]))
        except KeyError as e:
            sys.exit(f"figures_part7_paged.py: {path.name} has no timed row {e}")
        for k, (label, color, ys) in enumerate(series):
            ax.bar([i + (k - 1) * width for i in range(len(PAGES))], ys, width, color=color, label=label)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.axhline(0.97, color="black", lw=0.8, ls=":")
        ax.set_xticks(range(len(PAGES)), [f"pages of {p}" for p in PAGES], fontsize=8)
        ax.set_ylim(0.9, 1.06)
        b, hq, nk = (text.split()[i].split("=")[1] for i in (0, 1, -1))
        ax.set_title(f"B={b} Hq={hq} Nk={nk}", fontsize=9)
    axes[0].set_ylabel("speed ratio (higher: paging costs less)")
    axes[0].text(-0.45, 0.971, "0.97", fontsize=7, va="bottom", ha="left")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3, frameon=False)
    fig.suptitle("What a page costs a decode (bf16, D=128, 1 query token, Hkv=8), H200", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save(fig, out, "part7-paged-cost.png")


def main():
    draw(out_dir(parser(__doc__).parse_args().out))


if __name__ == "__main__":
    main()

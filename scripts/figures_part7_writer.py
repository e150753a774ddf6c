#!/usr/bin/env python3
"""Draws chapter 40's figure into docs/img/:

  part7-dq-writer.png  the backward's TFLOP/s at the four Part V shapes (bf16, PyTorch's process):
                       step 36 (atomic, lane 0 of every consumer warp adds its rows), step 39
                       (ordered, the same warps also wait for turns), step 40's two variants (a
                       writer warp adds a whole block), beside FlashAttention-4's backward and its
                       deterministic mode. Measured: read from
                       docs/results/h200/2026-12-02-bwd-r2-peers40-bf16.json; a missing row fails.

    scripts/figures_part7_writer.py            # writes the PNG
    scripts/figures_part7_writer.py --out DIR  # somewhere else
    scripts/figures_part7_writer.py --check    # reads the file and prints the bars, writes nothing
"""
import json
import pathlib
import sys

from figlib import BLUE, GREEN, GREY, ORANGE, out_dir, parser, pyplot, save

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs/results/h200/2026-12-02-bwd-r2-peers40-bf16.json"
SERIES = [("ladder:36/shared_space", "36/shared_space (atomic)", BLUE, None),
          ("ladder:39/ordered", "39/ordered (deterministic)", GREY, None),
          ("ladder:40/atomic", "40/atomic", GREEN, None),
          ("ladder:40/ordered", "40/ordered (deterministic)", GREEN, "//"),
          ("fa4", "FlashAttention-4", ORANGE, None),
          ("fa4-deterministic", "FlashAttention-4, deterministic", ORANGE, "//")]
SHAPES = [(4, 8, 64, False), (4, 8, 64, True), (2, 16, 128, False), (2, 16, 128, True)]


def bars():
    """{(shape, name): TFLOP/s} from the results file; every series at every shape, or exit 1."""
    rows = json.loads(RESULTS.read_text())["rows"]
    got = {}
    for r in rows:
        key = (r.get("batch"), r.get("heads"), r.get("head_dim"), r.get("causal"))
        if key in SHAPES and r.get("tflops"):
            got[(key, r["name"])] = r["tflops"]
    missing = [(s, n) for s in SHAPES for n, *_ in SERIES if (s, n) not in got]
    if missing:
        sys.exit(f"{RESULTS.name}: no TFLOP/s for {missing}")
    return got


def draw(out, got):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9.0, 3.6))
    width = 0.13
    for i, (name, label, color, hatch) in enumerate(SERIES):
        xs = [j + (i - (len(SERIES) - 1) / 2) * width for j in range(len(SHAPES))]
        ys = [got[(s, name)] for s in SHAPES]
        ax.bar(xs, ys, width, label=label, color=color, hatch=hatch, edgecolor="black", linewidth=0.4)
        for x, y in zip(xs, ys):
            ax.text(x, y + 4, f"{y:.0f}", ha="center", va="bottom", fontsize=5.5, rotation=90)
    ax.set_xticks(range(len(SHAPES)))
    ax.set_xticklabels([f"B={b} H={h} N=8192 D={d}\n{'causal' if c else 'no mask'}" for b, h, d, c in SHAPES],
                       fontsize=7)
    ax.set_ylabel("backward TFLOP/s (bf16)", fontsize=8)
    ax.set_ylim(0, 700)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=6.5, ncol=3, loc="upper left", frameon=False)
    ax.set_title("The dQ writer warp: the deterministic backward at the atomic one's speed "
                 "(NVIDIA H200, PyTorch's process)", fontsize=8.5)
    fig.tight_layout()
    save(fig, out, "part7-dq-writer.png")


def main():
    ap = parser(__doc__)
    ap.add_argument("--check", action="store_true", help="read the file and print the bars, write nothing")
    args = ap.parse_args()
    got = bars()
    for s in SHAPES:
        print(s, "  ".join(f"{n.split(':')[-1]} {got[(s, n)]:.1f}" for n, *_ in SERIES))
    if not args.check:
        out = out_dir(args.out)
        draw(out, got)
        print(f"wrote part7-dq-writer.png to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Draws Part V's explanatory figures into docs/img/ (the measured plots are scripts/plot's).

  scripts/figures_backward.py              # all figures
  scripts/figures_backward.py --out DIR    # somewhere else

  part5-naive-ledger.png  step 23's byte ledger at B=4 H=8 N=8192 D=64: the bytes each of its seven
                          kernels moves through the two fp32 N×N matrices (P and dP/dS), written and
                          read, beside the backward's minimum (Q, K, V, O, dO and the LSE read once,
                          dQ, dK, dV written once). Computed from the step's own ledger formula
                          (steps/23_naive_backward/naive_backward.cu, ledger()): a model of the
                          traffic, not a measurement.

matplotlib is installed with pip if it is missing (CI never runs this script).
"""
import argparse
import math
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

try:
    import matplotlib
except ImportError:
    print("scripts/figures_backward.py: matplotlib is missing; installing it with pip", file=sys.stderr)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"])
    import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def naive_ledger(b, h, n, d, out_cols=64):
    """(kernel, GB written, GB read) of the N×N matrices, and the backward's minimum in GB."""
    nn = b * h * n * n * 4 / 1e9  # one fp32 [B, H, N, N] matrix
    col_blocks = math.ceil(d / out_cols)  # the gradient kernels read their matrix once per 64 columns
    rows = [
        ("1  D = rowsum(dO∘O)", 0.0, 0.0),
        ("2  P = exp(S·scale − lse)", nn, 0.0),
        ("3  dP = dO Vᵀ", nn, 0.0),
        ("4  dS = P∘(dP − D)", nn, 2 * nn),
        ("5  dV = Pᵀ dO", 0.0, col_blocks * nn),
        ("6  dQ = scale·dS K", 0.0, col_blocks * nn),
        ("7  dK = scale·dSᵀ Q", 0.0, col_blocks * nn),
    ]
    elements = b * h * n * d
    minimum = (8 * elements * 2 + 4 * b * h * n) / 1e9  # ladder::backward_min_bytes
    return rows, minimum


def fig_naive_ledger(out):
    b, h, n, d = 4, 8, 8192, 64
    rows, minimum = naive_ledger(b, h, n, d)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    labels = [r[0] for r in rows][::-1] + ["the backward's minimum (all kernels)"]
    written = [r[1] for r in rows][::-1] + [0.0]
    read = [r[2] for r in rows][::-1] + [0.0]
    y = range(len(labels))
    ax.barh(y, written, color="#c0392b", label="N×N bytes written")
    ax.barh(y, read, left=written, color="#e6a23c", label="N×N bytes read")
    ax.barh([len(labels) - 1], [minimum], color="#2c7fb8", label="Q, K, V, O, dO, LSE in; dQ, dK, dV out")
    for i, (w, r) in enumerate(zip(written, read)):
        if w + r > 0:
            ax.text(w + r + 0.3, i, f"{w + r:.1f} GB", va="center", fontsize=8)
    ax.text(minimum + 0.3, len(labels) - 1, f"{minimum:.2f} GB", va="center", fontsize=8)
    total = sum(w + r for _, w, r in rows) + minimum
    ax.set_yticks(list(y))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("GB through global memory (a model: every re-read of Q, K, V, dO, O assumed cached)")
    ax.set_title(f"Step 23's ledger, B={b} H={h} N={n} D={d}: {total:.1f} GB in all, "
                 f"{total / minimum:.0f}× the minimum", fontsize=10)
    ax.set_xlim(0, max(w + r for _, w, r in rows) * 1.25)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "part5-naive-ledger.png", dpi=130)
    plt.close(fig)
    return total, minimum


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    total, minimum = fig_naive_ledger(out)
    print(f"step 23 at B=4 H=8 N=8192 D=64: {total:.2f} GB modelled, minimum {minimum:.3f} GB")
    print(f"wrote part5-naive-ledger.png to {out}")


if __name__ == "__main__":
    main()

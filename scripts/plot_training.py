#!/usr/bin/env python3
"""The loss curves of examples/train_gpt.py's JSON, redrawn without PyTorch or a GPU:

    python3 scripts/plot_training.py out/2026-12-04-train-gpt.json [--png PATH]

One plot: each backend's training loss (a moving average over a sixtieth of the run) and its
validation points for the first seed, the other seeds' validation points as faint lines, beside the data's unigram and bigram entropies and the validation text's source
entropy (the floor under the validation points). The PNG goes
next to the JSON (same name, .png) unless --png says otherwise. Needs numpy and matplotlib (Agg);
train_gpt.py calls plot() here after training, and says so when matplotlib is not installed."""
import argparse
import json
import math
import pathlib
import sys

import numpy as np

COLORS = ("C0", "C3", "C2", "C1")
BASELINES = (("unigram_entropy", "unigram entropy", ":"), ("bigram_entropy", "bigram entropy", "-."),
             ("val_source_entropy", "source entropy of the validation text (the floor)", "--"))


def plot(result, png):
    """Draw result (train_gpt.py's JSON, as a dict) into png; the path, or None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG written (install it, then run "
              "scripts/plot_training.py on the JSON)")
        return None
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for (name, run), color in zip(result["runs"].items(), COLORS):
        y = np.array(run["train_loss"], dtype=float)
        k = max(1, len(y) // 60)
        ax.plot(np.arange(k, len(y) + 1), np.convolve(y, np.ones(k) / k, "valid"), color=color, lw=1.2,
                label=f"{name}: train (mean of {k} steps)")
        steps, losses = zip(*run["eval"])
        ax.plot(steps, losses, "o", color=color, ms=4.5, mfc="none",
                label=f"{name}: validation (final {losses[-1]:.3f})")
        others = result.get("more_seeds", {}).get(name, [])
        seeds = ", ".join(str(o["seed"]) for o in others)
        finals = ", ".join(f"{o['final_val_loss']:.3f}" for o in others)
        for i, other in enumerate(others):  # the other seeds: their validation points only, faint
            ax.plot(*zip(*other["eval"]), "-", color=color, lw=0.8, alpha=0.45,
                    label=None if i else f"{name}: validation, seeds {seeds} (final {finals})")
    data = result["data"]
    for key, label, style in (b for b in BASELINES if b[0] in data):
        ax.axhline(data[key], color="gray", ls=style, lw=1, label=f"{label} {data[key]:.3f}")
    runs = list(result["runs"].values()) + [r for more in result.get("more_seeds", {}).values() for r in more]
    lows = [loss for run in runs for _, loss in run["eval"]] + [data.get("val_source_entropy", 1.0)]
    ax.set_ylim(min(lows) - 0.15, data.get("uniform", math.log(256)) + 0.2)
    a, p = result["provenance"]["args"], result["provenance"]
    precision = a["dtype"] if p.get("gpu") else "fp32"
    ax.set(xlabel="step", ylabel="loss (nats / token)",
           title=f"GPT {a['layers']} x {a['width']}, {a['heads']} heads, context {a['context']}, batch {a['batch']}, "
                 f"{precision} on {p.get('gpu') or 'CPU'}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)
    print(f"wrote {png}")
    return png


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", help="a JSON file written by examples/train_gpt.py")
    p.add_argument("--png", help="where to write the plot (default: the JSON's path with .png)")
    a = p.parse_args()
    path = pathlib.Path(a.json)
    return 0 if plot(json.loads(path.read_text()), pathlib.Path(a.png) if a.png else path.with_suffix(".png")) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A CPU model of step 30's arithmetic (chapter 30's predictions): how far fp16 accumulation
lands from the pass rule, before any GPU runs it.

For sampled query rows (normal inputs rounded to fp16, as the harness makes them) it computes the
fp64 reference, the harness's low-precision reference (fp32 scores and sums, P rounded to fp16,
O rounded to fp16) and a model of each variant's arithmetic, in the kernel's order:
  fp16_pv    64-key blocks; O += P V in fp16: each k16 step of mma.sync adds 16 exact products
             to the fp16 accumulator and rounds once (round to nearest); the rescale
             O *= fp16(exp2(m_old - m_new)) in fp16, the row sum in fp32 by the same rounded factor
  fp16_both  also Q pre-scaled by softmax_scale*log2(e) and rounded to fp16, S accumulated in fp16
             over the D/16 k16 steps the same way
The rounding model of the tensor core's fp16 accumulation (one round-to-nearest per k16 step) is
an assumption: PTX does not specify it, and a hardware that truncates, or rounds inside the k16
sum, errs more. The pass rule is the harness's, row by row: max|err| <= 2 * the low reference's
max|err| + one fp16 ulp of the row's largest |output|.

  scripts/fp16_accum_model.py [--rows 16] [--d 64] [--large-logits]
  scripts/fp16_accum_model.py --plot docs/img/part6-fp16-accum-model.png   # chapter 30's model figure
  scripts/fp16_accum_model.py --measured docs/img/part6-fp16-accum-measured.png
      # the H200 round's figure: speed over fp32_accum and worst row's error over its tolerance,
      # fp16_pv and fp16_both vs N, D = 64 and 128, read from MEASURED (docs/results/h200/*.json)
"""
import argparse

import numpy as np

LOG2E = 1.4426950408889634
BLOCK_N = 64


def f16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def f32(x):
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)


def ulp16(x):
    x = np.maximum(np.abs(x), 2.0 ** -14)
    return 2.0 ** (np.floor(np.log2(x)) - 10)


def fp16_matmul_accumulate(a, b):
    """a [R, K] @ b [K, C] with an fp16 accumulator rounded after every 16 terms of K."""
    acc = np.zeros((a.shape[0], b.shape[1]))
    for k0 in range(0, a.shape[1], 16):
        acc = f16(acc + a[:, k0:k0 + 16] @ b[k0:k0 + 16])
    return acc


def run(q, k, v, scale, variant):
    """One variant's output for the rows of q against all keys (non-causal)."""
    rows, n = q.shape[0], k.shape[0]
    if variant == "fp16_both":
        qs = f16(q * (scale * LOG2E))
    m = np.full(rows, -np.inf)
    l = np.zeros(rows)
    o = np.zeros((rows, v.shape[1]))
    for j0 in range(0, n, BLOCK_N):
        kb, vb = k[j0:j0 + BLOCK_N], v[j0:j0 + BLOCK_N]
        if variant == "fp16_both":
            s2 = fp16_matmul_accumulate(qs, kb.T)          # log2 units already
        else:
            s2 = f32(q @ kb.T) * (scale * LOG2E)           # fp32 scores
        m_new = np.maximum(m, s2.max(axis=1))
        r = np.exp2(m - m_new)
        if variant != "fp32_accum":
            r = f16(r)
        p = f32(np.exp2(s2 - m_new[:, None]))
        l = l * r + p.sum(axis=1)
        p16 = f16(p)
        if variant == "fp32_accum":
            o = f32(o * r[:, None] + p16 @ vb)
        else:
            o = f16(o * r[:, None])
            pad = (-p16.shape[1]) % 16
            o = f16(o + fp16_matmul_accumulate(np.pad(p16, ((0, 0), (0, pad))),
                                               np.pad(vb, ((0, pad), (0, 0)))))
        m = m_new
    return f16(o / l[:, None])


def references(q, k, v, scale):
    s = q @ k.T * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    ref = p @ v / p.sum(axis=1, keepdims=True)
    s32 = f32(f32(q @ k.T) * scale)
    p32 = f32(np.exp(s32 - s32.max(axis=1, keepdims=True)))
    low = f16(f16(p32) @ v / p32.sum(axis=1, keepdims=True))
    return ref, low


NS = (1024, 2048, 4096, 8192)
VARIANTS = ("fp32_accum", "fp16_pv", "fp16_both")


def table(rows, d, large, seed):
    """{variant: [worst error / tolerance at each N]} and the low reference's errors."""
    rng = np.random.default_rng(seed)
    scale = 1 / np.sqrt(d)
    out = {v: [] for v in VARIANTS}
    lows, tols = [], []
    for n in NS:
        q = f16(rng.standard_normal((rows, d)) * (5 if large else 1))
        k = f16(rng.standard_normal((n, d)) * (3 if large else 1))
        v = f16(rng.standard_normal((n, d)))
        ref, low = references(q, k, v, scale)
        low_err = np.abs(low - ref).max(axis=1)
        tol = 2 * low_err + ulp16(np.abs(ref).max(axis=1))
        lows.append(low_err.max())
        tols.append(tol.max())
        for variant in VARIANTS:
            err = np.abs(run(q, k, v, scale, variant) - ref).max(axis=1)
            out[variant].append((err / tol).max())
    return out, lows, tols


def plot(path, rows, seed):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, large in zip(axes, (False, True)):
        for d, style in ((64, "-"), (128, "--")):
            ratios, _, _ = table(rows, d, large, seed)
            for variant, color in zip(VARIANTS, ("tab:gray", "tab:blue", "tab:red")):
                ax.plot(NS, ratios[variant], style, marker="o", color=color, label=f"{variant} D={d}")
        ax.axhline(1, color="black", lw=0.8)
        ax.axhline(64, color="black", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(NS, [str(n) for n in NS])
        ax.set_xlabel("N (keys)")
        ax.set_title("large logits (Q×5, K×3)" if large else "normal inputs")
    axes[0].set_ylabel("worst row's error / its tolerance")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Step 30, CPU model (not a measurement): 1 = the pass rule, 64 = the approximate limit", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


MEASURED = ("docs/results/h200/2026-12-01-p6r0-serving-fp16acc.json",
            "docs/results/h200/2026-12-01-p6r1-serving-fp16acc-d128.json")


def measured_plot(path):
    """Chapter 30's measured figure, from the round's results files (nothing modelled)."""
    import json
    import pathlib
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    root = pathlib.Path(__file__).resolve().parent.parent
    points = {}  # (variant, D, causal) -> [(N, speed ratio, worst error / tolerance)]
    for name in MEASURED:
        doc = json.loads((root / name).read_text())
        gpu = doc["provenance"]["gpu"]["name"]
        for run in doc["runs"]:
            shape = run["shape"]
            rows = {r["id"]: r for r in run["rows"]}
            base = rows["30/fp32_accum"]
            for variant in ("fp32_accum", "fp16_pv", "fp16_both"):
                r = rows["30/" + variant]
                e = r["error"]
                key = (variant, shape["head_dim"], bool(shape["causal"]))
                points.setdefault(key, []).append(
                    (shape["seqlen"], r["tflops"] / base["tflops"], e["worst_row_error"] / e["tolerance"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    colors = {"fp32_accum": "tab:gray", "fp16_pv": "tab:blue", "fp16_both": "tab:red"}
    for (variant, d, causal), pts in sorted(points.items()):
        pts.sort()
        ns = [p[0] for p in pts]
        style = ("-" if d == 64 else "--")
        marker = "s" if causal else "o"
        label = f"{variant} D={d} {'causal' if causal else 'non-causal'}"
        if variant != "fp32_accum":
            axes[0].plot(ns, [p[1] for p in pts], style, marker=marker, color=colors[variant], label=label,
                         mfc="white" if causal else colors[variant])
        axes[1].plot(ns, [p[2] for p in pts], style, marker=marker, color=colors[variant], label=label,
                     mfc="white" if causal else colors[variant])
    axes[0].axhline(1, color="black", lw=0.8)
    axes[0].axhspan(0.97, 1.03, color="tab:green", alpha=0.12, label="the prediction: ±3%")
    axes[0].set_ylabel("TFLOP/s over 30/fp32_accum (same problem)")
    axes[0].set_title("speed", fontsize=9)
    axes[1].axhline(1, color="black", lw=0.8)
    axes[1].axhline(64, color="black", lw=0.8, ls=":")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("worst row's error / its tolerance")
    axes[1].set_title("error (1 = the pass rule, 64 = the approximate limit)", fontsize=9)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks([1024, 2048, 4096, 8192], ["1024", "2048", "4096", "8192"])
        ax.set_xlabel("N (B=4, H=8, fp16)")
        ax.tick_params(labelsize=8)
    handles, labels = axes[1].get_legend_handles_labels()
    band = axes[0].get_legend_handles_labels()
    fig.legend(handles + band[0][-1:], labels + band[1][-1:], fontsize=7, ncol=5, loc="lower center",
               frameon=False)
    fig.suptitle(f"Step 30 measured on the {gpu} (docs/results/h200/2026-12-01-p6r0-serving-fp16acc.json, D=64; "
                 "-p6r1-serving-fp16acc-d128.json, D=128)", fontsize=9)
    fig.tight_layout(rect=(0, 0.14, 1, 0.94))
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--large-logits", action="store_true", help="Q x5, K x3, as the GPU tests")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--plot", metavar="PNG", help="draw chapter 30's figure (D 64 and 128, both inputs)")
    ap.add_argument("--measured", metavar="PNG", help="draw chapter 30's measured figure from the H200 results")
    args = ap.parse_args()
    if args.measured:
        measured_plot(args.measured)
        return
    if args.plot:
        plot(args.plot, args.rows, args.seed)
        return
    d = args.d
    print(f"D={d} {'large logits (Q x5, K x3)' if args.large_logits else 'normal inputs'}, "
          f"{args.rows} rows; worst row's max|err| / its tolerance (pass <= 1; approximate limit 64)")
    print(f"{'N':>6} {'low ref err':>12} {'tolerance':>10} " + " ".join(f"{v:>12}" for v in VARIANTS))
    ratios, lows, tols = table(args.rows, d, args.large_logits, args.seed)
    for i, n in enumerate(NS):
        print(f"{n:>6} {lows[i]:>12.2e} {tols[i]:>10.2e} " + " ".join(f"{ratios[v][i]:>12.2f}" for v in VARIANTS))

if __name__ == "__main__":
    main()

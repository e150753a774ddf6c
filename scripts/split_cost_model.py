#!/usr/bin/env python3
"""A cost model of a split-KV decode's time on one GPU, fitted to a sweep of forced split counts
(scripts/decode_sweep.sh), and its best split count against the sweep's fastest and the split
rule's (common/split_kv.hpp).

    scripts/split_cost_model.py SWEEP.tgz|DIR [--variant 42/cta_merge] [--sms 132] [--ctas-per-sm 2]
                                [--plot FILE.png] [--json FILE.json]

The model (all times in µs; a split of `per` key tiles of `tile_bytes` each; k CTAs in a wave):

    T(s) = t_launch + waves · t_cta + bytes / min(BW, k · b_cta) · (1 + γ · uneven(n))
           + [s > 1] · (t_merge + t_split · s)

  n = CTAs in all (B · Hkv · row blocks · s), k = min(n, slots) of them at once, bytes = K and V;
  uneven(n) = 0 while n ≤ SMs (one CTA an SM at most), else ceil(n / slots) · slots / n − 1;

  * slots: the CTAs that run at once (SMs × CTAs per SM), a wave;
  * BW: the bandwidth the whole GPU streams at; b_cta: what one CTA can pull on its own (its
    loads in flight over the memory's latency): k CTAs read at min(k · b_cta, BW);
  * γ: what an uneven load costs. Some SMs holding two CTAs and others one (192 CTAs in 264
    slots), or a last wave that starts as the first one's CTAs end: γ = 0 if the bandwidth moved
    freely to where the bytes are left, γ = 1 if the GPU took as long as full waves would;
  * t_cta: a CTA's fixed cost (the pipeline's fill, the partial's store), paid once a wave;
  * t_merge, t_split: the merge's fixed cost and its cost per split (the partials' reads).

BW and b_cta are found by a grid search, the four fixed costs by least squares for each grid
point; the fit is over every shape and split count of the sweep at once (one GPU, one kernel).
Prints the fitted parameters, each shape's measured and modelled times, and per shape the split
count the model picks, the sweep's fastest and the rule's, with their measured times.
"""
import argparse
import glob
import json
import os
import re
import sys
import tarfile
import tempfile

import numpy as np

KEYS_PER_TILE = 16        # the decode kernels' key tile (steps 28, 41, 42)
MIN_TILES_PER_SPLIT = 12  # their kWarps · kStages at D = 128: what a split must keep
ROWS_PER_CTA = 16         # packed query rows of one CTA (an m16 tile)


def partition(tiles, splits):
    """common/split_kv.hpp's partition: (splits actually made, tiles per split)."""
    per = -(-tiles // max(splits, 1))
    return -(-tiles // per), per


def load(path, variant):
    """[(shape dict, forced splits or None for the rule, median µs, GB/s)] of `variant`."""
    tmp = None
    if os.path.isfile(path):
        tmp = tempfile.TemporaryDirectory()
        with tarfile.open(path) as t:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.12: refuse odd members
                t.extractall(tmp.name, filter="data")
            else:
                t.extractall(tmp.name)
        path = tmp.name
    out = []
    for f in sorted(glob.glob(os.path.join(path, "**", "sweep-*.json"), recursive=True)):
        m = re.search(r"sweep-.*-(rule|s(\d+))\.json$", f)
        run = json.load(open(f))["runs"][0]
        rows = {r["id"]: r for r in run["rows"]}
        if variant not in rows or rows[variant].get("status", "ok") not in ("ok", "pass", None):
            continue
        r = rows[variant]
        out.append((run["shape"], None if m.group(1) == "rule" else int(m.group(2)), 1000 * r["median_ms"], r["gbps"]))
    return out


def geometry(shape, splits, slots):
    """(CTAs per split, splits made, tiles per split, waves, CTAs in the last wave, tile bytes)."""
    b, hq, hkv, nk, d = shape["batch"], shape["heads"], shape["kv_heads"], shape["kv_seqlen"], shape["head_dim"]
    group_rows = (hq // hkv) * shape["seqlen"]
    ctas = b * hkv * -(-group_rows // ROWS_PER_CTA)
    tiles = -(-nk // KEYS_PER_TILE)
    s, per = partition(tiles, max(1, min(splits, max(1, tiles // MIN_TILES_PER_SPLIT))))
    total = ctas * s
    waves = -(-total // slots)
    last = total - (waves - 1) * slots
    elem = 2 if shape["dtype"] in ("fp16", "bf16") else 4
    return ctas, s, per, waves, last, 2 * KEYS_PER_TILE * d * elem


def rule_splits(ctas, max_splits, slots, min_fill=0.95, max_waves=8):
    """common/split_kv.hpp's choose_splits."""
    def fill(c):
        w = -(-c // slots)
        return c / (w * slots)
    best, best_fill = 1, fill(ctas)
    for s in range(1, max_splits + 1):
        if ctas * s > max(ctas, max_waves * slots):
            break
        f = fill(ctas * s)
        if f >= min_fill:
            return s
        if f > best_fill:
            best, best_fill = s, f
    return best


def uneven(total, slots, sms):
    """How unevenly `total` CTAs load the SMs: 0 while every SM holds at most one (the bandwidth
    goes to the SMs that work), else the slots of the waves over the CTAs, less one (0.375 for
    192 CTAs in 264 slots; 0 for 264 or 528)."""
    if total <= sms:
        return 0.0
    return -(-total // slots) * slots / total - 1.0


def rule_count(shape, slots):
    """The splits the rule gives `shape` on `slots` CTA slots, as a launch makes them (partitioned)."""
    tiles = -(-shape["kv_seqlen"] // KEYS_PER_TILE)
    max_splits = max(1, tiles // MIN_TILES_PER_SPLIT)
    return partition(tiles, rule_splits(geometry(shape, 1, slots)[0], max_splits, slots))[0]


def features(g, bw, b_cta, slots, gamma=0.0, sms=132):
    """The model's terms for geometry g: (streaming µs, [1, waves, merge?, merge? · s])."""
    ctas, s, per, waves, last, tile_bytes = g
    total = ctas * s
    rate = min(bw, min(total, slots) * b_cta)  # GB/s
    stream = total * per * tile_bytes / rate * 1e-3 * (1.0 + gamma * uneven(total, slots, sms))  # µs
    merged = 1.0 if s > 1 else 0.0
    return stream, [1.0, waves, merged, merged * s]


def fit(points, slots, sms):
    best = None
    for bw, b_cta, gamma in ((bw, b, gm) for bw in np.arange(3800, 4801, 20)  # GB/s
                             for b in np.arange(30, 101, 2) for gm in np.arange(0.0, 1.01, 0.05)):
        if True:
            stream, rows = zip(*(features(g, bw, b_cta, slots, gamma, sms) for g, _ in points))
            y = np.array([t for _, t in points]) - np.array(stream)
            a = np.array(rows)
            coef, *_ = np.linalg.lstsq(a, y, rcond=None)
            coef = np.maximum(coef, 0.0)
            err = float(np.sqrt(np.mean(((a @ coef) - y) ** 2 / np.array([t for _, t in points]) ** 2)))
            if best is None or err < best[0]:
                best = (err, float(bw), float(b_cta), coef, float(gamma), sms)
    return best


def model_time(g, params, slots):
    _, bw, b_cta, coef, gamma, sms = params
    stream, row = features(g, bw, b_cta, slots, gamma, sms)
    return stream + float(np.dot(row, coef))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep")
    ap.add_argument("--variant", default="42/cta_merge")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--ctas-per-sm", type=int, default=2)
    ap.add_argument("--plot")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    slots = args.sms * args.ctas_per_sm
    data = load(args.sweep, args.variant)
    if not data:
        print(f"split_cost_model.py: no rows of {args.variant} in {args.sweep}", file=sys.stderr)
        return 1
    forced = [(geometry(sh, s, slots), t, sh, s, gb) for sh, s, t, gb in data if s is not None]
    params = fit([(g, t) for g, t, *_ in forced], slots, args.sms)
    err, bw, b_cta, coef, gamma, _ = params
    print(f"fit over {len(forced)} timings of {args.variant}: BW {bw:.0f} GB/s, one CTA {b_cta:.0f} GB/s, γ {gamma:.2f}, "
          f"t_launch {coef[0]:.2f} µs, t_cta {coef[1]:.2f} µs a wave, t_merge {coef[2]:.2f} µs + "
          f"{coef[3]:.3f} µs a split; rms relative error {100 * err:.1f}%")
    shapes = {}
    for g, t, sh, s, gb in forced:
        key = (sh["batch"], sh["heads"], sh["kv_heads"], sh["kv_seqlen"])
        shapes.setdefault(key, {"shape": sh, "points": {}})["points"][g[1]] = (t, model_time(g, params, slots), gb)
    summary = []
    for key, v in sorted(shapes.items()):
        sh, pts = v["shape"], v["points"]
        tiles = -(-sh["kv_seqlen"] // KEYS_PER_TILE)
        max_s = max(1, tiles // MIN_TILES_PER_SPLIT)
        rule = rule_count(sh, slots)
        model_best = min(range(1, min(max_s, 256) + 1),
                         key=lambda s: model_time(geometry(sh, s, slots), params, slots))
        model_best = geometry(sh, model_best, slots)[1]
        fastest = min(pts, key=lambda s: pts[s][0])
        line = {"shape": "B={} Hq={} Hkv={} Nk={}".format(*key), "rule": rule, "model": model_best, "fastest": fastest,
                "measured_us": {str(s): round(p[0], 2) for s, p in sorted(pts.items())},
                "model_us": {str(s): round(p[1], 2) for s, p in sorted(pts.items())}}
        summary.append(line)
        print(f"\n{line['shape']}: rule {rule}, model {model_best}, fastest measured {fastest}")
        for s, (t, m, gb) in sorted(pts.items()):
            tag = " <- rule" if s == rule else ""
            tag += " <- model" if s == model_best else ""
            tag += " <- fastest" if s == fastest else ""
            print(f"  {s:3d} splits: measured {t:7.1f} µs ({gb:5.0f} GB/s), model {m:7.1f} µs{tag}")
        for name, s in (("rule", rule), ("model", model_best)):
            if s in pts:
                print(f"  the {name}'s count measured {pts[s][0] / pts[fastest][0]:.3f}x the fastest's time")
    if args.json:
        json.dump({"schema": "attention-ladder/split-cost-model/1", "sweep": os.path.basename(args.sweep),
                   "command_line": " ".join(["scripts/split_cost_model.py"] + (argv if argv is not None else sys.argv[1:])),
                   "variant": args.variant, "slots": slots, "bw_gbps": bw, "cta_gbps": b_cta, "gamma": gamma,
                   "t_launch_us": coef[0], "t_cta_us": coef[1], "t_merge_us": coef[2], "t_split_us": coef[3],
                   "rms_rel_error": err, "shapes": summary}, open(args.json, "w"), indent=1)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(shapes), figsize=(3.6 * len(shapes), 3.4), sharey=False)
        for ax, line in zip(np.atleast_1d(axes), summary):
            xs = [int(s) for s in line["measured_us"]]
            ax.plot(xs, list(line["measured_us"].values()), "o", color="#1f77b4", label="measured")
            ax.plot(xs, list(line["model_us"].values()), "-", color="#ff7f0e", label="model")
            ax.axvline(line["rule"], color="#2ca02c", ls=":", label="rule's count")
            ax.set_xscale("log", base=2)
            ax.set_title(line["shape"], fontsize=9)
            ax.set_xlabel("splits")
        np.atleast_1d(axes)[0].set_ylabel("µs")
        np.atleast_1d(axes)[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())

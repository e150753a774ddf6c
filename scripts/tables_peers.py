"""The tables of scripts/peers.py's files, for scripts/make_tables.py (which documents the markers):
crosscheck (the ladder's kernels beside PyTorch's backends and FlashAttention-4, forward or
backward), servecheck (Part VI's serving shapes) and compare (an old and a new build of the ladder
in one process). Each takes the marker's spec and returns the table's lines. `load` and `keep`
(reading a results file under make_tables.DOCS, selecting rows by id prefix) are make_tables.py's,
set here when it is imported, so that both read the same files the same way.
"""

load = keep = None  # make_tables.py's, set at its import


def _peer_rows(data):
    rows = [r for r in data["rows"] if r.get("kind") == "attention"]
    shapes = []
    for r in rows:
        key = (r["batch"], r["heads"], r["seqlen"], r["head_dim"], r["causal"])
        if key not in shapes:
            shapes.append(key)
    by = {(r["name"],) + (r["batch"], r["heads"], r["seqlen"], r["head_dim"], r["causal"]): r for r in rows}
    dtype = next((r.get("dtype") for r in rows if r.get("dtype")), "fp16")
    return rows, shapes, by, dtype


def _tf(by, name, key):
    """TFLOP/s of row `name` at `key`, or None; "FAIL" when its output check failed."""
    r = by.get((name,) + key)
    if not r or "tflops" not in r:
        return None
    return "FAIL" if r.get("output_check") == "FAIL" else r["tflops"]


def _num(x):
    return "—" if x is None else ("FAIL" if x == "FAIL" else f"{x:.1f}")


def _ratio(a, b):
    return f"{a / b:.2f}×" if isinstance(a, float) and isinstance(b, float) and b else "—"


def _peers_footer(data, spec, command):
    p = data["provenance"]
    g = p["gpu"]
    fa4 = p.get("fa4", {})
    fa4_text = f", FlashAttention-4 {fa4['version']}" if fa4.get("version") else ""
    cut = " The run stopped before its last shape (`complete: false`)." if data.get("complete") is False else ""
    return (f"*{g.get('name', '?')}, driver {g.get('driver_version', '?')}, PyTorch {g.get('torch', '?')}, "
            f"cuDNN {g.get('cudnn', '?')}{fa4_text}, SM clock {g.get('sm_clock_mhz', '?')} MHz at start; commit "
            f"`{p.get('git_commit', '?')}`, {p.get('date', '?')[:10]}; `{command}` (`docs/{spec['file']}`).{cut}*")


def crosscheck_table(spec):
    data = load(spec["file"])
    rows, shapes, by, dtype = _peer_rows(data)
    backward = data.get("pass", "fwd") == "bwd"
    ids = [x for x in spec.get("ids", "").split(",") if x]
    fa4 = any(r["name"] == "fa4" and "tflops" in r for r in rows)
    head = ("| B | H | N | D | mask | PyTorch cuDNN |" + (" PyTorch FA2 |" if backward else "") + " ladder's cuDNN |"
            + (" FA4 | FA4 × cuDNN |" if fa4 else "")
            + "".join(f" {i} | × cuDNN |" + (" × FA4 |" if fa4 else "") + (" × FA2 |" if backward else "")
                      for i in ids))
    ncols = (7 + (1 if backward else 0) + (2 if fa4 else 0)
             + len(ids) * (2 + (1 if fa4 else 0) + (1 if backward else 0)))
    what = ("Backward (dQ, dK, dV from dO; FLOPs 2.5× the forward's), TFLOP/s" if backward else "TFLOP/s")
    out = [f"{what} in {dtype}, all timed by `scripts/peers.py` (CUDA-graph replays, L2 flushed, three "
           "interleaved passes) in one process; × cuDNN = the ladder variant / PyTorch's cuDNN backend"
           + ("; × FA4 = the ladder variant / FlashAttention-4" if fa4 else "")
           + ("; × FA2 = the ladder variant / PyTorch's FlashAttention-2 backend" if backward else "") + ".\n",
           head, "|" + "---|" * ncols]
    for key in shapes:
        b, h, n, d, causal = key
        ref = _tf(by, "sdpa-cudnn", key)
        f4 = _tf(by, "fa4", key)
        cells = [str(b), str(h), str(n), str(d), "causal" if causal else "none", _num(ref)]
        if backward:
            cells.append(_num(_tf(by, "sdpa-flash", key)))
        cells.append(_num(_tf(by, "ladder:98/cudnn" if backward else "ladder:99/cudnn", key)))
        if fa4:
            cells += [_num(f4), _ratio(f4, ref)]
        for i in ids:
            t = _tf(by, "ladder:" + i, key)
            cells += ([_num(t), _ratio(t, ref)] + ([_ratio(t, f4)] if fa4 else [])
                      + ([_ratio(t, _tf(by, "sdpa-flash", key))] if backward else []))
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    if any(r.get("output_check") == "FAIL" for r in rows):
        out.append("FAIL: the row's output" + (" (dQ, dK or dV)" if backward else "")
                   + " differed from PyTorch's cuDNN backend beyond the tolerance.\n")
    out.append(_peers_footer(data, spec, "scripts/peers.py --pass bwd --ladder-lib … --ladder-variants …" if backward
                             else "scripts/peers.py --grid part4 --ladder-lib … --ladder-variants …"))
    return "\n".join(out) + "\n"


def servecheck_table(spec):
    """scripts/peers.py --pass serve: one kind's shapes; memory-bound kinds (decode, paged) in GB/s
    with the percentage of the run's device copy, prefill kinds (gqa, varlen) in TFLOP/s."""
    data = load(spec["file"])
    kind = spec.get("kind", "decode")
    rows = [r for r in data["rows"] if r.get("kind") == "attention" and r.get("shape_kind") == kind]
    copy = next((r for r in data["rows"] if r.get("kind") == "copy"), {})
    ids = [x for x in spec.get("ids", "").split(",") if x]
    bound = kind in ("decode", "paged")
    unit = "gbps" if bound else "tflops"

    def shape_key(r):
        return (r["batch"], r["heads"], r["kv_heads"], r["seqlen"], r["kv_seqlen"], r["head_dim"], r["causal"],
                r.get("page_size", 0), tuple(r.get("q_lens") or ()))
    shapes = []
    for r in rows:
        if shape_key(r) not in shapes:
            shapes.append(shape_key(r))
    by = {(r["name"],) + shape_key(r): r for r in rows}

    def value(name, key):
        r = by.get((name,) + key)
        if not r or unit not in r:
            return None
        return "FAIL" if r.get("output_check") == "FAIL" else r[unit]

    def num(x):
        return "—" if x is None else ("FAIL" if x == "FAIL" else (f"{x:.0f}" if bound else f"{x:.1f}"))
    fa4 = any(r["name"] == "fa4" and unit in r for r in rows)
    head = ("| B | Hq | Hkv | Nq | Nk | D | mask |" + (" page |" if kind == "paged" else "")
            + " PyTorch cuDNN | PyTorch FA2 |" + (" FA4 |" if fa4 else "")
            + "".join(f" {i} |" + (" % of copy |" if bound else "") + " × cuDNN |" + (" × FA4 |" if fa4 else "")
                      for i in ids))
    ncols = head.count("|") - 1
    dtype = next((r.get("dtype") for r in rows), "bf16")
    what = (f"GB/s (Q, K, V and O counted once) in {dtype}; % of copy = of the {copy.get('gbps', 0):.0f} GB/s "
            "that a 4 GiB device-to-device copy moved (read + write) in the same run" if bound
            else f"TFLOP/s in {dtype}")
    out = [f"{kind}: {what}, all timed by `scripts/peers.py --pass serve` (CUDA-graph replays, L2 flushed, three "
           "interleaved passes) in one process; × cuDNN = the ladder variant / PyTorch's cuDNN backend"
           + ("; × FA4 = the ladder variant / FlashAttention-4" if fa4 else "")
           + ("; PyTorch's rows run the contiguous K/V of the same values" if kind == "paged" else "") + ".\n",
           head, "|" + "---|" * ncols]
    for key in shapes:
        b, h, hkv, nq, nk, d, causal, page, lens = key
        ref, f2, f4 = value("sdpa-cudnn", key), value("sdpa-flash", key), value("fa4", key)
        cells = [f"{b} ({len(lens)} seqs, {sum(lens)} tokens)" if lens else str(b), str(h), str(hkv),
                 "varlen" if lens else str(nq), "varlen" if lens else str(nk), str(d),
                 "causal" if causal else "none"] + ([str(page)] if kind == "paged" else []) + [num(ref), num(f2)]
        if fa4:
            cells.append(num(f4))
        for i in ids:
            t = value("ladder:" + i, key)
            pct = by.get(("ladder:" + i,) + key, {}).get("pct_of_copy") if t not in (None, "FAIL") else None
            cells += ([num(t)] + ([f"{pct:.0f}%" if pct is not None else "—"] if bound else [])
                      + [_ratio(t, ref)] + ([_ratio(t, f4)] if fa4 else []))
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    if any(r.get("output_check") == "FAIL" for r in rows):
        out.append("FAIL: the row's output differed from the fp32 reference beyond the tolerance.\n")
    out.append(_peers_footer(data, spec, f"scripts/peers.py --pass serve --grid {data.get('grid', kind)} "
                                         "--ladder-lib … --ours …"))
    return "\n".join(out) + "\n"


def compare_table(spec):
    """scripts/peers.py's file with two labelled libraries and --ladder-pairs: per pair (old → new)
    and shape, new/old in TFLOP/s; ≈ when the three rounds' ratios do not all fall on one side of 1."""
    data = load(spec["file"])
    rows, shapes, by, dtype = _peer_rows(data)
    prefixes = [p for p in spec.get("ids", "").split(",") if p]
    pairs = [p for p in data.get("pairs", []) if keep(p["new"].split(":", 2)[-1], prefixes)]

    def label(name):
        return name.split(":", 2)[-1]
    passes = max((len(r.get("round_medians_ms", [])) for r in rows), default=3) or 3
    passes_text = {3: "three"}.get(passes, str(passes))
    out = [f"new/old (TFLOP/s of the new variant / the old one) in {dtype}, both libraries loaded in one "
           f"process and timed by `scripts/peers.py` (CUDA-graph replays, L2 flushed, {passes_text} interleaved "
           "passes); ≈: the passes disagree on the side of 1.\n",
           "| old → new | " + " | ".join(f"{'causal' if c else 'none'} B={b} H={h} N={n} D={d}"
                                      for b, h, n, d, c in shapes) + " |",
           "|---|" + "---|" * len(shapes)]
    noisy = False
    left_out = []
    for p in pairs:
        if not any(by.get((p["old"],) + k, {}).get("tflops") and by.get((p["new"],) + k, {}).get("tflops")
                   for k in shapes):
            why = next((r.get("error", "") for k in shapes for r in (by.get((p["old"],) + k), by.get((p["new"],) + k))
                        if r and r.get("error")), "")
            why = why.split(": ", 1)[-1] if " does not run " in why else why  # the reason, not the shape
            left_out.append(f"{label(p['old'])} → {label(p['new'])}" + (f" ({why[:80]})" if why else ""))
            continue  # no shape that both sides ran
        cells = []
        for key in shapes:
            o, nw = by.get((p["old"],) + key), by.get((p["new"],) + key)
            if not o or not nw or "tflops" not in o or "tflops" not in nw:
                why = next((r.get("error", "") for r in (o, nw) if r and "tflops" not in r), "")
                cells.append("—" + (f" ({why[:40]})" if why else ""))
                continue
            if "FAIL" in (o.get("output_check"), nw.get("output_check")):
                cells.append("FAIL")
                continue
            ratio = nw["tflops"] / o["tflops"]
            rounds = [a / b for a, b in zip(o.get("round_medians_ms", []), nw.get("round_medians_ms", []))]
            mark = "≈" if rounds and min(rounds) < 1 < max(rounds) else ""
            noisy = noisy or bool(mark)
            cells.append(f"{ratio:.2f}×{mark} ({o['tflops']:.0f}→{nw['tflops']:.0f})")
        out.append(f"| {label(p['old'])} → {label(p['new'])} | " + " | ".join(cells) + " |")
    out.append("")
    if left_out:
        out.append("Not in the table (no shape both sides ran): " + "; ".join(left_out) + ".\n")
    commits = data["provenance"].get("ladder_lib_commits", {})
    if commits:
        out.append("Libraries: " + ", ".join(f"{k} built from `{v}`" for k, v in commits.items()) + ".\n")
    grid = next((a for a in data["provenance"].get("command_line", "").split("--grid ")[1:2]), "part4 ").split()[0]
    out.append(_peers_footer(data, spec, f"scripts/peers.py --grid {grid} --ladder-lib old=… --ladder-lib new=… "
                                         "--ladder-pairs …"))
    return "\n".join(out) + "\n"

#!/usr/bin/env python3
"""CPU checks of the sanitizer's scripts (no GPU, no compute-sanitizer needed):
  - the wrap rule: every problem of scripts/sanitize.sh --print-problems wraps every pipeline ring
    of its step at least twice (a walk of U blocks through S stages wraps floor((U - 1) / S)
    times), at D = 64 and 128, with the mask and without, and is ragged against the step's tiles.
    The ring constants below are checked against the steps' sources first, so a changed kStages or
    block size fails here, not silently in the sanitizer. Persistent kernels are walked with
    --grid-sms CTAs (the static row walk), decode through common/split_kv.hpp's split rule;
  - every step folder has an entry, and sanitize.sh refuses a step without one;
  - sanitize.sh and sanitize_all.sh: --help works, bad arguments exit 2 with a message;
  - both scripts end to end on stand-ins (a fake compute-sanitizer, ladder and lab checkers):
    clean, hazards (every one a report: nothing is filtered), a failed check, a timeout, a problem
    no variant runs, a CPU-only lab listed and not run, the summary table and the exit codes.

    python3 tests/cpu/test_sanitize.py
"""
import math
import os
import pathlib
import re
import shlex
import stat
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SANITIZE = ROOT / "scripts/sanitize.sh"
SANITIZE_ALL = ROOT / "scripts/sanitize_all.sh"
MIN_WRAPS = 2          # every ring wraps at least twice (scripts/sanitize.sh's rule)
HEAD_DIMS = (64, 128)  # sanitize.sh runs every attention problem at --d 64,128 and --mask both
PEER_STEPS_FROM = 90   # 98, 99: library peers, never sanitized

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def wraps(uses, stages):
    """How many times a walk of `uses` positions through a ring of `stages` returns to stage 0."""
    return (uses - 1) // stages if uses > 0 else -1


def cdiv(a, b):
    return -(-a // b)


# ---- the steps' rings, each with the source text that states its constants ------------------------
# kind: kv (a CTA walks ceil(N / block_n) K/V blocks; causal, its last query block as far),
# q_inner (step 03's inner walk over query blocks), persistent (a tile list on --grid-sms CTAs,
# the K/V ring running on across tiles), varlen (the same over a packed batch), bwd (a key block's
# walk over the query blocks), decode (each warp's ring over its split's 16-key tiles).
# block: an int, or {D: int} where it depends on the head dimension; None = the ring's D is refused.
def ring(name, kind, stages, block, block_m=None, d=HEAD_DIMS):
    return {"name": name, "kind": kind, "stages": stages, "block": block, "block_m": block_m, "d": d}


SINGLE = "no kStages (single K and V buffers)"
RINGS = {
    0: ([], {}), 1: ([], {}), 2: ([], {}),
    3: ([ring("K/V buffer", "kv", 1, 64), ring("Q buffer, Br=48", "q_inner", 1, 48),
         ring("Q buffer, Br=64", "q_inner", 1, 64)],
        {"present": ["constexpr int kBlockN = 64;", "kBlockM48 = 48", "kBlockM64 = 64"], "absent": ["kStages"]}),
    4: ([ring("K/V cp.async ring", "kv", 2, 32)],
        {"present": ["constexpr int kBlockN = 32;", "constexpr int kStages = 2;"]}),
    5: ([ring("K/V ring, bc32", "kv", 2, 32), ring("K/V ring, bc64", "kv", 2, 64)],
        {"present": ["make_variant<32>", "make_variant<64>", "static constexpr int kStages = 2;"]}),
    6: ([ring("K/V ring", "kv", 2, {64: 128, 128: 64})],
        {"present": ["Config<64, 128, ", "Config<128, 64, ", "static constexpr int kStages = 2;"]}),
    **{s: ([ring("K buffer", "kv", 1, 64), ring("V buffer", "kv", 1, 64)],
           {"present": ["static constexpr int kBlockN = 64;"], "absent": ["kStages"]}) for s in range(7, 15)},
    15: ([ring("K buffer", "kv", 1, 64), ring("V ring", "kv", 2, 64)],
         {"present": ["static constexpr int kBlockN = 64;", "(block % 2) * kVElems"]}),
    **{s: ([ring("K/V ring", "kv", 2, 128)],
           {"present": ["static constexpr int kStages = 2;", "static constexpr int kBlockN = 128;"]}) for s in (16, 17, 18)},
    19: ([ring("K/V ring, 2 stages", "kv", 2, 128), ring("K/V ring, 3 stages", "kv", 3, 128)],
         {"present": ["variant<2, false>", "variant<3, true>", "static constexpr int kBlockN = 128;"]}),
    **{s: ([ring("K/V ring across tiles", "persistent", 3, 128, 128)],
           {"present": ["static constexpr int kStages = 3;", "static constexpr int kBlockN = 128;",
                        "static constexpr int kConsumers = 2;", "kBlockM = 64 * kConsumers;"]})
       for s in (20, 21, 31, 32, 33, 35)},
    22: ([ring("K/V ring across tiles, 4 stages", "persistent", 4, 128, 192, d=(64,)),
          ring("K/V ring across tiles, 3 stages", "persistent", 3, 128, 192, d=(64,))],
         {"present": ["variant<4>(", "variant<3>(", "static constexpr int kConsumers = 3;", "kBlockM = 64 * kConsumers;",
                      "three consumers' O accumulators do not fit at D = 128"]}),
    34: ([ring("K/V ring across tiles, 4 stages", "persistent", 4, 128, 192, d=(64,))],
         {"present": ["variant<4>(", "static constexpr int kConsumers = 3;", "kBlockM = 64 * kConsumers;",
                      "three consumers' O accumulators do not fit at D = 128"]}),
    45: ([ring("K/V and Vt ring across tiles", "persistent", 4, 128, 128, d=(64, 128))],
         {"present": ["static constexpr int kStages = 4;", "static constexpr int kBlockN = 128;",
                      "static constexpr int kConsumers = 2;", "kBlockM = 64 * kConsumers;",
                      "static constexpr int kHeadDim = kHeadDim_;", "launch_d<kTranspose, 64>"]}),
    46: ([ring("K/V and Vt ring across tiles", "persistent", 4, 128, 128, d=(128,))],
         {"present": ["static constexpr int kStages = 4;", "static constexpr int kBlockN = 128;",
                      "static constexpr int kConsumers = 2;", "kBlockM = 64 * kConsumers;",
                      "static constexpr int kHeadDim = 128;"]}),
    47: ([ring("K/V and Vt ring across tiles, 192-key blocks", "persistent", 2, 128, 192, d=(128,)),
          ring("K/V and Vt ring across tiles, 128-key blocks", "persistent", 2, 128, 128, d=(128,)),
          ring("K and Vt ring across tiles, 192-key blocks, 3 stages", "persistent", 3, 128, 192, d=(128,))],
         {"present": ["using WideTile = Tile<192, 2>;", "using TwoStageTile = Tile<128, 2>;",
                      "using SplitRingTile = Tile<192, 3, 2>;",
                      "static constexpr int kConsumers = 2;", "kBlockM = 64 * kConsumers;",
                      "static constexpr int kHeadDim = 128;"]}),
    23: ([], {"absent": ["__shared__", "kStages"]}),
    24: ([ring("Q/dO ring", "bwd", 2, {64: 128, 128: 64})],
         {"present": ["kBlockM = kHeadDim_ == 64 ? 128 : 64;", "static constexpr int kStages = 2;"]}),
    25: ([ring("Q/dO ring, two consumers", "bwd", 2, {64: 128, 128: 64}), ring("Q/dO ring, one consumer", "bwd", 2, 64),
          ring("dS ring, two consumers", "bwd", 2, {64: 128, 128: 64})],
         {"present": ["kConsumers == 1 ? 64 : (kHeadDim == 64 ? 128 : 64)", "static constexpr int kStages = 2;",
                      "static constexpr int kDsStages = 2;"]}),
    **{s: ([ring("Q/dO ring", "bwd", 2, {64: 128, 128: 64}), ring("dS ring", "bwd", 2, {64: 128, 128: 64})],
           {"present": ["kBlockMOf = kHeadDim == 64 ? 128 : 64;", "static constexpr int kStages = 2;",
                        "static constexpr int kDsStages = 2;"]}) for s in (36, 37, 39, 40)},
    38: ([ring("Q/dO ring over the longest sequence", "varlen", 2, {64: 128, 128: 64}, 128)],
         {"present": ["kBlockMOf = kHeadDim == 64 ? 128 : 64;", "static constexpr int kStages = 2;",
                      "static constexpr int kDsStages = 2;", "static constexpr int kBlockN = 64 * kConsumers;"]}),
    # 26 and 27: step 22's three-consumer tile at D = 64 (192 rows, 4 stages), step 21's at D = 128.
    26: ([ring("K/V ring across tiles, D = 64", "persistent", 4, 128, 192, d=(64,)),
          ring("K/V ring across tiles, D = 128", "persistent", 3, 128, 128, d=(128,))],
         {"present": ["static constexpr int kConsumers = kHeadDim == 64 ? 3 : 2;", "kBlockM = 64 * kConsumers;",
                      "static constexpr int kStages = kConsumers == 3 ? 4 : 3;", "static constexpr int kBlockN = 128;"]}),
    27: ([ring("K/V ring across tiles, D = 64", "varlen", 4, 128, 192, d=(64,)),
          ring("K/V ring across tiles, D = 128", "varlen", 3, 128, 128, d=(128,))],
         {"present": ["static constexpr int kConsumers = kHeadDim == 64 ? 3 : 2;", "kBlockM = 64 * kConsumers;",
                      "static constexpr int kStages = kConsumers == 3 ? 4 : 3;", "static constexpr int kBlockN = 128;"]}),
    **{s: ([ring("each warp's cp.async ring", "decode", {64: 5, 128: 3}, 16)],
           {"present": ["kStages = kHeadDim == 128 ? 3 : 5;", "static constexpr int kWarps = 4;",
                        "static constexpr int kKeys = 16;", "kCtasPerSm = 2;", "kMinTilesPerSplit = kWarps * kStages;",
                        "static constexpr int kRows = 16;"]}) for s in (28, 29, 41, 42, 43)},
    44: ([ring("the CTA's shared cp.async ring", "rowtiles", {64: 5, 128: 3}, 64)],
         {"present": ["static constexpr int kKeys = 64;", "kStages = kHeadDim == 128 ? 3 : 5;", "kCtasPerSm = 2;",
                      "kMinTilesPerSplit = kStages;", "kSmallRowTiles = 2, kLargeRowTiles = 4;",
                      "constexpr int kTileRows = 16;"]}),
    30: ([ring("K/V ring", "kv", 2, 64)],
         {"present": ["struct Tile : mma::Shape<kHeadDim_, 64>", "static constexpr int kStages = 2;"]}),
}
DECODE = {"warps": 4, "keys": 16, "rows": 16, "ctas_per_sm": 2}
# Step 44: a CTA of 2 warps (32 rows) or 4 (64), one m16 row tile a warp, every warp over every tile.
ROWTILES = {"small_rows": 32, "large_rows": 64, "tile_rows": 16, "keys": 64, "ctas_per_sm": 2}
# common/split_kv.hpp's rule (checked against the header below).
SPLIT_KV = {"max_splits": 256, "max_sms": 256, "min_wave_fill": 0.95, "max_waves": 8}
SPLIT_KV_TEXT = ["kMaxSplits = 256;", "kMaxSms = 256;", "kMinWaveFill = 0.95;", "kMaxWaves = 8;"]


def step_sources():
    """Each step's kernel files, and after them the common/ headers they include (a ring's
    constants may live in a header the step's tile inherits from, e.g. mma_attention.cuh's Shape)."""
    out = {}
    for d in sorted((ROOT / "steps").iterdir()):
        m = re.match(r"(\d\d)_", d.name)
        if m and d.is_dir():
            text = "".join(p.read_text() for p in sorted(d.glob("*.cu")))
            headers = sorted(set(re.findall(r'#include "(common/[^"]+)"', text)))
            out[int(m.group(1))] = text + "".join((ROOT / h).read_text() for h in headers if (ROOT / h).is_file())
    return out


def test_constants():
    sources = step_sources()
    for step, text in sources.items():
        if step >= PEER_STEPS_FROM:
            continue
        check(step in RINGS, f"step {step:02}: has a ring entry here (and a problem in scripts/sanitize.sh)")
    for step, (_, evidence) in RINGS.items():
        text = sources.get(step, "")
        for s in evidence.get("present", []):
            check(s in text, f"step {step:02}: its source says {s!r}")
        for s in evidence.get("absent", []):
            check(s not in text, f"step {step:02}: its source has no {s!r}")
    header = (ROOT / "common/split_kv.hpp").read_text()
    for s in SPLIT_KV_TEXT:
        check(s in header, f"common/split_kv.hpp says {s!r}")


# ---- the problems, as the ladder reads them -------------------------------------------------------
def parse_problem(args):
    a = shlex.split(args)
    p = {"b": 4, "heads": 8, "n": [4096], "kv_heads": [0], "kv_n": [0], "page": [0], "varlen": [], "grid_sms": 0}
    ints = lambda v: [int(x) for x in v.split(",")]
    i = 0
    while i < len(a):
        k, v = a[i], a[i + 1] if i + 1 < len(a) else ""
        if k == "--b": p["b"] = int(v)
        elif k == "--heads": p["heads"] = int(v)
        elif k == "--n": p["n"] = ints(v)
        elif k == "--kv-heads": p["kv_heads"] = ints(v)
        elif k == "--kv-n": p["kv_n"] = ints(v)
        elif k == "--page-size": p["page"] = ints(v)
        elif k == "--varlen": p["varlen"].append(ints(v))
        elif k == "--grid-sms": p["grid_sms"] = int(v)
        elif k in ("--gemm", "--count"): pass
        elif k == "--dtype": p["dtype"] = v  # the element type changes no ring's walk
        else: raise ValueError(f"unknown option {k} in a problem: {args}")
        i += 2
    return p


def persistent_walks(n, bh, block_m, block_n, grid_sms, causal):
    """Per CTA, the K/V blocks of each of its tiles (static row walk; causal: heaviest first)."""
    m_blocks = cdiv(n, block_m)
    tiles = bh * m_blocks
    grid = min(tiles, grid_sms)
    walks = []
    for c in range(grid):
        uses, r = [], 0
        while r * grid + c < tiles:
            t = r * grid + c
            m = m_blocks - 1 - t // bh if causal else t % m_blocks
            kv_end = min(n, (m + 1) * block_m) if causal else n
            uses.append(cdiv(kv_end, block_n))
            r += 1
        walks.append(uses)
    return walks


def wave_fill(ctas, slots):
    return ctas / (cdiv(ctas, slots) * slots)


def choose_splits(ctas, max_splits, slots):
    ctas, slots = max(ctas, 1), max(slots, 1)
    max_splits = min(max(max_splits, 1), SPLIT_KV["max_splits"])
    best, best_fill = 1, wave_fill(ctas, slots)
    cap = max(ctas, SPLIT_KV["max_waves"] * slots)
    s = 1
    while s <= max_splits and ctas * s <= cap:
        fill = wave_fill(ctas * s, slots)
        if fill >= SPLIT_KV["min_wave_fill"]:
            return s
        if fill > best_fill:
            best, best_fill = s, fill
        s += 1
    return best


def decode_walks(b, heads, hkv, nq, nk, stages, sms, causal):
    """(splits, the fewest tiles any warp of any CTA walks) of the split_kv variant."""
    group = heads // hkv
    rows = group * nq
    row_blocks = cdiv(rows, DECODE["rows"])
    ctas = b * hkv * row_blocks
    tiles = cdiv(nk, DECODE["keys"])
    max_splits = min(max(tiles // (DECODE["warps"] * stages), 1), SPLIT_KV["max_splits"])
    want = choose_splits(ctas, max_splits, min(max(sms, 1), SPLIT_KV["max_sms"]) * DECODE["ctas_per_sm"])
    per = cdiv(tiles, want)
    splits = cdiv(tiles, per)
    fewest = None
    for rb in range(row_blocks):
        row0 = rb * DECODE["rows"]
        n_rows = min(DECODE["rows"], rows - row0)
        first_i, last_i = row0 % nq, (row0 + n_rows - 1) % nq
        max_i = nq - 1 if (n_rows >= nq or last_i < first_i) else last_i
        kv_end = nk - nq + max_i + 1 if causal else nk
        for split in range(splits):
            begin = split * per
            end = min(begin + per, cdiv(kv_end, DECODE["keys"]))
            for w in range(DECODE["warps"]):
                mine = max(0, cdiv(end - begin - w, DECODE["warps"]))
                fewest = mine if fewest is None else min(fewest, mine)
    return splits, fewest


def rowtile_walks(b, heads, hkv, nq, nk, stages, sms, causal):
    """(splits, the fewest tiles any CTA walks) of step 44: the rows of a K/V head in blocks of at
    most 32 or 64, shared as evenly as 16-row tiles allow; the CTA's ring takes every tile."""
    rows, keys, tr = heads // hkv * nq, ROWTILES["keys"], ROWTILES["tile_rows"]
    cta_rows = ROWTILES["small_rows"] if rows <= ROWTILES["small_rows"] else ROWTILES["large_rows"]
    blocks = cdiv(rows, cta_rows)
    block_rows = tr * cdiv(cdiv(rows, blocks), tr)
    tiles = cdiv(nk, keys)
    max_splits = min(max(tiles // stages, 1), SPLIT_KV["max_splits"])
    want = choose_splits(b * hkv * blocks, max_splits, min(max(sms, 1), SPLIT_KV["max_sms"]) * ROWTILES["ctas_per_sm"])
    per = cdiv(tiles, want)
    splits = cdiv(tiles, per)
    fewest = None
    for rb in range(blocks):
        row0 = rb * block_rows
        n_rows = min(block_rows, rows - row0)
        first_i, last_i = row0 % nq, (row0 + n_rows - 1) % nq
        max_i = nq - 1 if (n_rows >= nq or last_i < first_i) else last_i
        kv_end = nk - nq + max_i + 1 if causal else nk
        for split in range(splits):
            mine = max(0, min(split * per + per, cdiv(kv_end, keys)) - split * per)
            fewest = mine if fewest is None else min(fewest, mine)
    return splits, blocks, fewest


def ring_walks(r, p, d, causal):
    """[(what, wraps)] of ring r on problem p at head dimension d."""
    stages = r["stages"][d] if isinstance(r["stages"], dict) else r["stages"]
    block = r["block"][d] if isinstance(r["block"], dict) else r["block"]
    kind, out = r["kind"], []
    if kind == "decode":
        for nk in p["kv_n"]:
            for hkv in p["kv_heads"]:
                splits, fewest = decode_walks(p["b"], p["heads"], hkv or p["heads"], p["n"][0], nk, stages,
                                              p["grid_sms"], causal)
                check(splits >= 2, f"decode kv_n={nk} on {p['grid_sms']} SMs: {splits} splits, so the merge runs")
                out.append((f"kv_n={nk}: {splits} splits, each warp >= {fewest} tiles", wraps(fewest, stages)))
        return out
    if kind == "rowtiles":
        for nk in p["kv_n"]:
            for hkv in p["kv_heads"]:
                splits, blocks, fewest = rowtile_walks(p["b"], p["heads"], hkv or p["heads"], p["n"][0], nk, stages,
                                                       p["grid_sms"], causal)
                check(splits >= 2, f"step 44 kv_n={nk} on {p['grid_sms']} SMs: {splits} splits, so the merge runs")
                out.append((f"kv_n={nk}: {blocks} row blocks, {splits} splits, each CTA >= {fewest} tiles",
                            wraps(fewest, stages)))
        return out
    if kind == "varlen":
        for lens in p["varlen"]:
            tiles = sum(cdiv(x, r["block_m"]) for x in lens) * p["heads"]
            grid = min(tiles, p["grid_sms"])
            out.append((f"the longest sequence ({max(lens)}) per tile", wraps(cdiv(max(lens), block), stages)))
            out.append((f"Q/O buffer: >= {tiles // grid} tiles per CTA", wraps(tiles // grid, 1)))
        return out
    for n in p["n"]:
        if kind in ("kv", "q_inner", "bwd"):
            out.append((f"N={n}", wraps(cdiv(n, block), stages)))
        elif kind == "persistent":
            walks = persistent_walks(n, p["b"] * p["heads"], r["block_m"], block, p["grid_sms"] or 132, causal)
            out.append((f"N={n}: the longest tile", wraps(max(max(w) for w in walks), stages)))
            out.append((f"N={n}: the ring over the lightest CTA's tiles", min(wraps(sum(w), stages) for w in walks)))
            out.append((f"N={n}: Q/O buffer over the fewest tiles per CTA", min(wraps(len(w), 1) for w in walks)))
    return out


def ragged(r, p, d):
    """Why problem p is not ragged against ring r's tiles, or None."""
    block = r["block"][d] if isinstance(r["block"], dict) else r["block"]
    if r["kind"] in ("decode", "rowtiles"):
        bad = [nk for nk in p["kv_n"] if nk % block == 0] + [pg for pg in p["page"] for nk in p["kv_n"] if pg and nk % pg == 0]
        return f"keys or pages divide evenly: {bad}" if bad else None
    if r["kind"] == "varlen":
        return None if any(x % block and x % r["block_m"] for lens in p["varlen"] for x in lens) else "no ragged length"
    sizes = [block] + ([r["block_m"]] if r["block_m"] else [])
    bad = [n for n in p["n"] for s in sizes if n % s == 0]
    return f"N is a multiple of a tile: {bad}" if bad else None


def test_wrap_rule():
    r = subprocess.run(["bash", str(SANITIZE), "--print-problems", "--serving"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "sanitize.sh --print-problems --serving: exit 0")
    problems = {}
    for line in r.stdout.splitlines():
        step, kind, args = line.split("\t")
        problems.setdefault(int(step), []).append((kind, args))
    for step in RINGS:
        check(step in problems, f"step {step:02}: sanitize.sh has a problem for it")
    # The table of wraps (what sanitize.sh's comments state), one row per ring and walk: the wraps at
    # (D = 64, no mask), (64, causal), (128, no mask), (128, causal); "-" where that D is refused.
    rows = []
    for step, (rings, _) in sorted(RINGS.items()):
        for kind, args in problems.get(step, []):
            p = parse_problem(args)
            check(all(x > 0 for x in p["n"]), f"step {step:02} {args}: sizes parse")
            for rg in rings:
                cells = {}
                for d in HEAD_DIMS:
                    if d not in rg["d"]:
                        continue
                    why = ragged(rg, p, d)
                    check(why is None, f"step {step:02} {rg['name']} D={d} on {args}: ragged ({why or 'yes'})")
                    for causal in (False, True):
                        for what, w in ring_walks(rg, p, d, causal):
                            cells.setdefault(what, {})[(d, causal)] = w
                            check(w >= MIN_WRAPS, f"step {step:02} {rg['name']} D={d} {'causal' if causal else 'no mask'} "
                                                  f"on {args}: {what} wraps {w} >= {MIN_WRAPS} times")
                for what, ws in cells.items():
                    cols = " ".join(f"{ws.get((d, c), '-'):>2}" for d in HEAD_DIMS for c in (False, True))
                    rows.append(f"  {step:02} {kind:<7} {rg['name']:<34} {what:<46} {cols}")
    print("\n  wraps of every ring (D=64 none, causal; D=128 none, causal):")
    print("\n".join(rows) + "\n")


# ---- the scripts' arguments -------------------------------------------------------------------------
def run(script, *args, env=None, timeout=120, cwd=ROOT):
    return subprocess.run(["bash", str(script), *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def test_arguments(tmp):
    r = run(SANITIZE, "--help")
    check(r.returncode == 0 and "--print-problems" in r.stdout and "nothing is filtered" in r.stdout,
          "sanitize.sh --help prints the options, and that every hazard counts")
    fake_exe = tmp / "not-executable"
    fake_exe.write_text("")
    for bad, why in ((["--no-such-option", "x"], "unknown option"),
                     (["--steps", "3-x", "--print-problems"], "--steps takes"),
                     (["--steps", "9-3", "--print-problems"], "runs backwards"),
                     (["--steps", "48", "--print-problems"], "there is no step 48"),
                     (["--steps", "99", "--print-problems"], "there is no step 99"),
                     (["--dtype", "fp32", "--print-problems"], "--dtype takes"),
                     (["--timeout", "0", "--print-problems"], "--timeout takes"),
                     (["--timeout"], "--timeout needs a value"),
                     ([], "EXECUTABLE is missing"),
                     ([fake_exe], "is not an executable"),
                     (["--args", "--no-time", "--steps", "3", "/bin/true"], "does not combine"),
                     (["/bin/true", "bogus"], "unknown tool 'bogus'")):
        r = run(SANITIZE, *bad)
        check(r.returncode == 2 and why in r.stderr, f"sanitize.sh {' '.join(map(str, bad))}: exit 2 ({why})")
    r = run(SANITIZE, "--print-problems", "--steps", "20")
    check(r.returncode == 0 and r.stdout.startswith("20\tbase\t") and "--grid-sms 3" in r.stdout,
          "sanitize.sh --print-problems --steps 20: one persistent problem with --grid-sms")
    r = run(SANITIZE, "--print-problems", "--steps", "26")
    check("serving" not in r.stdout, "sanitize.sh: 26's GQA problem only with --serving")
    r = run(SANITIZE, "--print-problems", "--steps", "28")
    check("serving" in r.stdout, "sanitize.sh: 28 (decode only) runs its Part VI problem without --serving")

    r = run(SANITIZE_ALL, "--help")
    check(r.returncode == 0 and "--budget" in r.stdout and "L09" in r.stdout, "sanitize_all.sh --help prints the options")
    build = make_fake_build(tmp / "argbuild")
    for bad, why in ((["-j", "0", tmp / "o.log"], "-j takes"),
                     (["-j", "x", tmp / "o.log"], "-j takes"),
                     (["--budget", "-5", tmp / "o.log"], "--budget takes"),
                     (["--tools", "memcheck,bogus", tmp / "o.log"], "unknown tool 'bogus'"),
                     (["--labs", "L13", tmp / "o.log"], "unknown lab 'L13'"),
                     (["--steps", "3,x", tmp / "o.log"], "--steps takes"),
                     (["--build", tmp / "nowhere", tmp / "o.log"], "no "),
                     (["--build", build], "OUT_LOG"),
                     (["--build", build, tmp / "no-folder" / "o.log"], "does not exist"),
                     (["--build", build, "--steps", "36", tmp / "o.log"], "there is no step 36"),
                     (["a.log", "b.log"], "one OUT_LOG")):
        r = run(SANITIZE_ALL, *bad)
        check(r.returncode == 2 and why in r.stderr, f"sanitize_all.sh {' '.join(map(str, bad))}: exit 2 ({why})")
    check(not (tmp / "o.log").exists(), "sanitize_all.sh wrote nothing for bad arguments")


# ---- end to end on stand-ins ----------------------------------------------------------------------
# The fake compute-sanitizer runs the program, then prints what the real one would from the
# behaviour the program's arguments ask for: --steps 25 has 14 racecheck hazards, 23 fails its
# checks, 28 runs no variant, 21 hangs.
FAKE_SANITIZER = r'''#!/usr/bin/env python3
import subprocess, sys, time
a = sys.argv[1:]
tool = a[a.index("--tool") + 1]
error_exit = int(a[a.index("--error-exitcode") + 1])
i = a.index("--error-exitcode") + 2
if a[i] == "--leak-check":
    i += 2
prog = a[i:]
steps = prog[prog.index("--steps") + 1].split(",") if "--steps" in prog else []
print("========= COMPUTE-SANITIZER", flush=True)
if "21" in steps:
    time.sleep(30)
rc = subprocess.run(prog).returncode
hazards = 14 if tool == "racecheck" and "25" in steps else 0
if hazards:
    print("========= Error: Race reported between Write access at hopper_backward_kernel+0x100 in hopper_backward.cu:388")
if tool == "racecheck":
    print(f"========= RACECHECK SUMMARY: {hazards} hazards displayed ({hazards} errors, 0 warnings)")
else:
    print("========= ERROR SUMMARY: 0 errors")
sys.exit(error_exit if hazards else rc)
'''
FAKE_LADDER = r'''#!/usr/bin/env bash
case " $* " in
  *" --list "*) for s in 20 21 23 25 28 99; do echo "$s step$s             [attention] a step"; echo "     $s/main                 the variant  [sm>=90]"; done; exit 0 ;;
  *" --help "*) echo "  --steps TEXT  Steps to run"; for i in $(seq 4000); do echo "  --option-$i  more help than a pipe holds"; done; exit 0 ;;
  *" --steps 23 "*) echo "error: at least one variant failed its checks (see the table)" >&2; exit 1 ;;
  *" --steps 28 "*) echo "error: every selected variant was skipped on this GPU" >&2; exit 6 ;;
esac
echo "ladder ran: $*"
'''
FAKE_LAB = '#!/usr/bin/env bash\necho "== {lab}: the lab"; echo "{lab}: PASS"\n'
# bin/lab_L09_solution --cpu builds the driver next to bin/, as the real one's checker does.
FAKE_L09 = ('#!/usr/bin/env bash\nd="$(dirname "$0")/../labs/lab_L09_solution"; mkdir -p "$d"\n'
            'printf \'#!/usr/bin/env bash\\necho "L09 driver: both outputs right"\\n\' >"$d/lab_L09_run"; chmod +x "$d/lab_L09_run"\n'
            'echo "L09: CPU parts PASS"\n')


def write_exe(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def make_fake_build(build):
    write_exe(build / "bin/ladder", FAKE_LADDER)
    for lab in ("L03", "L05"):
        write_exe(build / f"bin/lab_{lab}_solution", FAKE_LAB.format(lab=lab))
    write_exe(build / "bin/lab_L09_solution", FAKE_L09)
    return build


def test_end_to_end(tmp):
    build = make_fake_build(tmp / "build")
    tools = tmp / "tools"
    write_exe(tools / "compute-sanitizer", FAKE_SANITIZER)
    env = {"PATH": f"{tools}:{os.environ['PATH']}"}
    ladder = build / "bin/ladder"

    r = run(SANITIZE, "--steps", "20", ladder, env=env)
    check(r.returncode == 0 and r.stdout.count("== result:") == 4 and "== result: racecheck clean 0" in r.stdout
          and "[steps 20] --b 1 --heads 2 --n 777 --grid-sms 3" in r.stdout,
          "sanitize.sh --steps 20 on the stand-ins: four tools clean, exit 0")
    r = run(SANITIZE, "--steps", "25", ladder, "racecheck", env=env)
    check(r.returncode == 1 and "== result: racecheck reports 14" in r.stdout and "Race reported" in r.stdout,
          "sanitize.sh: 14 hazards are 14 reports, exit 1")
    r = run(SANITIZE, "--steps", "25", ladder, "memcheck", env=env)
    check(r.returncode == 0, "sanitize.sh: step 25 under memcheck is clean")
    r = run(SANITIZE, "--steps", "23", ladder, "memcheck", env=env)
    check(r.returncode == 1 and "== result: memcheck fail" in r.stdout and "failed its checks" in r.stdout,
          "sanitize.sh: a failed check under the tool is a failure, with the program's error shown")
    r = run(SANITIZE, "--steps", "28", ladder, "synccheck", env=env)
    check(r.returncode == 1 and "== result: synccheck nothing" in r.stdout and "nothing was checked" in r.stdout,
          "sanitize.sh: a step no variant of which runs is not a pass")
    r = run(SANITIZE, "--steps", "21", "--timeout", "2", ladder, "initcheck", env=env)
    check(r.returncode == 1 and "== result: initcheck timeout" in r.stdout and "TIMEOUT" in r.stdout,
          "sanitize.sh: a hang past --timeout is a timeout, exit 1")
    r = run(SANITIZE, "--steps", "20", "--log-dir", tmp / "logs", ladder, "memcheck", env=env)
    check((tmp / "logs" / "memcheck-1.log").is_file(), "sanitize.sh --log-dir keeps the whole output")
    ran = (tmp / "logs" / "memcheck-1.log").read_text() if (tmp / "logs" / "memcheck-1.log").is_file() else ""
    check("ladder ran: " in ran and " --steps 20 " in ran,
          "sanitize.sh passes --steps to the ladder (its help longer than a pipe holds: no SIGPIPE race)")
    r = run(SANITIZE, "--args", "--no-time", build / "bin/lab_L05_solution", "racecheck", env=env)
    check(r.returncode == 0 and "== result: racecheck clean" in r.stdout, "sanitize.sh --args runs a lab checker as given")

    out = tmp / "all.log"
    r = run(SANITIZE_ALL, "-j", "3", "--build", build, "--steps", "20,25", "--labs", "L03,L05,L09", out, env=env, timeout=300)
    log = out.read_text() if out.exists() else ""
    table = log[log.find("## summary"):]
    check(r.returncode == 1 and "step-25" in table and "14 reports" in table, "sanitize_all.sh: step 25's hazards in the table, exit 1")
    check(re.search(r"step-20 +clean \(\d+ s\) +clean", table) is not None, "sanitize_all.sh: step 20 clean, with wall times")
    check(re.search(r"lab-L09 +clean", table) is not None and "labs/lab_L09_solution/lab_L09_run" in log,
          "sanitize_all.sh: L09's driver built once and sanitized")
    check(re.search(r"lab-L05 +clean", table) is not None, "sanitize_all.sh: a lab solution's checker sanitized")
    check(re.search(r"lab-L03 +no kernel \(CPU-only\)", table) is not None and "not sanitized" in log,
          "sanitize_all.sh: a CPU-only lab is listed, not run")
    check(log.find("### step-20 memcheck") < log.find("### step-20 racecheck") < log.find("### step-25 memcheck")
          < log.find("### lab-L05 memcheck") < log.find("### lab-L09 initcheck"), "sanitize_all.sh: the log's order is stable")
    check("total wall time:" in log and "slowest jobs:" in log and "code: {" in log, "sanitize_all.sh: wall times and provenance")
    check((tmp / "all.log.logs.tgz").is_file() and not (tmp / "all.log.d").exists(),
          "sanitize_all.sh packs the sanitizer's logs beside OUT_LOG")
    r = run(SANITIZE_ALL, "--build", build, "--steps", "21", "--tools", "memcheck", "--labs", "none", "--budget", "3",
            "--timeout", "60", out, env=env, timeout=300)
    log = out.read_text() if out.exists() else ""
    check(r.returncode == 1 and re.search(r"step-21 +timeout", log) is not None,
          "sanitize_all.sh: a job past the run's budget is a timeout, and the log is written")


def main():
    test_constants()
    test_wrap_rule()
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        test_arguments(tmp)
        test_end_to_end(tmp)
    if failures:
        print(f"\n{len(failures)} check(s) failed:")
        for f in failures:
            print("  - " + f)
        return 1
    print("\nall sanitizer script checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The tile model of chapters 20 and 21: how evenly a static tile list spreads causal work over
the CTAs of a persistent grid, and how many heads are in flight at once.

Each (head, query block) tile costs its K/V blocks plus `--overhead` blocks (prologue and
epilogue); G CTAs (one per SM) take the list in rows of G, left to right ("row") or alternating
direction ("snake"); the kernel's time is the busiest CTA's. Orders:
  heaviest   heaviest query block of every head first (step 20), optionally within windows of W heads
  paired     within windows of W heads, the heaviest query block beside the lightest, then the next pair

    scripts/tile_model.py                       # the issue's causal shapes, step 20's tiles
    scripts/tile_model.py --block-m 192         # step 21's tiles
"""
import argparse
import math


def weight(m, n, block_m, block_n, overhead):
    return math.ceil(min(n, (m + 1) * block_m) / block_n) + overhead


def order(bh, n, block_m, block_n, overhead, kind, window):
    mb = math.ceil(n / block_m)
    if kind == "heaviest":
        ms = [(m,) for m in range(mb - 1, -1, -1)]
    else:
        ms, lo, hi = [], 0, mb - 1
        while lo <= hi:
            ms.append((hi,) if lo == hi else (hi, lo))
            lo, hi = lo + 1, hi - 1
    tiles = []
    for g0 in range(0, bh, window):
        for group in ms:
            for h in range(g0, min(bh, g0 + window)):
                tiles += [(h, weight(m, n, block_m, block_n, overhead)) for m in group]
    return tiles


def makespan(tiles, ctas, snake):
    loads = [0.0] * ctas
    for c in range(ctas):
        r = 0
        while True:
            t = r * ctas + (ctas - 1 - c) if (snake and r % 2) else r * ctas + c
            if t >= len(tiles):
                break
            loads[c] += tiles[t][1]
            r += 1
    return max(loads) / (sum(w for _, w in tiles) / ctas)


def heads_in_flight(tiles, ctas):
    rows = [len({h for h, _ in tiles[i:i + ctas]}) for i in range(0, len(tiles), ctas)]
    return sum(rows) / len(rows), max(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--block-m", type=int, default=128)
    ap.add_argument("--block-n", type=int, default=128)
    ap.add_argument("--ctas", type=int, default=132)
    ap.add_argument("--overhead", type=float, default=0.5)
    args = ap.parse_args()
    shapes = [(4, 8, 4096), (4, 8, 8192), (4, 16, 4096), (2, 16, 8192)]
    print("shape            order     W   row walk  snake   heads in flight (avg, max)")
    for b, h, n in shapes:
        bh = b * h
        for kind in ("heaviest", "paired"):
            for window in sorted({bh, 16, 8, 4, 2}, reverse=True):
                if window > bh:
                    continue
                tiles = order(bh, n, args.block_m, args.block_n, args.overhead, kind, window)
                avg, mx = heads_in_flight(tiles, args.ctas)
                print(f"B={b} H={h:2d} N={n}  {kind:8s} {window:3d}   {makespan(tiles, args.ctas, False):.3f}    "
                      f"{makespan(tiles, args.ctas, True):.3f}   {avg:4.1f}, {mx}")


if __name__ == "__main__":
    main()

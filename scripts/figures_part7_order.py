#!/usr/bin/env python3
"""Draws chapter 39's figure into docs/img/:

  part7-deterministic-order.png  one head of step 39's deterministic backward: for each key block's
                                 CTA, which query block it works on at each step and where it waits
                                 for its turn to add dQ, under four orders: (a) the staircase without
                                 a mask (every walk from query block 0, turns ascending: the kernel's
                                 fallback, rotate = false), (b) the staircase with the causal mask
                                 (walks from the diagonal, turns ascending: the step's first form),
                                 (c) the rotated walk without a mask and (d) the causal order, turns
                                 from the last key block down (the kernel's two orders now).
                                 Schematic: the walks and the turns are computed by the rules of
                                 `m_at` and `turn_at` in
                                 steps/39_deterministic_backward/deterministic_backward.cu (the
                                 lines are checked against the file's text, so a change there fails
                                 here), with its kBlockN and kBlockM; the durations are a model
                                 (every CTA of the head resident, one query block's products = one
                                 step, the add instantaneous, the turn passed at the CTA's next add
                                 or at its end), not a measurement.

    scripts/figures_part7_order.py            # writes the PNG
    scripts/figures_part7_order.py --out DIR  # somewhere else
    scripts/figures_part7_order.py --check    # checks the rules and simulates, writes nothing

Both modes print each order's steps for the head and its waiting steps, and the slack of the
current orders at D = 64 and D = 128: how many steps before a CTA reaches its add the key block
ahead of it in the order has already passed the turn (0: none to spare).
"""
import sys

from figlib import GREY, out_dir, parser, pyplot, save, source_constant, source_match, source_text

KERNEL = "steps/39_deterministic_backward/deterministic_backward.cu"
SCHEMATIC_BLOCKS = 8  # key blocks (and query blocks at D = 64) of the schematic's head


# ---- the kernel's rules ---------------------------------------------------------------------------

def kernel_rules():
    """(kBlockN, {head_dim: kBlockM}) after checking that the walk, the turns and the hand-over are
    still the lines this script reproduces."""
    lines = {
        "the diagonal": "const int diagonal = kv_start / kBlockM;",
        "the walk's start": "const int m_begin = kCausal ? diagonal : 0;",
        "the natural walk": "if (kCausal || !rotate) return m_begin + i;",
        "the rotated walk": "const int m = diagonal + i; return m < m_end ? m : m - m_end;",
        "the last key block a query block meets":
            "const int nearest = min(key_blocks - 1, (m * kBlockM + kBlockM - 1) / kBlockN);",
        "the causal turns": "if constexpr (kCausal) return nearest - key_block;",
        "the ascending turns": "if (!rotate) return key_block;",
        "the key block that starts nearest below a query block": "const int first = min(key_blocks - 1, m * kBlockM / kBlockN);",
        "the rotated turns": "const int t = first - key_block; return t >= 0 ? t : t + key_blocks;",
        "the causal grid in reverse": "const int key_block = kCausal ? key_blocks - 1 - int(blockIdx.x) : int(blockIdx.x);",
        "the turn passed at the next add": "pass_pending_turn(); bwd::wait_turn(sem_of(m), turn_at(m));",
        "the passed turn": "bwd::pass_turn(sem_of(pending_m), turn_at(pending_m) + 1);",
        "the last turn passed at the end": "if (lane == 0) pass_pending_turn();",
    }
    for what, text in lines.items():
        source_text(KERNEL, text, what)
    block_n = source_constant(KERNEL, "kBlockN")
    m = source_match(KERNEL, r"kBlockMOf\s*=\s*kHeadDim\s*==\s*64\s*\?\s*(\d+)\s*:\s*(\d+);", "kBlockMOf")
    return block_n, {64: int(m.group(1)), 128: int(m.group(2))}


def orders(key_blocks, block_n, block_m):
    """{name: (walk(kb, i) -> m, turn(kb, m), blocks(kb))} for one head of key_blocks key blocks,
    the kernel's m_at and turn_at (and the first form's causal turns: ascending)."""
    m_end = key_blocks * block_n // block_m

    def diagonal(kb):
        return kb * block_n // block_m

    def nearest(m):
        return min(key_blocks - 1, (m * block_m + block_m - 1) // block_n)

    def first(m):
        return min(key_blocks - 1, m * block_m // block_n)

    def rotated_turn(kb, m):
        t = first(m) - kb
        return t if t >= 0 else t + key_blocks

    def everything(kb):
        return m_end

    def causal_blocks(kb):
        return m_end - diagonal(kb)

    return {
        "staircase": (lambda kb, i: i, lambda kb, m: kb, everything),
        "staircase causal": (lambda kb, i: diagonal(kb) + i, lambda kb, m: kb, causal_blocks),
        "rotated": (lambda kb, i: (diagonal(kb) + i) % m_end, rotated_turn, everything),
        "causal": (lambda kb, i: diagonal(kb) + i, lambda kb, m: nearest(m) - kb, causal_blocks),
    }


# ---- the model ------------------------------------------------------------------------------------

def simulate(key_blocks, walk, turn, blocks):
    """Every CTA of the head resident from step 0. A CTA computes a query block's products in one
    step; at its add it first passes the turn of its previous add (the kernel's pass_pending_turn),
    then waits until the block's semaphore holds its turn, adds, and starts the next block; after
    its last add it passes that turn too. Returns ({kb: [(step, 'compute' | 'wait', m)]}, {kb: the
    step its last add went out})."""
    sem = {}
    state = [dict(it=0, at=1, pending=None, passed=False, done=blocks(kb) == 0, end=0) for kb in range(key_blocks)]
    cells = {kb: [(0, "compute", walk(kb, 0))] if blocks(kb) else [] for kb in range(key_blocks)}

    def pass_turn(kb):
        if state[kb]["pending"] is not None:
            sem[state[kb]["pending"]] = turn(kb, state[kb]["pending"]) + 1
            state[kb]["pending"] = None

    step = 0
    while not all(s["done"] for s in state):
        for kb, s in enumerate(state):  # the CTAs that reach an add now pass their previous turn first
            if not s["done"] and s["at"] == step and not s["passed"]:
                pass_turn(kb)
                s["passed"] = True
        changed = True
        while changed:  # then every add whose turn has come, and the turns those pass, this step
            changed = False
            for kb, s in enumerate(state):
                if s["done"] or s["at"] > step or not s["passed"]:
                    continue
                m = walk(kb, s["it"])
                if sem.get(m, 0) != turn(kb, m):
                    continue
                s.update(pending=m, it=s["it"] + 1, passed=False)
                changed = True
                if s["it"] < blocks(kb):
                    s["at"] = step + 1
                    cells[kb].append((step, "compute", walk(kb, s["it"])))
                else:
                    pass_turn(kb)
                    s.update(done=True, end=step)
        for kb, s in enumerate(state):
            if not s["done"] and s["at"] <= step:
                cells[kb].append((step, "wait", walk(kb, s["it"])))
        step += 1
        if step > 10 * key_blocks * key_blocks:
            sys.exit(f"figures_part7_order.py: the model is stuck at step {step}: a cycle of waits")
    return cells, {kb: s["end"] for kb, s in enumerate(state)}


def slack(key_blocks, walk, turn, blocks):
    """The fewest steps, over every query block and turn t >= 1, between the moment the holder of
    turn t - 1 passes it (at its next add, one step after its own) and the holder of turn t's add,
    both CTAs on their walks' schedules without any wait."""
    visits = {}
    for kb in range(key_blocks):
        for i in range(blocks(kb)):
            m = walk(kb, i)
            visits.setdefault(m, {})[turn(kb, m)] = (kb, i)
    least = None
    for holders in visits.values():
        for t in range(1, len(holders)):
            kb_before, i_before = holders[t - 1]
            kb, i = holders[t]
            passed = i_before + 2 if i_before + 1 < blocks(kb_before) else i_before + 1
            gap = (i + 1) - passed
            least = gap if least is None else min(least, gap)
    return least


# ---- the figure -----------------------------------------------------------------------------------

PANELS = [
    ("staircase", "(a) the staircase, no mask: every walk from query block 0, turns ascending"),
    ("staircase causal", "(b) the staircase, causal: walks from the diagonal, turns ascending"),
    ("rotated", "(c) no mask now: each walk from the key block's diagonal, wrapping; turns follow"),
    ("causal", "(d) causal now: turns from the last key block that reaches the query block down to 0"),
]
TRACED = 3  # the query block whose turns the figure links, in order


def draw(out, key_blocks, block_n, block_m, runs):
    plt = pyplot()
    from matplotlib.patches import Rectangle
    m_end = key_blocks * block_n // block_m
    colors = plt.get_cmap("Pastel1" if m_end <= 9 else "tab20")
    width = max(max(ends.values()) for _, ends, _ in runs.values()) + 1
    fig, axes = plt.subplots(2, 2, figsize=(12, 6.6))
    for ax, (name, title) in zip(axes.flat, PANELS):
        cells, ends, (walk, turn, blocks) = runs[name]
        for kb in range(key_blocks):
            for step, kind, m in cells[kb]:
                if kind == "compute":
                    traced = m == TRACED
                    ax.add_patch(Rectangle((step, kb), 1, 1, facecolor=colors(m % colors.N), edgecolor="black",
                                           lw=1.6 if traced else 0.5))
                    ax.text(step + 0.5, kb + 0.5, str(m), ha="center", va="center", fontsize=8,
                            fontweight="bold" if traced else "normal")
                else:
                    ax.add_patch(Rectangle((step, kb), 1, 1, facecolor="#dddddd", edgecolor=GREY, lw=0.4,
                                           hatch="////"))
        # Query block TRACED's adds, in the order of its turns: where each holder's add went out.
        adds = {}
        for kb in range(key_blocks):
            computed = [(s, m) for s, kind, m in cells[kb] if kind == "compute"] + [(ends[kb] + 1, None)]
            for (s, m), (s_next, _) in zip(computed, computed[1:]):
                if m == TRACED:
                    waited = [w for w, kind, mm in cells[kb] if kind == "wait" and mm == m]
                    adds[turn(kb, m)] = (max(waited) + 1 if waited else s + 1, kb + 0.5)
        path = [adds[t] for t in sorted(adds)]
        ax.plot([p[0] for p in path], [p[1] for p in path], color="black", lw=1, ls="--", marker="o", ms=3)
        total = max(ends.values())
        waits = sum(1 for kb in range(key_blocks) for _, kind, _ in cells[kb] if kind == "wait")
        ax.set_title(f"{title}\nthe head done after {total} steps; {waits} CTA-steps spent waiting", fontsize=8)
        ax.set_xlim(0, width)
        ax.set_ylim(key_blocks, 0)
        ax.set_xticks(range(0, width + 1, 2))
        ax.set_yticks([kb + 0.5 for kb in range(key_blocks)])
        ax.set_yticklabels([f"kb {kb}" for kb in range(key_blocks)], fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("step (one query block's products)", fontsize=7)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.suptitle(f"Schematic: the order of dQ's adds in one head of step 39, {key_blocks} key blocks × {m_end} "
                 f"query blocks (kBlockN = {block_n}, kBlockM = {block_m}: D = 64's tiles)", fontsize=10)
    fig.text(0.5, 0.01, "A cell: the query block a key block's CTA computes at that step; hatched: the CTA "
             "waits for its turn to add. Dashed: the adds into query block "
             f"{TRACED}, in the order of its turns. Walks and turns by m_at and turn_at of "
             "deterministic_backward.cu; the durations are a model (every CTA resident, one step a block, "
             "the turn passed at the next add), not measured.", ha="center", fontsize=7, color="#444444",
             wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    save(fig, out, "part7-deterministic-order.png", dpi=110)


def main():
    ap = parser(__doc__)
    ap.add_argument("--check", action="store_true", help="check the rules and simulate, write nothing")
    args = ap.parse_args()
    block_n, block_m_of = kernel_rules()
    block_m = block_m_of[64]
    runs = {}
    for name, rules in orders(SCHEMATIC_BLOCKS, block_n, block_m).items():
        cells, ends = simulate(SCHEMATIC_BLOCKS, *rules)
        runs[name] = (cells, ends, rules)
        waits = sum(1 for kb in cells for _, kind, _ in cells[kb] if kind == "wait")
        print(f"{name}: the head done after {max(ends.values())} steps, {waits} CTA-steps waiting")
    for d, bm in sorted(block_m_of.items()):
        per = orders(SCHEMATIC_BLOCKS, block_n, bm)
        print(f"D = {d} (kBlockN = {block_n}, kBlockM = {bm}): slack of the rotated walk "
              f"{slack(SCHEMATIC_BLOCKS, *per['rotated'])} step(s), of the causal order "
              f"{slack(SCHEMATIC_BLOCKS, *per['causal'])}")
    if not args.check:
        out = out_dir(args.out)
        draw(out, SCHEMATIC_BLOCKS, block_n, block_m, runs)
        print(f"wrote part7-deterministic-order.png to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Draws the course's map, docs/img/course-path.png (docs/START.md): every step as a box, one row
per part, and an arrow from the step each one improves on to the step itself.

The arrows are read from the steps' own registrations (the `improves_on` argument of
`attention_step(...)`, `backward_step(...)` in steps/*/*.cu: the row a step's speed-up is measured
against), so the map cannot drift from the code. Two steps after the foundations start a new kind of kernel and have no
`improves_on`; for them the map draws the chapter a learner should have read first, which is the
course's choice and is listed in READ_FIRST below (dashed arrows).

  scripts/figures_course.py              # docs/img/course-path.png
  scripts/figures_course.py --out DIR    # somewhere else
  scripts/figures_course.py --print      # the edges as text, no drawing (no matplotlib needed)

matplotlib is installed with pip if it is missing (CI never runs this script).
"""
import re
import sys

from figlib import ROOT, arrow, out_dir, parser, pyplot, save

# (part, first step, last step, hours, on the core path?). Hours: reading a chapter with its kernel
# open, answering its questions and doing one exercise; a lab adds 1-2 h (labs/README.md).
PARTS = [
    ("I foundations", 0, 2, 3, True),
    ("II FlashAttention 1-2", 3, 6, 6, True),
    ("fp16 accumulation", 30, 30, 1, False),
    ("III softmax experiments", 7, 15, 5, False),
    ("IV Hopper", 16, 22, 10, True),
    ("V backward", 23, 25, 6, True),
    ("VI serving", 26, 29, 5, True),
    ("VII ahead of FA4", 31, 35, 5, False),
    ("VII the backward", 36, 40, 3, False),
    ("VII decode in one kernel", 41, 44, 2.5, False),
    ("VIII FP8", 45, 46, 3, False),
]

# Steps that begin a new kernel (no `improves_on`): the chapter to read before them.
READ_FIRST = {
    23: 6,   # the backward recomputes P from the forward's LSE (chapter 06's `lse` variant)
    28: 26,  # decoding packs chapter 26's GQA group into one tile's rows
}


def registrations(root=ROOT):
    """{step number: (dir name, improves_on step number or None)} from every step's registration."""
    out = {}
    for path in sorted((root / "steps").glob("*/*.cu")):
        text = path.read_text()
        for m in re.finditer(r"\b(?:attention|backward|matmul|reduction)_step\(", text):
            args = split_call(text, m.end())
            number = int(args[0])
            base = literal(args[3]) if len(args) > 3 else ""
            out[number] = (path.parent.name, int(base.split("/")[0]) if base else None)
    return out


def split_call(text, i):
    """The top-level arguments of a call whose '(' ends just before text[i]."""
    args, cur, depth, in_string = [], "", 1, False
    while depth:
        c = text[i]
        if in_string:
            cur += c
            if c == "\\":
                cur += text[i + 1]
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string, cur = True, cur + c
        elif c == "(":
            depth, cur = depth + 1, cur + c
        elif c == ")":
            depth -= 1
            if depth:
                cur += c
        elif c == "," and depth == 1:
            args.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    return args + [cur]


def literal(arg):
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', arg))


def edges(steps):
    """[(from, to, kind)]: 'measured' from improves_on, 'read first' from READ_FIRST."""
    out = [(base, n, "measured") for n, (_, base) in sorted(steps.items()) if base is not None]
    out += [(a, b, "read first") for b, a in sorted(READ_FIRST.items())]
    return out


def draw(steps, out):
    plt = pyplot()
    from matplotlib.patches import FancyBboxPatch

    pos = {}
    fig, ax = plt.subplots(figsize=(15, 7.8))
    for row, (label, first, last, hours, core) in enumerate(PARTS):
        y = -row
        for k, n in enumerate(range(first, last + 1)):
            pos[n] = (k * 1.55 + 3.2, y)
        colour = "#dbe9f6" if core else "#eeeeee"
        edge = "#2b6cb0" if core else "#888888"
        for n in range(first, last + 1):
            x, y0 = pos[n]
            ax.add_patch(FancyBboxPatch((x - 0.6, y0 - 0.28), 1.2, 0.56, boxstyle="round,pad=0.02",
                                        fc=colour, ec=edge, lw=2.0 if core else 1.0))
            name = steps[n][0][3:].replace("_", " ")
            if len(name) > 16:  # two lines rather than a cut word
                cut = name.rfind(" ", 0, 17)
                name = name[:cut] + "\n" + name[cut + 1:]
            ax.text(x, y0 + 0.12, f"{n:02d}", ha="center", va="center", fontsize=10, weight="bold")
            ax.text(x, y0 - 0.1, name, ha="center", va="center", fontsize=6.3, linespacing=0.9)
        ax.text(0.0, y, f"{label}\n~{hours} h" + ("" if core else "  (branch)"), ha="left",
                va="center", fontsize=9.5, weight="bold" if core else "normal",
                color="#1a365d" if core else "#555555")
    for a, b, kind in edges(steps):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        if ya == yb and b == a + 1:
            start, end, rad = (xa + 0.6, ya), (xb - 0.6, yb), 0.0
        elif ya == yb:
            start, end, rad = (xa, ya - 0.28), (xb, yb - 0.28), 0.25
        else:
            start, end = (xa, ya - 0.28), (xb, yb + 0.28)
            rad = 0.0
        arrow(ax, start, end, arrowstyle="-|>", mutation_scale=10, connectionstyle=f"arc3,rad={rad}",
              color="#2b6cb0" if kind == "measured" else "#c05621",
              lw=1.0, ls="-" if kind == "measured" else "--", alpha=0.8)
    ax.plot([], [], color="#2b6cb0", label="improves on (its speed-up is measured against it)")
    ax.plot([], [], color="#c05621", ls="--", label="a new kernel: read this chapter first")
    ax.legend(loc="lower right", fontsize=8.5, frameon=False)
    ax.set_xlim(-0.2, 3.2 + 9 * 1.55)
    ax.set_ylim(-len(PARTS) + 0.2, 0.6)
    ax.axis("off")
    ax.set_title("The course's map: the core path (blue) and its branches (grey); arrows read from "
                 "the steps' registrations", fontsize=11)
    save(fig, out_dir(out), "course-path.png", dpi=130, bbox_inches="tight")
    print(out / "course-path.png")


def main():
    ap = parser(__doc__)
    ap.add_argument("--print", action="store_true", help="print the edges, draw nothing")
    args = ap.parse_args()
    steps = registrations()
    missing = [n for _, a, b, _, _ in PARTS for n in range(a, b + 1) if n not in steps]
    if missing:
        print(f"no registration found for step(s) {missing}", file=sys.stderr)
        return 1
    if args.print:
        for a, b, kind in edges(steps):
            print(f"{a:02d} -> {b:02d}  {kind}")
        return 0
    draw(steps, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""tests/cpu/check_chapters.py must reject what a lesson may not contain (a CPU test,
docs_chapters_checker).

Builds tiny docs trees in a temporary directory, each a good tree with one change, runs the checker
on each and requires it to pass the good ones and fail the bad ones, naming the file (and, for the
prose rules, the line). The good tree already holds what must pass: "rounded", "round-robin",
"round trip", "round up", figure and table markers naming r2 files, fenced code, a generated table
block, a table footer line naming its results file and its commit, a hex constant with 0x, a link to
a notes file named for its round, and the verb "issues".

    python3 tests/cpu/test_check_chapters.py
"""
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tests" / "cpu" / "check_chapters.py"

BODY_GOOD = """\
The scale is rounded to fp16, the heads go round-robin over the SMs, one round trip to DRAM per
tile, and we round up N to the tile: none of these is a measurement round. A warp issues 44
ldmatrix and can issue 16-byte copies; the mask is `0x9e3779b9` and 0xdeadbeef12 in prose.
The kernel runs at <!-- figure: results/h200/2026-11-30-hopper-r2-ladder-d128.json id=20/x tflops -->666
TFLOP/s (a marker comment names an r2 file; it is not prose). A marker may span lines:
<!-- figure: results/h200/x-r3.json round 3 session
     issue 14 00fb939 -->
How this kernel was arrived at: [notes](results/notes/round-3.md).

```
round 3 at commit 00fb939, issue 14, one session, device time
```

<!-- table: ladder results/h200/2026-11-30-hopper-r2-ladder-d128.json ids=20/ -->
Speed-up over the compared variant ("same": within the noise of the rounds 1 to 3).

| id | TFLOP/s |
|---|---|
| 20/x | 666 |

*H200; commit `00fb939`, round 3, 2026-11-30.*
<!-- end table -->

| id | TFLOP/s |
|---|---|
| 20/x | 666 |

*From [the file](results/h200/2026-11-30-hopper-r2-ladder-d128.json), commit `00fb939`.*
"""


def chapter(title, image, body=BODY_GOOD):
    figure = f"![{title}]({image})\n\n*Schematic.*\n" if image else ""
    return (f"# {title}\n\n## Predict first\n\n1. What?\n2. Why?\n\n## The idea\n\n{figure}\n{body}\n"
            "## Verdict\n\nIt works.\n\n## Answers\n\n1. This.\n2. That.\n\n"
            "## Exercises\n\n1. Change one line.\n")


def good_tree():
    """{path relative to the root: text}: two chapters, a part introduction, START.md, the index."""
    return {
        "docs/00_alpha.md": chapter("Alpha", "img/alpha.png"),
        "docs/01_beta.md": chapter("Beta", "img/beta.png"),
        "docs/part1_intro.md": "# Part I\n\nThe round trip of a tile, rounded to fp16.\n",
        "docs/START.md": "# Start here\n\nRead [the index](README.md).\n",
        "docs/README.md": "# Index\n\n- [Alpha](00_alpha.md)\n- [Beta](01_beta.md)\n",
        "docs/img/alpha.png": "png",
        "docs/img/beta.png": "png",
        "docs/img/shared.png": "png",
        "docs/results/notes/round-3.md": "# What round 3 measured (history is fine here)\n",
        "docs/results/h200/2026-11-30-hopper-r2-ladder-d128.json": "{}\n",
        "docs/results/h200/2026-11-30-hopper-r5-ladder-d128.json": "{}\n",
    }


def run(tree):
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for name, text in tree.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        done = subprocess.run([sys.executable, str(CHECKER), str(root / "docs")],
                              capture_output=True, text=True)
        return done.returncode, done.stdout + done.stderr


def with_body(extra, name="docs/01_beta.md"):
    """The good tree with one line of prose added to a chapter's body; its line number too."""
    tree = good_tree()
    text = chapter("Beta", "img/beta.png", BODY_GOOD + extra + "\n")
    tree[name] = text
    return tree, text.split("\n").index(extra.split("\n")[0]) + 1


failures = []


def expect(ok, what, tree, where=None, says=None):
    rc, out = run(tree)
    if ok and rc != 0:
        failures.append(f"{what}: rejected a good tree:\n{out}")
    elif not ok and rc == 0:
        failures.append(f"{what}: accepted a bad tree:\n{out}")
    elif not ok and where and where not in out:
        failures.append(f"{what}: the problem is not reported at {where}:\n{out}")
    elif not ok and says and says not in out:
        failures.append(f"{what}: the report does not say {says!r}:\n{out}")


expect(True, "the good tree", good_tree())

# The words of the team's work, in a chapter's visible prose.
for ok, what, line in [
    (False, "round 3", "Round 3 measured it at 600."),
    (False, "round 3 of the part", "In round 3 of Part IV the kernel ran."),
    (False, "rounds 2–4", "Over rounds 2–4 nothing changed."),
    (False, "round-3", "The round-3 objects differ."),
    (False, "round two", "In round two it was slower."),
    (True, "rounded", "Each value is rounded once."),
    (True, "round-robin", "The CTAs go round-robin, 3 per SM."),
    (True, "round trip", "A round trip 2 times per tile."),
    (False, "a bare hash in prose", "The kernel of 00fb939 was slower."),
    (False, "a bare hash in a code span", "The kernel of commit `c230a63e6939` was slower."),
    (False, "a bare hash after 'commit'", "as committed in a19fc93."),
    (True, "a hex constant with 0x", "The magic is 0x5f3759df in a code comment."),
    (True, "hex-looking parts of words", "sm_90a, fp16x8 and e4m3 are not hashes, nor is d128ab1_x."),
    (True, "a number is not a hash", "The 1234567 rows and 20261130."),
    (True, "a float is not a hash", "FLT_MAX is 3.4028235e38, and 1250000e3 is 1.25e9."),
    (False, "a hash after a full stop", "The kernel was fixed.00fb939 was slower."),
    (True, "a hash in a table footer naming results/",
     "*From [`…-r5-ladder.json`](results/h200/2026-11-30-hopper-r5-ladder-d128.json), commit `00fb939`.*"),
    (False, "a round in a table footer naming results/ (only the hash may stand there)",
     "*Round 5's [file](results/h200/2026-11-30-hopper-r5-ladder-d128.json), commit `00fb939`.*"),
    (False, "issue 14", "The target of issue 14 is 1.0×."),
    (False, "issue #14", "See issue #14."),
    (False, "Issue 3's", "Issue 3's target holds."),
    (True, "the verb: issues N", "A warp issues 8 wgmma, and issues 128/16 = 8 more."),
    (False, "session", "Not measured this session."),
    (False, "device-seconds", "It took 40 device-seconds."),
    (False, "device time", "To save device time the run was short."),
    (True, "a marker comment naming an r2 file",
     "Here <!-- figure: results/h200/2026-11-30-hopper-r2-ladder-d128.json id=20/x tflops -->666."),
    (True, "a link whose target names a round", "[What it measured](results/notes/round-3.md)."),
]:
    tree, number = with_body(line)
    expect(ok, what, tree, where=f"01_beta.md:{number}:")

# Part introductions and START.md are lessons too; results/notes/ is where history goes.
for name in ("docs/part1_intro.md", "docs/START.md"):
    tree = good_tree()
    tree[name] += "\nRound 3 measured it.\n"
    expect(False, f"round 3 in {name}", tree, where=f"{pathlib.Path(name).name}:5:")
tree = good_tree()
tree["docs/results/notes/round-3.md"] += "\nRound 3 at commit 00fb939 (issue 14), one session.\n"
expect(True, "history in a notes file", tree)

# The rest of a learner's path: the front pages and every step's and lab's README.
for name in ("README.md", "docs/README.md", "labs/README.md", "steps/00_alpha/README.md",
             "labs/L01_x/README.md"):
    tree = good_tree()
    tree[name] = tree.get(name, "# Page\n\nThe round trip of a tile, rounded.\n") + "\nMeasured in round 3 (commit 00fb939).\n"
    lines = tree[name].count("\n")
    expect(False, f"round 3 in {name}", tree, where=f"{name}:{lines}:")

# Structure: a generated table must end.
tree = good_tree()
tree["docs/01_beta.md"] = chapter("Beta", "img/beta.png",
                                  BODY_GOOD.replace("<!-- end table -->\n", "") + "\nround 3\n")
expect(False, "a table marker with no end", tree, says="end table")

# Figures: every chapter has one that exists, and one of its own.
tree = good_tree()
tree["docs/01_beta.md"] = chapter("Beta", None)
expect(False, "a chapter without a figure", tree, where="01_beta.md: a chapter needs a figure")
tree = good_tree()
tree["docs/01_beta.md"] = chapter("Beta", None, BODY_GOOD + "\n<!-- ![old](img/beta.png) -->\n")
expect(False, "a figure only inside a comment is no figure", tree, where="01_beta.md: a chapter needs a figure")
tree = good_tree()
tree["docs/01_beta.md"] = chapter("Beta", None, BODY_GOOD + "\n```\n![code](img/beta.png)\n```\n")
expect(False, "a figure only inside fenced code is no figure", tree, where="01_beta.md: a chapter needs a figure")
tree = good_tree()
tree["docs/01_beta.md"] = chapter("Beta", "img/missing.png")
expect(False, "a figure that does not exist", tree, where="01_beta.md: img/missing.png does not exist")
tree = good_tree()
tree["docs/01_beta.md"] = chapter("Beta", "img/alpha.png")
rc, out = run(tree)
if rc == 0 or "00_alpha.md: every image" not in out or "01_beta.md: every image" not in out:
    failures.append(f"two chapters with the same single figure: both must be reported:\n{out}")
tree = good_tree()
for name, title, own in (("docs/00_alpha.md", "Alpha", "alpha"), ("docs/01_beta.md", "Beta", "beta")):
    tree[name] = chapter(title, "img/shared.png", f"![{own}](img/{own}.png)\n\n" + BODY_GOOD)
expect(True, "a shared figure beside one of its own", tree)
tree = good_tree()
tree["docs/00_alpha.md"] = chapter("Alpha", "img/shared.png", "![alpha](img/alpha.png)\n\n" + BODY_GOOD)
tree["docs/01_beta.md"] = chapter("Beta", "img/shared.png", "![alpha](img/alpha.png)\n\n" + BODY_GOOD)
expect(False, "two chapters with the same set of two figures", tree, where="01_beta.md: every image")
tree = good_tree()
tree["docs/01_beta.md"] = chapter("Beta", None, '<img src="img/beta.png" width="600">\n\n' + BODY_GOOD)
expect(True, "an HTML <img> is a figure", tree)
tree = good_tree()
tree["docs/part1_intro.md"] += "\n![a](img/alpha.png)\n"
tree["docs/README.md"] += "\n![a](img/alpha.png)\n"
expect(True, "a part introduction and the index may show a chapter's figure", tree)

# Every problem is printed, and the count per file closes the report.
tree, _ = with_body("Round 3, issue 14, one session, commit 00fb939.")
tree["docs/00_alpha.md"] = chapter("Alpha", None)
rc, out = run(tree)
if rc != 1 or "01_beta.md 4" not in out or "00_alpha.md 1" not in out or "5 problem(s)" not in out:
    failures.append(f"all problems and the count per file must be printed:\n{out}")

for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)

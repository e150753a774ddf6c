#!/usr/bin/env python3
"""The course's size rules, checked (a CPU test, `sources_sizes`):
  - a step's kernel file (steps/NN_*/*.cu, *.cuh) is at most 400 lines: it is read as a lesson,
    top to bottom, and what it shares with other steps lives in common/ once;
  - a harness file (common/**/*.cpp, *.hpp, *.cu, *.cuh; scripts/*.py and the extensionless
    scripts/stepdiff) is at most 600 lines.
Labs are not checked (a lab's starter is a whole program the learner edits).

    python3 tests/cpu/check_sizes.py [ROOT]   # exit 1 with the files over their limit
    python3 tests/cpu/check_sizes.py --self-test   # the checker on planted trees
"""
import pathlib
import sys
import tempfile

STEP_LIMIT = 400
HARNESS_LIMIT = 600


def over_limit(root):
    """[(path relative to root, lines, limit)] of every file over its limit."""
    root = pathlib.Path(root)
    rules = [(STEP_LIMIT, [p for d in sorted(root.glob("steps/[0-9][0-9]_*")) for ext in ("*.cu", "*.cuh")
                           for p in sorted(d.glob(ext))]),
             (HARNESS_LIMIT, [p for ext in ("*.cpp", "*.hpp", "*.cu", "*.cuh") for p in sorted(root.glob(f"common/**/{ext}"))]
              + sorted(root.glob("scripts/*.py")) + [p for p in [root / "scripts/stepdiff"] if p.is_file()])]
    out = []
    for limit, files in rules:
        for p in files:
            n = len(p.read_text(errors="replace").splitlines())
            if n > limit:
                out.append((str(p.relative_to(root)), n, limit))
    return out


def check(root):
    bad = over_limit(root)
    for path, n, limit in bad:
        print(f"{path}: {n} lines, over the limit of {limit}")
    print(f"sizes: {len(bad)} file(s) over their limit")
    return 1 if bad else 0


def self_test():
    failures = []

    def expect(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        t = pathlib.Path(tmp)
        (t / "steps/05_x").mkdir(parents=True)
        (t / "common/device").mkdir(parents=True)
        (t / "scripts").mkdir()
        (t / "labs/L01_x").mkdir(parents=True)
        (t / "steps/05_x/x.cu").write_text("x\n" * 400)
        (t / "common/device/y.cuh").write_text("y\n" * 600)
        (t / "scripts/z.py").write_text("z\n" * 600)
        (t / "labs/L01_x/big.cu").write_text("l\n" * 2000)
        expect(over_limit(t) == [], "files at their limits, and a long lab, pass")
        (t / "steps/05_x/x.cu").write_text("x\n" * 401)
        (t / "steps/05_x/probe.cuh").write_text("p\n" * 401)
        (t / "common/device/y.cuh").write_text("y\n" * 601)
        (t / "scripts/z.py").write_text("z\n" * 601)
        (t / "scripts/stepdiff").write_text("s\n" * 601)
        got = {p for p, _, _ in over_limit(t)}
        expect(got == {"steps/05_x/x.cu", "steps/05_x/probe.cuh", "common/device/y.cuh", "scripts/z.py",
                       "scripts/stepdiff"}, "a step file over 400, a header, a script and stepdiff over 600 are caught")
        expect(check(t) == 1, "and the check exits 1")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(check(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]))

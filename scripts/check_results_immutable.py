#!/usr/bin/env python3
"""Fails if a committed results file (docs/results/**) was changed after the commit that added it.

Results are immutable: a new measurement is a new, dated file, so that every chapter that names a
file keeps meaning what it meant. The files of 2026-11-29 were overwritten once, by the round that
replaced a first, partial round, before this rule was checked; they are listed as such.
Without git history (a tarball, a shallow clone) it exits 77, which ctest reports as skipped.

    python3 scripts/check_results_immutable.py
"""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Rewritten before this check existed (see docs/results/README.md): at most this many commits.
GRANDFATHERED = {
    "docs/results/h200/2026-11-29-ladder-default.json": 3,
    "docs/results/h200/2026-11-29-bench-d64.json": 2,
    "docs/results/h200/2026-11-29-bench-d128.json": 2,
    "docs/results/h200/2026-11-29-bench-slow.json": 2,
    "docs/results/h200/2026-11-29-ncu.csv": 2,
    "docs/results/h200/2026-11-29-peers.json": 2,
    "docs/results/h200/2026-11-29-ptxas.txt": 2,
}


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def main():
    if git("rev-parse", "--git-dir").returncode != 0 or \
            git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        print("skipped: no full git history here")
        return 77  # ctest's SKIP_RETURN_CODE: reported as skipped, not passed
    bad = []
    files = git("ls-files", "docs/results").stdout.split()
    for f in files:
        if f.endswith("README.md"):
            continue
        commits = git("log", "--format=%H", "--", f).stdout.split()
        if len(commits) > GRANDFATHERED.get(f, 1):
            bad.append(f"{f}: changed in {len(commits) - 1} commit(s) after it was added")
    # An uncommitted edit of a committed file counts too.
    for line in git("status", "--porcelain", "--", "docs/results").stdout.splitlines():
        if line[:2].strip() in ("M", "D", "MM", "AM") and not line.endswith("README.md"):
            bad.append(f"{line[3:]}: modified in the working tree")
    if bad:
        print("results files are immutable; write a new dated file instead:")
        print("\n".join("  " + b for b in bad))
        return 1
    print(f"{len(files)} results files, none changed after it was added")
    return 0


if __name__ == "__main__":
    sys.exit(main())

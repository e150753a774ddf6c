#!/usr/bin/env python3
"""Fails if a committed results file (docs/results/**, the dated indexes included) was changed after
the commit that added it.

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
# Files rewritten before this check existed: their content as of this commit is the one that
# counts (the 2026-11-29 round's files and its index, docs/results/README.md).
FIXED_AT = "e1f69a5692ba81a68d216d9e820e1ef872d098f3"
GRANDFATHERED = {
    "docs/results/README.md",
    "docs/results/h200/2026-11-29-ladder-default.json",
    "docs/results/h200/2026-11-29-bench-d64.json",
    "docs/results/h200/2026-11-29-bench-d128.json",
    "docs/results/h200/2026-11-29-bench-slow.json",
    "docs/results/h200/2026-11-29-ncu.csv",
    "docs/results/h200/2026-11-29-peers.json",
    "docs/results/h200/2026-11-29-ptxas.txt",
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
        # The content that counts: as added (or as of FIXED_AT for the grandfathered files).
        if f in GRANDFATHERED:
            ref = FIXED_AT
        else:
            added = git("log", "--diff-filter=A", "--format=%H", "--", f).stdout.split()
            if not added:  # staged, not yet committed: nothing to compare with
                continue
            ref = added[-1]
        canonical = git("rev-parse", f"{ref}:{f}").stdout.strip()
        now = git("rev-parse", f"HEAD:{f}").stdout.strip()
        if now and canonical and now != canonical:
            bad.append(f"{f}: differs from its content at {ref[:12]}")
    # An uncommitted edit of a committed file counts too.
    for line in git("status", "--porcelain", "--", "docs/results").stdout.splitlines():
        if line[:2].strip() in ("M", "D", "MM", "AM") and not line.startswith("A "):
            bad.append(f"{line[3:]}: modified in the working tree")
    if bad:
        print("results files are immutable; write a new dated file instead:")
        print("\n".join("  " + b for b in bad))
        return 1
    print(f"{len(files)} results files, none changed after it was added")
    return 0


if __name__ == "__main__":
    sys.exit(main())

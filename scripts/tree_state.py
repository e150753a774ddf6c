#!/usr/bin/env python3
"""Which code a results file was measured from: the commit, whether the tree had local changes, and
a hash of the tracked files' contents.

A round on the GPU machine runs from a copy of the working tree without .git, so the commit alone
(LADDER_GIT_COMMIT) cannot say whether the measured code had uncommitted changes. This script
answers on both sides:

  * in a git checkout: the commit, `dirty` true|false (a tracked file changed, or an untracked
    file that git does not ignore is there: both travel with a copy of the tree), and `tree_hash`,
    a SHA-256 over those files' current contents;
  * in a copy (without .git, or with a .git that is not the checkout's): if it carries the state file that `--write` made before it left
    (.tree-state.json, ignored by git, named in the device call's carry list), the hash is recomputed
    over the files it lists; equal, the recorded commit and dirty flag hold for this copy
    (`verified`); different, or no state file, `dirty` is "unknown" and `tree_hash` is the hash of
    what is here, so two results files can still be told apart or matched.

    scripts/tree_state.py                 # the state as JSON
    scripts/tree_state.py --write         # also write .tree-state.json (before sending the tree)
    scripts/tree_state.py --env           # shell exports: LADDER_GIT_COMMIT, LADDER_GIT_DIRTY,
                                          # LADDER_TREE_HASH (scripts/round.sh evals them)
"""
import argparse
import hashlib
import json
import os
import pathlib
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
STATE_FILE = ".tree-state.json"
# Without .git and without a state file, every file is hashed except these: build outputs,
# dependencies installed by the scripts, carried wheels and caches (none of them is source).
NOT_SOURCE = {".git", "build", ".deps", ".fa4", ".whl", ".oldlib", ".gl", "out", "__pycache__", STATE_FILE}


def git(*args):
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def tree_hash(paths):
    """SHA-256 over (path, SHA-256 of its bytes) of each existing file, in sorted order."""
    h = hashlib.sha256()
    count = 0
    for rel in sorted(paths):
        f = ROOT / rel
        if not f.is_file():  # a tracked file deleted in the working tree changes the hash by its absence
            continue
        h.update(rel.encode() + b"\0" + hashlib.sha256(f.read_bytes()).hexdigest().encode() + b"\n")
        count += 1
    return h.hexdigest()[:16], count


def all_files():
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in NOT_SOURCE]
        for name in filenames:
            if name in NOT_SOURCE or name.endswith(".pyc"):
                continue
            out.append(str((pathlib.Path(dirpath) / name).relative_to(ROOT)))
    return out


def from_state_file():
    """The state recorded by --write, if this tree still holds exactly the files it lists."""
    saved = ROOT / STATE_FILE
    if not saved.is_file():
        return None
    try:
        rec = json.loads(saved.read_text())
        files = rec["file_list"]
        digest, count = tree_hash(files)
        if digest == rec["tree_hash"]:
            return {"commit": rec["commit"], "dirty": rec["dirty"], "tree_hash": digest, "files": count,
                    "source": f"{STATE_FILE}, verified against this copy"}, files
        return {"commit": rec["commit"], "dirty": "unknown", "tree_hash": digest, "files": count,
                "source": f"{STATE_FILE} (recorded {rec['tree_hash']}) does not match this copy"}, files
    except (ValueError, KeyError, TypeError) as e:
        print(f"tree_state.py: {saved} is unreadable ({e}); ignoring it", file=sys.stderr)
        return None


def state():
    # A verified state file first: a copy of the working tree can come with a .git of its own that
    # is not the checkout's (the GPU machine's copy has one at an older commit, so git would call
    # the tree dirty against the wrong commit). The file was written by the checkout itself, and
    # the hash proves this tree holds exactly what it described.
    saved = from_state_file()
    if saved and saved[0]["dirty"] != "unknown":
        return saved
    head = git("rev-parse", "--short=12", "HEAD")
    if head:
        # Tracked files and the untracked ones git does not ignore: both travel with a copy of the
        # working tree (the device tool sends both), so both are the measured code.
        files = [p for p in git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0") if p]
        changes = git("status", "--porcelain", "--untracked-files=normal")
        digest, count = tree_hash(files)
        return {"commit": head.strip(), "dirty": "true" if changes else "false", "tree_hash": digest,
                "files": count, "source": "git"}, files
    if saved:
        return saved
    files = all_files()
    digest, count = tree_hash(files)
    return {"commit": os.environ.get("LADDER_GIT_COMMIT") or "unknown", "dirty": "unknown", "tree_hash": digest,
            "files": count, "source": "no .git and no state file: every file but build outputs hashed"}, files


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"write {STATE_FILE} for a copy without .git")
    ap.add_argument("--env", action="store_true", help="print shell exports instead of JSON")
    args = ap.parse_args(argv)
    st, files = state()
    if args.write:
        (ROOT / STATE_FILE).unlink(missing_ok=True)  # describe the checkout as git sees it now
        st, files = state()
        if st["source"] != "git":
            print("tree_state.py: --write needs a git checkout (this tree has no .git)", file=sys.stderr)
            return 2
        (ROOT / STATE_FILE).write_text(json.dumps({**st, "file_list": files}, indent=0) + "\n")
    if args.env:
        for key, value in (("LADDER_GIT_COMMIT", st["commit"]), ("LADDER_GIT_DIRTY", st["dirty"]),
                           ("LADDER_TREE_HASH", st["tree_hash"]), ("LADDER_TREE_SOURCE", st["source"])):
            print(f"export {key}={shlex.quote(value)}")
    else:
        print(json.dumps(st))
    return 0


if __name__ == "__main__":
    sys.exit(main())

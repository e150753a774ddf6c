#!/usr/bin/env python3
"""scripts/tree_state.py on a scratch repository: clean and dirty checkouts, a copy without .git
that carries the state file (verified, then changed), and one that carries none."""
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def state(tree, *args):
    r = subprocess.run([sys.executable, str(tree / "scripts/tree_state.py"), *args], cwd=tree,
                       capture_output=True, text=True)
    if r.returncode != 0 or "--env" in args:
        return r
    return json.loads(r.stdout)


def git(tree, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tree, check=True,
                   capture_output=True)


def main():
    if shutil.which("git") is None:
        print("no git here: nothing can be checked")
        return 77
    with tempfile.TemporaryDirectory() as d:
        repo = pathlib.Path(d) / "repo"
        (repo / "scripts").mkdir(parents=True)
        shutil.copy(ROOT / "scripts/tree_state.py", repo / "scripts/tree_state.py")
        (repo / "kernel.cu").write_text("// a kernel\n")
        (repo / ".gitignore").write_text("/build/\n/.tree-state.json\n")
        git(repo, "init", "-q")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "one")
        clean = state(repo)
        check(clean["dirty"] == "false" and len(clean["commit"]) == 12, "a clean checkout: dirty false, the commit")
        (repo / "build").mkdir()
        (repo / "build" / "out.o").write_text("ignored")
        check(state(repo) == clean, "an ignored build output changes nothing")
        (repo / "kernel.cu").write_text("// a changed kernel\n")
        changed = state(repo)
        check(changed["dirty"] == "true" and changed["tree_hash"] != clean["tree_hash"],
              "a changed tracked file: dirty true, another hash")
        (repo / "kernel.cu").write_text("// a kernel\n")
        (repo / "new.cu").write_text("// untracked, not ignored: it travels with the copy\n")
        added = state(repo)
        check(added["dirty"] == "true" and added["tree_hash"] != clean["tree_hash"],
              "an untracked, unignored file: dirty true, another hash")
        (repo / "new.cu").unlink()

        # The copy the GPU machine gets: the files, no .git, and the state file written before.
        check(state(repo, "--write") == clean, "--write reports the same state")
        copy = pathlib.Path(d) / "copy"
        shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git", "build"))
        verified = state(copy)
        check(verified["dirty"] == "false" and verified["commit"] == clean["commit"]
              and verified["tree_hash"] == clean["tree_hash"] and "verified" in verified["source"],
              "a copy with its state file: the commit and dirty flag verified by the hash")
        (copy / "kernel.cu").write_text("// edited after the copy left\n")
        edited = state(copy)
        check(edited["dirty"] == "unknown" and edited["tree_hash"] != clean["tree_hash"],
              "a copy that no longer matches its state file: dirty unknown, its own hash")
        (copy / ".tree-state.json").unlink()
        bare = state(copy)
        check(bare["dirty"] == "unknown" and len(bare["tree_hash"]) == 16, "a copy with no state file: unknown, a hash")
        env = state(copy, "--env")
        check(env.returncode == 0 and "export LADDER_GIT_DIRTY=unknown" in env.stdout
              and "LADDER_TREE_HASH=" in env.stdout, "--env exports the three values")
        check(state(copy, "--write").returncode == 2, "--write without .git is refused (exit 2)")
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

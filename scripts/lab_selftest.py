"""The script-checker labs' selftest loop (L09, L13): each case's kernel file is checked by the lab's
own checker in --cpu mode, and must exit as expected with the expected diagnosis."""
import pathlib
import re
import subprocess
import sys
import tempfile

PASS, FAIL, SKIP = 0, 1, 77


def run_cases(checker, kernel_file, cases, args, prefix, extra=lambda tmp: [], bad=0):
    """Writes each (what, text, want_rc, want_regex) of `cases` to TMP/caseI/`kernel_file` and runs
    `checker --cpu --file F --build DIR` with --nvcc/--cuobjdump/--nvdisasm taken from `args` (where
    set) and `extra(TMP)`. Prints a line a case; returns PASS, FAIL (a case failed, or `bad`, the
    failures the caller counted before) or SKIP (the checker skipped: no toolkit here)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for i, (what, text, want_rc, want) in enumerate(cases):
            f = pathlib.Path(tmp) / f"case{i}" / kernel_file
            f.parent.mkdir()
            f.write_text(text)
            cmd = [sys.executable, str(checker), "--cpu", "--file", str(f), "--build", str(f.parent), *extra(tmp)]
            for tool in ("nvcc", "cuobjdump", "nvdisasm"):
                if getattr(args, tool):
                    cmd += [f"--{tool}", getattr(args, tool)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            out = r.stdout + r.stderr
            if r.returncode == SKIP and "SKIPPED" in out:
                print(f"selftest: skipped ({out.strip().splitlines()[-1]})")
                return SKIP
            ok = r.returncode == want_rc and re.search(want, out, re.M)
            print(f"  {'ok  ' if ok else 'FAIL'} {what}: exit {r.returncode}")
            if not ok:
                bad += 1
                print("    expected exit", want_rc, "and /" + want + "/; the checker printed:")
                print("    " + out.replace("\n", "\n    "))
    print(f"selftest: {'PASS' if not bad else f'FAIL ({bad} cases)'}")
    return PASS if not bad else FAIL

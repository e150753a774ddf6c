#!/usr/bin/env python3
"""CPU check of scripts/sass_loop_counts.py on a made-up cuobjdump dump: a kernel with an outer and
an inner loop (the inner one holding 2 MUFU.EX2, an FFMA with a predicate, a QGMMA), and a second
kernel whose name the first one's substring must not pick."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sass_loop_counts.py"

DUMP = """
\t\tFunction : _Z6kernelILi4EEvv
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x0 */
        /*0010*/                   MUFU.EX2 R2, R3 ;                      /* 0x0 */
        /*0020*/                   MUFU.EX2 R4, R5 ;                      /* 0x0 */
        /*0030*/               @P0 FFMA R6, R7, R8, R9 ;                  /* 0x0 */
        /*0040*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R88, gdesc[UR16], R88 ;  /* 0x0 */
        /*0050*/              @!P1 BRA 0x10 ;                             /* 0x0 */
        /*0060*/                   FADD R10, R11, R12 ;                   /* 0x0 */
        /*0070*/                   BRA 0x0 ;                              /* 0x0 */
        /*0080*/                   EXIT ;                                 /* 0x0 */
\t\tFunction : _Z6kernelILi2EEvv
        /*0000*/                   EXIT ;                                 /* 0x0 */
"""


def run(*args, stdin=DUMP):
    return subprocess.run([sys.executable, str(SCRIPT), *args], input=stdin, capture_output=True, text=True)


def main():
    failures = []
    r = run("-", "ILi4E", "--min-mufu", "2")
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 0x")]
    # The inner loop (0x10-0x50: 5 instructions) first, then the outer one (0x0-0x70: 8).
    if r.returncode != 0 or rows != ["| 0x10-0x50 | 5 | 2 | 1 | 0 | 0 | 0 | 0 | 1 | 0 |",
                                     "| 0x0-0x70 | 8 | 2 | 1 | 1 | 0 | 0 | 0 | 1 | 0 |"]:
        failures.append(f"the loops' counts: {r.returncode} {rows} {r.stderr}")
    r = run("-", "ILi4E", "--min-mufu", "3")
    if r.returncode != 0 or any(line.startswith("| 0x") for line in r.stdout.splitlines()):
        failures.append("--min-mufu 3 keeps no loop")
    r = run("-", "kernelILi")
    if r.returncode == 0 or "2 kernels match" not in r.stderr:
        failures.append(f"an ambiguous name is refused: {r.returncode} {r.stderr}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

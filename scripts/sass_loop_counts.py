#!/usr/bin/env python3
"""The opcode counts of a kernel's loops, from `cuobjdump -sass` text: the evidence of a step's
instruction budget (chapter 46's table and figure come from its counts).

A loop is the address range from a backward branch's target to the branch. For each loop of the
kernel whose mangled name contains NAME and that holds at least --min-mufu MUFU.EX2, one line:
its range, its instruction count and the opcodes a softmax budget is made of. The innermost loop
of a kernel with one unmasked block a trip is that block's count per warp.

    cuobjdump -sass build/gpu/steps/CMakeFiles/step46.dir/46_fp8_exp_budget/fp8_exp_budget.cu.o > k.sass
    scripts/sass_loop_counts.py k.sass RowWalkILb0EEENS_4TileILi4 [--min-mufu 16]
"""
import argparse
import collections
import re
import sys

OPCODES = ("MUFU.EX2", "FFMA", "FADD", "FMUL", "FMNMX", "F2FP", "QGMMA", "HGMMA")
INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")


def functions(text):
    """{mangled name: [(address, opcode, operands)]} of every function in the dump."""
    out = {}
    for chunk in re.split(r"\n\s*Function : ", text)[1:]:
        name, body = chunk.split("\n", 1)
        out[name.strip()] = [(int(m.group(1), 16), m.group(2), m.group(3))
                             for m in map(INSTRUCTION.match, body.split("\n")) if m]
    return out


def loops(instructions):
    """[(first address, last address)] of every backward branch, innermost (shortest) first."""
    found = []
    for address, op, operands in instructions:
        target = re.search(r"0x([0-9a-f]+)", operands) if op == "BRA" else None
        if target and int(target.group(1), 16) < address:
            found.append((int(target.group(1), 16), address))
    return sorted(found, key=lambda r: r[1] - r[0])


def counts(instructions, lo, hi):
    body = [op for address, op, _ in instructions if lo <= address <= hi]
    c = collections.Counter()
    for op in body:
        c[next((k for k in OPCODES if op == k or op.startswith(k + ".")), op.split(".")[0])] += 1
    return len(body), c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="cuobjdump -sass output ('-': stdin)")
    ap.add_argument("name", help="a substring of the kernel's mangled name")
    ap.add_argument("--min-mufu", type=int, default=16, help="skip loops with fewer MUFU.EX2 (default 16)")
    a = ap.parse_args(argv)
    text = sys.stdin.read() if a.sass == "-" else open(a.sass).read()
    matches = {n: ins for n, ins in functions(text).items() if a.name in n}
    if len(matches) != 1:
        sys.exit(f"sass_loop_counts.py: {len(matches)} kernels match {a.name!r} (need one)")
    (name, ins), = matches.items()
    print(f"{name}\n| loop | instructions | " + " | ".join(OPCODES) + " |")
    print("|---|---|" + "---|" * len(OPCODES))
    for lo, hi in loops(ins):
        n, c = counts(ins, lo, hi)
        if c["MUFU.EX2"] >= a.min_mufu:
            print(f"| {lo:#x}-{hi:#x} | {n} | " + " | ".join(str(c[k]) for k in OPCODES) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

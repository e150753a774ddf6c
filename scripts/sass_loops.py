#!/usr/bin/env python3
"""The loops of each kernel in one or more objects' SASS: for every backward branch whose body holds
MUFU.EX2 (an attention kernel's softmax loops), its length in instructions and its EX2, HGMMA,
UMOV and VOTEU counts. Two builds of the same kernels side by side show where one grew.

  scripts/sass_loops.py OLD.o [NEW.o ...]     (needs cuobjdump and nvdisasm on PATH)

Kernels are printed by their demangled-enough template arguments, so the old and the new build of
one kernel can be matched by eye. Used for the re-cut's before/after (docs/part4_hopper.md).
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from wait_placement import functions_with_addresses, sass_text  # noqa: E402


def functions(obj):
    return functions_with_addresses(sass_text(obj))


def loops(ins):
    at = {a: i for i, (a, _) in enumerate(ins)}
    for i, (a, s) in enumerate(ins):
        m = re.search(r"BRA .*?(0x[0-9a-f]+)", s)
        if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in at:
            continue
        body = [x for _, x in ins[at[int(m.group(1), 16)]:i + 1]]
        count = lambda op: sum(1 for x in body if op in x)
        if count("MUFU.EX2"):
            yield len(body), count("MUFU.EX2"), count("HGMMA"), count("UMOV "), count("VOTEU")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for obj in sys.argv[1:]:
        print(f"== {obj}")
        for name, ins in functions(obj).items():
            short = re.sub(r"^_ZN\d+_GLOBAL__N__\w+?_\d+(\w+?)I", r"\1<", name)
            print(f"  {short}: {len(ins)} instructions")
            for n, ex2, hgmma, umov, vote in sorted(loops(ins)):
                print(f"    loop {n:5d} instructions: {ex2:3d} EX2 {hgmma:3d} HGMMA {umov:3d} UMOV {vote:2d} VOTEU")


if __name__ == "__main__":
    main()

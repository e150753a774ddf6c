#!/usr/bin/env python3
"""A kernel's SASS instructions by kind, counted statically from `cuobjdump -sass` (a CPU-side
compile, not a timing): chapter 36's before-and-after of the backward's issue path. The kinds are
scripts/ncu_mix.py's.

  scripts/sass_mix.py LABEL=DUMP.sass:KERNEL_SUBSTRING ... --out FILE.json [--note TEXT]
"""
import argparse
import collections
import json
import re
import sys

from ncu_mix import KINDS, kind_of

INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def functions(path):
    out, name = {}, None
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = INSTRUCTION.match(line)
        if name and m:
            out[name].append(m.group(1).split(".")[0])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="LABEL=DUMP.sass:KERNEL_SUBSTRING")
    ap.add_argument("--out", required=True)
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    out = {"note": args.note, "kinds": KINDS, "kernels": {}}
    for spec in args.inputs:
        label, _, rest = spec.partition("=")
        path, _, pick = rest.rpartition(":")
        found = [k for k in functions(path).items() if pick in k[0]]
        if len(found) != 1:
            sys.exit(f"sass_mix: '{pick}' matches {len(found)} kernels in {path}, not one")
        ops = found[0][1]
        by_kind = collections.Counter(kind_of(op) for op in ops)
        out["kernels"][label] = {"kernel": found[0][0], "instructions": len(ops),
                                 "by_kind": {k: by_kind[k] for k in KINDS},
                                 "top_opcodes": dict(collections.Counter(ops).most_common(16))}
        print(f"{label}: {len(ops)} instructions; " + ", ".join(f"{k} {by_kind[k]}" for k in KINDS))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

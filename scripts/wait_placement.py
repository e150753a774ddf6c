#!/usr/bin/env python3
"""Where ptxas put the waits of an attention kernel's loop: for every kernel in the SASS, the order
of its wgmma issues, waits, exponentials and conversions, run-length compressed, and per loop
iteration the number of MUFU.EX2 between a `WARPGROUP.DEPBAR.LE gsb0, 0x1` and the next `..., 0x0`
(the softmax that runs under the product still in flight). Chapter 31's evidence.

  scripts/wait_placement.py FILE [FILTER]      FILE: an object, a cubin, or cuobjdump -sass text
                                               FILTER: only kernels whose mangled name contains it

Legend: G = HGMMA (G| the last of a group, with gsb0), A = WARPGROUP.ARRIVE, W1/W0 = the waits
(DEPBAR.LE gsb0, 0x1 / 0x0), e = MUFU.EX2, c = F2FP (a conversion to fp16/bf16), B = a branch.
Needs cuobjdump on PATH for objects and cubins.
"""
import re
import subprocess
import sys


def sass_text(path):
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"\x7fELF":
        return subprocess.run(["cuobjdump", "-sass", path], check=True, capture_output=True, text=True).stdout
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def functions_with_addresses(text):
    """{kernel name: [(address, instruction text), ...]} from cuobjdump -sass output (the parser
    scripts/sass_loops.py and scripts/sass_exp2.py share)."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if cur is not None and m:
            out[cur].append((int(m.group(1), 16), m.group(2)))
    return out


def functions(text):
    """{kernel name: [instruction text, ...]} from cuobjdump -sass output."""
    return {name: [s for _, s in ins] for name, ins in functions_with_addresses(text).items()}


def event(ins):
    if "HGMMA" in ins:
        return "G|" if "gsb0" in ins else "G"
    m = re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x(\d)", ins)
    if m:
        return "W" + m.group(1)
    if "WARPGROUP.ARRIVE" in ins:
        return "A"
    if "MUFU.EX2" in ins:
        return "e"
    if "F2FP" in ins:
        return "c"
    if re.search(r"\bBRA\b", ins):
        return "B"
    return None


def compress(events):
    out, prev, n = [], None, 0
    for k in events + [None]:
        if k == prev:
            n += 1
            continue
        if prev is not None:
            out.append(prev + (f"x{n}" if n > 1 else ""))
        prev, n = k, 1
    return " ".join(out)


def exp_between_waits(events):
    """For each W1: the exponentials before the next W0 (under the product), and after it until
    the next wgmma issue (after the wait)."""
    res = []
    for i, k in enumerate(events):
        if k != "W1":
            continue
        under = after = 0
        j = i + 1
        while j < len(events) and events[j] != "W0":
            under += events[j] == "e"
            j += 1
        j += 1
        while j < len(events) and events[j] not in ("G", "G|", "A", "W1"):
            after += events[j] == "e"
            j += 1
        res.append((under, after))
    return res


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    flt = argv[2] if len(argv) > 2 else ""
    found = 0
    for name, body in functions(sass_text(argv[1])).items():
        if flt not in name:
            continue
        found += 1
        events = [e for e in (event(x) for x in body) if e]
        print(f"== {name}")
        print("   " + compress(events))
        pairs = exp_between_waits(events)
        if pairs:
            print("   per W1: exponentials under the product / after its wait: "
                  + ", ".join(f"{u}/{a}" for u, a in pairs))
    if not found:
        print(f"wait_placement: no kernel matches {flt!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
